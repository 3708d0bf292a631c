// The gRPC floor under convserve-load's figures: round trips of KServe
// ServerLive (no tensor, no worker, no GPU) against a running server, one at
// a time, over a channel made as convserve-load makes its own: sync calls and
// callback calls (convserve-load's way, the next call sent from the previous
// one's callback). Prints p50/p90/p99 in ms.
// With --concurrency, instead: the most ServerLive calls a second the server
// answers with that many in flight, from a light client (completion queues,
// one connection and one thread each), over --seconds: the ceiling of a
// server's gRPC threading for the cheapest call.
//   rpc_floor_bench --server=127.0.0.1:8001 --requests=20000
//   rpc_floor_bench --server=127.0.0.1:8001 --concurrency=64 --connections=4
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/notification.h"
#include "inference/grpc_predict_v2.grpc.pb.h"

ABSL_FLAG(std::string, server, "127.0.0.1:8001", "server address");
ABSL_FLAG(int, requests, 20000, "round trips per mode (after 1000 warm-up ones)");
ABSL_FLAG(int, concurrency, 0, "when > 0, calls in flight for a throughput run instead");
ABSL_FLAG(int, connections, 4, "with --concurrency: connections, one client thread each");
ABSL_FLAG(double, seconds, 3, "with --concurrency: length of the measured run (after 1 s)");

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

// One in-flight ServerLive slot of the throughput run: sent again as soon
// as it is answered, until told to stop.
struct Slot {
  inference::GRPCInferenceService::Stub* stub;
  grpc::CompletionQueue* queue;
  std::unique_ptr<grpc::ClientContext> context;
  inference::ServerLiveRequest request;
  inference::ServerLiveResponse response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<inference::ServerLiveResponse>> reader;
  void Send() {
    context = std::make_unique<grpc::ClientContext>();
    reader = stub->AsyncServerLive(context.get(), request, queue);
    reader->Finish(&response, &status, this);
  }
};

int Throughput(int concurrency) {
  const int connections = std::max(1, absl::GetFlag(FLAGS_connections));
  std::vector<std::unique_ptr<inference::GRPCInferenceService::Stub>> stubs;
  std::vector<std::unique_ptr<grpc::CompletionQueue>> queues;
  for (int c = 0; c < connections; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("convserve.rpc_floor_connection", c);  // a connection of its own
    stubs.push_back(inference::GRPCInferenceService::NewStub(grpc::CreateCustomChannel(
        absl::GetFlag(FLAGS_server), grpc::InsecureChannelCredentials(), args)));
    queues.push_back(std::make_unique<grpc::CompletionQueue>());
  }
  std::vector<std::unique_ptr<Slot>> slots;
  for (int i = 0; i < concurrency; ++i) {
    auto slot = std::make_unique<Slot>();
    slot->stub = stubs[i % connections].get();
    slot->queue = queues[i % connections].get();
    slots.push_back(std::move(slot));
  }
  std::atomic<bool> stop{false};
  std::atomic<int64_t> answered{0}, failed{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < connections; ++c) {
    threads.emplace_back([&, queue = queues[c].get()] {
      void* tag = nullptr;
      bool ok = false;
      while (queue->Next(&tag, &ok)) {
        Slot* slot = static_cast<Slot*>(tag);
        if (!ok || !slot->status.ok()) {
          if (failed.fetch_add(1) == 0) {
            std::fprintf(stderr, "ServerLive: %s\n", slot->status.error_message().c_str());
          }
          continue;  // this slot stops
        }
        answered.fetch_add(1, std::memory_order_relaxed);
        if (!stop.load(std::memory_order_relaxed)) slot->Send();
      }
    });
  }
  for (auto& slot : slots) slot->Send();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const int64_t before = answered.load();
  const Clock::time_point start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(absl::GetFlag(FLAGS_seconds)));
  const int64_t after = answered.load();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  stop = true;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the last answers land
  for (auto& queue : queues) queue->Shutdown();
  for (auto& thread : threads) thread.join();
  std::printf(
      "rpc throughput ServerLive, %d in flight, %d connections: %.0f "
      "calls/s over %.1f s "
      "(%lld failed)\n",
      concurrency, connections, static_cast<double>(after - before) / seconds, seconds,
      static_cast<long long>(failed.load()));
  return failed.load() > 0 ? 1 : 0;
}

int Main() {
  if (absl::GetFlag(FLAGS_concurrency) > 0) return Throughput(absl::GetFlag(FLAGS_concurrency));
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
