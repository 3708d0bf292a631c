// The line protocol between the server (EngineProber) and the
// convserve-prober process, and the command line the server starts it with.
// One message per line, fields separated by single spaces; free text last,
// C-escaped so it stays on one line.
//
//   prober -> server, once started:  READY <target key>
//   server -> prober:                SEARCH <ConvLayerProblem::Encode()>
//   prober -> server, per candidate: TRY <id>            (before it touches the GPU)
//                                    RESULT <id> ok|rejected <ms> <workspace> <detail>
//   prober -> server, autotune's final: RESULT <id> ok <ms> ...  (a passed candidate timed
//                                    again: its new time replaces the earlier)
//   prober -> server, then:          SKIPPED <text>      (filtered before running)
//                                    CHOSEN <id>         (the search's winner, ranked first)
//                                    DONE | ERROR <status code number> <message>
//   prober -> server, context lost:  FAULT <id or -> candidate|hardware <error>, then it exits
//
// The protocol runs on its own fd (kProberProtocolFd) in the prober, whose
// stdout goes to the log with its stderr.
//
// A prober that dies, hangs or reports FAULT after TRY <id> and before that
// id's RESULT blames <id>: the server quarantines it and starts a new prober.
#ifndef CONVSERVE_ENGINE_RUNTIME_PROBER_PROTOCOL_H_
#define CONVSERVE_ENGINE_RUNTIME_PROBER_PROTOCOL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/conv_layer_problem.h"
#include "engine/cudnn/engine_config_id.h"
#include "engine/cudnn/engine_selection.h"
#include "engine/runtime/engine_search_report.h"

namespace convserve {

// The prober's protocol fd (--protocol_fd).
constexpr int kProberProtocolFd = 3;

// What the prober is started with. Each field maps to one flag of
// convserve-prober (server/prober_main.cc).
struct ProberLaunch {
  // CUDA device ordinal.
  int device = 0;
  // Engine search and filters; `errata` is not sent (see errata_file).
  EngineSelection selection;
  // Operator errata file the server loaded too; empty for the shipped list only.
  std::string errata_file;
  // The plan store directory the server writes quarantine verdicts to.
  std::string store_directory;
  // Test hook: see SearchOptions::testing_fault_rank. -1: off.
  int testing_fault_rank = -1;
  // spdlog level name for the prober's own log lines (on the server's stderr).
  std::string log_level = "info";
  // Candidates launched as the server launches them (SetDependentLaunch).
  bool dependent_launch = true;
  // Autotune times the cuDNN plans it keeps entered programmatically where
  // admitted (SearchOptions::programmatic_entry): the server's workers
  // capture graphs and enter plans so.
  bool programmatic_entry = false;
};

// The prober's flags (after argv[0]) for `launch`.
std::vector<std::string> ProberArguments(const ProberLaunch& launch);

// The plan store key ("quarantine" kind) of candidate `id` for `problem` on
// the library and GPU named by `target_key` (CudnnTarget::Key()).
std::string QuarantineKey(const std::string& target_key, const ConvLayerProblem& problem,
                          const EngineConfigId& id);

// RESULT line fields <-> CandidateResult.
std::string FormatResultLine(const CandidateResult& result);
absl::StatusOr<CandidateResult> ParseResultLine(absl::string_view line);

// Free text <-> one space-free-safe line (C escapes).
std::string EscapeLine(absl::string_view text);
std::string UnescapeLine(absl::string_view text);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_PROBER_PROTOCOL_H_
