#include "client/signal_cleanup.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace convserve {
namespace {

struct Cleanups {
  // Held while a clean-up runs, so an interrupt and an owner never run the
  // same one twice or half each.
  absl::Mutex mu;
  std::map<int64_t, std::function<void()>> pending ABSL_GUARDED_BY(mu);
  int64_t next_id ABSL_GUARDED_BY(mu) = 0;
};

Cleanups& Registry() {
  static Cleanups* const cleanups = new Cleanups;  // never destroyed: used until _exit
  return *cleanups;
}

sigset_t InterruptSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  return signals;
}

[[noreturn]] void RunAllAndExit(int signal) {
  {
    Cleanups& registry = Registry();
    absl::MutexLock lock(&registry.mu);
    for (auto& [id, cleanup] : registry.pending) cleanup();
    registry.pending.clear();
  }
  _exit(128 + signal);
}

void AwaitInterrupts() {
  const sigset_t signals = InterruptSignals();
  int signal = 0;
  if (sigwait(&signals, &signal) != 0) return;
  std::fprintf(stderr,
               "\nconvserve-load: interrupted: removing shared memory regions (interrupt again "
               "to quit at once)\n");
  std::thread([signal] { RunAllAndExit(signal); }).detach();
  int again = 0;
  if (sigwait(&signals, &again) == 0) _exit(128 + again);
}

}  // namespace

void HandleInterruptsWithCleanups() {
  const sigset_t signals = InterruptSignals();
  // Inherited by every thread started later: only AwaitInterrupts sees them.
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::thread(AwaitInterrupts).detach();
}

int64_t AddCleanup(std::function<void()> cleanup) {
  Cleanups& registry = Registry();
  absl::MutexLock lock(&registry.mu);
  const int64_t id = registry.next_id++;
  registry.pending[id] = std::move(cleanup);
  return id;
}

void RunCleanup(int64_t id) {
  Cleanups& registry = Registry();
  absl::MutexLock lock(&registry.mu);
  auto it = registry.pending.find(id);
  if (it == registry.pending.end()) return;
  it->second();
  registry.pending.erase(it);
}

}  // namespace convserve
