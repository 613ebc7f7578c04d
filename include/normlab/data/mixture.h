// The draws of a weighted mixture of sources: position p of the endless sample stream (p =
// step * global_batch + the slot in that step's global batch) is the k-th draw of source s.
//
// Weights are normalised and held as integers out of 2^24. Over the first n positions, source s
// gets exactly floor(C_s n / 2^24) - floor(C_{s-1} n / 2^24) draws (C: the cumulative integer
// weights): less than one sample from its share of any prefix of the run (the whole run, any
// number of steps), less than two from its share of one step's global batch. Inside a step the
// slots are shuffled by a keyed bijection of (seed, step).
// Everything is O(sources) arithmetic: any position is computed directly, so resuming at a
// step continues exactly. With one source, position p is draw p.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace normlab {

class MixturePlan {
 public:
  /// Throws DataError for no weights, a weight that is not positive and finite, or one too
  /// small to hold a share of 2^24.
  MixturePlan(const std::vector<double>& weights, int64_t global_batch, uint64_t seed);

  int64_t sources() const { return static_cast<int64_t>(units_.size()); }
  /// (source, draw index within that source) of stream position p.
  std::pair<int64_t, int64_t> draw(int64_t p) const;
  /// Draws of source s among positions [0, n).
  int64_t draws_before(int64_t s, int64_t n) const;
  /// The weight of source s as the plan holds it (its integer share / 2^24).
  double share(int64_t s) const;

 private:
  std::vector<uint64_t> cumulative_;  // C_0 = 0, ..., C_S = 2^24
  std::vector<uint64_t> units_;
  int64_t global_batch_;
  uint64_t seed_;
};

}  // namespace normlab
