#include "normlab/distributed/fsdp.h"
#include "normlab/util/error.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <map>

#include "normlab/nn/activation_checkpointing.h"

namespace normlab {

struct Fsdp::Unit {
  struct Param {
    std::string name;
    torch::Tensor tensor;  // the module's parameter (storage only while gathered)
    std::vector<int64_t> shape;
    int64_t numel = 0, offset = 0;  // place in the flat buffer
  };
  std::string name;
  bool root = false;
  std::vector<Param> params;
  int64_t padded = 0, shard = 0;          // flat size (a multiple of W) and shard size
  torch::Tensor shard_param, shard_grad;  // fp32 (shard)
  bool gathered = false;
  torch::Tensor incoming;  // the buffer of a gather in flight (param_dtype)
  torch::Tensor outgoing;  // this rank's shard in param_dtype while its gather is in flight
  std::unique_ptr<Communicator::Pending> in_flight;
  torch::Tensor accumulated;  // unsharded gradient of the micro-steps without sync (padded)
  torch::Tensor reduce_in, reduce_out;  // a reduce-scatter in flight: flat gradient, its result
  std::unique_ptr<Communicator::Pending> reducing;
  int64_t pending = 0;  // parameters still to accumulate in this backward
  bool reduced = true;  // this backward's gradient is in shard_grad
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks;
};

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
  const int64_t W = comm_.world(), r = comm_.rank();
  const size_t L = model_->scheme_blocks.size();
  for (size_t l = 0; l <= L; ++l) {
    units_.push_back(std::make_unique<Unit>());
    units_.back()->root = l == L;
    units_.back()->name = l == L ? "root" : "blocks." + std::to_string(l);
  }
  for (const auto& p : model_->named_parameters()) {
    const std::string& name = p.key();
    size_t u = L;  // root unless blocks.<l>.
    if (name.rfind("blocks.", 0) == 0) u = std::stoul(name.substr(7, name.find('.', 7) - 7));
    Unit::Param q;
    q.name = name;
    q.tensor = p.value();
    q.shape = p.value().sizes().vec();
    q.numel = p.value().numel();
    units_[u]->params.push_back(std::move(q));
  }

  torch::NoGradGuard no_grad;
  for (auto& up : units_) {
    Unit& u = *up;
    int64_t total = 0;
    for (auto& q : u.params) {
      q.offset = total;
      total += q.numel;
    }
    u.shard = (total + W - 1) / W;
    u.padded = u.shard * W;
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
  const bool narrow = options_.param_dtype != u.shard_param.scalar_type();
  u.outgoing = narrow ? u.shard_param.to(options_.param_dtype) : u.shard_param;
  u.incoming = torch::empty({u.padded}, u.outgoing.options());
  u.in_flight = comm_.all_gather_async(u.incoming, u.outgoing);
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

void Fsdp::gather_and_prefetch(size_t unit, bool backward) {
  gather(*units_.at(unit));
  const size_t blocks = units_.size() - 1;  // the root unit is last
  if (!options_.prefetch) return;
  if (!backward && unit + 1 < blocks) start_gather(*units_[unit + 1]);
  if (backward && unit >= 1 && unit < blocks) start_gather(*units_[unit - 1]);
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
    flat = u.accumulated.to(options_.reduce_dtype);
    u.accumulated = torch::Tensor();
  } else {
    flat = torch::zeros({u.padded}, u.shard_grad.options().dtype(options_.reduce_dtype));
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
    u.reducing = comm_.reduce_scatter_async(u.reduce_out, u.reduce_in);
    reducing_ = &u;
  } else {
    {
      WaitTimer timer(wait_seconds_);
      comm_.reduce_scatter(u.reduce_out, u.reduce_in);
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
  u.shard_grad.add_(u.reduce_out.to(u.shard_grad.scalar_type()),
                    1.0 / static_cast<double>(comm_.world()));
  u.reduce_in = u.reduce_out = torch::Tensor();
}

void Fsdp::before_forward() {
  Unit& root = *units_.back();
  gather(root);
  if (options_.prefetch && units_.size() > 1) start_gather(*units_[0]);
  if (torch::GradMode::is_enabled()) {
    root.pending = static_cast<int64_t>(root.params.size());
    root.reduced = false;
  }
}

Streams Fsdp::run_block(size_t layer, SchemeBlockImpl& block, const Streams& in) {
  Unit& u = *units_.at(layer);
  gather_and_prefetch(layer, /*backward=*/false);
  Streams out = activation_checkpointed(options_.activation_checkpointing_every, layer)
                    ? activation_checkpointed_forward(block, in)
                    : block.forward(in);
  if (torch::GradMode::is_enabled()) {
    u.pending = static_cast<int64_t>(u.params.size());
    u.reduced = false;
    torch::autograd::variable_list xs{out.x};
    if (out.y.defined()) xs.push_back(out.y);
    auto ys = GatherBeforeBackward::apply(at::TensorList(xs),
                                          static_cast<int64_t>(reinterpret_cast<intptr_t>(this)),
                                          static_cast<int64_t>(layer));
    out.x = ys[0];
    if (out.y.defined()) out.y = ys[1];
    if (options_.reshard_after_forward) free(u);
  } else {
    free(u);
  }
  return out;
}

torch::Tensor Fsdp::after_forward(torch::Tensor logits) {
  if (!torch::GradMode::is_enabled()) free(*units_.back());
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

void Fsdp::zero_grad() {
  if (reducing_) finish_reduce(*reducing_);  // a backward not finished (an error): drop it
  for (auto& u : units_) {
    u->shard_grad.zero_();
    u->accumulated = torch::Tensor();
    if (u->in_flight) {  // a prefetch nothing consumed: complete it and drop it (the shards change
                         // next)
      u->in_flight->wait();
      u->in_flight.reset();
      u->incoming = torch::Tensor();
      u->outgoing = torch::Tensor();
    }
  }
}

double Fsdp::clip_grad_norm(double max_norm) {
  torch::NoGradGuard no_grad;
  double local = 0.0;
  for (auto& u : units_) local += u->shard_grad.to(torch::kDouble).pow(2).sum().item<double>();
  const double total = std::sqrt(comm_.sum(local));
  if (max_norm > 0.0 && std::isfinite(total)) {
    const double coef = max_norm / (total + 1e-6);
    if (coef < 1.0)
      for (auto& u : units_) u->shard_grad.mul_(coef);
  }
  return total;
}

double Fsdp::take_wait_seconds() {
  const double s = wait_seconds_;
  wait_seconds_ = 0.0;
  return s;
}

TensorDict Fsdp::local_weights() const {
  TensorDict out;
  for (const auto& p : pieces_) out[p.name] = p.param.detach();
  return out;
}

void Fsdp::load_full(const TensorDict& full, const std::string& what) {
  torch::NoGradGuard no_grad;
  std::string missing;
  for (const auto& u : units_)
    for (const auto& q : u->params) {
      const auto it = full.find(q.name);
      if (it == full.end()) {
        missing += " " + q.name;
        continue;
      }
      if (it->second.sizes().vec() != q.shape)
        throw CheckpointError(what + ": '" + q.name + "' has shape " +
                              c10::str(it->second.sizes()) + ", the model's is " +
                              c10::str(c10::IntArrayRef(q.shape)));
    }
  if (!missing.empty()) throw CheckpointError(what + ": missing parameters:" + missing);
  for (auto& p : pieces_)
    p.param.copy_(full.at(p.name).reshape(-1).narrow(0, p.start, p.param.numel()));
}

TensorDict Fsdp::slice_state(const TensorDict& full) const {
  std::map<std::string, const ShardPiece*> by_name;
  for (const auto& p : pieces_) by_name[p.name] = &p;
  std::map<std::string, int64_t> numel_of;
  for (const auto& u : units_)
    for (const auto& q : u->params) numel_of[q.name] = q.numel;
  TensorDict out;
  for (const auto& [key, t] : full) {
    const size_t dot = key.find('.');
    const std::string name = dot == std::string::npos ? "" : key.substr(dot + 1);
    const auto n = numel_of.find(name);
    if (n == numel_of.end() || t.numel() != n->second || t.dim() == 0) {
      out[key] = t;  // scalars and anything not shaped like a parameter
      continue;
    }
    const auto piece = by_name.find(name);
    if (piece == by_name.end()) continue;  // none of this parameter on this rank
    out[key] = t.reshape(-1).narrow(0, piece->second->start, piece->second->param.numel()).clone();
  }
  return out;
}

int64_t Fsdp::resident_bytes() const {
  int64_t bytes = 0;
  for (const auto& u : units_) {
    bytes += (u->shard_param.numel() + u->shard_grad.numel()) * static_cast<int64_t>(sizeof(float));
    for (const auto& q : u->params) bytes += static_cast<int64_t>(q.tensor.storage().nbytes());
    if (u->accumulated.defined()) bytes += static_cast<int64_t>(u->accumulated.nbytes());
  }
  return bytes;
}

}  // namespace normlab
