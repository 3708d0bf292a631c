// A load run's result as a table for people, and as CSV and JSON files for
// tools. The three carry the same numbers; docs/load-generator.md lists the
// fields.
#ifndef CONVSERVE_CLIENT_LOAD_REPORT_H_
#define CONVSERVE_CLIENT_LOAD_REPORT_H_

#include <string>

#include "client/load_result.h"

namespace convserve {

// Printed in place of numbers when a server offers no statistics call
// (convserve.v1 GetStatistics), followed by the reason.
inline constexpr char kServerBreakdownUnavailable[] =
    "server-side breakdown: not available from this server";

// Header lines, one row per level, errors by status code, the server-side
// breakdown per level (or kServerBreakdownUnavailable), totals and
// verification.
std::string FormatReport(const RunResult& result);

// A header row, then one row per level; columns in docs/load-generator.md.
std::string ReportCsv(const RunResult& result);

// One object: the setup, "levels" (one per level, with its "windows" and
// "server_breakdown"), "totals" and "verification".
std::string ReportJson(const RunResult& result);

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_LOAD_REPORT_H_
