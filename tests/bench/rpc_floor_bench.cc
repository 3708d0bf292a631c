// The gRPC floor under convserve-load's figures: round trips of KServe
// ServerLive (no tensor, no worker, no GPU) against a running server, one at
// a time, over a channel made as convserve-load makes its own: sync calls and
// callback calls (convserve-load's way, the next call sent from the previous
// one's callback). Prints p50/p90/p99 in ms.
//   rpc_floor_bench --server=127.0.0.1:8001 --requests=20000
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/notification.h"
#include "inference/grpc_predict_v2.grpc.pb.h"

ABSL_FLAG(std::string, server, "127.0.0.1:8001", "server address");
ABSL_FLAG(int, requests, 20000, "round trips per mode (after 1000 warm-up ones)");

namespace convserve {
namespace {

using Clock = std::chrono::steady_clock;

void Print(const char* mode, std::vector<double>& ms) {
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) { return ms[static_cast<size_t>(q * (ms.size() - 1))]; };
  std::printf("rpc floor %-28s n=%zu p50 %.3f ms p90 %.3f ms p99 %.3f ms\n", mode, ms.size(),
              at(0.5), at(0.9), at(0.99));
}

// Sends `count` ServerLive calls one after another from their callbacks.
class CallbackChain {
 public:
  CallbackChain(inference::GRPCInferenceService::Stub* stub, int count)
      : stub_(stub), left_(count) {}
  std::vector<double> Run() {
    Next();
    done_.WaitForNotification();
    return ms_;
  }

 private:
  void Next() {
    context_ = std::make_unique<grpc::ClientContext>();
    start_ = Clock::now();
    stub_->async()->ServerLive(context_.get(), &request_, &response_, [this](grpc::Status s) {
      ms_.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start_).count());
      if (!s.ok()) std::fprintf(stderr, "ServerLive: %s\n", s.error_message().c_str());
      if (--left_ > 0 && s.ok()) {
        Next();
      } else {
        done_.Notify();
      }
    });
  }
  inference::GRPCInferenceService::Stub* stub_;
  int left_;
  std::unique_ptr<grpc::ClientContext> context_;
  inference::ServerLiveRequest request_;
  inference::ServerLiveResponse response_;
  Clock::time_point start_;
  std::vector<double> ms_;
  absl::Notification done_;
};

int Main() {
  grpc::ChannelArguments args;
  auto channel = grpc::CreateCustomChannel(absl::GetFlag(FLAGS_server),
                                           grpc::InsecureChannelCredentials(), args);
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  const int n = absl::GetFlag(FLAGS_requests);
  std::vector<double> sync_ms;
  for (int i = 0; i < n + 1000; ++i) {
    grpc::ClientContext context;
    inference::ServerLiveRequest request;
    inference::ServerLiveResponse response;
    const Clock::time_point start = Clock::now();
    const grpc::Status status = stub->ServerLive(&context, request, &response);
    if (!status.ok()) {
      std::fprintf(stderr, "ServerLive: %s\n", status.error_message().c_str());
      return 1;
    }
    if (i >= 1000) {
      sync_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
  }
  Print("ServerLive, sync", sync_ms);
  CallbackChain(stub.get(), 1000).Run();
  std::vector<double> callback_ms = CallbackChain(stub.get(), n).Run();
  Print("ServerLive, callback (as load)", callback_ms);
  return 0;
}

}  // namespace
}  // namespace convserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return convserve::Main();
}
