#include "client/load_options.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace convserve {
namespace {

constexpr int kMaxLevels = 1000;

absl::Status BadRange(const std::string& flag, const std::string& text, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "--", flag, "='", text, "': ", why,
      "; use start:end:step with step xF (multiply) or +N (add), e.g. 1:64:x2, 1:8:+1, or 4"));
}

}  // namespace

const char* LoadModeName(LoadMode mode) { return mode == LoadMode::kOpenLoop ? "open" : "closed"; }

const char* ArrivalName(Arrival arrival) {
  return arrival == Arrival::kPoisson ? "poisson" : "constant";
}

absl::StatusOr<Arrival> ParseArrival(const std::string& name) {
  if (name == "constant") return Arrival::kConstant;
  if (name == "poisson") return Arrival::kPoisson;
  return absl::InvalidArgumentError(
      absl::StrCat("--arrival='", name, "': must be constant or poisson"));
}

absl::StatusOr<std::vector<double>> ParseRange(const std::string& text, const std::string& flag) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  if (parts.empty() || parts.size() > 3) return BadRange(flag, text, "expected 1 to 3 fields");
  double start = 0, end = 0;
  if (!absl::SimpleAtod(parts[0], &start) || !(start > 0) || !std::isfinite(start)) {
    return BadRange(flag, text, "start must be a positive number");
  }
  end = start;
  if (parts.size() > 1 &&
      (!absl::SimpleAtod(parts[1], &end) || !(end >= start) || !std::isfinite(end))) {
    return BadRange(flag, text, "end must be a number >= start");
  }
  bool multiply = false;
  double step = 1;
  if (parts.size() == 3) {
    std::string step_text = parts[2];
    if (!step_text.empty() && (step_text[0] == 'x' || step_text[0] == '*')) {
      multiply = true;
      step_text.erase(0, 1);
    } else if (!step_text.empty() && step_text[0] == '+') {
      step_text.erase(0, 1);
    }
    if (!absl::SimpleAtod(step_text, &step) || !std::isfinite(step) ||
        !(multiply ? step > 1 : step > 0)) {
      return BadRange(flag, text, multiply ? "a factor must be > 1" : "a step must be > 0");
    }
  }
  std::vector<double> levels;
  // A relative slack so 0.1-style steps still land on the end.
  const double slack = end * 1e-9;
  for (double v = start; v <= end + slack; v = multiply ? v * step : v + step) {
    if (levels.size() == kMaxLevels) return BadRange(flag, text, "more than 1000 levels");
    levels.push_back(v);
  }
  return levels;
}

absl::StatusOr<std::vector<int>> ParseIntRange(const std::string& text, const std::string& flag) {
  absl::StatusOr<std::vector<double>> levels = ParseRange(text, flag);
  if (!levels.ok()) return levels.status();
  std::vector<int> ints;
  for (double v : *levels) {
    if (v != std::floor(v) || v > 1e6) return BadRange(flag, text, "levels must be integers");
    ints.push_back(static_cast<int>(v));
  }
  return ints;
}

absl::Status ValidateLoadOptions(const LoadOptions& options) {
  const MeasurementOptions& m = options.measurement;
  if (options.mode == LoadMode::kClosedLoop) {
    if (options.concurrency.empty()) return absl::InvalidArgumentError("no concurrency level");
    for (int c : options.concurrency) {
      if (c < 1) return absl::InvalidArgumentError("concurrency levels must be >= 1");
    }
  } else {
    if (options.request_rates.empty()) return absl::InvalidArgumentError("no request rate");
    for (double r : options.request_rates) {
      if (!(r > 0) || !std::isfinite(r)) {
        return absl::InvalidArgumentError("request rates must be > 0");
      }
    }
  }
  if (m.warmup < absl::ZeroDuration()) return absl::InvalidArgumentError("--warmup must be >= 0");
  if (m.window_requests < 0) return absl::InvalidArgumentError("--window_requests must be >= 0");
  if (m.window_requests == 0 && m.window <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--window must be > 0");
  }
  if (!(m.stability_percent >= 0)) {
    return absl::InvalidArgumentError("--stability_percent must be >= 0");
  }
  if (m.stable_windows < 1 || m.max_windows < m.stable_windows) {
    return absl::InvalidArgumentError("need 1 <= --stable_windows <= --max_windows");
  }
  if (options.verify_every < 1) return absl::InvalidArgumentError("--verify_every must be >= 1");
  return absl::OkStatus();
}

}  // namespace convserve
