// ThreadSanitizer build only (CONVSERVE_SANITIZE=thread): tells TSan about
// the synchronization of Debian's abseil, which is not built with TSan. Its
// absl::Mutex, CondVar, Notification, BlockingCounter and Barrier are
// uninstrumented code in libabsl_synchronization.so, so TSan sees no
// happens-before through them and reports every access they guard as a
// race. This file defines those functions in the executable, which takes
// precedence over the shared library's definitions (ELF interposition, also
// for the library's calls to itself through its PLT); each calls the
// library's own (dlsym RTLD_NEXT) and adds __tsan_release before a release
// and __tsan_acquire after an acquire on the object's address. Mutual
// exclusion itself stays the library's.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

// The runtime's own entry points (not in tsan_interface.h of LLVM 14).
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/barrier.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

// The mangled names below are those of abseil 20220623 in inline namespace
// ABSL_OPTION_INLINE_NAMESPACE_NAME; Notification's layout is read below.
static_assert(ABSL_LTS_RELEASE_VERSION == 20220623, "check the mangled names for this abseil");
static_assert(sizeof(absl::Mutex) == sizeof(intptr_t), "Notification::notified_yet_ offset");

namespace {

#define CONVSERVE_STRINGIFY_INNER(x) #x
#define CONVSERVE_STRINGIFY(x) CONVSERVE_STRINGIFY_INNER(x)

// The library's definition of `tail`, the mangled name after "_ZN4absl" (or
// "_ZNK4absl" for const members) and the inline namespace.
template <typename F>
F Real(const char* head, const char* tail) {
  const std::string ns = CONVSERVE_STRINGIFY(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name = std::string(head) + std::to_string(ns.size()) + ns + tail;
  void* symbol = dlsym(RTLD_NEXT, name.c_str());
  if (symbol == nullptr) {
    std::fprintf(stderr, "absl_tsan_annotations: %s not found\n", name.c_str());
    std::abort();
  }
  return reinterpret_cast<F>(symbol);
}

#define REAL(type, tail)                                     \
  static const auto real = Real<type>("_ZN4absl", tail)
#define REAL_CONST(type, tail)                               \
  static const auto real = Real<type>("_ZNK4absl", tail)
// Calls the library's definition with this thread's accesses ignored (see
// IgnoredAccesses).
#define CALL_IGNORED(call) \
  [&] {                    \
    IgnoredAccesses ignored; \
    return call;           \
  }()

// abseil's own lock-order (deadlock) checker, on in Debian's build, keeps
// its graph in memory guarded by an internal spin lock TSan cannot see
// either, so every graph update reads as a race. Off in this build; TSan
// checks lock order itself. Set during static initialization.
const bool kAbseilDeadlockGraphOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

// Inside an unlock, abseil evaluates the Conditions of waiting threads (they
// read what the lock guards, and the Condition objects on the waiters'
// stacks), and inside Await and LockWhen the caller's own Condition after
// taking the lock internally: both before any annotation here can tell TSan
// of the hand-over. So the library's calls that evaluate Conditions run with
// this thread's accesses ignored; the code around them is checked as usual.
class IgnoredAccesses {
 public:
  IgnoredAccesses() { __tsan_ignore_thread_begin(); }
  ~IgnoredAccesses() { __tsan_ignore_thread_end(); }
};

void* NotifiedYet(const absl::Notification* notification) {
  // HasBeenNotified() is inline (instrumented): an acquire load of
  // notified_yet_, the member after mutex_.
  return const_cast<char*>(reinterpret_cast<const char*>(notification) + sizeof(absl::Mutex));
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  REAL(void (*)(Mutex*), "5Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}
void Mutex::ReaderLock() {
  REAL(void (*)(Mutex*), "5Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}
bool Mutex::TryLock() {
  REAL(bool (*)(Mutex*), "5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
bool Mutex::ReaderTryLock() {
  REAL(bool (*)(Mutex*), "5Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
void Mutex::Unlock() {
  REAL(void (*)(Mutex*), "5Mutex6UnlockEv");
  __tsan_release(this);
  CALL_IGNORED(real(this));
}
void Mutex::ReaderUnlock() {
  REAL(void (*)(Mutex*), "5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  CALL_IGNORED(real(this));
}
void Mutex::LockWhen(const Condition& cond) {
  REAL(void (*)(Mutex*, const Condition&), "5Mutex8LockWhenERKNS0_9ConditionE");
  CALL_IGNORED(real(this, cond));
  __tsan_acquire(this);
}
void Mutex::ReaderLockWhen(const Condition& cond) {
  REAL(void (*)(Mutex*, const Condition&), "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  CALL_IGNORED(real(this, cond));
  __tsan_acquire(this);
}
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  REAL(bool (*)(Mutex*, const Condition&, Duration),
       "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool met = CALL_IGNORED(real(this, cond, timeout));
  __tsan_acquire(this);
  return met;
}
bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  REAL(bool (*)(Mutex*, const Condition&, Time),
       "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool met = CALL_IGNORED(real(this, cond, deadline));
  __tsan_acquire(this);
  return met;
}
bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  REAL(bool (*)(Mutex*, const Condition&, Duration),
       "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool met = CALL_IGNORED(real(this, cond, timeout));
  __tsan_acquire(this);
  return met;
}
bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  REAL(bool (*)(Mutex*, const Condition&, Time),
       "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool met = CALL_IGNORED(real(this, cond, deadline));
  __tsan_acquire(this);
  return met;
}
// Await releases the lock while it waits and holds it again on return.
void Mutex::Await(const Condition& cond) {
  REAL(void (*)(Mutex*, const Condition&), "5Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);
  CALL_IGNORED(real(this, cond));
  __tsan_acquire(this);
}
bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  REAL(bool (*)(Mutex*, const Condition&, Duration),
       "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  const bool met = CALL_IGNORED(real(this, cond, timeout));
  __tsan_acquire(this);
  return met;
}
bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  REAL(bool (*)(Mutex*, const Condition&, Time),
       "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_release(this);
  const bool met = CALL_IGNORED(real(this, cond, deadline));
  __tsan_acquire(this);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  REAL(void (*)(CondVar*, Mutex*), "7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  CALL_IGNORED(real(this, mu));
  __tsan_acquire(mu);
}
bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  REAL(bool (*)(CondVar*, Mutex*, Duration), "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool timed_out = CALL_IGNORED(real(this, mu, timeout));
  __tsan_acquire(mu);
  return timed_out;
}
bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  REAL(bool (*)(CondVar*, Mutex*, Time), "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool timed_out = CALL_IGNORED(real(this, mu, deadline));
  __tsan_acquire(mu);
  return timed_out;
}

void Notification::Notify() {
  REAL(void (*)(Notification*), "12Notification6NotifyEv");
  __tsan_release(this);
  __tsan_release(NotifiedYet(this));
  CALL_IGNORED(real(this));
}
void Notification::WaitForNotification() const {
  REAL_CONST(void (*)(const Notification*), "12Notification19WaitForNotificationEv");
  real(this);
  __tsan_acquire(const_cast<Notification*>(this));
}
bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  REAL_CONST(bool (*)(const Notification*, Duration),
             "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool notified = real(this, timeout);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}
bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  REAL_CONST(bool (*)(const Notification*, Time),
             "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool notified = real(this, deadline);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

bool BlockingCounter::DecrementCount() {
  REAL(bool (*)(BlockingCounter*), "15BlockingCounter14DecrementCountEv");
  __tsan_release(this);
  return real(this);
}
void BlockingCounter::Wait() {
  REAL(void (*)(BlockingCounter*), "15BlockingCounter4WaitEv");
  CALL_IGNORED(real(this));
  __tsan_acquire(this);
}

bool Barrier::Block() {
  REAL(bool (*)(Barrier*), "7Barrier5BlockEv");
  __tsan_release(this);
  const bool last = real(this);
  __tsan_acquire(this);
  return last;
}

ABSL_NAMESPACE_END
}  // namespace absl
