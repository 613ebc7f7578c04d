#include "normlab/nn/attention.h"

#include <ATen/SDPBackend.h>
#include <ATen/Version.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cmath>
#include <optional>

#include "normlab/kernels/ops.h"
#include "normlab/nn/autocast.h"
#include "normlab/util/library_error.h"

namespace normlab {
namespace {

// PyTorch 2.11's CPU flash attention in bf16 (and fp16) packs its operands for AMX whenever the
// CPU has AMX, with code that only its AVX-512 kernels contain: with ATen's kernels lowered
// (ATEN_CPU_CAPABILITY=avx2 or default) on such a CPU it throws "pack_vnni2 is only supported
// when avx512 is supported". Where the kernels are lowered, attention on the CPU under autocast
// or in a reduced dtype runs in fp32 instead.
bool cpu_reduced_attention_fails(const torch::Tensor& q) {
  if (!q.is_cpu()) return false;
  const bool reduced = q.scalar_type() == torch::kBFloat16 || q.scalar_type() == torch::kHalf ||
                       at::autocast::is_autocast_enabled(at::kCPU);
  static const bool lowered = at::get_cpu_capability() != "AVX512";  // fixed for the process
  return reduced && lowered;
}

// Whether the causal attention of q (B, H, T, D) and k, v (B, Hk, T, D) runs as normlab's
// products over blocks of queries (kernels::causal_attention): on the CPU in float32 or float64,
// or in bfloat16 (under autocast, where q, k, v come out of the linear layers in bfloat16; the
// kernel computes in float32), within its bounds, and where it is the faster of the two in this
// CPU class (kernels/ops.h); SDPA otherwise.
bool own_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const bool dtype_ok =
      !at::autocast::is_autocast_enabled(at::kCPU) || q.scalar_type() == torch::kBFloat16;
  return dtype_ok && k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type() &&
         k.is_cpu() && v.is_cpu() && kernels::causal_attention_fits(q, q, q) &&
         kernels::causal_attention_preferred(q.size(0) * q.size(1), q.size(2));
}

}  // namespace

AttentionOptions attention_options(const ModelConfig& cfg, torch::Device device) {
  return AttentionOptions(cfg.d_model, cfg.n_heads)
      .n_kv_heads(cfg.kv_heads())
      .qkv_norm(cfg.uses_qkv_norm())
      .qk_norm_full(cfg.qk_norm == QkNorm::Full)
      .rope_theta(cfg.rope_theta)
      .norm_type(cfg.norm_type)
      .norm_eps(cfg.norm_eps)
      .device(device);
}

AttentionImpl::AttentionImpl(const AttentionOptions& options_) : options(options_) {
  const int64_t C = options.d_model(), H = options.n_heads(), Hk = options.kv_heads();
  const int64_t D = options.head_dim();
  qkv = register_module("qkv", Linear(C, (H + 2 * Hk) * D, options.device()));
  out = register_module("out", Linear(H * D, C, options.device()));
  TORCH_CHECK(!(options.qkv_norm() && options.qk_norm_full()),
              "attention: per-head q/k/v norms and full q/k norms exclude each other");
  const auto norm_of = [&](int64_t width) {
    return Norm(NormOptions(width)
                    .eps(options.norm_eps())
                    .type(options.norm_type())
                    .device(options.device()));
  };
  if (options.qkv_norm()) {
    q_norm = register_module("q_norm", norm_of(D));
    k_norm = register_module("k_norm", norm_of(D));
    v_norm = register_module("v_norm", norm_of(D));
  }
  if (options.qk_norm_full()) {
    q_norm = register_module("q_norm", norm_of(H * D));
    k_norm = register_module("k_norm", norm_of(Hk * D));
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x) {
  try {
    return attend(x);
  } catch (...) {
    rethrow_with_context(".attn");  // "forward of blocks.L.attn" inside the model
  }
}

torch::Tensor AttentionImpl::attend(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1);
  const int64_t H = options.n_heads(), Hk = options.kv_heads(), D = options.head_dim();

  const std::vector<torch::Tensor> parts = qkv(x).split({H * D, Hk * D, Hk * D}, /*dim=*/-1);
  const bool full = options.qk_norm_full();
  torch::Tensor q = (full ? q_norm(parts[0]) : parts[0]).view({B, T, H, D});
  torch::Tensor k = (full ? k_norm(parts[1]) : parts[1]).view({B, T, Hk, D});
  torch::Tensor v = parts[2].view({B, T, Hk, D});
  if (options.qkv_norm()) {
    q = q_norm(q);
    k = k_norm(k);
    v = v_norm(v);
  }
  // Positions start after the cached ones (0 without a cache).
  const int64_t past = cache ? cache->length : 0;
  const int64_t end = past + T;
  const int64_t table_len = cache ? cache->k.size(2) : T;
  if (!rope_.cos.defined() || rope_.cos.size(0) != table_len || rope_.cos.device() != q.device() ||
      rope_.cos.scalar_type() != q.scalar_type()) {
    rope_ = rope_tables(table_len, D, options.rope_theta(), q.device(), q.scalar_type());
  }
  const RopeTables at_positions =
      table_len == T ? rope_
                     : RopeTables{rope_.cos.narrow(0, past, T), rope_.sin.narrow(0, past, T)};
  q = rope_apply(q, at_positions).transpose(1, 2);  // (B, H, T, D)
  k = rope_apply(k, at_positions).transpose(1, 2);  // (B, Hk, T, D)
  v = v.transpose(1, 2);

  torch::Tensor mask;  // none: causal from position 0, or one new token that sees everything
  bool causal = true;
  if (cache) {
    TORCH_CHECK(end <= cache->k.size(2), "KV cache full: ", end, " positions, room for ",
                cache->k.size(2));
    cache->k.narrow(2, past, T).copy_(k);
    cache->v.narrow(2, past, T).copy_(v);
    cache->length = end;
    k = cache->k.narrow(2, 0, end);
    v = cache->v.narrow(2, 0, end);
    if (past > 0) {
      causal = false;
      if (T > 1) {  // query i (at position past + i) sees keys 0 .. past + i
        const auto on = torch::TensorOptions().device(q.device());
        mask = torch::arange(end, on).unsqueeze(0) <= (torch::arange(T, on) + past).unsqueeze(1);
      }
    }
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  if (causal && !mask.defined() && own_causal_attention(q, k, v)) {
    const int64_t rep = H / Hk;  // grouped-query heads: kv head h / rep serves query head h
    const torch::Tensor y =
        kernels::causal_attention(q, rep == 1 ? k : k.repeat_interleave(rep, 1),
                                  rep == 1 ? v : v.repeat_interleave(rep, 1), scale);
    return out(y.transpose(1, 2).reshape({B, T, H * D}));
  }
  const bool upcast = cpu_reduced_attention_fails(q);
  std::optional<NoAutocast> fp32;
  if (upcast) fp32.emplace();
  torch::Tensor y = at::scaled_dot_product_attention(
      upcast ? q.to(torch::kFloat) : q, upcast ? k.to(torch::kFloat) : k,
      upcast ? v.to(torch::kFloat) : v,
      mask.defined() ? std::optional<torch::Tensor>(mask) : std::nullopt,
      /*dropout_p=*/0.0, /*is_causal=*/causal, scale, /*enable_gqa=*/Hk != H);
  if (upcast) y = y.to(q.scalar_type());
  fp32.reset();
  return out(y.transpose(1, 2).reshape({B, T, H * D}));
}

std::string attention_backend(const AttentionOptions& o, int64_t batch, int64_t seq_len,
                              torch::ScalarType dtype) {
  const auto on = torch::TensorOptions().device(o.device()).dtype(dtype);
  const int64_t D = o.head_dim();
  // As forward lays them out: (B, T, heads, D) viewed as (B, heads, T, D).
  const torch::Tensor q = torch::empty({batch, seq_len, o.n_heads(), D}, on).transpose(1, 2);
  const torch::Tensor kv = torch::empty({batch, seq_len, o.kv_heads(), D}, on).transpose(1, 2);
  if (own_causal_attention(q, kv, kv)) return "normlab (products over causal blocks)";
  // An underscore operator (docs/dependencies.md): a LibTorch that changes or refuses it costs
  // the log its backend's name, never the run.
  int64_t choice = -1;
  try {
    choice =
        at::_fused_sdp_choice(q, kv, kv, std::nullopt, /*dropout_p=*/0.0, /*is_causal=*/true,
                              1.0 / std::sqrt(static_cast<double>(D)), o.kv_heads() != o.n_heads());
  } catch (const std::exception&) {
    return "unknown (LibTorch's _fused_sdp_choice refused this shape)";
  }
  switch (static_cast<at::SDPBackend>(choice)) {
    case at::SDPBackend::flash_attention: return "flash";
    case at::SDPBackend::cudnn_attention: return "cudnn";
    case at::SDPBackend::efficient_attention: return "efficient";
    case at::SDPBackend::math: return "math";
    case at::SDPBackend::overrideable: return "overrideable";
    default: return "none (" + std::to_string(choice) + ")";
  }
}

void AttentionImpl::pretty_print(std::ostream& stream) const {
  stream << "normlab::Attention(d_model=" << options.d_model() << ", heads=" << options.n_heads()
         << ", kv_heads=" << options.kv_heads() << (options.qkv_norm() ? ", qkv_norm" : "")
         << (options.qk_norm_full() ? ", qk_norm=full" : "") << ")";
}

}  // namespace normlab
