#include "normlab/train/stability.h"

#include <cmath>

namespace normlab {

bool SpikeDetector::observe(double loss) {
  if (!std::isfinite(loss)) return false;
  bool spike = false;
  if (static_cast<int64_t>(values_.size()) == window_) {
    double mean = 0, var = 0;
    for (double v : values_) mean += v;
    mean /= static_cast<double>(values_.size());
    for (double v : values_) var += (v - mean) * (v - mean);
    const double std = std::sqrt(var / static_cast<double>(values_.size()));
    spike = loss > mean + sigma_ * std;
    values_.pop_front();
  }
  values_.push_back(loss);
  spikes_ += spike;
  return spike;
}

void SpikeDetector::restore(const std::vector<double>& window, int64_t spikes) {
  values_.assign(window.begin(), window.end());
  while (static_cast<int64_t>(values_.size()) > window_) values_.pop_front();
  spikes_ = spikes;
}

}  // namespace normlab
