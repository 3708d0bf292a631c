// The Backend interface: a backend compiles a (graph, input shape) pair into an
// Executable that runs requests of that shape. The server only sees this
// interface, so the CPU reference and the cuDNN backend are interchangeable.
#ifndef CONVSERVE_ENGINE_BACKEND_H_
#define CONVSERVE_ENGINE_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/graph.h"
#include "engine/tensor.h"

namespace convserve {

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
  virtual absl::Status Run(absl::Span<const uint8_t> input, absl::Span<uint8_t> output) = 0;
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
