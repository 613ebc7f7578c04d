#include "normlab/data/permutation.h"

#include <string>

#include "normlab/util/error.h"

namespace normlab {

int64_t permute_index(int64_t i, int64_t n, uint64_t key) {
  if (n <= 0 || i < 0 || i >= n)
    throw DataError("permute_index: " + std::to_string(i) + " outside [0, " + std::to_string(n) +
                    ")");
  if (n == 1) return 0;
  int bits = 2;
  while ((int64_t{1} << bits) < n) ++bits;
  bits += bits & 1;  // an even number of bits: two equal halves
  const int half = bits / 2;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  uint64_t x = static_cast<uint64_t>(i);
  do {  // cycle walking: re-encrypt until the value falls inside [0, n)
    uint64_t l = x >> half, r = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = splitmix64(r ^ splitmix64(key + round)) & mask;
      const uint64_t nl = r;
      r = l ^ f;
      l = nl;
    }
    x = (l << half) | r;
  } while (x >= static_cast<uint64_t>(n));
  return static_cast<int64_t>(x);
}

}  // namespace normlab
