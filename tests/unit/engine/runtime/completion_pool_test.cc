// CompletionPool: everything posted runs once, on the pool's threads, in
// parallel; AwaitIdle returns only after what is queued and running (and
// what it holds) is gone; the destructor runs what is still queued.
#include "engine/runtime/completion_pool.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace convserve {
namespace {

TEST(CompletionPoolTest, RunsEveryPostOnceFromManyPosters) {
  CompletionPool pool(3);
  constexpr int kPosters = 4, kEach = 2500;
  std::vector<std::atomic<int>> ran(kPosters * kEach);
  std::vector<std::thread> posters;
  for (int p = 0; p < kPosters; ++p) {
    posters.emplace_back([&, p] {
      for (int i = 0; i < kEach; ++i) pool.Post([&ran, k = p * kEach + i] { ++ran[k]; });
    });
  }
  for (std::thread& t : posters) t.join();
  pool.AwaitIdle();
  for (size_t k = 0; k < ran.size(); ++k) ASSERT_EQ(ran[k].load(), 1) << "work " << k;
}

TEST(CompletionPoolTest, WorkRunsOffThePostersThreadAndInParallel) {
  CompletionPool pool(2);
  EXPECT_EQ(pool.threads(), 2);
  // Two jobs that each wait for the other: they finish only if both run at
  // once.
  absl::Notification first_started, second_started;
  std::atomic<int> finished{0};
  std::atomic<bool> on_poster{false};
  const std::thread::id poster = std::this_thread::get_id();
  pool.Post([&] {
    on_poster = on_poster || std::this_thread::get_id() == poster;
    first_started.Notify();
    if (second_started.WaitForNotificationWithTimeout(absl::Seconds(30))) ++finished;
  });
  pool.Post([&] {
    second_started.Notify();
    if (first_started.WaitForNotificationWithTimeout(absl::Seconds(30))) ++finished;
  });
  pool.AwaitIdle();
  EXPECT_EQ(finished.load(), 2);
  EXPECT_FALSE(on_poster.load());
}

TEST(CompletionPoolTest, AwaitIdleWaitsForRunningWorkAndWhatItHolds) {
  CompletionPool pool(1);
  absl::Notification started, release;
  auto held = std::make_shared<int>(7);
  std::weak_ptr<int> watch = held;
  pool.Post([&started, &release, held = std::move(held)] {
    started.Notify();
    release.WaitForNotification();
  });
  started.WaitForNotification();
  std::atomic<bool> idle{false};
  std::thread waiter([&] {
    pool.AwaitIdle();
    idle = true;
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(idle.load()) << "AwaitIdle returned while work ran";
  release.Notify();
  waiter.join();
  EXPECT_TRUE(idle.load());
  EXPECT_TRUE(watch.expired()) << "the work's captures outlived AwaitIdle";
}

TEST(CompletionPoolTest, DestructorRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  absl::Notification release;
  {
    CompletionPool pool(1);
    pool.Post([&] { release.WaitForNotification(); });
    for (int i = 0; i < 100; ++i) pool.Post([&] { ++ran; });
    release.Notify();
  }
  EXPECT_EQ(ran.load(), 100);
}

}  // namespace
}  // namespace convserve
