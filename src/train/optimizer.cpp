#include "normlab/train/optimizer.h"
#include "normlab/nn/weights.h"
#include "normlab/util/error.h"

#include <torch/torch.h>

#include <cmath>
#include <stdexcept>
#include <string>

namespace normlab {

namespace {
std::vector<OptParam> grouped(const std::vector<std::pair<std::string, torch::Tensor>>& named,
                              const OptimizerConfig& cfg) {
  std::vector<OptParam> out;
  for (const auto& [name, p] : named) out.push_back({name, p, decays(name, p.dim(), cfg)});
  return out;
}
}  // namespace

std::set<std::string> weight_decay_names(const torch::nn::Module& model,
                                         const OptimizerConfig& cfg) {
  std::set<std::string> out;
  for (const auto& p : model.named_parameters())
    if (decays(p.key(), p.value().dim(), cfg)) out.insert(p.key());
  return out;
}

AdamW::AdamW(const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
             const OptimizerConfig& cfg)
    : AdamW(grouped(named_params, cfg), cfg) {}

AdamW::AdamW(const std::vector<OptParam>& params, const OptimizerConfig& cfg) : cfg_(cfg) {
  groups_.resize(2);
  groups_[0].weight_decay = cfg.weight_decay;
  groups_[1].weight_decay = 0.0;
  for (const auto& [name, p, decay] : params) {
    Group& g = groups_[decay ? 0 : 1];
    g.names.push_back(name);
    g.params.push_back(p);
    g.exp_avg.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    g.exp_avg_sq.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    g.steps.push_back(torch::zeros({}, p.options().dtype(torch::kFloat)));
  }
}

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  for (Group& g : groups_) {
    if (g.params.empty()) continue;
    if (!cfg_.fused) {
      step_reference(g, lr);
      continue;
    }
    std::vector<torch::Tensor> params, grads, m, v, steps;
    for (size_t i = 0; i < g.params.size(); ++i) {
      if (!g.params[i].grad().defined()) continue;
      params.push_back(g.params[i]);
      grads.push_back(g.params[i].grad());
      m.push_back(g.exp_avg[i]);
      v.push_back(g.exp_avg_sq[i]);
      steps.push_back(g.steps[i]);
    }
    if (params.empty()) continue;
    torch::_foreach_add_(steps, 1.0);
    at::_fused_adamw_(params, grads, m, v, /*max_exp_avg_sqs=*/{}, steps, lr, cfg_.beta1,
                      cfg_.beta2, g.weight_decay, cfg_.eps, /*amsgrad=*/false, /*maximize=*/false,
                      /*grad_scale=*/std::nullopt, /*found_inf=*/std::nullopt);
  }
}

// PyTorch's single-tensor AdamW, written out.
void AdamW::step_reference(Group& g, double lr) {
  for (size_t i = 0; i < g.params.size(); ++i) {
    torch::Tensor p = g.params[i];
    if (!p.grad().defined()) continue;
    const torch::Tensor grad = p.grad();
    g.steps[i].add_(1.0);
    const double t = g.steps[i].item<double>();
    p.mul_(1.0 - lr * g.weight_decay);
    g.exp_avg[i].lerp_(grad, 1.0 - cfg_.beta1);
    g.exp_avg_sq[i].mul_(cfg_.beta2).addcmul_(grad, grad, 1.0 - cfg_.beta2);
    const double bias1 = 1.0 - std::pow(cfg_.beta1, t);
    const double bias2 = 1.0 - std::pow(cfg_.beta2, t);
    const torch::Tensor denom = (g.exp_avg_sq[i].sqrt() / std::sqrt(bias2)).add_(cfg_.eps);
    p.addcdiv_(g.exp_avg[i], denom, -lr / bias1);
  }
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (const Group& g : groups_)
    for (size_t i = 0; i < g.params.size(); ++i)
      bytes += static_cast<int64_t>(g.exp_avg[i].nbytes() + g.exp_avg_sq[i].nbytes() +
                                    g.steps[i].nbytes());
  return bytes;
}

TensorDict AdamW::state() const {
  TensorDict out;
  for (const Group& g : groups_)
    for (size_t i = 0; i < g.params.size(); ++i) {
      out["exp_avg." + g.names[i]] = g.exp_avg[i];
      out["exp_avg_sq." + g.names[i]] = g.exp_avg_sq[i];
      out["step." + g.names[i]] = g.steps[i];
    }
  out["step"] = torch::tensor(steps_, torch::kLong);
  return out;
}

void AdamW::load_state(const TensorDict& state) {
  auto get = [&](const std::string& key, const torch::Tensor& like) {
    const auto it = state.find(key);
    if (it == state.end()) throw CheckpointError("optimizer state: missing '" + key + "'");
    if (it->second.sizes() != like.sizes())
      throw CheckpointError("optimizer state: '" + key + "' has the wrong shape");
    return it->second;
  };
  torch::NoGradGuard no_grad;
  for (Group& g : groups_)
    for (size_t i = 0; i < g.params.size(); ++i) {
      g.exp_avg[i].copy_(get("exp_avg." + g.names[i], g.exp_avg[i]));
      g.exp_avg_sq[i].copy_(get("exp_avg_sq." + g.names[i], g.exp_avg_sq[i]));
      g.steps[i].copy_(get("step." + g.names[i], g.steps[i]));
    }
  steps_ = get("step", torch::zeros({}, torch::kLong)).item<int64_t>();
}

void check_optimizer_state(const TensorDict& state, const std::string& what) {
  for (const auto& [name, t] : state) {
    const std::string bad = first_nonfinite(t);
    if (!bad.empty())
      throw CheckpointError(what + ": tensor '" + name + "' holds " + bad +
                            ": the optimizer state must be finite numbers");
    const bool second = name.rfind("exp_avg_sq.", 0) == 0;
    const bool count = name == "step" || name.rfind("step.", 0) == 0;
    if ((second || count) && t.numel() > 0) {
      const torch::Tensor negative = (t < 0).reshape({-1});
      if (negative.any().item<bool>()) {
        const int64_t first = negative.nonzero()[0][0].item<int64_t>();
        throw CheckpointError(
            what + ": tensor '" + name + "' holds a negative value at flat index " +
            std::to_string(first) + " (" + std::to_string(t.reshape({-1})[first].item<double>()) +
            "): " + (second ? "a second moment is a mean of squares" : "a step count") +
            " cannot be negative");
      }
    }
  }
}

double clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  const auto norms = torch::_foreach_norm(grads, 2.0);
  const double total = torch::stack(norms).to(torch::kDouble).norm().item<double>();
  if (max_norm > 0.0 && std::isfinite(total)) {
    const double coef = max_norm / (total + 1e-6);
    if (coef < 1.0) torch::_foreach_mul_(grads, coef);
  }
  return total;
}

}  // namespace normlab
