#include "normlab/util/cpu_allocator.h"

#include <c10/core/CPUAllocator.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace normlab {
namespace {

// Every block starts with a header; the tensor's data begins kHeader bytes in, 64-byte aligned.
// The DataPtr's context is the data pointer itself (LibTorch's raw_allocate requires that), so
// the deleter finds the header just before it.
constexpr size_t kHeader = 64;
struct Header {
  CpuCachingAllocator* owner;
  size_t size;  // bytes after the header (rounded up to 64)
};

size_t round_up(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

CpuCachingAllocator::CpuCachingAllocator(size_t max_cached_bytes) : max_cached_(max_cached_bytes) {}

CpuCachingAllocator::~CpuCachingAllocator() {
  for (auto& [size, blocks] : free_)
    for (void* b : blocks) std::free(b);
}

c10::DataPtr CpuCachingAllocator::allocate(size_t n) {
  const size_t size = round_up(std::max<size_t>(n, 1));
  void* base = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.allocations;
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      base = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= size;
      ++stats_.reused;
    }
  }
  if (!base) {
    base = std::aligned_alloc(64, kHeader + size);
    if (!base) throw std::bad_alloc();
    new (base) Header{this, size};
  }
  void* data = static_cast<char*>(base) + kHeader;
  return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
}

void CpuCachingAllocator::release(void* data) {
  void* base = static_cast<char*>(data) - kHeader;
  const Header* h = static_cast<const Header*>(base);
  h->owner->give_back(base, h->size);
}

void CpuCachingAllocator::give_back(void* base, size_t size) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stats_.cached_bytes + size <= max_cached_) {
      free_[size].push_back(base);
      stats_.cached_bytes += size;
      return;
    }
  }
  std::free(base);
}

void CpuCachingAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

void CpuCachingAllocator::install() { c10::SetCPUAllocator(this, /*priority=*/1); }

CpuCachingAllocator::Stats CpuCachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace normlab
