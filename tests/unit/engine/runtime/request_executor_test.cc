// RequestExecutor: everything submitted runs once, on its threads, in
// parallel; Drain returns only after what is queued and running (and what
// it holds) is gone, and refuses later tasks; a full queue refuses at once;
// the destructor runs what is still queued; its threads carry the name
// asked for, numbered.
#include "engine/runtime/request_executor.h"

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "engine/thread_name.h"
#include "gtest/gtest.h"

namespace convserve {
namespace {

RequestExecutorOptions Threads(int threads, int max_queued = 1 << 20) {
  RequestExecutorOptions options;
  options.threads = threads;
  options.max_queued = max_queued;
  return options;
}

TEST(RequestExecutorTest, RunsEverySubmitOnceFromManySubmitters) {
  RequestExecutor executor(Threads(3));
  constexpr int kPosters = 4, kEach = 2500;
  std::vector<std::atomic<int>> ran(kPosters * kEach);
  std::vector<std::thread> posters;
  std::atomic<int> refused{0};
  for (int p = 0; p < kPosters; ++p) {
    posters.emplace_back([&, p] {
      for (int i = 0; i < kEach; ++i) {
        if (!executor.Submit([&ran, k = p * kEach + i] { ++ran[k]; }).ok()) ++refused;
      }
    });
  }
  for (std::thread& t : posters) t.join();
  executor.Drain();
  EXPECT_EQ(refused.load(), 0);
  for (size_t k = 0; k < ran.size(); ++k) ASSERT_EQ(ran[k].load(), 1) << "task " << k;
}

TEST(RequestExecutorTest, TasksRunOffTheSubmittersThreadAndInParallel) {
  RequestExecutor executor(Threads(2));
  EXPECT_EQ(executor.threads(), 2);
  // Two tasks that each wait for the other: they finish only if both run at
  // once.
  absl::Notification first_started, second_started;
  std::atomic<int> finished{0};
  std::atomic<bool> on_submitter{false};
  const std::thread::id submitter = std::this_thread::get_id();
  ASSERT_TRUE(executor
                  .Submit([&] {
                    on_submitter = on_submitter || std::this_thread::get_id() == submitter;
                    first_started.Notify();
                    if (second_started.WaitForNotificationWithTimeout(absl::Seconds(30))) {
                      ++finished;
                    }
                  })
                  .ok());
  ASSERT_TRUE(executor
                  .Submit([&] {
                    second_started.Notify();
                    if (first_started.WaitForNotificationWithTimeout(absl::Seconds(30))) {
                      ++finished;
                    }
                  })
                  .ok());
  executor.Drain();
  EXPECT_EQ(finished.load(), 2);
  EXPECT_FALSE(on_submitter.load());
}

TEST(RequestExecutorTest, DrainWaitsForRunningTasksAndWhatTheyHold) {
  RequestExecutor executor(Threads(1));
  absl::Notification started, release;
  auto held = std::make_shared<int>(7);
  std::weak_ptr<int> watch = held;
  ASSERT_TRUE(executor
                  .Submit([&started, &release, held = std::move(held)] {
                    started.Notify();
                    release.WaitForNotification();
                  })
                  .ok());
  started.WaitForNotification();
  std::atomic<bool> drained{false};
  std::thread waiter([&] {
    executor.Drain();
    drained = true;
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(drained.load()) << "Drain returned while a task ran";
  release.Notify();
  waiter.join();
  EXPECT_TRUE(drained.load());
  EXPECT_TRUE(watch.expired()) << "the task's captures outlived Drain";
  EXPECT_EQ(executor.Submit([] {}).code(), absl::StatusCode::kUnavailable);
}

TEST(RequestExecutorTest, FullQueueRefusesAtOnce) {
  RequestExecutor executor(Threads(1, /*max_queued=*/2));
  absl::Notification started, release;
  ASSERT_TRUE(executor
                  .Submit([&] {
                    started.Notify();
                    release.WaitForNotification();
                  })
                  .ok());
  started.WaitForNotification();
  std::atomic<int> ran{0};
  EXPECT_TRUE(executor.Submit([&] { ++ran; }).ok());
  EXPECT_TRUE(executor.Submit([&] { ++ran; }).ok());
  EXPECT_EQ(executor.Submit([&] { ++ran; }).code(), absl::StatusCode::kResourceExhausted);
  release.Notify();
  executor.Drain();
  EXPECT_EQ(ran.load(), 2);
}

TEST(RequestExecutorTest, DestructorRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  absl::Notification release;
  {
    RequestExecutor executor(Threads(1));
    ASSERT_TRUE(executor.Submit([&] { release.WaitForNotification(); }).ok());
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(executor.Submit([&] { ++ran; }).ok());
    release.Notify();
  }
  EXPECT_EQ(ran.load(), 100);
}

TEST(RequestExecutorTest, ThreadsCarryTheirNumberedName) {
  RequestExecutorOptions options = Threads(2);
  options.thread_name = "cs-test";
  RequestExecutor executor(options);
  absl::Mutex mu;
  std::set<std::string> names;
  int started = 0;
  // Both tasks wait for each other, so each runs on its own thread.
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(executor
                    .Submit([&] {
                      absl::MutexLock lock(&mu);
                      names.insert(ThisThreadName());
                      ++started;
                      mu.Await(absl::Condition(
                          +[](int* n) { return *n == 2; }, &started));
                    })
                    .ok());
  }
  executor.Drain();
  EXPECT_EQ(names, (std::set<std::string>{"cs-test0", "cs-test1"}));
}

TEST(ThreadNameTest, LongNamesAreCutToWhatTheKernelKeeps) {
  std::string seen_short, seen_long;
  std::thread([&] {
    NameThisThread("cs-gpu0-w1");
    seen_short = ThisThreadName();
    NameThisThread("a-name-longer-than-fifteen-bytes");
    seen_long = ThisThreadName();
  }).join();
  EXPECT_EQ(seen_short, "cs-gpu0-w1");
  EXPECT_EQ(seen_long, "a-name-longer-t");
  EXPECT_EQ(seen_long.size(), kMaxThreadNameBytes);
}

}  // namespace
}  // namespace convserve
