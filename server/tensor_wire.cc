#include "server/tensor_wire.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/slice.h>

#include <climits>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace convserve {
namespace {

using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::StringOutputStream;
using google::protobuf::internal::WireFormatLite;

// Where the tensor bytes are: ModelInferRequest.raw_input_contents (7),
// ModelInferResponse.raw_output_contents (6); InferRequest.input (2) /
// InferResponse.output (2), and in both Tensor.data (4).
constexpr int kKServeRawInput = 7;
constexpr int kKServeRawOutput = 6;
constexpr int kConvServeTensor = 2;
constexpr int kTensorData = 4;

constexpr uint32_t LengthDelimitedTag(int field) {
  return WireFormatLite::MakeTag(field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
}

// Re-encodes the message on `in` into `out`, except that the length-
// delimited field at `path` (a field number per nesting level) goes into
// buffers from `allocate` instead. False with `error` set on bad input.
bool Extract(CodedInputStream* in, CodedOutputStream* out, absl::Span<const int> path,
             size_t received, const HostAllocator& allocate, std::vector<TensorMemory>* tensors,
             absl::Status* error) {
  while (true) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0) {
      // The end of the message (or of the nested one's limit), or garbage.
      if (in->ConsumedEntireMessage()) return true;
      *error = absl::InvalidArgumentError("malformed field");
      return false;
    }
    if (tag != LengthDelimitedTag(path.front())) {
      if (!WireFormatLite::SkipField(in, tag, out)) {
        *error = absl::InvalidArgumentError("malformed field");
        return false;
      }
      continue;
    }
    uint32_t length = 0;
    // Never allocate or descend past what was received.
    if (!in->ReadVarint32(&length) || length > received || length > INT_MAX) {
      *error = absl::InvalidArgumentError("a length is past the end of the message");
      return false;
    }
    if (path.size() == 1) {
      absl::StatusOr<TensorMemory> buffer = allocate(length);
      if (!buffer.ok()) {
        *error = buffer.status();
        return false;
      }
      if (length > 0 && !in->ReadRaw(buffer->data, static_cast<int>(length))) {
        *error = absl::InvalidArgumentError("truncated tensor bytes");
        return false;
      }
      tensors->push_back(*std::move(buffer));
      continue;
    }
    // A nested message on the path: re-encode it without the tensor.
    std::string inner;
    {
      StringOutputStream inner_stream(&inner);
      CodedOutputStream inner_out(&inner_stream);
      const CodedInputStream::Limit limit = in->PushLimit(static_cast<int>(length));
      if (!Extract(in, &inner_out, path.subspan(1), received, allocate, tensors, error)) {
        return false;
      }
      in->PopLimit(limit);
    }
    out->WriteTag(tag);
    out->WriteVarint32(static_cast<uint32_t>(inner.size()));
    out->WriteString(inner);
  }
}

// Parses `bytes` into `message`, the field at `path` into `tensors`.
absl::Status ParseWithoutTensor(const grpc::ByteBuffer& bytes, absl::Span<const int> path,
                                const HostAllocator& allocate,
                                google::protobuf::MessageLite* message,
                                std::vector<TensorMemory>* tensors) {
  grpc::ByteBuffer copy(bytes);  // shares the slices; the reader consumes its own
  grpc::ProtoBufferReader reader(&copy);
  CodedInputStream input(&reader);
  input.SetTotalBytesLimit(INT_MAX);
  std::string rest;
  absl::Status error;
  {
    StringOutputStream rest_stream(&rest);
    CodedOutputStream output(&rest_stream);
    if (!Extract(&input, &output, path, bytes.Length(), allocate, tensors, &error)) {
      return absl::Status(error.code(), absl::StrCat("the request is not a valid ",
                                                     message->GetTypeName(), ": ",
                                                     error.message()));
    }
  }
  if (!message->ParseFromString(rest)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request is not a valid ", message->GetTypeName()));
  }
  return absl::OkStatus();
}

void ReleaseHold(void* hold) { delete static_cast<std::shared_ptr<const void>*>(hold); }

// The tensor's bytes as a slice that holds their buffer until gRPC lets go.
grpc::Slice TensorSlice(const TensorMemory& tensor) {
  return grpc::Slice(tensor.data, tensor.bytes, ReleaseHold,
                     new std::shared_ptr<const void>(tensor.hold));
}

// Appends `tag` and a varint to `bytes`.
void AppendTagAndLength(std::string* bytes, uint32_t tag, size_t length) {
  StringOutputStream stream(bytes);
  CodedOutputStream coded(&stream);
  coded.WriteTag(tag);
  coded.WriteVarint32(static_cast<uint32_t>(length));
}

}  // namespace

absl::StatusOr<WireInferRequest> ParseModelInferRequest(const grpc::ByteBuffer& bytes,
                                                        const HostAllocator& allocate) {
  WireInferRequest parsed;
  const int path[] = {kKServeRawInput};
  absl::Status status =
      ParseWithoutTensor(bytes, path, allocate, &parsed.request, &parsed.raw_inputs);
  if (!status.ok()) return status;
  return parsed;
}

absl::StatusOr<grpc::ByteBuffer> SerializeModelInferResponse(
    const inference::ModelInferResponse& response, const TensorMemory* output) {
  if (output != nullptr && response.raw_output_contents_size() > 0) {
    return absl::InternalError("the response header must not hold raw_output_contents");
  }
  std::string header = response.SerializeAsString();
  if (output == nullptr) {
    grpc::Slice slice(header);
    return grpc::ByteBuffer(&slice, 1);
  }
  AppendTagAndLength(&header, LengthDelimitedTag(kKServeRawOutput), output->bytes);
  grpc::Slice slices[2] = {grpc::Slice(header), TensorSlice(*output)};
  return grpc::ByteBuffer(slices, 2);
}

absl::StatusOr<WireConvServeRequest> ParseInferRequest(const grpc::ByteBuffer& bytes,
                                                       const HostAllocator& allocate) {
  WireConvServeRequest parsed;
  const int path[] = {kConvServeTensor, kTensorData};
  absl::Status status = ParseWithoutTensor(bytes, path, allocate, &parsed.request, &parsed.data);
  if (!status.ok()) return status;
  return parsed;
}

absl::StatusOr<grpc::ByteBuffer> SerializeInferResponse(const v1::InferResponse& response,
                                                        const TensorMemory& output) {
  if (!response.output().data().empty()) {
    return absl::InternalError("the response header must not hold output.data");
  }
  // Everything but `output`, then `output` with its data field last, its
  // length covering the data that follows as a separate slice.
  v1::InferResponse rest = response;
  rest.clear_output();
  std::string header = rest.SerializeAsString();
  const std::string tensor = response.output().SerializeAsString();
  std::string data_header;
  AppendTagAndLength(&data_header, LengthDelimitedTag(kTensorData), output.bytes);
  AppendTagAndLength(&header, LengthDelimitedTag(kConvServeTensor),
                     tensor.size() + data_header.size() + output.bytes);
  header += tensor;
  header += data_header;
  grpc::Slice slices[2] = {grpc::Slice(header), TensorSlice(output)};
  return grpc::ByteBuffer(slices, 2);
}

}  // namespace convserve
