#include "client/graph_file.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/tensor.h"

namespace convserve {
namespace {

class CollectErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (!first_.empty()) return;
    first_ = absl::StrCat("line ", line + 1, " column ", column + 1, ": ", message);
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

DType ToDType(v1::DataType type) {
  switch (type) {
    case v1::FLOAT16:
      return DType::kFloat16;
    case v1::BFLOAT16:
      return DType::kBFloat16;
    default:
      return DType::kFloat32;
  }
}

std::string FloatsToBytes(v1::DataType type, const std::vector<float>& values) {
  std::string bytes(values.size() * ElementSize(type), '\0');
  FromFloat(ToDType(type), values.data(), bytes.data(), values.size());
  return bytes;
}

}  // namespace

int ElementSize(v1::DataType type) {
  switch (type) {
    case v1::FLOAT32:
      return 4;
    case v1::FLOAT16:
    case v1::BFLOAT16:
      return 2;
    default:
      return 0;
  }
}

absl::StatusOr<std::string> ReadFileBytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::stringstream buffer;
  buffer << file.rdbuf();
  return buffer.str();
}

absl::Status WriteFileBytes(const std::string& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!file) return absl::PermissionDeniedError(absl::StrCat("cannot write '", path, "'"));
  return absl::OkStatus();
}

absl::StatusOr<v1::GraphDef> ReadGraphFile(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileBytes(path);
  if (!bytes.ok()) return bytes.status();
  return ParseGraphFile(path, *bytes);
}

absl::StatusOr<v1::GraphDef> ParseGraphFile(const std::string& path, const std::string& bytes) {
  v1::GraphDef graph;
  if (absl::EndsWith(path, ".pb") || absl::EndsWith(path, ".binpb")) {
    if (!graph.ParseFromString(bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": not a GraphDef in protobuf binary form"));
    }
    return graph;
  }
  if (absl::EndsWith(path, ".json")) {
    auto status = google::protobuf::util::JsonStringToMessage(bytes, &graph);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": not a GraphDef in JSON: ", status.ToString()));
    }
    return graph;
  }
  google::protobuf::TextFormat::Parser parser;
  CollectErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(bytes, &graph)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a GraphDef in protobuf text format: ", errors.first()));
  }
  return graph;
}

absl::Status FillParameters(uint64_t seed, bool with_bias, v1::GraphDef* graph,
                            int64_t max_bytes) {
  const int element = ElementSize(graph->data_type());
  if (element == 0) {
    return absl::InvalidArgumentError(
        "data_type must be FLOAT32, FLOAT16 or BFLOAT16 before parameters can be filled");
  }
  // First every layer's fan-in, and the values of all weights and biases
  // against the bound, so nothing is allocated for a graph past it. Every
  // product is checked before it is taken: the sizes are int32 each, and
  // their product can pass int64.
  const int64_t max_values = max_bytes / element;
  int64_t values = 0;
  std::vector<int64_t> fan_ins;
  int64_t in_channels = graph->input_channels();
  for (int i = 0; i < graph->layers_size(); ++i) {
    const v1::ConvLayer& layer = graph->layers(i);
    const int64_t groups = layer.groups() > 0 ? layer.groups() : 1;
    const int64_t out_channels = layer.out_channels();
    if (in_channels < 1 || out_channels < 1 || layer.kernel_size_size() == 0 ||
        in_channels % groups != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layers[", i, "]: input_channels, out_channels, kernel_size and groups must be "
          "valid before parameters can be filled"));
    }
    int64_t fan_in = in_channels / groups;
    bool too_large = fan_in > max_values;
    for (int64_t k : layer.kernel_size()) {
      const int64_t extent = std::max<int64_t>(k, 1);
      too_large = too_large || fan_in > max_values / extent;
      if (!too_large) fan_in *= extent;
    }
    // Weights and a bias: out_channels * (fan_in + 1) values.
    too_large = too_large || fan_in > (max_values - values) / out_channels - 1;
    if (too_large) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "layers[", i, "]: its weights (out_channels ", out_channels, ", kernel_size [",
          absl::StrJoin(layer.kernel_size(), ", "), "], ", in_channels,
          " input channels, groups ", groups, ") would take the graph's parameters past ",
          max_bytes, " bytes"));
    }
    values += out_channels * (fan_in + 1);
    fan_ins.push_back(fan_in);
    in_channels = out_channels;
  }
  std::mt19937_64 rng(seed);
  for (int i = 0; i < graph->layers_size(); ++i) {
    v1::ConvLayer* layer = graph->mutable_layers(i);
    const int64_t fan_in = fan_ins[i];
    const float bound = std::sqrt(3.0f / static_cast<float>(fan_in));
    std::uniform_real_distribution<float> weight(-bound, bound);
    if (layer->weights().empty()) {
      std::vector<float> weights(layer->out_channels() * fan_in);
      for (float& v : weights) v = weight(rng);
      layer->set_weights(FloatsToBytes(graph->data_type(), weights));
    }
    if (with_bias && layer->bias().empty()) {
      std::uniform_real_distribution<float> bias(-0.1f, 0.1f);
      std::vector<float> biases(layer->out_channels());
      for (float& v : biases) v = bias(rng);
      layer->set_bias(FloatsToBytes(graph->data_type(), biases));
    }
  }
  return absl::OkStatus();
}

std::string RandomTensorBytes(v1::DataType type, int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (float& v : values) v = uniform(rng);
  return FloatsToBytes(type, values);
}

}  // namespace convserve
