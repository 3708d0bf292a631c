#include "server/graph_warmups.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace convserve {

const char* WarmupStateName(WarmupState state) {
  switch (state) {
    case WarmupState::kWarming:
      return "WARMING";
    case WarmupState::kReady:
      return "READY";
    case WarmupState::kFailed:
      return "FAILED";
  }
  return "UNKNOWN";
}

struct GraphWarmups::Entry {
  std::shared_ptr<const Graph> graph;
  // Asked for, in order; shapes[next..] are still to be warmed.
  std::vector<Shape> shapes;
  size_t next = 0;
  std::vector<std::string> errors;
  // Seconds of the runs that ended; the current run started at run_start.
  double seconds = 0;
  absl::Time run_start;
  bool running = false;
  // Unloaded: waiters are answered ABORTED.
  bool removed = false;
  // Called as the current run ends.
  std::vector<EndCallback> waiting;
  // Read by the runner between plan builds.
  std::atomic<bool> stop{false};
  std::thread thread;
};

GraphWarmups::~GraphWarmups() {
  Stop();
  Join();
}

void GraphWarmups::Start(const std::shared_ptr<const Graph>& graph,
                         const std::vector<Shape>& shapes) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<Entry>& entry = entries_[graph->id()];
  if (entry == nullptr) {
    entry = std::make_shared<Entry>();
    entry->graph = graph;
  }
  bool added = false;
  for (const Shape& shape : shapes) {
    if (std::find(entry->shapes.begin(), entry->shapes.end(), shape) != entry->shapes.end()) {
      continue;
    }
    entry->shapes.push_back(shape);
    added = true;
  }
  if (!added || entry->running) return;  // a running thread takes the new shapes too
  if (stopped_) {
    for (; entry->next < entry->shapes.size(); ++entry->next) {
      entry->errors.push_back(absl::StrCat("input ", ShapeToString(entry->shapes[entry->next]),
                                           ": not warmed up: the server is shutting down"));
    }
    return;
  }
  if (entry->thread.joinable()) finished_.push_back(std::move(entry->thread));
  entry->running = true;
  entry->run_start = absl::Now();
  entry->thread = std::thread(&GraphWarmups::Run, this, entry);
}

void GraphWarmups::Run(std::shared_ptr<Entry> entry) {
  const std::string& name = entry->graph->name();
  size_t errors_before = 0;
  size_t first = 0;
  {
    absl::MutexLock lock(&mu_);
    errors_before = entry->errors.size();
    first = entry->next;
  }
  const CancelCheck stopped = [&entry] { return entry->stop.load(); };
  WarmupEvent event;
  event.graph = name;
  bool stopped_early = false;
  size_t warmed = 0;
  std::vector<EndCallback> waiting;
  absl::StatusOr<WarmupStatus> ended;
  while (true) {
    Shape shape;
    {
      absl::MutexLock lock(&mu_);
      if (entry->next >= entry->shapes.size() || entry->stop.load()) {
        // The run ends in the critical section that found no more work: a
        // Start that saw it running has had its shapes taken by this loop.
        stopped_early = entry->stop.load();
        if (stopped_early && !entry->removed) {
          for (; entry->next < entry->shapes.size(); ++entry->next) {
            entry->errors.push_back(
                absl::StrCat("input ", ShapeToString(entry->shapes[entry->next]),
                             ": not warmed up: the server is shutting down"));
          }
        }
        event.seconds = absl::ToDoubleSeconds(absl::Now() - entry->run_start);
        entry->seconds += event.seconds;
        event.ok = entry->errors.size() == errors_before;
        warmed = entry->next - first;
        entry->running = false;
        waiting.swap(entry->waiting);
        ended = EndedLocked(*entry);
        break;
      }
      shape = entry->shapes[entry->next++];
    }
    const absl::Time start = absl::Now();
    const absl::Status status = runner_->Warm(entry->graph, shape, stopped);
    if (entry->stop.load()) continue;  // ends the run above
    if (status.ok()) {
      spdlog::info("graph '{}': plans for input {} built on every device in {:.1f} ms", name,
                   ShapeToString(shape), absl::ToDoubleMilliseconds(absl::Now() - start));
      continue;
    }
    spdlog::error("graph '{}': warm-up of input {} failed: {}", name, ShapeToString(shape),
                  status.ToString());
    absl::MutexLock lock(&mu_);
    entry->errors.push_back(absl::StrCat("input ", ShapeToString(shape), ": ", status.ToString()));
  }
  // Logged and observed before the waiters hear of it: a client answered
  // READY finds the warm-up on /metrics.
  if (stopped_early) {
    spdlog::info("graph '{}': warm-up stopped after {:.2f} s", name, event.seconds);
  } else {
    if (event.ok) {
      spdlog::info("graph '{}' is ready: warmed up {} input shape(s) in {:.2f} s", name, warmed,
                   event.seconds);
    } else {
      spdlog::error("graph '{}': warm-up FAILED after {:.2f} s (the graph stays loaded and "
                    "serves; see GetGraph's warmup_error)",
                    name, event.seconds);
    }
    if (observer_) observer_(event);
  }
  for (EndCallback& done : waiting) done(ended);
}

WarmupStatus GraphWarmups::StatusLocked(const Entry& entry) const {
  WarmupStatus status;
  status.shapes = entry.shapes;
  status.seconds = entry.seconds;
  if (entry.running) {
    status.state = WarmupState::kWarming;
    status.seconds += absl::ToDoubleSeconds(absl::Now() - entry.run_start);
  } else if (!entry.errors.empty()) {
    status.state = WarmupState::kFailed;
    status.error = absl::StrJoin(entry.errors, "\n");
  }
  return status;
}

absl::StatusOr<WarmupStatus> GraphWarmups::EndedLocked(const Entry& entry) const {
  if (entry.removed) {
    return absl::AbortedError(absl::StrCat("graph '", entry.graph->name(),
                                           "' was unloaded during its warm-up"));
  }
  if (stopped_ && entry.stop.load()) {
    return absl::UnavailableError(absl::StrCat(
        "the server is shutting down; graph '", entry.graph->name(), "' was not warmed up"));
  }
  return StatusLocked(entry);
}

void GraphWarmups::WhenEnded(const std::string& graph_id, EndCallback done) {
  absl::StatusOr<WarmupStatus> now;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(graph_id);
    if (it != entries_.end() && it->second->running) {
      it->second->waiting.push_back(std::move(done));
      return;
    }
    now = it == entries_.end() ? WarmupStatus() : EndedLocked(*it->second);
  }
  done(std::move(now));
}

absl::StatusOr<WarmupStatus> GraphWarmups::Wait(const std::string& graph_id) {
  absl::Mutex mu;
  std::optional<absl::StatusOr<WarmupStatus>> result;
  WhenEnded(graph_id, [&](absl::StatusOr<WarmupStatus> ended) {
    absl::MutexLock lock(&mu);
    result = std::move(ended);
  });
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(
      +[](std::optional<absl::StatusOr<WarmupStatus>>* r) { return r->has_value(); }, &result));
  return *std::move(result);
}

WarmupStatus GraphWarmups::Get(const std::string& graph_id) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(graph_id);
  if (it == entries_.end()) return WarmupStatus();
  return StatusLocked(*it->second);
}

int GraphWarmups::warming() const {
  absl::MutexLock lock(&mu_);
  int count = 0;
  for (const auto& [id, entry] : entries_) count += entry->running ? 1 : 0;
  return count;
}

void GraphWarmups::Remove(const std::string& graph_id) {
  std::thread thread;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(graph_id);
    if (it == entries_.end()) return;
    it->second->stop.store(true);
    it->second->removed = true;
    thread = std::move(it->second->thread);
    entries_.erase(it);
  }
  if (thread.joinable()) thread.join();
}

void GraphWarmups::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
  for (const auto& [id, entry] : entries_) entry->stop.store(true);
}

void GraphWarmups::Join() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    threads.swap(finished_);
    for (const auto& [id, entry] : entries_) {
      if (entry->thread.joinable()) threads.push_back(std::move(entry->thread));
    }
  }
  for (std::thread& thread : threads) thread.join();
}

}  // namespace convserve
