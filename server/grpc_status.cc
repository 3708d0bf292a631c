#include "server/grpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace convserve {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  constexpr size_t kMaxMessage = 1024;
  std::string message(status.message());
  if (message.size() > kMaxMessage) {
    message.resize(kMaxMessage - 3);
    message += "...";
  }
  const int code = static_cast<int>(status.code());
  const bool known = code > 0 && code <= static_cast<int>(grpc::StatusCode::UNAUTHENTICATED);
  return grpc::Status(known ? static_cast<grpc::StatusCode>(code) : grpc::StatusCode::UNKNOWN,
                      message);
}

std::string StreamErrorMessage(const absl::Status& status) {
  const grpc::Status trimmed = ToGrpcStatus(status);
  return absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(trimmed.error_code())),
                      ": ", trimmed.error_message());
}

}  // namespace convserve
