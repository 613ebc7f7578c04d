// Two models on shared weights, compared in float64 (include/normlab/testing/equivalence.h).
#include "normlab/testing/equivalence.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <ostream>
#include <set>
#include <sstream>

#include "normlab/nn/weights.h"
#include "normlab/util/error.h"

namespace normlab::equivalence {
namespace {

using Rule = WeightMap::Rule;
using Kind = WeightMap::Kind;

std::string shape_text(const torch::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

std::string held_text(const HeldValue& v) {
  if (!v) return "init";
  std::ostringstream s;
  s << *v;
  return s.str();
}

// The model of `cfg` in float64 after manual_seed(seed), and a copy of its initial weights.
DecoderLM build_double(const ModelConfig& cfg, uint64_t seed, TensorDict& init) {
  torch::manual_seed(seed);
  DecoderLM m(cfg);
  m->to(torch::kDouble);
  for (const auto& [name, t] : weights_of(*m)) init[name] = t.clone();
  return m;
}

void hold(DecoderLM& m, const std::string& name, const HeldValue& v, const TensorDict& init) {
  torch::NoGradGuard no_grad;
  torch::Tensor p = m->named_parameters()[name];
  if (v)
    p.fill_(*v);
  else
    p.copy_(init.at(name));
}

// Which rules matched something: each must, else it is a typo.
void check_all_used(const WeightMap& map, const std::vector<bool>& used, const std::string& a,
                    const std::string& b) {
  for (size_t i = 0; i < map.rules.size(); ++i) {
    if (used[i]) continue;
    const Rule& r = map.rules[i];
    const std::string model = r.kind == Kind::HoldB ? "B (" + b + ")" : "A (" + a + ")";
    throw ConfigError(r.origin + ": '" + r.pattern + "' matches no parameter of " + model);
  }
}

std::string pattern_target(const Rule& r, const std::vector<std::string>& stars) {
  std::string out;
  size_t k = 0;
  for (char c : r.target) {
    if (c == '*')
      out += stars[k++];
    else
      out += c;
  }
  return out;
}

// "NaN", "+inf", "-inf" or "" (finite): the first non-finite kind `t` holds, NaN first.
std::string nonfinite_kind(const torch::Tensor& t) {
  if (t.isnan().any().item<bool>()) return "NaN";
  if (t.isposinf().any().item<bool>()) return "+inf";
  if (t.isneginf().any().item<bool>()) return "-inf";
  return "";
}

// NaN ranks above every number: a row whose max_rel is NaN is never skipped.
double rank_of(double max_rel) {
  return max_rel != max_rel ? std::numeric_limits<double>::infinity() : max_rel;
}

struct Run {
  torch::Tensor logits, loss;
};

Run run_model(DecoderLM& m, const torch::Tensor& inputs, const torch::Tensor& targets) {
  m->zero_grad();
  const LossOutput out = m->loss(inputs, targets);
  out.loss.backward();
  return {out.logits.detach(), out.loss.detach()};
}

}  // namespace

Difference difference(std::string what, const torch::Tensor& a, const torch::Tensor& b) {
  if (a.sizes() != b.sizes())
    throw ConfigError(what + ": A has shape " + shape_text(a) + ", B " + shape_text(b));
  Difference d;
  d.what = std::move(what);
  const torch::Tensor a64 = a.detach().to(torch::kDouble), b64 = b.detach().to(torch::kDouble);
  d.max_abs_b = b64.numel() ? b64.abs().max().item<double>() : 0.0;
  // A NaN or an infinity anywhere is an infinite difference, the same infinity on both sides
  // too: inf - inf is NaN and inf / inf is NaN, which a comparison with a bound would pass.
  const std::string in_a = nonfinite_kind(a64), in_b = nonfinite_kind(b64);
  if (!in_a.empty() || !in_b.empty()) {
    d.max_rel = std::numeric_limits<double>::infinity();
    if (in_b.empty())
      d.nonfinite = in_a + " in A";
    else if (in_a.empty())
      d.nonfinite = in_b + " in B";
    else
      d.nonfinite = in_a == in_b ? in_a + " in A and B" : in_a + " in A, " + in_b + " in B";
    return d;
  }
  const double diff = b64.numel() ? (a64 - b64).abs().max().item<double>() : 0.0;
  // 0 / 0 (both zero) is no difference; a - b may overflow to inf, which stays inf.
  d.max_rel = diff == 0.0 ? 0.0 : diff / std::max(d.max_abs_b, 1e-300);
  return d;
}

ModelPair build_pair(const ModelConfig& a_cfg, const ModelConfig& b_cfg, const WeightMap& map,
                     const EquivalenceOptions& options) {
  ModelPair pair;
  pair.config_a = a_cfg;
  pair.config_b = b_cfg;
  const std::string an(enum_name(a_cfg.scheme)), bn(enum_name(b_cfg.scheme));
  TensorDict init_a, init_b;
  pair.a = build_double(a_cfg, options.seed, init_a);
  pair.b = build_double(b_cfg, options.seed, init_b);
  if (options.random_gains) {
    torch::manual_seed(options.seed + 1);
    torch::NoGradGuard no_grad;
    for (auto& p : pair.a->named_parameters())
      if (p.value().dim() == 1) p.value().uniform_(0.5, 1.5);
  }
  std::vector<bool> used(map.rules.size(), false);
  const auto b_params = pair.b->named_parameters();

  // A's side: the first rename or hold that matches decides, else the name itself.
  std::map<std::string, std::string> a_of_b;  // B's name -> A's name
  for (const auto& p : pair.a->named_parameters()) {
    const std::string& name = p.key();
    std::string target = name;
    bool held = false;
    for (size_t i = 0; i < map.rules.size(); ++i) {
      const Rule& r = map.rules[i];
      std::vector<std::string> stars;
      if (r.kind == Kind::HoldB || !pattern_matches(r.pattern, name, &stars)) continue;
      used[i] = true;
      if (r.kind == Kind::HoldA) {
        hold(pair.a, name, r.value, init_a);
        pair.held_a.push_back({name, r.value});
        held = true;
      } else {
        target = pattern_target(r, stars);
      }
      break;
    }
    if (held) continue;
    if (!b_params.contains(target))
      throw ConfigError("parameter '" + name + "' of A (" + an + ") has no counterpart in B (" +
                        bn + "): B has no '" + target +
                        "'; map it ('A -> B') or hold it ('a: " + name + " = VALUE')");
    const auto [it, fresh] = a_of_b.emplace(target, name);
    if (!fresh)
      throw ConfigError("parameter '" + target + "' of B (" + bn + ") would receive both '" +
                        it->second + "' and '" + name + "' of A (" + an + ")");
    if (p.value().sizes() != b_params[target].sizes())
      throw ConfigError("parameter '" + name + "' of A (" + an + ") has shape " +
                        shape_text(p.value()) + ", '" + target + "' of B (" + bn + ") has " +
                        shape_text(b_params[target]));
  }

  // B's side: every parameter copied from A or held, never both.
  TensorDict for_b;
  const auto a_params = pair.a->named_parameters();
  for (const auto& p : b_params) {
    const std::string& name = p.key();
    const Rule* hold_rule = nullptr;
    for (size_t i = 0; i < map.rules.size() && !hold_rule; ++i)
      if (map.rules[i].kind == Kind::HoldB && pattern_matches(map.rules[i].pattern, name)) {
        used[i] = true;
        hold_rule = &map.rules[i];
      }
    const auto from = a_of_b.find(name);
    if (hold_rule && from != a_of_b.end())
      throw ConfigError(hold_rule->origin + ": parameter '" + name + "' of B (" + bn +
                        ") is held, and also receives '" + from->second + "' of A (" + an + ")");
    if (hold_rule) {
      hold(pair.b, name, hold_rule->value, init_b);
      for_b[name] = p.value().detach().clone();
      pair.held_b.push_back({name, hold_rule->value});
    } else if (from != a_of_b.end()) {
      for_b[name] = a_params[from->second].detach();
      pair.links.push_back({from->second, name});
    } else {
      throw ConfigError("parameter '" + name + "' of B (" + bn +
                        ") receives nothing: no parameter of A (" + an +
                        ") maps to it; map one ('A -> " + name + "') or hold it ('b: " + name +
                        " = VALUE', or 'init')");
    }
  }
  check_all_used(map, used, an, bn);
  load_weights(*pair.b, for_b, "weights of A (" + an + ")");
  return pair;
}

EquivalenceReport compare(ModelPair& pair, const EquivalenceOptions& options) {
  EquivalenceReport r;
  r.label_a = std::string(enum_name(pair.config_a.scheme));
  r.label_b = std::string(enum_name(pair.config_b.scheme));
  r.options = options;
  r.held_a = pair.held_a;
  r.held_b = pair.held_b;
  torch::manual_seed(options.seed + 2);
  const int64_t vocab = std::min(pair.config_a.vocab_size, pair.config_b.vocab_size);
  const torch::Tensor tokens =
      torch::randint(vocab, {options.batch, options.seq_len + 1}, torch::kLong);
  const torch::Tensor inputs = tokens.narrow(1, 0, options.seq_len),
                      targets = tokens.narrow(1, 1, options.seq_len);
  const Run ra = run_model(pair.a, inputs, targets), rb = run_model(pair.b, inputs, targets);
  if (ra.logits.sizes() != rb.logits.sizes())
    throw ConfigError("the logits of A (" + r.label_a + ") have shape " + shape_text(ra.logits) +
                      ", those of B (" + r.label_b + ") " + shape_text(rb.logits));
  r.logits = difference("logits", ra.logits, rb.logits);
  r.loss = difference("loss", ra.loss, rb.loss);
  const auto pa = pair.a->named_parameters(), pb = pair.b->named_parameters();
  for (const WeightLink& l : pair.links) {
    const torch::Tensor ga = pa[l.a].grad(), gb = pb[l.b].grad();
    const std::string what = "grad " + l.a + (l.a == l.b ? "" : " -> " + l.b);
    // A parameter the loss does not reach has no gradient: zeros, on both sides alike.
    r.gradients.push_back(difference(what, ga.defined() ? ga : torch::zeros_like(pa[l.a]),
                                     gb.defined() ? gb : torch::zeros_like(pb[l.b])));
  }
  return r;
}

EquivalenceReport compare_configs(const ModelConfig& a, const ModelConfig& b, const WeightMap& map,
                                  const EquivalenceOptions& options) {
  ModelPair pair = build_pair(a, b, map, options);
  return compare(pair, options);
}

const Difference& EquivalenceReport::worst_row() const {
  const Difference* w = &logits;
  if (rank_of(loss.max_rel) > rank_of(w->max_rel)) w = &loss;
  for (const Difference& d : gradients)
    if (rank_of(d.max_rel) > rank_of(w->max_rel)) w = &d;
  return *w;
}

double EquivalenceReport::worst() const { return worst_row().max_rel; }

std::string EquivalenceReport::table() const {
  size_t width = 24;
  for (const Difference& d : gradients) width = std::max(width, d.what.size() + 2);
  std::ostringstream s;
  auto row = [&](const std::string& what, const std::string& rel, const std::string& scale,
                 const std::string& note = "") {
    s << what << std::string(width > what.size() ? width - what.size() : 1, ' ') << rel
      << std::string(rel.size() < 16 ? 16 - rel.size() : 1, ' ') << scale
      << (note.empty() ? "" : "  " + note) << "\n";
  };
  auto num = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3e", x);
    return std::string(buf);
  };
  s << "A = " << label_a << ", B = " << label_b << ": float64, " << options.batch << " sequences x "
    << options.seq_len << " tokens, seed " << options.seed
    << (options.random_gains ? ", A's 1-D parameters drawn from U(0.5, 1.5)" : "") << "\n";
  row("tensor", "max rel diff", "max |B|");
  for (const Difference* d : {&logits, &loss})
    row(d->what, num(d->max_rel), num(d->max_abs_b), d->nonfinite);
  for (const Difference& d : gradients) row(d.what, num(d.max_rel), num(d.max_abs_b), d.nonfinite);
  const Difference& w = worst_row();
  s << "worst: " << num(w.max_rel) << " (" << w.what << (w.nonfinite.empty() ? "" : ": ")
    << w.nonfinite << "); max rel diff = max |A - B| / max |B|\n";
  for (const auto* held : {&held_a, &held_b}) {
    if (held->empty()) continue;
    s << "held in " << (held == &held_a ? "A" : "B") << ", not compared (" << held->size() << "):";
    for (const HeldWeight& h : *held) s << " " << h.name << "=" << held_text(h.value);
    s << "\n";
  }
  return s.str();
}

std::ostream& operator<<(std::ostream& os, const EquivalenceReport& report) {
  return os << report.table();
}

}  // namespace normlab::equivalence
