// The fused CPU kernels against the unfused ATen composition: values and gradients, in
// float64 (tight) and float32, on contiguous and strided inputs.
#include <torch/torch.h>

#include "normlab/nn/fused.h"
#include "normlab/nn/norm.h"
#include "normlab/util/cpu_allocator.h"
#include "support.h"

using namespace normlab;
using normlab::test::close;

namespace {

torch::Tensor rms_ref(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  torch::Tensor y = x * torch::rsqrt(x.pow(2).mean(-1, true) + eps);
  return w.defined() ? y * w : y;
}

torch::Tensor rope_ref(const torch::Tensor& x, const torch::Tensor& c, const torch::Tensor& s) {
  const int64_t h = x.size(-1) / 2;
  return x * c.unsqueeze(1) +
         torch::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1) * s.unsqueeze(1);
}

// Values and gradients (w.r.t. every input that requires grad) of f and ref agree.
void expect_same(const std::function<torch::Tensor()>& f, const std::function<torch::Tensor()>& ref,
                 std::vector<torch::Tensor> inputs, double tol) {
  const torch::Tensor a = f(), b = ref();
  EXPECT_TRUE(close(a, b, tol)) << "values";
  const torch::Tensor r = torch::randn_like(a);
  const auto ga = torch::autograd::grad({(a * r).sum()}, inputs);
  const auto gb = torch::autograd::grad({(b * r).sum()}, inputs);
  for (size_t i = 0; i < inputs.size(); ++i)
    EXPECT_TRUE(close(ga[i], gb[i], tol)) << "gradient " << i;
}

}  // namespace

TEST(Fused, RmsNormMatchesTheComposition) {
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    const double tol = dtype == torch::kDouble ? 1e-12 : 2e-6;
    torch::manual_seed(1);
    const torch::Tensor x = torch::randn({3, 37, 64}, dtype).requires_grad_();
    const torch::Tensor w = (torch::rand({64}, dtype) + 0.5).requires_grad_();
    expect_same([&] { return fused::rms_norm(x, w, 1e-5); }, [&] { return rms_ref(x, w, 1e-5); },
                {x, w}, tol);
    expect_same([&] { return fused::rms_norm(x, {}, 1e-5); }, [&] { return rms_ref(x, {}, 1e-5); },
                {x}, tol);
    // A strided view (the per-head q/k/v norms see slices of the qkv projection).
    const torch::Tensor big = torch::randn({5, 3, 24}, dtype).requires_grad_();
    const torch::Tensor wv = torch::rand({8}, dtype).requires_grad_();
    expect_same([&] { return fused::rms_norm(big.narrow(-1, 8, 8), wv, 1e-5); },
                [&] { return rms_ref(big.narrow(-1, 8, 8), wv, 1e-5); }, {big, wv}, tol);
  }
  EXPECT_TRUE(fused::cpu_fusable(torch::zeros({2})));
  EXPECT_FALSE(fused::cpu_fusable(torch::zeros({2}, torch::kBFloat16)));
}

TEST(Fused, RopeMatchesTheComposition) {
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    const double tol = dtype == torch::kDouble ? 1e-12 : 1e-6;
    torch::manual_seed(2);
    const torch::Tensor x = torch::randn({2, 9, 3, 16}, dtype).requires_grad_();
    const torch::Tensor c = torch::randn({9, 16}, dtype), s = torch::randn({9, 16}, dtype);
    expect_same([&] { return fused::rope(x, c, s); }, [&] { return rope_ref(x, c, s); }, {x}, tol);
    const torch::Tensor strided = torch::randn({2, 9, 3, 40}, dtype).requires_grad_();
    expect_same([&] { return fused::rope(strided.narrow(-1, 8, 16), c, s); },
                [&] { return rope_ref(strided.narrow(-1, 8, 16), c, s); }, {strided}, tol);
  }
}

// The kernels' at::parallel_for must reach ATen's threads: compiled without OpenMP (while
// LibTorch runs on it), every loop ran on the calling thread, 1.6x to 2.7x slower at d_model 512.
TEST(Fused, KernelsRunOnAtensThreads) {
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  const int reached = fused::kernel_threads();
  at::set_num_threads(1);
  const int alone = fused::kernel_threads();
  at::set_num_threads(before);
  if (at::get_parallel_info().find("OpenMP") == std::string::npos)
    GTEST_SKIP() << "LibTorch does not run on OpenMP here";
  EXPECT_EQ(reached, 2);
  EXPECT_EQ(alone, 1);
}

// Mismatched shapes are a c10::Error on either path (oneDNN's own error would be a dnnl::error
// that says only "could not create a primitive descriptor").
TEST(Fused, LinearRefusesMismatchedShapesAsLibTorchDoes) {
  EXPECT_THROW(fused::linear(torch::randn({4, 16}), torch::randn({3, 5})), c10::Error);
  EXPECT_THROW(fused::linear(torch::randn({2, 4, 16}), torch::randn({8, 15})), c10::Error);
  // A vector weight is ATen's matrix-vector product on every path.
  EXPECT_EQ(fused::linear(torch::randn({2, 4, 16}), torch::randn({16})).sizes(),
            torch::IntArrayRef({2, 4}));
}

TEST(Fused, LinearMatchesATenLinear) {
  torch::manual_seed(4);
  const torch::Tensor x = torch::randn({3, 17, 48}).requires_grad_();
  const torch::Tensor w = (torch::randn({40, 48}) * 0.1).requires_grad_();
  expect_same([&] { return fused::linear(x, w); }, [&] { return torch::linear(x, w); }, {x, w},
              2e-6);
  // A strided input (a slice of a wider activation) and an input that needs no gradient.
  const torch::Tensor wide = torch::randn({5, 96}).requires_grad_();
  expect_same([&] { return fused::linear(wide.narrow(1, 10, 48), w); },
              [&] { return torch::linear(wide.narrow(1, 10, 48), w); }, {wide, w}, 2e-6);
  const torch::Tensor frozen = torch::randn({4, 48});
  expect_same([&] { return fused::linear(frozen, w); }, [&] { return torch::linear(frozen, w); },
              {w}, 2e-6);
  std::cout << "oneDNN linear in this build: " << (fused::onednn_linear_available() ? "yes" : "no")
            << "\n";
}

// An empty input (no rows) gives an empty output and a weight gradient of exactly zero (the
// oneDNN kernel left that gradient unwritten: whatever the memory held).
TEST(Fused, LinearOfNoRowsHasAZeroWeightGradient) {
  for (int i = 0; i < 3; ++i) {  // fresh allocations that may reuse dirty memory
    const torch::Tensor garbage = torch::full({40, 48}, 7.0f);
    const torch::Tensor w = torch::randn({40, 48}).requires_grad_();
    const torch::Tensor y = fused::linear(torch::randn({0, 48}).requires_grad_(), w);
    EXPECT_EQ(y.sizes(), torch::IntArrayRef({0, 40}));
    (y.sum() + (w * 0).sum()).backward();
    ASSERT_TRUE(w.grad().defined());
    EXPECT_EQ(w.grad().abs().max().item<float>(), 0.0f);
  }
}

TEST(Fused, UnfusedDevicesAndDtypesTakeTheComposition) {
  const torch::Tensor x = torch::randn({4, 8}).to(torch::kBFloat16);
  const torch::Tensor q = torch::randn({1, 2, 1, 4}).to(torch::kBFloat16);
  const torch::Tensor c = torch::randn({2, 4}).to(torch::kBFloat16),
                      s = torch::randn({2, 4}).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(fused::rope(q, c, s), rope_ref(q, c, s)));
  EXPECT_EQ(fused::rms_norm(x, {}, 1e-5).scalar_type(), torch::kBFloat16);
}

TEST(Fused, AddRmsNormOffCudaIsTheNormsComposition) {
  // Against the formulas, for the dtypes the model's streams take.
  EXPECT_TRUE(test::add_rms_norm_matches_reference(torch::kCPU, torch::kDouble, torch::kDouble, 6,
                                                   40, 1.0, 1e-7));  // w is fp32
  EXPECT_TRUE(test::add_rms_norm_matches_reference(torch::kCPU, torch::kFloat, torch::kFloat, 9, 64,
                                                   2.5, 1e-5));
  EXPECT_TRUE(test::add_rms_norm_matches_reference(torch::kCPU, torch::kFloat, torch::kBFloat16, 3,
                                                   24, 4.0, 1e-5));
  // Bitwise what the schemes computed before the op existed: the add, then Norm.
  torch::manual_seed(3);
  for (const double d : {1.0, 2.0 / 3.0}) {
    const torch::Tensor x = torch::randn({2, 5, 32}), b = torch::randn({2, 5, 32});
    Norm norm(NormOptions(32));
    norm->weight.data().uniform_(0.5, 1.5);
    const auto [r, n] = norm->add_forward(x, b, d);
    const torch::Tensor r_ref = d == 1.0 ? x + b : x + b / d;
    EXPECT_TRUE(torch::equal(r, r_ref));
    EXPECT_TRUE(torch::equal(n, norm(r_ref)));
    Norm layer(NormOptions(32).type(NormType::LayerNorm));
    EXPECT_TRUE(torch::equal(layer->add_forward(x, b, d).second, layer(r_ref)));
  }
  // Dispatch: the CUDA kernels never take CPU tensors.
  EXPECT_FALSE(
      fused::fusable_add_rms_norm(torch::zeros({2, 4}), torch::zeros({2, 4}), torch::ones({4})));
}

// The caching allocator (not installed here: that would switch the whole test process).
TEST(CpuCachingAllocator, ReusesFreedBlocksOfTheSameSize) {
  CpuCachingAllocator a(/*max_cached_bytes=*/1 << 20);
  void* first = nullptr;
  {
    c10::DataPtr p = a.allocate(1000);
    first = p.get();
    ASSERT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);
    std::memset(first, 7, 1000);
    EXPECT_EQ(p.get(), p.get_context());  // LibTorch's raw_allocate relies on this
  }
  EXPECT_EQ(a.stats().cached_bytes, 1024u);
  {
    c10::DataPtr again = a.allocate(1000);
    EXPECT_EQ(again.get(), first);
    c10::DataPtr other = a.allocate(5000);
    EXPECT_NE(other.get(), first);
  }
  EXPECT_EQ(a.stats().allocations, 3u);
  EXPECT_EQ(a.stats().reused, 1u);
  {
    c10::DataPtr huge = a.allocate(2 << 20);  // beyond the cap: freed to the system
  }
  EXPECT_EQ(a.stats().cached_bytes, 1024u + 5056u);
}
