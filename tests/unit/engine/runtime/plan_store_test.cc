// The plan store: records survive a reopen (a restart), a corrupt, truncated
// or foreign file is ignored (and a later Put replaces it), concurrent
// writers never leave half a record, and a store without a directory keeps
// records in memory.
#include "engine/runtime/plan_store.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace convserve {
namespace {

class PlanStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/plan_store_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = std::string(pattern) + "/nested/store";
  }
  void TearDown() override { std::filesystem::remove_all(std::filesystem::path(dir_).parent_path().parent_path()); }

  std::unique_ptr<PlanStore> Open() {
    absl::StatusOr<std::unique_ptr<PlanStore>> store = PlanStore::Open(dir_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }
  // The one record file of kind "quarantine".
  std::string RecordPath() const {
    for (const auto& entry : std::filesystem::directory_iterator(dir_ + "/quarantine")) {
      return entry.path().string();
    }
    return "";
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  std::string dir_;
};

TEST_F(PlanStoreTest, RecordsSurviveAReopen) {
  ASSERT_TRUE(Open()->Put("quarantine", "key one", "value\nwith lines \"and\" quotes").ok());
  std::unique_ptr<PlanStore> reopened = Open();
  EXPECT_EQ(reopened->Get("quarantine", "key one"), "value\nwith lines \"and\" quotes");
  EXPECT_EQ(reopened->Get("quarantine", "key two"), std::nullopt);
  EXPECT_EQ(reopened->Get("choice", "key one"), std::nullopt) << "kinds are separate";
}

TEST_F(PlanStoreTest, PutReplacesAnOlderRecord) {
  std::unique_ptr<PlanStore> store = Open();
  ASSERT_TRUE(store->Put("quarantine", "k", "old").ok());
  ASSERT_TRUE(store->Put("quarantine", "k", "new").ok());
  EXPECT_EQ(Open()->Get("quarantine", "k"), "new");
}

struct Damage {
  const char* name;
  std::string (*apply)(const std::string& contents);
};

class PlanStoreDamageTest : public PlanStoreTest, public ::testing::WithParamInterface<Damage> {};

TEST_P(PlanStoreDamageTest, DamagedRecordIsIgnoredThenRebuilt) {
  ASSERT_TRUE(Open()->Put("quarantine", "the key", "the value").ok());
  const std::string path = RecordPath();
  const std::string damaged = GetParam().apply(Read(path));
  ASSERT_NE(damaged, Read(path));
  {
    std::ofstream out(path, std::ios::trunc);
    out << damaged;
  }
  std::unique_ptr<PlanStore> store = Open();
  EXPECT_EQ(store->Get("quarantine", "the key"), std::nullopt);
  // Whoever needs it writes it again, and then it reads back.
  ASSERT_TRUE(store->Put("quarantine", "the key", "rebuilt").ok());
  EXPECT_EQ(Open()->Get("quarantine", "the key"), "rebuilt");
}

INSTANTIATE_TEST_SUITE_P(
    Damages, PlanStoreDamageTest,
    ::testing::Values(
        Damage{"Truncated", [](const std::string& c) { return c.substr(0, c.size() / 2); }},
        Damage{"Empty", [](const std::string&) { return std::string(); }},
        Damage{"FlippedValueByte",
               [](const std::string& c) {
                 std::string d = c;
                 d[d.find("value ") + 7] ^= 1;
                 return d;
               }},
        Damage{"OtherFormatVersion",
               [](const std::string& c) {
                 std::string d = c;
                 d.replace(d.find(" 1\n"), 3, " 2\n");
                 return d;
               }},
        Damage{"Garbage", [](const std::string&) { return std::string("\x01\x02 not a record"); }}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(PlanStoreTest, RecordOfAnotherKeyUnderThisNameIsIgnored) {
  std::unique_ptr<PlanStore> store = Open();
  ASSERT_TRUE(store->Put("quarantine", "key A", "a").ok());
  const std::string path_a = RecordPath();
  const std::string record_a = Read(path_a);
  ASSERT_TRUE(store->Put("quarantine", "key B", "b").ok());
  // Copy A's (valid) record over B's file: a renamed or colliding file.
  std::string path_b;
  for (const auto& entry : std::filesystem::directory_iterator(dir_ + "/quarantine")) {
    if (entry.path().string() != path_a) path_b = entry.path().string();
  }
  ASSERT_FALSE(path_b.empty());
  {
    std::ofstream out(path_b, std::ios::trunc);
    out << record_a;
  }
  EXPECT_EQ(Open()->Get("quarantine", "key B"), std::nullopt);
  EXPECT_EQ(Open()->Get("quarantine", "key A"), "a");
}

TEST_F(PlanStoreTest, ConcurrentWritersLeaveWholeRecords) {
  // Two stores (as two processes would) write the same keys at once.
  std::unique_ptr<PlanStore> first = Open();
  std::unique_ptr<PlanStore> second = Open();
  constexpr int kKeys = 50;
  const auto write = [&](PlanStore* store, const char* who) {
    for (int r = 0; r < 4; ++r) {
      for (int k = 0; k < kKeys; ++k) {
        EXPECT_TRUE(store->Put("quarantine", absl::StrCat("key", k), absl::StrCat(who, k)).ok());
      }
    }
  };
  std::thread a(write, first.get(), "first");
  std::thread b(write, second.get(), "second");
  a.join();
  b.join();
  std::unique_ptr<PlanStore> reader = Open();
  for (int k = 0; k < kKeys; ++k) {
    const std::optional<std::string> value = reader->Get("quarantine", absl::StrCat("key", k));
    ASSERT_TRUE(value.has_value()) << k;
    EXPECT_TRUE(*value == absl::StrCat("first", k) || *value == absl::StrCat("second", k)) << *value;
  }
  int temporaries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_ + "/quarantine")) {
    temporaries += entry.path().string().find(".tmp.") != std::string::npos;
  }
  EXPECT_EQ(temporaries, 0);
}

TEST(PlanStoreMemoryTest, EmptyDirectoryKeepsRecordsInMemory) {
  absl::StatusOr<std::unique_ptr<PlanStore>> store = PlanStore::Open("");
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->Get("quarantine", "k"), std::nullopt);
  ASSERT_TRUE((*store)->Put("quarantine", "k", "v").ok());
  EXPECT_EQ((*store)->Get("quarantine", "k"), "v");
}

TEST(PlanStoreOpenTest, UnwritableDirectoryIsRefused) {
  absl::StatusOr<std::unique_ptr<PlanStore>> store = PlanStore::Open("/proc/convserve_store");
  EXPECT_TRUE(absl::IsFailedPrecondition(store.status())) << store.status();
}

}  // namespace
}  // namespace convserve
