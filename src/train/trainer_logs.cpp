// RunLogs: the trainer's outputs besides checkpoints (trainer_logs.h).
#include "train/trainer_logs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "normlab/eval/info.h"
#include "normlab/nn/attention.h"
#include "normlab/util/device.h"
#include "normlab/util/file_io.h"

namespace normlab {
namespace fs = std::filesystem;
namespace {

std::string duration(double s) {
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s / 3600),
                  static_cast<int>(s / 60) % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s / 60), static_cast<int>(s) % 60);
  else
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  return buf;
}

// The lines of a JSONL file up to `step` (a resumed run keeps those of the steps before it).
void keep_lines_up_to(const std::string& path, int64_t step) {
  std::string kept;
  if (step > 0 && fs::exists(path)) {
    std::istringstream in(read_file(path));
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_discarded() && j.value("step", int64_t{0}) <= step) kept += line + "\n";
    }
  }
  write_file_atomic(path, [&](FileWriter& w) { w.write(kept); });
}

// A metrics line as TensorBoard scalars: train/<key> for the step's numbers, eval/<key> for the
// validation numbers, tasks/<name>_acc[_norm] for the multiple-choice tasks; flags (spike,
// skipped, diverged) and nulls are left out.
std::vector<Scalar> metrics_scalars(const nlohmann::json& line) {
  std::vector<Scalar> out;
  for (const auto& [key, value] : line.items()) {
    if (key == "step" || !value.is_number()) continue;
    const std::string tag = key.rfind("val_", 0) == 0    ? "eval/" + key
                            : key.rfind("task_", 0) == 0 ? "tasks/" + key.substr(5)
                                                         : "train/" + key;
    out.emplace_back(tag, value.get<double>());
  }
  return out;
}

// The diagnostics as TensorBoard scalars, one tag per layer: diagnostics/<what>_<stream>/entry
// and .../block_NN for the stream norms, stream gradients and logit lens;
// diagnostics/<attn|mlp>_grad/block_NN; diagnostics/gain_ratio_<branch>/block_NN and
// diagnostics/gain_ratio_final; MoE: diagnostics/moe_<max_share|entropy|idle>/block_NN.
std::vector<Scalar> diagnostics_scalars(const DiagnosticsReport& d) {
  std::vector<Scalar> out;
  const auto layer_name = [](int64_t layer) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "block_%02lld", static_cast<long long>(layer));
    return layer < 0 ? std::string("entry") : std::string(buf);
  };
  const auto per_stream = [&](const char* what, const std::vector<PerStream>& v) {
    for (const PerStream& s : v)
      for (size_t i = 0; i < s.values.size(); ++i)
        out.emplace_back(std::string("diagnostics/") + what + "_" + s.stream + "/" +
                             layer_name(static_cast<int64_t>(i) - 1),
                         s.values[i]);
  };
  per_stream("rms", d.rms);
  per_stream("l2", d.l2);
  per_stream("stream_grad", d.stream_grad);
  per_stream("lens", d.lens);
  for (size_t l = 0; l < d.attn_grad.size(); ++l)
    out.emplace_back("diagnostics/attn_grad/" + layer_name(static_cast<int64_t>(l)),
                     d.attn_grad[l]);
  for (size_t l = 0; l < d.mlp_grad.size(); ++l)
    out.emplace_back("diagnostics/mlp_grad/" + layer_name(static_cast<int64_t>(l)), d.mlp_grad[l]);
  for (const GainRatio& g : d.gains)
    out.emplace_back(g.layer < 0 ? "diagnostics/gain_ratio_final"
                                 : "diagnostics/gain_ratio_" + g.branch + "/" + layer_name(g.layer),
                     g.ratio);
  for (const RoutedShare& m : d.routing) {
    out.emplace_back("diagnostics/moe_max_share/" + layer_name(m.layer),
                     *std::max_element(m.share.begin(), m.share.end()));
    out.emplace_back("diagnostics/moe_entropy/" + layer_name(m.layer), m.entropy);
    out.emplace_back("diagnostics/moe_idle/" + layer_name(m.layer), static_cast<double>(m.idle));
  }
  return out;
}

}  // namespace

// metrics.jsonl and diagnostics.jsonl keep the lines of the steps before the resume point. Only
// rank 0 writes the run folder's files.
void RunLogs::open(const RunContext& ctx, int64_t step) {
  const RunConfig& cfg = ctx.cfg;
  metrics_path_ = (fs::path(ctx.o.run_dir) / "metrics.jsonl").string();
  if (ctx.lead) {
    keep_lines_up_to(metrics_path_, step);
    metrics_.open(metrics_path_, std::ios::app);
    // The events of steps after the resume point go, as the metrics lines do, also when a
    // resumed run turns TensorBoard off.
    const std::string tb = (fs::path(ctx.o.run_dir) / "tensorboard").string();
    if (cfg.logging.tensorboard) {
      events_ = std::make_unique<EventWriter>(tb, step);
      ctx.info("tensorboard: " + events_->path());
    } else if (fs::exists(tb)) {
      events_keep_up_to(tb, step);
    }
  }
  if (cfg.diagnostics.every > 0) {
    const std::string path = (fs::path(ctx.o.run_dir) / "diagnostics.jsonl").string();
    keep_lines_up_to(path, step);
    diagnostics_.open(path, std::ios::app);
  }
}

void RunLogs::write_metrics(const RunContext& ctx, const nlohmann::json& line) {
  if (!ctx.lead) return;
  metrics_ << line.dump() << "\n" << std::flush;
  write_events(ctx, line.value("step", int64_t{0}), metrics_scalars(line));
  if (!metrics_ && !metrics_failed_) {  // the run goes on; the next checkpoint save decides
    metrics_failed_ = true;
    if (ctx.log)
      ctx.log->error(metrics_path_ +
                     ": write failed (disk full?): later steps are missing from it");
  }
}

void RunLogs::write_diagnostics(const RunContext& ctx, const DiagnosticsReport& d) {
  diagnostics_ << diagnostics_json(d) << "\n" << std::flush;
  write_events(ctx, d.step, diagnostics_scalars(d));
}

void RunLogs::write_events(const RunContext& ctx, int64_t step,
                           const std::vector<Scalar>& scalars) {
  if (!events_ || events_->scalars(step, scalars) || events_failed_) return;
  events_failed_ = true;  // as for metrics.jsonl: the run goes on
  if (ctx.log)
    ctx.log->error(events_->path() +
                   ": write failed (disk full?): later steps may be missing from it");
}

void RunLogs::log_step(const RunContext& ctx, const StepMetrics& m) {
  const RunConfig& cfg = ctx.cfg;
  step_secs_.push_back(m.seconds);
  window_seconds_ += m.seconds;
  ++window_steps_;
  if (m.step % cfg.logging.every != 0 && m.step != 1 && m.step != cfg.train.steps) return;
  const double tps = tokens_per_step_ * static_cast<double>(window_steps_) / window_seconds_;
  char msg[256];
  int n = std::snprintf(msg, sizeof msg,
                        "step %lld/%lld | loss %.4f | lr %.2e | gnorm %.3f | %.0f tok/s",
                        static_cast<long long>(m.step), static_cast<long long>(cfg.train.steps),
                        m.loss, m.lr, m.grad_norm, tps);
  if (ctx.device.is_cuda() && peak_)
    n += std::snprintf(msg + n, sizeof msg - n, " | mfu %.1f%% (%.1f%% of measured)",
                       100.0 * tps * flops_token_ / peak_->flops,
                       100.0 * tps * flops_token_ / matmul_flops_);
  else if (ctx.device.is_cuda())
    n += std::snprintf(msg + n, sizeof msg - n, " | mfu %.1f%% of measured",
                       100.0 * tps * flops_token_ / matmul_flops_);
  std::snprintf(msg + n, sizeof msg - n, " | mem %.2f GiB | eta %s",
                device_memory_bytes(ctx.device) / (1 << 30),
                duration(window_seconds_ / static_cast<double>(window_steps_) *
                         static_cast<double>(cfg.train.steps - m.step))
                    .c_str());
  ctx.info(msg);
  window_seconds_ = 0.0;
  window_steps_ = 0;
}

// CUDA, at the end: the MFU of the steady state, this invocation's steps after the first
// logging.mfu_warmup (eval/mfu.h), into summary.json and the log.
void RunLogs::log_mfu(const RunContext& ctx) {
  sum_.gpu = gpu_name_;
  sum_.matmul_flops = matmul_flops_;
  const SteadyState w = steady_state(step_secs_, tokens_per_step_, ctx.cfg.logging.mfu_warmup);
  if (w.steps == 0) {
    ctx.info("mfu: no step after the " + std::to_string(w.warmup) +
             " warm-up steps (logging.mfu_warmup): not measured");
    return;
  }
  sum_.mfu_steps = w.steps;
  const std::optional<Mfu> measured = mfu(w, flops_token_, matmul_flops_);
  if (measured) sum_.mfu_measured = measured->mean;
  std::optional<Mfu> m;
  if (peak_) m = mfu(w, flops_token_, peak_->flops);
  char msg[320];
  int n = std::snprintf(msg, sizeof msg, "mfu over %lld steps after %lld warm-up steps: %.0f tok/s",
                        static_cast<long long>(w.steps), static_cast<long long>(w.warmup),
                        w.tokens_per_s);
  if (m) {
    sum_.mfu = m->mean;
    sum_.mfu_spread = m->spread;
    sum_.peak_flops = m->peak_flops;
    n += std::snprintf(
        msg + n, sizeof msg - n, ", MFU %.1f%% +- %.1f%% (min %.1f%%, max %.1f%%) of %.0f TFLOP/s",
        100 * m->mean, 100 * m->spread, 100 * m->min, 100 * m->max, m->peak_flops / 1e12);
  }
  if (measured)
    std::snprintf(msg + n, sizeof msg - n, ", %.1f%% of the measured matmul rate",
                  100 * measured->mean);
  ctx.info(msg);
}

void RunLogs::log_fsdp_memory(const RunContext& ctx, const RunState& state) {
  if (!ctx.sharded || sum_.unsharded_state_bytes != 0) return;
  const Fsdp& fsdp = *state.fsdp();
  sum_.rank_state_bytes = static_cast<int64_t>(
      ctx.comm.max(static_cast<double>(fsdp.resident_bytes() + state.optimizer().state_bytes())));
  sum_.unsharded_state_bytes = state.parameter_count() * 16;  // fp32 weight, grad, 2 moments
  char msg[200];
  std::snprintf(
      msg, sizeof msg,
      "fsdp: at most %.3f MB of parameters, gradients and optimizer state per rank = "
      "%.4f of one unsharded process (%.3f MB); 1/%lld = %.4f",
      static_cast<double>(sum_.rank_state_bytes) / 1e6,
      static_cast<double>(sum_.rank_state_bytes) / static_cast<double>(sum_.unsharded_state_bytes),
      static_cast<double>(sum_.unsharded_state_bytes) / 1e6,
      static_cast<long long>(fsdp.shard_world()), 1.0 / static_cast<double>(fsdp.shard_world()));
  ctx.info(msg);
}

void RunLogs::note_tasks(const EvalReport& e) {
  for (const auto& [name, t] : e.tasks) final_tasks_[name] = t;
}

// Validation loss and task accuracies after `step` (0: the initial weights), into the log and
// the metrics line.
void RunLogs::record_evaluation(const RunContext& ctx, int64_t step, const EvalReport& e,
                                nlohmann::json& line) {
  note_tasks(e);
  for (const auto& [name, t] : e.tasks) {
    line["task_" + name + "_acc"] = t.acc;
    line["task_" + name + "_acc_norm"] = t.acc_norm;
    ctx.info("task " + name + " step " + std::to_string(step) + ": acc " + std::to_string(t.acc) +
             ", acc_norm " + std::to_string(t.acc_norm));
  }
  if (e.val_loss >= 0) {
    line["val_loss"] = e.val_loss;
    line["val_ppl"] = e.perplexity;
    if (e.bits_per_byte >= 0) line["val_bits_per_byte"] = e.bits_per_byte;
    ctx.info("eval step " + std::to_string(step) + ": val loss " + std::to_string(e.val_loss) +
             ", perplexity " + std::to_string(e.perplexity) + " (" + std::to_string(e.tokens) +
             " tokens)");
  }
}

void RunLogs::describe_run(const RunContext& ctx, int64_t micro_steps,
                           const std::string& fsdp_dtypes) {
  const RunConfig& cfg = ctx.cfg;
  const ParamCounts counts = count_parameters(cfg.model);
  flops_token_ = flops_per_token(cfg.model, cfg.data.seq_len);
  tokens_per_step_ = static_cast<double>(cfg.train.global_batch * cfg.data.seq_len);
  const std::string attn_backend =
      attention_backend(attention_options(cfg.model, ctx.device), cfg.train.micro_batch,
                        cfg.data.seq_len, ctx.bf16 ? torch::kBFloat16 : torch::kFloat);
  matmul_flops_ = ctx.device.is_cuda() ? measure_matmul_flops(ctx.device) : 0.0;
  sum_.run_dir = ctx.o.run_dir;
  sum_.scheme = std::string(enum_name(cfg.model.scheme));
  sum_.steps_planned = cfg.train.steps;
  sum_.parameters = counts.total;
  sum_.attention_backend = attn_backend;
  sum_.precision = ctx.precision.name;
  if (const auto& t = ctx.precision.timing) {
    sum_.precision_fp32_seconds = t->fp32_seconds;
    sum_.precision_bf16_seconds = t->bf16_seconds;
    sum_.precision_rows = t->rows;
    sum_.precision_source = t->source;
  }
  ctx.info("model " + sum_.scheme + ": " + std::to_string(counts.total) + " parameters on " +
           ctx.device.str() +
           (ctx.bf16   ? " (bf16 autocast)"
            : ctx.fp64 ? " (fp64)"
                       : " (fp32)") +
           "; " + std::to_string(cfg.train.steps) + " steps of " +
           std::to_string(cfg.train.global_batch) + " x " + std::to_string(cfg.data.seq_len) +
           " tokens (" + std::to_string(micro_steps) + " micro-steps" +
           (ctx.sharded ? " on each of " + std::to_string(ctx.world) + " ranks, FSDP over " +
                              ctx.comm.backend() + fsdp_dtypes
                        : "") +
           "); run folder " + ctx.o.run_dir);
  ctx.info("precision: " + ctx.precision.reason);
  if (!ctx.precision.warning.empty() && ctx.log && ctx.lead) ctx.log->warn(ctx.precision.warning);
}

void RunLogs::describe_kernels(const RunContext& ctx) {
  char msg[200];
  std::snprintf(msg, sizeof msg,
                "attention: SDPA backend %s; %.3g FLOP per token (6N + causal attention)",
                sum_.attention_backend.c_str(), flops_token_);
  ctx.info(msg);
  if (!ctx.device.is_cuda()) {
    ctx.info("CPU: " + ctx.cpu.describe());
    return;
  }
  gpu_name_ = cuda_devices().at(static_cast<size_t>(std::max<int>(ctx.device.index(), 0))).name;
  peak_ = mfu_peak(gpu_name_, ctx.cfg.logging.peak_tflops * 1e12);
  if (peak_)
    std::snprintf(msg, sizeof msg,
                  "matmul: %.1f TFLOP/s measured (bf16 8192^3); MFU over %.0f TFLOP/s (%s, %s) "
                  "and over this",
                  matmul_flops_ / 1e12, peak_->flops / 1e12, gpu_name_.c_str(),
                  peak_->model == "given" ? "logging.peak_tflops" : peak_->model.c_str());
  else
    std::snprintf(msg, sizeof msg,
                  "matmul: %.1f TFLOP/s measured (bf16 8192^3); %s has no peak in the table: "
                  "MFU over this only (logging.peak_tflops sets one)",
                  matmul_flops_ / 1e12, gpu_name_.c_str());
  ctx.info(msg);
}

RunSummary RunLogs::finish(const RunContext& ctx, RunStatus status, const RunState& state) {
  const TrainState st = state.progress();
  sum_.status = status;
  sum_.steps = st.step;
  sum_.final_train_loss = st.last_loss;
  sum_.final_val_loss = st.last_val_loss;
  sum_.val_perplexity = st.last_val_loss >= 0 ? std::exp(st.last_val_loss) : -1.0;
  sum_.spikes = st.spikes;
  sum_.max_grad_norm = st.max_grad_norm;
  sum_.skipped_steps = st.skipped_steps;
  sum_.tokens = st.tokens;
  sum_.wall_seconds = st.wall_seconds;
  sum_.peak_memory_bytes = device_memory_bytes(ctx.device, /*peak=*/true);
  sum_.tasks = final_tasks_;
  if (ctx.device.is_cuda()) log_mfu(ctx);
  if (ctx.sharded) sum_.world_size = ctx.world;
  if (ctx.lead) run_summary_write(ctx.o.run_dir, sum_);
  return sum_;
}

}  // namespace normlab
