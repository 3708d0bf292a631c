// Engine choices in the plan store: a choice saved by one process is read
// by the next (a restart) on the same directory; a different GPU model,
// cuDNN or CUDA version, policy or problem does not see it; configurations
// quarantined, matched by an errata rule or blocklisted since are dropped
// (and a choice with none left is no choice); corrupt records are ignored.
#include "engine/runtime/engine_choice_store.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "engine/cudnn/cudnn_errata.h"
#include "engine/runtime/prober_protocol.h"
#include "gtest/gtest.h"
#include "tests/test_util/config_id.h"

namespace convserve {
namespace {

ConvLayerProblem Problem() {
  ConvLayerProblem p;
  p.dtype = DType::kFloat16;
  p.input = {3, 7, 13, 11};
  p.weights = {5, 7, 3, 3};
  p.output = {3, 5, 13, 11};
  p.stride = {1, 1};
  p.dilation = {1, 1};
  p.pad_before = {1, 1};
  p.pad_after = {1, 1};
  p.channels_last = true;
  p.has_bias = true;
  p.activation.kind = ActivationKind::kRelu;
  return p;
}

CudnnTarget H100() {
  CudnnTarget target;
  target.cudnn_version = 91400;
  target.compute_capability = 90;
  target.device_name = "NVIDIA H100 80GB HBM3";
  return target;
}

EngineChoice Choice() {
  EngineChoice choice;
  choice.ranked = {ConfigId("fused:e12:k2=21,k14=3"), ConfigId("unfused:e46:"),
                   ConfigId("fused:e0:")};
  choice.best_ms = 0.0125f;
  return choice;
}

std::vector<std::string> Names(const EngineChoice& choice) {
  std::vector<std::string> names;
  for (const EngineConfigId& id : choice.ranked) names.push_back(id.ToString());
  return names;
}

class EngineChoiceStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/engine_choice_store_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    absl::StatusOr<std::shared_ptr<const CudnnErrata>> errata = CudnnErrata::Create("");
    ASSERT_TRUE(errata.ok()) << errata.status();
    selection_.errata = *errata;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A fresh store on the same directory: what a restarted process sees.
  std::unique_ptr<PlanStore> Reopen() {
    absl::StatusOr<std::unique_ptr<PlanStore>> store = PlanStore::Open(dir_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  std::string dir_;
  EngineSelection selection_;
};

TEST_F(EngineChoiceStoreTest, RecordsRoundTripAndGarbageIsRefused) {
  absl::StatusOr<EngineChoice> decoded = DecodeEngineChoice(EncodeEngineChoice(Choice()));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(Names(*decoded), Names(Choice()));
  EXPECT_FLOAT_EQ(decoded->best_ms, 0.0125f);
  for (const char* text : {"", "best_ms 1\n", "best_ms x\nfused:e1:\n", "fused:e1:\n",
                           "best_ms -1\nfused:e1:\n", "best_ms 1\nfused:e1:\nnot an id\n"}) {
    EXPECT_FALSE(DecodeEngineChoice(text).ok()) << text;
  }
}

TEST_F(EngineChoiceStoreTest, AChoiceOutlivesTheProcessThatSearched) {
  {
    std::unique_ptr<PlanStore> store = Reopen();
    EngineChoiceStore choices(store.get(), H100(), 13000, "autotune/tf32", &selection_);
    ASSERT_TRUE(choices.Save(Problem(), Choice()).ok());
  }
  std::unique_ptr<PlanStore> store = Reopen();
  EngineChoiceStore choices(store.get(), H100(), 13000, "autotune/tf32", &selection_);
  std::vector<std::string> dropped;
  std::optional<EngineChoice> loaded = choices.Load(Problem(), &dropped);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(Names(*loaded), Names(Choice()));
  EXPECT_FLOAT_EQ(loaded->best_ms, 0.0125f);
  EXPECT_TRUE(dropped.empty());
}

TEST_F(EngineChoiceStoreTest, AnotherGpuLibraryPolicyOrProblemDoesNotSeeIt) {
  std::unique_ptr<PlanStore> store = Reopen();
  EngineChoiceStore saved(store.get(), H100(), 13000, "autotune/tf32", &selection_);
  ASSERT_TRUE(saved.Save(Problem(), Choice()).ok());
  std::vector<std::string> dropped;

  CudnnTarget other_gpu = H100();
  other_gpu.device_name = "NVIDIA H200";
  CudnnTarget other_cudnn = H100();
  other_cudnn.cudnn_version = 91900;
  CudnnTarget other_arch = H100();
  other_arch.compute_capability = 80;
  for (const CudnnTarget& target : {other_gpu, other_cudnn, other_arch}) {
    EngineChoiceStore choices(store.get(), target, 13000, "autotune/tf32", &selection_);
    EXPECT_FALSE(choices.Load(Problem(), &dropped).has_value()) << target.Key();
  }
  EXPECT_FALSE(EngineChoiceStore(store.get(), H100(), 12080, "autotune/tf32", &selection_)
                   .Load(Problem(), &dropped)
                   .has_value());
  EXPECT_FALSE(EngineChoiceStore(store.get(), H100(), 13000, "heuristic/tf32", &selection_)
                   .Load(Problem(), &dropped)
                   .has_value());
  ConvLayerProblem wider = Problem();
  wider.input[3] = 12;
  wider.output[3] = 12;
  EXPECT_FALSE(saved.Load(wider, &dropped).has_value());
  EXPECT_TRUE(saved.Load(Problem(), &dropped).has_value());
  EXPECT_TRUE(dropped.empty());
}

TEST_F(EngineChoiceStoreTest, ConfigurationsQuarantinedSinceAreDropped) {
  std::unique_ptr<PlanStore> store = Reopen();
  EngineChoiceStore choices(store.get(), H100(), 13000, "autotune/tf32", &selection_);
  ASSERT_TRUE(choices.Save(Problem(), Choice()).ok());
  // The best configuration faulted while serving, after the choice was made.
  ASSERT_TRUE(store
                  ->Put("quarantine", QuarantineKey(H100().Key(), Problem(), Choice().ranked[0]),
                        "faulted while serving")
                  .ok());
  std::unique_ptr<PlanStore> restarted = Reopen();
  EngineChoiceStore after(restarted.get(), H100(), 13000, "autotune/tf32", &selection_);
  std::vector<std::string> dropped;
  std::optional<EngineChoice> loaded = after.Load(Problem(), &dropped);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(Names(*loaded), (std::vector<std::string>{"unfused:e46:", "fused:e0:"}));
  EXPECT_EQ(loaded->best_ms, 0) << "the timing was the dropped configuration's";
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0], "fused:e12:k2=21,k14=3: quarantined");

  for (const EngineConfigId& id : Choice().ranked) {
    ASSERT_TRUE(store->Put("quarantine", QuarantineKey(H100().Key(), Problem(), id), "x").ok());
  }
  dropped.clear();
  std::unique_ptr<PlanStore> third = Reopen();
  EXPECT_FALSE(EngineChoiceStore(third.get(), H100(), 13000, "autotune/tf32", &selection_)
                   .Load(Problem(), &dropped)
                   .has_value())
      << "nothing left: search again";
  EXPECT_EQ(dropped.size(), 3u);
}

TEST_F(EngineChoiceStoreTest, ErrataAndBlocklistDropConfigurations) {
  std::unique_ptr<PlanStore> store = Reopen();
  ASSERT_TRUE(EngineChoiceStore(store.get(), H100(), 13000, "p", &selection_)
                  .Save(Problem(), Choice())
                  .ok());
  // An operator errata file with the rule, and engine 0 blocklisted.
  const std::string errata_file = dir_ + "/errata.txt";
  std::ofstream(errata_file) << "no-e46 engine=46 cudnn=9.14.0-9.14.99 -- seen bad\n";
  absl::StatusOr<std::shared_ptr<const CudnnErrata>> errata = CudnnErrata::Create(errata_file);
  ASSERT_TRUE(errata.ok()) << errata.status();
  EngineSelection later = selection_;
  later.errata = *errata;
  later.blocklist = {0};
  std::vector<std::string> dropped;
  std::optional<EngineChoice> loaded =
      EngineChoiceStore(store.get(), H100(), 13000, "p", &later).Load(Problem(), &dropped);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(Names(*loaded), (std::vector<std::string>{"fused:e12:k2=21,k14=3"}));
  EXPECT_FLOAT_EQ(loaded->best_ms, 0.0125f);
  EXPECT_EQ(dropped,
            (std::vector<std::string>{"unfused:e46:: errata rule 'no-e46': seen bad",
                                      "fused:e0:: blocklisted (--engine_blocklist)"}));
}

TEST_F(EngineChoiceStoreTest, CorruptOrForeignRecordsAreIgnored) {
  std::unique_ptr<PlanStore> store = Reopen();
  EngineChoiceStore choices(store.get(), H100(), 13000, "p", &selection_);
  ASSERT_TRUE(choices.Save(Problem(), Choice()).ok());
  // Flip a byte of the record on disk: its checksum no longer matches.
  std::filesystem::path record;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(dir_) / kEngineChoiceKind)) {
    record = entry.path();
  }
  ASSERT_FALSE(record.empty());
  {
    std::fstream file(record, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-3, std::ios::end);
    file.put('#');
  }
  std::vector<std::string> dropped;
  std::unique_ptr<PlanStore> restarted = Reopen();
  EXPECT_FALSE(EngineChoiceStore(restarted.get(), H100(), 13000, "p", &selection_)
                   .Load(Problem(), &dropped)
                   .has_value());
  // A record that is valid for the store but not an engine choice.
  ASSERT_TRUE(restarted
                  ->Put(kEngineChoiceKind, EngineChoiceKey(H100(), 13000, "p", Problem()),
                        "not a choice")
                  .ok());
  EXPECT_FALSE(EngineChoiceStore(restarted.get(), H100(), 13000, "p", &selection_)
                   .Load(Problem(), &dropped)
                   .has_value());
  // Saving again repairs it.
  ASSERT_TRUE(EngineChoiceStore(restarted.get(), H100(), 13000, "p", &selection_)
                  .Save(Problem(), Choice())
                  .ok());
  std::unique_ptr<PlanStore> repaired = Reopen();
  EXPECT_TRUE(EngineChoiceStore(repaired.get(), H100(), 13000, "p", &selection_)
                  .Load(Problem(), &dropped)
                  .has_value());
  EXPECT_TRUE(dropped.empty());
}

}  // namespace
}  // namespace convserve
