// What gRPC's threading model costs a unary call on this host, without
// convserve: a bare server that answers KServe ServerLive through
//   callback  the callback API (as convserve's services: gRPC 1.51 runs the
//             handler on its own callback threads),
//   cq        the completion-queue API, --threads threads each blocking on
//             its own queue,
//   cqspin    the same, each thread polling its queue without ever blocking;
//   callback-handoff, cq-handoff
//             as callback and cq, but the answer (Finish) is given by another
//             thread that polls for it, as convserve's GPU workers answer;
//   mixed-cqspin, mixed-cq
//             as cqspin and cq for ServerLive, with another method
//             (ServerReady) on the callback API: gRPC's callback threads then
//             exist and keep the poller's role, as they would in a server
//             that moved only its hot method onto a queue.
// --health and --reflection add gRPC's default health service (callback
// API) and its reflection plugin (synchronous API).
// Clients: rpc_floor_bench (round trips one at a time) or any KServe client;
// docs/runtime.md reads the server's CPU per call from /proc.
//   grpc_threading_bench --mode=cq --threads=2 --listen=127.0.0.1:8199
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "inference/grpc_predict_v2.grpc.pb.h"

ABSL_FLAG(std::string, mode, "callback",
          "callback, cq, cqspin, callback-handoff, cq-handoff, mixed-cqspin or "
          "mixed-cq");
ABSL_FLAG(int, threads, 2, "cq, cqspin, mixed-*: threads, one completion queue each");
ABSL_FLAG(bool, health, false, "also serve gRPC's default health service");
ABSL_FLAG(bool, reflection, false, "also serve gRPC's reflection plugin");
ABSL_FLAG(std::string, listen, "127.0.0.1:8199", "address to serve");

namespace convserve {
namespace {

using inference::GRPCInferenceService;

// A thread that runs what it is handed, polling for it (no sleep, so no
// wake-up), as convserve's polling GPU worker does.
class Handoff {
 public:
  Handoff() : thread_([this] { Loop(); }) {}
  ~Handoff() {
    stop_ = true;
    thread_.join();
  }
  void Run(std::function<void()> work) {
    std::lock_guard<std::mutex> lock(mu_);
    work_.push_back(std::move(work));
    pending_.fetch_add(1, std::memory_order_release);
  }

 private:
  void Loop() {
    while (!stop_) {
      if (pending_.load(std::memory_order_acquire) == 0) continue;
      std::function<void()> work;
      {
        std::lock_guard<std::mutex> lock(mu_);
        work = std::move(work_.front());
        work_.pop_front();
        pending_.fetch_sub(1, std::memory_order_relaxed);
      }
      work();
    }
  }
  std::mutex mu_;
  std::deque<std::function<void()>> work_;
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class CallbackLive final : public GRPCInferenceService::CallbackService {
 public:
  explicit CallbackLive(Handoff* handoff) : handoff_(handoff) {}
  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest* /*request*/,
                                       inference::ServerLiveResponse* response) override {
    response->set_live(true);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (handoff_ != nullptr) {
      handoff_->Run([reactor] { reactor->Finish(grpc::Status::OK); });
    } else {
      reactor->Finish(grpc::Status::OK);
    }
    return reactor;
  }

 private:
  Handoff* const handoff_;
};

// ServerLive on completion queues, the rest (ServerReady here) on the
// callback API, as a server that moved only its hot method would be.
// (gRPC 1.51 keeps a callback method's handler when it is marked async: the
// async marking goes innermost.)
using MixedService = GRPCInferenceService::WithCallbackMethod_ServerReady<
    GRPCInferenceService::WithAsyncMethod_ServerLive<GRPCInferenceService::Service>>;

// A completion-queue tag.
class Tag {
 public:
  virtual ~Tag() = default;
  // The queue returned this tag.
  virtual void Proceed(bool ok) = 0;
};

// One ServerLive call of a completion-queue server (of `Service`: all
// methods on queues, or mixed): asked for, then answered, then deleted; its
// own tag throughout.
template <typename Service>
class AsyncLive final : public Tag {
 public:
  AsyncLive(Service* service, grpc::ServerCompletionQueue* queue, Handoff* handoff)
      : service_(service), queue_(queue), handoff_(handoff), writer_(&context_) {
    service_->RequestServerLive(&context_, &request_, &writer_, queue_, queue_, this);
  }
  void Proceed(bool ok) override {
    if (answered_ || !ok) {  // answered, or the server is shutting down
      delete this;
      return;
    }
    new AsyncLive(service_, queue_, handoff_);  // the next call on this queue
    answered_ = true;
    response_.set_live(true);
    if (handoff_ != nullptr) {
      handoff_->Run([this] { writer_.Finish(response_, grpc::Status::OK, this); });
    } else {
      writer_.Finish(response_, grpc::Status::OK, this);
    }
  }

 private:
  Service* const service_;
  grpc::ServerCompletionQueue* const queue_;
  Handoff* const handoff_;
  grpc::ServerContext context_;
  inference::ServerLiveRequest request_;
  inference::ServerLiveResponse response_;
  grpc::ServerAsyncResponseWriter<inference::ServerLiveResponse> writer_;
  bool answered_ = false;
};

// What --mode names: which API, whether its pollers ever sleep, and whether
// the answer is handed to another thread.
struct Mode {
  const char* name;
  bool completion_queues;
  bool spin;
  bool handoff;
  bool mixed;  // ServerLive on queues, other methods on the callback API
};
constexpr Mode kModes[] = {{"callback", false, false, false, false},
                           {"cq", true, false, false, false},
                           {"cqspin", true, true, false, false},
                           {"callback-handoff", false, false, true, false},
                           {"cq-handoff", true, false, true, false},
                           {"mixed-cqspin", true, true, false, true},
                           {"mixed-cq", true, false, false, true}};

void Poll(grpc::ServerCompletionQueue* queue, bool spin) {
  void* tag = nullptr;
  bool ok = false;
  if (spin) {
    for (;;) {
      const grpc::CompletionQueue::NextStatus status =
          queue->AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC));
      if (status == grpc::CompletionQueue::SHUTDOWN) return;
      if (status == grpc::CompletionQueue::GOT_EVENT) static_cast<Tag*>(tag)->Proceed(ok);
    }
  }
  while (queue->Next(&tag, &ok)) static_cast<Tag*>(tag)->Proceed(ok);
}

int Main() {
  const std::string name = absl::GetFlag(FLAGS_mode);
  const Mode* mode = nullptr;
  for (const Mode& m : kModes) {
    if (name == m.name) mode = &m;
  }
  if (mode == nullptr) {
    std::fprintf(stderr,
                 "--mode must be callback, cq, cqspin, callback-handoff, cq-handoff, "
                 "mixed-cqspin or mixed-cq, got '%s'\n",
                 name.c_str());
    return 2;
  }
  std::unique_ptr<Handoff> handoff;
  if (mode->handoff) handoff = std::make_unique<Handoff>();
  if (absl::GetFlag(FLAGS_health)) grpc::EnableDefaultHealthCheckService(true);
  if (absl::GetFlag(FLAGS_reflection)) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen), grpc::InsecureServerCredentials());
  CallbackLive callback(handoff.get());
  GRPCInferenceService::AsyncService async;
  MixedService mixed;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues;
  if (!mode->completion_queues) {
    builder.RegisterService(&callback);
  } else {
    if (mode->mixed) {
      builder.RegisterService(&mixed);
    } else {
      builder.RegisterService(&async);
    }
    for (int i = 0; i < std::max(absl::GetFlag(FLAGS_threads), 1); ++i) {
      queues.push_back(builder.AddCompletionQueue());
    }
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    std::fprintf(stderr, "cannot listen on %s\n", absl::GetFlag(FLAGS_listen).c_str());
    return 1;
  }
  std::vector<std::thread> pollers;
  for (auto& queue : queues) {
    // Calls asked for ahead.
    for (int k = 0; k < 16; ++k) {
      if (mode->mixed) {
        new AsyncLive<MixedService>(&mixed, queue.get(), handoff.get());
      } else {
        new AsyncLive<GRPCInferenceService::AsyncService>(&async, queue.get(), handoff.get());
      }
    }
    pollers.emplace_back(Poll, queue.get(), mode->spin);
  }
  std::printf("serving ServerLive (%s) on %s\n", mode->name, absl::GetFlag(FLAGS_listen).c_str());
  std::fflush(stdout);
  server->Wait();  // until killed
  return 0;
}

}  // namespace
}  // namespace convserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return convserve::Main();
}
