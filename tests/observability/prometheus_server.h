// Debian's Prometheus server, run by a test on loopback: its own temp dir for
// the TSDB, a generated config that scrapes one target every second, and
// the HTTP query API. Killed and its files removed by the destructor (and killed by the
// kernel if the test process dies). Not thread-safe.
#ifndef CONVSERVE_TESTS_OBSERVABILITY_PROMETHEUS_SERVER_H_
#define CONVSERVE_TESTS_OBSERVABILITY_PROMETHEUS_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/observability/child_process.h"

namespace convserve {

struct PrometheusServerOptions {
  // The port of the /metrics endpoint scraped on 127.0.0.1.
  int target_port = 0;
  // job label of the target.
  std::string job = "convserve";
  // How long to wait for /-/ready.
  absl::Duration start_timeout = absl::Seconds(20);
};

class PrometheusServer {
 public:
  // Writes the config, checks it with `promtool check config`, starts
  // `prometheus` on a free loopback port and waits until it is ready.
  static absl::StatusOr<std::unique_ptr<PrometheusServer>> Start(
      const PrometheusServerOptions& options);

  int port() const { return port_; }
  std::string url() const;

  // The raw JSON answer of /api/v1/query?query=`promql` (evaluated now);
  // an error unless HTTP 200 with "status":"success".
  absl::StatusOr<std::string> Query(const std::string& promql);
  // The value of a query whose answer is exactly one sample; NaN and
  // infinities come back as such.
  absl::StatusOr<double> QueryValue(const std::string& promql);
  // Polls until Prometheus holds a successful scrape of the target that
  // started after `after` (so it saw everything done before then).
  absl::Status AwaitScrapeAfter(absl::Time after, absl::Duration timeout);

  // The end of Prometheus's log, for failure messages.
  std::string LogTail() const;

 private:
  PrometheusServer(ScopedTempDir dir, PrometheusServerOptions options)
      : dir_(std::move(dir)), options_(std::move(options)) {}
  // One attempt on one port; FAILED_PRECONDITION when the port was taken.
  absl::Status Launch(int port);

  // Config, TSDB and log; declared first so it goes after the process.
  const ScopedTempDir dir_;
  const PrometheusServerOptions options_;
  int port_ = 0;
  std::unique_ptr<ChildProcess> process_;
};

// The value of the only sample of an instant-vector answer of
// /api/v1/query, e.g. {"status":"success","data":{"resultType":"vector",
// "result":[{"metric":{},"value":[1700000000.123,"37"]}]}}. NOT_FOUND for an
// empty result, FAILED_PRECONDITION for several samples.
absl::StatusOr<double> SingleSampleValue(const std::string& json);

}  // namespace convserve

#endif  // CONVSERVE_TESTS_OBSERVABILITY_PROMETHEUS_SERVER_H_
