#include "server/backend_factory.h"

#include "absl/strings/str_cat.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/status_macros.h"
#if CONVSERVE_WITH_CUDA
#include "engine/cudnn/cudnn_backend.h"
#endif

namespace convserve {
namespace {

absl::StatusOr<BackendChoice> MakeCpu(const BackendConfig& config, const std::string& reason) {
  ASSIGN_OR_RETURN(std::unique_ptr<CpuBackend> cpu, CpuBackend::Create({config.cpu_threads}));
  return BackendChoice{std::move(cpu), absl::StrCat("serving on CPU (", reason, ")")};
}

#if CONVSERVE_WITH_CUDA
absl::StatusOr<BackendChoice> MakeCudnn(const BackendConfig& config) {
  CudnnBackendOptions options;
  options.device = config.gpu;
  ASSIGN_OR_RETURN(options.selection.search, ParseEngineSearch(config.engine_selection));
  options.selection.deterministic_only = config.deterministic;
  options.selection.strict_float32 = config.strict_float32;
  options.selection.max_workspace_bytes = config.max_workspace_bytes;
  options.selection.autotune_candidates = config.autotune_candidates;
  if (!config.engine_blocklist.empty()) {
    ASSIGN_OR_RETURN(options.selection.blocklist, ReadEngineBlocklist(config.engine_blocklist));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<CudnnBackend> backend, CudnnBackend::Create(options));
  return BackendChoice{std::move(backend), absl::StrCat("serving on GPU ", config.gpu)};
}
#endif

}  // namespace

absl::StatusOr<BackendChoice> MakeBackend(const BackendConfig& config) {
  if (config.name != "auto" && config.name != "cpu" && config.name != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend must be auto, cpu or cuda, got '", config.name, "'"));
  }
  if (config.name == "cpu") return MakeCpu(config, "--backend=cpu");
#if CONVSERVE_WITH_CUDA
  if (config.name == "cuda") return MakeCudnn(config);
  if (CudaDeviceCount() == 0) return MakeCpu(config, "--backend=auto and no GPU is visible");
  return MakeCudnn(config);
#else
  if (config.name == "cuda") {
    return absl::FailedPreconditionError(
        "--backend=cuda: this build has no cuDNN backend (built with CONVSERVE_CUDA=OFF or "
        "without the CUDA toolkit); use --backend=cpu or auto");
  }
  return MakeCpu(config, "--backend=auto and this build has no GPU backend");
#endif
}

}  // namespace convserve
