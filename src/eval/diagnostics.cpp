// The paper's diagnostics (docs/paper.md, Diagnostics) on one batch. One forward pass with a
// Probe collects the streams; gradients come from torch::autograd::grad (the parameters' .grad
// are not touched); the logit lens and the pruning curve run without gradients.
#include "normlab/eval/diagnostics.h"

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <map>

namespace normlab {
namespace {

// Restores the model's training mode on scope exit.
// Eval mode, and the MoE aux losses left out of the gradients (scale 0): the diagnostics'
// gradients are the cross-entropy's.
struct EvalModeGuard {
  explicit EvalModeGuard(DecoderLMImpl& m)
      : model(m), was_training(m.is_training()), moe_scale(m.moe_loss_scale()) {
    m.eval();
    m.set_moe_loss_scale(0.0);
  }
  ~EvalModeGuard() {
    model.train(was_training);
    model.set_moe_loss_scale(moe_scale);
  }
  DecoderLMImpl& model;
  bool was_training;
  double moe_scale;
};

double mean_gain(const torch::Tensor& g) {
  return g.defined() ? g.detach().to(torch::kDouble).mean().item<double>() : 1.0;
}

double norm_of(const std::vector<torch::Tensor>& grads) {
  double sq = 0.0;
  for (const auto& g : grads)
    if (g.defined()) sq += g.to(torch::kDouble).pow(2).sum().item<double>();
  return std::sqrt(sq);
}

torch::Tensor ce(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat),
                                   targets.reshape({-1}));
}

using StreamList = std::vector<std::pair<std::string, std::vector<torch::Tensor>*>>;

// The gradient norms of each block's attention and MLP weights, and of what reaches each
// stream at each depth, from one autograd::grad call (the parameters' .grad untouched).
void branch_gradients(DecoderLMImpl& model, const torch::Tensor& loss, const StreamList& streams,
                      DiagnosticsReport& r) {
  std::vector<torch::Tensor> wrt;
  std::vector<std::pair<size_t, size_t>> attn_range, mlp_range;  // into wrt, per block
  for (const auto& block : model.scheme_blocks) {
    std::vector<torch::Tensor> attn, mlp;
    for (const auto& p : block->named_parameters(/*recurse=*/true)) {
      if (p.key().rfind("attn.", 0) == 0)
        attn.push_back(p.value());
      else if (p.key().rfind("mlp.", 0) == 0)
        mlp.push_back(p.value());
    }
    attn_range.emplace_back(wrt.size(), wrt.size() + attn.size());
    wrt.insert(wrt.end(), attn.begin(), attn.end());
    mlp_range.emplace_back(wrt.size(), wrt.size() + mlp.size());
    wrt.insert(wrt.end(), mlp.begin(), mlp.end());
  }
  const size_t first_stream = wrt.size();
  for (const auto& [name, hs] : streams) wrt.insert(wrt.end(), hs->begin(), hs->end());
  const auto grads = torch::autograd::grad({loss}, wrt, /*grad_outputs=*/{}, /*retain_graph=*/false,
                                           /*create_graph=*/false, /*allow_unused=*/true);
  auto range_norm = [&](std::pair<size_t, size_t> rg) {
    return norm_of(
        std::vector<torch::Tensor>(grads.begin() + static_cast<std::ptrdiff_t>(rg.first),
                                   grads.begin() + static_cast<std::ptrdiff_t>(rg.second)));
  };
  for (size_t l = 0; l < attn_range.size(); ++l) {
    r.attn_grad.push_back(range_norm(attn_range[l]));
    r.mlp_grad.push_back(range_norm(mlp_range[l]));
  }
  size_t k = first_stream;
  for (const auto& [name, hs] : streams) {
    PerStream g{name, {}};
    for (size_t i = 0; i < hs->size(); ++i, ++k) g.values.push_back(norm_of({grads[k]}));
    r.stream_grad.push_back(std::move(g));
  }
}

// The mean gains of the norms in front of the shared branches, per stream, and their ratio.
void input_gains(DecoderLMImpl& model, bool twin, DiagnosticsReport& r) {
  const int64_t L = model.config.n_layers;
  for (int64_t l = 0; l < L; ++l)
    for (const auto& g : model.scheme_blocks[static_cast<size_t>(l)]->input_gains()) {
      const double x = mean_gain(g.x), y = mean_gain(g.y);
      r.gains.push_back({l, g.branch, x, y, x / y});
    }
  {
    torch::Tensor fx, fy;
    for (const auto& p : model.named_parameters(/*recurse=*/true)) {
      if (p.key() == "final_norm_x.weight") fx = p.value();
      if (p.key() == "final_norm_y.weight") fy = p.value();
    }
    if (twin && fx.defined() && fy.defined()) {
      const double x = mean_gain(fx), y = mean_gain(fy);
      r.gains.push_back({-1, "final", x, y, x / y});
    }
  }
}

// Logit lens: each stream alone through the end fusion and the head, as the fraction of
// positions whose top token agrees with the model's.
void logit_lens(DecoderLMImpl& model, const torch::Tensor& logits, const StreamList& streams,
                bool twin, DiagnosticsReport& r) {
  const torch::Tensor model_top = logits.detach().argmax(-1);
  for (const auto& [name, hs] : streams) {
    PerStream lens{name, {}};
    for (size_t i = 0; i < hs->size(); ++i) {
      const torch::Tensor hd = (*hs)[i].detach();
      // The other stream as zeros of its own shape (Y may be hyper-streams, (B, T, n, C)).
      const auto other = [&](const char* s) {
        for (const auto& [n, list] : streams)
          if (n == s) return torch::zeros_like((*list)[i]);
        return torch::Tensor();
      };
      Streams alone = twin ? (name == "x" ? Streams{hd, other("y")} : Streams{other("x"), hd})
                           : Streams{hd, {}};
      const torch::Tensor top =
          torch::matmul(model.fuse(alone), model.head_weight().t()).argmax(-1);
      lens.values.push_back(top.eq(model_top).to(torch::kDouble).mean().item<double>());
    }
    r.lens.push_back(std::move(lens));
  }
}

// Massive activations: the largest |h| entries of each stream at each depth, over the median.
void massive_activations(const StreamList& streams, int64_t top_k, DiagnosticsReport& r) {
  for (const auto& [name, hs] : streams)
    for (size_t i = 0; i < hs->size(); ++i) {
      // (B, T, C); hyper's (B, T, n, C) state as (B, T, n C): channel = stream * C + c.
      const torch::Tensor h = (*hs)[i].detach().to(torch::kFloat).flatten(2);
      const torch::Tensor a = h.abs().reshape({-1});
      const int64_t k = std::min<int64_t>(top_k, a.numel());
      const auto [vals, idx] = a.topk(k);
      MassiveActivations m{name, static_cast<int64_t>(i) - 1, {}, 0.0};
      const int64_t T = h.size(1), C = h.size(2);
      const auto flat = h.reshape({-1});
      for (int64_t j = 0; j < k; ++j) {
        const int64_t at = idx[j].item<int64_t>();
        m.top.push_back({flat[at].item<double>(), at / (T * C), (at / C) % T, at % C});
      }
      const double median = a.median().item<double>();
      m.max_over_median =
          median > 0 ? vals[0].item<double>() / median : std::numeric_limits<double>::infinity();
      r.massive.push_back(std::move(m));
    }
}

// The static part of each Hyper-Connections sub-layer's connection, from the parameters
// <branch>_hc.* of each block (include/normlab/eval/diagnostics.h; the equations and the init
// are src/nn/schemes/hyper.cpp's).
void hyper_connections(DecoderLMImpl& model, DiagnosticsReport& r) {
  auto spectral = [](const torch::Tensor& a) {
    return torch::linalg_svdvals(a).max().item<double>();
  };
  auto fro = [](const torch::Tensor& a) { return a.norm().item<double>(); };
  auto mean_abs = [](const torch::Tensor& a) { return a.abs().mean().item<double>(); };
  const int64_t L = model.config.n_layers;
  for (int64_t l = 0; l < L; ++l) {
    std::map<std::string, torch::Tensor> p;
    for (const auto& kv : model.scheme_blocks[static_cast<size_t>(l)]->named_parameters(true))
      p[kv.key()] = kv.value().detach().to(torch::kCPU, torch::kDouble);
    for (const std::string branch : {"attn", "mlp"}) {
      const std::string at = branch + "_hc.";
      const int64_t k = 2 * l + (branch == "mlp" ? 1 : 0);  // the sub-layer
      if (p.count(at + "static_alpha")) {
        const torch::Tensor alpha = p[at + "static_alpha"], beta = p[at + "static_beta"];
        const int64_t n = alpha.size(0);
        const torch::Tensor eye = torch::eye(n, torch::kDouble);
        const torch::Tensor init = torch::cat({eye.narrow(1, k % n, 1), eye}, 1);
        r.hyper.push_back({l,
                           branch,
                           "hc",
                           {{"a_r_spectral", spectral(alpha.narrow(1, 1, n))},
                            {"beta_abs", mean_abs(beta)},
                            {"alpha_dist", fro(alpha - init)},
                            {"beta_dist", fro(beta - 1.0)}}});
      } else if (p.count(at + "b_res")) {
        const int64_t n = p[at + "b_pre"].size(0);
        const torch::Tensor pre = torch::sigmoid(p[at + "b_pre"]);
        const torch::Tensor post = 2.0 * torch::sigmoid(p[at + "b_post"]);
        torch::Tensor res = torch::exp(p[at + "b_res"]);
        for (int i = 0; i < 20; ++i) {  // hyper.cpp's Sinkhorn-Knopp: rows, then columns
          res = res / res.sum(-1, /*keepdim=*/true);
          res = res / res.sum(-2, /*keepdim=*/true);
        }
        r.hyper.push_back({l,
                           branch,
                           "mhc",
                           {{"h_res_spectral", spectral(res)},
                            {"h_res_dist", fro(res - 1.0 / static_cast<double>(n))},
                            {"h_pre_abs", mean_abs(pre)},
                            {"h_pre_dist", fro(pre - 0.5)},
                            {"h_post_abs", mean_abs(post)},
                            {"h_post_dist", fro(post - 1.0)}}});
      }
    }
  }
}

}  // namespace

DiagnosticsReport run_diagnostics(DecoderLMImpl& model, const torch::Tensor& inputs,
                                  const torch::Tensor& targets, const DiagnosticsOptions& o) {
  EvalModeGuard mode(model);
  DiagnosticsReport r;
  const int64_t L = model.config.n_layers;

  // ---- one forward pass, the streams collected by the probe ----------------------------------
  std::vector<torch::Tensor> xs, ys;  // index l + 1
  const Probe probe = [&](std::string_view name, int64_t, const torch::Tensor& t) {
    if (name == "x")
      xs.push_back(t);
    else if (name == "y")
      ys.push_back(t);
  };
  std::optional<torch::NoGradGuard> no_grad;
  if (!o.gradients) no_grad.emplace();
  const torch::Tensor z = model.hidden(inputs, probe);
  const torch::Tensor logits = torch::matmul(z, model.head_weight().t());
  const torch::Tensor loss = ce(logits, targets);
  r.loss = loss.item<double>();
  for (size_t i = 0; i < model.moe.size(); ++i) {  // the routing of this forward (router_log.h)
    const int64_t layer = model.moe[i].first;
    const RouterStats& stats = model.router_log->last(static_cast<int64_t>(i));
    const torch::Tensor c = stats.counts.to(torch::kCPU, torch::kDouble);
    const torch::Tensor share = c / c.sum();
    r.routing.push_back(
        {layer,
         std::vector<double>(share.data_ptr<double>(), share.data_ptr<double>() + share.numel()),
         stats.entropy.item<double>(), c.eq(0).sum().item<int64_t>()});
  }
  const bool twin = !ys.empty();
  StreamList streams = {{"x", &xs}};
  if (twin) streams.push_back({"y", &ys});

  // ---- stream norms ---------------------------------------------------------------------------
  for (const auto& [name, hs] : streams) {
    PerStream rms{name, {}}, l2{name, {}};
    for (const auto& h : *hs) {
      const torch::Tensor d = h.detach().to(torch::kDouble);
      rms.values.push_back(d.pow(2).mean().sqrt().item<double>());
      l2.values.push_back(d.norm(2, {-1}).mean().item<double>());
    }
    r.rms.push_back(std::move(rms));
    r.l2.push_back(std::move(l2));
  }

  if (o.gradients) branch_gradients(model, loss, streams, r);

  torch::NoGradGuard no_grad_rest;

  input_gains(model, twin, r);
  hyper_connections(model, r);
  if (o.lens) logit_lens(model, logits, streams, twin, r);
  if (o.top_k > 0) massive_activations(streams, o.top_k, r);

  // ---- pruning: the loss with each block left out ----------------------------------------------
  if (o.pruning) {
    r.pruning_base = r.loss;
    for (int64_t l = 0; l < L; ++l) {
      const torch::Tensor zl = model.hidden(inputs, nullptr, l);
      r.pruning.push_back(ce(torch::matmul(zl, model.head_weight().t()), targets).item<double>());
    }
  }
  return r;
}

std::string diagnostics_json(const DiagnosticsReport& r) {
  using nlohmann::json;
  auto per_stream = [](const std::vector<PerStream>& v) {
    json j = json::object();
    for (const auto& s : v) j[s.stream] = s.values;
    return j;
  };
  auto finite = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json j = {{"step", r.step},
            {"loss", finite(r.loss)},
            {"rms", per_stream(r.rms)},
            {"l2", per_stream(r.l2)}};
  if (!r.stream_grad.empty()) {
    j["stream_grad"] = per_stream(r.stream_grad);
    j["attn_grad"] = r.attn_grad;
    j["mlp_grad"] = r.mlp_grad;
  }
  if (!r.gains.empty()) {
    j["gains"] = json::array();
    for (const auto& g : r.gains)
      j["gains"].push_back({{"layer", g.layer},
                            {"branch", g.branch},
                            {"x", g.x_gain},
                            {"y", g.y_gain},
                            {"ratio", finite(g.ratio)}});
  }
  if (!r.lens.empty()) j["lens"] = per_stream(r.lens);
  if (!r.massive.empty()) {
    j["massive"] = json::array();
    for (const auto& m : r.massive) {
      json top = json::array();
      for (const auto& t : m.top)
        top.push_back(
            {{"value", t.value}, {"batch", t.batch}, {"token", t.token}, {"channel", t.channel}});
      j["massive"].push_back({{"stream", m.stream},
                              {"layer", m.layer},
                              {"max_over_median", finite(m.max_over_median)},
                              {"top", top}});
    }
  }
  if (r.pruning_base) {
    j["pruning_base"] = *r.pruning_base;
    j["pruning"] = r.pruning;
  }
  if (!r.routing.empty()) {
    j["moe"] = json::array();
    for (const auto& m : r.routing)
      j["moe"].push_back(
          {{"layer", m.layer}, {"share", m.share}, {"entropy", m.entropy}, {"idle", m.idle}});
  }
  if (!r.hyper.empty()) {
    j["hyper"] = json::array();
    for (const auto& h : r.hyper) {
      json e = {{"layer", h.layer}, {"branch", h.branch}, {"variant", h.variant}};
      for (const auto& [key, value] : h.values) e[key] = finite(value);
      j["hyper"].push_back(e);
    }
  }
  return j.dump();
}

std::vector<std::string> diagnostics_plot_files() {
  return {"stream_norms.png", "grad_norms.png",  "gains.png", "logit_lens.png",
          "pruning.png",      "moe_routing.png", "hyper.png"};
}

}  // namespace normlab
