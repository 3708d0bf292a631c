// The one mapping from engine status to gRPC status (STYLE.md: errors).
#ifndef CONVSERVE_SERVER_GRPC_STATUS_H_
#define CONVSERVE_SERVER_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace convserve {

// absl and gRPC share code numbers; the message is kept whole up to 1 KiB so
// a user sees which field to change, and trimmed beyond that.
grpc::Status ToGrpcStatus(const absl::Status& status);

// A failed request's error inside a stream (ModelStreamInfer), where it cannot
// be the call's status: "CODE: message", e.g. "NOT_FOUND: model 'm' is not
// loaded", the code so clients can tell what to retry, the message trimmed as
// ToGrpcStatus trims it.
std::string StreamErrorMessage(const absl::Status& status);

}  // namespace convserve

#endif  // CONVSERVE_SERVER_GRPC_STATUS_H_
