# Observability (issue 5): /metrics linted by promtool, a real Prometheus
# scraping the server, health during drain, the Grafana dashboard against the
# exported metrics. Included from tests/CMakeLists.txt. Needs Debian's
# prometheus package (prometheus and promtool; scripts/setup.sh installs it)
# and /usr/bin/python3 (standard library only). One binary, one CTest test
# per behaviour.

# grpc.health.v1 stubs for the health client: the deploy probe's library
# when the top level builds it (server/health_probe.cmake), else our own
# from the same proto (Debian's gRPC packages ship no generated health stubs).
if(TARGET convserve_health_proto)
  set(OBSERVABILITY_HEALTH_PROTO convserve_health_proto)
else()
  set(observability_proto_out ${CMAKE_CURRENT_BINARY_DIR}/observability_proto)
  file(MAKE_DIRECTORY ${observability_proto_out})
  set(observability_health_srcs
    ${observability_proto_out}/grpc/health/v1/health.pb.cc
    ${observability_proto_out}/grpc/health/v1/health.pb.h
    ${observability_proto_out}/grpc/health/v1/health.grpc.pb.cc
    ${observability_proto_out}/grpc/health/v1/health.grpc.pb.h)
  add_custom_command(
    OUTPUT ${observability_health_srcs}
    COMMAND protobuf::protoc
      --proto_path=${PROJECT_SOURCE_DIR}/proto
      --cpp_out=${observability_proto_out}
      --grpc_out=${observability_proto_out}
      --plugin=protoc-gen-grpc=$<TARGET_FILE:gRPC::grpc_cpp_plugin>
      ${PROJECT_SOURCE_DIR}/proto/grpc/health/v1/health.proto
    DEPENDS ${PROJECT_SOURCE_DIR}/proto/grpc/health/v1/health.proto
    COMMENT "protoc grpc/health/v1/health.proto (observability tests)")
  add_library(observability_health_proto STATIC ${observability_health_srcs})
  target_include_directories(observability_health_proto PUBLIC ${observability_proto_out})
  target_link_libraries(observability_health_proto PUBLIC protobuf::libprotobuf gRPC::grpc++)
  set(OBSERVABILITY_HEALTH_PROTO observability_health_proto)
endif()

add_executable(observability_test
  observability/child_process.cc
  observability/gpu_metrics_test.cc
  observability/health_drain_test.cc
  observability/http_get.cc
  observability/metrics_exposition_test.cc
  observability/observed_traffic.cc
  observability/plan_cache_metrics_test.cc
  observability/prometheus_scrape_test.cc
  observability/prometheus_server.cc)
target_link_libraries(observability_test PRIVATE
  convserve_test_util ${OBSERVABILITY_HEALTH_PROTO} GTest::gtest_main)
target_compile_definitions(observability_test PRIVATE
  CONVSERVE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")

foreach(name_and_filter
    "metrics_promtool_test|MetricsExpositionTest.PromtoolCheckMetricsReportsNothing"
    "grafana_dashboard_test|MetricsExpositionTest.DashboardQueriesNameOnlyExportedMetrics:DeployScrapeConfigTest.*"
    "prometheus_scrape_test|PrometheusScrapeTest.*"
    "health_drain_test|HealthDrainTest.*"
    "plan_cache_metrics_test|PlanCacheMetricsTest.*"
    "gpu_metrics_test|GpuMetricsTest.*")
  string(REPLACE "|" ";" parts "${name_and_filter}")
  list(GET parts 0 name)
  list(GET parts 1 filter)
  add_test(NAME ${name} COMMAND observability_test --gtest_filter=${filter})
  set_tests_properties(${name} PROPERTIES LABELS "observability;integration" TIMEOUT 90)
endforeach()
