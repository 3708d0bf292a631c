// Programs the observability tests run: promtool to completion, Prometheus
// for the length of a test. A child never outlives the test: the destructor
// kills it, and the kernel kills it if the test process dies first.
#ifndef CONVSERVE_TESTS_OBSERVABILITY_CHILD_PROCESS_H_
#define CONVSERVE_TESTS_OBSERVABILITY_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace convserve {

struct ChildOptions {
  // The program (a path, or a name looked up on PATH) and its arguments.
  std::vector<std::string> argv;
  // A file to read as stdin; empty reads /dev/null.
  std::string stdin_path;
  // The file that receives stdout and stderr, interleaved; required.
  std::string output_path;
};

// One started program. Not thread-safe.
class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(const ChildOptions& options);
  // Kills (SIGKILL) and reaps the child if it is still running.
  ~ChildProcess();

  // The exit code once the child has exited (-1 after a signal); nullopt
  // while it runs. Never blocks.
  std::optional<int> Poll();
  // Polls until the child exits or `timeout` passes; on timeout kills it and
  // returns DEADLINE_EXCEEDED.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  void Kill();
  // What it printed so far.
  std::string Output() const;
  pid_t pid() const { return pid_; }

 private:
  ChildProcess(pid_t pid, std::string output_path)
      : pid_(pid), output_path_(std::move(output_path)) {}

  const pid_t pid_;
  const std::string output_path_;
  std::optional<int> exit_code_;
};

struct ProgramResult {
  int exit_code = -1;
  // stdout and stderr, interleaved.
  std::string output;
};

// Runs `argv` with `input` on stdin until it exits, at most `timeout`.
absl::StatusOr<ProgramResult> RunProgram(const std::vector<std::string>& argv,
                                         const std::string& input, absl::Duration timeout);

// A new empty directory under the test's temp dir, removed with everything
// in it by the destructor. Move-only.
class ScopedTempDir {
 public:
  static absl::StatusOr<ScopedTempDir> Create(const std::string& prefix);
  ScopedTempDir(ScopedTempDir&& other) noexcept : path_(std::move(other.path_)) {
    other.path_.clear();
  }
  ScopedTempDir& operator=(ScopedTempDir&&) = delete;
  ScopedTempDir(const ScopedTempDir&) = delete;
  ~ScopedTempDir();

  const std::string& path() const { return path_; }

 private:
  explicit ScopedTempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

std::string ReadFileOrEmpty(const std::string& path);
absl::Status WriteFile(const std::string& path, const std::string& contents);

}  // namespace convserve

#endif  // CONVSERVE_TESTS_OBSERVABILITY_CHILD_PROCESS_H_
