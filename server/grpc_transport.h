// gRPC channel arguments shared by the server and the client for moving
// large tensors over HTTP/2.
#ifndef CONVSERVE_SERVER_GRPC_TRANSPORT_H_
#define CONVSERVE_SERVER_GRPC_TRANSPORT_H_

#include <string>
#include <utility>
#include <vector>

namespace convserve {

// (name, value) pairs for grpc::ChannelArguments::SetInt and
// grpc::ServerBuilder::AddChannelArgument.
std::vector<std::pair<std::string, int>> TransportChannelArgs();

}  // namespace convserve

#endif  // CONVSERVE_SERVER_GRPC_TRANSPORT_H_
