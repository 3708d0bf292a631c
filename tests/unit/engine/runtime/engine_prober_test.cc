// EngineProber against a fake prober process (tests/test_util/
// fake_prober_main.cc): searches come back ranked; a candidate that faults,
// crashes or hangs the prober is quarantined in the plan store, the search
// resumes in a new prober, and a later prober (a restart) never runs it.
#include "engine/runtime/engine_prober.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "engine/runtime/prober_protocol.h"
#include "gtest/gtest.h"

namespace convserve {
namespace {

ConvLayerProblem Problem() {
  ConvLayerProblem p;
  p.dtype = DType::kFloat16;
  p.channels_last = true;
  p.input = {1, 8, 9, 9};
  p.weights = {4, 8, 3, 3};
  p.output = {1, 4, 7, 7};
  p.stride = p.dilation = {1, 1};
  p.pad_before = p.pad_after = {0, 0};
  p.has_bias = true;
  p.activation.kind = ActivationKind::kRelu;
  return p;
}

class EngineProberTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/engine_prober_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    tries_ = dir_ + "/tries.txt";
    absl::StatusOr<std::unique_ptr<PlanStore>> store = PlanStore::Open(dir_ + "/store");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<EngineProber> Prober(std::vector<std::string> flags,
                                       absl::Duration candidate_timeout = absl::Seconds(20)) {
    EngineProberOptions options;
    options.binary = CONVSERVE_FAKE_PROBER;
    options.arguments = {"--plan_cache_dir=" + store_->directory(), "--tries_log=" + tries_};
    for (std::string& flag : flags) options.arguments.push_back(std::move(flag));
    options.candidate_timeout = candidate_timeout;
    options.label = "GPU 0";
    absl::StatusOr<std::unique_ptr<EngineProber>> prober = EngineProber::Create(options, store_.get());
    EXPECT_TRUE(prober.ok()) << prober.status();
    return prober.ok() ? *std::move(prober) : nullptr;
  }

  std::vector<std::string> Tries() const {
    std::ifstream in(tries_);
    std::stringstream text;
    text << in.rdbuf();
    return absl::StrSplit(text.str(), '\n', absl::SkipEmpty());
  }

  std::string dir_, tries_;
  std::unique_ptr<PlanStore> store_;
};

std::vector<std::string> Ids(const std::vector<EngineConfigId>& ids) {
  std::vector<std::string> text;
  for (const EngineConfigId& id : ids) text.push_back(id.ToString());
  return text;
}

TEST_F(EngineProberTest, SearchComesBackRankedBySpeed) {
  std::unique_ptr<EngineProber> prober = Prober({});
  absl::StatusOr<SearchReport> report = prober->Search(Problem());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->timed);
  EXPECT_EQ(Ids(report->Ranked()),
            (std::vector<std::string>{"unfused:e3:", "fused:e2:", "fused:e1:k2=3"}));
  ASSERT_EQ(report->skipped.size(), 1u);
  EXPECT_EQ(report->skipped[0], "fused:e9: errata rule 'x': a test rule");
  EXPECT_EQ(prober->stats().starts, 1);
  // A second search reuses the running prober.
  ASSERT_TRUE(prober->Search(Problem()).ok());
  EXPECT_EQ(prober->stats().starts, 1);
  EXPECT_EQ(prober->stats().searches, 2);
}

// Autotune's final times the fastest few again and reports them again: the
// later figure replaces the earlier, and no candidate is listed twice.
TEST_F(EngineProberTest, ACandidateTimedAgainTakesItsNewTime) {
  std::unique_ptr<EngineProber> prober = Prober({"--retime=fused:e1:k2=3"});
  absl::StatusOr<SearchReport> report = prober->Search(Problem());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->results.size(), 3u);
  EXPECT_EQ(Ids(report->Ranked()),
            (std::vector<std::string>{"fused:e1:k2=3", "unfused:e3:", "fused:e2:"}));
}

// The search's own winner comes first, though another timed faster once.
TEST_F(EngineProberTest, TheChosenCandidateIsRankedFirst) {
  std::unique_ptr<EngineProber> prober = Prober({"--chosen=fused:e2:"});
  absl::StatusOr<SearchReport> report = prober->Search(Problem());
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(report->chosen.has_value());
  EXPECT_EQ(report->chosen->ToString(), "fused:e2:");
  EXPECT_EQ(Ids(report->Ranked()),
            (std::vector<std::string>{"fused:e2:", "unfused:e3:", "fused:e1:k2=3"}));
}

TEST_F(EngineProberTest, WhatALibraryPrintsOnStdoutIsNotTakenForTheProtocol) {
  std::unique_ptr<EngineProber> prober = Prober({"--stray_stdout"});
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<SearchReport> report = prober->Search(Problem());
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(Ids(report->Ranked()),
              (std::vector<std::string>{"unfused:e3:", "fused:e2:", "fused:e1:k2=3"}));
  }
}

TEST_F(EngineProberTest, HardwareFaultBlamesNoCandidate) {
  std::unique_ptr<EngineProber> prober = Prober({"--hardware_fault=fused:e2:"});
  absl::StatusOr<SearchReport> report = prober->Search(Problem());
  EXPECT_TRUE(absl::IsUnavailable(report.status())) << report.status();
  EXPECT_NE(report.status().message().find("hardware error"), std::string::npos);
  EXPECT_EQ(prober->stats().quarantined, 0);
  EXPECT_EQ(store_->Get("quarantine", QuarantineKey("Fake GPU/sm90/cudnn91400", Problem(),
                                                    *EngineConfigId::Parse("fused:e2:"))),
            std::nullopt);
}

TEST_F(EngineProberTest, ProberKilledFromOutsideBlamesNoCandidate) {
  // As the OOM killer would: a SIGKILL the server did not send. One retry,
  // then UNAVAILABLE; no verdict.
  std::unique_ptr<EngineProber> prober = Prober({"--killed=fused:e2:"});
  absl::StatusOr<SearchReport> report = prober->Search(Problem());
  EXPECT_TRUE(absl::IsUnavailable(report.status())) << report.status();
  EXPECT_EQ(prober->stats().quarantined, 0);
  EXPECT_EQ(prober->stats().starts, 2);
}

TEST_F(EngineProberTest, CancelStopsASearchInProgressWithoutAVerdict) {
  std::unique_ptr<EngineProber> prober = Prober({"--hang=fused:e2:"}, absl::Seconds(60));
  std::thread cancel([&] {
    // Bounded wait until the prober is inside the hanging candidate.
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (Tries().size() < 2 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
    prober->Cancel();
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<SearchReport> report = prober->Search(Problem());
  cancel.join();
  EXPECT_TRUE(absl::IsUnavailable(report.status())) << report.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_EQ(prober->stats().quarantined, 0);
  EXPECT_FALSE(prober->running());
  EXPECT_TRUE(absl::IsUnavailable(prober->Search(Problem()).status()));
}

TEST_F(EngineProberTest, RejectedCandidateIsLeftOutButNotQuarantined) {
  std::unique_ptr<EngineProber> prober = Prober({"--reject=fused:e2:"});
  absl::StatusOr<SearchReport> report = prober->Search(Problem());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(Ids(report->Ranked()), (std::vector<std::string>{"unfused:e3:", "fused:e1:k2=3"}));
  EXPECT_EQ(prober->stats().quarantined, 0);
  EXPECT_EQ(report->results[1].detail, "changed 4 guard words around y");
}

// The three ways a candidate can take a prober down.
struct Misbehaviour {
  const char* name;
  const char* flag;
  const char* reason;  // in the quarantine verdict
};

class ProberFaultTest : public EngineProberTest,
                        public ::testing::WithParamInterface<Misbehaviour> {};

// How long a misbehaving prober's candidate may run (the Hang case waits it
// out). The first read after a start also waits for the prober to start, which
// on a loaded CI machine, or under ASan, takes a good part of a second.
constexpr absl::Duration kMisbehaviourTimeout = absl::Seconds(5);

TEST_P(ProberFaultTest, CandidateIsQuarantinedAndNeverRunAgain) {
  const Misbehaviour& m = GetParam();
  {
    std::unique_ptr<EngineProber> prober =
        Prober({absl::StrCat(m.flag, "=fused:e2:")}, kMisbehaviourTimeout);
    absl::StatusOr<SearchReport> report = prober->Search(Problem());
    ASSERT_TRUE(report.ok()) << report.status();
    // The search went on in a new prober, without the culprit.
    EXPECT_EQ(Ids(report->Ranked()), (std::vector<std::string>{"unfused:e3:", "fused:e1:k2=3"}));
    EXPECT_EQ(prober->stats().quarantined, 1);
    EXPECT_EQ(prober->stats().starts, 2);
    EXPECT_EQ(prober->stats().vetoed, 1);
  }
  const std::optional<std::string> verdict = store_->Get(
      "quarantine", QuarantineKey("Fake GPU/sm90/cudnn91400", Problem(),
                                  *EngineConfigId::Parse("fused:e2:")));
  ASSERT_TRUE(verdict.has_value());
  EXPECT_NE(verdict->find(m.reason), std::string::npos) << *verdict;
  EXPECT_EQ(Tries(), (std::vector<std::string>{"fused:e1:k2=3", "fused:e2:", "fused:e1:k2=3",
                                               "unfused:e3:"}));

  // A restart: a fresh store object on the same directory, a fresh prober
  // that would misbehave again. The verdict keeps it from ever running.
  absl::StatusOr<std::unique_ptr<PlanStore>> reopened = PlanStore::Open(store_->directory());
  ASSERT_TRUE(reopened.ok());
  store_ = *std::move(reopened);
  std::filesystem::remove(tries_);
  std::unique_ptr<EngineProber> restarted =
      Prober({absl::StrCat(m.flag, "=fused:e2:")}, kMisbehaviourTimeout);
  absl::StatusOr<SearchReport> again = restarted->Search(Problem());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Tries(), (std::vector<std::string>{"fused:e1:k2=3", "unfused:e3:"}));
  EXPECT_EQ(restarted->stats().quarantined, 0);
  EXPECT_EQ(restarted->stats().vetoed, 1);
  EXPECT_EQ(restarted->stats().starts, 1);
}

INSTANTIATE_TEST_SUITE_P(
    Misbehaviours, ProberFaultTest,
    ::testing::Values(Misbehaviour{"LostContext", "--fault", "cudaErrorMisalignedAddress"},
                      Misbehaviour{"Crash", "--crash", "killed by signal 6"},
                      Misbehaviour{"Hang", "--hang", "hung for 5s"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(EngineProberTest, GivesUpAfterTheFaultLimit) {
  EngineProberOptions options;
  options.binary = CONVSERVE_FAKE_PROBER;
  options.arguments = {"--plan_cache_dir=" + store_->directory(),
                       "--fault=fused:e1:k2=3,fused:e2:,unfused:e3:"};
  options.max_faults_per_search = 2;
  absl::StatusOr<std::unique_ptr<EngineProber>> prober = EngineProber::Create(options, store_.get());
  ASSERT_TRUE(prober.ok());
  absl::StatusOr<SearchReport> report = (*prober)->Search(Problem());
  EXPECT_TRUE(absl::IsInternal(report.status())) << report.status();
  EXPECT_NE(report.status().message().find("gave up after 2"), std::string::npos);
  EXPECT_EQ((*prober)->stats().quarantined, 2);
  // The verdicts stand: the next search runs only the third, which faults
  // too, and then has nothing left that passes.
  report = (*prober)->Search(Problem());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->Ranked().empty());
  EXPECT_EQ((*prober)->stats().quarantined, 3);
}

TEST_F(EngineProberTest, ProberThatCannotStartIsUnavailable) {
  std::unique_ptr<EngineProber> prober = Prober({"--fail_start"});
  absl::StatusOr<SearchReport> report = prober->Search(Problem());
  EXPECT_TRUE(absl::IsUnavailable(report.status())) << report.status();
  EXPECT_NE(report.status().message().find("did not start"), std::string::npos);
}

TEST_F(EngineProberTest, MissingBinaryIsRefusedAtCreate) {
  EngineProberOptions options;
  options.binary = dir_ + "/no-such-prober";
  absl::StatusOr<std::unique_ptr<EngineProber>> prober = EngineProber::Create(options, store_.get());
  EXPECT_TRUE(absl::IsFailedPrecondition(prober.status())) << prober.status();
}

TEST_F(EngineProberTest, IdleProberExitsAndTheNextSearchStartsOne) {
  EngineProberOptions options;
  options.binary = CONVSERVE_FAKE_PROBER;
  options.arguments = {"--plan_cache_dir=" + store_->directory()};
  // Long enough that the prober is still running when the test looks right
  // after the search, even with the test thread descheduled a while.
  options.idle_timeout = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<EngineProber>> prober = EngineProber::Create(options, store_.get());
  ASSERT_TRUE(prober.ok());
  ASSERT_TRUE((*prober)->Search(Problem()).ok());
  EXPECT_EQ((*prober)->stats().starts, 1);
  EXPECT_TRUE((*prober)->running());
  // Bounded wait for the idle stop.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while ((*prober)->running() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_FALSE((*prober)->running());
  ASSERT_TRUE((*prober)->Search(Problem()).ok());
  EXPECT_EQ((*prober)->stats().starts, 2);
}

}  // namespace
}  // namespace convserve
