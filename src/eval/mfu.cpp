#include "normlab/eval/mfu.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace normlab {

namespace {

bool has_word(const std::string& upper, const char* w) {
  return upper.find(w) != std::string::npos;
}

}  // namespace

// Peak dense bf16 Tensor Core FLOP/s, from NVIDIA's datasheets, which print the figure with
// structured sparsity (2:4) and mark it so; the dense rate is half of it:
//   H100 SXM5   989 TFLOP/s  (H100 Tensor Core GPU datasheet: BF16 1,979 TFLOPS with sparsity)
//   H100 PCIe   756 TFLOP/s  (same datasheet, PCIe column: 1,513 with sparsity)
//   H100 NVL    835 TFLOP/s  (same datasheet, NVL column: 1,671 with sparsity)
//   H200 SXM    989 TFLOP/s  (H200 Tensor Core GPU datasheet: 1,979 with sparsity; same SMs and
//                            clocks as H100 SXM, more and faster memory)
//   H200 NVL    835 TFLOP/s  (same datasheet, NVL column: 1,671 with sparsity)
//   GH200       989 TFLOP/s  (GH200 Grace Hopper datasheet: the H100 SXM's rate)
//   A100        312 TFLOP/s  (A100 Tensor Core GPU datasheet: BF16 312, 624 with sparsity;
//                            SXM4 and PCIe, 40 and 80 GB alike)
//   L40S        362 TFLOP/s  (L40S datasheet: BF16 362.05, 733 with sparsity)
std::optional<GpuPeak> gpu_peak_bf16(const std::string& device_name) {
  std::string n = device_name;
  std::transform(n.begin(), n.end(), n.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (has_word(n, "GH200")) return GpuPeak{"GH200", 989e12};
  if (has_word(n, "H200"))
    return has_word(n, "NVL") ? GpuPeak{"H200 NVL", 835e12} : GpuPeak{"H200 SXM", 989e12};
  if (has_word(n, "H100")) {
    if (has_word(n, "PCIE")) return GpuPeak{"H100 PCIe", 756e12};
    if (has_word(n, "NVL")) return GpuPeak{"H100 NVL", 835e12};
    return GpuPeak{"H100 SXM", 989e12};  // "NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB"
  }
  if (has_word(n, "A100")) return GpuPeak{"A100", 312e12};
  if (has_word(n, "L40S")) return GpuPeak{"L40S", 362e12};
  return std::nullopt;
}

std::optional<GpuPeak> mfu_peak(const std::string& device_name, double override_flops) {
  if (override_flops > 0) return GpuPeak{"given", override_flops};
  return gpu_peak_bf16(device_name);
}

SteadyState steady_state(const std::vector<double>& step_seconds, double tokens_per_step,
                         int64_t warmup, int64_t window) {
  SteadyState s;
  const auto n = static_cast<int64_t>(step_seconds.size());
  s.warmup = std::clamp<int64_t>(warmup, 0, n);
  s.steps = window > 0 ? std::min(window, n - s.warmup) : n - s.warmup;
  if (s.steps <= 0) return SteadyState{s.warmup};
  double sum = 0, sq = 0;
  s.step_min = INFINITY;
  s.step_max = 0;
  for (int64_t i = s.warmup; i < s.warmup + s.steps; ++i) {
    const double secs = step_seconds[static_cast<size_t>(i)];
    const double rate = secs > 0 ? tokens_per_step / secs : 0.0;
    s.seconds += secs;
    sum += rate;
    sq += rate * rate;
    s.step_min = std::min(s.step_min, rate);
    s.step_max = std::max(s.step_max, rate);
  }
  const auto k = static_cast<double>(s.steps);
  s.tokens_per_s = s.seconds > 0 ? tokens_per_step * k / s.seconds : 0.0;
  s.step_mean = sum / k;
  s.step_std = std::sqrt(std::max(sq / k - s.step_mean * s.step_mean, 0.0));
  return s;
}

std::optional<Mfu> mfu(const SteadyState& s, double flops_per_token, double peak_flops) {
  if (s.steps <= 0 || peak_flops <= 0 || s.tokens_per_s <= 0) return std::nullopt;
  const double per = flops_per_token / peak_flops;
  return Mfu{s.tokens_per_s * per, s.step_std * per, s.step_min * per, s.step_max * per,
             peak_flops};
}

}  // namespace normlab
