#include "normlab/nn/router_log.h"

#include <torch/csrc/autograd/graph_task.h>
#include <torch/torch.h>

#include <stdexcept>
#include <string>

namespace normlab {

void RouterLog::record(int64_t layer, RouterStats stats) {
  // Inside a backward pass (a recompute): the forward pass recorded this routing already.
  if (torch::autograd::get_current_graph_task_id() != -1) return;
  const auto at = static_cast<size_t>(layer);
  if (last_.size() <= at) last_.resize(at + 1);
  last_[at] = stats;
  if (collecting_) {
    if (step_.empty() || layer <= previous_) step_.emplace_back();
    step_.back().push_back(std::move(stats));
  }
  previous_ = layer;
}

RouterStats mean_over_layers(const std::vector<RouterStats>& pass) {
  RouterStats m;
  std::vector<torch::Tensor> counts, entropy;
  for (const RouterStats& s : pass) {
    m.lb = m.lb.defined() ? m.lb + s.lb : s.lb;
    m.z = m.z.defined() ? m.z + s.z : s.z;
    counts.push_back(s.counts);
    entropy.push_back(s.entropy);
  }
  const double n = static_cast<double>(pass.size());
  m.lb = m.lb / n;
  m.z = m.z / n;
  m.counts = torch::stack(counts);
  m.entropy = torch::stack(entropy).mean();
  return m;
}

const RouterStats& RouterLog::last(int64_t layer) const {
  const auto at = static_cast<size_t>(layer);
  if (layer < 0 || at >= last_.size() || !last_[at].lb.defined())
    throw std::out_of_range("RouterLog: no routing recorded for MoE layer " +
                            std::to_string(layer));
  return last_[at];
}

void RouterLog::begin_step() {
  step_.clear();
  collecting_ = true;
  previous_ = -1;
}

std::vector<std::vector<RouterStats>> RouterLog::take_step() {
  std::vector<std::vector<RouterStats>> out;
  out.swap(step_);
  collecting_ = false;
  return out;
}

}  // namespace normlab
