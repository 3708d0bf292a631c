// Calls that still exist, and a wait for none to be left: what a call uses
// (a channel, a completion queue) outlives it by waiting here. Used by the
// client's senders and the server's completion-queue calls.
#ifndef CONVSERVE_ENGINE_LIVE_CALLS_H_
#define CONVSERVE_ENGINE_LIVE_CALLS_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace convserve {

class LiveCalls {
 public:
  // Held by one call for as long as it exists: its first member, so that it
  // is destroyed after the others.
  class Hold {
   public:
    explicit Hold(LiveCalls* calls) : calls_(calls) {
      absl::MutexLock lock(&calls_->mu_);
      ++calls_->count_;
    }
    ~Hold() {
      absl::MutexLock lock(&calls_->mu_);
      --calls_->count_;
    }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    LiveCalls* const calls_;
  };

  // Returns once no Hold is left.
  void AwaitNone() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &LiveCalls::NoneLocked));
  }
  // The same, giving up after `timeout`: false, and `*left` (when not null)
  // says how many calls were still there.
  bool AwaitNoneFor(absl::Duration timeout, int64_t* left) {
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(this, &LiveCalls::NoneLocked), timeout)) return true;
    if (left != nullptr) *left = count_;
    return false;
  }

 private:
  bool NoneLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return count_ == 0; }

  absl::Mutex mu_;
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_LIVE_CALLS_H_
