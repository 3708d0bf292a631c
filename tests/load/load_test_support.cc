#include "tests/load/load_test_support.h"

#include <google/protobuf/util/json_util.h>

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace convserve {

namespace {

template <typename T>
T OrAbort(absl::StatusOr<T> value) {
  if (!value.ok()) {
    std::fprintf(stderr, "InstrumentedServer: %s\n", value.status().ToString().c_str());
    std::abort();
  }
  return *std::move(value);
}

}  // namespace

InstrumentedServer::InstrumentedServer(InstrumentedBackendOptions options) : runs_(options.runs) {
  core_ = OrAbort(InferenceCore::Create({}, InstrumentedBackend::AroundCpu(std::move(options))));
  GrpcServerOptions server_options;
  server_options.listen_address = "127.0.0.1:0";
  server_options.metrics.listen_address = "";
  server_ = OrAbort(GrpcServer::Start(server_options, core_.get()));
}

std::string InstrumentedServer::address() const {
  return absl::StrCat("127.0.0.1:", server_->port());
}

std::string SourcePath(const std::string& relative) {
  return std::string(CONVSERVE_SOURCE_DIR) + "/" + relative;
}

std::string LoadBinary() { return CONVSERVE_LOAD_BINARY; }

std::string TempPath(const std::string& name) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string test = std::string(info->test_suite_name()) + "." + info->name();
  for (char& c : test) {
    if (c == '/') c = '_';
  }
  return ::testing::TempDir() + "convserve_load_" + test + "_" + name;
}

LoadSessionOptions ResnetSession(const std::string& servers) {
  LoadSessionOptions options;
  options.servers = servers;
  options.graph_file = SourcePath("deploy/examples/resnet_block.textproto");
  options.input_shape = {1, 3, 16, 16};
  options.timeout = absl::Seconds(20);
  return options;
}

std::unique_ptr<LoadSession> CreateSession(const LoadSessionOptions& options) {
  absl::StatusOr<std::unique_ptr<LoadSession>> session =
      LoadSession::Create(options, [](const std::string&) {});
  EXPECT_TRUE(session.ok()) << session.status();
  return session.ok() ? *std::move(session) : nullptr;
}

LoadOptions ClosedLoopByCount(std::vector<int> concurrency, int64_t window_requests, int windows) {
  LoadOptions options;
  options.mode = LoadMode::kClosedLoop;
  options.concurrency = std::move(concurrency);
  options.measurement.warmup = absl::ZeroDuration();
  options.measurement.window_requests = window_requests;
  // Every window agrees with any other: the level ends after exactly `windows`.
  options.measurement.stability_percent = 1e9;
  options.measurement.stable_windows = windows;
  options.measurement.max_windows = windows;
  return options;
}

google::protobuf::Struct ParseJson(const std::string& text) {
  google::protobuf::Struct parsed;
  const auto status = google::protobuf::util::JsonStringToMessage(text, &parsed);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << text;
  return parsed;
}

std::vector<std::vector<std::string>> ParseCsv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      row.push_back(std::move(field));
      field.clear();
    } else if (c == '\n') {
      row.push_back(std::move(field));
      field.clear();
      rows.push_back(std::move(row));
      row.clear();
    } else {
      field += c;
    }
  }
  EXPECT_FALSE(quoted) << "unterminated quote in CSV";
  EXPECT_TRUE(field.empty() && row.empty()) << "CSV does not end with a newline";
  return rows;
}

const google::protobuf::Value& Field(const google::protobuf::Struct& object,
                                     const std::string& name) {
  static const google::protobuf::Value* const kMissing = new google::protobuf::Value();
  auto it = object.fields().find(name);
  if (it == object.fields().end()) {
    ADD_FAILURE() << "JSON object lacks \"" << name << "\"";
    return *kMissing;
  }
  return it->second;
}

}  // namespace convserve
