// The load generator behind convserve-load: for each level (concurrency or
// request rate) it warms up, then measures windows until throughput and p99
// settle, and returns what it saw (load_result.h).
//
// Latency is measured from each request's *scheduled* send time. In a closed
// loop that is the moment it is sent; in an open loop it is the time the
// arrival schedule gave it, so when the server (or this client) stalls, the
// requests that should have gone out meanwhile are charged the wait instead
// of silently not being sent (no coordinated omission).
#ifndef CONVSERVE_CLIENT_LOAD_GENERATOR_H_
#define CONVSERVE_CLIENT_LOAD_GENERATOR_H_

#include "absl/status/statusor.h"
#include "client/load_options.h"
#include "client/load_result.h"
#include "client/load_session.h"

namespace convserve {

// Runs every level of `options` against the session's servers. Requests that
// fail are counted by status code, not fatal. INVALID_ARGUMENT for bad
// options. Blocks until the last request has ended.
absl::StatusOr<RunResult> RunLoad(LoadSession& session, const LoadOptions& options);

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_LOAD_GENERATOR_H_
