// Shared setup of the load generator tests: a real server on loopback around
// an InstrumentedBackend, the session and load options they use, and parsers
// for the CSV and JSON reports.
#ifndef CONVSERVE_TESTS_LOAD_LOAD_TEST_SUPPORT_H_
#define CONVSERVE_TESTS_LOAD_LOAD_TEST_SUPPORT_H_

#include <google/protobuf/struct.pb.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/load_options.h"
#include "client/load_session.h"
#include "server/grpc_server.h"
#include "server/inference_core.h"
#include "tests/test_util/instrumented_backend.h"

namespace convserve {

// A real gRPC server on 127.0.0.1 (free port) around an InstrumentedBackend.
// Unlike TestServer it serves no Prometheus endpoint (GetStatistics still
// works): stopping that endpoint takes about 2 s, and these tests start a
// dozen servers.
class InstrumentedServer {
 public:
  // Aborts the test binary if the server cannot start.
  explicit InstrumentedServer(InstrumentedBackendOptions options = {});

  // "127.0.0.1:PORT".
  std::string address() const;
  InferenceCore* core() const { return core_.get(); }
  // Successful backend runs: the server's request count.
  int64_t run_count() const { return runs_->load(); }

 private:
  std::shared_ptr<std::atomic<int64_t>> runs_;
  std::unique_ptr<InferenceCore> core_;
  // Declared last: stops before the core goes.
  std::unique_ptr<GrpcServer> server_;
};

// A file of the source tree, e.g. "deploy/examples/resnet_block.textproto".
std::string SourcePath(const std::string& relative);
// The convserve-load binary of this build.
std::string LoadBinary();
// A fresh path under the test's temporary directory.
std::string TempPath(const std::string& name);

// deploy/examples/resnet_block.textproto at 1x3x16x16 (about a millisecond a
// request on the CPU backend) against `servers`.
LoadSessionOptions ResnetSession(const std::string& servers);

// A session for `options` that logs nothing; fails the calling test (and
// returns null) when it cannot be made.
std::unique_ptr<LoadSession> CreateSession(const LoadSessionOptions& options);

// Closed loop at `concurrency`, no warm-up, `windows` windows of
// `window_requests` requests each, counted stable after the last.
LoadOptions ClosedLoopByCount(std::vector<int> concurrency, int64_t window_requests, int windows);

// Parses a JSON text; fails the calling test on a syntax error.
google::protobuf::Struct ParseJson(const std::string& text);
// Rows of fields; handles quoted fields.
std::vector<std::vector<std::string>> ParseCsv(const std::string& text);
// Member lookup that fails the test when absent.
const google::protobuf::Value& Field(const google::protobuf::Struct& object,
                                     const std::string& name);

}  // namespace convserve

#endif  // CONVSERVE_TESTS_LOAD_LOAD_TEST_SUPPORT_H_
