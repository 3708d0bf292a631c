// A stand-in for convserve-prober that needs no GPU: it speaks the prober
// protocol (engine/runtime/prober_protocol.h) over a fixed list of
// candidates, honours quarantine verdicts in the plan store as the real
// prober does, and misbehaves on request (faults, crashes, hangs) so the
// EngineProber's containment can be tested anywhere.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/conv_layer_problem.h"
#include "engine/runtime/plan_store.h"
#include "engine/runtime/prober_protocol.h"

ABSL_FLAG(std::string, plan_cache_dir, "", "the plan store");
ABSL_FLAG(std::vector<std::string>, candidates,
          std::vector<std::string>({"fused:e1:k2=3", "fused:e2:", "unfused:e3:"}),
          "candidate ids, best first; candidate i runs in i+1 ms");
ABSL_FLAG(std::vector<std::string>, fault, {},
          "report a lost CUDA context on these candidates, then exit 3");
ABSL_FLAG(std::string, crash, "", "abort() while running this candidate");
ABSL_FLAG(std::string, hardware_fault, "",
          "report an uncorrectable ECC error while running this candidate, then exit 3");
ABSL_FLAG(std::string, killed, "", "SIGKILL itself while running this candidate (as the OOM "
          "killer would)");
ABSL_FLAG(bool, stray_stdout, false, "print a line that looks like the protocol on stdout");
ABSL_FLAG(std::string, hang, "", "hang while running this candidate");
ABSL_FLAG(std::string, reject, "", "reject this candidate (it wrote outside its output)");
ABSL_FLAG(bool, fail_start, false, "exit before READY");
ABSL_FLAG(std::string, tries_log, "", "append each TRY id to this file");
ABSL_FLAG(std::string, chosen, "", "say CHOSEN with this id before DONE");
ABSL_FLAG(std::string, retime, "",
          "after the candidates, report this one (it must have passed) again at 0.5 ms, as "
          "autotune's final timing does");
// Flags the real prober takes, accepted and ignored here.
ABSL_FLAG(int, device, 0, "");
ABSL_FLAG(std::string, engine_selection, "", "");
ABSL_FLAG(std::string, log_level, "", "");
ABSL_FLAG(int, protocol_fd, -1, "the protocol socket; -1: stdin and stdout");
ABSL_FLAG(int, parent_pid, 0, "");

namespace convserve {
namespace {

FILE* protocol_out = stdout;

void Say(const std::string& line) {
  std::fprintf(protocol_out, "%s\n", line.c_str());
  std::fflush(protocol_out);
}

int Run() {
  if (absl::GetFlag(FLAGS_fail_start)) return 1;
  const std::string target = "Fake GPU/sm90/cudnn91400";
  absl::StatusOr<std::unique_ptr<PlanStore>> store =
      PlanStore::Open(absl::GetFlag(FLAGS_plan_cache_dir));
  if (!store.ok()) return 2;
  FILE* protocol_in = stdin;
  if (absl::GetFlag(FLAGS_protocol_fd) >= 0) {
    protocol_in = fdopen(absl::GetFlag(FLAGS_protocol_fd), "r");
    protocol_out = fdopen(dup(absl::GetFlag(FLAGS_protocol_fd)), "w");
  }
  Say(absl::StrCat("READY ", EscapeLine(target)));
  char* raw = nullptr;
  size_t capacity = 0;
  ssize_t length = 0;
  while ((length = getline(&raw, &capacity, protocol_in)) > 0) {
    std::string line(raw, static_cast<size_t>(length) - (raw[length - 1] == '\n' ? 1 : 0));
    if (absl::GetFlag(FLAGS_stray_stdout)) {
      std::printf("RESULT fused:e99: ok 0.001 0 printed by a library\n");
      std::fflush(stdout);
    }
    std::pair<std::string, std::string> command = absl::StrSplit(line, absl::MaxSplits(' ', 1));
    absl::StatusOr<ConvLayerProblem> problem = ConvLayerProblem::Parse(command.second);
    if (command.first != "SEARCH" || !problem.ok()) {
      Say(absl::StrCat("ERROR 3 ", EscapeLine("bad command")));
      continue;
    }
    const std::vector<std::string> ids = absl::GetFlag(FLAGS_candidates);
    for (size_t i = 0; i < ids.size(); ++i) {
      CandidateResult result;
      result.id = *EngineConfigId::Parse(ids[i]);
      if (std::optional<std::string> why =
              (*store)->Get("quarantine", QuarantineKey(target, *problem, result.id))) {
        result.detail = "quarantined: " + *why;
        Say(FormatResultLine(result));
        continue;
      }
      Say("TRY " + ids[i]);
      if (!absl::GetFlag(FLAGS_tries_log).empty()) {
        FILE* log = std::fopen(absl::GetFlag(FLAGS_tries_log).c_str(), "a");
        std::fprintf(log, "%s\n", ids[i].c_str());
        std::fclose(log);
      }
      const std::vector<std::string> faults = absl::GetFlag(FLAGS_fault);
      if (std::find(faults.begin(), faults.end(), ids[i]) != faults.end()) {
        Say(absl::StrCat("FAULT ", ids[i], " candidate ",
                         EscapeLine("cudaErrorMisalignedAddress (misaligned address)")));
        std::_Exit(3);
      }
      if (ids[i] == absl::GetFlag(FLAGS_hardware_fault)) {
        Say(absl::StrCat("FAULT ", ids[i], " hardware ",
                         EscapeLine("cudaErrorECCUncorrectable (uncorrectable ECC error)")));
        std::_Exit(3);
      }
      if (ids[i] == absl::GetFlag(FLAGS_killed)) raise(SIGKILL);
      if (ids[i] == absl::GetFlag(FLAGS_crash)) std::abort();
      if (ids[i] == absl::GetFlag(FLAGS_hang)) {
        while (true) pause();
      }
      result.workspace_bytes = 1024;
      if (ids[i] == absl::GetFlag(FLAGS_reject)) {
        result.detail = "changed 4 guard words around y";
      } else {
        result.ok = true;
        result.ms = static_cast<float>(ids.size() - i);
      }
      Say(FormatResultLine(result));
    }
    if (!absl::GetFlag(FLAGS_retime).empty()) {
      CandidateResult again;
      again.id = *EngineConfigId::Parse(absl::GetFlag(FLAGS_retime));
      again.ok = true;
      again.ms = 0.5f;
      again.workspace_bytes = 1024;
      Say(FormatResultLine(again));
    }
    Say("SKIPPED " + EscapeLine("fused:e9: errata rule 'x': a test rule"));
    if (!absl::GetFlag(FLAGS_chosen).empty()) Say("CHOSEN " + absl::GetFlag(FLAGS_chosen));
    Say("DONE timed");
  }
  return 0;
}

}  // namespace
}  // namespace convserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return convserve::Run();
}
