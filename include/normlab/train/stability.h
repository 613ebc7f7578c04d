// Loss-spike detection as OLMo-core's stability monitor does it: a step's loss is a spike when
// it exceeds mean + sigma * std of the previous `window` finite losses (once the window is full).
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

namespace normlab {

class SpikeDetector {
 public:
  SpikeDetector(int64_t window, double sigma) : window_(window), sigma_(sigma) {}

  /// Records `loss`; true when it is a spike. Non-finite losses are neither spikes nor recorded.
  bool observe(double loss);
  int64_t spikes() const { return spikes_; }

  /// The window's losses and the spike count, for checkpoints.
  std::vector<double> window() const { return {values_.begin(), values_.end()}; }
  void restore(const std::vector<double>& window, int64_t spikes);

 private:
  int64_t window_;
  double sigma_;
  std::deque<double> values_;
  int64_t spikes_ = 0;
};

}  // namespace normlab
