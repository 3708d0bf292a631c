// One worker's captured requests: CUDA graphs of a request's layer launches,
// replayed by later requests of the same graph, input shape and pointers.
//
// What a captured graph depends on, and how each is kept honest:
// - the graph's device weights and each layer's cuDNN plan: held as weak
//   references and compared with the request's own objects on every lookup;
//   an unloaded graph, a reloaded one (new weights) or an evicted or rebuilt
//   plan makes the entry stale, and it is dropped, never run;
// - the first layer's input and the last layer's output (a worker buffer, or
//   a client's CUDA region read and written in place): part of the key;
// - the worker's own buffers (activations, workspace): the worker calls
//   Clear() whenever one is reallocated.
// A key is captured the second time it runs on the worker, not the first:
// the first run warms cuDNN and lazily loaded kernels outside capture, and
// pointers seen only once (one-off in-place regions) never cost a capture.
// Bounded: `max_entries` per worker, least recently used out, and at most
// `max_variants` pointer variants per graph and input shape (a further
// variant takes the least recently used one to update in place, but only
// once that one has not run for `variant_idle`: a client cycling through
// more CUDA regions than that would otherwise recapture on every request,
// which costs more than the plain launches it runs instead).
//
// No CUDA here: `Value` owns the executable graphs (tests use a fake).
// Thread-safe: the worker looks up and inserts; unloading a graph erases
// from any thread.
#ifndef CONVSERVE_ENGINE_RUNTIME_CUDA_GRAPH_CACHE_H_
#define CONVSERVE_ENGINE_RUNTIME_CUDA_GRAPH_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/tensor.h"

namespace convserve {

struct CudaGraphKey {
  // Graph fingerprint.
  std::string graph_id;
  // Logical input dims of the request.
  Shape input_shape;
  // The first layer's input and the last layer's output, as captured.
  const void* input = nullptr;
  const void* output = nullptr;

  friend bool operator==(const CudaGraphKey& a, const CudaGraphKey& b) {
    return a.graph_id == b.graph_id && a.input_shape == b.input_shape && a.input == b.input &&
           a.output == b.output;
  }
  template <typename H>
  friend H AbslHashValue(H h, const CudaGraphKey& k) {
    return H::combine(std::move(h), k.graph_id, k.input_shape, k.input, k.output);
  }
  // Graph and input shape, without the pointers.
  std::string Topology() const {
    return absl::StrCat(graph_id, "/", absl::StrJoin(input_shape, "x"));
  }
  std::string ToString() const {
    return absl::StrFormat("%s/in%p/out%p", Topology(), input, output);
  }
};

struct CudaGraphCacheOptions {
  // Captured requests kept per worker; least recently used out.
  int max_entries = 64;
  // Of those, pointer variants per graph and input shape.
  int max_variants = 4;
  // Keys remembered as run once (captured when they run again).
  int max_seen = 256;
  // How long the least recently used variant of a full graph and shape
  // must have gone unused before a new variant may take it.
  absl::Duration variant_idle = absl::Seconds(1);
};

struct CudaGraphStats {
  // Requests captured into graphs (new executables or in-place updates).
  int64_t captures = 0;
  // Of those, captured into an existing executable (cudaGraphExecUpdate).
  int64_t updates = 0;
  // Requests that ran a graph an earlier request captured.
  int64_t replays = 0;
  // Captures that failed: the request ran plain launches, and its graph and
  // shape are not captured again on that worker.
  int64_t fallbacks = 0;
  // Entries dropped because what they captured changed or went away
  // (unload, reload, plan eviction or rebuild, buffer growth).
  int64_t invalidations = 0;
  // Entries dropped to stay within the bounds.
  int64_t evictions = 0;
  // Requests that ran plain launches, uncaptured, because every pointer
  // variant of their graph and shape had run within `variant_idle`.
  int64_t variant_waits = 0;
  // Entries held now.
  int64_t entries = 0;

  void Add(const CudaGraphStats& o) {
    captures += o.captures;
    updates += o.updates;
    replays += o.replays;
    fallbacks += o.fallbacks;
    invalidations += o.invalidations;
    evictions += o.evictions;
    variant_waits += o.variant_waits;
    entries += o.entries;
  }
};

template <typename Value>
class CudaGraphCache {
 public:
  // The objects a capture used (weights, plans), in a fixed order per key.
  using Dependencies = std::vector<std::shared_ptr<const void>>;

  explicit CudaGraphCache(CudaGraphCacheOptions options) : options_(options) {}

  // The value captured for `key` with exactly these (live) dependencies, or
  // null. A stale entry (a dependency gone or replaced) is dropped.
  std::shared_ptr<Value> Find(const CudaGraphKey& key, const Dependencies& dependencies) {
    std::vector<std::shared_ptr<Value>> dropped;  // destroyed after the lock
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return nullptr;
    Entry& entry = *it->second;
    if (!SameDependencies(entry, dependencies)) {
      ++stats_.invalidations;
      RemoveLocked(it, &dropped);
      return nullptr;
    }
    lru_.splice(lru_.begin(), lru_, it->second);
    entry.used = absl::Now();
    ++stats_.replays;
    return entry.value;
  }

  // After Find missed: whether to capture `key` now. False the first time
  // the key runs (it is remembered), for graphs and shapes that failed to
  // capture on this worker, and while the key's graph and shape hold
  // `max_variants` variants that all ran within `variant_idle` (the key
  // stays remembered).
  bool ShouldCapture(const CudaGraphKey& key) {
    absl::MutexLock lock(&mu_);
    if (uncapturable_.contains(key.Topology())) return false;
    auto seen = seen_index_.find(key);
    if (seen != seen_index_.end()) {
      const auto oldest = OldestVariantLocked(key);
      if (oldest.first >= options_.max_variants &&
          absl::Now() - oldest.second->used < options_.variant_idle) {
        ++stats_.variant_waits;
        return false;
      }
      seen_.erase(seen->second);
      seen_index_.erase(seen);
      return true;
    }
    seen_.push_front(key);
    seen_index_[key] = seen_.begin();
    while (static_cast<int>(seen_.size()) > options_.max_seen) {
      seen_index_.erase(seen_.back());
      seen_.pop_back();
    }
    return false;
  }

  // When `key`'s graph and shape already hold `max_variants` entries: the
  // least recently used of them, taken out of the cache, for the caller to
  // update in place (and Insert under `key`) or to drop. Else null.
  std::shared_ptr<Value> TakeVariant(const CudaGraphKey& key) {
    absl::MutexLock lock(&mu_);
    const auto [variants, oldest] = OldestVariantLocked(key);
    if (variants < options_.max_variants || oldest == lru_.end()) return nullptr;
    std::shared_ptr<Value> value = oldest->value;
    ++stats_.evictions;
    entries_.erase(oldest->key);
    lru_.erase(oldest);
    return value;
  }

  // A capture of `key` with `dependencies`; `updated` when it was captured
  // into a value TakeVariant gave out.
  void Insert(const CudaGraphKey& key, const Dependencies& dependencies,
              std::shared_ptr<Value> value, bool updated) {
    std::vector<std::shared_ptr<Value>> dropped;
    absl::MutexLock lock(&mu_);
    ++stats_.captures;
    if (updated) ++stats_.updates;
    auto existing = entries_.find(key);
    if (existing != entries_.end()) RemoveLocked(existing, &dropped);
    Entry entry;
    entry.key = key;
    entry.value = std::move(value);
    entry.used = absl::Now();
    for (const auto& dependency : dependencies) entry.dependencies.push_back(dependency);
    lru_.push_front(std::move(entry));
    entries_[key] = lru_.begin();
    while (static_cast<int>(lru_.size()) > options_.max_entries) {
      ++stats_.evictions;
      RemoveLocked(entries_.find(lru_.back().key), &dropped);
    }
  }

  // `key`'s graph and shape failed to capture: never captured again here
  // (until the graph is unloaded).
  void MarkUncapturable(const CudaGraphKey& key) {
    std::vector<std::shared_ptr<Value>> dropped;
    absl::MutexLock lock(&mu_);
    ++stats_.fallbacks;
    if (static_cast<int>(uncapturable_.size()) >= options_.max_seen) uncapturable_.clear();
    uncapturable_.insert(key.Topology());
    for (auto it = entries_.begin(); it != entries_.end();) {
      auto next = std::next(it);
      if (it->first.Topology() == key.Topology()) RemoveLocked(it, &dropped);
      it = next;
    }
  }

  // Whether `key`'s graph and shape are marked uncapturable.
  bool IsUncapturable(const CudaGraphKey& key) const {
    absl::MutexLock lock(&mu_);
    return uncapturable_.contains(key.Topology());
  }

  // Forgets everything about `graph_id` (it is being unloaded).
  void EraseGraph(const std::string& graph_id) {
    std::vector<std::shared_ptr<Value>> dropped;
    absl::MutexLock lock(&mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      auto next = std::next(it);
      if (it->first.graph_id == graph_id) {
        ++stats_.invalidations;
        RemoveLocked(it, &dropped);
      }
      it = next;
    }
    for (auto it = seen_.begin(); it != seen_.end();) {
      auto next = std::next(it);
      if (it->graph_id == graph_id) {
        seen_index_.erase(*it);
        seen_.erase(it);
      }
      it = next;
    }
    const std::string prefix = absl::StrCat(graph_id, "/");
    for (auto it = uncapturable_.begin(); it != uncapturable_.end();) {
      auto next = std::next(it);
      if (it->rfind(prefix, 0) == 0) uncapturable_.erase(it);
      it = next;
    }
  }

  // Drops every entry (the worker's buffers moved). Remembered keys and
  // uncapturable marks stay.
  void Clear() {
    std::vector<std::shared_ptr<Value>> dropped;
    absl::MutexLock lock(&mu_);
    stats_.invalidations += static_cast<int64_t>(lru_.size());
    for (Entry& entry : lru_) dropped.push_back(std::move(entry.value));
    lru_.clear();
    entries_.clear();
  }

  CudaGraphStats stats() const {
    absl::MutexLock lock(&mu_);
    CudaGraphStats stats = stats_;
    stats.entries = static_cast<int64_t>(lru_.size());
    return stats;
  }

 private:
  struct Entry {
    CudaGraphKey key;
    std::shared_ptr<Value> value;
    std::vector<std::weak_ptr<const void>> dependencies;
    // When it was captured or last replayed.
    absl::Time used;
  };
  using Lru = std::list<Entry>;
  using EntryMap = absl::flat_hash_map<CudaGraphKey, typename Lru::iterator>;

  // Compared through the control block: a dependency that died and one made
  // later at the same address are different.
  static bool SameDependencies(const Entry& entry, const Dependencies& dependencies) {
    if (entry.dependencies.size() != dependencies.size()) return false;
    for (size_t i = 0; i < dependencies.size(); ++i) {
      const std::shared_ptr<const void> held = entry.dependencies[i].lock();
      if (held == nullptr || held != dependencies[i]) return false;
      if (held.owner_before(dependencies[i]) || dependencies[i].owner_before(held)) return false;
    }
    return true;
  }

  // How many entries `key`'s graph and shape hold, and the least recently
  // used of them (lru_.end() when none).
  std::pair<int, typename Lru::iterator> OldestVariantLocked(const CudaGraphKey& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int variants = 0;
    auto oldest = lru_.end();
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      if (it->key.graph_id == key.graph_id && it->key.input_shape == key.input_shape) {
        ++variants;
        oldest = it;
      }
    }
    return {variants, oldest};
  }

  void RemoveLocked(typename EntryMap::iterator it, std::vector<std::shared_ptr<Value>>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    dropped->push_back(std::move(it->second->value));
    lru_.erase(it->second);
    entries_.erase(it);
  }

  const CudaGraphCacheOptions options_;
  mutable absl::Mutex mu_;
  // Most recently used first.
  Lru lru_ ABSL_GUARDED_BY(mu_);
  EntryMap entries_ ABSL_GUARDED_BY(mu_);
  // Keys run once, most recent first.
  std::list<CudaGraphKey> seen_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<CudaGraphKey, typename std::list<CudaGraphKey>::iterator> seen_index_
      ABSL_GUARDED_BY(mu_);
  // Topology() of graphs and shapes that failed to capture.
  absl::flat_hash_set<std::string> uncapturable_ ABSL_GUARDED_BY(mu_);
  CudaGraphStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_CUDA_GRAPH_CACHE_H_
