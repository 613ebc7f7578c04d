// Model FLOPs utilisation: the FLOP rate a training run achieves (FLOPs per token, info.h,
// times tokens per second) over the GPU's peak dense bf16 rate, measured on steady-state steps
// only: the first steps (allocator growth, kernel selection, autotuning) are dropped and the
// rest form the timed window, reported as a mean with its spread over steps.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace normlab {

/// A GPU model's peak dense (no structured sparsity) bf16 Tensor Core rate.
struct GpuPeak {
  std::string model;  // "H100 SXM"
  double flops = 0;   // FLOP/s
};

/// The peak of the GPU named `device_name` as CUDA or nvidia-smi names it ("NVIDIA H100 80GB
/// HBM3" -> H100 SXM, "NVIDIA H100 PCIe", "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "NVIDIA
/// L40S"); nullopt for a GPU not in the table (then no MFU unless a peak is given).
std::optional<GpuPeak> gpu_peak_bf16(const std::string& device_name);

/// The steady state of a run's step times.
struct SteadyState {
  int64_t warmup = 0;       // steps dropped at the start
  int64_t steps = 0;        // steps in the timed window
  double seconds = 0;       // their summed time
  double tokens_per_s = 0;  // the window's tokens over its seconds (total over total)
  double step_mean = 0;     // per-step tokens/s: mean, standard deviation, min, max
  double step_std = 0;
  double step_min = 0;
  double step_max = 0;
};

/// The window after the first `warmup` steps (of at most `window` steps; 0: all the rest) of
/// `step_seconds`, each step `tokens_per_step` tokens. steps == 0 when nothing is left.
SteadyState steady_state(const std::vector<double>& step_seconds, double tokens_per_step,
                         int64_t warmup, int64_t window = 0);

struct Mfu {
  double mean = 0;    // the window's tokens/s x FLOPs per token / peak
  double spread = 0;  // the standard deviation of the per-step MFU
  double min = 0, max = 0;
  double peak_flops = 0;
};

/// MFU of a steady state at `flops_per_token` over `peak_flops`; nullopt when the window is
/// empty or the peak is unknown (<= 0).
std::optional<Mfu> mfu(const SteadyState& s, double flops_per_token, double peak_flops);

/// The peak a run divides by: `override_flops` when > 0 (then named "given"), else the table's
/// for `device_name`; nullopt when neither.
std::optional<GpuPeak> mfu_peak(const std::string& device_name, double override_flops);

}  // namespace normlab
