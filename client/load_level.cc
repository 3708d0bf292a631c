#include "client/load_level.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace convserve {
namespace {

constexpr int64_t kNsPerS = 1000000000;
// How often a waiting level wakes to check the clock and report progress.
constexpr int64_t kPollNs = 250000000;
constexpr int64_t kProgressNs = 1000000000;

bool WithinPercent(const std::vector<double>& values, double percent) {
  double mean = 0;
  for (double v : values) mean += v;
  mean /= static_cast<double>(values.size());
  for (double v : values) {
    if (std::abs(v - mean) > percent / 100.0 * mean) return false;
  }
  return true;
}

}  // namespace

LoadLevel::LoadLevel(LoadSession* session, const LoadOptions* options, int concurrency,
                     double request_rate, uint64_t arrival_seed)
    : session_(session),
      options_(*options),
      concurrency_(concurrency),
      request_rate_(request_rate),
      arrival_seed_(arrival_seed),
      warmup_ns_(absl::ToInt64Nanoseconds(options->measurement.warmup)),
      window_ns_(absl::ToInt64Nanoseconds(options->measurement.window)) {}

LoadLevel::~LoadLevel() {
  if (scheduler_.joinable()) scheduler_.join();
  for (std::thread& caller : callers_) caller.join();
}

int64_t LoadLevel::NowNs() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              start_)
      .count();
}

bool LoadLevel::BeginRequestLocked(int64_t scheduled_ns, int64_t* window) {
  if (stopping_) return false;
  int64_t w = -1;
  if (scheduled_ns >= warmup_ns_) {
    if (CountWindows()) {
      const int64_t per_window = options_.measurement.window_requests;
      if (measured_sent_ % per_window == 0) window_start_ns_.push_back(scheduled_ns);
      w = measured_sent_++ / per_window;
    } else {
      w = (scheduled_ns - warmup_ns_) / window_ns_;
    }
  }
  if (static_cast<int64_t>(outstanding_.size()) < w + 2) outstanding_.resize(w + 2, 0);
  ++outstanding_[w + 1];
  ++in_flight_;
  last_scheduled_ns_ = std::max(last_scheduled_ns_, scheduled_ns);
  *window = w;
  return true;
}

void LoadLevel::Send(int64_t window, int64_t scheduled_ns) {
  session_->SendAsync([this, window, scheduled_ns](const absl::Status& status, InferOutput* out) {
    Completed(window, scheduled_ns, status, out);
  });
}

void LoadLevel::Completed(int64_t window, int64_t scheduled_ns, const absl::Status& status,
                          InferOutput* output) {
  const int64_t end_ns = NowNs();
  if (status.ok() && session_->verifier() != nullptr &&
      completions_.fetch_add(1) % options_.verify_every == 0) {
    session_->Verify(output);
  }
  int64_t next_window = 0;
  int64_t next_scheduled_ns = 0;
  bool again = false;
  {
    absl::MutexLock lock(&mu_);
    records_.push_back({window, scheduled_ns, end_ns, status.code()});
    --outstanding_[window + 1];
    --in_flight_;
    // The closed loop's next request is begun under the same lock, so
    // in_flight_ never reads 0 while this callback still needs `this`
    // (with blocking calls the caller thread begins it).
    if (concurrency_ > 0 && !Blocking()) {
      next_scheduled_ns = NowNs();
      again = BeginRequestLocked(next_scheduled_ns, &next_window);
    }
  }
  if (again) Send(next_window, next_scheduled_ns);
}

void LoadLevel::CallInTurn() {
  for (;;) {
    int64_t window = 0;
    const int64_t scheduled_ns = NowNs();
    {
      absl::MutexLock lock(&mu_);
      if (!BeginRequestLocked(scheduled_ns, &window)) return;
    }
    session_->SendBlocking([&](const absl::Status& status, InferOutput* output) {
      Completed(window, scheduled_ns, status, output);
    });
  }
}

void LoadLevel::ScheduleArrivals() {
  std::mt19937_64 rng(arrival_seed_);
  std::exponential_distribution<double> gap_s(request_rate_);
  double next_s = 0;
  for (;;) {
    const int64_t scheduled_ns = static_cast<int64_t>(next_s * kNsPerS);
    int64_t window = 0;
    {
      absl::MutexLock lock(&mu_);
      const int64_t wait_ns = scheduled_ns - NowNs();
      if (wait_ns > 0) {
        mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Nanoseconds(wait_ns));
      }
      // Late sends keep their scheduled time: their latency includes the lag.
      if (!BeginRequestLocked(scheduled_ns, &window)) return;
    }
    Send(window, scheduled_ns);
    next_s += options_.arrival == Arrival::kPoisson ? gap_s(rng) : 1.0 / request_rate_;
  }
}

int64_t LoadLevel::WindowStartNsLocked(int64_t k) const {
  return CountWindows() ? window_start_ns_[k] : warmup_ns_ + k * window_ns_;
}

int64_t LoadLevel::WindowEndNsLocked(int64_t k) const {
  return CountWindows() ? window_start_ns_[k + 1] : warmup_ns_ + (k + 1) * window_ns_;
}

bool LoadLevel::AwaitedWindowDoneLocked() const {
  const int64_t k = awaited_window_;
  bool ended;
  if (CountWindows()) {
    ended = static_cast<int64_t>(window_start_ns_.size()) > k + 1;
  } else {
    // A closed loop may send nothing while the server stalls: the clock
    // ends its window. An open loop ends it by scheduling past the end.
    const int64_t end_ns = WindowEndNsLocked(k);
    ended = last_scheduled_ns_ >= end_ns || (concurrency_ > 0 && NowNs() >= end_ns);
  }
  if (!ended) return false;
  for (int64_t i = 0; i <= k + 1 && i < static_cast<int64_t>(outstanding_.size()); ++i) {
    if (outstanding_[i] != 0) return false;
  }
  return true;
}

std::string LoadLevel::LevelName() const {
  return concurrency_ > 0 ? absl::StrCat("concurrency ", concurrency_)
                          : absl::StrFormat("%.6g req/s", request_rate_);
}

void LoadLevel::WaitForWindow(int64_t k) {
  int64_t next_progress_ns = NowNs() + kProgressNs;
  absl::MutexLock lock(&mu_);
  awaited_window_ = k;
  while (!AwaitedWindowDoneLocked()) {
    int64_t wait_ns = kPollNs;
    if (!CountWindows()) {
      wait_ns = std::clamp<int64_t>(WindowEndNsLocked(k) - NowNs(), 1000000, kPollNs);
    }
    mu_.AwaitWithTimeout(absl::Condition(this, &LoadLevel::AwaitedWindowDoneLocked),
                         absl::Nanoseconds(wait_ns));
    if (options_.progress && NowNs() >= next_progress_ns) {
      next_progress_ns = NowNs() + kProgressNs;
      std::string line = absl::StrFormat("%s: %s, window %d/%d, %d requests done", LevelName(),
                                         NowNs() < warmup_ns_ ? "warm-up" : "measuring", k + 1,
                                         options_.measurement.max_windows, records_.size());
      if (!windows_.empty()) {
        absl::StrAppendFormat(&line, "; last window %.1f req/s, p99 %.3f ms",
                              windows_.back().throughput_rps, windows_.back().p99_ms);
      }
      options_.progress(line);
    }
  }
}

WindowResult LoadLevel::SummarizeWindowLocked(int64_t k) const {
  const int64_t start_ns = WindowStartNsLocked(k);
  const int64_t end_ns = WindowEndNsLocked(k);
  WindowResult result;
  result.seconds = static_cast<double>(end_ns - start_ns) / kNsPerS;
  std::vector<double> latencies_ms;
  int64_t completed = 0;
  for (const Record& r : records_) {
    const bool ok = r.code == absl::StatusCode::kOk;
    if (ok && r.end_ns >= start_ns && r.end_ns < end_ns) ++completed;
    if (r.window != k) continue;
    ++result.requests;
    if (ok) latencies_ms.push_back(static_cast<double>(r.end_ns - r.scheduled_ns) / 1e6);
  }
  result.throughput_rps = result.seconds > 0 ? static_cast<double>(completed) / result.seconds : 0;
  result.p99_ms = SummarizeLatencies(std::move(latencies_ms)).p99_ms;
  return result;
}

bool LoadLevel::StableLocked() const {
  const size_t n = static_cast<size_t>(options_.measurement.stable_windows);
  if (windows_.size() < n) return false;
  std::vector<double> throughput, p99;
  for (size_t i = windows_.size() - n; i < windows_.size(); ++i) {
    throughput.push_back(windows_[i].throughput_rps);
    p99.push_back(windows_[i].p99_ms);
  }
  const double percent = options_.measurement.stability_percent;
  return WithinPercent(throughput, percent) && WithinPercent(p99, percent);
}

LevelResult LoadLevel::MergeLocked() const {
  LevelResult level;
  level.concurrency = concurrency_;
  level.request_rate = request_rate_;
  level.windows = windows_;
  const int64_t count = static_cast<int64_t>(windows_.size());
  level.windows_used =
      static_cast<int>(std::min<int64_t>(options_.measurement.stable_windows, count));
  const int64_t first = count - level.windows_used;
  const int64_t last = count - 1;
  const int64_t start_ns = WindowStartNsLocked(first);
  const int64_t end_ns = WindowEndNsLocked(last);
  std::vector<double> latencies_ms;
  int64_t completed = 0;
  for (const Record& r : records_) {
    const bool ok = r.code == absl::StatusCode::kOk;
    ++level.level_requests;
    if (ok) {
      ++level.level_ok;
      level.level_mean_ms += static_cast<double>(r.end_ns - r.scheduled_ns) / 1e6;
    }
    if (ok && r.end_ns >= start_ns && r.end_ns < end_ns) ++completed;
    if (r.window < first || r.window > last) continue;
    ++level.requests;
    if (ok) {
      ++level.ok;
      latencies_ms.push_back(static_cast<double>(r.end_ns - r.scheduled_ns) / 1e6);
    } else {
      ++level.errors;
      ++level.errors_by_code[absl::StatusCodeToString(r.code)];
    }
  }
  const double seconds = static_cast<double>(end_ns - start_ns) / kNsPerS;
  level.throughput_rps = seconds > 0 ? static_cast<double>(completed) / seconds : 0;
  level.images_per_s = level.throughput_rps * static_cast<double>(session_->batch());
  level.mb_per_s = level.throughput_rps *
                   static_cast<double>(session_->input().bytes.size() + session_->output_bytes()) /
                   1e6;
  level.latency = SummarizeLatencies(std::move(latencies_ms));
  if (level.level_ok > 0) level.level_mean_ms /= static_cast<double>(level.level_ok);
  return level;
}

LevelResult LoadLevel::Run() {
  start_ = std::chrono::steady_clock::now();
  if (Blocking()) {
    for (int i = 0; i < concurrency_; ++i) callers_.emplace_back([this] { CallInTurn(); });
  } else if (concurrency_ > 0) {
    for (int i = 0; i < concurrency_; ++i) {
      int64_t window = 0;
      const int64_t scheduled_ns = NowNs();
      {
        absl::MutexLock lock(&mu_);
        BeginRequestLocked(scheduled_ns, &window);
      }
      Send(window, scheduled_ns);
    }
  } else {
    scheduler_ = std::thread([this] { ScheduleArrivals(); });
  }
  bool stable = false;
  for (int k = 0; k < options_.measurement.max_windows && !stable; ++k) {
    WaitForWindow(k);
    absl::MutexLock lock(&mu_);
    windows_.push_back(SummarizeWindowLocked(k));
    stable = StableLocked();
  }
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (scheduler_.joinable()) scheduler_.join();
  for (std::thread& caller : callers_) caller.join();
  callers_.clear();
  // Calls end by the client deadline at the latest.
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &LoadLevel::NothingInFlightLocked));
  LevelResult level = MergeLocked();
  level.stable = stable;
  return level;
}

int64_t LoadLevel::warmup_requests() const {
  absl::MutexLock lock(&mu_);
  int64_t count = 0;
  for (const Record& r : records_) count += r.window < 0 ? 1 : 0;
  return count;
}

}  // namespace convserve
