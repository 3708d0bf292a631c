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

// Reads a varint of at most `max_bytes` bytes, appending its bytes to `raw`;
// false past that or at the end of the input. The value keeps its low 64
// bits, as protobuf's parser does.
bool ReadVarint(CodedInputStream* in, int max_bytes, uint64_t* value, std::string* raw) {
  *value = 0;
  for (int i = 0; i < max_bytes; ++i) {
    uint8_t byte = 0;
    if (!in->ReadRaw(&byte, 1)) return false;
    raw->push_back(static_cast<char>(byte));
    *value |= static_cast<uint64_t>(byte & 0x7f) << (7 * i);
    if (byte < 0x80) return true;
  }
  return false;
}

// Protobuf's parser's bounds (parse_context.h): a tag takes at most 5 bytes,
// a length at most 5 and stays below 2 GiB, a varint at most 10.
constexpr int kMaxTagBytes = 5;
constexpr int kMaxLengthBytes = 5;
constexpr int kMaxVarintBytes = 10;
constexpr uint64_t kMaxLength = INT_MAX;

// Reads a length of a length-delimited field and checks it against what is
// left of the enclosing message.
bool ReadLength(CodedInputStream* in, uint32_t* length, std::string* raw, absl::Status* error) {
  uint64_t value = 0;
  if (!ReadVarint(in, kMaxLengthBytes, &value, raw) || value > kMaxLength ||
      value > static_cast<uint64_t>(in->BytesUntilLimit())) {
    *error = absl::InvalidArgumentError("a length is past the end of the message");
    return false;
  }
  *length = static_cast<uint32_t>(value);
  return true;
}

// Copies the value of a field with tag `tag` (not on the tensor's path)
// from `in` to `out` as it was sent, checking it as protobuf's parser would:
// varints of at most 10 bytes, lengths within the message, groups closed by
// their own end tag. The copy is parsed by protobuf later, so what the bytes
// mean is checked there.
bool CopyField(CodedInputStream* in, uint32_t tag, std::string* out, absl::Status* error,
               int depth) {
  const auto malformed = [error] {
    *error = absl::InvalidArgumentError("malformed field");
    return false;
  };
  uint64_t value = 0;
  switch (WireFormatLite::GetTagWireType(tag)) {
    case WireFormatLite::WIRETYPE_VARINT:
      return ReadVarint(in, kMaxVarintBytes, &value, out) || malformed();
    case WireFormatLite::WIRETYPE_FIXED64:
    case WireFormatLite::WIRETYPE_FIXED32: {
      const int bytes =
          WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_FIXED64 ? 8 : 4;
      std::string fixed;
      if (!in->ReadString(&fixed, bytes)) return malformed();
      out->append(fixed);
      return true;
    }
    case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
      uint32_t length = 0;
      if (!ReadLength(in, &length, out, error)) return false;
      std::string bytes;
      if (!in->ReadString(&bytes, static_cast<int>(length))) return malformed();
      out->append(bytes);
      return true;
    }
    case WireFormatLite::WIRETYPE_START_GROUP: {
      // Protobuf's parser nests at most 100 deep.
      if (depth >= 100) return malformed();
      while (true) {
        uint64_t inner = 0;
        if (!ReadVarint(in, kMaxTagBytes, &inner, out)) return malformed();
        const uint32_t inner_tag = static_cast<uint32_t>(inner);
        if (WireFormatLite::GetTagFieldNumber(inner_tag) == 0) return malformed();
        if (WireFormatLite::GetTagWireType(inner_tag) == WireFormatLite::WIRETYPE_END_GROUP) {
          return WireFormatLite::GetTagFieldNumber(inner_tag) ==
                     WireFormatLite::GetTagFieldNumber(tag) ||
                 malformed();
        }
        if (!CopyField(in, inner_tag, out, error, depth + 1)) return false;
      }
    }
    default:  // an end group without its start, or wire types 6 and 7
      return malformed();
  }
}

// Copies the message on `in` (up to the current limit) to `out` as sent,
// except that the length-delimited field at `path` (a field number per
// nesting level) goes into buffers from `allocate` instead, and messages on
// the path are re-encoded without it. False with `error` set on bad input.
bool Extract(CodedInputStream* in, std::string* out, absl::Span<const int> path,
             const HostAllocator& allocate, std::vector<TensorMemory>* tensors,
             absl::Status* error) {
  while (in->BytesUntilLimit() > 0) {
    std::string tag_bytes;
    uint64_t value = 0;
    if (!ReadVarint(in, kMaxTagBytes, &value, &tag_bytes) ||
        WireFormatLite::GetTagFieldNumber(static_cast<uint32_t>(value)) == 0) {
      *error = absl::InvalidArgumentError("malformed field");
      return false;
    }
    const uint32_t tag = static_cast<uint32_t>(value);
    if (tag != LengthDelimitedTag(path.front())) {
      out->append(tag_bytes);
      if (!CopyField(in, tag, out, error, 0)) return false;
      continue;
    }
    uint32_t length = 0;
    std::string length_bytes;
    // Never allocate or descend past what was received.
    if (!ReadLength(in, &length, &length_bytes, error)) return false;
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
    // A nested message on the path: re-encoded without the tensor.
    std::string inner;
    const CodedInputStream::Limit limit = in->PushLimit(static_cast<int>(length));
    if (!Extract(in, &inner, path.subspan(1), allocate, tensors, error)) return false;
    in->PopLimit(limit);
    StringOutputStream stream(out);
    CodedOutputStream coded(&stream);
    coded.WriteTag(tag);
    coded.WriteVarint32(static_cast<uint32_t>(inner.size()));
    coded.WriteString(inner);
  }
  return true;
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
  if (bytes.Length() > kMaxLength) {
    return absl::InvalidArgumentError(absl::StrCat("the request is not a valid ",
                                                   message->GetTypeName(), ": over 2 GiB"));
  }
  // Every read is then bounded by what is left of the message.
  input.PushLimit(static_cast<int>(bytes.Length()));
  std::string rest;
  absl::Status error;
  if (!Extract(&input, &rest, path, allocate, tensors, &error)) {
    return absl::Status(error.code(), absl::StrCat("the request is not a valid ",
                                                   message->GetTypeName(), ": ",
                                                   error.message()));
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
