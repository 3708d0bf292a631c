// The server's calls on gRPC's completion-queue API (docs/runtime.md,
// "gRPC's threads"). gRPC 1.51's callback API runs every event of a call on
// a pool of threads that sleep and wake once per event; on a 16-core host
// that cost about 60 µs of CPU per call against about 20 on completion
// queues polled by two threads, and it is used by every method of a
// server as soon as one method (even gRPC's own health service) is on it.
// So every method of convserve-server is served from completion queues:
// each queue has one thread (QueueThreads) that runs what its events say.
//
// A handler gets the call (ServerCall) with its request and response, and
// ends it with ServerCall::Finish exactly once, from any thread: at once,
// or later from a GPU worker. A handler that may block (loading a graph,
// registering memory with the GPU, waiting for requests to finish) runs on
// a control thread instead, so the calls behind it on its queue do not wait.
#ifndef CONVSERVE_SERVER_QUEUED_CALLS_H_
#define CONVSERVE_SERVER_QUEUED_CALLS_H_

#include <grpcpp/completion_queue.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/async_unary_call.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "engine/live_calls.h"
#include "engine/runtime/request_executor.h"

namespace convserve {

// A completion queue of a server, and the server's live calls. A call's
// last events may start operations on its queue (a stream's Finish once its
// last read has failed), and gRPC aborts when an operation starts on a queue
// that is shut down: so every call object holds `calls` (its first member)
// and the queues shut down only once none is left (QueueThreads::Stop).
struct CallQueue {
  grpc::ServerCompletionQueue* cq;
  LiveCalls* calls;
};

// What a unary handler sees of its call.
class ServerCall {
 public:
  virtual ~ServerCall() = default;
  virtual const std::multimap<grpc::string_ref, grpc::string_ref>& client_metadata() const = 0;
  // True once the client cancelled or the deadline passed (gRPC's server
  // deadline filter cancels the call then).
  virtual bool IsCancelled() const = 0;
  // Sends the response (when `status` is OK) or the error. Exactly once.
  virtual void Finish(const grpc::Status& status) = 0;
};

// Finish with an absl::Status (server/grpc_status.h's mapping).
void FinishCall(ServerCall* call, const absl::Status& status);

// An event of a completion queue: the queue's thread calls Proceed.
class QueueTag {
 public:
  virtual void Proceed(bool ok) = 0;

 protected:
  ~QueueTag() = default;
};

// A QueueTag that calls a member function of `T`.
template <typename T, void (T::*Event)(bool)>
class MemberTag final : public QueueTag {
 public:
  explicit MemberTag(T* self) : self_(self) {}
  void Proceed(bool ok) override { (self_->*Event)(ok); }

 private:
  T* const self_;
};

// One unary method on one queue: asked for ahead (`Listen`), handled on
// arrival, deleted once finished and done. A call that never arrived (the
// server shut down) is deleted at once.
template <typename Service, typename Request, typename Response>
class QueuedUnaryCall final : public ServerCall {
 public:
  using RequestMethod = void (Service::*)(grpc::ServerContext*, Request*,
                                          grpc::ServerAsyncResponseWriter<Response>*,
                                          grpc::CompletionQueue*, grpc::ServerCompletionQueue*,
                                          void*);
  // The request is the call's own until the handler returns; a handler may
  // take its contents (ListenUnary with a handler of a non-const request).
  using Handler = std::function<void(ServerCall*, Request*, Response*)>;
  // What every call of the method on that queue shares; outlives them.
  struct Method {
    Service* service;
    RequestMethod request;
    Handler handler;
    CallQueue queue;
    RequestExecutor* control;  // where the handler runs; null: the queue's thread
  };

  // Asks gRPC for the method's next call on the method's queue.
  static void Listen(const Method* method) { new QueuedUnaryCall(method); }

  const std::multimap<grpc::string_ref, grpc::string_ref>& client_metadata() const override {
    return context_.client_metadata();
  }
  bool IsCancelled() const override { return cancelled_.load(std::memory_order_acquire); }
  void Finish(const grpc::Status& status) override {
    // Orders what the finishing thread did (the response) before the
    // deletion on the queue thread, for ThreadSanitizer: gRPC's hand-over
    // between the two is invisible to it.
    finishing_.store(true, std::memory_order_release);
    if (status.ok()) {
      writer_.Finish(response_, status, &finished_);
    } else {
      writer_.FinishWithError(status, &finished_);
    }
  }

 private:
  explicit QueuedUnaryCall(const Method* method)
      : live_(method->queue.calls), method_(method), writer_(&context_) {
    context_.AsyncNotifyWhenDone(&done_);
    (method->service->*method->request)(&context_, &request_, &writer_, method->queue.cq,
                                        method->queue.cq, &arrived_);
  }
  void Arrived(bool ok) {
    if (!ok) {  // the server is shutting down: the call never started
      delete this;
      return;
    }
    Listen(method_);  // the next one, before this one runs
    if (method_->control == nullptr) {
      method_->handler(this, &request_, &response_);
      return;
    }
    absl::Status queued =
        method_->control->Submit([this] { method_->handler(this, &request_, &response_); });
    if (!queued.ok()) FinishCall(this, queued);
  }
  void Finished(bool /*ok*/) {
    finishing_.load(std::memory_order_acquire);
    Release();
  }
  void Done(bool /*ok*/) {
    cancelled_.store(context_.IsCancelled(), std::memory_order_release);
    Release();
  }
  // Two events end a started call: its Finish and gRPC's done.
  void Release() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  LiveCalls::Hold live_;
  const Method* const method_;
  grpc::ServerContext context_;
  Request request_;
  Response response_;
  grpc::ServerAsyncResponseWriter<Response> writer_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> finishing_{false};
  std::atomic<int> refs_{2};
  MemberTag<QueuedUnaryCall, &QueuedUnaryCall::Arrived> arrived_{this};
  MemberTag<QueuedUnaryCall, &QueuedUnaryCall::Finished> finished_{this};
  MemberTag<QueuedUnaryCall, &QueuedUnaryCall::Done> done_{this};
};

// For deducing a template argument from one parameter only.
template <typename T>
struct NotDeduced {
  using type = T;
};

// Asks for `calls` calls ahead of one unary method of `service` on `queue`,
// each handled by `owner`'s member `handler` (of a const request, or of one
// it may take the contents of), on `control` when not null.
// The registration returned is shared by those calls and their successors:
// keep it until the queue has drained.
template <typename Service, typename Owner, typename HandlerRequest, typename Response,
          typename Request = std::remove_const_t<HandlerRequest>>
std::shared_ptr<const void> ListenUnary(
    Service* service,
    typename NotDeduced<typename QueuedUnaryCall<Service, Request, Response>::RequestMethod>::type
        request,
    Owner* owner, void (Owner::*handler)(ServerCall*, HandlerRequest*, Response*),
    CallQueue queue, int calls, RequestExecutor* control = nullptr) {
  using Call = QueuedUnaryCall<Service, Request, Response>;
  auto method = std::make_shared<typename Call::Method>();
  method->service = service;
  method->request = request;
  method->handler = [owner, handler](ServerCall* rpc, Request* in, Response* out) {
    (owner->*handler)(rpc, in, out);
  };
  method->queue = queue;
  method->control = control;
  for (int i = 0; i < calls; ++i) Call::Listen(method.get());
  return method;
}

// The threads of a server's completion queues, one each, blocking on its
// queue and running its events' tags, and the server's live calls. Start
// once the first calls have been asked for: starting a thread orders what
// came before it (the calls' construction) before all the thread does, which
// ThreadSanitizer sees, whereas gRPC's hand-over of a call from the thread
// that asked for it to the thread that receives it is invisible to it
// (Debian's gRPC is not instrumented). Stop after the server has shut down.
class QueueThreads {
 public:
  // `threads` threads (at least one per queue): thread i runs queue
  // i % queues.size().
  QueueThreads(std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues, int threads)
      : queues_(std::move(queues)), thread_count_(std::max<int>(threads, queues_.size())) {}
  ~QueueThreads() { Stop(); }

  // Queue `i` of queue_count(), for asking for calls on it.
  CallQueue queue(int i) { return CallQueue{queues_[i].get(), &calls_}; }
  int queue_count() const { return static_cast<int>(queues_.size()); }
  // Starts the threads (once).
  void Start();
  // Starts the threads if they have not been, waits for every call to end
  // (their last events run on the queues), then shuts the queues down, runs
  // what is left on them and joins the threads.
  void Stop();

 private:
  LiveCalls calls_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  const int thread_count_;
  std::vector<std::thread> threads_;
  bool started_ = false;
  std::atomic<bool> stopped_{false};
};

}  // namespace convserve

#endif  // CONVSERVE_SERVER_QUEUED_CALLS_H_
