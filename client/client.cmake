# The C++ client library and convserve-load (included from the top-level
# CMakeLists.txt).
add_library(convserve_client STATIC
  client/convserve_client.cc
  client/graph_file.cc
  client/tensor_summary.cc)
target_include_directories(convserve_client PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(convserve_client PUBLIC
  convserve_proto convserve_tensor gRPC::grpc++ absl::status absl::statusor absl::strings)

add_executable(convserve-load client/load_main.cc)
target_link_libraries(convserve-load PRIVATE convserve_client absl::flags absl::flags_parse
  absl::time)
