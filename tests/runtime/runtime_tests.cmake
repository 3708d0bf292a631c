# Runtime: plan cache (fake builder, no GPU), server drain and unload under traffic.
convserve_test(plan_cache_test runtime/plan_cache_test.cc LABELS unit)
