# Runtime: plan cache (fake builder, no GPU), unload and SIGTERM under traffic.
convserve_test(plan_cache_test runtime/plan_cache_test.cc LABELS unit)
convserve_test(unload_during_traffic_test runtime/unload_during_traffic_test.cc LABELS integration)
convserve_test(sigterm_during_traffic_test runtime/sigterm_during_traffic_test.cc
  LABELS integration)
target_compile_definitions(sigterm_during_traffic_test PRIVATE
  CONVSERVE_SERVER_BINARY="$<TARGET_FILE:convserve-server>")
add_dependencies(sigterm_during_traffic_test convserve-server)
