#include "normlab/data/mixture.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "normlab/data/permutation.h"
#include "normlab/util/error.h"

namespace normlab {
namespace {

constexpr uint64_t kMixUnits = uint64_t{1} << 24;

// A weight as the user would write it (%g: 1e-12, 0.25, 3), not std::to_string's 0.000000.
std::string weight_text(double w) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", w);
  return buf;
}

// floor(c * n / kMixUnits) without overflow for any n < 2^63.
int64_t mix_scaled(uint64_t c, int64_t n) {
  return static_cast<int64_t>((static_cast<unsigned __int128>(c) * static_cast<uint64_t>(n)) /
                              kMixUnits);
}

}  // namespace

MixturePlan::MixturePlan(const std::vector<double>& weights, int64_t global_batch, uint64_t seed)
    : global_batch_(global_batch), seed_(seed) {
  if (weights.empty()) throw DataError("a mixture needs at least one source");
  if (global_batch < 1) throw DataError("a mixture needs a positive global batch");
  double total = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!std::isfinite(weights[i]) || weights[i] <= 0)
      throw DataError("source " + std::to_string(i) + ": weight " + weight_text(weights[i]) +
                      " is not a positive number");
    total += weights[i];
  }
  // Largest remainder: integer shares out of kMixUnits that sum to kMixUnits exactly.
  std::vector<double> exact;
  uint64_t given = 0;
  for (const double w : weights) {
    exact.push_back(w / total * static_cast<double>(kMixUnits));
    units_.push_back(static_cast<uint64_t>(std::floor(exact.back())));
    given += units_.back();
  }
  while (given < kMixUnits) {
    size_t best = 0;
    for (size_t i = 1; i < exact.size(); ++i)
      if (exact[i] - static_cast<double>(units_[i]) >
          exact[best] - static_cast<double>(units_[best]))
        best = i;
    ++units_[best];
    ++given;
  }
  cumulative_.push_back(0);
  for (size_t i = 0; i < units_.size(); ++i) {
    if (units_[i] == 0)
      throw DataError("source " + std::to_string(i) + ": weight " + weight_text(weights[i]) +
                      " is below 1/2^24 of the total: too small to draw from");
    cumulative_.push_back(cumulative_.back() + units_[i]);
  }
}

int64_t MixturePlan::draws_before(int64_t s, int64_t n) const {
  if (units_.size() == 1) return n;
  return mix_scaled(cumulative_[static_cast<size_t>(s) + 1], n) -
         mix_scaled(cumulative_[static_cast<size_t>(s)], n);
}

double MixturePlan::share(int64_t s) const {
  return static_cast<double>(units_[static_cast<size_t>(s)]) / static_cast<double>(kMixUnits);
}

std::pair<int64_t, int64_t> MixturePlan::draw(int64_t p) const {
  if (units_.size() == 1) return {0, p};
  const int64_t block = p / global_batch_, slot = p % global_batch_;
  const int64_t start = block * global_batch_, end = start + global_batch_;
  // The step's slots in a shuffled order; the first c_0 of that order go to source 0, ...
  const int64_t q = permute_index(
      slot, global_batch_,
      splitmix64(seed_ ^ 0x6d69787475726573ull) ^ splitmix64(static_cast<uint64_t>(block)));
  int64_t first = 0;
  for (int64_t s = 0; s < sources(); ++s) {
    const int64_t before = draws_before(s, start);
    const int64_t here = draws_before(s, end) - before;
    if (q < first + here) return {s, before + (q - first)};
    first += here;
  }
  throw DataError("mixture: position " + std::to_string(p) + " has no source (internal error)");
}

}  // namespace normlab
