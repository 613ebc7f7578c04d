// A caching allocator for CPU tensors. A training step allocates the same sizes every step;
// glibc hands large blocks back to the kernel on free, so every step pays page faults and
// zero-filling again (half a million minor faults for 7 steps of configs/small). This keeps
// freed blocks by size and reuses them. Installing it is a process-wide choice, made by the
// program (normlab train does), not by the library: install() replaces LibTorch's CPU
// allocator for tensors allocated afterwards; earlier tensors keep their own deleters.
#pragma once

#include <c10/core/Allocator.h>

#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace normlab {

class CpuCachingAllocator final : public c10::Allocator {
 public:
  /// Keeps at most `max_cached_bytes` of freed blocks (beyond that, frees go to the system).
  explicit CpuCachingAllocator(size_t max_cached_bytes = size_t{8} << 30);
  ~CpuCachingAllocator() override;

  c10::DataPtr allocate(size_t n) override;
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  /// Makes this the CPU allocator of LibTorch; it must outlive every tensor allocated after.
  void install();

  struct Stats {
    size_t allocations = 0;   // served
    size_t reused = 0;        // of which from the cache
    size_t cached_bytes = 0;  // held for reuse now
  };
  Stats stats() const;

 private:
  static void release(void* data);
  void give_back(void* base, size_t size);

  size_t max_cached_;
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // block size -> free blocks
  Stats stats_;
};

}  // namespace normlab
