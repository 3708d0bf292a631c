// LeastLoadedDevice: least outstanding work wins, lost GPUs are skipped,
// and ties rotate with the start index instead of going to GPU 0.
#include "engine/runtime/device_choice.h"

#include <cstdint>
#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace convserve {
namespace {

std::vector<DeviceLoad> Loads(const std::vector<int64_t>& outstanding,
                              const std::vector<int>& lost = {}) {
  std::vector<DeviceLoad> loads;
  for (int64_t o : outstanding) loads.push_back(DeviceLoad{o, true});
  for (int i : lost) loads[i].usable = false;
  return loads;
}

TEST(LeastLoadedDevice, PicksTheLeastOutstandingWorkFromAnyStart) {
  const std::vector<DeviceLoad> loads = Loads({300, 100, 200});
  for (size_t start = 0; start < 6; ++start) {
    EXPECT_EQ(LeastLoadedDevice(loads, start), 1) << "start " << start;
  }
}

TEST(LeastLoadedDevice, SkipsUnusableDevices) {
  EXPECT_EQ(LeastLoadedDevice(Loads({0, 500, 100}, {0}), 0), 2);
  EXPECT_EQ(LeastLoadedDevice(Loads({0, 500, 100}, {0, 2}), 2), 1);
  EXPECT_EQ(LeastLoadedDevice(Loads({0, 500, 100}, {0, 1, 2}), 1), -1);
  EXPECT_EQ(LeastLoadedDevice({}, 0), -1);
}

// Idle GPUs fed one request at a time (the load that issue 13 saw split
// unevenly): with the start advancing per request, each gets an equal share.
TEST(LeastLoadedDevice, TiesAreSpreadOverAllDevices) {
  for (size_t devices : {2u, 3u, 8u}) {
    const std::vector<DeviceLoad> idle(devices);
    std::map<int, int> picks;
    for (size_t request = 0; request < 64 * devices; ++request) {
      ++picks[LeastLoadedDevice(idle, request)];
    }
    ASSERT_EQ(picks.size(), devices);
    for (const auto& [device, count] : picks) EXPECT_EQ(count, 64) << "device " << device;
  }
}

TEST(LeastLoadedDevice, AmongEqualsTheFirstAtOrAfterStartWins) {
  const std::vector<DeviceLoad> loads = Loads({50, 10, 50, 10});
  EXPECT_EQ(LeastLoadedDevice(loads, 0), 1);
  EXPECT_EQ(LeastLoadedDevice(loads, 2), 3);
  EXPECT_EQ(LeastLoadedDevice(loads, 3), 3);
  EXPECT_EQ(LeastLoadedDevice(loads, 4), 1);
}

}  // namespace
}  // namespace convserve
