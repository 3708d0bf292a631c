# Runtime: plan cache (fake builder, no GPU), unload and SIGTERM under traffic.
convserve_test(plan_cache_test runtime/plan_cache_test.cc LABELS unit)
convserve_test(unload_during_traffic_test runtime/unload_during_traffic_test.cc LABELS integration)
convserve_test(sigterm_during_traffic_test runtime/sigterm_during_traffic_test.cc
  LABELS integration)
target_compile_definitions(sigterm_during_traffic_test PRIVATE
  CONVSERVE_SERVER_BINARY="$<TARGET_FILE:convserve-server>")
add_dependencies(sigterm_during_traffic_test convserve-server)

# Engine search containment without a GPU: EngineProber against a fake prober
# process that faults, crashes or hangs on request.
add_executable(fake_prober test_util/fake_prober_main.cc)
target_link_libraries(fake_prober PRIVATE convserve_engine absl::flags absl::flags_parse)
convserve_test(engine_prober_test unit/engine/runtime/engine_prober_test.cc LABELS unit)
target_compile_definitions(engine_prober_test PRIVATE
  CONVSERVE_FAKE_PROBER="$<TARGET_FILE:fake_prober>")
add_dependencies(engine_prober_test fake_prober)
