// The on-disk store of what plan searches learned, shared by restarts and by
// every process pointed at the same directory (the server and its engine
// probers; several replicas on one volume). Each record is one small file,
// <dir>/<kind>/<sha256 of key>.rec, written to a temporary file and renamed
// into place, so readers never see half a record; a header with a format
// version and a SHA-256 of the body guards against truncated, corrupt or
// foreign files, which are ignored with one log line (and rebuilt by whoever
// needs them). Kinds today: "quarantine" (engine candidates that faulted)
// and "choice" (what a layer search decided; engine_choice_store.h).
// Thread-safe.
#ifndef CONVSERVE_ENGINE_RUNTIME_PLAN_STORE_H_
#define CONVSERVE_ENGINE_RUNTIME_PLAN_STORE_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace convserve {

class PlanStore {
 public:
  // Creates `directory` (and parents) when missing. An empty directory keeps
  // records in memory only, for this process's lifetime.
  // FAILED_PRECONDITION when the directory cannot be created or written.
  static absl::StatusOr<std::unique_ptr<PlanStore>> Open(const std::string& directory);

  // Stores `value` (any bytes) under (kind, key), replacing an older record.
  absl::Status Put(const std::string& kind, const std::string& key, const std::string& value);
  // The value stored under (kind, key), from memory or disk; nullopt when
  // there is none or the file is not a valid record of that key.
  std::optional<std::string> Get(const std::string& kind, const std::string& key);

  // Empty when records live in memory only.
  const std::string& directory() const { return directory_; }

 private:
  explicit PlanStore(std::string directory) : directory_(std::move(directory)) {}
  std::string PathFor(const std::string& kind, const std::string& key) const;

  const std::string directory_;
  absl::Mutex mu_;
  // Records this process wrote or read (a record never changes once valid).
  absl::flat_hash_map<std::string, std::string> known_ ABSL_GUARDED_BY(mu_);
  // Files already reported as invalid, so each is logged once.
  absl::flat_hash_set<std::string> reported_ ABSL_GUARDED_BY(mu_);
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_PLAN_STORE_H_
