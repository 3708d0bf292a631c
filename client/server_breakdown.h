// The server-side half of a load report: where the servers spent the
// requests' time (queue, plan lookup/build, copies, compute), from the
// cumulative statistics of convserve.v1 GetStatistics taken before and after
// a level. A server without that call (UNIMPLEMENTED) leaves the report
// saying "server-side breakdown: not available from this server".
#ifndef CONVSERVE_CLIENT_SERVER_BREAKDOWN_H_
#define CONVSERVE_CLIENT_SERVER_BREAKDOWN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/convserve_client.h"
#include "convserve/v1/convserve.pb.h"

namespace convserve {

struct ServerStage {
  // "request" (accepted to answered), "queue", "plan", "h2d", "compute", "d2h".
  std::string name;
  // Successful requests that went through the stage, and their mean time in it.
  int64_t count = 0;
  double mean_ms = 0;
};

struct ServerBreakdown {
  // Requests the servers answered in the interval, by outcome.
  int64_t success = 0;
  int64_t failure = 0;
  // In the order listed in ServerStage::name.
  std::vector<ServerStage> stages;
};

// `graph`'s cumulative statistics summed over `servers` (one client per
// server); all zeros for a graph that has served nothing yet. The first
// server's error otherwise (UNIMPLEMENTED from a server without the call).
absl::StatusOr<v1::GraphStatistics> FetchServerStatistics(
    const std::vector<ConvServeClient*>& servers, const std::string& graph);

// What the servers did between two snapshots.
ServerBreakdown BreakdownBetween(const v1::GraphStatistics& before,
                                 const v1::GraphStatistics& after);

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_SERVER_BREAKDOWN_H_
