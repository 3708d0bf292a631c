// An EngineConfigId from its text form, for tests: a malformed text fails the
// test (and yields a default id).
#ifndef CONVSERVE_TESTS_TEST_UTIL_CONFIG_ID_H_
#define CONVSERVE_TESTS_TEST_UTIL_CONFIG_ID_H_

#include <string>

#include "engine/cudnn/engine_config_id.h"
#include "gtest/gtest.h"

namespace convserve {

inline EngineConfigId ConfigId(const std::string& text) {
  absl::StatusOr<EngineConfigId> id = EngineConfigId::Parse(text);
  EXPECT_TRUE(id.ok()) << id.status();
  return id.ok() ? *id : EngineConfigId();
}

}  // namespace convserve

#endif  // CONVSERVE_TESTS_TEST_UTIL_CONFIG_ID_H_
