// convserve-load --verify: the expected output of the run's one request,
// computed once on the CPU reference backend, and the check of a response
// against it by relative L2 error with a per-dtype bound. Thread-safe.
#ifndef CONVSERVE_CLIENT_OUTPUT_VERIFIER_H_
#define CONVSERVE_CLIENT_OUTPUT_VERIFIER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "convserve/v1/convserve.pb.h"

namespace convserve {

struct VerifyResult {
  // Responses compared with the reference.
  int64_t checked = 0;
  // Of those, how many were off by more than `bound` (or had the wrong size).
  int64_t mismatches = 0;
  // Largest relative L2 error seen.
  double max_rel_l2 = 0;
  // The bound for the graph's data type.
  double bound = 0;
  // The first mismatch, for the report.
  std::string first_problem;
};

class OutputVerifier {
 public:
  // `graph` must carry its weights (the server does not return them).
  static absl::StatusOr<std::unique_ptr<OutputVerifier>> Create(const v1::GraphDef& graph,
                                                                const std::vector<int64_t>& shape,
                                                                const std::string& input);

  // Relative L2 bound per data type: float32 1e-3 (a GPU may use TF32),
  // float16 and bfloat16 1e-2.
  static double Bound(v1::DataType type);

  // Compares one response's output bytes; returns false on a mismatch.
  bool Check(const std::string& output);
  // Counts a response whose output could not be read as a mismatch.
  void Unreadable(const std::string& problem);
  VerifyResult result() const;
  int64_t expected_bytes() const { return static_cast<int64_t>(expected_.size()) * element_size_; }

 private:
  OutputVerifier(v1::DataType type, std::vector<float> expected);

  const v1::DataType type_;
  const int element_size_;
  const std::vector<float> expected_;
  double expected_norm_ = 0;
  mutable absl::Mutex mu_;
  VerifyResult result_ ABSL_GUARDED_BY(mu_);
};

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_OUTPUT_VERIFIER_H_
