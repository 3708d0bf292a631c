// The CPU reference backend: exact float-accumulating convolution for every
// dtype, layout, activation, group count, dilation and 2-D/3-D shape. It is the
// test oracle for the GPU backend and the default where no GPU is present.
#ifndef CONVSERVE_ENGINE_CPU_CPU_BACKEND_H_
#define CONVSERVE_ENGINE_CPU_CPU_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/cpu/thread_pool.h"

namespace convserve {

struct CpuBackendOptions {
  // Threads that share one request's work; 0 means one per hardware thread.
  int threads = 0;
};

// Thread-safe: executables may run concurrently; they share the pool.
class CpuBackend : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(const CpuBackendOptions& options);

  std::string name() const override { return "cpu"; }
  std::string Describe() const override;
  absl::StatusOr<std::shared_ptr<Executable>> Compile(std::shared_ptr<const Graph> graph,
                                                      const Shape& input_shape) override;

 private:
  explicit CpuBackend(std::unique_ptr<ThreadPool> pool) : pool_(std::move(pool)) {}

  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CPU_CPU_BACKEND_H_
