# Tests of convserve-load (client/load_*): included from tests/CMakeLists.txt.
# One binary holds every suite (one link instead of six); CTest runs each
# suite as its own test.

add_library(convserve_load_test_support STATIC
  test_util/command.cc
  load/load_test_support.cc)
target_include_directories(convserve_load_test_support PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(convserve_load_test_support PUBLIC
  convserve_test_util convserve_load_lib GTest::gtest GTest::gmock)
target_compile_definitions(convserve_load_test_support PRIVATE
  CONVSERVE_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
  CONVSERVE_LOAD_BINARY="$<TARGET_FILE:convserve-load>")

add_executable(load_test
  load/load_breakdown_test.cc
  load/load_generator_test.cc
  load/load_options_test.cc
  load/load_shared_memory_test.cc
  load/load_spread_test.cc
  load/load_stall_test.cc
  load/load_streaming_test.cc
  load/load_verify_test.cc
  load/load_warmup_test.cc
  load/model_infer_stream_test.cc)
target_link_libraries(load_test PRIVATE convserve_load_test_support GTest::gtest_main)
# The binary tests run convserve-load itself.
add_dependencies(load_test convserve-load)

foreach(suite_and_filter
    "load_options_test|ParseRangeTest.*:ValidateLoadOptionsTest.*:SummarizeLatenciesTest.*:ServerPoolTest.*:ResolveTargetTest.*:LoadReportTest.*|unit"
    "load_generator_test|Protocols/LoadGeneratorTest.*:LoadGeneratorOpenLoopTest.*:LoadBreakdownTest.*|integration"
    "load_binary_test|LoadGeneratorBinaryTest.*:LoadVerifyBinaryTest.*|integration"
    "load_stall_test|LoadStallTest.*|integration"
    "load_verify_test|Bounds/LoadVerifyTest.*|integration"
    "load_spread_test|LoadSpreadTest.*|integration"
    "load_shared_memory_test|LoadSharedMemoryTest.*:LoadSharedMemoryBinaryTest.*|integration"
    "load_streaming_test|Tensors/LoadStreamingTest.*:LoadStreamingErrorsTest.*:LoadStreamingBinaryTest.*|integration"
    "model_infer_stream_test|ModelInferStreamTest.*|integration"
    "load_warmup_test|ParseLoadWarmupTest.*:LoadWarmupTest.*|integration")
  string(REPLACE "|" ";" parts "${suite_and_filter}")
  list(GET parts 0 name)
  list(GET parts 1 filter)
  list(GET parts 2 label)
  add_test(NAME ${name} COMMAND load_test --gtest_filter=${filter})
  set_tests_properties(${name} PROPERTIES LABELS "load;${label}" TIMEOUT 120)
endforeach()

# Alone (RUN_SERIAL): its closed loop's p99 must stay under 100 ms and the
# open loop must lose no request at 200 requests a second, wall-clock bounds
# that a CPU-heavy test beside it on CI's 2 cores could break.
set_tests_properties(load_stall_test PROPERTIES RUN_SERIAL TRUE)
