// Chooses the inference backend named by --backend.
#ifndef CONVSERVE_SERVER_BACKEND_FACTORY_H_
#define CONVSERVE_SERVER_BACKEND_FACTORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/backend.h"
#include "engine/runtime/request_executor.h"
#include "engine/runtime/request_runner.h"

namespace convserve {

struct BackendConfig {
  // "auto", "cpu" or "cuda".
  std::string name = "auto";
  // CPU backend threads; 0 = one per hardware thread.
  int cpu_threads = 0;
  // CUDA devices to serve on; empty means all visible.
  std::vector<int> gpus;
  // Worker threads (each with its own cuDNN handle and stream) per GPU.
  int workers_per_gpu = 2;
  absl::Duration worker_spin = absl::Microseconds(500);
  // GPU workers launch a waiting request before the last one ends
  // (DevicePoolOptions::launch_ahead).
  bool launch_ahead = true;
  // Threads that answer the GPU workers' requests; 0: one per worker.
  int completion_threads = 0;
  // CPU: request workers and queue. GPU: max_queued is per GPU.
  RequestExecutorOptions executor;
  // cuDNN engine search: autotune, heuristic, heuristic_b or fallback.
  std::string engine_selection = "autotune";
  // Only deterministic cuDNN engines.
  bool deterministic = false;
  // float32 graphs: no TF32 or down-converting engines.
  bool strict_float32 = false;
  // Race convserve's own kernels against cuDNN's (EngineSelection).
  bool direct_kernels = true;
  // Launch convserve's own kernels as programmatic dependent launches
  // (engine/cudnn/dependent_launch.h).
  bool dependent_launch = true;
  // cuDNN plans entered by programmatic edges where admitted
  // (engine/cudnn/programmatic_entry.h).
  bool programmatic_entry = true;
  // Largest cuDNN workspace per layer.
  int64_t max_workspace_bytes = int64_t{256} << 20;
  // File of cuDNN engine indices never to use; empty for none.
  std::string engine_blocklist;
  // Autotune: candidates timed per layer and path.
  int autotune_candidates = 12;
  int autotune_knob_candidates = 16;
  // Operator cuDNN errata file, besides the shipped list; empty for none.
  std::string cudnn_errata;
  // Run engine searches in a convserve-prober process per GPU (false: in
  // the server, where a faulting candidate loses the GPU).
  bool engine_prober = true;
  // The prober executable; empty: convserve-prober next to this executable.
  std::string prober_binary;
  // Plan store directory (quarantine verdicts); "auto": the user's cache
  // directory if writable; empty: a private temporary one.
  std::string plan_cache_dir;
  // Longest time one candidate may run in the prober before it counts as hung.
  double prober_candidate_timeout_seconds = 120;
  // Log level name for the probers.
  std::string log_level = "info";
  // Capture each request's layer launches into CUDA graphs and replay them.
  bool cuda_graphs = true;
  // Race fusable pairs of 1x1 layers against their plans and run the faster
  // (DevicePoolOptions::fuse_pointwise_pairs).
  bool fuse_pointwise_pairs = true;
  // Test hooks (see DevicePoolOptions).
  std::string testing_fault_graph;
  int testing_fault_candidate_rank = -1;
};

struct RunnerChoice {
  std::unique_ptr<RequestRunner> runner;
  // Why this runner was chosen, for the start-up log.
  std::string reason;
  // True when it serves on GPUs (per-backend defaults, e.g. --max_request_flops).
  bool gpu = false;
};

// auto takes the GPU device pool when the build has it and a GPU is present,
// and otherwise serves on CPU and says why.
absl::StatusOr<RunnerChoice> MakeRunner(const BackendConfig& config);

}  // namespace convserve

#endif  // CONVSERVE_SERVER_BACKEND_FACTORY_H_
