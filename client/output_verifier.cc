#include "client/output_verifier.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/graph_file.h"
#include "client/reference_graph.h"
#include "engine/cpu/cpu_backend.h"

namespace convserve {

double OutputVerifier::Bound(v1::DataType type) { return type == v1::FLOAT32 ? 1e-3 : 1e-2; }

absl::StatusOr<std::unique_ptr<OutputVerifier>> OutputVerifier::Create(
    const v1::GraphDef& graph, const std::vector<int64_t>& shape, const std::string& input) {
  absl::StatusOr<std::shared_ptr<const Graph>> reference = ReferenceGraph(graph);
  if (!reference.ok()) return reference.status();
  absl::StatusOr<DType> dtype = DTypeFromDef(graph.data_type());
  if (!dtype.ok()) return dtype.status();
  absl::StatusOr<std::unique_ptr<CpuBackend>> backend = CpuBackend::Create({});
  if (!backend.ok()) return backend.status();
  absl::StatusOr<std::shared_ptr<Executable>> executable = (*backend)->Compile(*reference, shape);
  if (!executable.ok()) return executable.status();
  const int64_t in_bytes = NumElements(shape) * static_cast<int64_t>(DTypeSize(*dtype));
  if (static_cast<int64_t>(input.size()) != in_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the input has ", input.size(),
                                                   " bytes; shape and data type need ", in_bytes));
  }
  const int64_t out_count = NumElements((*executable)->output_shape());
  std::string output(out_count * DTypeSize(*dtype), '\0');
  absl::Status ran =
      (*executable)
          ->Run(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(input.data()), input.size()),
                absl::MakeSpan(reinterpret_cast<uint8_t*>(output.data()), output.size()));
  if (!ran.ok()) return ran;
  std::vector<float> expected(out_count);
  ToFloat(*dtype, output.data(), expected.data(), expected.size());
  return std::unique_ptr<OutputVerifier>(
      new OutputVerifier(graph.data_type(), std::move(expected)));
}

OutputVerifier::OutputVerifier(v1::DataType type, std::vector<float> expected)
    : type_(type), element_size_(ElementSize(type)), expected_(std::move(expected)) {
  double sum = 0;
  for (float v : expected_) sum += static_cast<double>(v) * v;
  expected_norm_ = std::sqrt(sum);
  result_.bound = Bound(type);
}

bool OutputVerifier::Check(const std::string& output) {
  std::string problem;
  double rel_l2 = 0;
  if (static_cast<int64_t>(output.size()) != expected_bytes()) {
    problem =
        absl::StrCat("output has ", output.size(), " bytes, the reference ", expected_bytes());
  } else {
    std::vector<float> got(expected_.size());
    ToFloat(*DTypeFromDef(type_), output.data(), got.data(), got.size());
    double diff = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double d = static_cast<double>(got[i]) - expected_[i];
      diff += d * d;
    }
    // An all-zero reference is compared in absolute terms.
    rel_l2 = std::sqrt(diff) / (expected_norm_ > 0 ? expected_norm_ : 1.0);
    // NaN compares false, so a non-finite output is a mismatch too.
    if (!(rel_l2 <= Bound(type_))) {
      problem = absl::StrCat("relative L2 error ", rel_l2, " exceeds ", Bound(type_), " (",
                             v1::DataType_Name(type_), ")");
    }
  }
  absl::MutexLock lock(&mu_);
  ++result_.checked;
  if (std::isnan(rel_l2) || rel_l2 > result_.max_rel_l2) result_.max_rel_l2 = rel_l2;
  if (problem.empty()) return true;
  ++result_.mismatches;
  if (result_.first_problem.empty()) result_.first_problem = problem;
  return false;
}

void OutputVerifier::Unreadable(const std::string& problem) {
  absl::MutexLock lock(&mu_);
  ++result_.checked;
  ++result_.mismatches;
  if (result_.first_problem.empty()) result_.first_problem = problem;
}

VerifyResult OutputVerifier::result() const {
  absl::MutexLock lock(&mu_);
  return result_;
}

}  // namespace convserve
