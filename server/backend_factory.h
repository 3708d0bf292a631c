// Chooses the inference backend named by --backend.
#ifndef CONVSERVE_SERVER_BACKEND_FACTORY_H_
#define CONVSERVE_SERVER_BACKEND_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/backend.h"

namespace convserve {

struct BackendChoice {
  std::unique_ptr<Backend> backend;
  // Why this backend was chosen, for the start-up log.
  std::string reason;
};

// `name` is "auto", "cpu" or "cuda". auto takes the GPU backend when the build
// has one and a GPU is present, and otherwise serves on CPU and says why.
absl::StatusOr<BackendChoice> MakeBackend(const std::string& name, int cpu_threads);

}  // namespace convserve

#endif  // CONVSERVE_SERVER_BACKEND_FACTORY_H_
