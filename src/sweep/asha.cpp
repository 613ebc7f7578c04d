#include "normlab/sweep/asha.h"

#include <algorithm>
#include <string>

#include "normlab/util/error.h"

namespace normlab {

Asha::Asha(const AshaOptions& o) : o_(o) {
  if (o.reduction < 2)
    throw ConfigError("early stopping: reduction = " + std::to_string(o.reduction) +
                      " must be at least 2");
  if (o.min_steps <= 0 || o.min_steps >= o.steps)
    throw ConfigError("early stopping: min_steps = " + std::to_string(o.min_steps) +
                      " must lie between 1 and train.steps - 1 = " + std::to_string(o.steps - 1));
  for (int64_t r = o.min_steps; r < o.steps; r *= o.reduction) rungs_.push_back(r);
  arrivals_.resize(rungs_.size());
}

int64_t Asha::next_target(int64_t step) const {
  for (int64_t r : rungs_)
    if (r > step) return r;
  return o_.steps;
}

std::optional<size_t> Asha::rung_of(int64_t step) const {
  const auto it = std::find(rungs_.begin(), rungs_.end(), step);
  if (it == rungs_.end()) return std::nullopt;
  return static_cast<size_t>(it - rungs_.begin());
}

void Asha::report(size_t point, size_t rung, double loss, bool passed) {
  for (Arrival& a : arrivals_.at(rung))
    if (a.point == point) {  // reported again (a re-attached sweep): keep the first
      a.promoted = a.promoted || passed;
      return;
    }
  arrivals_.at(rung).push_back({point, loss, passed});
}

std::optional<size_t> Asha::promote(bool settled) {
  for (size_t k = rungs_.size(); k-- > 0;) {
    std::vector<Arrival*> order;
    for (Arrival& a : arrivals_[k]) order.push_back(&a);
    std::stable_sort(order.begin(), order.end(),
                     [](const Arrival* a, const Arrival* b) { return a->loss < b->loss; });
    size_t quota = order.size() / static_cast<size_t>(o_.reduction);
    const bool none_promoted =
        std::none_of(order.begin(), order.end(), [](const Arrival* a) { return a->promoted; });
    if (settled && quota == 0 && none_promoted && !order.empty()) quota = 1;
    for (size_t i = 0; i < quota; ++i)
      if (!order[i]->promoted) {
        order[i]->promoted = true;
        return order[i]->point;
      }
  }
  return std::nullopt;
}

std::optional<size_t> Asha::paused_at(size_t point) const {
  std::optional<size_t> at;
  for (size_t k = 0; k < arrivals_.size(); ++k)
    for (const Arrival& a : arrivals_[k])
      if (a.point == point) at = a.promoted ? std::optional<size_t>() : std::optional<size_t>(k);
  return at;
}

}  // namespace normlab
