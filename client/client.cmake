# The C++ client library and convserve-load (included from the top-level
# CMakeLists.txt).
# TLS channel credentials, shared with convserve-health.
add_library(convserve_channel_credentials STATIC client/channel_credentials.cc)
target_include_directories(convserve_channel_credentials PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(convserve_channel_credentials PUBLIC gRPC::grpc++ absl::status
  absl::statusor absl::strings)

add_library(convserve_client STATIC
  client/convserve_client.cc
  client/infer_request_sender.cc
  client/model_infer_bytes.cc
  client/model_infer_stream.cc
  client/server_pool.cc
  client/tensor_summary.cc)
target_include_directories(convserve_client PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(convserve_client PUBLIC
  convserve_channel_credentials convserve_graph_file convserve_proto convserve_tensor gRPC::grpc++ absl::status absl::statusor absl::strings
  absl::synchronization absl::time)

# The load generator as a library, so tests drive it in-process. It links the
# engine's CPU backend and the wire translation (not the server's services)
# for --verify's reference outputs.
add_library(convserve_load_lib STATIC
  client/cuda_shared_memory.cc
  client/kserve_request_sender.cc
  client/load_generator.cc
  client/load_level.cc
  client/load_options.cc
  client/load_report.cc
  client/load_session.cc
  client/output_verifier.cc
  client/reference_graph.cc
  client/server_breakdown.cc
  client/shared_memory_tensors.cc
  client/signal_cleanup.cc
  client/system_shared_memory.cc)
target_link_libraries(convserve_load_lib PUBLIC
  convserve_client convserve_engine convserve_wire absl::str_format absl::synchronization absl::time)
# --shared_memory=cuda: device memory exported by CUDA IPC. Only the CUDA
# runtime (static, like the server's), not cuDNN: the load tool needs no cuDNN.
if(CONVSERVE_HAVE_CUDA)
  target_link_libraries(convserve_load_lib PUBLIC CUDA::cudart_static)
  target_compile_definitions(convserve_load_lib PRIVATE CONVSERVE_WITH_CUDA=1)
endif()

add_executable(convserve-load client/load_main.cc)
target_link_libraries(convserve-load PRIVATE convserve_load_lib absl::flags absl::flags_parse)
