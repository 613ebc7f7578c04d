#include "normlab/train/schedule.h"

#include <algorithm>
#include <cmath>

namespace normlab {

double lr_at(const SchedulerConfig& c, double peak, int64_t step, int64_t total_steps) {
  const int64_t W = c.warmup_steps;
  if (step < W) return peak * static_cast<double>(step + 1) / static_cast<double>(W);
  const double f = c.final_lr_fraction;
  const int64_t last = total_steps - 1;
  const auto progress = [&](int64_t from) {  // 0 at `from`, 1 at the last step
    return last > from
               ? std::clamp(static_cast<double>(step - from) / static_cast<double>(last - from),
                            0.0, 1.0)
               : 1.0;
  };
  switch (c.kind) {
    case ScheduleKind::Constant: return peak;
    case ScheduleKind::Cosine:
      return peak * (f + (1.0 - f) * 0.5 * (1.0 + std::cos(M_PI * progress(W))));
    case ScheduleKind::Linear: return peak * (1.0 - (1.0 - f) * progress(W));
    case ScheduleKind::Wsd: {
      const int64_t decay_steps =
          static_cast<int64_t>(std::ceil(c.decay_fraction * static_cast<double>(total_steps)));
      const int64_t start = std::max(W, total_steps - decay_steps);
      if (step < start) return peak;
      return peak * (1.0 - (1.0 - f) * progress(start));
    }
  }
  return peak;
}

}  // namespace normlab
