// convserve-prober: runs cuDNN engine searches for one GPU on behalf of
// convserve-server, so that a candidate that faults takes down this process
// and its CUDA context, not the server's. Started by the server with its
// stdin and stdout on a socket; speaks the line protocol of
// engine/runtime/prober_protocol.h on the fd the server gives it; logs to
// stderr (the server's log). Not meant to be run by hand, except to
// reproduce a search (the protocol then runs on stdin and stdout):
//   echo "SEARCH <problem>" | convserve-prober --device=0 --plan_cache_dir=DIR
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/cudnn/candidate_search.h"
#include "engine/cudnn/cuda_resources.h"
#include "engine/cudnn/cudnn_backend.h"
#include "engine/cudnn/cudnn_errata.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/cudnn/dependent_launch.h"
#include "engine/runtime/plan_store.h"
#include "engine/runtime/prober_protocol.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(int, device, 0, "CUDA device ordinal");
ABSL_FLAG(std::string, engine_selection, "autotune", "heuristic, heuristic_b, fallback or autotune");
ABSL_FLAG(bool, deterministic, false, "deterministic engines only");
ABSL_FLAG(bool, strict_float32, false, "no TF32 or down-converting engines for float32");
ABSL_FLAG(bool, direct_kernels, true, "also race convserve's own kernels");
ABSL_FLAG(bool, dependent_launch, true,
          "launch convserve's own kernels as programmatic dependent launches (as the server)");
ABSL_FLAG(bool, programmatic_entry, false,
          "autotune: time the cuDNN plans kept entered programmatically where the test admits "
          "them (the server's captured graphs enter them so)");
ABSL_FLAG(int64_t, max_workspace_bytes, int64_t{256} << 20, "largest cuDNN workspace");
ABSL_FLAG(int, autotune_candidates, 12, "autotune: candidates run per path");
ABSL_FLAG(int, autotune_knob_candidates, 16, "autotune: knob-search candidates per layer");
ABSL_FLAG(int, autotune_iterations, 5, "autotune: timed samples per candidate");
ABSL_FLAG(std::vector<std::string>, engine_blocklist_ids, {}, "engine global indices never used");
ABSL_FLAG(std::string, cudnn_errata, "", "operator errata file, besides the shipped list");
ABSL_FLAG(std::string, plan_cache_dir, "", "plan store directory holding quarantine verdicts");
ABSL_FLAG(int, testing_fault_candidate_rank, -1,
          "testing only: the candidate at this rank faults the CUDA context");
ABSL_FLAG(std::string, only_candidate, "",
          "reproduction aid: run only the engine candidate with this id (e.g. fused:e12:k2=3)");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error or off");
ABSL_FLAG(int, protocol_fd, -1,
          "fd of the protocol socket (the server passes 3); -1: stdin and stdout, to run by hand");
ABSL_FLAG(int, parent_pid, 0, "the server's pid: the prober exits when that process is gone");

namespace convserve {
namespace {

// Where protocol lines go: the protocol socket, or stdout when run by hand.
FILE* protocol_out = stdout;

void Say(const std::string& line) {
  std::fwrite(line.data(), 1, line.size(), protocol_out);
  std::fputc('\n', protocol_out);
  std::fflush(protocol_out);
}

// Reports each step on stdout and vetoes quarantined candidates.
class ProtocolObserver : public SearchObserver {
 public:
  ProtocolObserver(PlanStore* store, std::string target_key, const ConvLayerProblem& problem)
      : store_(store), target_key_(std::move(target_key)), problem_(problem) {}

  std::optional<std::string> Quarantined(const EngineConfigId& id) override {
    return store_->Get("quarantine", QuarantineKey(target_key_, problem_, id));
  }
  void OnTry(const EngineConfigId& id) override {
    in_flight_ = id;
    spdlog::debug("trying {} for {}", id.ToString(), problem_.Encode());
    Say(absl::StrCat("TRY ", id.ToString()));
  }
  void OnResult(const CandidateResult& result) override {
    in_flight_.reset();
    spdlog::debug("{}: {} {:.4f} ms, workspace {} B{}", result.id.ToString(),
                  result.ok ? "passed" : "rejected", result.ms, result.workspace_bytes,
                  result.detail.empty() ? "" : absl::StrCat(": ", result.detail));
    Say(FormatResultLine(result));
  }
  const std::optional<EngineConfigId>& in_flight() const { return in_flight_; }

 private:
  PlanStore* store_;
  const std::string target_key_;
  const ConvLayerProblem& problem_;
  std::optional<EngineConfigId> in_flight_;
};

int Run() {
  const int protocol_fd = absl::GetFlag(FLAGS_protocol_fd);
  // Only the protocol socket is ours; drop anything else inherited.
  if (protocol_fd > 3) close_range(3, protocol_fd - 1, 0);
  close_range(std::max(protocol_fd, 2) + 1, ~0U, 0);
  // Die with the server, even when it is killed outright: a prober left
  // behind would hold GPU memory (and maybe a hung kernel) for nothing.
  const int parent = absl::GetFlag(FLAGS_parent_pid);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (parent > 0 && getppid() != parent) return 1;
  FILE* protocol_in = stdin;
  if (protocol_fd >= 0) {
    protocol_in = fdopen(protocol_fd, "r");
    protocol_out = fdopen(dup(protocol_fd), "w");
    if (protocol_in == nullptr || protocol_out == nullptr) return 2;
  }
  // stdout carries the protocol; every log line goes to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("prober"));
  spdlog::set_pattern(absl::StrCat("[%Y-%m-%d %H:%M:%S.%e] [prober gpu ",
                                   absl::GetFlag(FLAGS_device), "] [%l] %v"));
  spdlog::set_level(spdlog::level::from_str(absl::GetFlag(FLAGS_log_level)));
  const int device = absl::GetFlag(FLAGS_device);

  EngineSelection selection;
  absl::StatusOr<EngineSearch> search = ParseEngineSearch(absl::GetFlag(FLAGS_engine_selection));
  if (!search.ok()) {
    spdlog::critical("{}", search.status().ToString());
    return 2;
  }
  selection.search = *search;
  selection.deterministic_only = absl::GetFlag(FLAGS_deterministic);
  selection.strict_float32 = absl::GetFlag(FLAGS_strict_float32);
  selection.direct_kernels = absl::GetFlag(FLAGS_direct_kernels);
  SetDependentLaunch(absl::GetFlag(FLAGS_dependent_launch));
  SetProgrammaticEntry(absl::GetFlag(FLAGS_programmatic_entry));
  selection.max_workspace_bytes = absl::GetFlag(FLAGS_max_workspace_bytes);
  selection.autotune_candidates = absl::GetFlag(FLAGS_autotune_candidates);
  selection.autotune_iterations = absl::GetFlag(FLAGS_autotune_iterations);
  selection.autotune_knob_candidates = absl::GetFlag(FLAGS_autotune_knob_candidates);
  for (const std::string& text : absl::GetFlag(FLAGS_engine_blocklist_ids)) {
    int64_t index = 0;
    if (!absl::SimpleAtoi(text, &index)) {
      spdlog::critical("--engine_blocklist_ids: '{}' is not an engine index", text);
      return 2;
    }
    selection.blocklist.insert(index);
  }
  absl::StatusOr<std::shared_ptr<const CudnnErrata>> errata =
      CudnnErrata::Create(absl::GetFlag(FLAGS_cudnn_errata));
  absl::StatusOr<std::unique_ptr<PlanStore>> store =
      PlanStore::Open(absl::GetFlag(FLAGS_plan_cache_dir));
  absl::StatusOr<CudnnVersions> versions = CheckCudnnRuntime(device);
  if (!errata.ok() || !store.ok() || !versions.ok()) {
    spdlog::critical("cannot start: {} {} {}", errata.status().ToString(),
                     store.status().ToString(), versions.status().ToString());
    return 2;
  }
  selection.errata = *errata;
  const CudnnTarget target = versions->target();
  if (cudaSetDevice(device) != cudaSuccess) {
    spdlog::critical("cannot use CUDA device {}", device);
    return 2;
  }
  absl::StatusOr<CudaStream> stream = CudaStream::Create();
  if (!stream.ok()) {
    spdlog::critical("cannot start: {}", stream.status().ToString());
    return 2;
  }
  absl::StatusOr<CudnnHandle> handle = CudnnHandle::Create(stream->get());
  if (!handle.ok()) {
    spdlog::critical("cannot start: {}", handle.status().ToString());
    return 2;
  }
  SearchOptions options;
  options.testing_fault_rank = absl::GetFlag(FLAGS_testing_fault_candidate_rank);
  options.only = absl::GetFlag(FLAGS_only_candidate);
  // Its verdicts stay in this process: worth testing only where autotune
  // times the admitted plans with it.
  options.programmatic_entry =
      ProgrammaticEntryEnabled() && selection.search == EngineSearch::kAutotune;
  Say(absl::StrCat("READY ", EscapeLine(target.Key())));

  uint64_t searches = 0;
  char* raw_line = nullptr;
  size_t capacity = 0;
  ssize_t length = 0;
  while ((length = getline(&raw_line, &capacity, protocol_in)) > 0) {
    std::string line(raw_line, static_cast<size_t>(length));
    if (!line.empty() && line.back() == '\n') line.pop_back();
    std::pair<std::string, std::string> command = absl::StrSplit(line, absl::MaxSplits(' ', 1));
    if (command.first != "SEARCH") {
      Say(absl::StrCat("ERROR ", static_cast<int>(absl::StatusCode::kInvalidArgument), " ",
                       EscapeLine(absl::StrCat("unknown command '", command.first, "'"))));
      continue;
    }
    absl::StatusOr<ConvLayerProblem> problem = ConvLayerProblem::Parse(command.second);
    if (!problem.ok()) {
      Say(absl::StrCat("ERROR ", static_cast<int>(problem.status().code()), " ",
                       EscapeLine(problem.status().message())));
      continue;
    }
    ConvLayerPlanner planner(handle->get(), selection, target);
    ProtocolObserver observer(store->get(), target.Key(), *problem);
    options.seed = ++searches;
    absl::StatusOr<SearchReport> report =
        SearchEngines(planner, stream->get(), *problem, options, &observer, nullptr);
    if (!report.ok()) {
      const cudaError_t lost = StickyCudaError(report.status(), stream->get());
      if (lost != cudaSuccess) {
        // The context is gone: say who did it and leave without cleanup,
        // which would only fail (or hang) on a dead context.
        Say(absl::StrCat("FAULT ", observer.in_flight() ? observer.in_flight()->ToString() : "-",
                         IsHardwareCudaError(lost) ? " hardware " : " candidate ",
                         EscapeLine(report.status().message())));
        spdlog::error("CUDA context lost ({}) while running {}: {}", cudaGetErrorName(lost),
                      observer.in_flight() ? observer.in_flight()->ToString() : "no candidate",
                      std::string(report.status().message()));
        std::_Exit(3);
      }
      Say(absl::StrCat("ERROR ", static_cast<int>(report.status().code()), " ",
                       EscapeLine(report.status().message())));
      continue;
    }
    for (const std::string& skipped : report->skipped) Say("SKIPPED " + EscapeLine(skipped));
    if (report->chosen.has_value()) Say("CHOSEN " + report->chosen->ToString());
    Say(report->timed ? "DONE timed" : "DONE untimed");
  }
  std::free(raw_line);
  return 0;
}

}  // namespace
}  // namespace convserve

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "convserve-prober: cuDNN engine searches for convserve-server, in their own process.");
  // --help lists the flags of the file that defines them; absl's default
  // looks for a file named after the binary (convserve-x.cc) and finds none.
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "server/prober_main.cc");
  };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  absl::SetFlagsUsageConfig(usage_config);
  absl::ParseCommandLine(argc, argv);
  return convserve::Run();
}
