#include "engine/runtime/plan_store.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "spdlog/spdlog.h"

namespace convserve {
namespace {

constexpr char kHeader[] = "convserve-plan-store 1";

std::string Sha256Hex(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), length));
}

std::string Body(const std::string& kind, const std::string& key, const std::string& value) {
  return absl::StrCat(kHeader, "\nkind ", kind, "\nkey ", absl::CEscape(key), "\nvalue ",
                      absl::CEscape(value), "\n");
}

// mkdir -p.
bool MakeDirectories(const std::string& path) {
  std::string prefix;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    absl::StrAppend(&prefix, part, "/");
    if (part.empty()) continue;
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PlanStore>> PlanStore::Open(const std::string& directory) {
  if (!directory.empty()) {
    if (!MakeDirectories(directory) || access(directory.c_str(), W_OK) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "plan cache directory '", directory, "' cannot be created or written: ",
          std::strerror(errno), " (--plan_cache_dir)"));
    }
  }
  return std::unique_ptr<PlanStore>(new PlanStore(directory));
}

std::string PlanStore::PathFor(const std::string& kind, const std::string& key) const {
  return absl::StrCat(directory_, "/", kind, "/", Sha256Hex(key).substr(0, 40), ".rec");
}

absl::Status PlanStore::Put(const std::string& kind, const std::string& key,
                            const std::string& value) {
  {
    absl::MutexLock lock(&mu_);
    known_[absl::StrCat(kind, "\n", key)] = value;
  }
  if (directory_.empty()) return absl::OkStatus();
  const std::string folder = absl::StrCat(directory_, "/", kind);
  if (!MakeDirectories(folder)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create '", folder, "': ", std::strerror(errno)));
  }
  const std::string body = Body(kind, key, value);
  const std::string path = PathFor(kind, key);
  // A unique temporary file (mkstemp: unique across processes and
  // containers sharing the volume), synced, then renamed into place: the
  // record appears whole or not at all, and survives a crash.
  std::string temp = path + ".tmp.XXXXXX";
  const int fd = mkstemp(temp.data());
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create a file in '", folder, "': ", std::strerror(errno)));
  }
  const std::string contents = absl::StrCat(body, "sha256 ", Sha256Hex(body), "\n");
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  const bool ok = written == contents.size() && fchmod(fd, 0644) == 0 && fsync(fd) == 0;
  close(fd);
  if (!ok) {
    std::remove(temp.c_str());
    return absl::FailedPreconditionError(absl::StrCat("cannot write '", temp, "'"));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(temp.c_str());
    return absl::FailedPreconditionError(
        absl::StrCat("cannot rename '", temp, "' to '", path, "': ", std::strerror(error)));
  }
  return absl::OkStatus();
}

std::optional<std::string> PlanStore::Get(const std::string& kind, const std::string& key) {
  const std::string memory_key = absl::StrCat(kind, "\n", key);
  {
    absl::MutexLock lock(&mu_);
    auto it = known_.find(memory_key);
    if (it != known_.end()) return it->second;
  }
  if (directory_.empty()) return std::nullopt;
  const std::string path = PathFor(kind, key);
  std::ifstream in(path);
  if (!in) return std::nullopt;  // no record: the common case
  std::stringstream text;
  text << in.rdbuf();
  const std::string contents = text.str();

  // Valid means: the header, the kind, this key (not a hash collision or a
  // renamed file), a value, and a checksum over exactly those lines.
  std::string why;
  std::optional<std::string> value;
  const size_t sum_at = contents.rfind("sha256 ");
  if (sum_at == std::string::npos || !absl::EndsWith(contents, "\n")) {
    why = "truncated";
  } else if (Sha256Hex(contents.substr(0, sum_at)) !=
             contents.substr(sum_at + 7, contents.size() - sum_at - 8)) {
    why = "checksum mismatch";
  } else {
    std::vector<std::string> lines = absl::StrSplit(contents.substr(0, sum_at), '\n');
    std::string decoded_key, decoded_value;
    if (lines.size() != 5 || lines[0] != kHeader || lines[1] != absl::StrCat("kind ", kind) ||
        !absl::StartsWith(lines[2], "key ") || !absl::StartsWith(lines[3], "value ") ||
        !absl::CUnescape(lines[2].substr(4), &decoded_key) ||
        !absl::CUnescape(lines[3].substr(6), &decoded_value)) {
      why = "not a plan store record of this format version";
    } else if (decoded_key != key) {
      why = "holds another key";
    } else {
      value = std::move(decoded_value);
    }
  }
  absl::MutexLock lock(&mu_);
  if (!value.has_value()) {
    if (reported_.insert(path).second) {
      spdlog::warn("plan store: ignoring '{}': {}; it will be rebuilt", path, why);
    }
    return std::nullopt;
  }
  known_[memory_key] = *value;
  return value;
}

}  // namespace convserve
