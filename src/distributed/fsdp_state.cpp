// Fsdp (fsdp.h) between backward passes: zeroing and clipping the shard gradients, the wait
// time, checkpoints' pieces and slices, and the memory a rank holds.
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <string>

#include "distributed/fsdp_unit.h"
#include "normlab/distributed/fsdp.h"
#include "normlab/util/error.h"

namespace normlab {

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
  const double total = std::sqrt(shard_->sum(local));  // replicas hold the same shards
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
