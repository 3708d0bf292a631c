# convserve-health, the gRPC health probe of the container image's HEALTHCHECK
# (server/health_probe_main.cc). Included from the top-level CMakeLists.txt
# after the wire contract, whose PROTO_DIR and PROTO_OUT it reuses. The probe
# has its own copy of the standard grpc.health.v1 proto because Debian's gRPC
# packages ship none. The server serves the same proto on its completion
# queues (server/health_service.h).
set(HEALTH_PROTO grpc/health/v1/health.proto)
set(HEALTH_PROTO_SRCS
  ${PROTO_OUT}/grpc/health/v1/health.pb.cc ${PROTO_OUT}/grpc/health/v1/health.pb.h
  ${PROTO_OUT}/grpc/health/v1/health.grpc.pb.cc ${PROTO_OUT}/grpc/health/v1/health.grpc.pb.h)
add_custom_command(
  OUTPUT ${HEALTH_PROTO_SRCS}
  COMMAND protobuf::protoc
    --proto_path=${PROTO_DIR}
    --cpp_out=${PROTO_OUT}
    --grpc_out=${PROTO_OUT}
    --plugin=protoc-gen-grpc=$<TARGET_FILE:gRPC::grpc_cpp_plugin>
    ${PROTO_DIR}/${HEALTH_PROTO}
  DEPENDS ${PROTO_DIR}/${HEALTH_PROTO}
  COMMENT "protoc ${HEALTH_PROTO}")
add_library(convserve_health_proto STATIC ${HEALTH_PROTO_SRCS})
set_target_properties(convserve_health_proto PROPERTIES UNITY_BUILD OFF)
target_include_directories(convserve_health_proto PUBLIC ${PROTO_OUT})
target_link_libraries(convserve_health_proto PUBLIC protobuf::libprotobuf gRPC::grpc++)

add_executable(convserve-health server/health_probe_main.cc)
target_link_libraries(convserve-health PRIVATE convserve_health_proto
  convserve_channel_credentials absl::flags absl::flags_parse
  absl::status absl::strings)
