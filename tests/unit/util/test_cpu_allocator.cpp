// The CPU caching allocator (util/cpu_allocator.h).
#include <torch/torch.h>

#include <cstdint>
#include <cstring>

#include "normlab/util/cpu_allocator.h"
#include "support.h"

using namespace normlab;

TEST(CpuCachingAllocator, ReusesFreedBlocksOfTheSameSize) {
  CpuCachingAllocator a(/*max_cached_bytes=*/1 << 20);
  void* first = nullptr;
  {
    c10::DataPtr p = a.allocate(1000);
    first = p.get();
    ASSERT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);
    std::memset(first, 7, 1000);
    EXPECT_EQ(p.get(), p.get_context());  // LibTorch's raw_allocate relies on this
  }
  EXPECT_EQ(a.stats().cached_bytes, 1024u);
  {
    c10::DataPtr again = a.allocate(1000);
    EXPECT_EQ(again.get(), first);
    c10::DataPtr other = a.allocate(5000);
    EXPECT_NE(other.get(), first);
  }
  EXPECT_EQ(a.stats().allocations, 3u);
  EXPECT_EQ(a.stats().reused, 1u);
  {
    c10::DataPtr huge = a.allocate(2 << 20);  // beyond the cap: freed to the system
  }
  EXPECT_EQ(a.stats().cached_bytes, 1024u + 5056u);
}
