// The training loop: Trainer::Impl's step(), evaluate(), diagnose(), finish() and run(), and
// the public Trainer over them. Construction is in trainer_setup.cpp, checkpoints in
// trainer_resume.cpp, the logs in trainer_logs.cpp (train/trainer_impl.h).
#include "normlab/train/trainer.h"

#include <torch/torch.h>

#include <cmath>

#include "normlab/eval/diagnostics.h"
#include "normlab/eval/evaluate.h"
#include "normlab/nn/autocast.h"
#include "normlab/train/schedule.h"
#include "normlab/util/device.h"
#include "train/trainer_impl.h"

namespace normlab {
namespace {

nlohmann::json finite_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

// One rank's evaluation numbers -> the numbers over all ranks' batches.
EvalResult combine(EvalResult r, Communicator& comm) {
  torch::Tensor t =
      torch::tensor({r.loss * static_cast<double>(r.tokens), static_cast<double>(r.tokens),
                     static_cast<double>(r.bytes), static_cast<double>(r.batches)},
                    torch::kDouble);
  comm.all_reduce(t, ReduceOp::Sum);
  const double total = t[0].item<double>();
  r.tokens = static_cast<int64_t>(t[1].item<double>());
  r.bytes = static_cast<int64_t>(t[2].item<double>());
  r.batches = static_cast<int64_t>(t[3].item<double>());
  r.loss = r.tokens > 0 ? total / static_cast<double>(r.tokens) : 0.0;
  r.perplexity = std::exp(r.loss);
  if (r.bytes > 0) {
    r.byte_perplexity = std::exp(total / static_cast<double>(r.bytes));
    r.bits_per_byte = total / (static_cast<double>(r.bytes) * std::log(2.0));
  }
  return r;
}

}  // namespace

// The step's MoE routing, from the router log's passes (one per micro-batch): m's aux losses
// (unweighted, the mean over micro-batches of each one's mean over layers, averaged over ranks),
// the router entropy, and from the assignments per (layer, expert) over the global batch the
// largest share of one layer's assignments and the idle (layer, expert) pairs.
void Trainer::Impl::log_routing(const std::vector<std::vector<RouterStats>>& passes, double scale,
                                StepMetrics& m_out) {
  if (passes.empty()) return;
  torch::Tensor aux_sum = torch::zeros({3}, torch::kDouble);  // lb, router z, entropy
  torch::Tensor routed;                                       // (layers, E)
  for (const auto& pass : passes) {
    const RouterStats mean = mean_over_layers(pass);
    aux_sum.add_(torch::stack({mean.lb, mean.z, mean.entropy.to(mean.lb.scalar_type())})
                     .to(torch::kCPU, torch::kDouble),
                 scale);
    const torch::Tensor c = mean.counts.to(torch::kCPU, torch::kDouble);
    routed = routed.defined() ? routed + c : c;
  }
  torch::Tensor aux = torch::cat({aux_sum, routed.reshape({-1})});
  if (sharded) {
    comm.all_reduce(aux, ReduceOp::Sum);
    aux.narrow(0, 0, 3).div_(static_cast<double>(world));
  }
  m_out.moe_lb = aux[0].item<double>();
  m_out.moe_router_z = aux[1].item<double>();
  m_out.moe_router_entropy = aux[2].item<double>();
  const torch::Tensor r = aux.narrow(0, 3, routed.numel()).view(routed.sizes());
  m_out.moe_idle_experts = (r == 0).sum().item<int64_t>();
  m_out.moe_max_expert_share = (r / r.sum(1, /*keepdim=*/true)).max().item<double>();
}

// The micro-batches of step s, gradients accumulated with weight 1/micro-steps (the MoE layers'
// aux-loss gradients too: the model's MoE loss scale); returns the mean cross-entropy over the
// global batch (over every rank), and sets m's MoE routing numbers from the step's router log.
double Trainer::Impl::accumulate(int64_t s, StepMetrics& m_out) {
  torch::Tensor loss_sum =
      torch::zeros({}, torch::TensorOptions().device(device).dtype(torch::kDouble));
  const double scale = 1.0 / static_cast<double>(loader->micro_steps());
  model->set_moe_loss_scale(scale);
  model->router_log->begin_step();  // whatever evaluation or diagnostics routed is dropped
  note_data_epochs(s);
  for (int64_t m = 0; m < loader->micro_steps(); ++m) {
    const Batch b = loader->batch(s, m);
    LossOutput out;
    {
      AutocastGuard autocast(device.type(), bf16);
      out = model->loss(b.inputs.to(device, /*non_blocking=*/true),
                        b.targets.to(device, /*non_blocking=*/true), cfg.train.z_loss, nullptr,
                        cfg.train.loss_chunk_rows);
    }
    // distributed.reduce per_step: the gradient is reduced over ranks in the last micro-step.
    if (fsdp)
      fsdp->set_gradient_sync(cfg.distributed.reduce == GradientReduce::PerMicroStep ||
                              m + 1 == loader->micro_steps());
    (out.loss * scale).backward();
    if (fsdp) fsdp->finish_backward();
    loss_sum.add_(out.ce.detach().to(torch::kDouble), scale);
  }
  log_routing(model->router_log->take_step(), scale, m_out);
  return sharded ? comm.sum(loss_sum.item<double>()) / static_cast<double>(world)
                 : loss_sum.item<double>();
}

StepMetrics Trainer::Impl::step() {
  const auto t0 = Clock::now();
  const int64_t s = st.step;
  StepMetrics m;
  m.step = s + 1;
  m.lr = lr_at(cfg.scheduler, cfg.optimizer.lr, s, cfg.train.steps);
  model->zero_grad(/*set_to_none=*/true);
  if (fsdp) fsdp->zero_grad();
  m.loss = accumulate(s, m);
  m.grad_norm = fsdp ? fsdp->clip_grad_norm(cfg.optimizer.grad_clip)
                     : clip_grad_norm(params, cfg.optimizer.grad_clip);
  m.finite = std::isfinite(m.loss) && std::isfinite(m.grad_norm);
  if (!m.finite && !cfg.train.skip_nonfinite) {  // diverged: the caller ends the run
    m.seconds = seconds_since(t0);
    st.wall_seconds += m.seconds;
    return m;
  }
  if (m.finite) {
    opt->step(m.lr);
    st.max_grad_norm = std::max(st.max_grad_norm, m.grad_norm);
    st.last_loss = m.loss;
    m.spike = spikes.observe(m.loss);
  } else {
    ++st.skipped_steps;
    m.skipped = true;
  }
  st.tokens += static_cast<uint64_t>(tokens_per_step);
  st.step = m.step;
  if (device.is_cuda()) torch::cuda::synchronize(device.index());  // the step's kernels are done
  m.seconds = seconds_since(t0);
  if (fsdp) m.comm_wait_seconds = fsdp->take_wait_seconds();
  st.wall_seconds += m.seconds;
  return m;
}

EvalReport Trainer::Impl::evaluate() {
  EvalReport rep;
  for (const auto& [name, items] : tasks) {
    const McResult r = evaluate_mc(*model, *tokenizer, items, cfg.train.micro_batch, device);
    rep.tasks[name] = final_tasks[name] = {r.acc, r.acc_norm, r.items};
  }
  if (!val) return rep;
  // eval.batches counts batches over all ranks.
  const int64_t batches = cfg.eval.batches > 0 ? std::max<int64_t>(cfg.eval.batches / world, 1) : 0;
  EvalResult r =
      normlab::evaluate(*model, *val, batches, device, bf16, tokenizer ? &token_bytes : nullptr);
  if (sharded) r = combine(r, comm);
  st.last_val_loss = r.loss;
  rep.val_loss = r.loss;
  rep.perplexity = r.perplexity;
  rep.tokens = r.tokens;
  if (r.bytes > 0) rep.bits_per_byte = r.bits_per_byte;
  return rep;
}

void Trainer::Impl::diagnose(int64_t completed, nlohmann::json& line) {
  const auto t0 = Clock::now();
  model->hooks =
      nullptr;  // the diagnostics take gradients with autograd::grad: no activation checkpointing
  DiagnosticsOptions options;
  options.top_k = cfg.diagnostics.top_k;
  options.pruning = cfg.diagnostics.pruning;
  DiagnosticsReport d = run_diagnostics(*model, diag_batch.inputs, diag_batch.targets, options);
  if (activation_checkpointing_every > 0) model->hooks = activation_checkpointed_blocks.get();
  d.step = completed;
  write_diagnostics(d);
  const double secs = seconds_since(t0);
  line["diagnostics_seconds"] = secs;
  st.wall_seconds += secs;
}

RunSummary Trainer::Impl::finish(RunStatus status) {
  sum.status = status;
  sum.steps = st.step;
  sum.final_train_loss = st.last_loss;
  sum.final_val_loss = st.last_val_loss;
  sum.val_perplexity = st.last_val_loss >= 0 ? std::exp(st.last_val_loss) : -1.0;
  sum.spikes = spikes.spikes();
  sum.max_grad_norm = st.max_grad_norm;
  sum.skipped_steps = st.skipped_steps;
  sum.tokens = st.tokens;
  sum.wall_seconds = st.wall_seconds;
  sum.peak_memory_bytes = device_memory_bytes(device, /*peak=*/true);
  sum.tasks = final_tasks;
  if (device.is_cuda()) log_mfu();
  if (sharded) sum.world_size = world;
  if (lead) run_summary_write(o.run_dir, sum);
  return sum;
}

RunSummary Trainer::Impl::run() {
  model->train();
  const int64_t first_step = st.step;
  if (cfg.eval.at_start && st.step == 0) {
    nlohmann::json line = {{"step", 0}};
    add_evaluation(0, line);
    write_metrics(line);
  }
  while (st.step < cfg.train.steps) {
    const StepMetrics m = step();
    nlohmann::json line = {{"step", m.step},
                           {"lr", m.lr},
                           {"loss", finite_or_null(m.loss)},
                           {"grad_norm", finite_or_null(m.grad_norm)}};
    if (!model->moe.empty()) {  // MoE: the aux losses, unweighted, beside the cross-entropy
      line["moe_lb_loss"] = finite_or_null(m.moe_lb);
      line["moe_router_z_loss"] = finite_or_null(m.moe_router_z);
      line["moe_router_entropy"] = finite_or_null(m.moe_router_entropy);
      line["moe_max_expert_share"] = m.moe_max_expert_share;
      line["moe_idle_experts"] = m.moe_idle_experts;
    }
    if (!m.finite && !m.skipped) {
      line["diverged"] = true;
      write_metrics(line);
      sum.diverged_at = m.step;
      if (log)
        log->error("diverged at step " + std::to_string(m.step) + ": loss " +
                   std::to_string(m.loss) + ", gradient norm " + std::to_string(m.grad_norm));
      return finish(RunStatus::Diverged);
    }
    if (m.skipped) {
      line["skipped"] = true;
      if (log)
        log->warn("step " + std::to_string(m.step) + ": non-finite loss or gradient, step skipped");
    } else {
      line["spike"] = m.spike;
    }
    line["tokens"] = st.tokens;
    line["tokens_per_s"] = tokens_per_step / m.seconds;
    line["step_seconds"] = m.seconds;
    if (m.comm_wait_seconds >= 0) line["comm_wait_seconds"] = m.comm_wait_seconds;
    step_secs.push_back(m.seconds);
    log_progress(m);
    const bool last = m.step == cfg.train.steps;
    if (last || (cfg.eval.every > 0 && m.step % cfg.eval.every == 0)) add_evaluation(m.step, line);
    if (cfg.diagnostics.every > 0 && (m.step % cfg.diagnostics.every == 0 || last))
      diagnose(m.step, line);
    write_metrics(line);
    log_fsdp_memory();
    if (o.after_step) o.after_step(m.step);
    // Any rank's signal stops every rank after this same step.
    bool stop_flag = o.stop && o.stop->load();
    if (sharded) stop_flag = comm.max(stop_flag ? 1.0 : 0.0) > 0.0;
    const bool stop = stop_flag || (o.stop_after > 0 && m.step - first_step >= o.stop_after);
    if ((last && cfg.checkpoint.at_end) || (stop && !last) ||
        (cfg.checkpoint.every > 0 && m.step % cfg.checkpoint.every == 0))
      info("checkpoint " + save());
    if (stop && !last) {
      info("stopped at step " + std::to_string(m.step) + "; continue with --resume");
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
int64_t Trainer::steps_done() const { return impl_->st.step; }

RunSummary train(const RunConfig& cfg, const TrainOptions& options) {
  return Trainer(cfg, options).run();
}

}  // namespace normlab
