#include "engine/runtime/guarded_copy.h"

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <cstring>

#include "absl/base/call_once.h"

namespace convserve {
namespace {

// The jump back into CopyGuarded of the thread copying now, or null.
thread_local sigjmp_buf* guarded_jump = nullptr;
struct sigaction replaced_action;
absl::once_flag install_once;

void OnSigbus(int signal, siginfo_t* info, void* /*context*/) {
  if (sigjmp_buf* jump = guarded_jump) siglongjmp(*jump, 1);
  // Not a guarded copy: restore what was there. Returning re-runs the
  // faulting access, which now meets that action; a SIGBUS sent by kill or
  // raise is not re-run, so it is raised again.
  sigaction(SIGBUS, &replaced_action, nullptr);
  if (info == nullptr || info->si_code <= 0) raise(signal);
}

void Install() {
  struct sigaction action = {};
  action.sa_sigaction = OnSigbus;
  action.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, &replaced_action);
}

}  // namespace

absl::Status CopyGuarded(void* dst, const void* src, size_t bytes) {
  absl::call_once(install_once, Install);
  if (bytes == 0) return absl::OkStatus();  // memcpy takes no null pointer, even for 0
  sigjmp_buf jump;
  // The handler runs with SA_NODEFER, so jumping out of it leaves the signal
  // mask as it was: no need to save it (a sigprocmask call per copy).
  if (sigsetjmp(jump, /*savemask=*/0) != 0) {
    guarded_jump = nullptr;
    return absl::FailedPreconditionError(
        "a shared memory region lost its pages during the copy (SIGBUS): its object was "
        "truncated after it was registered; unregister it and register it again");
  }
  guarded_jump = &jump;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(dst, src, bytes);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  guarded_jump = nullptr;
  return absl::OkStatus();
}

}  // namespace convserve
