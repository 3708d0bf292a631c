// Seeded random graphs through real GPU servers on both protocols, under every
// engine policy the server offers, each output checked against the float64
// reference; the regression graphs in tests/data/repro/ run in every policy.
// Each policy's runner comes from the server's own factory (MakeRunner), so
// this runs exactly what `convserve-server --backend=cuda` runs. Skips
// without a GPU.
//
// Environment (all optional):
//   CONVSERVE_ORACLE_GRAPHS               random graphs per policy (300)
//   CONVSERVE_ORACLE_SEED                 seed of the first graph (1)
//   CONVSERVE_ORACLE_POLICIES             comma list, e.g. "autotune,fallback"
//   CONVSERVE_ORACLE_SERVERS_PER_POLICY   servers splitting a policy's graphs (2)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/cudnn/cudnn_backend.h"
#include "gtest/gtest.h"
#include "server/backend_factory.h"
#include "tests/test_util/graph_oracle.h"
#include "tests/test_util/random_graph.h"
#include "tests/test_util/regression_graphs.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

// One engine policy, as the server's flags set it.
struct Policy {
  const char* name;
  // --engine_selection.
  const char* engine_selection;
  // --deterministic.
  bool deterministic;
  // --strict_float32.
  bool strict_float32;
};

constexpr Policy kPolicies[] = {
    // clang-format off
    {"autotune", "autotune", false, false},
    {"heuristic", "heuristic", false, false},
    {"heuristic_b", "heuristic_b", false, false},
    {"fallback", "fallback", false, false},
    {"deterministic", "heuristic", true, false},
    {"strict_float32", "heuristic", false, true},
    // clang-format on
};

// Larger than the CPU test's graphs (more channels, so the fused engines'
// multiple-of-8 alignment is reachable), but the float64 reference still
// runs on the host for every graph.
RandomGraphOptions GpuOptions() {
  RandomGraphOptions options;
  options.max_spatial_2d = 40;
  options.max_spatial_3d = 12;
  options.max_channels = 40;
  options.max_macs = 8'000'000;
  options.aligned_channels_fraction = 0.3;
  options.name_prefix = "gpu_oracle";
  return options;
}

// TF32 (the default for float32) keeps 10 mantissa bits; strict_float32
// forbids it. float16 stores 11 significant bits per element, bfloat16 8.
OracleBounds BoundsFor(const Policy& policy) {
  OracleBounds bounds;
  bounds.float32 = policy.strict_float32 ? 1e-5 : 2e-3;
  bounds.float16 = 1e-2;
  bounds.bfloat16 = 2e-2;
  return bounds;
}

// The integer in environment variable `name` (at least `min`), or `fallback`
// when it is unset.
absl::StatusOr<int64_t> EnvInt(const char* name, int64_t fallback, int64_t min) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < min) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", text, "': expected an integer >= ", min));
  }
  return value;
}

// The policies named in CONVSERVE_ORACLE_POLICIES, or all of them.
absl::StatusOr<std::vector<Policy>> SelectedPolicies() {
  const char* text = std::getenv("CONVSERVE_ORACLE_POLICIES");
  if (text == nullptr || *text == '\0') {
    return std::vector<Policy>(std::begin(kPolicies), std::end(kPolicies));
  }
  std::vector<Policy> selected;
  for (absl::string_view name : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    const auto* found = std::find_if(std::begin(kPolicies), std::end(kPolicies),
                                     [&](const Policy& p) { return name == p.name; });
    if (found == std::end(kPolicies)) {
      std::vector<std::string> names;
      for (const Policy& p : kPolicies) names.push_back(p.name);
      return absl::InvalidArgumentError(absl::StrCat("CONVSERVE_ORACLE_POLICIES: unknown policy '",
                                                     name,
                                                     "'; known: ", absl::StrJoin(names, ",")));
    }
    selected.push_back(*found);
  }
  return selected;
}

// The source tree, where the regression graphs are: a bundle run on a GPU
// host says through the environment where it is now.
std::string SourceDir() {
  const char* dir = std::getenv("CONVSERVE_SOURCE_DIR");
  return dir != nullptr ? dir : CONVSERVE_SOURCE_DIR;
}

// The engine prober the servers start: CONVSERVE_PROBER_BINARY, else the
// one built beside this test, else (a bundle) convserve-prober next to this
// binary, which is the server's own default.
std::string ProberBinary() {
  const char* binary = std::getenv("CONVSERVE_PROBER_BINARY");
  if (binary != nullptr && *binary != '\0') return binary;
  if (access(CONVSERVE_PROBER_BINARY, X_OK) == 0) return CONVSERVE_PROBER_BINARY;
  return "";
}

struct PolicyResult {
  OracleBounds bounds;
  // Not OK when a server could not be made; then `report` is partial.
  absl::Status status;
  OracleReport report;
  // Engine searches of the policy's servers: candidates the probers
  // quarantined (they faulted) and vetoed (quarantined earlier).
  EngineSearchStats search;
};

// Starts `servers` GPU servers of `policy` and splits `cases` among them, all
// running at once: a cold plan build (autotune above all) is slow and
// CPU-bound, and one server would build its plans one request at a time per
// worker.
PolicyResult RunPolicy(const Policy& policy, const OracleCases& cases, int servers) {
  const auto start = std::chrono::steady_clock::now();
  PolicyResult result;
  result.bounds = BoundsFor(policy);
  // Round-robin, so every server gets a mix of sizes and dtypes.
  std::vector<OracleCases> shares(servers);
  for (size_t i = 0; i < cases.size(); ++i) shares[i % servers].push_back(cases[i]);
  std::vector<OracleReport> reports(servers);
  std::vector<absl::Status> statuses(servers);
  std::vector<EngineSearchStats> searches(servers);
  std::vector<std::thread> threads;
  for (int s = 0; s < servers; ++s) {
    threads.emplace_back([&, s] {
      BackendConfig config;
      config.name = "cuda";
      config.engine_selection = policy.engine_selection;
      config.deterministic = policy.deterministic;
      config.strict_float32 = policy.strict_float32;
      config.prober_binary = ProberBinary();
      absl::StatusOr<RunnerChoice> choice = MakeRunner(config);
      if (!choice.ok()) {
        statuses[s] = choice.status();
        return;
      }
      std::unique_ptr<TestServer> server = TestServer::Start({}, std::move(choice->runner));
      OracleOptions options;
      options.bounds = result.bounds;
      options.client_threads = 4;
      reports[s] = RunOracle(server->address(), shares[s], options);
      searches[s] = server->core()->runner().Stats().engine_search;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int s = 0; s < servers; ++s) {
    result.report.Merge(reports[s]);
    if (!statuses[s].ok()) result.status = statuses[s];
    result.search.searches += searches[s].searches;
    result.search.prober_starts += searches[s].prober_starts;
    result.search.quarantined += searches[s].quarantined;
    result.search.vetoed += searches[s].vetoed;
  }
  result.report.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

TEST(GpuRandomGraphOracleTest, EveryEnginePolicyMatchesFloat64ReferenceOnBothProtocols) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  const absl::StatusOr<int64_t> graphs = EnvInt("CONVSERVE_ORACLE_GRAPHS", 300, 0);
  const absl::StatusOr<int64_t> base_seed = EnvInt("CONVSERVE_ORACLE_SEED", 1, 0);
  const absl::StatusOr<int64_t> servers = EnvInt("CONVSERVE_ORACLE_SERVERS_PER_POLICY", 2, 1);
  const absl::StatusOr<std::vector<Policy>> policies = SelectedPolicies();
  ASSERT_TRUE(graphs.ok()) << graphs.status();
  ASSERT_TRUE(base_seed.ok()) << base_seed.status();
  ASSERT_TRUE(servers.ok()) << servers.status();
  ASSERT_TRUE(policies.ok()) << policies.status();

  std::vector<RandomGraphCase> graph_cases;
  for (int64_t i = 0; i < *graphs; ++i) {
    graph_cases.push_back(MakeRandomGraph(*base_seed + i, GpuOptions()));
  }
  absl::StatusOr<std::vector<RandomGraphCase>> regressions =
      RegressionGraphCases(SourceDir(), *base_seed);
  ASSERT_TRUE(regressions.ok()) << regressions.status();
  for (RandomGraphCase& c : *regressions) graph_cases.push_back(std::move(c));
  const OracleCases cases = MakeOracleCases(std::move(graph_cases));

  // Every reference up front, on every host core, before any server waits.
  const int threads = std::max(2u, std::thread::hardware_concurrency());
  const auto start = std::chrono::steady_clock::now();
  ComputeReferences(cases, threads);
  std::printf(
      "random-graph oracle, GPU servers, seeds %lld..%lld + %zu regression cases, "
      "%lld server(s) per policy\n%sreferences %.1f s on %d threads\n",
      static_cast<long long>(*base_seed), static_cast<long long>(*base_seed + *graphs - 1),
      regressions->size(), static_cast<long long>(*servers), FormatCaseTable(cases).c_str(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), threads);

  // Policies are independent: one thread each, each with its own servers.
  std::vector<PolicyResult> results(policies->size());
  std::vector<std::thread> policy_threads;
  for (size_t p = 0; p < policies->size(); ++p) {
    policy_threads.emplace_back(
        [&, p] { results[p] = RunPolicy((*policies)[p], cases, static_cast<int>(*servers)); });
  }
  for (std::thread& thread : policy_threads) thread.join();

  for (size_t p = 0; p < policies->size(); ++p) {
    const EngineSearchStats& search = results[p].search;
    std::printf("%-15s %s  searches %lld  quarantined %lld  prober starts %lld\n",
                (*policies)[p].name,
                FormatReportLine(results[p].report, results[p].bounds).c_str(),
                static_cast<long long>(search.searches),
                static_cast<long long>(search.quarantined),
                static_cast<long long>(search.prober_starts));
  }
  for (size_t p = 0; p < policies->size(); ++p) {
    const PolicyResult& result = results[p];
    const char* name = (*policies)[p].name;
    if (!result.report.failures.empty()) {
      std::printf("failures under %s:\n%s", name, FormatFailures(result.report).c_str());
    }
    EXPECT_TRUE(result.status.ok()) << name << ": " << result.status;
    EXPECT_EQ(result.report.graphs, static_cast<int64_t>(cases.size())) << name;
    EXPECT_TRUE(result.report.failures.empty())
        << name << ": " << result.report.failures.size() << " failures, listed above";
  }
}

}  // namespace
}  // namespace convserve
