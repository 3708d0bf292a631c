// The server-side breakdown against a server that has no statistics call:
// the run still measures, and the report says "server-side breakdown: not
// available from this server" (with the reason) instead of numbers.
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/convserve_client.h"
#include "client/load_generator.h"
#include "client/load_report.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/load/load_test_support.h"

namespace convserve {
namespace {

using ::testing::HasSubstr;

template <typename T>
grpc::Status Forward(const absl::StatusOr<T>& result, T* response) {
  if (!result.ok()) {
    return grpc::Status(static_cast<grpc::StatusCode>(result.status().code()),
                        std::string(result.status().message()));
  }
  *response = *result;
  return grpc::Status::OK;
}

// A convserve.v1 server from before GetStatistics: it forwards the calls it
// had to a real server, and the generated base class answers GetStatistics
// with UNIMPLEMENTED.
class ServerWithoutStatistics final : public v1::ConvServe::Service {
 public:
  explicit ServerWithoutStatistics(const std::string& backend) : client_(Options(backend)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~ServerWithoutStatistics() override { server_->Shutdown(); }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  grpc::Status LoadGraph(grpc::ServerContext*, const v1::LoadGraphRequest* request,
                         v1::LoadGraphResponse* response) override {
    return Forward(client_.LoadGraph(request->graph()), response);
  }
  grpc::Status GetGraph(grpc::ServerContext*, const v1::GetGraphRequest* request,
                        v1::GetGraphResponse* response) override {
    return Forward(client_.GetGraph(request->graph()), response->mutable_graph());
  }
  grpc::Status Infer(grpc::ServerContext*, const v1::InferRequest* request,
                     v1::InferResponse* response) override {
    return Forward(client_.Infer(*request), response);
  }

 private:
  static ClientOptions Options(const std::string& address) {
    ClientOptions options;
    options.address = address;
    return options;
  }

  ConvServeClient client_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST(LoadBreakdownTest, ServerWithoutStatisticsIsReportedAsNotAvailable) {
  InstrumentedServer backend;
  ServerWithoutStatistics server(backend.address());
  absl::StatusOr<std::unique_ptr<LoadSession>> session =
      LoadSession::Create(ResnetSession(server.address()), [](const std::string&) {});
  ASSERT_TRUE(session.ok()) << session.status();
  absl::StatusOr<RunResult> result = RunLoad(**session, ClosedLoopByCount({1}, 10, 1));
  ASSERT_TRUE(result.ok()) << result.status();

  EXPECT_EQ(result->totals.sent, backend.run_count());
  ASSERT_EQ(result->levels.size(), 1u);
  const LevelResult& level = result->levels[0];
  EXPECT_EQ(level.requests, 10);
  EXPECT_EQ(level.server_breakdown.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(FormatReport(*result),
              HasSubstr(absl::StrCat(kServerBreakdownUnavailable, " (UNIMPLEMENTED")));
  EXPECT_THAT(ReportJson(*result), HasSubstr("\"server_breakdown\":null"));
  // The eight server columns empty, then the transport's two.
  EXPECT_THAT(ReportCsv(*result), HasSubstr(",,,,,,,,,none,false\n"));
}

}  // namespace
}  // namespace convserve
