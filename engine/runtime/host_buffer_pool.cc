#include "engine/runtime/host_buffer_pool.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace convserve {
namespace {

size_t SizeClass(size_t bytes) {
  size_t capacity = 4096;
  while (capacity < bytes) capacity <<= 1;
  return capacity;
}

}  // namespace

std::shared_ptr<HostBufferPool> HostBufferPool::Create(HostBufferPoolOptions options) {
  return std::shared_ptr<HostBufferPool>(new HostBufferPool(std::move(options)));
}

std::shared_ptr<HostBufferPool> HostBufferPool::CreateUnpinned(int64_t max_cached_bytes) {
  HostBufferPoolOptions options;
  // 64-byte aligned: vector loads and the GPU's DMA like it, and it costs nothing.
  options.allocate = [](size_t bytes) { return std::aligned_alloc(64, bytes); };
  options.release = [](void* data) { std::free(data); };
  options.max_cached_bytes = max_cached_bytes;
  return Create(std::move(options));
}

HostBufferPool::~HostBufferPool() {
  absl::MutexLock lock(&mu_);
  for (auto& [capacity, buffers] : free_) {
    for (void* data : buffers) options_.release(data);
  }
}

absl::StatusOr<TensorMemory> HostBufferPool::Get(size_t bytes) {
  const size_t capacity = SizeClass(bytes);
  void* data = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = free_.find(capacity);
    if (it != free_.end() && !it->second.empty()) {
      data = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= static_cast<int64_t>(capacity);
    }
  }
  if (data == nullptr) data = options_.allocate(capacity);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate a host buffer of ", capacity, " bytes"));
  }
  TensorMemory memory;
  memory.kind = TensorMemory::Kind::kHost;
  memory.data = static_cast<uint8_t*>(data);
  memory.bytes = bytes;
  memory.pinned = options_.pinned;
  // The buffer goes back to this pool (kept alive by the holder) when the
  // last holder lets go.
  std::shared_ptr<HostBufferPool> self = shared_from_this();
  memory.hold = std::shared_ptr<const void>(
      data, [self, capacity](const void* returned) { self->Return(const_cast<void*>(returned), capacity); });
  return memory;
}

void HostBufferPool::Return(void* data, size_t capacity) {
  {
    absl::MutexLock lock(&mu_);
    if (cached_bytes_ + static_cast<int64_t>(capacity) <= options_.max_cached_bytes) {
      free_[capacity].push_back(data);
      cached_bytes_ += static_cast<int64_t>(capacity);
      return;
    }
  }
  options_.release(data);
}

int64_t HostBufferPool::cached_bytes() const {
  absl::MutexLock lock(&mu_);
  return cached_bytes_;
}

}  // namespace convserve
