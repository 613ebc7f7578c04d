// normlab-bench-kernels: normlab's own kernels against the ATen composition each replaces,
// forward and backward, side by side in one process; prints each median time and the ratio.
//   default  the fused CUDA residual-add + RMSNorm (kernels::add_rms_norm) against x + b, then
//            at::rms_norm in fp32, over the 1.3B model's residual stream (micro-batch x 2048
//            tokens x d_model), on one GPU. Without a CUDA device it says so and exits 0.
//   --cpu    the CPU kernels, fp32, on ATen's threads: kernels::rms_norm against at::rms_norm
//            over (batch, tokens, d_model), and kernels::rope against x cos + rotate(x) sin over
//            (batch, tokens, heads, d_model / heads), kernels::swiglu against silu(g) * v over
//            (batch, tokens, 2 d_ff), and kernels::causal_attention against SDPA (the flash kernel)
//            over (batch, heads, tokens, d_model / heads), kernels::cross_entropy against
//            torch::cross_entropy_loss over (batch x tokens, vocab); and kernels::linear (oneDNN's
//            matmul where it runs) against torch::linear at the model's five linear shapes. Both
//            sides allocate through normlab train's caching CPU allocator (util/cpu_allocator.h).
#include <torch/cuda.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>

#include "normlab/kernels/capabilities.h"
#include "normlab/kernels/ops.h"
#include "normlab/util/cpu_allocator.h"

using Clock = std::chrono::steady_clock;

namespace {

// Median milliseconds per call of fn over `reps` calls after warm-up, synchronised on CUDA.
double time_ms(const std::function<void()>& fn, int reps, bool cuda = true) {
  for (int i = 0; i < 3; ++i) fn();
  if (cuda) torch::cuda::synchronize();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    if (cuda) torch::cuda::synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// kernels::rms_norm, kernels::rope and kernels::swiglu against ATen's ops, fp32 on the CPU; one
// line each.
void bench_cpu(int64_t batch, int64_t tokens, int64_t d_model, int64_t heads, int64_t d_ff,
               int64_t vocab, int reps) {
  const int64_t hd = d_model / heads, h = hd / 2;
  std::printf(
      "normlab CPU kernels against ATen, fp32, forward + backward, median of %d, %d threads\n",
      reps, torch::get_num_threads());
  std::printf("  %-42s %10s %10s %7s\n", "op (shape)", "ATen ms", "normlab ms", "ratio");
  const auto row = [&](const char* name, const std::function<void()>& aten,
                       const std::function<void()>& ours) {
    const double a = time_ms(aten, reps, false), o = time_ms(ours, reps, false);
    std::printf("  %-42s %10.3f %10.3f %6.2fx\n", name, a, o, a / o);
  };
  const torch::Tensor x = torch::randn({batch, tokens, d_model}).requires_grad_();
  const torch::Tensor w = torch::randn({d_model}).requires_grad_();
  const torch::Tensor g = torch::randn_like(x);
  char name[160];
  std::snprintf(name, sizeof name, "RMSNorm (%lld, %lld, %lld)", static_cast<long long>(batch),
                static_cast<long long>(tokens), static_cast<long long>(d_model));
  row(
      name, [&] { at::rms_norm(x, {d_model}, w, 1e-6).backward(g); },
      [&] { normlab::kernels::rms_norm(x, w, 1e-6).backward(g); });
  const torch::Tensor q = torch::randn({batch, tokens, heads, hd}).requires_grad_();
  const torch::Tensor gq = torch::randn_like(q);
  const torch::Tensor cos = torch::rand({tokens, hd}), sin = torch::rand({tokens, hd});
  std::snprintf(name, sizeof name, "RoPE (%lld, %lld, %lld, %lld)", static_cast<long long>(batch),
                static_cast<long long>(tokens), static_cast<long long>(heads),
                static_cast<long long>(hd));
  const auto rope_aten = [&] {
    const torch::Tensor c = cos.unsqueeze(1), s = sin.unsqueeze(1);
    const torch::Tensor rot = torch::cat({-q.narrow(-1, h, h), q.narrow(-1, 0, h)}, -1);
    (q * c + rot * s).backward(gq);
  };
  row(name, rope_aten, [&] { normlab::kernels::rope(q, cos, sin).backward(gq); });
  const torch::Tensor u = torch::randn({batch, tokens, 2 * d_ff}).requires_grad_();
  const torch::Tensor gh = torch::randn({batch, tokens, d_ff});
  std::snprintf(name, sizeof name, "SwiGLU (%lld, %lld, 2 x %lld), %s",
                static_cast<long long>(batch), static_cast<long long>(tokens),
                static_cast<long long>(d_ff), normlab::kernels::vector_isa().c_str());
  const auto swiglu_aten = [&] {
    const std::vector<torch::Tensor> vg = u.chunk(2, -1);
    (torch::silu(vg[1]) * vg[0]).backward(gh);
  };
  row(name, swiglu_aten, [&] { normlab::kernels::swiglu(u).backward(gh); });
  // Causal attention over (batch, heads, tokens, head dim) laid out as the model's (batch, tokens,
  // heads, head dim): SDPA (the flash kernel) against normlab's products over causal blocks.
  const auto qkv = [&] { return torch::randn({batch, tokens, heads, hd}).requires_grad_(); };
  const torch::Tensor aq = qkv(), ak = qkv(), av = qkv();
  const torch::Tensor ga = torch::randn({batch, heads, tokens, hd});
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::snprintf(name, sizeof name, "causal attention (%lld, %lld, %lld, %lld)",
                static_cast<long long>(batch), static_cast<long long>(heads),
                static_cast<long long>(tokens), static_cast<long long>(hd));
  const auto heads_of = [](const torch::Tensor& t) { return t.transpose(1, 2); };
  if (normlab::kernels::causal_attention_fits(heads_of(aq), heads_of(ak), heads_of(av)))
    row(
        name,
        [&] {
          at::scaled_dot_product_attention(heads_of(aq), heads_of(ak), heads_of(av), std::nullopt,
                                           0.0, /*is_causal=*/true, scale)
              .backward(ga);
        },
        [&] {
          normlab::kernels::causal_attention(heads_of(aq), heads_of(ak), heads_of(av), scale)
              .backward(ga);
        });
  else
    std::printf("  %-42s (past normlab's bounds: SDPA both sides)\n", name);
  // The loss over the LM head's logits: the mean cross-entropy, forward and backward.
  const torch::Tensor logits = torch::randn({batch * tokens, vocab}).requires_grad_();
  const torch::Tensor targets = torch::randint(vocab, {batch * tokens}, torch::kLong);
  std::snprintf(name, sizeof name, "cross-entropy (%lld x %lld), %s",
                static_cast<long long>(batch * tokens), static_cast<long long>(vocab),
                normlab::kernels::vector_isa().c_str());
  const auto loss_backward = [&](const torch::Tensor& loss) {  // as in a step: no gradient sum
    loss.backward();
    logits.mutable_grad().reset();
  };
  row(
      name, [&] { loss_backward(torch::cross_entropy_loss(logits, targets)); },
      [&] { loss_backward(normlab::kernels::cross_entropy(logits, targets)); });
  // The model's linear layers: kernels::linear (oneDNN's matmul where it runs, else ATen's) against
  // torch::linear; the input and the weight take gradients, as in training.
  const torch::Tensor in = torch::randn({batch * tokens, d_model}).requires_grad_();
  const torch::Tensor hidden = torch::randn({batch * tokens, d_ff}).requires_grad_();
  for (const auto& [what, x_in, out_features] :
       {std::tuple{"q, k, v", in, 3 * d_model}, std::tuple{"attention out", in, d_model},
        std::tuple{"SwiGLU up", in, 2 * d_ff}, std::tuple{"SwiGLU down", hidden, d_model},
        std::tuple{"LM head", in, vocab}}) {
    const torch::Tensor wl = (torch::randn({out_features, x_in.size(1)}) * 0.02).requires_grad_();
    const torch::Tensor gy = torch::randn({x_in.size(0), out_features});
    std::snprintf(name, sizeof name, "linear %s (%lld x %lld) -> %lld", what,
                  static_cast<long long>(x_in.size(0)), static_cast<long long>(x_in.size(1)),
                  static_cast<long long>(out_features));
    row(
        name, [&] { torch::linear(x_in, wl).backward(gy); },
        [&] { normlab::kernels::linear(x_in, wl).backward(gy); });
  }
  std::printf("  (linear through %s here)\n", normlab::kernels::onednn_linear_available()
                                                  ? "oneDNN"
                                                  : "ATen: the same op both sides");
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 8 * 2048, cols = 2048;
  int reps = 50;
  CLI::App app{"normlab's kernels against the ATen composition each replaces"};
  app.add_option("--rows", rows, "rows (tokens)")->capture_default_str();
  app.add_option("--cols", cols, "columns (d_model)")->capture_default_str();
  app.add_option("--reps", reps, "timed repetitions (median)")->capture_default_str();
  bool cpu = false;
  int64_t batch = 8, tokens = 256, d_model = 512, heads = 8, d_ff = 1376, vocab = 4096;
  app.add_flag("--cpu", cpu,
               "the CPU kernels (RMSNorm, RoPE, SwiGLU, attention, cross-entropy, linear) instead "
               "of the CUDA one");
  app.add_option("--batch", batch, "--cpu: batch")->capture_default_str();
  app.add_option("--tokens", tokens, "--cpu: tokens per sequence")->capture_default_str();
  app.add_option("--d-model", d_model, "--cpu: d_model")->capture_default_str();
  app.add_option("--heads", heads, "--cpu: attention heads (RoPE)")->capture_default_str();
  app.add_option("--d-ff", d_ff, "--cpu: SwiGLU width")->capture_default_str();
  app.add_option("--vocab", vocab, "--cpu: vocabulary (the LM head)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (cpu) {
    if (batch < 1 || tokens < 1 || heads < 1 || d_model % heads != 0 ||
        (d_model / heads) % 2 != 0) {
      std::fprintf(stderr,
                   "normlab-bench-kernels: --d-model %lld must split into --heads %lld of an "
                   "even size, and --batch, --tokens, --d-ff and --vocab must be positive\n",
                   static_cast<long long>(d_model), static_cast<long long>(heads));
      return 2;
    }
    // As in `normlab train`: freed blocks are reused, so neither side pays page faults for
    // its large outputs (the cross-entropy's 32 MB gradient, say) in every call.
    static normlab::CpuCachingAllocator cache;
    cache.install();
    bench_cpu(batch, tokens, d_model, heads, d_ff, vocab, reps);
    return 0;
  }
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
        std::tie(r, n) = normlab::kernels::add_rms_norm(x, b, 1.0, w, 1e-5);
      } else {
        r = x + b;
        n = at::rms_norm(r.to(torch::kFloat), {cols}, w, 1e-5).to(r.scalar_type());
      }
      torch::autograd::backward({r, n}, {gr, gn});
    };
    if (!normlab::kernels::fusable_add_rms_norm(x, b, w)) {
      std::printf("  %-22s not fusable in this build\n", name);
      continue;
    }
    const double aten = time_ms([&] { step(false); }, reps),
                 ours = time_ms([&] { step(true); }, reps);
    std::printf("  %-22s %10.3f %10.3f %6.2fx\n", name, aten, ours, aten / ours);
  }
  return 0;
}
