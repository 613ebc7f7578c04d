// normlab-bench-kernels: normlab's fused CUDA residual-add + RMSNorm (fused::add_rms_norm)
// against the ATen composition it replaces (x + b, then at::rms_norm in fp32), forward and
// backward, side by side in one process on one GPU; prints each time and the ratio. Shapes:
// the 1.3B model's residual stream (micro-batch x 2048 tokens x d_model). Without a CUDA
// device it says so and exits 0.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <functional>

#include "normlab/nn/fused.h"

using Clock = std::chrono::steady_clock;

namespace {

// Median milliseconds per call of fn over `reps` calls after warm-up, synchronised.
double time_ms(const std::function<void()>& fn, int reps) {
  for (int i = 0; i < 3; ++i) fn();
  torch::cuda::synchronize();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    torch::cuda::synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 8 * 2048, cols = 2048;
  int reps = 50;
  CLI::App app{"fused residual-add + RMSNorm against the ATen composition, on CUDA"};
  app.add_option("--rows", rows, "rows (tokens)")->capture_default_str();
  app.add_option("--cols", cols, "columns (d_model)")->capture_default_str();
  app.add_option("--reps", reps, "timed repetitions (median)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!torch::cuda::is_available()) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }
  const torch::Device cuda(torch::kCUDA);
  std::printf("add + RMSNorm over (%lld, %lld), forward + backward, median of %d\n",
              static_cast<long long>(rows), static_cast<long long>(cols), reps);
  std::printf("  %-22s %10s %10s %7s\n", "stream / branch", "ATen ms", "normlab ms", "ratio");
  for (const auto& [s, bt, name] :
       {std::tuple{torch::kFloat, torch::kBFloat16, "fp32 / bf16 (autocast)"},
        std::tuple{torch::kFloat, torch::kFloat, "fp32 / fp32"},
        std::tuple{torch::kBFloat16, torch::kBFloat16, "bf16 / bf16"}}) {
    const torch::Tensor x =
        torch::randn({rows, cols}, torch::TensorOptions(cuda).dtype(s)).requires_grad_();
    const torch::Tensor b =
        torch::randn({rows, cols}, torch::TensorOptions(cuda).dtype(bt)).requires_grad_();
    const torch::Tensor w = torch::ones({cols}, cuda).requires_grad_();
    const torch::Tensor gr = torch::randn_like(x), gn = torch::randn_like(x);
    const auto step = [&](bool fused) {
      torch::Tensor r, n;
      if (fused) {
        std::tie(r, n) = normlab::fused::add_rms_norm(x, b, 1.0, w, 1e-5);
      } else {
        r = x + b;
        n = at::rms_norm(r.to(torch::kFloat), {cols}, w, 1e-5).to(r.scalar_type());
      }
      torch::autograd::backward({r, n}, {gr, gn});
    };
    if (!normlab::fused::fusable_add_rms_norm(x, b, w)) {
      std::printf("  %-22s not fusable in this build\n", name);
      continue;
    }
    const double aten = time_ms([&] { step(false); }, reps),
                 ours = time_ms([&] { step(true); }, reps);
    std::printf("  %-22s %10.3f %10.3f %6.2fx\n", name, aten, ours, aten / ours);
  }
  return 0;
}
