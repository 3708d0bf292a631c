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

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_INFER_CALL_H_
