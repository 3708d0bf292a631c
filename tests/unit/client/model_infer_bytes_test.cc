// model_infer_bytes.h: a serialized request is the message's bytes; a
// response received as bytes, in one slice or cut into many at any point,
// parses to what protobuf parses, its raw outputs read back exactly, and
// malformed bytes are refused with an error instead of read past.
#include "client/model_infer_bytes.h"

#include <grpcpp/support/slice.h>

#include <random>
#include <string>
#include <vector>

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace convserve {
namespace {

// Serialized bytes as gRPC may hand them over: cut into slices at `cuts`.
grpc::ByteBuffer Sliced(const std::string& bytes, std::vector<size_t> cuts) {
  cuts.push_back(bytes.size());
  std::vector<grpc::Slice> slices;
  size_t begin = 0;
  for (size_t end : cuts) {
    slices.emplace_back(bytes.data() + begin, end - begin);  // copies
    begin = end;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string RandomBytes(std::mt19937& rng, size_t n) {
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

inference::ModelInferResponse Response(std::mt19937& rng, const std::vector<size_t>& raw_sizes) {
  inference::ModelInferResponse response;
  response.set_model_name("conv64");
  response.set_model_version("1");
  response.set_id("request-7");
  (*response.mutable_parameters())["sequence_end"].set_bool_param(true);
  for (size_t i = 0; i < raw_sizes.size(); ++i) {
    auto* output = response.add_outputs();
    output->set_name("output" + std::to_string(i));
    output->set_datatype("FP16");
    for (int64_t d : {1, 56, 56, 64}) output->add_shape(d);
    (*output->mutable_parameters())["shared_memory_offset"].set_int64_param(0);
    response.add_raw_output_contents(RandomBytes(rng, raw_sizes[i]));
  }
  return response;
}

void ExpectParsesLikeProtobuf(const inference::ModelInferResponse& expected,
                              grpc::ByteBuffer received) {
  absl::StatusOr<ModelInferResponseBytes> parsed = ParseModelInferResponseBytes(received);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  inference::ModelInferResponse header = expected;
  header.clear_raw_output_contents();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed->header, header))
      << parsed->header.DebugString();
  ASSERT_EQ(parsed->raw_output_contents.size(),
            static_cast<size_t>(expected.raw_output_contents_size()));
  for (int i = 0; i < expected.raw_output_contents_size(); ++i) {
    std::string bytes = "stale";
    ASSERT_TRUE(CopyByteBufferRange(parsed->buffer, parsed->raw_output_contents[i], &bytes).ok());
    EXPECT_EQ(bytes, expected.raw_output_contents(i)) << "raw output " << i;
  }
}

TEST(ModelInferBytesTest, SerializedRequestIsTheMessage) {
  std::mt19937 rng(11);
  inference::ModelInferRequest request;
  request.set_model_name("conv64");
  auto* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype("FP32");
  for (int64_t d : {2, 3, 5, 7}) input->add_shape(d);
  request.add_raw_input_contents(RandomBytes(rng, 2 * 3 * 5 * 7 * 4));
  const SerializedModelInferRequest serialized(request);
  EXPECT_EQ(serialized.size(), request.ByteSizeLong());
  for (int call = 0; call < 2; ++call) {  // each call gets the same bytes
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(serialized.Buffer().Dump(&slices).ok());
    std::string sent;
    for (const grpc::Slice& slice : slices) sent.append(slice.begin(), slice.end());
    inference::ModelInferRequest parsed;
    ASSERT_TRUE(parsed.ParseFromString(sent));
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed, request));
  }
}

TEST(ModelInferBytesTest, OneSliceParsesLikeProtobuf) {
  std::mt19937 rng(1);
  const inference::ModelInferResponse response = Response(rng, {401408});
  ExpectParsesLikeProtobuf(response, Sliced(response.SerializeAsString(), {}));
}

TEST(ModelInferBytesTest, SeededRandomCutsAndSizesParseLikeProtobuf) {
  std::mt19937 rng(20261125);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<size_t> raw_sizes(rng() % 3);
    for (size_t& n : raw_sizes) n = rng() % 3 == 0 ? rng() % 5 : rng() % 70000;
    const inference::ModelInferResponse response = Response(rng, raw_sizes);
    const std::string bytes = response.SerializeAsString();
    std::vector<size_t> cuts;
    size_t at = 0;
    while (bytes.size() > 1) {
      at += 1 + rng() % (trial % 2 == 0 ? 17 : 9000);  // tiny slices and large ones
      if (at >= bytes.size()) break;
      cuts.push_back(at);
    }
    SCOPED_TRACE(testing::Message() << "trial " << trial << ", " << bytes.size() << " bytes, "
                                    << cuts.size() + 1 << " slices");
    ExpectParsesLikeProtobuf(response, Sliced(bytes, cuts));
  }
}

TEST(ModelInferBytesTest, EmptyResponseParses) {
  absl::StatusOr<ModelInferResponseBytes> parsed =
      ParseModelInferResponseBytes(Sliced(std::string(), {}));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->header.outputs_size(), 0);
  EXPECT_TRUE(parsed->raw_output_contents.empty());
}

TEST(ModelInferBytesTest, TruncatedResponsesAreRefused) {
  std::mt19937 rng(3);
  const std::string bytes = Response(rng, {1000, 20}).SerializeAsString();
  // Every cut inside the message but at a field boundary leaves a field cut
  // short; cuts at boundaries are shorter but well-formed messages.
  int refused = 0;
  for (size_t keep = 1; keep < bytes.size(); keep += 7) {
    const std::string head = bytes.substr(0, keep);
    inference::ModelInferResponse reference;
    const bool protobuf_parses = reference.ParseFromString(head);
    absl::StatusOr<ModelInferResponseBytes> parsed =
        ParseModelInferResponseBytes(Sliced(head, {keep / 2}));
    EXPECT_EQ(parsed.ok(), protobuf_parses) << "kept " << keep << " of " << bytes.size();
    if (!parsed.ok()) {
      ++refused;
      EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(parsed.status().message().find("malformed ModelInferResponse"),
                std::string::npos);
    }
  }
  EXPECT_GT(refused, 100);
}

TEST(ModelInferBytesTest, RawContentsLongerThanTheMessageAreRefused) {
  // Field 6, length 1000, then 3 bytes.
  const std::string bytes = std::string("\x32\xe8\x07", 3) + "abc";
  absl::StatusOr<ModelInferResponseBytes> parsed = ParseModelInferResponseBytes(Sliced(bytes, {}));
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("runs past the end"), std::string::npos)
      << parsed.status();
}

TEST(ModelInferBytesTest, CopyOutsideTheBufferIsAnError) {
  const grpc::ByteBuffer buffer = Sliced("0123456789", {3, 7});
  std::string out;
  ASSERT_TRUE(CopyByteBufferRange(buffer, {2, 6}, &out).ok());
  EXPECT_EQ(out, "234567");
  ASSERT_TRUE(CopyByteBufferRange(buffer, {10, 0}, &out).ok());
  EXPECT_EQ(out, "");
  EXPECT_EQ(CopyByteBufferRange(buffer, {5, 6}, &out).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(CopyByteBufferRange(buffer, {11, 0}, &out).code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace convserve
