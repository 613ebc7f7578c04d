// The trainer: Trainer::Impl builds the run from its parts and runs the loop over them.
//   RunContext      the config, options, ranks, device and precision (trainer_context.h)
//   RunCheckpoints  the run folder's lock, config.yaml and checkpoints (trainer_checkpoints.h)
//   TrainData       the loaders, the diagnostics batch, the tokenizer, the tasks (trainer_data.h)
//   RunState        model, FSDP, optimizer, counters: steps, evaluation (trainer_state.h)
//   RunLogs         metrics.jsonl, diagnostics.jsonl, TensorBoard, the log, summary.json
//                   (trainer_logs.h)
// Each part owns its fields behind its methods; the loop below only calls them.
#include "normlab/train/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>

#include "normlab/util/library_error.h"

#include "train/trainer_checkpoints.h"
#include "train/trainer_context.h"
#include "train/trainer_data.h"
#include "train/trainer_logs.h"
#include "train/trainer_state.h"

namespace normlab {
namespace {

nlohmann::json finite_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

// A step's line of metrics.jsonl, before its evaluation and diagnostics.
nlohmann::json step_line(const StepMetrics& m, bool moe) {
  nlohmann::json line = {{"step", m.step},
                         {"lr", m.lr},
                         {"loss", finite_or_null(m.loss)},
                         {"grad_norm", finite_or_null(m.grad_norm)}};
  if (moe) {  // MoE: the aux losses, unweighted, beside the cross-entropy
    line["moe_lb_loss"] = finite_or_null(m.moe_lb);
    line["moe_router_z_loss"] = finite_or_null(m.moe_router_z);
    line["moe_router_entropy"] = finite_or_null(m.moe_router_entropy);
    line["moe_max_expert_share"] = m.moe_max_expert_share;
    line["moe_idle_experts"] = m.moe_idle_experts;
  }
  return line;
}

}  // namespace

// Construction in the order the run needs: checks and the device (context), the run folder
// (after the checks: a refused run leaves no folder behind), the data, the model from its seed,
// the resumed state, config.yaml, the logs, and the run's description.
struct Trainer::Impl {
  Impl(const RunConfig& config, const TrainOptions& options)
      : ctx(config, options), checkpoints(ctx), data(ctx), state(ctx, checkpoints.resuming()) {
    if (checkpoints.resuming()) checkpoints.resume(ctx, state);
    checkpoints.write_config(ctx);
    logs.open(ctx, state.steps_done());  // keeps the lines of the steps before the resume point
    logs.describe_run(ctx, data.loader().micro_steps(), state.fsdp_dtypes());
    data.describe(ctx);
    logs.describe_kernels(ctx);
  }

  // A LibTorch error names what was running (util/library_error.h): the step or the evaluation.
  EvalReport evaluate_in_context() {
    try {
      return state.evaluate(ctx, data);
    } catch (...) {
      rethrow_with_context("evaluation after step " + std::to_string(state.steps_done()));
    }
  }
  EvalReport evaluate() {
    const EvalReport e = evaluate_in_context();
    logs.note_tasks(e);
    return e;
  }
  void add_evaluation(int64_t step, nlohmann::json& line) {
    logs.record_evaluation(ctx, step, evaluate_in_context(), line);
  }
  void diagnose(nlohmann::json& line) {
    const auto t0 = std::chrono::steady_clock::now();
    logs.write_diagnostics(ctx, state.diagnose(ctx, data.diag_batch()));
    const double secs = seconds_since(t0);
    line["diagnostics_seconds"] = secs;
    state.add_wall_seconds(secs);
  }
  StepMetrics step() {
    try {
      return state.step(ctx, data);
    } catch (...) {
      rethrow_with_context("training step " + std::to_string(state.steps_done() + 1));
    }
  }
  std::string save() { return checkpoints.save(ctx, state); }
  RunSummary finish(RunStatus status) { return logs.finish(ctx, status, state); }
  RunSummary run();

  RunContext ctx;
  RunCheckpoints checkpoints;
  TrainData data;
  RunState state;
  RunLogs logs;
};

RunSummary Trainer::Impl::run() {
  const RunConfig& cfg = ctx.cfg;
  const TrainOptions& o = ctx.o;
  state.model()->train();
  const int64_t first_step = state.steps_done();
  if (cfg.eval.at_start && state.steps_done() == 0) {
    nlohmann::json line = {{"step", 0}};
    add_evaluation(0, line);
    logs.write_metrics(ctx, line);
  }
  while (state.steps_done() < cfg.train.steps) {
    const StepMetrics m = step();
    nlohmann::json line = step_line(m, !state.model()->moe.empty());
    if (!m.finite && !m.skipped) {
      line["diverged"] = true;
      logs.write_metrics(ctx, line);
      logs.note_divergence(m.step);
      if (ctx.log)
        ctx.log->error("diverged at step " + std::to_string(m.step) + ": loss " +
                       std::to_string(m.loss) + ", gradient norm " + std::to_string(m.grad_norm));
      return finish(RunStatus::Diverged);
    }
    if (m.skipped) {
      line["skipped"] = true;
      if (ctx.log)
        ctx.log->warn("step " + std::to_string(m.step) +
                      ": non-finite loss or gradient, step skipped");
    } else {
      line["spike"] = m.spike;
    }
    line["tokens"] = state.tokens_seen();
    line["tokens_per_s"] = logs.tokens_per_step() / m.seconds;
    line["step_seconds"] = m.seconds;
    if (m.comm_wait_seconds >= 0) line["comm_wait_seconds"] = m.comm_wait_seconds;
    logs.log_step(ctx, m);
    const bool last = m.step == cfg.train.steps;
    if (last || (cfg.eval.every > 0 && m.step % cfg.eval.every == 0)) add_evaluation(m.step, line);
    if (cfg.diagnostics.every > 0 && (m.step % cfg.diagnostics.every == 0 || last)) diagnose(line);
    logs.write_metrics(ctx, line);
    logs.log_fsdp_memory(ctx, state);
    if (o.after_step) o.after_step(m.step);
    // Any rank's signal stops every rank after this same step.
    bool stop_flag = o.stop && o.stop->load();
    if (ctx.sharded) stop_flag = ctx.comm.max(stop_flag ? 1.0 : 0.0) > 0.0;
    const bool stop = stop_flag || (o.stop_after > 0 && m.step - first_step >= o.stop_after);
    if ((last && cfg.checkpoint.at_end) || (stop && !last) ||
        (cfg.checkpoint.every > 0 && m.step % cfg.checkpoint.every == 0))
      ctx.info("checkpoint " + save());
    if (stop && !last) {
      ctx.info("stopped at step " + std::to_string(m.step) + "; continue with --resume");
      return finish(RunStatus::Interrupted);
    }
  }
  return finish(RunStatus::Completed);
}

Trainer::Trainer(const RunConfig& cfg, const TrainOptions& options)
    : impl_(std::make_unique<Impl>(cfg, options)) {}
Trainer::~Trainer() = default;
RunSummary Trainer::run() { return impl_->run(); }
StepMetrics Trainer::step() { return impl_->step(); }
EvalReport Trainer::evaluate() { return impl_->evaluate(); }
std::string Trainer::save() { return impl_->save(); }
RunSummary Trainer::finish(RunStatus status) { return impl_->finish(status); }
int64_t Trainer::steps_done() const { return impl_->state.steps_done(); }

RunSummary train(const RunConfig& cfg, const TrainOptions& options) {
  return Trainer(cfg, options).run();
}

}  // namespace normlab
