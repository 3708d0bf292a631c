#include "server/backend_factory.h"

#include "absl/strings/str_cat.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/status_macros.h"

namespace convserve {

absl::StatusOr<BackendChoice> MakeBackend(const std::string& name, int cpu_threads) {
  if (name != "auto" && name != "cpu" && name != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend must be auto, cpu or cuda, got '", name, "'"));
  }
  if (name == "cuda") {
    return absl::FailedPreconditionError(
        "--backend=cuda: this build has no cuDNN backend; use --backend=cpu or auto");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<CpuBackend> cpu, CpuBackend::Create({cpu_threads}));
  const std::string reason =
      name == "cpu" ? "--backend=cpu" : "--backend=auto and this build has no GPU backend";
  return BackendChoice{std::move(cpu), absl::StrCat("serving on CPU (", reason, ")")};
}

}  // namespace convserve
