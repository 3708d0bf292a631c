// Copies to and from memory that another process can take away: a client's
// system shared-memory object mapped by the server. A client that truncates
// its object after registering it makes every access to the lost pages raise
// SIGBUS, which would kill the server; CopyGuarded turns that into an error
// for the one request. The SIGBUS handler is installed on first use and
// passes every other SIGBUS on to the action it replaced (by default: the
// process dies as it would have).
#ifndef CONVSERVE_ENGINE_RUNTIME_GUARDED_COPY_H_
#define CONVSERVE_ENGINE_RUNTIME_GUARDED_COPY_H_

#include <cstddef>

#include "absl/status/status.h"

namespace convserve {

// memcpy(dst, src, bytes); FAILED_PRECONDITION (and a partial copy) when
// either side's pages are gone from under the mapping. Only the calling
// thread's accesses are guarded, so the copy runs on it alone.
absl::Status CopyGuarded(void* dst, const void* src, size_t bytes);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_GUARDED_COPY_H_
