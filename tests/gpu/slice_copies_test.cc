// LaunchSliceCopies on the GPU: seeded random ranges (sizes from 0 to 300 KB,
// source and destination offsets equally and unequally misaligned, more
// ranges than one launch takes) into a buffer filled with a sentinel; every
// byte of every range must arrive and no byte outside them may change.
// Skips without a GPU.
#include "engine/runtime/slice_copies.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "engine/cudnn/cudnn_backend.h"
#include "engine/cudnn/cuda_resources.h"
#include "gtest/gtest.h"
#include "tests/test_util/device_setup.h"

namespace convserve {
namespace {

constexpr uint8_t kSentinel = 0xA5;

// `ranges` ranges of random sizes up to `max_bytes`, laid out without
// overlap at random offsets in a source and a destination buffer; checks the
// copy byte for byte.
void CheckRandomRanges(uint32_t seed, int ranges, size_t max_bytes) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> size_of(0, max_bytes);
  std::uniform_int_distribution<size_t> gap_of(0, 40);
  struct Range {
    size_t from, to, bytes;
  };
  std::vector<Range> layout;
  size_t source_bytes = 0, target_bytes = 0;
  for (int i = 0; i < ranges; ++i) {
    // Every fourth range small, so the byte-wise and head/tail paths see
    // sizes below one 16-byte word too.
    const size_t bytes = i % 4 == 0 ? size_of(rng) % 40 : size_of(rng);
    source_bytes += gap_of(rng);
    target_bytes += gap_of(rng);
    layout.push_back({source_bytes, target_bytes, bytes});
    source_bytes += bytes;
    target_bytes += bytes;
  }
  std::vector<uint8_t> source(source_bytes + 1);
  for (uint8_t& b : source) b = static_cast<uint8_t>(rng());
  absl::StatusOr<DeviceBuffer> from = DeviceBuffer::Create(source.size());
  absl::StatusOr<DeviceBuffer> to = DeviceBuffer::Create(target_bytes + 1);
  ASSERT_TRUE(from.ok() && to.ok());
  ASSERT_EQ(CopyToDevice(from->data(), source.data(), source.size()), cudaSuccess);
  ASSERT_EQ(FillDevice(to->data(), kSentinel, target_bytes + 1), cudaSuccess);
  std::vector<SliceCopy> copies;
  for (const Range& r : layout) {
    copies.push_back({static_cast<const uint8_t*>(from->data()) + r.from,
                      static_cast<uint8_t*>(to->data()) + r.to, r.bytes});
  }
  absl::StatusOr<CudaStream> stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok());
  ASSERT_TRUE(LaunchSliceCopies(copies, stream->get()).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream->get()), cudaSuccess);

  std::vector<uint8_t> expected(target_bytes + 1, kSentinel);
  for (const Range& r : layout) {
    std::copy(source.begin() + r.from, source.begin() + r.from + r.bytes,
              expected.begin() + r.to);
  }
  std::vector<uint8_t> got(target_bytes + 1);
  ASSERT_EQ(cudaMemcpy(got.data(), to->data(), got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  size_t wrong = 0, first_wrong = got.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != expected[i]) {
      ++wrong;
      first_wrong = std::min(first_wrong, i);
    }
  }
  EXPECT_EQ(wrong, 0u) << "seed " << seed << ": first wrong byte at " << first_wrong << " of "
                       << got.size();
}

TEST(SliceCopiesTest, RandomRangesArriveWhole) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  for (uint32_t seed = 1; seed <= 20; ++seed) CheckRandomRanges(seed, 1 + seed % 37, 300 << 10);
}

TEST(SliceCopiesTest, MoreRangesThanOneLaunchTakes) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  CheckRandomRanges(77, 200, 20 << 10);
}

TEST(SliceCopiesTest, NoRangesLaunchNothing) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  EXPECT_TRUE(LaunchSliceCopies({}, nullptr).ok());
}

}  // namespace
}  // namespace convserve
