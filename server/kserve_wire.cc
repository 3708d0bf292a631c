#include "server/kserve_wire.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/slice.h>

#include <climits>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"

namespace convserve {
namespace {

using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::StringOutputStream;
using google::protobuf::internal::WireFormatLite;

// ModelInferRequest.raw_input_contents and ModelInferResponse.raw_output_contents.
constexpr int kRawInputField = 7;
constexpr int kRawOutputField = 6;

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("the request is not a valid ModelInferRequest: ", what));
}

void ReleaseHold(void* hold) { delete static_cast<std::shared_ptr<const void>*>(hold); }

}  // namespace

absl::StatusOr<WireInferRequest> ParseModelInferRequest(const grpc::ByteBuffer& bytes,
                                                        const HostAllocator& allocate) {
  grpc::ByteBuffer copy(bytes);  // shares the slices; the reader consumes its own
  grpc::ProtoBufferReader reader(&copy);
  CodedInputStream input(&reader);
  input.SetTotalBytesLimit(INT_MAX);
  // Every other field is re-encoded here (small: names, shapes, parameters)
  // and parsed by protobuf; the tensor bytes go to their buffers directly.
  std::string rest;
  WireInferRequest parsed;
  {
    StringOutputStream rest_stream(&rest);
    CodedOutputStream output(&rest_stream);
    while (true) {
      const uint32_t tag = input.ReadTag();
      if (tag == 0) break;
      if (WireFormatLite::GetTagFieldNumber(tag) == kRawInputField &&
          WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
        uint32_t length = 0;
        if (!input.ReadVarint32(&length)) return Malformed("truncated raw_input_contents");
        // Never allocate for more than was received.
        if (length > bytes.Length() || length > static_cast<uint32_t>(INT_MAX)) {
          return Malformed("raw_input_contents is longer than the message");
        }
        absl::StatusOr<TensorMemory> buffer = allocate(length);
        if (!buffer.ok()) return buffer.status();
        if (length > 0 && !input.ReadRaw(buffer->data, static_cast<int>(length))) {
          return Malformed("truncated raw_input_contents");
        }
        parsed.raw_inputs.push_back(*std::move(buffer));
        continue;
      }
      if (!WireFormatLite::SkipField(&input, tag, &output)) return Malformed("bad field");
    }
    if (!input.ConsumedEntireMessage()) return Malformed("trailing bytes");
  }
  if (!parsed.request.ParseFromString(rest)) return Malformed("bad fields");
  return parsed;
}

absl::StatusOr<grpc::ByteBuffer> SerializeModelInferResponse(
    const inference::ModelInferResponse& response, const TensorMemory* output) {
  if (response.raw_output_contents_size() > 0) {
    return absl::InternalError("the response header must not hold raw_output_contents");
  }
  std::string header = response.SerializeAsString();
  if (output == nullptr) {
    grpc::Slice slice(header);
    return grpc::ByteBuffer(&slice, 1);
  }
  {
    StringOutputStream stream(&header);
    CodedOutputStream coded(&stream);
    coded.WriteTag(WireFormatLite::MakeTag(kRawOutputField,
                                           WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    coded.WriteVarint32(static_cast<uint32_t>(output->bytes));
  }
  grpc::Slice slices[2] = {
      grpc::Slice(header),
      grpc::Slice(output->data, output->bytes, ReleaseHold,
                  new std::shared_ptr<const void>(output->hold)),
  };
  return grpc::ByteBuffer(slices, 2);
}

}  // namespace convserve
