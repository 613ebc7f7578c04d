// Causal self-attention, the shared attention branch of every scheme.
//   q|k|v = split(W_qkv x)                 one fused projection, rows [q heads | k | v kv-heads]
//   q, k, v = N_q(q), N_k(k), N_v(v)       optional per-head norms (size head_dim), before RoPE
//   or q, k = N_q(q), N_k(k)               optional full-width norms (size H*D, Hk*D) before
//                                          the heads are split, v untouched (qk_norm_full)
//   q, k = rope(q), rope(k)
//   y = W_o SDPA(q, k, v, causal)          full multi-head or grouped-query (n_kv_heads < n_heads)
// Shapes: B = batch, T = sequence, C = d_model, H = heads, Hk = kv heads, D = head dim.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "normlab/nn/kv_cache.h"
#include "normlab/nn/linear.h"
#include "normlab/nn/model_config.h"
#include "normlab/nn/norm.h"
#include "normlab/nn/rope.h"

namespace normlab {

struct AttentionOptions {
  AttentionOptions(int64_t d_model, int64_t n_heads) : d_model_(d_model), n_heads_(n_heads) {}
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, n_heads);
  TORCH_ARG(int64_t, n_kv_heads) = 0;  // 0: n_heads
  TORCH_ARG(bool, qkv_norm) = false;
  TORCH_ARG(bool, qk_norm_full) = false;  // not with qkv_norm
  TORCH_ARG(double, rope_theta) = 10000.0;
  TORCH_ARG(NormType, norm_type) = NormType::RmsNorm;
  TORCH_ARG(double, norm_eps) = 1e-5;
  TORCH_ARG(torch::Device, device) = torch::kCPU;

 public:  // TORCH_ARG leaves the access at private
  int64_t kv_heads() const { return n_kv_heads_ > 0 ? n_kv_heads_ : n_heads_; }
  int64_t head_dim() const { return d_model_ / n_heads_; }
};

/// The attention options of a block of `cfg` (q/k/v norms as cfg.uses_qkv_norm(), full q/k
/// norms as cfg.qk_norm).
AttentionOptions attention_options(const ModelConfig& cfg, torch::Device device);

/// The attention kernel of a causal training forward of `batch` sequences of `seq_len` tokens in
/// `dtype` on options.device(): "normlab (products over causal blocks)" where normlab's own runs
/// (kernels::causal_attention: on the CPU in float32 or float64, up to 512 tokens, where
/// kernels::causal_attention_preferred says it is faster than SDPA's flash kernel), else the
/// scaled-dot-product-attention kernel LibTorch picks: "flash", "cudnn", "efficient"
/// (memory-efficient), "math" (the unfused composition) or "overrideable". Asks
/// LibTorch's own dispatcher (at::_fused_sdp_choice) on tensors of the model's shapes, so it
/// names the kernel the runs use, not one assumed from the device; "unknown (...)" where
/// LibTorch refuses that query (the run goes on).
std::string attention_backend(const AttentionOptions& options, int64_t batch, int64_t seq_len,
                              torch::ScalarType dtype);

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const AttentionOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, C)
  void pretty_print(std::ostream& stream) const override;

  AttentionOptions options;
  Linear qkv{nullptr};   // (H*D + 2*Hk*D, C)
  Linear out{nullptr};   // (C, H*D)
  Norm q_norm{nullptr};  // (D) with qkv_norm, (H*D) with qk_norm_full
  Norm k_norm{nullptr};  // (D) with qkv_norm, (Hk*D) with qk_norm_full
  Norm v_norm{nullptr};

  /// Incremental decoding (kv_cache.h): while set, forward continues the cached sequence.
  std::shared_ptr<KVSlot> cache;

 private:
  torch::Tensor attend(const torch::Tensor& x);  // forward, without its error context
  RopeTables rope_;                              // cached for the last (T, device, dtype) seen
};
TORCH_MODULE(Attention);

}  // namespace normlab
