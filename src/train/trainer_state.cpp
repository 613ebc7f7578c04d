// RunState: building the model, FSDP and the optimizer (before any resume), the optimizer
// step with gradient accumulation and the MoE routing numbers, evaluation, the diagnostics and
// restoring weights and optimizer state from a checkpoint.
#include "train/trainer_state.h"

#include "normlab/util/library_error.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <utility>

#include "normlab/config/config_io.h"
#include "normlab/distributed/agreement.h"
#include "normlab/eval/evaluate.h"
#include "normlab/nn/autocast.h"
#include "normlab/nn/experts.h"
#include "normlab/nn/parameter_roles.h"
#include "normlab/nn/weights.h"
#include "normlab/train/schedule.h"
#include "normlab/util/library_error.h"
#include "normlab/util/safetensors.h"

namespace normlab {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

const char* short_name(torch::ScalarType t) {
  return t == torch::kBFloat16 ? "bf16" : t == torch::kDouble ? "fp64" : "fp32";
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

// The step's MoE routing, from the router log's passes (one per micro-batch): m's aux losses
// (unweighted, the mean over micro-batches of each one's mean over layers, averaged over ranks),
// the router entropy, and from the assignments per (layer, expert) over the global batch the
// largest share of one layer's assignments and the idle (layer, expert) pairs.
void log_routing(const RunContext& ctx, const std::vector<std::vector<RouterStats>>& passes,
                 double scale, StepMetrics& m_out) {
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
  if (ctx.sharded) {
    ctx.comm.all_reduce(aux, ReduceOp::Sum);
    aux.narrow(0, 0, 3).div_(static_cast<double>(ctx.world));
  }
  m_out.moe_lb = aux[0].item<double>();
  m_out.moe_router_z = aux[1].item<double>();
  m_out.moe_router_entropy = aux[2].item<double>();
  const torch::Tensor r = aux.narrow(0, 3, routed.numel()).view(routed.sizes());
  m_out.moe_idle_experts = (r == 0).sum().item<int64_t>();
  m_out.moe_max_expert_share = (r / r.sum(1, /*keepdim=*/true)).max().item<double>();
}

}  // namespace

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

RunState::RunState(const RunContext& ctx, bool resuming)
    : spikes_(ctx.cfg.train.spike_window, ctx.cfg.train.spike_sigma),
      tokens_per_step_(static_cast<uint64_t>(ctx.cfg.train.global_batch * ctx.cfg.data.seq_len)) {
  const RunConfig& cfg = ctx.cfg;
  st_.precision = ctx.precision.name;  // recorded in every checkpoint (RunContext reads it back)
  torch::manual_seed(cfg.train.seed);  // the same initial weights on every rank
  model_ = DecoderLM(cfg.model, ctx.device);
  if (ctx.fp64) model_->to(torch::kDouble);
  if (!ctx.o.init_from.empty() && !resuming) {  // a checkpoint, if any, wins
    const std::string file = fs::is_directory(ctx.o.init_from)
                                 ? (fs::path(ctx.o.init_from) / "model.safetensors").string()
                                 : ctx.o.init_from;
    load_weights(*model_, read_weight_file(file), file);
    ctx.info("initial weights from " + file);
  }
  for (const auto& p : model_->parameters()) {
    params_.push_back(p);
    n_params_ += p.numel();
  }
  if (ctx.world > 1) {  // before FSDP's first gather: every rank about to run the same thing
    std::vector<std::pair<std::string, torch::Tensor>> weights;
    for (const auto& p : model_->named_parameters()) weights.emplace_back(p.key(), p.value());
    check_ranks_agree(ctx.comm, launch_facts(config_to_yaml(cfg), ctx.comm, ctx.device, weights),
                      ctx.device);
  }
  activation_checkpointing_every_ =
      cfg.train.activation_checkpointing == ActivationCheckpointing::None ? 0
      : cfg.train.activation_checkpointing == ActivationCheckpointing::Block
          ? 1
          : cfg.train.selective_every;
  if (ctx.sharded) {
    build_fsdp(ctx);
    return;
  }
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& p : model_->named_parameters()) named.emplace_back(p.key(), p.value());
  opt_ = std::make_unique<AdamW>(named, cfg.optimizer);
  activation_checkpointed_blocks_ =
      std::make_unique<ActivationCheckpointedBlocks>(activation_checkpointing_every_);
  restore_hooks(ctx);
}

// The layer that sees the blocks' forward: activation checkpointing, else the test-only hooks
// of the options (NORMLAB_FAULT), else none.
void RunState::restore_hooks(const RunContext& ctx) {
  model_->hooks = activation_checkpointing_every_ > 0 ? activation_checkpointed_blocks_.get()
                                                      : ctx.o.forward_hooks;
}

void RunState::build_fsdp(const RunContext& ctx) {
  const RunConfig& cfg = ctx.cfg;
  FsdpOptions fo;
  fo.reshard_after_forward = cfg.distributed.reshard_after_forward;
  fo.activation_checkpointing_every = activation_checkpointing_every_;
  fo.prefetch = cfg.distributed.prefetch;
  fo.overlap_reduce = cfg.distributed.overlap_reduce;
  // auto: the compute dtype (bf16 under autocast) for gathers; reductions follow the gathers.
  const auto dtype_of = [](Precision p, torch::ScalarType automatic) {
    return p == Precision::Auto   ? automatic
           : p == Precision::Bf16 ? torch::kBFloat16
                                  : torch::kFloat;
  };
  fo.param_dtype =
      dtype_of(cfg.distributed.param_dtype, ctx.bf16 ? torch::kBFloat16 : torch::kFloat);
  fo.reduce_dtype = dtype_of(cfg.distributed.reduce_dtype, fo.param_dtype);
  if (ctx.fp64) fo.param_dtype = fo.reduce_dtype = torch::kDouble;
  fo.shard_size = cfg.distributed.shard_size;
  fo.keep_fp32 = parameters_kept_fp32(*model_, cfg.distributed.keep_fp32);
  fsdp_dtypes_ = std::string(", gathers in ") + short_name(fo.param_dtype) + ", reductions in " +
                 short_name(fo.reduce_dtype);
  if (!ctx.fp64 && (fo.param_dtype != torch::kFloat || fo.reduce_dtype != torch::kFloat))
    fsdp_dtypes_ += " (" + std::to_string(fo.keep_fp32.size()) +
                    " parameters kept in fp32: " + cfg.distributed.keep_fp32 + ")";
  fsdp_ = std::make_unique<Fsdp>(model_, ctx.comm, fo, weight_decay_names(*model_, cfg.optimizer));
  if (fsdp_->shard_world() < ctx.world)
    fsdp_dtypes_ += ", hybrid: shard groups of " + std::to_string(fsdp_->shard_world()) +
                    " ranks, " + std::to_string(ctx.world / fsdp_->shard_world()) + " replicas";
  std::vector<OptParam> pieces;
  for (const ShardPiece& p : fsdp_->pieces()) pieces.push_back({p.name, p.param, p.decay});
  opt_ = std::make_unique<AdamW>(pieces, cfg.optimizer);
}

// The micro-batches of step s, gradients accumulated with weight 1/micro-steps (the MoE layers'
// aux-loss gradients too: the model's MoE loss scale); returns the mean cross-entropy over the
// global batch (over every rank), and sets m's MoE routing numbers from the step's router log.
double RunState::accumulate(const RunContext& ctx, TrainData& data, int64_t s, StepMetrics& m_out) {
  const RunConfig& cfg = ctx.cfg;
  const TrainLoader& loader = data.loader();
  torch::Tensor loss_sum =
      torch::zeros({}, torch::TensorOptions().device(ctx.device).dtype(torch::kDouble));
  const double scale = 1.0 / static_cast<double>(loader.micro_steps());
  model_->set_moe_loss_scale(scale);
  model_->router_log->begin_step();  // whatever evaluation or diagnostics routed is dropped
  data.note_epochs(ctx, s);
  for (int64_t m = 0; m < loader.micro_steps(); ++m) {
    const Batch b = loader.batch(s, m);
    LossOutput out;
    {
      AutocastGuard autocast(ctx.device.type(), ctx.bf16);
      out = model_->loss(b.inputs.to(ctx.device, /*non_blocking=*/true),
                         b.targets.to(ctx.device, /*non_blocking=*/true), cfg.train.z_loss, nullptr,
                         cfg.train.loss_chunk_rows);
    }
    // distributed.reduce per_step: the gradient is reduced over ranks in the last micro-step.
    if (fsdp_)
      fsdp_->set_gradient_sync(cfg.distributed.reduce == GradientReduce::PerMicroStep ||
                               m + 1 == loader.micro_steps());
    try {
      (out.loss * scale).backward();
    } catch (...) {
      rethrow_with_context("backward");
    }
    if (fsdp_) fsdp_->finish_backward();
    loss_sum.add_(out.ce.detach().to(torch::kDouble), scale);
  }
  log_routing(ctx, model_->router_log->take_step(), scale, m_out);
  return ctx.sharded ? ctx.comm.sum(loss_sum.item<double>()) / static_cast<double>(ctx.world)
                     : loss_sum.item<double>();
}

StepMetrics RunState::step(const RunContext& ctx, TrainData& data) {
  const RunConfig& cfg = ctx.cfg;
  const auto t0 = Clock::now();
  const int64_t s = st_.step;
  StepMetrics m;
  m.step = s + 1;
  m.lr = lr_at(cfg.scheduler, cfg.optimizer.lr, s, cfg.train.steps);
  model_->zero_grad(/*set_to_none=*/true);
  if (fsdp_) fsdp_->zero_grad();
  m.loss = accumulate(ctx, data, s, m);
  m.grad_norm = fsdp_ ? fsdp_->clip_grad_norm(cfg.optimizer.grad_clip)
                      : clip_grad_norm(params_, cfg.optimizer.grad_clip);
  m.finite = std::isfinite(m.loss) && std::isfinite(m.grad_norm);
  if (!m.finite && !cfg.train.skip_nonfinite) {  // diverged: the caller ends the run
    m.seconds = seconds_since(t0);
    st_.wall_seconds += m.seconds;
    return m;
  }
  if (m.finite) {
    opt_->step(m.lr);
    st_.max_grad_norm = std::max(st_.max_grad_norm, m.grad_norm);
    st_.last_loss = m.loss;
    m.spike = spikes_.observe(m.loss);
  } else {
    ++st_.skipped_steps;
    m.skipped = true;
  }
  st_.tokens += tokens_per_step_;
  st_.step = m.step;
  if (ctx.device.is_cuda()) torch::cuda::synchronize(ctx.device.index());  // kernels done
  m.seconds = seconds_since(t0);
  if (fsdp_) m.comm_wait_seconds = fsdp_->take_wait_seconds();
  st_.wall_seconds += m.seconds;
  return m;
}

EvalReport RunState::evaluate(const RunContext& ctx, const TrainData& data) {
  const RunConfig& cfg = ctx.cfg;
  EvalReport rep;
  for (const auto& [name, items] : data.tasks()) {
    const McResult r =
        evaluate_mc(*model_, *data.tokenizer(), items, cfg.train.micro_batch, ctx.device);
    rep.tasks[name] = {r.acc, r.acc_norm, r.items};
  }
  if (!data.val()) return rep;
  // eval.batches counts batches over all ranks.
  const int64_t batches =
      cfg.eval.batches > 0 ? std::max<int64_t>(cfg.eval.batches / ctx.world, 1) : 0;
  EvalResult r = normlab::evaluate(*model_, *data.val(), batches, ctx.device, ctx.bf16,
                                   data.tokenizer() ? &data.token_bytes() : nullptr);
  if (ctx.sharded) r = combine(r, ctx.comm);
  st_.last_val_loss = r.loss;
  rep.val_loss = r.loss;
  rep.perplexity = r.perplexity;
  rep.tokens = r.tokens;
  if (r.bytes > 0) rep.bits_per_byte = r.bits_per_byte;
  return rep;
}

DiagnosticsReport RunState::diagnose(const RunContext& ctx, const Batch& batch) {
  // The diagnostics take gradients with autograd::grad: no activation checkpointing.
  model_->hooks = nullptr;
  DiagnosticsOptions options;
  options.top_k = ctx.cfg.diagnostics.top_k;
  options.pruning = ctx.cfg.diagnostics.pruning;
  DiagnosticsReport d = run_diagnostics(*model_, batch.inputs, batch.targets, options);
  restore_hooks(ctx);
  d.step = st_.step;
  return d;
}

void RunState::restore(const RunContext& ctx, const Checkpoint& ck) {
  if (!ctx.sharded) {
    load_weights(*model_, ck.model, ck.path);
    opt_->load_state(ck.optimizer);
  } else if (ck.world == 1) {
    fsdp_->load_full(ck.model, ck.path);
    opt_->load_state(fsdp_->slice_state(ck.optimizer));
  } else {
    if (has_legacy_experts(ck.model))
      throw CheckpointError(ck.path +
                            " holds MoE experts one by one (experts.<e>.up.weight, the layout "
                            "before they were stacked) in sharded pieces: join them with "
                            "`normlab checkpoint consolidate --checkpoint " +
                            ck.path +
                            " --out NEW_RUN_DIR`, which stacks them, then resume NEW_RUN_DIR");
    torch::NoGradGuard no_grad;
    for (const ShardPiece& p : fsdp_->pieces()) {
      const auto it = ck.model.find(p.name);
      if (it == ck.model.end() || it->second.numel() != p.param.numel() ||
          ck.starts.at(p.name) != p.start)
        throw CheckpointError(ck.path + ": rank " + std::to_string(ctx.rank) + "'s piece of '" +
                              p.name + "' is missing or has another size");
      p.param.copy_(it->second.reshape(-1));
    }
    opt_->load_state(ck.optimizer);
  }
}

void RunState::restore_progress(const TrainState& st) {
  const std::string precision = st_.precision;  // this segment's (RunContext kept the run's)
  st_ = st;
  st_.precision = precision;
  spikes_.restore(st_.spike_window, st_.spikes);
}

TrainState RunState::progress() const {
  TrainState out = st_;
  out.spike_window = spikes_.window();
  out.spikes = spikes_.spikes();
  return out;
}

}  // namespace normlab
