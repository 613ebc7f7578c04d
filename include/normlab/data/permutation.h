// The data layer's deterministic randomness: a 64-bit hash and a keyed permutation of [0, n).
// The loader orders each epoch of a source with permute_index, and the mixture shuffles the
// slots of each step with it; both derive their keys with splitmix64. Pure functions, so any
// position of any epoch is computed directly and a resumed run reads what it would have read.
#pragma once

#include <cstdint>

namespace normlab {

/// splitmix64's step and finaliser: a bijection of 64-bit integers that mixes every input bit
/// into every output bit (Steele, Lea and Flood, 2014).
constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A bijection of [0, n) chosen by `key` (a Feistel network with cycle walking): the sample
/// order of one epoch. O(1) memory, so any position of any epoch is computed directly.
int64_t permute_index(int64_t i, int64_t n, uint64_t key);

}  // namespace normlab
