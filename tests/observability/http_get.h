// The smallest HTTP client the observability tests need: GET from a loopback
// port, as Prometheus scrapes /metrics and as anyone queries Prometheus.
#ifndef CONVSERVE_TESTS_OBSERVABILITY_HTTP_GET_H_
#define CONVSERVE_TESTS_OBSERVABILITY_HTTP_GET_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace convserve {

struct HttpResponse {
  int status = 0;
  // Header lines as received, for failure messages.
  std::string headers;
  std::string body;
};

// GET http://127.0.0.1:`port``target`. HTTP/1.0, so the body is never
// chunked and ends when the server closes. UNAVAILABLE when nothing listens.
absl::StatusOr<HttpResponse> HttpGet(int port, const std::string& target,
                                     absl::Duration timeout = absl::Seconds(10));

// Percent-encodes a query parameter value (RFC 3986 unreserved kept).
std::string UrlEncode(absl::string_view value);

// A port that was free a moment ago on 127.0.0.1, for programs that must be
// told theirs (Prometheus); callers retry when it was taken meanwhile.
absl::StatusOr<int> PickFreePort();

}  // namespace convserve

#endif  // CONVSERVE_TESTS_OBSERVABILITY_HTTP_GET_H_
