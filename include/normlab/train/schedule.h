// Learning-rate schedules (scheduler.kind). Step s counts from 0; W = warmup_steps,
// S = train.steps, f = final_lr_fraction, p = the peak (optimizer.lr):
//   warm-up (all kinds):  lr = p (s + 1) / W            for s < W
//   cosine:    p (f + (1 - f) (1 + cos(pi t)) / 2),      t = (s - W) / (S - 1 - W)
//   linear:    p (1 - (1 - f) t)
//   wsd:       p until the last decay_fraction of the steps, then linear to f p
//   constant:  p
// so that the last step (s = S - 1) runs at f p (cosine, linear, wsd).
#pragma once

#include <cstdint>

#include "normlab/config/config.h"

namespace normlab {

double lr_at(const SchedulerConfig& schedule, double peak, int64_t step, int64_t total_steps);

}  // namespace normlab
