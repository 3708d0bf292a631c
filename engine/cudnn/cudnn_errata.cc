#include "engine/cudnn/cudnn_errata.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/status_macros.h"

namespace convserve {
namespace {

// "9.14.2" -> 91402; a plain integer is taken as is.
bool ParseVersion(absl::string_view text, int64_t* out) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, '.');
  if (parts.size() == 1) return absl::SimpleAtoi(text, out);
  if (parts.size() != 3) return false;
  int64_t major = 0, minor = 0, patch = 0;
  if (!absl::SimpleAtoi(parts[0], &major) || !absl::SimpleAtoi(parts[1], &minor) ||
      !absl::SimpleAtoi(parts[2], &patch) || minor > 99 || patch > 99) {
    return false;
  }
  *out = major * 10000 + minor * 100 + patch;
  return true;
}

bool ParseInt(absl::string_view text, int64_t* out) { return absl::SimpleAtoi(text, out); }

// "any", "7", "7-", "-7", "3-7"; versions when `versions`.
bool ParseRange(absl::string_view text, bool versions, IntRange* range) {
  bool (*parse)(absl::string_view, int64_t*) = versions ? ParseVersion : ParseInt;
  if (text == "any") return true;
  const size_t dash = text.find('-', 1);  // a leading '-' opens the low end
  if (text.size() > 1 && text[0] == '-' && dash == absl::string_view::npos) {
    int64_t high = 0;
    if (!parse(text.substr(1), &high)) return false;
    range->high = high;
    return true;
  }
  if (dash == absl::string_view::npos) {
    int64_t value = 0;
    if (!parse(text, &value)) return false;
    range->low = range->high = value;
    return true;
  }
  int64_t low = 0, high = 0;
  if (!parse(text.substr(0, dash), &low)) return false;
  range->low = low;
  if (dash + 1 < text.size()) {
    if (!parse(text.substr(dash + 1), &high) || high < low) return false;
    range->high = high;
  }
  return true;
}

bool ParseFlag(absl::string_view text, std::optional<bool>* out) {
  if (text != "0" && text != "1") return false;
  *out = text == "1";
  return true;
}

absl::Status ParseCondition(absl::string_view key, absl::string_view value, ErrataRule* rule) {
  bool ok = true;
  if (key == "cudnn") {
    ok = ParseRange(value, true, &rule->cudnn);
  } else if (key == "cc") {
    ok = ParseRange(value, false, &rule->compute_capability);
  } else if (key == "engine") {
    int64_t engine = 0;
    ok = absl::SimpleAtoi(value, &engine) && engine >= 0;
    rule->engine = engine;
  } else if (key == "knobs") {
    // "k2=21+k14=3": EngineConfigId's knob syntax, '+' between knobs.
    absl::StatusOr<EngineConfigId> id =
        EngineConfigId::Parse(absl::StrCat("fused:e0:", absl::StrReplaceAll(value, {{"+", ","}})));
    ok = id.ok();
    if (ok) rule->knobs = id->knobs;
  } else if (key == "path") {
    ok = false;
    for (LayerPath path : kLayerPaths) {
      if (value == LayerPathName(path)) {
        rule->path = path;
        ok = true;
      }
    }
  } else if (key == "dtype") {
    ok = value == "float32" || value == "float16" || value == "bfloat16";
    rule->dtype = value == "float32"   ? DType::kFloat32
                  : value == "float16" ? DType::kFloat16
                                       : DType::kBFloat16;
  } else if (key == "layout") {
    ok = value == "cf" || value == "cl";
    rule->channels_last = value == "cl";
  } else if (key == "rank") {
    int64_t rank = 0;
    ok = absl::SimpleAtoi(value, &rank) && (rank == 2 || rank == 3);
    rule->spatial_rank = rank;
  } else if (key == "k") {
    ok = ParseRange(value, false, &rule->out_channels);
  } else if (key == "c") {
    ok = ParseRange(value, false, &rule->in_channels);
  } else if (key == "groups") {
    ok = ParseRange(value, false, &rule->groups);
  } else if (key == "batch") {
    ok = ParseRange(value, false, &rule->batch);
  } else if (key == "depthwise") {
    ok = ParseFlag(value, &rule->depthwise);
  } else if (key == "strided") {
    ok = ParseFlag(value, &rule->strided);
  } else if (key == "dilated") {
    ok = ParseFlag(value, &rule->dilated);
  } else if (key == "bias") {
    ok = ParseFlag(value, &rule->bias);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown condition '", key, "'"));
  }
  if (!ok) return absl::InvalidArgumentError(absl::StrCat("bad value '", value, "' for ", key));
  return absl::OkStatus();
}

bool AnyAbove1(const std::vector<int64_t>& values) {
  return std::any_of(values.begin(), values.end(), [](int64_t v) { return v > 1; });
}

}  // namespace

bool ErrataRule::Matches(int cudnn_version, int cc, const ConvLayerProblem& p,
                         const EngineConfigId& id) const {
  if (!cudnn.Contains(cudnn_version) || !compute_capability.Contains(cc)) return false;
  if (engine.has_value() && *engine != id.engine) return false;
  for (const auto& knob : knobs) {
    if (std::find(id.knobs.begin(), id.knobs.end(), knob) == id.knobs.end()) return false;
  }
  if (path.has_value() && *path != id.path) return false;
  // A rule that names no path is about cuDNN's engines, whose numbers the
  // direct path's do not share.
  if (!path.has_value() && id.path == LayerPath::kDirect) return false;
  if (dtype.has_value() && *dtype != p.dtype) return false;
  if (channels_last.has_value() && *channels_last != p.channels_last) return false;
  if (spatial_rank.has_value() && *spatial_rank != static_cast<int64_t>(p.stride.size())) {
    return false;
  }
  const int64_t g = p.groups();
  if (!out_channels.Contains(p.output[1]) || !in_channels.Contains(p.input[1]) ||
      !groups.Contains(g) || !batch.Contains(p.input[0])) {
    return false;
  }
  if (depthwise.has_value() && *depthwise != (g > 1 && g == p.input[1])) return false;
  if (strided.has_value() && *strided != AnyAbove1(p.stride)) return false;
  if (dilated.has_value() && *dilated != AnyAbove1(p.dilation)) return false;
  if (bias.has_value() && *bias != p.has_bias) return false;
  return true;
}

absl::StatusOr<std::vector<ErrataRule>> CudnnErrata::ParseRules(absl::string_view text,
                                                                absl::string_view source) {
  std::vector<ErrataRule> rules;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    ErrataRule rule;
    std::pair<absl::string_view, absl::string_view> body_reason =
        absl::StrSplit(line, absl::MaxSplits(" -- ", 1));
    rule.reason = std::string(absl::StripAsciiWhitespace(body_reason.second));
    std::vector<absl::string_view> words =
        absl::StrSplit(body_reason.first, ' ', absl::SkipEmpty());
    const auto error = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("cuDNN errata ", source, ":", line_number, ": ", why));
    };
    if (words.empty() || words[0].find('=') != absl::string_view::npos) {
      return error("a rule starts with its name");
    }
    rule.name = std::string(words[0]);
    if (rule.reason.empty()) return error("a rule ends with ' -- ' and the reason");
    for (size_t i = 1; i < words.size(); ++i) {
      std::pair<absl::string_view, absl::string_view> kv =
          absl::StrSplit(words[i], absl::MaxSplits('=', 1));
      absl::Status parsed = ParseCondition(kv.first, kv.second, &rule);
      if (!parsed.ok()) return error(parsed.message());
    }
    if (!rule.engine.has_value() && !rule.knobs.empty()) return error("knobs= needs engine=");
    rules.push_back(std::move(rule));
  }
  return rules;
}

absl::StatusOr<std::shared_ptr<const CudnnErrata>> CudnnErrata::Create(
    const std::string& extra_file) {
  ASSIGN_OR_RETURN(std::vector<ErrataRule> rules,
                   ParseRules(kShippedCudnnErrata, "(shipped list)"));
  if (!extra_file.empty()) {
    std::ifstream in(extra_file);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read the cuDNN errata file '", extra_file, "'"));
    }
    std::stringstream text;
    text << in.rdbuf();
    ASSIGN_OR_RETURN(std::vector<ErrataRule> extra, ParseRules(text.str(), extra_file));
    for (ErrataRule& rule : extra) rules.push_back(std::move(rule));
  }
  return std::shared_ptr<const CudnnErrata>(new CudnnErrata(std::move(rules)));
}

const ErrataRule* CudnnErrata::Find(int cudnn_version, int compute_capability,
                                    const ConvLayerProblem& problem,
                                    const EngineConfigId& id) const {
  for (const ErrataRule& rule : rules_) {
    if (rule.Matches(cudnn_version, compute_capability, problem, id)) return &rule;
  }
  return nullptr;
}

}  // namespace convserve
