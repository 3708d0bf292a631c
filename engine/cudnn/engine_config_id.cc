#include "engine/cudnn/engine_config_id.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace convserve {

const char* LayerPathName(LayerPath path) {
  switch (path) {
    case LayerPath::kFused:
      return "fused";
    case LayerPath::kUnfused:
      return "unfused";
    case LayerPath::kUnfusedRounding:
      return "unfused_rounding";
    case LayerPath::kDirect:
      return "direct";
  }
  return "unknown";
}

std::string EngineConfigId::ToString() const {
  return absl::StrCat(LayerPathName(path), ":e", engine, ":",
                      absl::StrJoin(knobs, ",", [](std::string* out, const auto& knob) {
                        absl::StrAppend(out, "k", knob.first, "=", knob.second);
                      }));
}

absl::StatusOr<EngineConfigId> EngineConfigId::Parse(absl::string_view text) {
  const auto invalid = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine config '", text,
        "' is not of the form fused|unfused|unfused_rounding|direct:e<index>:k<type>=<value>,..."));
  };
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  if (parts.size() != 3) return invalid();
  EngineConfigId id;
  bool known = false;
  for (LayerPath path : kLayerPaths) {
    if (parts[0] == LayerPathName(path)) {
      id.path = path;
      known = true;
    }
  }
  if (!known) return invalid();
  if (!absl::ConsumePrefix(&parts[1], "e") || !absl::SimpleAtoi(parts[1], &id.engine) ||
      id.engine < 0) {
    return invalid();
  }
  if (!parts[2].empty()) {
    for (absl::string_view knob : absl::StrSplit(parts[2], ',')) {
      std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(knob, '=');
      int64_t type = 0, value = 0;
      if (!absl::ConsumePrefix(&kv.first, "k") || !absl::SimpleAtoi(kv.first, &type) ||
          !absl::SimpleAtoi(kv.second, &value) || type < 0) {
        return invalid();
      }
      id.knobs.emplace_back(type, value);
    }
  }
  if (!std::is_sorted(id.knobs.begin(), id.knobs.end()) ||
      std::adjacent_find(id.knobs.begin(), id.knobs.end(), [](const auto& a, const auto& b) {
        return a.first == b.first;
      }) != id.knobs.end()) {
    return invalid();
  }
  return id;
}

}  // namespace convserve
