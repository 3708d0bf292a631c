// One inference request as the runtime sees it: no gRPC types.
#ifndef CONVSERVE_ENGINE_RUNTIME_INFER_CALL_H_
#define CONVSERVE_ENGINE_RUNTIME_INFER_CALL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/graph.h"
#include "engine/tensor.h"

namespace convserve {

// Where one request's time went, in seconds, filled as it runs.
struct InferTimings {
  std::string device;  // where it ran: "0", "1", ... or "cpu"
  double queue = 0;    // accepted -> a worker took it
  double build = 0;    // plan lookups and builds, CUDA graph capture
  double h2d = 0;      // host to device, staging copy included
  double compute = 0;  // all layers on the device
  double d2h = 0;      // device to host, staging copy included
  // GPU: the layers ran as CUDA graphs an earlier request captured.
  bool replayed = false;
  // Dynamic batching: the N of the execution the request ran in (the sum of
  // its batch-mates' N), and how long it waited in the batcher before that
  // batch was formed (also part of `queue`). 0 when it did not go through a
  // batcher.
  int64_t batch_size = 0;
  double batch_delay = 0;
};

// Memory a tensor lives in when it is not in the request or response
// message: a shared-memory region the client registered. System regions are
// host memory, page-locked for the GPU when there is one; CUDA regions are
// device memory of one GPU.
struct TensorMemory {
  enum class Kind { kHost, kDevice };
  Kind kind = Kind::kHost;
  uint8_t* data = nullptr;
  // The bytes the tensor takes (the region may be larger).
  size_t bytes = 0;
  // kDevice: the CUDA ordinal of the memory.
  int device = -1;
  // kHost: page-locked and registered with CUDA, so copies to and from a GPU
  // read and write it directly (no staging copy).
  bool pinned = false;
  // A client's shared-memory region (its size is the request's
  // shared_memory_byte_size), not a buffer the server filled.
  bool shared_region = false;
  // Keeps the region mapped until the call is done: unregistering it while
  // a request uses it waits for the request.
  std::shared_ptr<const void> hold;
};

// The caller keeps `input` and `output` alive until `done` runs.
struct InferCall {
  // The graph to run; the call holds it, so an unload cannot free it early.
  std::shared_ptr<const Graph> graph;
  // Logical N, C, spatial... of the input.
  Shape input_shape;
  // Output shape of every layer, from Graph::InferShapes; the caller (the
  // core) has checked the shape, so runners need not infer it again.
  std::vector<Shape> layer_outputs;
  // Exactly the input tensor's bytes (graph dtype and layout), in host
  // memory; or, when `input_memory` is set, in that memory (and `input`
  // spans it when it is host memory).
  absl::Span<const uint8_t> input;
  std::optional<TensorMemory> input_memory;
  // Resized to the output tensor's bytes and filled on success; or null and
  // `output_memory` set, which receives exactly the output's bytes.
  std::string* output = nullptr;
  std::optional<TensorMemory> output_memory;
  // Polled before the work starts and between layers (where the runner
  // supports it); true skips or stops the work with CANCELLED. Must turn
  // true when the client cancels and when the call's deadline passes.
  std::function<bool()> cancelled;
  // Called exactly once, on a worker thread or (for errors found before
  // queueing) on the caller's; `output_shape` is set on success.
  std::function<void(const absl::Status& status, const Shape& output_shape,
                     const InferTimings& timings)>
      done;
};

// Calls of one graph whose inputs have the same shape but for N (and the
// graph's dtype and layout), run as one execution with N = the sum of theirs
// and split back (dynamic batching). N is the outermost dimension in every
// layout, so call i's input and output are contiguous slices of the batch's.
struct InferBatch {
  std::vector<InferCall> calls;
  // Seconds each call waited in the batcher before the batch was formed (one
  // per call).
  std::vector<double> delays;
};

// One execution of a graph's layers, reported by the runner before it
// answers the requests that ran in it (statistics count executions apart
// from requests, as Triton does).
struct ExecutionEvent {
  std::string graph_name;
  std::string graph_id;
  // It ran a batch the dynamic batcher formed (InferBatch).
  bool batched = false;
  // N of the execution's input.
  int64_t batch_size = 0;
  // Requests joined in it, and those of them answered OK.
  int requests = 0;
  int succeeded = 0;
  // Sum of N of the requests answered OK.
  int64_t succeeded_batch = 0;
  // The execution's own stages (device, build, h2d, compute, d2h).
  InferTimings timings;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_INFER_CALL_H_
