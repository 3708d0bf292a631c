#include "client/model_infer_bytes.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace convserve {
namespace {

using google::protobuf::internal::WireFormatLite;

// ModelInferResponse.raw_output_contents (grpc_predict_v2.proto).
constexpr int kRawOutputContentsField = 6;

}  // namespace

SerializedModelInferRequest::SerializedModelInferRequest(
    const inference::ModelInferRequest& request)
    : bytes_(request.SerializeAsString()) {}

grpc::ByteBuffer SerializedModelInferRequest::Buffer() const {
  grpc::Slice slice(bytes_.data(), bytes_.size(), grpc::Slice::STATIC_SLICE);
  return grpc::ByteBuffer(&slice, 1);
}

absl::StatusOr<ModelInferResponseBytes> ParseModelInferResponseBytes(grpc::ByteBuffer received) {
  ModelInferResponseBytes parsed;
  parsed.buffer = std::move(received);
  const size_t total = parsed.buffer.Length();
  const auto malformed = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed ModelInferResponse (", total, " bytes): ", why));
  };
  // Every field but the raw contents is copied, as it came, into
  // `header_bytes` and parsed from there; those are small.
  std::string header_bytes;
  {
    grpc::ProtoBufferReader reader(&parsed.buffer);
    google::protobuf::io::CodedInputStream input(&reader);
    input.SetTotalBytesLimit(INT_MAX);
    google::protobuf::io::StringOutputStream header_stream(&header_bytes);
    google::protobuf::io::CodedOutputStream header(&header_stream);
    while (true) {
      const uint32_t tag = input.ReadTag();
      if (tag == 0) break;  // the end, or a bad tag (told apart below)
      if (WireFormatLite::GetTagFieldNumber(tag) == kRawOutputContentsField &&
          WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
        uint32_t length = 0;
        if (!input.ReadVarint32(&length)) return malformed("bad raw_output_contents length");
        const int at = input.CurrentPosition();
        if (!input.Skip(static_cast<int>(length))) {
          return malformed(absl::StrCat("raw_output_contents of ", length, " bytes at offset ",
                                        at, " runs past the end"));
        }
        parsed.raw_output_contents.push_back(
            {static_cast<size_t>(at), static_cast<size_t>(length)});
        continue;
      }
      if (!WireFormatLite::SkipField(&input, tag, &header)) {
        return malformed(absl::StrCat("field ", WireFormatLite::GetTagFieldNumber(tag),
                                      " is cut short or of an unknown wire type"));
      }
    }
    if (static_cast<size_t>(input.CurrentPosition()) != total) {
      return malformed(absl::StrCat("unreadable field at offset ", input.CurrentPosition()));
    }
  }
  if (!parsed.header.ParseFromString(header_bytes)) {
    return malformed("its fields other than raw_output_contents do not parse");
  }
  return parsed;
}

absl::Status CopyByteBufferRange(const grpc::ByteBuffer& buffer,
                                 ModelInferResponseBytes::Range range, std::string* out) {
  if (range.offset > buffer.Length() || range.size > buffer.Length() - range.offset) {
    return absl::OutOfRangeError(absl::StrCat("bytes [", range.offset, ", ",
                                              range.offset + range.size, ") of a buffer of ",
                                              buffer.Length()));
  }
  std::vector<grpc::Slice> slices;
  if (grpc::Status dumped = buffer.Dump(&slices); !dumped.ok()) {
    return absl::InternalError(absl::StrCat("reading the response: ", dumped.error_message()));
  }
  out->resize(range.size);
  size_t skip = range.offset;
  size_t written = 0;
  for (const grpc::Slice& slice : slices) {
    if (written == range.size) break;
    if (skip >= slice.size()) {
      skip -= slice.size();
      continue;
    }
    const size_t take = std::min(slice.size() - skip, range.size - written);
    std::memcpy(out->data() + written, slice.begin() + skip, take);
    written += take;
    skip = 0;
  }
  return absl::OkStatus();
}

}  // namespace convserve
