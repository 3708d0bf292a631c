// Runs graph cases through a real convserve server on both protocols
// (convserve.v1 Infer and KServe ModelInfer) and checks every output against
// the float64 reference (NaiveForward), within a relative L2 bound per dtype.
#ifndef CONVSERVE_TESTS_TEST_UTIL_GRAPH_ORACLE_H_
#define CONVSERVE_TESTS_TEST_UTIL_GRAPH_ORACLE_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/status/statusor.h"
#include "engine/tensor.h"
#include "tests/test_util/random_graph.h"

namespace convserve {

// Largest relative L2 error accepted, per dtype.
struct OracleBounds {
  double float32 = 1e-5;
  double float16 = 1e-2;
  double bfloat16 = 2e-2;

  double For(DType dtype) const;
};

// The float64 reference output of one case.
struct OracleReference {
  // Logical N, K, spatial....
  Shape shape;
  // In the graph's layout, rounded per layer to its dtype (see NaiveForward).
  std::vector<double> values;
};

// A case and its reference, computed once on first use and then shared by
// every server and policy the case runs against. Thread-safe.
class OracleCase {
 public:
  explicit OracleCase(RandomGraphCase graph_case) : case_(std::move(graph_case)) {}

  const RandomGraphCase& graph_case() const { return case_; }
  DType dtype() const;
  // Computes the reference on the first call (slow: float64, one element at
  // a time); an error when the engine rejects the graph or input.
  const absl::StatusOr<OracleReference>& reference() const;

 private:
  const RandomGraphCase case_;
  mutable absl::once_flag once_;
  mutable std::optional<absl::StatusOr<OracleReference>> reference_;
};

using OracleCases = std::vector<std::shared_ptr<const OracleCase>>;

// Wraps each graph case.
OracleCases MakeOracleCases(std::vector<RandomGraphCase> graph_cases);

// Computes every case's reference up front on `threads` threads, so that the
// servers under test are not left idle waiting for the host.
void ComputeReferences(const OracleCases& cases, int threads);

struct OracleOptions {
  // Per-dtype relative L2 bounds.
  OracleBounds bounds;
  // Cases in flight at once, each on its own client thread.
  int client_threads = 4;
  // Deadline of each call; cold plan builds (autotune) can take long.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

struct OracleFailure {
  // The case's one-line description (RandomGraphCase::description).
  std::string description;
  // What went wrong: the call and status, or the error against its bound.
  std::string error;
};

struct OracleReport {
  // Cases run.
  int64_t graphs = 0;
  // Inference calls sent (two per case whose graph loaded).
  int64_t requests = 0;
  // Cases whose reference output is all zeros: they pass whatever a server
  // returns that is zero too, so a large count means a weak run.
  int64_t zero_references = 0;
  std::vector<OracleFailure> failures;
  // Largest relative L2 error seen per dtype (infinite for NaN or a wrong
  // size); dtypes never compared are absent.
  std::map<DType, double> max_error;
  // The graph that gave each max_error (its name), so a run's worst case can
  // be found and rerun.
  std::map<DType, std::string> worst_graph;
  // Wall time of the run.
  double wall_seconds = 0;

  // Adds `other`'s counts and failures; keeps the larger errors and time.
  void Merge(const OracleReport& other);
};

// Per case: LoadGraph, convserve.v1 Infer and KServe ModelInfer (raw bytes)
// of the case's input, each output compared with the reference, then
// UnloadGraph. Cases run on options.client_threads threads against the
// server at `address`. Graph names must be unique among `cases`.
OracleReport RunOracle(const std::string& address, const OracleCases& cases,
                       const OracleOptions& options);

// Counts of `cases` per dtype and layout, as a table for a test's log.
std::string FormatCaseTable(const OracleCases& cases);
// One line: graphs, requests, failures, zero references, max error per dtype
// against its bound and the graph that gave it, wall seconds.
std::string FormatReportLine(const OracleReport& report, const OracleBounds& bounds);
// Every failure on its own line: description, then the error.
std::string FormatFailures(const OracleReport& report);

}  // namespace convserve

#endif  // CONVSERVE_TESTS_TEST_UTIL_GRAPH_ORACLE_H_
