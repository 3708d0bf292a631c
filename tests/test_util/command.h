// Runs a program for a test and collects what it printed and its exit code.
#ifndef CONVSERVE_TESTS_TEST_UTIL_COMMAND_H_
#define CONVSERVE_TESTS_TEST_UTIL_COMMAND_H_

#include <string>
#include <vector>

namespace convserve {

struct CommandResult {
  // The exit status, or -1 when the program did not exit normally.
  int exit_code = -1;
  // stdout and stderr, interleaved.
  std::string output;
};

// Runs argv[0] with the arguments (each passed as one word, no shell
// expansion) and waits for it to exit.
CommandResult RunCommand(const std::vector<std::string>& argv);

}  // namespace convserve

#endif  // CONVSERVE_TESTS_TEST_UTIL_COMMAND_H_
