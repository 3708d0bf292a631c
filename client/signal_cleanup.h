// Clean-ups that must run even when convserve-load is interrupted: shared
// memory regions stay registered on the server and objects stay in /dev/shm
// after the process unless someone removes them.
//
// HandleInterruptsWithCleanups() (from main, before any thread starts)
// blocks SIGINT, SIGTERM and SIGHUP in every thread and takes them on one
// thread of its own, so the clean-ups run as ordinary code that may call the
// server, not in a signal handler: the first signal runs every registered
// clean-up and exits with 128 + the signal; a second one exits at once.
// Without it (tests, the library), clean-ups run only when their owners call
// RunCleanup. A SIGKILL or a crash still leaves the regions behind
// (docs/load-generator.md says how to remove them). Thread-safe.
#ifndef CONVSERVE_CLIENT_SIGNAL_CLEANUP_H_
#define CONVSERVE_CLIENT_SIGNAL_CLEANUP_H_

#include <cstdint>
#include <functional>

namespace convserve {

void HandleInterruptsWithCleanups();

// Registers `cleanup` to run on an interrupt; returns its id.
int64_t AddCleanup(std::function<void()> cleanup);
// Runs clean-up `id` now, unless an interrupt already did, and forgets it.
// An interrupt arriving meanwhile waits for it to finish (and vice versa).
void RunCleanup(int64_t id);

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_SIGNAL_CLEANUP_H_
