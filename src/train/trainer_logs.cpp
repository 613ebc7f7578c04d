// The trainer's outputs besides checkpoints: metrics.jsonl (one line per step), diagnostics.jsonl,
// the TensorBoard events, and the log's progress, evaluation and FSDP memory lines. Only rank 0
// writes the run folder's files.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "normlab/eval/diagnostics.h"
#include "normlab/util/device.h"
#include "train/trainer_impl.h"

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
void Trainer::Impl::open_logs() {
  metrics_path = (fs::path(o.run_dir) / "metrics.jsonl").string();
  if (lead) {
    keep_lines_up_to(metrics_path, st.step);
    metrics.open(metrics_path, std::ios::app);
    // The events of steps after the resume point go, as the metrics lines do, also when a
    // resumed run turns TensorBoard off.
    const std::string tb = (fs::path(o.run_dir) / "tensorboard").string();
    if (cfg.logging.tensorboard) {
      events = std::make_unique<EventWriter>(tb, st.step);
      info("tensorboard: " + events->path());
    } else if (fs::exists(tb)) {
      events_keep_up_to(tb, st.step);
    }
  }
  if (cfg.diagnostics.every > 0) {
    const std::string path = (fs::path(o.run_dir) / "diagnostics.jsonl").string();
    keep_lines_up_to(path, st.step);
    diagnostics.open(path, std::ios::app);
    diag_batch = {diag_batch.inputs.to(device), diag_batch.targets.to(device)};
  }
}

void Trainer::Impl::write_metrics(const nlohmann::json& line) {
  if (!lead) return;
  metrics << line.dump() << "\n" << std::flush;
  write_events(line.value("step", int64_t{0}), metrics_scalars(line));
  if (!metrics && !metrics_failed) {  // the run goes on; the next checkpoint save decides
    metrics_failed = true;
    if (log)
      log->error(metrics_path + ": write failed (disk full?): later steps are missing from it");
  }
}

void Trainer::Impl::write_diagnostics(const DiagnosticsReport& d) {
  diagnostics << diagnostics_json(d) << "\n" << std::flush;
  write_events(d.step, diagnostics_scalars(d));
}

void Trainer::Impl::write_events(int64_t step, const std::vector<Scalar>& scalars) {
  if (!events || events->scalars(step, scalars) || events_failed) return;
  events_failed = true;  // as for metrics.jsonl: the run goes on
  if (log)
    log->error(events->path() + ": write failed (disk full?): later steps may be missing from it");
}

void Trainer::Impl::log_progress(const StepMetrics& m) {
  window_seconds += m.seconds;
  ++window_steps;
  if (m.step % cfg.logging.every != 0 && m.step != 1 && m.step != cfg.train.steps) return;
  const double tps = tokens_per_step * static_cast<double>(window_steps) / window_seconds;
  char msg[256];
  int n = std::snprintf(msg, sizeof msg,
                        "step %lld/%lld | loss %.4f | lr %.2e | gnorm %.3f | %.0f tok/s",
                        static_cast<long long>(m.step), static_cast<long long>(cfg.train.steps),
                        m.loss, m.lr, m.grad_norm, tps);
  if (device.is_cuda() && peak)
    n += std::snprintf(msg + n, sizeof msg - n, " | mfu %.1f%% (%.1f%% of measured)",
                       100.0 * tps * flops_token / peak->flops,
                       100.0 * tps * flops_token / matmul_flops);
  else if (device.is_cuda())
    n += std::snprintf(msg + n, sizeof msg - n, " | mfu %.1f%% of measured",
                       100.0 * tps * flops_token / matmul_flops);
  std::snprintf(msg + n, sizeof msg - n, " | mem %.2f GiB | eta %s",
                device_memory_bytes(device) / (1 << 30),
                duration(window_seconds / static_cast<double>(window_steps) *
                         static_cast<double>(cfg.train.steps - m.step))
                    .c_str());
  info(msg);
  window_seconds = 0.0;
  window_steps = 0;
}

// CUDA, at the end: the MFU of the steady state, this invocation's steps after the first
// logging.mfu_warmup (eval/mfu.h), into summary.json and the log.
void Trainer::Impl::log_mfu() {
  sum.gpu = gpu_name;
  sum.matmul_flops = matmul_flops;
  const SteadyState w = steady_state(step_secs, tokens_per_step, cfg.logging.mfu_warmup);
  if (w.steps == 0) {
    info("mfu: no step after the " + std::to_string(w.warmup) +
         " warm-up steps (logging.mfu_warmup): not measured");
    return;
  }
  sum.mfu_steps = w.steps;
  const std::optional<Mfu> measured = mfu(w, flops_token, matmul_flops);
  if (measured) sum.mfu_measured = measured->mean;
  std::optional<Mfu> m;
  if (peak) m = mfu(w, flops_token, peak->flops);
  char msg[320];
  int n = std::snprintf(msg, sizeof msg, "mfu over %lld steps after %lld warm-up steps: %.0f tok/s",
                        static_cast<long long>(w.steps), static_cast<long long>(w.warmup),
                        w.tokens_per_s);
  if (m) {
    sum.mfu = m->mean;
    sum.mfu_spread = m->spread;
    sum.peak_flops = m->peak_flops;
    n += std::snprintf(
        msg + n, sizeof msg - n, ", MFU %.1f%% +- %.1f%% (min %.1f%%, max %.1f%%) of %.0f TFLOP/s",
        100 * m->mean, 100 * m->spread, 100 * m->min, 100 * m->max, m->peak_flops / 1e12);
  }
  if (measured)
    std::snprintf(msg + n, sizeof msg - n, ", %.1f%% of the measured matmul rate",
                  100 * measured->mean);
  info(msg);
}

// Under FSDP, once at rest after the first step: the state each rank holds, measured.
void Trainer::Impl::log_fsdp_memory() {
  if (!sharded || sum.unsharded_state_bytes != 0) return;
  sum.rank_state_bytes = static_cast<int64_t>(
      comm.max(static_cast<double>(fsdp->resident_bytes() + opt->state_bytes())));
  sum.unsharded_state_bytes = n_params * 16;  // fp32 parameter, gradient, two moments
  char msg[200];
  std::snprintf(
      msg, sizeof msg,
      "fsdp: at most %.3f MB of parameters, gradients and optimizer state per rank = "
      "%.4f of one unsharded process (%.3f MB); 1/%lld = %.4f",
      static_cast<double>(sum.rank_state_bytes) / 1e6,
      static_cast<double>(sum.rank_state_bytes) / static_cast<double>(sum.unsharded_state_bytes),
      static_cast<double>(sum.unsharded_state_bytes) / 1e6,
      static_cast<long long>(fsdp->shard_world()), 1.0 / static_cast<double>(fsdp->shard_world()));
  info(msg);
}

// Validation loss and task accuracies after `step` (0: the initial weights), into the log and
// the metrics line.
void Trainer::Impl::add_evaluation(int64_t step, nlohmann::json& line) {
  const EvalReport e = evaluate();
  for (const auto& [name, t] : e.tasks) {
    line["task_" + name + "_acc"] = t.acc;
    line["task_" + name + "_acc_norm"] = t.acc_norm;
    info("task " + name + " step " + std::to_string(step) + ": acc " + std::to_string(t.acc) +
         ", acc_norm " + std::to_string(t.acc_norm));
  }
  if (e.val_loss >= 0) {
    line["val_loss"] = e.val_loss;
    line["val_ppl"] = e.perplexity;
    if (e.bits_per_byte >= 0) line["val_bits_per_byte"] = e.bits_per_byte;
    info("eval step " + std::to_string(step) + ": val loss " + std::to_string(e.val_loss) +
         ", perplexity " + std::to_string(e.perplexity) + " (" + std::to_string(e.tokens) +
         " tokens)");
  }
}

}  // namespace normlab
