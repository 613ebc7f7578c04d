// normlab's own kernels, the ops the model calls (src/kernels/: cpu/ for the CPU, cuda/ for
// CUDA). Each is an autograd function with its own backward, tested against the plain ATen
// composition it replaces (tests/unit/kernels/):
//   rms_norm(x, w, eps) = w * x * rsqrt(mean(x^2) + eps)    one pass per row          rms_norm.cpp
//   rope(x, cos, sin)   = x * cos + cat(-x2, x1) * sin      x (B, T, H, D), tables (T, D)  rope.cpp
//   swiglu(u)           = silu(g) * v,  [v | g] = u          one pass each way          swiglu.cpp
//   causal_attention(q, k, v, scale) = softmax(scale q k^T + causal mask) v
//                                       products over blocks of queries, one-pass softmax and its
//                                       backward between them, a thread per head on the BLAS
//                                                                              causal_attention.cpp
//   cross_entropy(x, t) = mean_i (logsumexp(x_i) - x_i,t_i)  rows of target -100 left out, as
//                                       torch::cross_entropy_loss; one pass over a row each way
//                                                                                 cross_entropy.cpp
//   linear(x, w)        = x w^T                             float32 GEMMs through oneDNN where
//                                                            it runs (else ATen's linear)
//                                                                                 onednn_linear.cpp
// The CPU kernels take float32, float64 and bfloat16 tensors on the CPU (cpu_fusable); other
// devices and dtypes take the ATen ops. bfloat16 rows are computed in float32 and each output is
// rounded once, when it is stored (rope takes float32 or bfloat16 tables; the softmax that
// causal_attention keeps, the loss of cross_entropy and the 1/rms of rms_norm stay float32). One
// op fuses two of the
// model's steps, on the CPU (cpu/add_rms_norm.cpp) and on CUDA (cuda/add_rms_norm.cu):
//   add_rms_norm(x, b, d, w) = (r, w * r * rsqrt(mean(r^2) + eps)),  r = x + b / d
// the residual add of a sub-layer and the RMSNorm that follows it, in one pass per row;
// Norm::add_forward composes it for the rest.
// What this build and this machine offer the kernels: capabilities.h. Measured effect on a
// training step: docs/performance-cpu.md.
#pragma once

#include <torch/types.h>

#include <utility>

namespace normlab::kernels {

/// `weight` may be undefined (no gain).
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight);
/// silu(g) * v over u = [v | g] (the last dimension split in two halves), as the SwiGLU MLP
/// computes it; the backward writes the gradient of u in one pass.
torch::Tensor swiglu(const torch::Tensor& u);
/// The mean cross-entropy of logits (N, V) against targets (N, int64), torch::cross_entropy_loss
/// with its defaults: rows whose target is -100 are left out of the mean (NaN when none is
/// left), any other target outside [0, V) throws. The backward writes the logits' gradient in
/// one pass. bfloat16 logits give a float32 loss (that of the logits converted to float32) and
/// a bfloat16 gradient. Other devices, dtypes and shapes take torch::cross_entropy_loss.
torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets);

/// How causal_attention computes:
///   PerHead  each thread takes whole heads, every block's products through the BLAS that
///            LibTorch carries (cpu/blas.h), reading q, k, v and writing the output and the
///            gradients in their own strides: one parallel region each way, nothing copied.
///   Batched  each block's products over all heads at once through ATen (at::bmm), on contiguous
///            copies: the path where the BLAS is not available.
enum class CausalAttentionPath { PerHead, Batched };

/// PerHead where the BLAS runs and there are at least as many heads (batch x heads) as ATen has
/// threads (it splits whole heads between them); Batched otherwise.
CausalAttentionPath causal_attention_path(int64_t batch_heads);

/// Causal attention over q, k, v (B, H, T, D) of one shape (grouped-query heads repeated first),
/// float32, float64 or bfloat16 on the CPU: every query sees the keys up to its own position. Keeps
/// each block's softmax for the backward, so only for what causal_attention_fits accepts (throws
/// otherwise); AttentionImpl takes SDPA for the rest. The output and, with PerHead, the
/// gradients are laid out as (B, T, H, D) viewed as (B, H, T, D), the model's layout.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double scale);
/// The same on the path given (PerHead throws where the BLAS is not available): for the tests
/// and benchmarks that compare the two.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double scale, CausalAttentionPath path);

/// The bounds of causal_attention: sequences up to this many tokens, and the softmax blocks it
/// keeps for the backward (about B H T (T + block) / 2 values) within this many bytes a call.
constexpr int64_t kCausalAttentionMaxTokens = 512;
constexpr int64_t kCausalAttentionMaxKeptBytes = int64_t{128} << 20;

/// Whether causal attention over `batch_heads` heads of `tokens` tokens is faster as
/// causal_attention than as SDPA's flash kernel (docs/performance-cpu.md): on the PerHead path
/// at every length it takes, in every CPU class; on the Batched path below AVX-512 (vector_isa()
/// "AVX2" or "portable") at every length, with AVX-512 from kCausalAttentionAvx512MinTokens
/// tokens only (level or slower up to 256).
bool causal_attention_preferred(int64_t batch_heads, int64_t tokens);
constexpr int64_t kCausalAttentionAvx512MinTokens = 257;

/// True when causal_attention takes these: q, k, v of one shape (B, H, T, D), non-empty, one
/// dtype that cpu_fusable accepts, on the CPU, within the bounds above.
bool causal_attention_fits(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

/// (r, n) as above: one pass per row forward and one backward (r stored in x's dtype, n computed
/// from r as stored). Only for tensors that fusable_add_rms_norm accepts (throws otherwise);
/// Norm::add_forward dispatches.
std::pair<torch::Tensor, torch::Tensor> add_rms_norm(const torch::Tensor& x, const torch::Tensor& b,
                                                     double divisor, const torch::Tensor& weight,
                                                     double eps);

/// True when add_rms_norm can run. On the CPU: x and b of one shape, x fp32 with b fp32 or bf16,
/// or both bf16 (an fp32 gain), or both fp64 (an fp64 gain). On CUDA (a CUDA build): x, b and an
/// fp32 gain on one device, x and b contiguous, x fp32 with b fp32 or bf16, or both bf16.
bool fusable_add_rms_norm(const torch::Tensor& x, const torch::Tensor& b,
                          const torch::Tensor& weight);

/// True when these tensors take the CPU kernels (else the ATen composition): float32, float64 or
/// bfloat16 on the CPU.
bool cpu_fusable(const torch::Tensor& x);

}  // namespace normlab::kernels
