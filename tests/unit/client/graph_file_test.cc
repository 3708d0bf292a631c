// Graph files and made-up parameters (client/graph_file.h): the three file
// forms, and FillParameters' bound, which it checks before allocating
// (tests/fuzz/graph_file_fuzzer.cc found a 40-byte file that made it ask for
// 3 GB; kernel sizes and channels are int32 each, and their product could
// overflow int64, undefined behaviour).
#include "client/graph_file.h"

#include <string>

#include "gtest/gtest.h"

namespace convserve {
namespace {

v1::GraphDef OneLayer(int in_channels, int out_channels, std::vector<int> kernel) {
  v1::GraphDef graph;
  graph.set_name("g");
  graph.set_data_type(v1::FLOAT32);
  graph.set_layout(v1::NCHW);
  graph.set_input_channels(in_channels);
  v1::ConvLayer* layer = graph.add_layers();
  layer->set_out_channels(out_channels);
  for (int k : kernel) layer->add_kernel_size(k);
  return graph;
}

TEST(FillParametersTest, FillsWeightsAndBiasWithinTheBound) {
  // 2 x 3 x 2 x 2 weights and 2 biases: 26 float32 values, 104 bytes.
  v1::GraphDef graph = OneLayer(3, 2, {2, 2});
  ASSERT_TRUE(FillParameters(1, /*with_bias=*/true, &graph, /*max_bytes=*/104).ok());
  EXPECT_EQ(graph.layers(0).weights().size(), 96u);
  EXPECT_EQ(graph.layers(0).bias().size(), 8u);
  v1::GraphDef again = OneLayer(3, 2, {2, 2});
  ASSERT_TRUE(FillParameters(1, /*with_bias=*/true, &again).ok());
  EXPECT_EQ(again.layers(0).weights(), graph.layers(0).weights()) << "same seed, same values";
}

TEST(FillParametersTest, OneByteOverTheBoundIsResourceExhausted) {
  v1::GraphDef graph = OneLayer(3, 2, {2, 2});
  const absl::Status status = FillParameters(1, /*with_bias=*/true, &graph, /*max_bytes=*/103);
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_NE(status.message().find("layers[0]"), std::string::npos) << status;
  EXPECT_TRUE(graph.layers(0).weights().empty());
}

TEST(FillParametersTest, HugeSizesAreRefusedBeforeAllocating) {
  // The fuzzer's case: kernel sizes past the graph's rank, 3 GB of floats
  // (under the default bound, 4 GiB; the fuzzer runs with 64 MiB).
  v1::GraphDef graph = OneLayer(1, 2, {1, 1, 74, 8, 0, 0, 8064, 0, 0, 82});
  absl::Status status =
      FillParameters(1, /*with_bias=*/true, &graph, /*max_bytes=*/int64_t{64} << 20);
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  // Every int32 at its largest: the product passes 2^63.
  const int big = 2147483647;
  v1::GraphDef overflow = OneLayer(big, big, {big, big, big});
  status = FillParameters(1, /*with_bias=*/false, &overflow);
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  // The bound counts every layer, and is checked for all before anything
  // is filled: two layers of 1 GiB each against 1.5 GiB.
  v1::GraphDef two = OneLayer(1, 1 << 14, {128, 128});  // 2^28 float32 weights
  v1::ConvLayer* second = two.add_layers();
  *second = two.layers(0);
  second->set_groups(1 << 14);  // fan-in 128 * 128 again
  status = FillParameters(1, /*with_bias=*/false, &two, /*max_bytes=*/int64_t{3} << 29);
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_NE(status.message().find("layers[1]"), std::string::npos) << status;
  EXPECT_TRUE(two.layers(0).weights().empty()) << "layer 0 was filled before the check";
}

TEST(ParseGraphFileTest, ReadsTextJsonAndBinaryByName) {
  const v1::GraphDef graph = OneLayer(3, 2, {1, 1});
  absl::StatusOr<v1::GraphDef> text =
      ParseGraphFile("g.textproto", "name: 'g' data_type: FLOAT32 input_channels: 3");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->input_channels(), 3);
  absl::StatusOr<v1::GraphDef> json = ParseGraphFile("g.json", R"({"name": "g", "inputChannels": 3})");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->input_channels(), 3);
  absl::StatusOr<v1::GraphDef> binary = ParseGraphFile("g.pb", graph.SerializeAsString());
  ASSERT_TRUE(binary.ok()) << binary.status();
  EXPECT_EQ(binary->layers(0).out_channels(), 2);
  absl::StatusOr<v1::GraphDef> bad = ParseGraphFile("dir/g.textproto", "name: ");
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_NE(bad.status().message().find("dir/g.textproto: "), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("line 1"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace convserve
