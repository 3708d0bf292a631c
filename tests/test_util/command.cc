#include "tests/test_util/command.h"

#include <sys/wait.h>

#include <cstdio>

namespace convserve {
namespace {

// Single-quotes a word for /bin/sh.
std::string ShellWord(const std::string& word) {
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

CommandResult RunCommand(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& word : argv) line += ShellWord(word) + " ";
  line += "2>&1 </dev/null";
  CommandResult result;
  FILE* pipe = popen(line.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  if (status != -1 && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

}  // namespace convserve
