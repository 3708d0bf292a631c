#include "engine/runtime/engine_prober.h"

#include <algorithm>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "engine/runtime/prober_protocol.h"
#include "spdlog/spdlog.h"

extern char** environ;

namespace convserve {

struct EngineProber::Process {
  pid_t pid = -1;
  int fd = -1;          // our end of the socket pair: the prober's stdin and stdout
  std::string pending;  // bytes read past the last full line
};

namespace {

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("was killed by signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  }
  return "ended";
}

bool SendLine(int fd, const std::string& line) {
  const std::string data = line + "\n";
  size_t sent = 0;
  while (sent < data.size()) {
    // MSG_NOSIGNAL: a dead prober must not raise SIGPIPE in the server.
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

EngineProber::EngineProber(const EngineProberOptions& options, PlanStore* store)
    : options_(options), store_(store) {}

absl::StatusOr<std::unique_ptr<EngineProber>> EngineProber::Create(
    const EngineProberOptions& options, PlanStore* store) {
  if (access(options.binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the engine prober '", options.binary, "' is missing or not executable (",
        std::strerror(errno), "); it ships next to convserve-server (--prober_binary)"));
  }
  if (store == nullptr || store->directory().empty()) {
    return absl::InvalidArgumentError("the engine prober needs a plan store on disk");
  }
  std::unique_ptr<EngineProber> prober(new EngineProber(options, store));
  prober->idle_thread_ = std::thread(&EngineProber::IdleLoop, prober.get());
  return prober;
}

EngineProber::~EngineProber() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (process_ != nullptr) StopLocked(/*kill_now=*/false);
  }
  idle_thread_.join();
}

EngineProberStats EngineProber::stats() const {
  EngineProberStats stats;
  stats.searches = searches_.load();
  stats.starts = starts_.load();
  stats.quarantined = quarantined_.load();
  stats.vetoed = vetoed_.load();
  return stats;
}

bool EngineProber::running() const {
  absl::MutexLock lock(&mu_);
  return process_ != nullptr;
}

absl::Status EngineProber::StartLocked() {
  int sockets[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) {
    return absl::UnavailableError(absl::StrCat("socketpair: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // The protocol gets an fd of its own (dup2 clears close-on-exec on the
  // copy); stdout goes to the log, so nothing a library prints can be taken
  // for a protocol line.
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, sockets[1], kProberProtocolFd);
  // The server blocks its stop signals for sigwait; the prober must not
  // inherit that, and gets its own process group so a terminal's Ctrl-C
  // reaches the server, which then stops the prober itself.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int signal_number : {SIGTERM, SIGINT, SIGUSR1, SIGPIPE}) sigaddset(&defaults, signal_number);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setpgroup(&attributes, 0);
  posix_spawnattr_setflags(&attributes,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  std::vector<std::string> arguments = options_.arguments;
  arguments.push_back(absl::StrCat("--protocol_fd=", kProberProtocolFd));
  arguments.push_back(absl::StrCat("--parent_pid=", getpid()));
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(options_.binary.c_str()));
  for (const std::string& arg : arguments) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int spawned =
      posix_spawn(&pid, options_.binary.c_str(), &actions, &attributes, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  close(sockets[1]);
  if (spawned != 0) {
    close(sockets[0]);
    return absl::UnavailableError(
        absl::StrCat("cannot start '", options_.binary, "': ", std::strerror(spawned)));
  }
  process_ = std::make_unique<Process>();
  process_->pid = pid;
  process_->fd = sockets[0];
  ++starts_;
  absl::StatusOr<std::string> ready = ReadLineLocked(absl::Now() + options_.start_timeout);
  if (!ready.ok() || !absl::StartsWith(*ready, "READY ")) {
    const Ending ending = StopLocked(/*kill_now=*/true);
    spdlog::error("engine prober for {} did not start: {}; it {} (its log lines are above)",
                  options_.label,
                  ready.ok() ? absl::StrCat("it said '", *ready, "'")
                             : std::string(ready.status().message()),
                  ending.how);
    return absl::UnavailableError(absl::StrCat(
        "the engine prober for ", options_.label, " did not start (",
        ready.ok() ? "unexpected answer" : std::string(ready.status().message()), "; it ",
        ending.how, "); the server log says why"));
  }
  target_key_ = UnescapeLine(absl::string_view(*ready).substr(6));
  spdlog::info("engine prober for {} started (pid {}): {}", options_.label, pid, target_key_);
  return absl::OkStatus();
}

EngineProber::Ending EngineProber::StopLocked(bool kill_now) {
  Ending ending;
  if (process_ == nullptr) {
    ending.how = "was not running";
    return ending;
  }
  int status = 0;
  bool reaped = false;
  if (!kill_now) {
    // End of input asks the prober to exit; give it a moment to finish.
    shutdown(process_->fd, SHUT_WR);
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (!reaped && absl::Now() < deadline) {
      pollfd p = {process_->fd, POLLIN, 0};
      poll(&p, 1, 100);
      char sink[256];
      while (recv(process_->fd, sink, sizeof(sink), MSG_DONTWAIT) > 0) {
      }
      reaped = waitpid(process_->pid, &status, WNOHANG) == process_->pid;
    }
  } else {
    // A prober that closed its socket may still be exiting: give it a moment
    // to be reaped, so its own exit status (a crash signal) is what we see.
    const absl::Time deadline = absl::Now() + absl::Milliseconds(200);
    while (!(reaped = waitpid(process_->pid, &status, WNOHANG) == process_->pid) &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(2));
    }
  }
  if (!reaped) {
    kill(process_->pid, SIGKILL);
    while (waitpid(process_->pid, &status, 0) < 0 && errno == EINTR) {
    }
    ending.killed_by_us = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  }
  close(process_->fd);
  process_.reset();
  ending.how = ending.killed_by_us ? "was stopped" : DescribeExit(status);
  ending.killed_by_someone_else =
      !ending.killed_by_us && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  return ending;
}

absl::StatusOr<std::string> EngineProber::ReadLineLocked(absl::Time deadline) {
  while (true) {
    const size_t newline = process_->pending.find('\n');
    if (newline != std::string::npos) {
      std::string line = process_->pending.substr(0, newline);
      process_->pending.erase(0, newline + 1);
      return line;
    }
    if (cancelled_.load()) return absl::CancelledError("the server is shutting down");
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError("no answer before the timeout");
    }
    // Slices of at most 100 ms, so a Cancel() is seen promptly.
    pollfd p = {process_->fd, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(
                                      absl::ToInt64Milliseconds(left) + 1, 100)));
    if (ready < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("poll: ", std::strerror(errno)));
    }
    if (ready <= 0) continue;
    char buffer[4096];
    const ssize_t n = read(process_->fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError("closed its output");
    process_->pending.append(buffer, static_cast<size_t>(n));
  }
}

void EngineProber::Cancel() {
  cancelled_.store(true);
}

absl::StatusOr<SearchReport> EngineProber::Search(const ConvLayerProblem& problem) {
  absl::MutexLock lock(&mu_);
  if (cancelled_.load()) return absl::UnavailableError("the server is shutting down");
  ++searches_;
  last_used_ = absl::Now();
  // A prober that said something unexpected may be mid-search: its next
  // lines would answer the next search. So every protocol error stops it.
  const auto protocol_error = [&](absl::string_view what) {
    StopLocked(/*kill_now=*/true);
    return absl::InternalError(absl::StrCat("engine prober for ", options_.label, ": ", what));
  };
  int faults = 0;
  int lost_outside_candidates = 0;
  while (true) {
    if (process_ == nullptr) {
      absl::Status started = StartLocked();
      if (!started.ok()) return started;
    }
    SearchReport report;
    std::optional<EngineConfigId> in_flight;
    std::string fault;
    bool hardware_fault = false;
    bool hung = false;
    std::string lost;
    if (!SendLine(process_->fd, absl::StrCat("SEARCH ", problem.Encode()))) {
      lost = "could not be sent the search";
    }
    while (lost.empty()) {
      absl::StatusOr<std::string> line = ReadLineLocked(absl::Now() + options_.candidate_timeout);
      if (absl::IsCancelled(line.status())) {
        StopLocked(/*kill_now=*/true);
        return absl::UnavailableError(
            "the server is shutting down: the engine search for this layer was cancelled");
      }
      if (!line.ok()) {
        hung = absl::IsDeadlineExceeded(line.status());
        lost = hung ? absl::StrCat("hung for ", absl::FormatDuration(options_.candidate_timeout))
                    : std::string(line.status().message());
        break;
      }
      std::pair<absl::string_view, absl::string_view> kind_rest =
          absl::StrSplit(*line, absl::MaxSplits(' ', 1));
      const absl::string_view kind = kind_rest.first, rest = kind_rest.second;
      if (kind == "TRY") {
        absl::StatusOr<EngineConfigId> id = EngineConfigId::Parse(rest);
        if (!id.ok()) return protocol_error(id.status().message());
        in_flight = *id;
      } else if (kind == "RESULT") {
        absl::StatusOr<CandidateResult> result = ParseResultLine(*line);
        if (!result.ok()) return protocol_error(result.status().message());
        if (absl::StartsWith(result->detail, "quarantined")) ++vetoed_;
        // A candidate timed again (autotune's final) is reported again: the
        // later figure replaces the earlier.
        const auto same = std::find_if(
            report.results.begin(), report.results.end(),
            [&](const CandidateResult& r) { return r.ok && r.id == result->id; });
        if (result->ok && same != report.results.end()) {
          *same = *std::move(result);
        } else {
          report.results.push_back(*std::move(result));
        }
        in_flight.reset();
      } else if (kind == "CHOSEN") {
        absl::StatusOr<EngineConfigId> id = EngineConfigId::Parse(rest);
        if (!id.ok()) return protocol_error(id.status().message());
        report.chosen = *id;
      } else if (kind == "SKIPPED") {
        report.skipped.push_back(UnescapeLine(rest));
      } else if (kind == "FAULT") {
        // FAULT <id or -> candidate|hardware <error>
        std::vector<absl::string_view> fields = absl::StrSplit(rest, absl::MaxSplits(' ', 2));
        if (fields.size() != 3) return protocol_error(absl::StrCat("said '", *line, "'"));
        absl::StatusOr<EngineConfigId> id = EngineConfigId::Parse(fields[0]);
        if (id.ok()) in_flight = *id;
        hardware_fault = fields[1] == "hardware";
        fault = UnescapeLine(fields[2]);
        lost = "lost its CUDA context";
      } else if (kind == "DONE") {
        report.timed = rest == "timed";
        last_used_ = absl::Now();
        return report;
      } else if (kind == "ERROR") {
        std::pair<absl::string_view, absl::string_view> code_message =
            absl::StrSplit(rest, absl::MaxSplits(' ', 1));
        int code = 0;
        if (!absl::SimpleAtoi(code_message.first, &code) || code <= 0 || code > 16) code = 13;
        last_used_ = absl::Now();
        // The prober refusing the search itself is the server's bug, not
        // the client's request.
        const absl::StatusCode status_code =
            static_cast<absl::StatusCode>(code) == absl::StatusCode::kInvalidArgument
                ? absl::StatusCode::kInternal
                : static_cast<absl::StatusCode>(code);
        return absl::Status(status_code, UnescapeLine(code_message.second));
      } else {
        return protocol_error(absl::StrCat("said '", *line, "'"));
      }
    }
    const Ending ending = StopLocked(/*kill_now=*/true);
    if (hardware_fault) {
      spdlog::error("engine prober for {} saw a GPU hardware error, not blamed on {}: {}",
                    options_.label, in_flight ? in_flight->ToString() : "any candidate", fault);
      return absl::UnavailableError(absl::StrCat(
          options_.label, " reported a hardware error during an engine search: ", fault));
    }
    // Killed by someone else (the OOM killer, an operator): no verdict on
    // the candidate; try once more.
    if (!in_flight.has_value() || ending.killed_by_someone_else) {
      spdlog::warn("engine prober for {} {} {}; it {}", options_.label, lost,
                   in_flight ? absl::StrCat("while running ", in_flight->ToString())
                             : "outside any candidate",
                   ending.how);
      if (++lost_outside_candidates > 1) {
        return absl::UnavailableError(absl::StrCat("the engine prober for ", options_.label, " ",
                                                   lost, " twice; it ", ending.how));
      }
      continue;
    }
    // Blame the candidate only if a new prober starts, i.e. the GPU itself
    // is still fine.
    absl::Status restarted = StartLocked();
    if (!restarted.ok()) return restarted;
    const std::string reason = absl::StrCat(
        fault.empty() ? absl::StrCat("the prober ", lost, hung ? " and was stopped" : "",
                                     hung ? "" : absl::StrCat(" and ", ending.how))
                      : fault,
        " (", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone()), ")");
    const std::string key = QuarantineKey(target_key_, problem, *in_flight);
    absl::Status stored = store_->Put("quarantine", key, reason);
    ++quarantined_;
    spdlog::error("engine candidate {} quarantined on {} for {}: {}{}; to reproduce: echo "
                  "'SEARCH {}' | convserve-prober --only_candidate={} --plan_cache_dir=DIR",
                  in_flight->ToString(), options_.label, problem.Describe(), reason,
                  stored.ok() ? "" : absl::StrCat(" (not persisted: ", stored.message(), ")"),
                  problem.Encode(), in_flight->ToString());
    if (++faults >= options_.max_faults_per_search) {
      return absl::InternalError(absl::StrCat(
          "the engine search for ", problem.Describe(), " on ", options_.label, " gave up after ",
          faults, " candidates faulted; the last: ", in_flight->ToString(), ": ", reason));
    }
  }
}

void EngineProber::IdleLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const absl::Duration wait =
        process_ != nullptr ? last_used_ + options_.idle_timeout - absl::Now()
                            : options_.idle_timeout;
    mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                         std::max(wait, absl::Milliseconds(10)));
    if (stopping_) break;
    if (process_ != nullptr && absl::Now() - last_used_ >= options_.idle_timeout) {
      spdlog::info("engine prober for {} idle for {}; stopping it (it {})", options_.label,
                   absl::FormatDuration(options_.idle_timeout),
                   StopLocked(/*kill_now=*/false).how);
    }
  }
}

}  // namespace convserve
