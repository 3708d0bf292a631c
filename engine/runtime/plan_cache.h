// A bounded, single-flight cache of expensive-to-build values (cuDNN plans,
// engine choices, device weights), keyed by PlanKey.
//
// - Any number of concurrent misses on one key run one build; the others wait
//   for it. A build for one key never holds the lock that lookups of other
//   keys take.
// - A failed build is reported to every waiter and remembered for
//   `failure_ttl`, so a bad shape cannot cause a rebuild storm.
// - Bounded by entries and by bytes (the builder reports each value's bytes);
//   least recently used first out, never a value in use (one a caller still
//   holds). While every entry is in use the cache may stay above its bounds.
//
// Thread-safe.
#ifndef CONVSERVE_ENGINE_RUNTIME_PLAN_CACHE_H_
#define CONVSERVE_ENGINE_RUNTIME_PLAN_CACHE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/runtime/plan_key.h"

namespace convserve {

struct PlanCacheOptions {
  // Most values kept.
  int64_t max_entries = 4096;
  // Most bytes (as reported by builders) kept.
  int64_t max_bytes = int64_t{8} << 30;
  // How long a failed build is answered from the cache.
  absl::Duration failure_ttl = absl::Seconds(10);
  // Clock; tests replace it.
  std::function<absl::Time()> now = [] { return absl::Now(); };
};

struct PlanCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;  // lookups that started a build
  int64_t waits = 0;   // lookups that waited for another caller's build
  int64_t builds_ok = 0;
  int64_t builds_failed = 0;
  int64_t failures_served = 0;  // lookups answered by a remembered failure
  int64_t evictions = 0;
  int64_t entries = 0;
  int64_t bytes = 0;
};

template <typename Value>
class PlanCache {
 public:
  struct Built {
    std::shared_ptr<Value> value;
    // What the value costs to keep (host and device), for the byte bound.
    int64_t bytes = 0;
  };
  using Builder = std::function<absl::StatusOr<Built>()>;

  explicit PlanCache(PlanCacheOptions options) : options_(std::move(options)) {}

  // The value for `key`, built by `build` on a miss. The returned pointer
  // keeps the value alive and marks it in use (not evictable) while held.
  absl::StatusOr<std::shared_ptr<Value>> GetOrBuild(const PlanKey& key, const Builder& build) {
    std::shared_ptr<Entry> entry;
    bool builder = false;
    {
      absl::MutexLock lock(&mu_);
      auto it = entries_.find(key);
      if (it != entries_.end() && it->second->done.HasBeenNotified() &&
          !it->second->result.ok() && options_.now() >= it->second->failed_until) {
        RemoveLocked(it);  // the failure expired: build again
        it = entries_.end();
      }
      if (it == entries_.end()) {
        entry = std::make_shared<Entry>();
        entry->key = key;
        entries_.emplace(key, entry);
        builder = true;
        ++stats_.misses;
      } else {
        entry = it->second;
        if (!entry->done.HasBeenNotified()) {
          ++stats_.waits;
        } else if (entry->result.ok()) {
          ++stats_.hits;
          lru_.splice(lru_.begin(), lru_, entry->lru_position);
          return *entry->result;
        } else {
          ++stats_.failures_served;
          return entry->result.status();
        }
      }
    }
    if (!builder) {
      entry->done.WaitForNotification();
      return entry->result;
    }
    absl::StatusOr<Built> built = build();
    absl::MutexLock lock(&mu_);
    if (built.ok()) {
      entry->result = built->value;
      entry->bytes = built->bytes;
      ++stats_.builds_ok;
    } else {
      entry->result = built.status();
      entry->failed_until = options_.now() + options_.failure_ttl;
      ++stats_.builds_failed;
    }
    // The entry may have been erased while building (EraseIf); then it only
    // answers the callers already waiting on it.
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second == entry && built.ok()) {
      lru_.push_front(entry);
      entry->lru_position = lru_.begin();
      entry->in_lru = true;
      bytes_ += entry->bytes;
      EvictLocked();
    }
    entry->done.Notify();
    return entry->result;
  }

  // Drops every value whose key matches (e.g. a graph being unloaded). Values
  // in use stay alive with their holders; waiters on a build still get it.
  void EraseIf(const std::function<bool(const PlanKey&)>& matches) {
    absl::MutexLock lock(&mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      auto next = std::next(it);
      if (matches(it->first)) RemoveLocked(it);
      it = next;
    }
  }

  // Changes whenever a value leaves the cache (erased, evicted, or a
  // failure expired): a caller that remembers values it got may keep using
  // them while this is unchanged, as a lookup would return the same ones.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

  PlanCacheStats stats() const {
    absl::MutexLock lock(&mu_);
    PlanCacheStats stats = stats_;
    stats.entries = static_cast<int64_t>(lru_.size());
    stats.bytes = bytes_;
    return stats;
  }

 private:
  struct Entry {
    PlanKey key;
    absl::Notification done;
    absl::StatusOr<std::shared_ptr<Value>> result = absl::UnknownError("building");
    int64_t bytes = 0;
    absl::Time failed_until;
    bool in_lru = false;
    typename std::list<std::shared_ptr<Entry>>::iterator lru_position;
  };
  using EntryMap = absl::flat_hash_map<PlanKey, std::shared_ptr<Entry>>;

  void RemoveLocked(typename EntryMap::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Entry& entry = *it->second;
    if (entry.in_lru) {
      lru_.erase(entry.lru_position);
      entry.in_lru = false;
      bytes_ -= entry.bytes;
    }
    entries_.erase(it);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }

  // Evicts least recently used values not in use until within both bounds.
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = lru_.end();
    while ((static_cast<int64_t>(lru_.size()) > options_.max_entries ||
            bytes_ > options_.max_bytes) &&
           it != lru_.begin()) {
      --it;
      const std::shared_ptr<Entry>& entry = *it;
      // Held only by the cache: one reference in `result`.
      const bool in_use = entry->result.ok() && entry->result->use_count() > 1;
      if (in_use) continue;
      auto victim = it++;
      ++stats_.evictions;
      auto map_it = entries_.find((*victim)->key);
      RemoveLocked(map_it);
    }
  }

  const PlanCacheOptions options_;
  mutable absl::Mutex mu_;
  EntryMap entries_ ABSL_GUARDED_BY(mu_);
  // Built values, most recently used first.
  std::list<std::shared_ptr<Entry>> lru_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  PlanCacheStats stats_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> generation_{0};
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_PLAN_CACHE_H_
