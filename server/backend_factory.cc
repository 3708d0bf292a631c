#include "server/backend_factory.h"

#include <limits.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/runtime/backend_runner.h"
#include "engine/runtime/plan_store.h"
#include "engine/status_macros.h"
#include "spdlog/spdlog.h"
#if CONVSERVE_WITH_CUDA
#include "engine/cudnn/cudnn_backend.h"
#include "engine/cudnn/dependent_launch.h"
#include "engine/runtime/device_pool.h"
#endif

namespace convserve {
namespace {

absl::StatusOr<RunnerChoice> MakeCpu(const BackendConfig& config, const std::string& reason) {
  if (config.executor.threads < 1 || config.executor.max_queued < 1) {
    return absl::InvalidArgumentError(
        "--request_threads and --max_queued_requests must be >= 1");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<CpuBackend> cpu, CpuBackend::Create({config.cpu_threads}));
  return RunnerChoice{std::make_unique<BackendRunner>(std::move(cpu), config.executor),
                      absl::StrCat("serving on CPU (", reason, ")")};
}

#if CONVSERVE_WITH_CUDA
// `name` in the directory of the running executable.
std::string SiblingExecutable(const std::string& name) {
  char self[PATH_MAX];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0) return name;
  std::string path(self, static_cast<size_t>(length));
  return path.substr(0, path.rfind('/') + 1) + name;
}

// --plan_cache_dir=auto: the user's cache directory when it can be written,
// else none (a private temporary directory; verdicts then last one process).
std::string AutoPlanCacheDir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::string dir;
  if (xdg != nullptr && *xdg != '\0') {
    dir = absl::StrCat(xdg, "/convserve");
  } else if (home != nullptr && *home != '\0') {
    dir = absl::StrCat(home, "/.cache/convserve");
  }
  if (dir.empty()) return "";
  absl::StatusOr<std::unique_ptr<PlanStore>> store = PlanStore::Open(dir);
  if (!store.ok()) {
    spdlog::warn("--plan_cache_dir=auto: {}; quarantine verdicts will not outlive this process "
                 "(set --plan_cache_dir to a writable directory)",
                 std::string(store.status().message()));
    return "";
  }
  return dir;
}

absl::StatusOr<RunnerChoice> MakeGpu(const BackendConfig& config) {
  DevicePoolOptions options;
  options.devices = config.gpus;
  options.workers_per_device = config.workers_per_gpu;
  options.worker_spin = config.worker_spin;
  options.launch_ahead = config.launch_ahead;
  options.completion_threads = config.completion_threads;
  options.max_queued_per_device = config.executor.max_queued;
  ASSIGN_OR_RETURN(options.selection.search, ParseEngineSearch(config.engine_selection));
  options.selection.deterministic_only = config.deterministic;
  options.selection.strict_float32 = config.strict_float32;
  options.selection.direct_kernels = config.direct_kernels;
  SetDependentLaunch(config.dependent_launch);
  SetProgrammaticEntry(config.programmatic_entry);
  options.selection.max_workspace_bytes = config.max_workspace_bytes;
  options.selection.autotune_candidates = config.autotune_candidates;
  options.selection.autotune_knob_candidates = config.autotune_knob_candidates;
  if (!config.engine_blocklist.empty()) {
    ASSIGN_OR_RETURN(options.selection.blocklist, ReadEngineBlocklist(config.engine_blocklist));
  }
  options.errata_file = config.cudnn_errata;
  ASSIGN_OR_RETURN(options.selection.errata, CudnnErrata::Create(config.cudnn_errata));
  if (config.engine_prober) {
    options.prober_binary =
        config.prober_binary.empty() ? SiblingExecutable("convserve-prober") : config.prober_binary;
  }
  options.plan_cache_dir =
      config.plan_cache_dir == "auto" ? AutoPlanCacheDir() : config.plan_cache_dir;
  if (config.autotune_candidates < 1 || config.autotune_knob_candidates < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--autotune_candidates must be >= 1 and --autotune_knob_candidates >= 0, "
                     "got ", config.autotune_candidates, " and ", config.autotune_knob_candidates));
  }
  if (config.prober_candidate_timeout_seconds <= 0) {
    return absl::InvalidArgumentError("--prober_candidate_timeout_seconds must be > 0");
  }
  options.prober_candidate_timeout = absl::Seconds(config.prober_candidate_timeout_seconds);
  options.prober_log_level = config.log_level;
  options.cuda_graphs = config.cuda_graphs;
  options.fuse_pointwise_pairs = config.fuse_pointwise_pairs;
  options.testing_fault_graph = config.testing_fault_graph;
  options.testing_fault_candidate_rank = config.testing_fault_candidate_rank;
  ASSIGN_OR_RETURN(std::unique_ptr<DevicePool> pool, DevicePool::Create(options));
  return RunnerChoice{std::move(pool), "serving on GPU", /*gpu=*/true};
}
#endif

}  // namespace

absl::StatusOr<RunnerChoice> MakeRunner(const BackendConfig& config) {
  if (config.name != "auto" && config.name != "cpu" && config.name != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend must be auto, cpu or cuda, got '", config.name, "'"));
  }
  if (config.name == "cpu") return MakeCpu(config, "--backend=cpu");
#if CONVSERVE_WITH_CUDA
  if (config.name == "cuda") return MakeGpu(config);
  if (CudaDeviceCount() == 0) return MakeCpu(config, "--backend=auto and no GPU is visible");
  return MakeGpu(config);
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
