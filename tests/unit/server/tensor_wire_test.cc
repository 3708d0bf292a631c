// Inference messages without protobuf's tensor copies (KServe ModelInfer and
// convserve.v1 Infer): a request parsed from gRPC slices (however they split
// the message) gives the same fields and tensor bytes as protobuf's own
// parse; a response with its tensor as a separate slice parses back to the
// same message, and the tensor's buffer is held until the bytes are gone.
#include "server/tensor_wire.h"

#include <grpcpp/support/slice.h>

#include <random>
#include <string>
#include <vector>

#include "engine/runtime/host_buffer_pool.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace convserve {
namespace {

using google::protobuf::util::MessageDifferencer;

inference::ModelInferRequest Request(size_t tensor_bytes) {
  inference::ModelInferRequest request;
  request.set_model_name("resnet_block");
  request.set_id("req-7");
  auto* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype("FP16");
  for (int64_t d : {2, 3, 17, 19}) input->add_shape(d);
  (*input->mutable_parameters())["note"].set_string_param("kept");
  request.add_outputs()->set_name("output");
  std::string bytes(tensor_bytes, '\0');
  std::mt19937 rng(3);
  for (char& c : bytes) c = static_cast<char>(rng());
  request.add_raw_input_contents(bytes);
  return request;
}

// The serialized message cut into slices of `piece` bytes, as the network
// may deliver it.
grpc::ByteBuffer Sliced(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    slices.emplace_back(bytes.substr(at, piece));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

TEST(TensorWireTest, RequestParsedFromSlicesMatchesProtobuf) {
  std::shared_ptr<HostBufferPool> pool = HostBufferPool::CreateUnpinned();
  const HostAllocator allocate = [&](size_t bytes) { return pool->Get(bytes); };
  for (size_t tensor : {size_t{0}, size_t{1}, size_t{4097}, size_t{1} << 20}) {
    const inference::ModelInferRequest request = Request(tensor);
    const std::string serialized = request.SerializeAsString();
    for (size_t piece : {size_t{1} << 30, size_t{4096}, size_t{7}}) {
      if (serialized.size() / piece > 200000) continue;  // keep the slice count sane
      absl::StatusOr<WireInferRequest> parsed =
          ParseModelInferRequest(Sliced(serialized, piece), allocate);
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      inference::ModelInferRequest expected = request;
      expected.clear_raw_input_contents();
      EXPECT_TRUE(MessageDifferencer::Equals(parsed->request, expected));
      ASSERT_EQ(parsed->raw_inputs.size(), 1u);
      const TensorMemory& raw = parsed->raw_inputs[0];
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(raw.data), raw.bytes),
                request.raw_input_contents(0))
          << "tensor " << tensor << " piece " << piece;
    }
  }
}

// Tensors in shared memory: no raw_input_contents, the regions named in
// parameters. However the slices split it, the parse is protobuf's message
// field for field and takes no host buffer; every prefix of it is accepted
// or refused exactly as protobuf's parser does.
TEST(TensorWireTest, RequestWithoutTensorBytesParsedFromSlicesMatchesProtobuf) {
  std::shared_ptr<HostBufferPool> pool = HostBufferPool::CreateUnpinned();
  int allocations = 0;
  const HostAllocator allocate = [&](size_t bytes) {
    ++allocations;
    return pool->Get(bytes);
  };
  inference::ModelInferRequest request = Request(0);
  request.clear_raw_input_contents();
  auto& input = *request.mutable_inputs(0)->mutable_parameters();
  input["shared_memory_region"].set_string_param("in_region");
  input["shared_memory_byte_size"].set_int64_param(2 * 3 * 17 * 19 * 2);
  input["shared_memory_offset"].set_int64_param(4096);
  (*request.mutable_outputs(0)->mutable_parameters())["shared_memory_region"].set_string_param(
      "out_region");
  const std::string serialized = request.SerializeAsString();
  for (size_t piece : {size_t{1} << 30, size_t{7}, size_t{1}}) {
    absl::StatusOr<WireInferRequest> parsed =
        ParseModelInferRequest(Sliced(serialized, piece), allocate);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_TRUE(MessageDifferencer::Equals(parsed->request, request)) << "piece " << piece;
    EXPECT_TRUE(parsed->raw_inputs.empty());
  }
  EXPECT_EQ(allocations, 0);
  for (size_t cut = 1; cut < serialized.size(); ++cut) {
    const std::string prefix = serialized.substr(0, cut);
    inference::ModelInferRequest expected;
    absl::StatusOr<WireInferRequest> parsed = ParseModelInferRequest(Sliced(prefix, 5), allocate);
    // Some prefixes end between fields: protobuf takes those too.
    EXPECT_EQ(parsed.ok(), expected.ParseFromString(prefix)) << "cut at " << cut;
    if (!parsed.ok()) {
      EXPECT_TRUE(absl::IsInvalidArgument(parsed.status())) << parsed.status();
    } else {
      EXPECT_TRUE(MessageDifferencer::Equals(parsed->request, expected)) << "cut at " << cut;
    }
  }
}

TEST(TensorWireTest, MalformedRequestIsInvalidArgument) {
  std::shared_ptr<HostBufferPool> pool = HostBufferPool::CreateUnpinned();
  const HostAllocator allocate = [&](size_t bytes) { return pool->Get(bytes); };
  const std::string serialized = Request(100).SerializeAsString();
  // Cut inside the tensor bytes, and garbage.
  for (const std::string& bytes : {serialized.substr(0, serialized.size() - 10),
                                   std::string("\x3a\xff\xff\xff\xff\x0f", 6),
                                   std::string("\xff\xff", 2)}) {
    absl::StatusOr<WireInferRequest> parsed = ParseModelInferRequest(Sliced(bytes, 5), allocate);
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status()) ||
                absl::IsResourceExhausted(parsed.status()))
        << parsed.status();
  }
}

// Encodings protobuf's parser refuses are refused here too, and valid but
// unusual ones are kept as sent: the wire parser accepts exactly the
// messages protobuf accepts (found by tests/fuzz/infer_request_fuzzer.cc,
// whose first crash was the over-long tag).
struct WireCase {
  std::string name;
  std::string bytes;
};

std::vector<WireCase> RefusedByProtobuf() {
  const std::string graph = std::string("\x0a\x01g", 3);  // InferRequest.graph = "g"
  return {
      // A tag in 6 bytes (protobuf reads at most 5): field 3, varint.
      {"over_long_tag", graph + std::string("\x98\x80\x80\x80\x80\x00\x01", 7)},
      // Field 2 (input) says 20 bytes, 4 follow: a nested message cut short
      // inside what was received.
      {"nested_past_the_end", graph + std::string("\x12\x14\x0a\x02\x01\x02", 6)},
      // An unknown length-delimited field whose length takes 6 bytes.
      {"over_long_length", graph + std::string("\x1a\x81\x80\x80\x80\x80\x00x", 8)},
      // A length of 2 GiB.
      {"length_over_2gib", graph + std::string("\x1a\x80\x80\x80\x80\x08", 6)},
      // A varint in 11 bytes.
      {"over_long_varint",
       graph + std::string("\x18\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", 12)},
      // A group closed by another field's end tag, and an end tag alone.
      {"unmatched_group", graph + std::string("\x1b\x08\x01\x24", 4)},
      {"end_group_alone", graph + std::string("\x1c", 1)},
      // Field number 0 with wire type 2.
      {"field_zero", graph + std::string("\x02\x00", 2)},
  };
}

TEST(TensorWireTest, RequestsProtobufRefusesAreInvalidArgument) {
  std::shared_ptr<HostBufferPool> pool = HostBufferPool::CreateUnpinned();
  const HostAllocator allocate = [&](size_t bytes) { return pool->Get(bytes); };
  for (const WireCase& c : RefusedByProtobuf()) {
    SCOPED_TRACE(c.name);
    v1::InferRequest protobuf;
    ASSERT_FALSE(protobuf.ParseFromString(c.bytes)) << "the case must be invalid protobuf";
    for (size_t piece : {size_t{1}, size_t{3}, size_t{1} << 20}) {
      absl::StatusOr<WireConvServeRequest> parsed = ParseInferRequest(Sliced(c.bytes, piece), allocate);
      EXPECT_TRUE(absl::IsInvalidArgument(parsed.status())) << parsed.status();
    }
  }
}

TEST(TensorWireTest, UnusualButValidEncodingsParseAsProtobufParsesThem) {
  std::shared_ptr<HostBufferPool> pool = HostBufferPool::CreateUnpinned();
  const HostAllocator allocate = [&](size_t bytes) { return pool->Get(bytes); };
  const std::string graph = std::string("\x0a\x01g", 3);
  const std::vector<WireCase> cases = {
      // An unknown field whose length 1 takes 5 bytes, and a tag in 5 bytes.
      {"long_length", graph + std::string("\x1a\x81\x80\x80\x80\x00x", 7)},
      {"long_tag", graph + std::string("\x98\x80\x80\x80\x00\x05", 6)},
      // A closed group holding a fixed32, and input.data in a nested input.
      {"group", graph + std::string("\x1b\x0d\x01\x02\x03\x04\x1c", 7)},
      {"data", graph + std::string("\x12\x06\x0a\x01\x05\x22\x01\x7f", 8)},
  };
  for (const WireCase& c : cases) {
    SCOPED_TRACE(c.name);
    v1::InferRequest expected;
    ASSERT_TRUE(expected.ParseFromString(c.bytes)) << "the case must be valid protobuf";
    for (size_t piece : {size_t{1}, size_t{2}, size_t{1} << 20}) {
      absl::StatusOr<WireConvServeRequest> parsed = ParseInferRequest(Sliced(c.bytes, piece), allocate);
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      v1::InferRequest actual = parsed->request;
      if (!parsed->data.empty()) {
        actual.mutable_input()->set_data(reinterpret_cast<const char*>(parsed->data[0].data),
                                         parsed->data[0].bytes);
      }
      EXPECT_TRUE(MessageDifferencer::Equals(actual, expected));
    }
  }
}

TEST(TensorWireTest, ResponseWithTensorSliceParsesBackAndHoldsTheBuffer) {
  std::shared_ptr<HostBufferPool> pool = HostBufferPool::CreateUnpinned();
  inference::ModelInferResponse header;
  header.set_model_name("resnet_block");
  header.set_model_version("1");
  header.set_id("req-7");
  auto* output = header.add_outputs();
  output->set_name("output");
  output->set_datatype("FP32");
  for (int64_t d : {2, 5, 8, 9}) output->add_shape(d);
  absl::StatusOr<TensorMemory> tensor = pool->Get(2 * 5 * 8 * 9 * 4);
  ASSERT_TRUE(tensor.ok());
  for (size_t i = 0; i < tensor->bytes; ++i) tensor->data[i] = static_cast<uint8_t>(i * 31);
  const std::string expected_bytes(reinterpret_cast<const char*>(tensor->data), tensor->bytes);
  {
    absl::StatusOr<grpc::ByteBuffer> bytes = SerializeModelInferResponse(header, &*tensor);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    tensor->hold.reset();  // the request is done; gRPC still holds the slice
    EXPECT_EQ(pool->cached_bytes(), 0);
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(bytes->Dump(&slices).ok());
    std::string flat;
    for (const grpc::Slice& slice : slices) {
      flat.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    inference::ModelInferResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(flat));
    inference::ModelInferResponse expected = header;
    expected.add_raw_output_contents(expected_bytes);
    EXPECT_TRUE(MessageDifferencer::Equals(parsed, expected));
  }
  EXPECT_GT(pool->cached_bytes(), 0) << "the buffer went back once gRPC let go";
}

TEST(TensorWireTest, ResponseWithoutTensorIsJustTheMessage) {
  inference::ModelInferResponse header;
  header.set_id("x");
  absl::StatusOr<grpc::ByteBuffer> bytes = SerializeModelInferResponse(header, nullptr);
  ASSERT_TRUE(bytes.ok());
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(bytes->Dump(&slices).ok());
  inference::ModelInferResponse parsed;
  ASSERT_TRUE(parsed.ParseFromArray(slices[0].begin(), static_cast<int>(slices[0].size())));
  EXPECT_EQ(parsed.id(), "x");
}

v1::InferRequest ConvServeRequest(size_t tensor_bytes) {
  v1::InferRequest request;
  request.set_graph("resnet_block");
  v1::Tensor* input = request.mutable_input();
  for (int64_t d : {1, 3, 31, 29}) input->add_shape(d);
  input->set_data_type(v1::FLOAT16);
  input->set_layout(v1::NHWC);
  std::string bytes(tensor_bytes, '\0');
  std::mt19937 rng(5);
  for (char& c : bytes) c = static_cast<char>(rng());
  input->set_data(bytes);
  return request;
}

TEST(TensorWireTest, ConvServeRequestParsedFromSlicesMatchesProtobuf) {
  std::shared_ptr<HostBufferPool> pool = HostBufferPool::CreateUnpinned();
  const HostAllocator allocate = [&](size_t bytes) { return pool->Get(bytes); };
  for (size_t tensor : {size_t{1}, size_t{3000}, size_t{1} << 20}) {
    const v1::InferRequest request = ConvServeRequest(tensor);
    const std::string serialized = request.SerializeAsString();
    for (size_t piece : {size_t{1} << 30, size_t{999}, size_t{3}}) {
      if (serialized.size() / piece > 200000) continue;
      absl::StatusOr<WireConvServeRequest> parsed =
          ParseInferRequest(Sliced(serialized, piece), allocate);
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      v1::InferRequest expected = request;
      expected.mutable_input()->clear_data();
      EXPECT_TRUE(MessageDifferencer::Equals(parsed->request, expected));
      ASSERT_EQ(parsed->data.size(), 1u);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(parsed->data[0].data),
                            parsed->data[0].bytes),
                request.input().data());
    }
  }
}

TEST(TensorWireTest, ConvServeRequestWithoutDataHasNoTensor) {
  std::shared_ptr<HostBufferPool> pool = HostBufferPool::CreateUnpinned();
  v1::InferRequest request = ConvServeRequest(0);
  request.mutable_input()->clear_data();
  absl::StatusOr<WireConvServeRequest> parsed = ParseInferRequest(
      Sliced(request.SerializeAsString(), 1 << 20), [&](size_t bytes) { return pool->Get(bytes); });
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->data.empty());
  EXPECT_TRUE(MessageDifferencer::Equals(parsed->request, request));
}

TEST(TensorWireTest, ConvServeResponseWithTensorSliceParsesBack) {
  std::shared_ptr<HostBufferPool> pool = HostBufferPool::CreateUnpinned();
  v1::InferResponse header;
  header.set_graph_id("abc123");
  v1::Tensor* output = header.mutable_output();
  for (int64_t d : {1, 4, 7, 5}) output->add_shape(d);
  output->set_data_type(v1::BFLOAT16);
  output->set_layout(v1::NCHW);
  absl::StatusOr<TensorMemory> tensor = pool->Get(1 * 4 * 7 * 5 * 2);
  ASSERT_TRUE(tensor.ok());
  for (size_t i = 0; i < tensor->bytes; ++i) tensor->data[i] = static_cast<uint8_t>(i * 13 + 1);
  absl::StatusOr<grpc::ByteBuffer> bytes = SerializeInferResponse(header, *tensor);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(bytes->Dump(&slices).ok());
  std::string flat;
  for (const grpc::Slice& slice : slices) {
    flat.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  v1::InferResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(flat));
  v1::InferResponse expected = header;
  expected.mutable_output()->set_data(
      std::string(reinterpret_cast<const char*>(tensor->data), tensor->bytes));
  EXPECT_TRUE(MessageDifferencer::Equals(parsed, expected));
}

}  // namespace
}  // namespace convserve
