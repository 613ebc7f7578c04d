#include "normlab/config/config.h"

#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "config/config_codec.h"
#include "config/config_schema.h"
#include "config/data_sources_yaml.h"
#include "normlab/util/error.h"

namespace normlab {
namespace {

template <class T>
void require(bool ok, const char* key, const T& value, const std::string& rule) {
  if (ok) return;
  std::ostringstream msg;
  msg << key << " = " << value << ": " << rule;
  throw ConfigError(msg.str());
}

// Every key of a section with its value as text (config_schema.h), to compare with the defaults.
struct KeyTexts {
  std::string prefix;
  std::vector<std::pair<std::string, std::string>> keys;
  template <class T>
  void operator()(const char* key, T& field, const char*) {
    keys.emplace_back(prefix + key, config_codec::to_text(field));
  }
  template <class S>
  void section(const char* key, S& sub, const char*) {
    KeyTexts child{prefix + key + ".", {}};
    config_schema::visit(child, sub);
    keys.insert(keys.end(), child.keys.begin(), child.keys.end());
  }
};

// A section that only some schemes read, given a value other than its default on another
// scheme, would be ignored without a word: refused, naming the key and the schemes that read it.
// (Its defaults pass: the resolved config.yaml writes every key.)
template <class S>
void require_read(S section, const std::string& prefix, bool read, const char* readers,
                  Scheme scheme) {
  if (read) return;
  KeyTexts given{prefix, {}}, defaults{prefix, {}};
  S fresh;
  config_schema::visit(given, section);
  config_schema::visit(defaults, fresh);
  for (size_t i = 0; i < given.keys.size(); ++i)
    if (given.keys[i].second != defaults.keys[i].second)
      throw ConfigError(given.keys[i].first + " = " + given.keys[i].second + ": read only by " +
                        readers + ", not by model.scheme = " + std::string(enum_name(scheme)) +
                        ": remove it, or set model.scheme to a scheme that reads it");
}

// model.moe.dispatch = grouped runs at::_grouped_mm, which takes float32, bfloat16 or float16
// with rows of a multiple of 16 bytes: refused here, before any tensor exists, when the run's
// compute dtype cannot be (fp64) or the widths do not divide (bf16: 8 elements, auto may be
// bf16; fp32: 4). The MoE module keeps the same check for models built outside a config.
void require_grouped_dispatch_fits(const ModelConfig& m, Precision precision) {
  if (m.moe.n_experts == 0 || m.moe.dispatch != MoeDispatch::Grouped) return;
  require(precision != Precision::Fp64, "model.moe.dispatch", "grouped",
          "the grouped GEMM takes float32 or bfloat16, not train.precision = fp64 (use loop, or "
          "auto to fall back to it)");
  const int64_t per_16_bytes = precision == Precision::Fp32 ? 4 : 8;
  const std::string dtype = precision == Precision::Fp32 ? "float32" : "bfloat16";
  for (const auto& [key, width] :
       {std::pair{"model.d_model", m.d_model}, std::pair{"model.moe.d_expert", m.expert_width()}})
    if (width % per_16_bytes != 0)
      throw ConfigError(
          "model.moe.dispatch = grouped: the grouped GEMM's rows are multiples of "
          "16 bytes (" +
          std::to_string(per_16_bytes) + " " + dtype + " values, " +
          "train.precision = " + std::string(enum_name(precision)) + "); " + key + " is " +
          std::to_string(width) + " (use loop, or auto to fall back to it)");
}

}  // namespace

void validate(const RunConfig& c) {
  validate(c.model);
  const Scheme scheme = c.model.scheme;
  require_read(c.model.hyper, "model.hyper.", scheme == Scheme::Hyper, "model.scheme = hyper",
               scheme);
  require_read(c.model.siamese.hyper, "model.siamese.hyper.",
               scheme == Scheme::Siamese || scheme == Scheme::SiameseHybrid,
               "model.scheme = siamese or siamese_hybrid", scheme);
  require_grouped_dispatch_fits(c.model, c.train.precision);
  require(c.data.seq_len > 0, "data.seq_len", c.data.seq_len, "must be positive");
  require(c.data.val.size() <= 1, "data.val", config_yaml::sources_text(c.data.val),
          "one source (a mixture is for data.train)");

  const OptimizerConfig& o = c.optimizer;
  require(o.lr > 0, "optimizer.lr", o.lr, "must be positive");
  require(o.beta1 >= 0 && o.beta1 < 1, "optimizer.beta1", o.beta1, "must lie in [0, 1)");
  require(o.beta2 >= 0 && o.beta2 < 1, "optimizer.beta2", o.beta2, "must lie in [0, 1)");
  require(o.eps > 0, "optimizer.eps", o.eps, "must be positive");
  require(o.weight_decay >= 0, "optimizer.weight_decay", o.weight_decay, "must be >= 0");
  require(o.grad_clip >= 0, "optimizer.grad_clip", o.grad_clip, "must be >= 0 (0 = off)");

  const SchedulerConfig& s = c.scheduler;
  require(s.warmup_steps >= 0, "scheduler.warmup_steps", s.warmup_steps, "must be >= 0");
  require(s.final_lr_fraction >= 0 && s.final_lr_fraction <= 1, "scheduler.final_lr_fraction",
          s.final_lr_fraction, "must lie in [0, 1]");
  require(s.decay_fraction >= 0 && s.decay_fraction <= 1, "scheduler.decay_fraction",
          s.decay_fraction, "must lie in [0, 1]");

  const TrainConfig& t = c.train;
  require(t.steps > 0, "train.steps", t.steps, "must be positive");
  require(t.micro_batch > 0, "train.micro_batch", t.micro_batch, "must be positive");
  require(
      t.global_batch > 0 && t.global_batch % t.micro_batch == 0, "train.global_batch",
      t.global_batch,
      "must be a positive multiple of train.micro_batch (" + std::to_string(t.micro_batch) + ")");
  require(t.z_loss >= 0, "train.z_loss", t.z_loss, "must be >= 0");
  require(t.selective_every >= 1, "train.selective_every", t.selective_every, "must be at least 1");
  require(t.loss_chunk_rows >= 0, "train.loss_chunk_rows", t.loss_chunk_rows,
          "must be >= 0 (0 = off)");
  require(t.spike_window >= 2, "train.spike_window", t.spike_window, "must be at least 2");
  require(t.spike_sigma > 0, "train.spike_sigma", t.spike_sigma, "must be positive");
  require(c.eval.every >= 0, "eval.every", c.eval.every, "must be >= 0");
  require(c.eval.batches >= 0, "eval.batches", c.eval.batches, "must be >= 0");
  require(c.eval.micro_batch >= 0, "eval.micro_batch", c.eval.micro_batch, "must be >= 0");
  require(c.diagnostics.every >= 0, "diagnostics.every", c.diagnostics.every, "must be >= 0");
  require(c.diagnostics.batch >= 1, "diagnostics.batch", c.diagnostics.batch, "must be >= 1");
  require(c.diagnostics.top_k >= 0, "diagnostics.top_k", c.diagnostics.top_k, "must be >= 0");
  require(c.checkpoint.every >= 0, "checkpoint.every", c.checkpoint.every, "must be >= 0");
  require(c.checkpoint.keep >= 1, "checkpoint.keep", c.checkpoint.keep, "must be at least 1");
  require(c.distributed.timeout_seconds >= 1, "distributed.timeout_seconds",
          c.distributed.timeout_seconds, "must be at least 1");
  require(c.logging.every >= 1, "logging.every", c.logging.every, "must be at least 1");
  require(c.logging.peak_tflops >= 0, "logging.peak_tflops", c.logging.peak_tflops,
          "must be at least 0 (0: by the GPU's name)");
  require(c.logging.mfu_warmup >= 0, "logging.mfu_warmup", c.logging.mfu_warmup,
          "must be at least 0");
  require(c.logging.level == "debug" || c.logging.level == "info" || c.logging.level == "warn" ||
              c.logging.level == "error",
          "logging.level", c.logging.level, "must be debug, info, warn or error");
  require(t.device == "auto" || t.device == "cpu" || t.device.rfind("cuda", 0) == 0, "train.device",
          t.device, "must be auto, cpu, cuda or cuda:N");
  require(c.distributed.shard_size >= 0, "distributed.shard_size", c.distributed.shard_size,
          "must be at least 0 (0: all ranks; else ranks per shard group, a divisor of the world "
          "size)");
  require(!c.distributed.keep_fp32.empty(), "distributed.keep_fp32", "''",
          "must list norms, scheme, embeddings (comma-separated), or be none");
  if (c.distributed.keep_fp32 != "none") {
    std::stringstream list(c.distributed.keep_fp32);
    std::string item;
    while (std::getline(list, item, ','))
      require(item == "norms" || item == "scheme" || item == "embeddings", "distributed.keep_fp32",
              c.distributed.keep_fp32,
              "'" + item + "' is not one of norms, scheme, embeddings (comma-separated), or none");
  }
  // fp64 training gathers and reduces in fp64; the FSDP dtypes choose only for fp32/bf16 runs.
  for (const auto& [key, p] : {std::pair{"distributed.param_dtype", c.distributed.param_dtype},
                               std::pair{"distributed.reduce_dtype", c.distributed.reduce_dtype}}) {
    require(p != Precision::Fp64, key, enum_name(p),
            "must be auto, bf16 or fp32 (train.precision = fp64 makes the FSDP traffic fp64)");
    require(t.precision != Precision::Fp64 || p != Precision::Bf16, key, enum_name(p),
            "cannot be bf16 with train.precision = fp64");
  }
}

bool decays(const std::string& name, int64_t dim, const OptimizerConfig& cfg) {
  // Hyper-Connections (docs/schemes.md): the dynamic projections W_alpha, W_beta are decayed
  // (W_beta is a vector), the static alpha (a matrix) and mHC's bias matrix b_res are not.
  const auto ends_with = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (ends_with("_hc.w_alpha") || ends_with("_hc.w_beta")) return true;
  if (ends_with("_hc.static_alpha") || ends_with("_hc.b_res")) return false;
  if (dim < 2) return false;  // norm gains, c1, biases, HC's static beta and scales s
  const bool embedding = name == "embed.weight" || name == "head.weight";
  return !embedding || cfg.decay_embeddings;
}

}  // namespace normlab
