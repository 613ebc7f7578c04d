// normlab info --config X.yaml: parameters, FLOPs per token and training memory per GPU; with
// --precision, also what train.precision resolves to on this machine (train/precision.h).
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <set>
#include <string>

#include "command.h"
#include "normlab/config/config_io.h"
#include "normlab/eval/info.h"
#include "normlab/train/precision.h"
#include "normlab/util/cpu_class.h"
#include "normlab/util/device.h"
#include "normlab/util/error.h"

namespace normlab::cli {
namespace {

std::string grouped(int64_t n) {
  std::string s = std::to_string(n >= 0 ? n : -n), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return (n < 0 ? "-" : "") + out;
}

// 1.28 B parameters, 7.87 GFLOP: counts get K/M/B, FLOPs the SI prefixes.
std::string human(double x, const char* unit) {
  const bool count = unit[0] == '\0';
  const char* prefixes[] = {"", "K", "M", count ? "B" : "G", "T", "P"};
  int i = 0;
  while (std::abs(x) >= 1000.0 && i < 5) {
    x /= 1000.0;
    ++i;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, count ? "%.2f%s%s" : "%.2f %s%s", x, prefixes[i], unit);
  return buf;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

struct InfoOptions {
  std::string config;
  std::vector<std::string> overrides;
  int64_t world_size = 8;
  int64_t micro_batch = 0;  // 0: train.micro_batch
  bool precision = false;   // also train.precision on this machine
};

int run_info(const InfoOptions& o) {
  const RunConfig cfg = config_load(o.config, o.overrides);
  const ModelConfig& m = cfg.model;
  const ParamCounts c = count_parameters(m);
  const int64_t T = cfg.data.seq_len;

  std::cout << "config      " << o.config << "\n"
            << "scheme      " << enum_name(m.scheme) << ", " << m.n_layers << " layers, d_model "
            << m.d_model << ", " << m.n_heads << " heads (" << m.kv_heads() << " kv), d_ff "
            << m.d_ff << ", vocab " << m.vocab_size << (m.tie_embeddings ? " (tied)" : "") << "\n";
  if (m.qk_norm == QkNorm::Full)
    std::cout << "attention   QK-norm full: one " << enum_name(m.norm_type) << " over all of q ("
              << m.n_heads * m.head_dim() << ") and one over all of k ("
              << m.kv_heads() * m.head_dim() << ") before the heads are split; v untouched\n";
  else if (m.uses_qkv_norm())
    std::cout << "attention   QKV-norm per head: one " << enum_name(m.norm_type) << " of "
              << m.head_dim() << " on q, one on k, one on v, shared by the heads\n";
  if (m.moe.enabled())
    std::cout << "MoE         " << m.moe.n_experts << " experts of d_expert " << m.expert_width()
              << ", top-" << m.moe.top_k
              << (m.moe.renormalize ? " renormalized" : " (raw softmax weights)")
              << (m.moe.every == 1 ? std::string(", in every block")
                                   : ", in blocks 0, " + std::to_string(m.moe.every) + ", " +
                                         std::to_string(2 * m.moe.every) + ", ...")
              << "; token choice, dropless (no capacity factor, no token dropped)\n"
              << "            aux losses: " << m.moe.lb_loss_weight << " x load balance + "
              << m.moe.z_loss_weight << " x router z-loss\n"
              << "            dispatch: " << enum_name(m.moe.dispatch)
              << (m.moe.dispatch == MoeDispatch::Loop ? " (one GEMM pair per expert)"
                  : m.moe.dispatch == MoeDispatch::Grouped
                      ? " (two grouped GEMMs for all experts)"
                      : " (grouped GEMMs on CUDA where they fit, else one GEMM pair per expert)")
              << "\n";
  std::cout << "\n";

  std::cout << "parameters            " << grouped(c.total) << "  ("
            << human(static_cast<double>(c.total), "") << ")\n";
  if (m.moe.enabled())
    std::cout << "active per token      " << grouped(c.active) << "  ("
              << human(static_cast<double>(c.active), "") << ")\n";
  std::cout << "  embedding           " << grouped(c.embedding) << "\n"
            << "  head                " << grouped(c.head)
            << (m.tie_embeddings ? "  (tied to the embedding)" : "") << "\n";
  const std::set<int64_t> sizes(c.per_block.begin(), c.per_block.end());
  if (sizes.size() == 1) {
    std::cout << "  per block           " << grouped(c.per_block[0]) << "  x " << m.n_layers
              << "\n";
  } else {
    for (size_t l = 0; l < c.per_block.size(); ++l)
      std::cout << "  block " << l << (l < 10 ? "             " : "            ")
                << grouped(c.per_block[l]) << "\n";
  }
  std::cout << "  end norms           " << grouped(c.ends) << "\n";
  if (c.connections > 0) {  // hyper's streams, or SiameseNorm's Y as hyper-streams
    const bool y = m.scheme != Scheme::Hyper;
    const HyperOptions& h = y ? m.siamese.hyper : m.hyper;
    std::cout << "  HC connections      " << grouped(c.connections) << "  (" << (y ? "Y as " : "")
              << h.n << " "
              << (h.variant == HyperVariant::Mhc ? "mHC"
                  : h.dynamic                    ? "DHC"
                                                 : "SHC")
              << " streams, 2 layers per block; in the blocks' counts)\n";
  }
  if (c.base != m.scheme) {
    char pct[32];
    std::snprintf(pct, sizeof pct, "%.4f %%",
                  100.0 * static_cast<double>(c.extra()) / static_cast<double>(c.base_total));
    std::cout << "  over " << enum_name(c.base) << std::string(15 - enum_name(c.base).size(), ' ')
              << "+" << grouped(c.extra()) << "  (" << pct << ")\n";
  }

  const double f = flops_per_token(m, T);
  std::cout << "\nFLOPs per token       " << human(f, "FLOP")
            << "  (6N + 6 L H D T, causal attention; seq_len " << T << ")\n"
            << "  per step            "
            << human(f * static_cast<double>(cfg.train.global_batch * T), "FLOP")
            << "  (global batch " << cfg.train.global_batch << " x " << T << " tokens)\n";

  const int64_t S = cfg.distributed.shard_size;
  if (S > 0 && (S > o.world_size || o.world_size % S != 0))
    throw ConfigError("distributed.shard_size = " + std::to_string(S) +
                      ": must divide the number of GPUs (--world-size " +
                      std::to_string(o.world_size) + ")");
  MemoryPlan plan;
  plan.seq_len = T;
  plan.micro_batch = o.micro_batch > 0 ? o.micro_batch : cfg.train.micro_batch;
  plan.overlap_reduce = cfg.distributed.overlap_reduce;
  // Gradient accumulation over ranks: global_batch / (micro_batch x world) micro-steps.
  const int64_t micro_steps =
      cfg.train.global_batch / std::max<int64_t>(plan.micro_batch * o.world_size, 1);
  plan.reduce_per_step = cfg.distributed.reduce == GradientReduce::PerStep && micro_steps > 1;
  std::cout
      << "\nmemory per GPU (estimate; micro-batch " << plan.micro_batch << ", seq_len " << T
      << ", bf16 autocast, fp32 AdamW)\n"
      << "  layout                                      weights+grads+adam  working   activations  "
         "logits    total\n";
  for (int fsdp = 0; fsdp < 2; ++fsdp) {
    for (int ac = 0; ac < 2; ++ac) {
      plan.fsdp = fsdp == 1;
      plan.world_size = plan.fsdp ? o.world_size : 1;
      plan.shard_size = cfg.distributed.shard_size;
      plan.activation_checkpointing = ac == 1;
      const MemoryEstimate e = estimate_memory(m, plan);
      const bool hybrid = plan.shard_size > 0 && plan.shard_size < o.world_size;
      // HSDP S x R: parameters sharded over groups of S GPUs, replicated R times.
      std::string label = !plan.fsdp ? "replicated"
                          : hybrid   ? "HSDP " + std::to_string(plan.shard_size) + " x " +
                                         std::to_string(o.world_size / plan.shard_size) + " GPUs"
                                   : "FSDP over " + std::to_string(o.world_size) + " GPUs";
      label += ac ? ", activation checkpointing" : "";
      char line[256];
      std::snprintf(line, sizeof line, "  %-44s%-20s%-10s%-13s%-10s%s\n", label.c_str(),
                    gib(e.weights + e.gradients + e.optimizer).c_str(), gib(e.working).c_str(),
                    gib(e.activations).c_str(), gib(e.logits).c_str(), gib(e.total()).c_str());
      std::cout << line;
    }
  }
  if (S > 0 && S < o.world_size)
    std::cout << "  HSDP " << S << " x " << o.world_size / S << ": distributed.shard_size " << S
              << ", parameters sharded over " << S << " GPUs and replicated " << o.world_size / S
              << " times\n";
  if (cfg.distributed.reduce == GradientReduce::PerStep) {
    std::cout << "  distributed.reduce per_step: ";
    if (plan.reduce_per_step)
      std::cout << "FSDP's working memory includes " << gib(4.0 * static_cast<double>(c.total))
                << " of unsharded fp32 gradient summed over " << micro_steps
                << " micro-steps, one reduce-scatter per step\n";
    else
      std::cout << "one micro-step per step over " << o.world_size
                << " GPUs: nothing to accumulate, the same as per_micro_step\n";
  }
  if (o.precision) {
    // As `normlab train` decides it on this machine: measured (or read from the cache) where the
    // CPU computes bf16 natively and train.precision asks for it.
    const torch::Device device = resolve_device(cfg.train.device);
    const CpuClass cpu = cpu_class(onednn_max_isa_from_environment());
    std::optional<PrecisionTiming> t;
    if (precision_needs_timing(cfg.train.precision, device, cpu))
      t = precision_timing(m, cfg.train.micro_batch * T, cpu,
                           [](const std::string& w) { std::cerr << "warning: " << w << "\n"; });
    std::cout << "\ntrain.precision = " << enum_name(cfg.train.precision) << " here: "
              << choose_precision(cfg.train.precision, device, cpu, t ? &*t : nullptr).reason
              << "\n";
  }
  return 0;
}

}  // namespace

Runner setup_info(CLI::App& sub) {
  auto o = std::make_shared<InfoOptions>();
  sub.add_option("--config", o->config, "run configuration (YAML)")
      ->required()
      ->check(CLI::ExistingFile);
  sub.add_option("--set", o->overrides, "override a key: section.key=value (repeatable)");
  sub.add_option("--world-size", o->world_size, "GPUs for the FSDP memory estimate")
      ->capture_default_str();
  sub.add_option("--micro-batch", o->micro_batch, "sequences per GPU (default: train.micro_batch)");
  sub.add_flag("--precision", o->precision,
               "also what train.precision resolves to on this machine (auto: bf16 or fp32, "
               "measured for this model where the CPU computes bf16 natively, then cached)");
  return [o] { return run_info(*o); };
}

}  // namespace normlab::cli
