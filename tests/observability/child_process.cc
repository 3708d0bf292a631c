#include "tests/observability/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace convserve {
namespace {

// `name` itself when it holds a '/', else its first executable match on PATH.
absl::StatusOr<std::string> FindProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  for (const absl::string_view dir :
       absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(absl::StrCat(
      "'", name, "' is not on PATH (prometheus and promtool: Debian package prometheus, "
      "installed by scripts/setup.sh)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(const ChildOptions& options) {
  if (options.argv.empty() || options.output_path.empty()) {
    return absl::InvalidArgumentError("ChildProcess needs a program and an output file");
  }
  // Everything the child needs is prepared before fork: between fork and
  // exec a multi-threaded process may only make async-signal-safe calls.
  absl::StatusOr<std::string> program = FindProgram(options.argv[0]);
  if (!program.ok()) return program.status();
  std::vector<char*> argv;
  for (const std::string& arg : options.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  const std::string stdin_path = options.stdin_path.empty() ? "/dev/null" : options.stdin_path;
  const int in = open(stdin_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return absl::NotFoundError(absl::StrCat("cannot open ", stdin_path));
  const int out = open(options.output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    close(in);
    return absl::InternalError(absl::StrCat("cannot create ", options.output_path));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // Killed with the test process, even when that is SIGKILLed by a ctest
    // timeout; the getppid check closes the race with a parent already gone.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(in, STDIN_FILENO);
    dup2(out, STDOUT_FILENO);
    dup2(out, STDERR_FILENO);
    execv(program->c_str(), argv.data());
    static const char kExecFailed[] = "exec failed\n";
    (void)!write(STDERR_FILENO, kExecFailed, sizeof(kExecFailed) - 1);
    _exit(127);
  }
  close(in);
  close(out);
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, options.output_path));
}

ChildProcess::~ChildProcess() { Kill(); }

std::optional<int> ChildProcess::Poll() {
  if (exit_code_.has_value()) return exit_code_;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  return exit_code_;
}

absl::StatusOr<int> ChildProcess::Wait(absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (!Poll().has_value()) {
    if (absl::Now() > give_up) {
      Kill();
      return absl::DeadlineExceededError(
          absl::StrCat("pid ", pid_, " still ran after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(5));  // bounded polling of waitpid
  }
  return *exit_code_;
}

void ChildProcess::Kill() {
  if (Poll().has_value()) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  exit_code_ = -1;
}

std::string ChildProcess::Output() const { return ReadFileOrEmpty(output_path_); }

absl::StatusOr<ProgramResult> RunProgram(const std::vector<std::string>& argv,
                                         const std::string& input, absl::Duration timeout) {
  absl::StatusOr<ScopedTempDir> dir = ScopedTempDir::Create("program");
  if (!dir.ok()) return dir.status();
  ChildOptions options;
  options.argv = argv;
  options.stdin_path = dir->path() + "/stdin";
  options.output_path = dir->path() + "/output";
  absl::Status written = WriteFile(options.stdin_path, input);
  if (!written.ok()) return written;
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Start(options);
  if (!child.ok()) return child.status();
  absl::StatusOr<int> exit_code = (*child)->Wait(timeout);
  ProgramResult result;
  result.output = (*child)->Output();
  if (!exit_code.ok()) {
    return absl::DeadlineExceededError(absl::StrCat(absl::StrJoin(argv, " "), ": ",
                                                    exit_code.status().message(),
                                                    "; it printed:\n", result.output));
  }
  result.exit_code = *exit_code;
  return result;
}

absl::StatusOr<ScopedTempDir> ScopedTempDir::Create(const std::string& prefix) {
  std::string path = absl::StrCat(::testing::TempDir(), "convserve_", prefix, "_XXXXXX");
  if (mkdtemp(path.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", path, ": ", std::strerror(errno)));
  }
  return ScopedTempDir(std::move(path));
}

ScopedTempDir::~ScopedTempDir() {
  if (path_.empty()) return;
  std::error_code ignored;  // a leftover temp dir must not fail a test
  std::filesystem::remove_all(path_, ignored);
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

absl::Status WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << contents;
  file.close();
  if (!file) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace convserve
