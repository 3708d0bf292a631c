#include "client/load_report.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace convserve {
namespace {

// The level as the table's first column shows it.
std::string LevelColumn(const RunResult& result, const LevelResult& level) {
  return result.mode == LoadMode::kClosedLoop ? absl::StrCat(level.concurrency)
                                              : absl::StrFormat("%.6g", level.request_rate);
}

std::string LevelLabel(const RunResult& result, const LevelResult& level) {
  return result.mode == LoadMode::kClosedLoop ? absl::StrCat("concurrency ", level.concurrency)
                                              : absl::StrFormat("%.6g req/s", level.request_rate);
}

const char* LevelHeader(const RunResult& result) {
  return result.mode == LoadMode::kClosedLoop ? "concurrency" : "rate req/s";
}

std::string ErrorsByCode(const std::map<std::string, int64_t>& errors, const char* separator) {
  std::vector<std::string> parts;
  for (const auto& [code, count] : errors) parts.push_back(absl::StrCat(code, "=", count));
  return absl::StrJoin(parts, separator);
}

std::string Seconds(absl::Duration d) {
  return absl::StrFormat("%.6g s", absl::ToDoubleSeconds(d));
}

// JSON numbers: NaN and infinities have no JSON form.
std::string Number(double v) { return std::isfinite(v) ? absl::StrFormat("%.9g", v) : "null"; }

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      absl::StrAppend(&out, "\\", std::string(1, c));
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string LatencyJson(const LatencySummary& l) {
  return absl::StrCat("{\"count\":", l.count, ",\"mean\":", Number(l.mean_ms),
                      ",\"min\":", Number(l.min_ms), ",\"p50\":", Number(l.p50_ms),
                      ",\"p90\":", Number(l.p90_ms), ",\"p95\":", Number(l.p95_ms),
                      ",\"p99\":", Number(l.p99_ms), ",\"p99_9\":", Number(l.p999_ms),
                      ",\"max\":", Number(l.max_ms), "}");
}

std::string CodeCountsJson(const std::map<std::string, int64_t>& errors) {
  std::vector<std::string> parts;
  for (const auto& [code, count] : errors) parts.push_back(absl::StrCat(Quote(code), ":", count));
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

// "server_breakdown": {...}, or null with the reason next to it.
std::string BreakdownJson(const absl::StatusOr<ServerBreakdown>& breakdown) {
  if (!breakdown.ok()) {
    return absl::StrCat("\"server_breakdown\":null,\"server_breakdown_unavailable\":",
                        Quote(breakdown.status().ToString()));
  }
  std::vector<std::string> stages;
  for (const ServerStage& s : breakdown->stages) {
    stages.push_back(absl::StrCat(Quote(s.name), ":{\"count\":", s.count,
                                  ",\"mean_ms\":", Number(s.mean_ms), "}"));
  }
  return absl::StrCat("\"server_breakdown\":{\"success\":", breakdown->success,
                      ",\"failure\":", breakdown->failure, ",\"stages\":{",
                      absl::StrJoin(stages, ","), "}}");
}

// Mean server-side stage times per level, or why there are none.
std::string ServerBreakdownTable(const RunResult& result) {
  std::string rows;
  std::string unavailable;
  for (const LevelResult& level : result.levels) {
    if (!level.server_breakdown.ok()) {
      if (unavailable.empty()) unavailable = level.server_breakdown.status().ToString();
      continue;
    }
    const ServerBreakdown& b = *level.server_breakdown;
    absl::StrAppendFormat(&rows, "%12s %9d %7d", LevelColumn(result, level), b.success, b.failure);
    for (const ServerStage& stage : b.stages) absl::StrAppendFormat(&rows, " %8.3f", stage.mean_ms);
    const double outside = b.stages.empty() ? 0 : level.level_mean_ms - b.stages[0].mean_ms;
    absl::StrAppendFormat(&rows, " %8.3f\n", outside);
  }
  std::string out;
  if (!rows.empty()) {
    absl::StrAppendFormat(&out,
                          "server-side breakdown (GetStatistics over each whole level, warm-up "
                          "included): mean ms per successful request; outside = the client's mean "
                          "latency over the level - the server's request time\n"
                          "%12s %9s %7s %8s %8s %8s %8s %8s %8s %8s\n%s",
                          LevelHeader(result), "server ok", "failed", "request", "queue", "plan",
                          "h2d", "compute", "d2h", "outside", rows);
  }
  if (!unavailable.empty()) {
    absl::StrAppend(&out, kServerBreakdownUnavailable, " (", unavailable, ")\n");
  }
  return out;
}

}  // namespace

std::string FormatReport(const RunResult& result) {
  std::string out;
  const MeasurementOptions& m = result.measurement;
  absl::StrAppend(&out, LoadModeName(result.mode), " loop",
                  result.mode == LoadMode::kOpenLoop
                      ? absl::StrCat(" (", ArrivalName(result.arrival), " arrivals)")
                      : "",
                  ", protocol ", result.protocol, ", server ", absl::StrJoin(result.servers, ","),
                  "\n");
  if (!result.transport.empty()) absl::StrAppend(&out, "transport: ", result.transport, "\n");
  absl::StrAppend(&out, "graph ", result.graph, ": input [",
                  absl::StrJoin(result.input_shape, ", "), "] ", result.data_type, " ",
                  result.layout, ", ", result.input_bytes, " bytes in, ", result.output_bytes,
                  " bytes out per request\n");
  absl::StrAppend(
      &out, "windows of ",
      m.window_requests > 0 ? absl::StrCat(m.window_requests, " requests") : Seconds(m.window),
      " after ", Seconds(m.warmup), " warm-up; stable when ", m.stable_windows,
      " in a row are within ", m.stability_percent, "% (at most ", m.max_windows, " windows)\n\n");
  absl::StrAppendFormat(&out, "%12s %10s %10s %9s %8s %8s %8s %8s %8s %8s %8s %7s  %s\n",
                        LevelHeader(result), "req/s", "img/s", "MB/s", "min ms", "p50 ms", "p90 ms",
                        "p95 ms", "p99 ms", "p99.9 ms", "max ms", "errors", "windows");
  for (const LevelResult& level : result.levels) {
    const LatencySummary& l = level.latency;
    absl::StrAppendFormat(&out,
                          "%12s %10.1f %10.1f %9.2f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f "
                          "%7d  %d/%d %s\n",
                          LevelColumn(result, level), level.throughput_rps, level.images_per_s,
                          level.mb_per_s, l.min_ms, l.p50_ms, l.p90_ms, l.p95_ms, l.p99_ms,
                          l.p999_ms, l.max_ms, level.errors, level.windows_used,
                          level.windows.size(), level.stable ? "stable" : "UNSTABLE");
  }
  for (const LevelResult& level : result.levels) {
    if (level.errors == 0) continue;
    absl::StrAppend(&out, "errors at ", LevelLabel(result, level), ": ",
                    ErrorsByCode(level.errors_by_code, ", "), "\n");
  }
  absl::StrAppend(&out, "\n", ServerBreakdownTable(result));
  const RequestTotals& t = result.totals;
  absl::StrAppendFormat(&out,
                        "requests: %d sent, %d ok, %d errors (error ratio %.4g), %d in warm-up",
                        t.sent, t.ok, t.errors, ErrorRatio(t), result.warmup_requests);
  if (t.errors > 0) absl::StrAppend(&out, "; ", ErrorsByCode(t.errors_by_code, ", "));
  out += "\n";
  if (result.verify.has_value()) {
    const VerifyResult& v = *result.verify;
    absl::StrAppendFormat(&out,
                          "verify: %d outputs checked against the CPU reference, %d mismatches, "
                          "max relative L2 %.3g (bound %g)%s\n",
                          v.checked, v.mismatches, v.max_rel_l2, v.bound,
                          v.first_problem.empty() ? "" : "; first: " + v.first_problem);
  }
  return out;
}

std::string ReportCsv(const RunResult& result) {
  std::string out =
      "mode,concurrency,request_rate,arrival,protocol,servers,graph,batch,windows,windows_used,"
      "stable,requests,ok,errors,throughput_rps,images_per_s,mb_per_s,latency_min_ms,"
      "latency_p50_ms,latency_p90_ms,latency_p95_ms,latency_p99_ms,latency_p99_9_ms,"
      "latency_max_ms,latency_mean_ms,errors_by_code,level_requests,level_ok,server_ok,"
      "server_failed,server_request_ms,server_queue_ms,server_plan_ms,server_h2d_ms,"
      "server_compute_ms,server_d2h_ms,shared_memory,streaming\n";
  for (const LevelResult& level : result.levels) {
    const LatencySummary& l = level.latency;
    std::vector<std::string> fields = {
        LoadModeName(result.mode),
        absl::StrCat(level.concurrency),
        Number(level.request_rate),
        result.mode == LoadMode::kOpenLoop ? ArrivalName(result.arrival) : "",
        result.protocol,
        absl::StrJoin(result.servers, ";"),
        result.graph,
        absl::StrCat(result.batch),
        absl::StrCat(level.windows.size()),
        absl::StrCat(level.windows_used),
        level.stable ? "true" : "false",
        absl::StrCat(level.requests),
        absl::StrCat(level.ok),
        absl::StrCat(level.errors),
        Number(level.throughput_rps),
        Number(level.images_per_s),
        Number(level.mb_per_s),
        Number(l.min_ms),
        Number(l.p50_ms),
        Number(l.p90_ms),
        Number(l.p95_ms),
        Number(l.p99_ms),
        Number(l.p999_ms),
        Number(l.max_ms),
        Number(l.mean_ms),
        ErrorsByCode(level.errors_by_code, ";"),
        absl::StrCat(level.level_requests),
        absl::StrCat(level.level_ok)};
    // The server columns stay empty when the server offers no statistics.
    if (level.server_breakdown.ok()) {
      fields.push_back(absl::StrCat(level.server_breakdown->success));
      fields.push_back(absl::StrCat(level.server_breakdown->failure));
      for (const ServerStage& stage : level.server_breakdown->stages) {
        fields.push_back(Number(stage.mean_ms));
      }
    } else {
      fields.resize(fields.size() + 8);
    }
    fields.push_back(result.shared_memory);
    fields.push_back(result.streaming ? "true" : "false");
    std::vector<std::string> quoted;
    for (const std::string& f : fields) quoted.push_back(CsvField(f));
    absl::StrAppend(&out, absl::StrJoin(quoted, ","), "\n");
  }
  return out;
}

std::string ReportJson(const RunResult& result) {
  const MeasurementOptions& m = result.measurement;
  std::vector<std::string> servers;
  for (const std::string& s : result.servers) servers.push_back(Quote(s));
  std::string out = absl::StrCat(
      "{\"tool\":\"convserve-load\",\"mode\":", Quote(LoadModeName(result.mode)),
      ",\"arrival\":", Quote(ArrivalName(result.arrival)), ",\"protocol\":", Quote(result.protocol),
      ",\"transport\":", Quote(result.transport),
      ",\"shared_memory\":", Quote(result.shared_memory),
      ",\"streaming\":", result.streaming ? "true" : "false",
      ",\"servers\":[", absl::StrJoin(servers, ","), "],\"graph\":", Quote(result.graph),
      ",\"data_type\":", Quote(result.data_type), ",\"layout\":", Quote(result.layout),
      ",\"input_shape\":[", absl::StrJoin(result.input_shape, ","), "],\"batch\":", result.batch,
      ",\"input_bytes\":", result.input_bytes, ",\"output_bytes\":", result.output_bytes);
  absl::StrAppend(&out, ",\"measurement\":{\"warmup_s\":", Number(absl::ToDoubleSeconds(m.warmup)),
                  ",\"window_s\":", Number(absl::ToDoubleSeconds(m.window)),
                  ",\"window_requests\":", m.window_requests,
                  ",\"stability_percent\":", Number(m.stability_percent),
                  ",\"stable_windows\":", m.stable_windows, ",\"max_windows\":", m.max_windows,
                  "}");
  std::vector<std::string> levels;
  for (const LevelResult& level : result.levels) {
    std::vector<std::string> windows;
    for (const WindowResult& w : level.windows) {
      windows.push_back(absl::StrCat(
          "{\"seconds\":", Number(w.seconds), ",\"requests\":", w.requests,
          ",\"throughput_rps\":", Number(w.throughput_rps), ",\"p99_ms\":", Number(w.p99_ms), "}"));
    }
    levels.push_back(absl::StrCat(
        "{\"concurrency\":", level.concurrency, ",\"request_rate\":", Number(level.request_rate),
        ",\"stable\":", level.stable ? "true" : "false", ",\"windows_used\":", level.windows_used,
        ",\"requests\":", level.requests, ",\"ok\":", level.ok, ",\"errors\":", level.errors,
        ",\"errors_by_code\":", CodeCountsJson(level.errors_by_code), ",\"throughput_rps\":",
        Number(level.throughput_rps), ",\"images_per_s\":", Number(level.images_per_s),
        ",\"mb_per_s\":", Number(level.mb_per_s), ",\"latency_ms\":", LatencyJson(level.latency),
        ",\"level_requests\":", level.level_requests, ",\"level_ok\":", level.level_ok,
        ",\"level_mean_ms\":", Number(level.level_mean_ms), ",",
        BreakdownJson(level.server_breakdown), ",\"windows\":[", absl::StrJoin(windows, ","),
        "]}"));
  }
  absl::StrAppend(&out, ",\"levels\":[", absl::StrJoin(levels, ","), "]");
  const RequestTotals& t = result.totals;
  absl::StrAppend(&out, ",\"totals\":{\"requests_sent\":", t.sent, ",\"ok\":", t.ok,
                  ",\"errors\":", t.errors, ",\"error_ratio\":", Number(ErrorRatio(t)),
                  ",\"warmup_requests\":", result.warmup_requests,
                  ",\"errors_by_code\":", CodeCountsJson(t.errors_by_code), "}");
  if (result.verify.has_value()) {
    const VerifyResult& v = *result.verify;
    absl::StrAppend(&out, ",\"verification\":{\"checked\":", v.checked,
                    ",\"mismatches\":", v.mismatches, ",\"max_rel_l2\":", Number(v.max_rel_l2),
                    ",\"bound\":", Number(v.bound), ",\"first_problem\":", Quote(v.first_problem),
                    "}");
  } else {
    out += ",\"verification\":null";
  }
  return out + "}\n";
}

}  // namespace convserve
