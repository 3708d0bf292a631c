// The client side of ModelStreamInfer (client/model_infer_stream.h) against
// a fake server that answers by the request's model name: responses are
// matched by id even out of order, "CODE: message" errors keep their code,
// other errors read as UNKNOWN, an unanswered request fails by its deadline,
// and a server without the method fails every request UNIMPLEMENTED.
#include "client/model_infer_stream.h"

#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.grpc.pb.h"

namespace convserve {
namespace {


// Answers each request by its model_name: "echo" at once, "late" only after
// the next request's answer, "not_found" with "NOT_FOUND: ...", "plain" with
// an error without a code, "silent" never.
class FakeStreamService final : public inference::GRPCInferenceService::CallbackService {
 public:
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext*) override {
    return new Reactor;
  }

 private:
  class Reactor final : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                                       inference::ModelStreamInferResponse> {
   public:
    Reactor() { StartRead(&request_); }

    void OnReadDone(bool ok) override {
      Steps steps;
      {
        absl::MutexLock lock(&mu_);
        if (!ok) {
          reads_done_ = true;
        } else {
          Answer(request_);
        }
        steps = NextLocked();
      }
      if (ok) StartRead(&request_);
      Take(steps);
    }

    void OnWriteDone(bool) override {
      Steps steps;
      {
        absl::MutexLock lock(&mu_);
        unwritten_.pop_front();
        writing_ = false;
        steps = NextLocked();
      }
      Take(steps);
    }

    void OnDone() override { delete this; }

   private:
    struct Steps {
      const inference::ModelStreamInferResponse* write = nullptr;
      bool finish = false;
    };

    void Answer(const inference::ModelInferRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      inference::ModelStreamInferResponse response;
      response.mutable_infer_response()->set_id(request.id());
      response.mutable_infer_response()->set_model_name(request.model_name());
      const std::string& kind = request.model_name();
      if (kind == "silent") return;
      if (kind == "not_found") response.set_error_message("NOT_FOUND: model 'x' is not loaded");
      if (kind == "plain") response.set_error_message("something broke");
      if (kind == "late") {
        late_.push_back(std::move(response));
        return;
      }
      unwritten_.push_back(std::move(response));
      for (auto& late : late_) unwritten_.push_back(std::move(late));
      late_.clear();
    }

    Steps NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      Steps steps;
      if (!writing_ && !unwritten_.empty()) {
        writing_ = true;
        steps.write = &unwritten_.front();
      }
      if (!writing_ && reads_done_ && !finished_) {
        finished_ = true;
        steps.finish = true;
      }
      return steps;
    }

    void Take(const Steps& steps) {
      if (steps.write != nullptr) StartWrite(steps.write);
      if (steps.finish) Finish(grpc::Status::OK);
    }

    inference::ModelInferRequest request_;
    absl::Mutex mu_;
    std::deque<inference::ModelStreamInferResponse> unwritten_ ABSL_GUARDED_BY(mu_);
    std::vector<inference::ModelStreamInferResponse> late_ ABSL_GUARDED_BY(mu_);
    bool writing_ ABSL_GUARDED_BY(mu_) = false;
    bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
    bool finished_ ABSL_GUARDED_BY(mu_) = false;
  };
};

// A gRPC server on a free loopback port with `service` (or none at all).
class FakeServer {
 public:
  explicit FakeServer(grpc::Service* service) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    if (service != nullptr) builder.RegisterService(service);
    server_ = builder.BuildAndStart();
  }
  ~FakeServer() { server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5))); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// What one request's `done` saw.
struct Outcome {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  std::string id ABSL_GUARDED_BY(mu);
  std::string model ABSL_GUARDED_BY(mu);

  ModelInferStream::Done Callback() {
    return [this](const absl::Status& s, inference::ModelInferResponse* response) {
      absl::MutexLock lock(&mu);
      status = s;
      if (response != nullptr) {
        id = response->id();
        model = response->model_name();
      }
      done = true;
    };
  }
  // Fails the test unless `done` runs within 10 s.
  absl::Status Await() {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(10)));
    return status;
  }
};

inference::ModelInferRequest Request(const std::string& model) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  request.set_id("replaced by the stream");
  return request;
}

TEST(ModelInferStreamTest, MatchesResponsesByIdAndReadsErrorCodes) {
  FakeStreamService service;
  FakeServer server(&service);
  ConvServeClient client(ClientOptions{server.address()});
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  const inference::ModelInferRequest late = Request("late");
  const inference::ModelInferRequest echo = Request("echo");
  const inference::ModelInferRequest not_found = Request("not_found");
  const inference::ModelInferRequest plain = Request("plain");
  Outcome outcomes[4];
  {
    ModelInferStream stream(&client);
    // "late" is answered after "echo": each answer must still reach its own
    // request.
    stream.Send(&late, "1", deadline, outcomes[0].Callback());
    stream.Send(&echo, "2", deadline, outcomes[1].Callback());
    stream.Send(&not_found, "3", deadline, outcomes[2].Callback());
    stream.Send(&plain, "4", deadline, outcomes[3].Callback());
    for (Outcome& outcome : outcomes) outcome.Await().IgnoreError();
  }
  for (int i : {0, 1}) {
    absl::MutexLock lock(&outcomes[i].mu);
    EXPECT_TRUE(outcomes[i].status.ok()) << outcomes[i].status;
    EXPECT_EQ(outcomes[i].id, absl::StrCat(i + 1));
    EXPECT_EQ(outcomes[i].model, i == 0 ? "late" : "echo");
  }
  {
    absl::MutexLock lock(&outcomes[2].mu);
    EXPECT_EQ(outcomes[2].status, absl::NotFoundError("model 'x' is not loaded"));
  }
  absl::MutexLock lock(&outcomes[3].mu);
  EXPECT_EQ(outcomes[3].status, absl::UnknownError("something broke"));
}

TEST(ModelInferStreamTest, UnansweredRequestFailsByItsDeadlineAndTheStreamGoesOn) {
  FakeStreamService service;
  FakeServer server(&service);
  ConvServeClient client(ClientOptions{server.address()});
  const inference::ModelInferRequest silent = Request("silent");
  const inference::ModelInferRequest echo = Request("echo");
  ModelInferStream stream(&client);
  Outcome unanswered, answered;
  stream.Send(&silent, "a", absl::Now() + absl::Milliseconds(300), unanswered.Callback());
  EXPECT_EQ(unanswered.Await().code(), absl::StatusCode::kDeadlineExceeded);
  stream.Send(&echo, "b", absl::Now() + absl::Seconds(20), answered.Callback());
  EXPECT_TRUE(answered.Await().ok());
}

TEST(ModelInferStreamTest, ServerWithoutStreamingFailsEveryRequestUnimplemented) {
  FakeServer server(nullptr);
  ConvServeClient client(ClientOptions{server.address()});
  const inference::ModelInferRequest echo = Request("echo");
  ModelInferStream stream(&client);
  // Each request after a failed stream opens a new one, and fails the same.
  for (int i = 0; i < 3; ++i) {
    Outcome outcome;
    stream.Send(&echo, absl::StrCat(i), absl::Now() + absl::Seconds(20), outcome.Callback());
    const absl::Status status = outcome.Await();
    EXPECT_EQ(status, absl::UnimplementedError("the server does not serve ModelStreamInfer"));
  }
}

TEST(ModelInferStreamTest, ErrorMessagesWithoutAKnownCodeAreUnknown) {
  EXPECT_EQ(StreamErrorStatus("INVALID_ARGUMENT: inputs[0].shape is wrong"),
            absl::InvalidArgumentError("inputs[0].shape is wrong"));
  EXPECT_EQ(StreamErrorStatus("RESOURCE_EXHAUSTED: queue full"),
            absl::ResourceExhaustedError("queue full"));
  EXPECT_EQ(StreamErrorStatus("in NOT_FOUND: later"), absl::UnknownError("in NOT_FOUND: later"));
  EXPECT_EQ(StreamErrorStatus("NOT_FOUND without colon"),
            absl::UnknownError("NOT_FOUND without colon"));
}

}  // namespace
}  // namespace convserve
