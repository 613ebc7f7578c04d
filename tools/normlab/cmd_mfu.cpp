// normlab mfu --flops-per-token F --tokens-per-step N [--warmup K] [--gpu NAME]
//             [--peak-tflops P] [--matmul-flops R] SECONDS...
// The MFU of a run from its step times (eval/mfu.h), for scripts that time steps themselves
// (tools/bench/gpu_bench.sh): the first K steps are left out, the rest are the timed window.
// Prints one readable line, then one line of key=value pairs (empty value: not measured):
//   tokens_per_s= mfu= mfu_spread= mfu_min= mfu_max= mfu_measured= peak_flops= peak= steps=
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "command.h"
#include "normlab/eval/mfu.h"

namespace normlab::cli {
namespace {

struct MfuArgs {
  std::vector<double> seconds;
  double flops_per_token = 0, tokens_per_step = 0, peak_tflops = 0, matmul_flops = 0;
  int64_t warmup = 0;
  std::string gpu;
};

std::string mfu_fixed(double v, const char* format) {
  char s[64];
  std::snprintf(s, sizeof s, format, v);
  return s;
}

int run_mfu(const MfuArgs& a) {
  const SteadyState w = steady_state(a.seconds, a.tokens_per_step, a.warmup);
  const std::optional<GpuPeak> peak = mfu_peak(a.gpu, a.peak_tflops * 1e12);
  std::optional<Mfu> m;
  if (peak) m = mfu(w, a.flops_per_token, peak->flops);
  const std::optional<Mfu> measured = mfu(w, a.flops_per_token, a.matmul_flops);
  const std::string peak_name = !peak ? "" : peak->model == "given" ? "--peak-tflops" : peak->model;
  std::cout << "mfu: " << w.steps << " steps after " << w.warmup << " warm-up steps, "
            << mfu_fixed(w.tokens_per_s, "%.0f") << " tokens/s";
  if (m)
    std::cout << ", MFU " << mfu_fixed(100 * m->mean, "%.1f") << " % +- "
              << mfu_fixed(100 * m->spread, "%.1f") << " (min " << mfu_fixed(100 * m->min, "%.1f")
              << ", max " << mfu_fixed(100 * m->max, "%.1f") << ") of "
              << mfu_fixed(peak->flops / 1e12, "%.4g") << " TFLOP/s (" << peak_name << ")";
  else if (!peak)
    std::cout << ", no MFU: '" << a.gpu << "' has no peak in the table (--peak-tflops sets one)";
  if (measured)
    std::cout << ", " << mfu_fixed(100 * measured->mean, "%.1f")
              << " % of the measured matmul rate";
  std::cout << "\n";
  std::string token = peak ? peak->model : "";  // "H100_SXM", "given": one word
  for (char& c : token)
    if (c == ' ') c = '_';
  const auto opt = [](const std::optional<Mfu>& x, double Mfu::*f) {
    return x ? mfu_fixed(x.value().*f, "%.4f") : std::string();
  };
  std::cout << "tokens_per_s=" << (w.steps > 0 ? mfu_fixed(w.tokens_per_s, "%.1f") : "")
            << " mfu=" << opt(m, &Mfu::mean) << " mfu_spread=" << opt(m, &Mfu::spread)
            << " mfu_min=" << opt(m, &Mfu::min) << " mfu_max=" << opt(m, &Mfu::max)
            << " mfu_measured=" << opt(measured, &Mfu::mean)
            << " peak_flops=" << (peak ? mfu_fixed(peak->flops, "%.4g") : "") << " peak=" << token
            << " steps=" << w.steps << "\n";
  return 0;
}

}  // namespace

Runner setup_mfu(CLI::App& sub) {
  auto a = std::make_shared<MfuArgs>();
  sub.add_option("seconds", a->seconds, "each step's seconds, in order, warm-up steps included")
      ->required();
  sub.add_option("--flops-per-token", a->flops_per_token,
                 "training FLOPs per token (`normlab info`)")
      ->required();
  sub.add_option("--tokens-per-step", a->tokens_per_step, "tokens in each step")->required();
  sub.add_option("--warmup", a->warmup, "first steps left out")->capture_default_str();
  sub.add_option("--gpu", a->gpu,
                 "the GPU's name as CUDA or nvidia-smi gives it (\"NVIDIA H100 80GB HBM3\"): "
                 "its peak dense bf16 rate from the table");
  sub.add_option("--peak-tflops", a->peak_tflops, "the peak in TFLOP/s instead of the table's");
  sub.add_option("--matmul-flops", a->matmul_flops,
                 "a measured matmul rate in FLOP/s: the second MFU");
  return [a] { return run_mfu(*a); };
}

}  // namespace normlab::cli
