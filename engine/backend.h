// The Backend interface: a backend compiles a (graph, input shape) pair into an
// Executable that runs requests of that shape. The server only sees this
// interface, so the CPU reference and the cuDNN backend are interchangeable.
#ifndef CONVSERVE_ENGINE_BACKEND_H_
#define CONVSERVE_ENGINE_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "engine/graph.h"
#include "engine/tensor.h"

namespace convserve {

// Asked between layers whether the request is still wanted; true stops the
// run. Called on the running thread; an empty function never cancels.
using CancelCheck = std::function<bool()>;

// What a run stopped by its CancelCheck returns, after `layers_done` of
// `layers` layers: one wording for every backend and runner.
inline absl::Status LayersCancelledError(const Graph& graph, size_t layers_done, size_t layers) {
  return absl::CancelledError(absl::StrCat("graph '", graph.name(), "' stopped after layer ",
                                           layers_done, " of ", layers,
                                           ": the client cancelled or the deadline passed"));
}

// One graph compiled for one input shape. Thread-safety: Run may be called
// from several threads at once unless a backend documents otherwise.
class Executable {
 public:
  virtual ~Executable() = default;

  // Logical N, C, spatial... of the input and of the final output.
  virtual const Shape& input_shape() const = 0;
  virtual const Shape& output_shape() const = 0;

  // Runs the graph. `input` holds exactly the input tensor's bytes in the
  // graph's dtype and layout; `output` has room for exactly the output
  // tensor. On error `output` is unspecified and must not be returned.
  // `cancelled` is polled before every layer after the first; when it turns
  // true the run stops there with CANCELLED, so an abandoned request frees
  // its thread within one layer's time.
  virtual absl::Status Run(absl::Span<const uint8_t> input, absl::Span<uint8_t> output,
                           const CancelCheck& cancelled) = 0;
  // Runs to the end (benchmarks, tests, verifiers: nobody cancels).
  absl::Status Run(absl::Span<const uint8_t> input, absl::Span<uint8_t> output) {
    return Run(input, output, CancelCheck());
  }
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu", "cudnn".
  virtual std::string name() const = 0;
  // A line for the start-up log: devices, versions, threads.
  virtual std::string Describe() const = 0;

  // Checks the shape (Graph::InferShapes) and builds what running it needs.
  // The executable keeps `graph` alive.
  virtual absl::StatusOr<std::shared_ptr<Executable>> Compile(
      std::shared_ptr<const Graph> graph, const Shape& input_shape) = 0;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_BACKEND_H_
