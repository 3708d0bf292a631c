// Seeded random graphs through a real CPU server on both protocols
// (convserve.v1 Infer and KServe ModelInfer), every output checked against the
// float64 reference, plus the regression graphs in tests/data/repro/. The
// same generator runs on a GPU host in tests/gpu/random_graph_oracle_test.cc;
// here the sizes are small enough for CI.
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/graph_oracle.h"
#include "tests/test_util/instrumented_backend.h"
#include "tests/test_util/random_graph.h"
#include "tests/test_util/regression_graphs.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

constexpr uint64_t kBaseSeed = 1000;
constexpr int kGraphs = 300;

// Small enough that the float64 reference of all graphs takes seconds.
RandomGraphOptions CpuOptions() {
  RandomGraphOptions options;
  options.max_spatial_2d = 24;
  options.max_spatial_3d = 10;
  options.max_channels = 16;
  options.max_macs = 3'000'000;
  options.name_prefix = "cpu_oracle";
  return options;
}

// The source tree, where the regression graphs are: the environment may say
// where it is now (a bundle run elsewhere).
std::string SourceDir() {
  const char* dir = std::getenv("CONVSERVE_SOURCE_DIR");
  return dir != nullptr ? dir : CONVSERVE_SOURCE_DIR;
}

TEST(RandomGraphOracleTest, CpuServerMatchesFloat64ReferenceOnBothProtocols) {
  std::vector<RandomGraphCase> graph_cases;
  for (int i = 0; i < kGraphs; ++i) {
    graph_cases.push_back(MakeRandomGraph(kBaseSeed + i, CpuOptions()));
  }
  absl::StatusOr<std::vector<RandomGraphCase>> regressions =
      RegressionGraphCases(SourceDir(), kBaseSeed);
  ASSERT_TRUE(regressions.ok()) << regressions.status();
  for (RandomGraphCase& c : *regressions) graph_cases.push_back(std::move(c));
  const OracleCases cases = MakeOracleCases(std::move(graph_cases));

  const int threads = std::max(2u, std::thread::hardware_concurrency());
  const auto start = std::chrono::steady_clock::now();
  ComputeReferences(cases, threads);
  const double reference_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // The CPU backend computes in float and rounds each layer's output to the
  // dtype like the reference, so it should sit orders of magnitude below these.
  // bfloat16 often matches bit for bit: its products are exact in float, and
  // so are most of their sums.
  OracleOptions options;
  options.bounds = {/*float32=*/1e-5, /*float16=*/1e-2, /*bfloat16=*/2e-2};
  options.client_threads = 4;
  std::unique_ptr<TestServer> server = TestServer::Start();
  const OracleReport report = RunOracle(server->address(), cases, options);

  std::printf("random-graph oracle, CPU server, seeds %llu..%llu + %zu regression cases\n%s",
              static_cast<unsigned long long>(kBaseSeed),
              static_cast<unsigned long long>(kBaseSeed + kGraphs - 1), regressions->size(),
              FormatCaseTable(cases).c_str());
  int64_t macs = 0;
  for (const auto& c : cases) macs += GraphMacs(c->graph_case().graph, c->graph_case().input_shape);
  std::printf("references %.1f s on %d threads, %.2f G multiply-accumulates\n", reference_seconds,
              threads, macs * 1e-9);
  std::printf("cpu: %s\n", FormatReportLine(report, options.bounds).c_str());
  if (!report.failures.empty()) std::printf("failures:\n%s", FormatFailures(report).c_str());

  EXPECT_EQ(report.graphs, static_cast<int64_t>(cases.size()));
  EXPECT_EQ(report.requests, 2 * static_cast<int64_t>(cases.size()));
  EXPECT_TRUE(report.failures.empty()) << report.failures.size() << " failures, listed above";
  // A graph whose reference is all zeros checks nothing; a few are chance
  // (a ReLU over negative pre-activations), many would mean a broken generator.
  EXPECT_LT(report.zero_references, static_cast<int64_t>(cases.size()) / 20);
}

// The oracle itself can fail: a server that returns slightly wrong numbers,
// NaN, or errors has every one of its answers reported, on both protocols.
TEST(RandomGraphOracleTest, ReportsWrongNumbersNaNAndErrorsOnBothProtocols) {
  constexpr int kCases = 6;
  std::vector<RandomGraphCase> graph_cases;
  for (int i = 0; i < kCases; ++i) {
    graph_cases.push_back(MakeRandomGraph(kBaseSeed + i, CpuOptions()));
  }
  const OracleCases cases = MakeOracleCases(std::move(graph_cases));
  OracleOptions options;
  options.client_threads = 2;

  struct Broken {
    const char* what;
    InstrumentedBackendOptions backend;
    const char* error;
  };
  InstrumentedBackendOptions scaled;
  scaled.output_scale = 1.05f;  // 5%: above every dtype's bound
  InstrumentedBackendOptions not_a_number;
  not_a_number.output_scale = std::numeric_limits<float>::quiet_NaN();
  InstrumentedBackendOptions failing;
  failing.fail_every = 1;
  for (const Broken& broken : {Broken{"5% off", scaled, "relative L2 error"},
                               Broken{"NaN", not_a_number, "NaN in the output"},
                               Broken{"INTERNAL", failing, "INTERNAL"}}) {
    SCOPED_TRACE(broken.what);
    std::unique_ptr<TestServer> server =
        TestServer::Start({}, InstrumentedBackend::AroundCpu(broken.backend));
    const OracleReport report = RunOracle(server->address(), cases, options);
    EXPECT_EQ(report.graphs, kCases);
    EXPECT_EQ(report.requests, 2 * kCases);
    ASSERT_EQ(report.failures.size(), 2u * kCases) << FormatFailures(report);
    int infer = 0, model_infer = 0;
    for (const OracleFailure& failure : report.failures) {
      EXPECT_THAT(failure.error, ::testing::HasSubstr(broken.error));
      EXPECT_THAT(failure.description, ::testing::HasSubstr("seed="));
      infer += failure.error.rfind("convserve.v1 Infer: ", 0) == 0;
      model_infer += failure.error.rfind("KServe ModelInfer: ", 0) == 0;
    }
    EXPECT_EQ(infer, kCases);
    EXPECT_EQ(model_infer, kCases);
  }
}

}  // namespace
}  // namespace convserve
