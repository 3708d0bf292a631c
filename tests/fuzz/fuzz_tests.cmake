# libFuzzer targets (CONVSERVE_FUZZ=ON, clang; included from
# tests/CMakeLists.txt). scripts/fuzz.sh runs them; docs/testing.md says how.
# Each target has a seed corpus in corpus/<target>/ (minimized with
# -merge=1) and the inputs of every crash it found in regressions/<target>/.

add_library(convserve_fuzz_server STATIC fuzz/fuzz_server.cc)
target_link_libraries(convserve_fuzz_server PUBLIC convserve_test_util)

set(CONVSERVE_FUZZ_TARGETS graph_def_fuzzer graph_file_fuzzer infer_request_fuzzer
    model_infer_fuzzer)
foreach(target ${CONVSERVE_FUZZ_TARGETS})
  add_executable(${target} fuzz/${target}.cc)
  target_link_libraries(${target} PRIVATE convserve_fuzz_server)
  target_link_options(${target} PRIVATE -fsanitize=fuzzer)
  # Every input that once crashed the target, run again (one execution each).
  # Given files (not a folder), libFuzzer runs each once and writes nothing.
  file(GLOB regressions CONFIGURE_DEPENDS
       ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/regressions/${target}/*)
  if(regressions)
    add_test(NAME ${target}_regressions COMMAND ${target} ${regressions})
    set_tests_properties(${target}_regressions PROPERTIES LABELS "fuzz;unit" TIMEOUT 120)
  endif()
endforeach()

# Every target on its corpus for a few seconds (60 s in all), new inputs in
# the build tree: what CI runs.
add_test(NAME fuzz_smoke COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/fuzz.sh)
set_tests_properties(fuzz_smoke PROPERTIES LABELS fuzz TIMEOUT 300
  ENVIRONMENT "CONVSERVE_FUZZ_BUILD_DIR=${CMAKE_BINARY_DIR};FUZZ_NO_BUILD=1;FUZZ_SECONDS=15;FUZZ_WORK=${CMAKE_CURRENT_BINARY_DIR}/fuzz_smoke")
