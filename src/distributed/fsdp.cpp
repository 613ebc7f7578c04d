#include "normlab/distributed/fsdp.h"
#include "normlab/util/error.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <map>

#include "distributed/fsdp_unit.h"
#include "normlab/nn/activation_checkpointing.h"

namespace normlab {

namespace {

// Adds the seconds of its scope to `total`.
class WaitTimer {
 public:
  explicit WaitTimer(double& total) : total_(total), t0_(std::chrono::steady_clock::now()) {}
  ~WaitTimer() {
    total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  WaitTimer(const WaitTimer&) = delete;
  WaitTimer& operator=(const WaitTimer&) = delete;

 private:
  double& total_;
  std::chrono::steady_clock::time_point t0_;
};

// Identity on a block's outputs whose backward gathers the block's parameters before any of
// the block's own backward runs (its nodes consume these gradients).
struct GatherBeforeBackward : torch::autograd::Function<GatherBeforeBackward> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                at::TensorList xs, int64_t fsdp, int64_t unit) {
    ctx->saved_data["fsdp"] = fsdp;
    ctx->saved_data["unit"] = unit;
    return xs.vec();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* self = reinterpret_cast<Fsdp*>(static_cast<intptr_t>(ctx->saved_data["fsdp"].toInt()));
    self->gather_and_prefetch(static_cast<size_t>(ctx->saved_data["unit"].toInt()),
                              /*backward=*/true);
    grads.emplace_back();  // fsdp
    grads.emplace_back();  // unit
    return grads;
  }
};

}  // namespace

Fsdp::Fsdp(DecoderLM model, Communicator& comm, const FsdpOptions& options,
           const std::set<std::string>& decayed)
    : model_(std::move(model)), comm_(comm), options_(options) {
  TORCH_CHECK(model_->hooks == nullptr, "Fsdp: the model is already wrapped");
  // Shards keep the model's dtype (fp32, or fp64 for exact checks); gathers and reductions run
  // in it or, for fp32 shards, in bfloat16.
  const torch::ScalarType master = model_->embed->weight.scalar_type();
  TORCH_CHECK(master == torch::kFloat || master == torch::kDouble,
              "Fsdp: the model's parameters must be float32 or float64, not ", master);
  for (const auto t : {options_.param_dtype, options_.reduce_dtype})
    TORCH_CHECK(master == torch::kDouble ? t == torch::kDouble
                                         : t == torch::kFloat || t == torch::kBFloat16,
                "Fsdp: gathers and reductions of ", master, " parameters cannot run in ", t);
  const int64_t W = comm_.world();
  const int64_t S = options_.shard_size > 0 ? options_.shard_size : W;
  TORCH_CHECK(S <= W && W % S == 0, "Fsdp: shard groups of ", S, " ranks do not divide ", W,
              " ranks");
  shard_ = &comm_;
  if (S < W) {  // hybrid: every rank takes part in both splits, in this order
    const int r = comm_.rank(), s = static_cast<int>(S);
    shard_group_ = comm_.split(/*color=*/r / s, /*key=*/r % s);
    replica_group_ = comm_.split(/*color=*/r % s, /*key=*/r / s);
    shard_ = shard_group_.get();
  }
  const int64_t r = shard_->rank();
  // A unit of its own for the parameters kept in the master dtype, only when some gather or
  // reduction is narrower (else one unit per slot, as without a policy).
  const bool split = options_.param_dtype != master || options_.reduce_dtype != master;
  const size_t L = model_->scheme_blocks.size();
  slots_.resize(L + 1);
  std::map<std::pair<size_t, bool>, Unit*> unit_of;  // (slot, kept) -> unit
  for (const auto& p : model_->named_parameters()) {
    const std::string& name = p.key();
    size_t slot = L;  // root unless blocks.<l>.
    if (name.rfind("blocks.", 0) == 0) slot = std::stoul(name.substr(7, name.find('.', 7) - 7));
    const bool kept = split && options_.keep_fp32.count(name) > 0;
    Unit*& u = unit_of[{slot, kept}];
    if (!u) {
      units_.push_back(std::make_unique<Unit>());
      u = units_.back().get();
      u->slot = slot;
      u->name = (slot == L ? std::string("root") : "blocks." + std::to_string(slot)) +
                (kept ? " (kept)" : "");
      u->gather_dtype = kept ? master : options_.param_dtype;
      u->reduce_dtype = kept ? master : options_.reduce_dtype;
    }
    Unit::Param q;
    q.name = name;
    q.tensor = p.value();
    q.shape = p.value().sizes().vec();
    q.numel = p.value().numel();
    u->params.push_back(std::move(q));
  }
  // Units in slot order (each slot's own unit first): every rank meets them in this order.
  std::stable_sort(units_.begin(), units_.end(),
                   [](const auto& a, const auto& b) { return a->slot < b->slot; });
  for (auto& u : units_) slots_[u->slot].push_back(u.get());

  torch::NoGradGuard no_grad;
  for (auto& up : units_) {
    Unit& u = *up;
    int64_t total = 0;
    for (auto& q : u.params) {
      q.offset = total;
      total += q.numel;
    }
    u.shard = (total + S - 1) / S;
    u.padded = u.shard * S;
    const auto opts = torch::TensorOptions().dtype(master).device(model_->embed->weight.device());
    torch::Tensor flat = torch::zeros({u.padded}, opts);
    for (auto& q : u.params) flat.narrow(0, q.offset, q.numel).copy_(q.tensor.reshape(-1));
    u.shard_param = flat.narrow(0, r * u.shard, u.shard).clone();
    u.shard_grad = torch::zeros({u.shard}, opts);
    // The pieces this rank holds, and the gradient hooks.
    for (auto& q : u.params) {
      const int64_t lo = std::max(q.offset, r * u.shard),
                    hi = std::min(q.offset + q.numel, (r + 1) * u.shard);
      if (hi > lo) {
        ShardPiece piece;
        piece.name = q.name;
        piece.start = lo - q.offset;
        piece.shape = q.shape;
        piece.decay = decayed.count(q.name) > 0;
        piece.param = u.shard_param.narrow(0, lo - r * u.shard, hi - lo);
        piece.param.set_requires_grad(true);
        piece.param.mutable_grad() = u.shard_grad.narrow(0, lo - r * u.shard, hi - lo);
        pieces_.push_back(std::move(piece));
      }
      auto acc = torch::autograd::impl::grad_accumulator(q.tensor);
      Unit* unit = &u;
      const uintptr_t key =
          acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
              [this, unit](const torch::autograd::variable_list& outputs,
                           const torch::autograd::variable_list&) {
                if (--unit->pending == 0) reduce_grads(*unit);
                return outputs;
              }));
      u.hooks.emplace_back(std::move(acc), key);
    }
    free(u);
  }
  model_->hooks = this;
}

Fsdp::~Fsdp() {
  model_->hooks = nullptr;
  for (auto& u : units_)
    for (auto& [acc, key] : u->hooks) acc->del_post_hook(key);
}

void Fsdp::start_gather(Unit& u) {
  if (u.gathered || u.in_flight) return;
  torch::NoGradGuard no_grad;
  const bool narrow = u.gather_dtype != u.shard_param.scalar_type();
  u.outgoing = narrow ? u.shard_param.to(u.gather_dtype) : u.shard_param;
  u.incoming = torch::empty({u.padded}, u.outgoing.options());
  u.in_flight = shard_->all_gather_async(u.incoming, u.outgoing);
}

void Fsdp::gather(Unit& u) {
  if (u.gathered) return;
  torch::NoGradGuard no_grad;
  start_gather(u);
  {
    WaitTimer timer(wait_seconds_);
    u.in_flight->wait();
  }
  u.in_flight.reset();
  u.outgoing = torch::Tensor();
  const torch::Tensor full =
      u.incoming.to(u.shard_param.scalar_type());  // widened when gathered narrow
  for (auto& q : u.params) q.tensor.set_data(full.narrow(0, q.offset, q.numel).view(q.shape));
  u.incoming = torch::Tensor();  // the parameters keep the buffer alive
  u.gathered = true;
}

void Fsdp::gather_and_prefetch(size_t slot, bool backward) {
  for (Unit* u : slots_.at(slot)) gather(*u);
  const size_t blocks = slots_.size() - 1;  // the root is last
  if (!options_.prefetch) return;
  if (!backward && slot + 1 < blocks)
    for (Unit* u : slots_[slot + 1]) start_gather(*u);
  if (backward && slot >= 1 && slot < blocks)
    for (Unit* u : slots_[slot - 1]) start_gather(*u);
}

void Fsdp::free(Unit& u) {
  const auto opts = u.shard_param.options();
  for (auto& q : u.params) q.tensor.set_data(torch::empty({0}, opts));
  u.gathered = false;
}

void Fsdp::reduce_grads(Unit& u) {
  torch::NoGradGuard no_grad;
  if (!sync_ || u.accumulated.defined()) {  // add this backward's gradient to the unit's sum
    if (!u.accumulated.defined()) u.accumulated = torch::zeros({u.padded}, u.shard_grad.options());
    for (auto& q : u.params) {
      if (q.tensor.grad().defined())
        u.accumulated.narrow(0, q.offset, q.numel).add_(q.tensor.grad().reshape(-1));
      q.tensor.mutable_grad().reset();
    }
  }
  u.reduced = true;
  if (!sync_) {
    free(u);
    return;
  }
  torch::Tensor flat;
  if (u.accumulated.defined()) {
    flat = u.accumulated.to(u.reduce_dtype);
    u.accumulated = torch::Tensor();
  } else {
    flat = torch::zeros({u.padded}, u.shard_grad.options().dtype(u.reduce_dtype));
    for (auto& q : u.params) {
      if (q.tensor.grad().defined())
        flat.narrow(0, q.offset, q.numel).copy_(q.tensor.grad().reshape(-1));
      q.tensor.mutable_grad().reset();
    }
  }
  free(u);
  if (reducing_) finish_reduce(*reducing_);  // at most one in flight
  u.reduce_in = flat;
  u.reduce_out = torch::empty({u.shard}, flat.options());
  if (options_.overlap_reduce) {
    u.reducing = shard_->reduce_scatter_async(u.reduce_out, u.reduce_in);
    reducing_ = &u;
  } else {
    {
      WaitTimer timer(wait_seconds_);
      shard_->reduce_scatter(u.reduce_out, u.reduce_in);
    }
    finish_reduce(u);
  }
}

void Fsdp::finish_reduce(Unit& u) {
  torch::NoGradGuard no_grad;
  if (u.reducing) {
    WaitTimer timer(wait_seconds_);
    u.reducing->wait();
  }
  u.reducing.reset();
  if (reducing_ == &u) reducing_ = nullptr;
  if (!u.reduce_out.defined()) return;
  if (replica_group_) {  // hybrid: the shard's sum over its group, summed over the replicas
    WaitTimer timer(wait_seconds_);
    replica_group_->all_reduce(u.reduce_out, ReduceOp::Sum);
  }
  u.shard_grad.add_(u.reduce_out.to(u.shard_grad.scalar_type()),
                    1.0 / static_cast<double>(comm_.world()));
  u.reduce_in = u.reduce_out = torch::Tensor();
}

void Fsdp::before_forward() {
  const size_t root = slots_.size() - 1;
  for (Unit* u : slots_[root]) gather(*u);
  if (options_.prefetch && root > 0)
    for (Unit* u : slots_[0]) start_gather(*u);
  if (torch::GradMode::is_enabled())
    for (Unit* u : slots_[root]) {
      u->pending = static_cast<int64_t>(u->params.size());
      u->reduced = false;
    }
}

Streams Fsdp::run_block(size_t layer, SchemeBlockImpl& block, const Streams& in) {
  const std::vector<Unit*>& units = slots_.at(layer);
  gather_and_prefetch(layer, /*backward=*/false);
  Streams out = activation_checkpointed(options_.activation_checkpointing_every, layer)
                    ? activation_checkpointed_forward(block, in)
                    : block.forward(in);
  if (torch::GradMode::is_enabled()) {
    for (Unit* u : units) {
      u->pending = static_cast<int64_t>(u->params.size());
      u->reduced = false;
    }
    torch::autograd::variable_list xs{out.x};
    if (out.y.defined()) xs.push_back(out.y);
    auto ys = GatherBeforeBackward::apply(at::TensorList(xs),
                                          static_cast<int64_t>(reinterpret_cast<intptr_t>(this)),
                                          static_cast<int64_t>(layer));
    out.x = ys[0];
    if (out.y.defined()) out.y = ys[1];
    if (options_.reshard_after_forward)
      for (Unit* u : units) free(*u);
  } else {
    for (Unit* u : units) free(*u);
  }
  return out;
}

torch::Tensor Fsdp::after_forward(torch::Tensor logits) {
  if (!torch::GradMode::is_enabled())
    for (Unit* u : slots_.back()) free(*u);
  return logits;
}

void Fsdp::finish_backward() {
  for (auto& u : units_)
    if (!u->reduced) {
      gather(*u);  // its parameters may have been freed after forward; reduce_grads frees them
      reduce_grads(*u);
    }
  if (reducing_) finish_reduce(*reducing_);
}

}  // namespace normlab
