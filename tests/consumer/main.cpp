// A downstream program on the installed package: builds a normlab::DecoderLM from a tiny
// ModelConfig, runs a forward pass and one step of normlab's AdamW, and checks that the loss is
// finite and that every parameter moved. Prints one line; exits 1 on a failed check.
#include <normlab/config/config.h>
#include <normlab/nn/model.h>
#include <normlab/train/optimizer.h>
#include <normlab/util/device.h>
#include <normlab/version.h>
#include <torch/torch.h>

#include <cmath>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

int main() {
  torch::manual_seed(0);
  normlab::ModelConfig cfg;
  cfg.scheme = normlab::Scheme::SiameseHybrid;
  cfg.vocab_size = 64;
  cfg.d_model = 32;
  cfg.n_layers = 2;
  cfg.n_heads = 4;
  cfg.d_ff = 64;
  normlab::DecoderLM model(cfg);

  std::vector<std::pair<std::string, torch::Tensor>> named;
  std::vector<torch::Tensor> before;
  for (const auto& p : model->named_parameters()) {
    named.emplace_back(p.key(), p.value());
    before.push_back(p.value().detach().clone());
  }
  normlab::OptimizerConfig oc;
  oc.lr = 1e-2;
  normlab::AdamW opt(named, oc);

  const torch::Tensor tokens = torch::randint(cfg.vocab_size, {2, 9}, torch::kLong);
  const torch::Tensor inputs = tokens.slice(1, 0, 8), targets = tokens.slice(1, 1, 9);
  const normlab::LossOutput out = model->loss(inputs, targets);
  const double loss = out.loss.item<double>();
  out.loss.backward();
  const double grad_norm = normlab::clip_grad_norm(model->parameters(), oc.grad_clip);
  opt.step(oc.lr);

  std::vector<std::string> unchanged;
  for (size_t i = 0; i < named.size(); ++i)
    if (torch::equal(named[i].second.detach(), before[i])) unchanged.push_back(named[i].first);
  const double after = model->loss(inputs, targets).loss.item<double>();
  std::cout << "consumer: normlab " << NORMLAB_VERSION_STRING << " with LibTorch "
            << normlab::torch_version() << ": " << normlab::enum_name(cfg.scheme) << ", "
            << named.size() << " parameter tensors, loss " << loss << " -> " << after
            << " after one AdamW step (grad norm " << grad_norm << "), " << unchanged.size()
            << " unchanged\n";
  if (!std::isfinite(loss) || !std::isfinite(after)) {
    std::cerr << "consumer: FAIL: the loss is not finite\n";
    return 1;
  }
  if (named.empty() || !unchanged.empty() || opt.steps_taken() != 1) {
    std::cerr << "consumer: FAIL: parameters the step did not change:";
    for (const auto& n : unchanged) std::cerr << " " << n;
    std::cerr << "\n";
    return 1;
  }
  return 0;
}
