#include "normlab/nn/norm.h"

#include "normlab/kernels/ops.h"

#include <torch/torch.h>

namespace normlab {

NormImpl::NormImpl(const NormOptions& options_) : options(options_) {
  if (options.gain())
    weight = register_parameter("weight", torch::ones({options.dim()}, options.device()));
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  // Reduced-precision inputs are normalised in fp32 and cast back; fp32/fp64 stay as they are.
  const bool upcast = x.scalar_type() != torch::kFloat && x.scalar_type() != torch::kDouble;
  const torch::Tensor xf = upcast ? x.to(torch::kFloat) : x;
  const torch::Tensor w = weight.defined() ? weight.to(xf.scalar_type()) : torch::Tensor();
  torch::Tensor y;
  if (options.type() == NormType::RmsNorm) {
    y = kernels::rms_norm(xf, w, options.eps());
  } else {
    // An absent gain must be passed as nullopt: an undefined tensor would be used as a factor.
    y = torch::layer_norm(xf, {options.dim()},
                          w.defined() ? std::optional<torch::Tensor>(w) : std::nullopt,
                          /*bias=*/std::nullopt, options.eps());
  }
  return upcast ? y.to(x.scalar_type()) : y;
}

std::pair<torch::Tensor, torch::Tensor> NormImpl::add_forward(const torch::Tensor& x,
                                                              const torch::Tensor& b,
                                                              double divisor) {
  if (options.type() == NormType::RmsNorm && kernels::fusable_add_rms_norm(x, b, weight))
    return kernels::add_rms_norm(x, b, divisor, weight, options.eps());
  const torch::Tensor r = divisor == 1.0 ? x + b : x + b / divisor;
  return {r, forward(r)};
}

void NormImpl::pretty_print(std::ostream& stream) const {
  stream << "normlab::Norm(" << enum_name(options.type()) << ", " << options.dim()
         << ", eps=" << options.eps() << (options.gain() ? "" : ", no gain") << ")";
}

NormOptions norm_options(const ModelConfig& cfg, int64_t dim, torch::Device device) {
  return NormOptions(dim).eps(cfg.norm_eps).type(cfg.norm_type).device(device);
}

}  // namespace normlab
