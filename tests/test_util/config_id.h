// An EngineConfigId from its text form, for tests: a malformed text fails the
// test (and yields a default id); a problem's direct configurations by name.
#ifndef CONVSERVE_TESTS_TEST_UTIL_CONFIG_ID_H_
#define CONVSERVE_TESTS_TEST_UTIL_CONFIG_ID_H_

#include <string>
#include <vector>

#include "engine/conv_layer_problem.h"
#include "engine/cudnn/direct_conv.h"
#include "engine/cudnn/engine_config_id.h"
#include "gtest/gtest.h"

namespace convserve {

inline EngineConfigId ConfigId(const std::string& text) {
  absl::StatusOr<EngineConfigId> id = EngineConfigId::Parse(text);
  EXPECT_TRUE(id.ok()) << id.status();
  return id.ok() ? *id : EngineConfigId();
}

// The names of `p`'s direct configurations, in order, each checked to
// parse back and to run `p`.
inline std::vector<std::string> DirectConfigNames(const ConvLayerProblem& p) {
  std::vector<std::string> names;
  for (const EngineConfigId& id : DirectConvConfigs(p)) {
    names.push_back(id.ToString());
    EXPECT_EQ(ConfigId(id.ToString()), id) << "parses back";
    EXPECT_EQ(DirectConfigRejection(p, id), "") << id.ToString();
  }
  return names;
}

}  // namespace convserve

#endif  // CONVSERVE_TESTS_TEST_UTIL_CONFIG_ID_H_
