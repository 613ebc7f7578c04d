// normlab's kernels (normlab/kernels/ops.h) against the ATen composition each replaces: values and
// gradients, in float64 (tight) and float32, on contiguous and strided inputs.
#include <torch/torch.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <string>

#include "normlab/kernels/capabilities.h"
#include "normlab/kernels/ops.h"
#include "normlab/nn/attention.h"
#include "normlab/nn/norm.h"
#include "support.h"

using namespace normlab;
using normlab::test::close;

namespace {

torch::Tensor rms_ref(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  torch::Tensor y = x * torch::rsqrt(x.pow(2).mean(-1, true) + eps);
  return w.defined() ? y * w : y;
}

torch::Tensor swiglu_ref(const torch::Tensor& u) {
  const std::vector<torch::Tensor> vg = u.chunk(2, -1);
  return torch::silu(vg[1]) * vg[0];
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

TEST(Kernels, RmsNormMatchesTheComposition) {
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    const double tol = dtype == torch::kDouble ? 1e-12 : 2e-6;
    torch::manual_seed(1);
    const torch::Tensor x = torch::randn({3, 37, 64}, dtype).requires_grad_();
    const torch::Tensor w = (torch::rand({64}, dtype) + 0.5).requires_grad_();
    expect_same([&] { return kernels::rms_norm(x, w, 1e-5); }, [&] { return rms_ref(x, w, 1e-5); },
                {x, w}, tol);
    expect_same([&] { return kernels::rms_norm(x, {}, 1e-5); },
                [&] { return rms_ref(x, {}, 1e-5); }, {x}, tol);
    // A strided view (the per-head q/k/v norms see slices of the qkv projection).
    const torch::Tensor big = torch::randn({5, 3, 24}, dtype).requires_grad_();
    const torch::Tensor wv = torch::rand({8}, dtype).requires_grad_();
    expect_same([&] { return kernels::rms_norm(big.narrow(-1, 8, 8), wv, 1e-5); },
                [&] { return rms_ref(big.narrow(-1, 8, 8), wv, 1e-5); }, {big, wv}, tol);
  }
  EXPECT_TRUE(kernels::cpu_fusable(torch::zeros({2})));
  EXPECT_TRUE(kernels::cpu_fusable(torch::zeros({2}, torch::kBFloat16)));
  EXPECT_FALSE(kernels::cpu_fusable(torch::zeros({2}, torch::kHalf)));
}

TEST(Kernels, RopeMatchesTheComposition) {
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    const double tol = dtype == torch::kDouble ? 1e-12 : 1e-6;
    torch::manual_seed(2);
    const torch::Tensor x = torch::randn({2, 9, 3, 16}, dtype).requires_grad_();
    const torch::Tensor c = torch::randn({9, 16}, dtype), s = torch::randn({9, 16}, dtype);
    expect_same([&] { return kernels::rope(x, c, s); }, [&] { return rope_ref(x, c, s); }, {x},
                tol);
    const torch::Tensor strided = torch::randn({2, 9, 3, 40}, dtype).requires_grad_();
    expect_same([&] { return kernels::rope(strided.narrow(-1, 8, 16), c, s); },
                [&] { return rope_ref(strided.narrow(-1, 8, 16), c, s); }, {strided}, tol);
  }
}

// The float32 loops run in the instruction set of ATen's capability (AVX-512, AVX2 or the
// portable lanes: .ci/run's lowered passes run this test in each), on lanes of 4, 8 or 16 with
// the last partial step padded: widths 37 and 48 take both kinds of step. float32 is checked
// against the composition in float64, so the tolerance is float32's own: the exp written out
// for the lanes is within 2 ulp, the products and the division add one each (about 6e-7
// relative); 2e-6 leaves a margin, and a wrong digit in the exp's polynomial is 1e-4 away.
TEST(Kernels, SwiGluMatchesTheComposition) {
  std::cout << "SwiGLU float32 loops here: " << kernels::vector_isa() << std::endl;
  for (const int64_t F : {37, 48}) {
    torch::manual_seed(3);
    const torch::Tensor u64 = (torch::randn({2, 5, 2 * F}, torch::kDouble) * 3).requires_grad_();
    expect_same([&] { return kernels::swiglu(u64); }, [&] { return swiglu_ref(u64); }, {u64},
                1e-12);
    const torch::Tensor u32 = u64.detach().to(torch::kFloat).requires_grad_();
    const torch::Tensor ref_in = u32.detach().to(torch::kDouble).requires_grad_();
    const torch::Tensor y = kernels::swiglu(u32), y_ref = swiglu_ref(ref_in);
    EXPECT_TRUE(close(y, y_ref, 2e-6)) << "values, width " << F;
    const torch::Tensor r = torch::randn_like(y_ref);
    const auto g = torch::autograd::grad({(y * r.to(torch::kFloat)).sum()}, {u32});
    const auto g_ref = torch::autograd::grad({(y_ref * r).sum()}, {ref_in});
    EXPECT_TRUE(close(g[0], g_ref[0], 2e-6)) << "gradient, width " << F;
  }
  // A strided view, and gates far outside the exp's range (where silu is 0 or the identity).
  const torch::Tensor wide = torch::randn({3, 4, 100}).requires_grad_();
  expect_same([&] { return kernels::swiglu(wide.narrow(-1, 10, 80)); },
              [&] { return swiglu_ref(wide.narrow(-1, 10, 80)); }, {wide}, 2e-6);
  const torch::Tensor far =
      torch::tensor({1.0f, -2.0f, 0.5f, 3.0f, -1000.0f, -100.0f, 100.0f, 1000.0f}).requires_grad_();
  expect_same([&] { return kernels::swiglu(far); }, [&] { return swiglu_ref(far); }, {far}, 2e-6);
  // NaN in a gate or a value stays NaN in the output and in both halves' gradients.
  torch::Tensor nan = torch::ones({2, 32});
  nan.index_put_({0, 20}, std::nanf(""));
  nan.index_put_({1, 3}, std::nanf(""));
  nan.requires_grad_();
  const torch::Tensor h = kernels::swiglu(nan);
  EXPECT_TRUE(std::isnan(h[0][4].item<float>()));
  EXPECT_TRUE(std::isnan(h[1][3].item<float>()));
  EXPECT_EQ(torch::isnan(h).sum().item<int64_t>(), 2);
  const torch::Tensor gn = torch::autograd::grad({h.sum()}, {nan})[0];
  EXPECT_TRUE(std::isnan(gn[0][4].item<float>()) && std::isnan(gn[0][20].item<float>()));
  EXPECT_THROW(kernels::swiglu(torch::randn({2, 7})), c10::Error);
  EXPECT_EQ(kernels::swiglu(torch::randn({0, 8})).sizes(), (std::vector<int64_t>{0, 4}));
}

// Causal attention as products over blocks of queries against SDPA (its math kernel in
// float64). Lengths 37 (one block, rows shorter than a lane step's multiple) and 300 (blocks of
// 75, the last one partial). float32 against float64: the products sum 64 to 300 terms, so
// their float32 error is up to about 300 x 6e-8 = 2e-5 of the largest value; 5e-5 leaves a
// margin, and a query that misses its own key (or sees the next) is off by 1e-2 or more.
// The paths causal_attention takes here: PerHead where the BLAS runs (a head count past any
// thread count), and Batched always.
std::vector<kernels::CausalAttentionPath> attention_paths() {
  std::vector<kernels::CausalAttentionPath> paths = {kernels::CausalAttentionPath::Batched};
  if (kernels::causal_attention_path(int64_t{1} << 30) == kernels::CausalAttentionPath::PerHead)
    paths.push_back(kernels::CausalAttentionPath::PerHead);
  return paths;
}

const char* path_name(kernels::CausalAttentionPath path) {
  return path == kernels::CausalAttentionPath::PerHead ? "per head" : "batched";
}

TEST(Kernels, CausalAttentionMatchesSdpa) {
  std::cout << "softmax float32 loops here: " << kernels::vector_isa() << std::endl;
  const auto sdpa = [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    return at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, /*is_causal=*/true, 0.125);
  };
  for (const auto path : attention_paths()) {
    SCOPED_TRACE(path_name(path));
    const auto attend = [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            double scale) {
      return kernels::causal_attention(q, k, v, scale, path);
    };
    for (const int64_t T : {37, 300}) {
      torch::manual_seed(4);
      // (B, T, H, D) viewed as (B, H, T, D), as the model lays them out.
      const auto make = [&] {
        return (torch::randn({2, T, 3, 64}, torch::kDouble) * 2).requires_grad_();
      };
      const torch::Tensor q = make(), k = make(), v = make();
      const auto heads = [](const torch::Tensor& x) { return x.transpose(1, 2); };
      expect_same([&] { return attend(heads(q), heads(k), heads(v), 0.125); },
                  [&] { return sdpa(heads(q), heads(k), heads(v)); }, {q, k, v}, 1e-10);
      const auto f32 = [](const torch::Tensor& x) {
        return x.detach().to(torch::kFloat).requires_grad_();
      };
      const torch::Tensor q32 = f32(q), k32 = f32(k), v32 = f32(v);
      const torch::Tensor y = attend(heads(q32), heads(k32), heads(v32), 0.125);
      const torch::Tensor y_ref = sdpa(heads(q), heads(k), heads(v));
      EXPECT_TRUE(close(y, y_ref, 5e-5)) << "float32 values, length " << T;
      const torch::Tensor r = torch::randn_like(y_ref);
      const auto g = torch::autograd::grad({(y * r.to(torch::kFloat)).sum()}, {q32, k32, v32});
      const auto g_ref = torch::autograd::grad({(y_ref * r).sum()}, {q, k, v});
      for (size_t i = 0; i < 3; ++i)
        EXPECT_TRUE(close(g[i], g_ref[i], 5e-5)) << "float32 gradient " << i << ", length " << T;
    }
    // Heads of other strides: contiguous (B, H, T, D), and rows whose last dimension is strided
    // (not a BLAS operand as it stands), against the same values laid out contiguously.
    torch::manual_seed(5);
    const torch::Tensor base = torch::randn({2, 3, 70, 16}, torch::kDouble).requires_grad_();
    const torch::Tensor wide = torch::randn({2, 3, 16, 70}, torch::kDouble).requires_grad_();
    expect_same([&] { return attend(base, wide.transpose(2, 3), base * 0.5, 0.125); },
                [&] { return sdpa(base, wide.transpose(2, 3).contiguous(), base * 0.5); },
                {base, wide}, 1e-10);
    // A NaN key at position 50 reaches the queries from 50 on, never the ones before.
    torch::Tensor k = torch::randn({1, 2, 80, 16});
    k.index_put_({0, 1, 50, 3}, std::nanf(""));
    const torch::Tensor y =
        attend(torch::randn({1, 2, 80, 16}), k, torch::randn({1, 2, 80, 16}), 0.25);
    EXPECT_FALSE(torch::isnan(y.narrow(2, 0, 50)).any().item<bool>());
    EXPECT_TRUE(torch::isnan(y[0][1].narrow(0, 50, 30)).all().item<bool>());
    EXPECT_FALSE(torch::isnan(y[0][0]).any().item<bool>());
  }
}

// The per-head path writes its output and the three gradients in the model's layout (B, T, H,
// D), so that the projections around it read them without a copy.
TEST(Kernels, CausalAttentionPerHeadKeepsTheModelsLayout) {
  if (attention_paths().size() < 2) GTEST_SKIP() << "no BLAS GEMM in this LibTorch";
  const auto make = [] { return torch::randn({2, 40, 4, 8}).requires_grad_(); };
  const torch::Tensor q = make(), k = make(), v = make();
  const torch::Tensor y =
      kernels::causal_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), 0.3,
                                kernels::CausalAttentionPath::PerHead);
  EXPECT_TRUE(y.transpose(1, 2).is_contiguous());
  y.transpose(1, 2).reshape({2, 40, 32}).sum().backward();
  for (const torch::Tensor& x : {q, k, v}) EXPECT_TRUE(x.grad().is_contiguous());
}

TEST(Kernels, CausalAttentionTakesOnlyWhatFits) {
  const auto qkv = [](int64_t T, torch::ScalarType dtype) {
    return torch::zeros({1, 2, T, 8}, dtype);
  };
  const torch::Tensor q = qkv(16, torch::kFloat);
  EXPECT_TRUE(kernels::causal_attention_fits(q, q, q));
  EXPECT_FALSE(kernels::causal_attention_fits(q, qkv(8, torch::kFloat), q));      // shapes differ
  EXPECT_FALSE(kernels::causal_attention_fits(qkv(16, torch::kBFloat16), q, q));  // dtypes differ
  EXPECT_TRUE(kernels::causal_attention_fits(qkv(16, torch::kBFloat16), qkv(16, torch::kBFloat16),
                                             qkv(16, torch::kBFloat16)));
  EXPECT_FALSE(kernels::causal_attention_fits(qkv(16, torch::kHalf), qkv(16, torch::kHalf),
                                              qkv(16, torch::kHalf)));
  const torch::Tensor longer = qkv(kernels::kCausalAttentionMaxTokens + 1, torch::kFloat);
  EXPECT_FALSE(kernels::causal_attention_fits(longer, longer, longer));
  // The kept scores' bound: (B H) T (T + T / 4) / 2 floats, 335 MB at B H = 512 and T = 512.
  const torch::Tensor many = torch::zeros({64, 8, 512, 8});
  EXPECT_FALSE(kernels::causal_attention_fits(many, many, many));
  EXPECT_THROW(kernels::causal_attention(longer, longer, longer, 1.0), c10::Error);
  // PerHead takes whole heads: with fewer heads than threads the batched path runs.
  const bool blas = attention_paths().size() == 2;
  const int threads = at::get_num_threads();
  EXPECT_EQ(kernels::causal_attention_path(threads) == kernels::CausalAttentionPath::PerHead, blas);
  EXPECT_EQ(kernels::causal_attention_path(threads - 1), kernels::CausalAttentionPath::Batched);
  // PerHead was faster than SDPA's flash kernel at every length in every class; the batched path
  // only below AVX-512 or from 257 tokens (with AVX-512 as fast or slower up to 256).
  const bool avx512 = kernels::vector_isa() == "AVX512";
  EXPECT_EQ(kernels::causal_attention_preferred(threads, 128), blas || !avx512);
  EXPECT_EQ(kernels::causal_attention_preferred(threads, 256), blas || !avx512);
  EXPECT_EQ(kernels::causal_attention_preferred(threads - 1, 256), !avx512);
  EXPECT_TRUE(
      kernels::causal_attention_preferred(threads - 1, kernels::kCausalAttentionAvx512MinTokens));
  // The model's attention names the path its training steps take (2 x 4 heads).
  const std::string own = "normlab (products over causal blocks)";
  const AttentionOptions o = AttentionOptions(64, 4);
  EXPECT_EQ(attention_backend(o, 2, 300, torch::kFloat), own);
  EXPECT_EQ(attention_backend(o, 2, 128, torch::kFloat) == own, !avx512 || (blas && threads <= 8));
  EXPECT_EQ(attention_backend(o, 2, 300, torch::kBFloat16), own);  // computed in float32
  EXPECT_NE(attention_backend(o, 2, 300, torch::kHalf), own);
  EXPECT_NE(attention_backend(o, 2, kernels::kCausalAttentionMaxTokens * 2, torch::kFloat), own);
}

// The kernels' at::parallel_for must reach ATen's threads: compiled without OpenMP (while
// LibTorch runs on it), every loop ran on the calling thread, 1.6x to 2.7x slower at d_model 512.
TEST(Kernels, KernelsRunOnAtensThreads) {
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  const int reached = kernels::kernel_threads();
  at::set_num_threads(1);
  const int alone = kernels::kernel_threads();
  at::set_num_threads(before);
  if (at::get_parallel_info().find("OpenMP") == std::string::npos)
    GTEST_SKIP() << "LibTorch does not run on OpenMP here";
  EXPECT_EQ(reached, 2);
  EXPECT_EQ(alone, 1);
}

// Mismatched shapes are a c10::Error on either path (oneDNN's own error would be a dnnl::error
// that says only "could not create a primitive descriptor").
TEST(Kernels, LinearRefusesMismatchedShapesAsLibTorchDoes) {
  EXPECT_THROW(kernels::linear(torch::randn({4, 16}), torch::randn({3, 5})), c10::Error);
  EXPECT_THROW(kernels::linear(torch::randn({2, 4, 16}), torch::randn({8, 15})), c10::Error);
  // A vector weight is ATen's matrix-vector product on every path.
  EXPECT_EQ(kernels::linear(torch::randn({2, 4, 16}), torch::randn({16})).sizes(),
            torch::IntArrayRef({2, 4}));
}

TEST(Kernels, LinearMatchesATenLinear) {
  torch::manual_seed(4);
  const torch::Tensor x = torch::randn({3, 17, 48}).requires_grad_();
  const torch::Tensor w = (torch::randn({40, 48}) * 0.1).requires_grad_();
  expect_same([&] { return kernels::linear(x, w); }, [&] { return torch::linear(x, w); }, {x, w},
              2e-6);
  // A strided input (a slice of a wider activation) and an input that needs no gradient.
  const torch::Tensor wide = torch::randn({5, 96}).requires_grad_();
  expect_same([&] { return kernels::linear(wide.narrow(1, 10, 48), w); },
              [&] { return torch::linear(wide.narrow(1, 10, 48), w); }, {wide, w}, 2e-6);
  const torch::Tensor frozen = torch::randn({4, 48});
  expect_same([&] { return kernels::linear(frozen, w); }, [&] { return torch::linear(frozen, w); },
              {w}, 2e-6);
  std::cout << "oneDNN linear in this build: "
            << (kernels::onednn_linear_available() ? "yes" : "no") << "\n";
}

// An empty input (no rows) gives an empty output and a weight gradient of exactly zero (the
// oneDNN kernel left that gradient unwritten: whatever the memory held).
TEST(Kernels, LinearOfNoRowsHasAZeroWeightGradient) {
  for (int i = 0; i < 3; ++i) {  // fresh allocations that may reuse dirty memory
    const torch::Tensor garbage = torch::full({40, 48}, 7.0f);
    const torch::Tensor w = torch::randn({40, 48}).requires_grad_();
    const torch::Tensor y = kernels::linear(torch::randn({0, 48}).requires_grad_(), w);
    EXPECT_EQ(y.sizes(), torch::IntArrayRef({0, 40}));
    (y.sum() + (w * 0).sum()).backward();
    ASSERT_TRUE(w.grad().defined());
    EXPECT_EQ(w.grad().abs().max().item<float>(), 0.0f);
  }
}

namespace {

struct CrossEntropyCase {
  torch::Tensor logits, targets;
  CrossEntropyCase(int64_t N, int64_t V, torch::ScalarType dtype) {
    logits = torch::randn({N, V}, torch::kDouble) * 4.0;
    logits[0] += 1e4;
    logits = logits.to(dtype);
    targets = torch::randint(V, {N}, torch::kLong);
    targets[3] = -100;
    targets[N - 1] = -100;
  }
};

}  // namespace

TEST(KernelsCrossEntropy, MatchesAtenValueAndGradient) {
  torch::manual_seed(11);
  // Row widths: below one lane step, not a multiple of any lane count (4, 8, 16), and wide.
  for (const int64_t V : {int64_t{3}, int64_t{37}, int64_t{4099}}) {
    for (const auto dtype : {torch::kDouble, torch::kFloat}) {
      SCOPED_TRACE("V " + std::to_string(V) +
                   (dtype == torch::kDouble ? ", float64" : ", float32"));
      const CrossEntropyCase c(29, V, dtype);
      const torch::Tensor ours = c.logits.clone().requires_grad_(true),
                          ref = c.logits.clone().requires_grad_(true);
      const torch::Tensor loss = kernels::cross_entropy(ours, c.targets);
      const torch::Tensor ref_loss = torch::cross_entropy_loss(ref, c.targets);
      (loss * 3.0).backward();  // the incoming gradient scales the logits' gradient
      (ref_loss * 3.0).backward();
      const bool f64 = dtype == torch::kDouble;
      EXPECT_EQ(loss.scalar_type(), dtype);
      EXPECT_NEAR(loss.item<double>(), ref_loss.item<double>(), f64 ? 1e-12 : 1e-5);
      // float32: a few ulp of the exponentials and of lse (about 10 here) scale every entry.
      EXPECT_TRUE(
          test::close_per_element(ours.grad(), ref.grad(), f64 ? 1e-11 : 2e-5, f64 ? 1e-14 : 1e-7));
      EXPECT_EQ(ours.grad()[3].abs().max().item<double>(), 0.0);  // a row left out
    }
  }
}

TEST(KernelsCrossEntropy, LeavesOutRowsOfTargetMinus100AndRefusesOtherTargets) {
  torch::manual_seed(12);
  const torch::Tensor x = torch::randn({5, 7}).requires_grad_(true);
  // No row counted: the mean of nothing, NaN, as ATen's; the gradient is zero.
  const torch::Tensor none = torch::full({5}, -100, torch::kLong);
  const torch::Tensor loss = kernels::cross_entropy(x, none);
  EXPECT_TRUE(std::isnan(loss.item<double>()));
  EXPECT_TRUE(std::isnan(torch::cross_entropy_loss(x, none).item<double>()));
  loss.backward();
  EXPECT_EQ(x.grad().abs().max().item<double>(), 0.0);
  for (const int64_t bad : {int64_t{7}, int64_t{-1}, int64_t{-101}}) {
    torch::Tensor t = torch::zeros({5}, torch::kLong);
    t[2] = bad;
    const std::string message = test::error_message([&] { kernels::cross_entropy(x.detach(), t); });
    EXPECT_NE(message.find("target " + std::to_string(bad) + " is out of bounds"),
              std::string::npos)
        << message;
  }
  // A NaN in a counted row reaches the loss, as in ATen's.
  torch::Tensor y = torch::randn({4, 9});
  y[1][5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(
      std::isnan(kernels::cross_entropy(y, torch::randint(9, {4}, torch::kLong)).item<double>()));
}

TEST(Kernels, UnfusedDevicesAndDtypesTakeTheComposition) {
  const torch::Tensor x = torch::randn({4, 8}).to(torch::kHalf);
  const torch::Tensor q = torch::randn({1, 2, 1, 4}).to(torch::kHalf);
  const torch::Tensor c = torch::randn({2, 4}).to(torch::kHalf),
                      s = torch::randn({2, 4}).to(torch::kHalf);
  EXPECT_TRUE(torch::equal(kernels::rope(q, c, s), rope_ref(q, c, s)));
  EXPECT_TRUE(torch::equal(kernels::swiglu(x), swiglu_ref(x)));
  EXPECT_EQ(kernels::rms_norm(x, {}, 1e-5).scalar_type(), torch::kHalf);
  // bfloat16 rows with float64 tables: the composition too.
  const torch::Tensor qb = q.to(torch::kBFloat16);
  const torch::Tensor c64 = c.to(torch::kDouble), s64 = s.to(torch::kDouble);
  EXPECT_TRUE(torch::equal(kernels::rope(qb, c64, s64), rope_ref(qb, c64, s64)));
}

TEST(Kernels, AddRmsNormOffCudaIsTheNormsComposition) {
  // Against the formulas, for the dtypes the model's streams take.
  EXPECT_TRUE(test::add_rms_norm_matches_reference(torch::kCPU, torch::kDouble, torch::kDouble, 6,
                                                   40, 1.0, 1e-7));  // w is fp32
  EXPECT_TRUE(test::add_rms_norm_matches_reference(torch::kCPU, torch::kFloat, torch::kFloat, 9, 64,
                                                   2.5, 1e-5));
  EXPECT_TRUE(test::add_rms_norm_matches_reference(torch::kCPU, torch::kFloat, torch::kBFloat16, 3,
                                                   24, 4.0, 1e-5));
  EXPECT_TRUE(test::add_rms_norm_matches_reference(torch::kCPU, torch::kBFloat16, torch::kBFloat16,
                                                   7, 40, 1.0, 1e-2));
  // Bitwise what the schemes computed before the op existed, the add, then Norm: the CPU kernel's
  // forward runs the same operations in the same order in float32.
  torch::manual_seed(3);
  for (const double d : {1.0, 2.0 / 3.0}) {
    const torch::Tensor x = torch::randn({2, 5, 32}), b = torch::randn({2, 5, 32});
    Norm norm(NormOptions(32));
    norm->weight.data().uniform_(0.5, 1.5);
    const auto [r, n] = norm->add_forward(x, b, d);
    const torch::Tensor r_ref = d == 1.0 ? x + b : x + b / d;
    EXPECT_TRUE(torch::equal(r, r_ref));
    EXPECT_TRUE(torch::equal(n, norm(r_ref)));
    // The gradients within float32's rounding (the compiler may contract a product and a sum
    // into one fused multiply-add in one kernel and not in the other).
    const torch::Tensor xg = x.clone().requires_grad_(), bg = b.clone().requires_grad_();
    const torch::Tensor cr = torch::randn({2, 5, 32}), cn = torch::randn({2, 5, 32});
    const auto [rg, ng] = norm->add_forward(xg, bg, d);
    const auto g =
        torch::autograd::grad({(rg * cr).sum() + (ng * cn).sum()}, {xg, bg, norm->weight});
    const torch::Tensor rc = d == 1.0 ? xg + bg : xg + bg / d;
    const auto gc =
        torch::autograd::grad({(rc * cr).sum() + (norm(rc) * cn).sum()}, {xg, bg, norm->weight});
    for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(close(g[i], gc[i], 1e-6)) << "gradient " << i;
    Norm layer(NormOptions(32).type(NormType::LayerNorm));
    EXPECT_TRUE(torch::equal(layer->add_forward(x, b, d).second, layer(r_ref)));
  }
  // Dispatch: CPU tensors take the CPU kernel where the dtypes fit (the gain in the numbers the
  // rows compute in), the composition elsewhere.
  const auto fits = [](torch::ScalarType xt, torch::ScalarType bt, torch::ScalarType wt) {
    return kernels::fusable_add_rms_norm(torch::zeros({2, 4}, xt), torch::zeros({2, 4}, bt),
                                         torch::ones({4}, wt));
  };
  EXPECT_TRUE(fits(torch::kFloat, torch::kFloat, torch::kFloat));
  EXPECT_TRUE(fits(torch::kFloat, torch::kBFloat16, torch::kFloat));
  EXPECT_TRUE(fits(torch::kBFloat16, torch::kBFloat16, torch::kFloat));
  EXPECT_TRUE(fits(torch::kDouble, torch::kDouble, torch::kDouble));
  EXPECT_FALSE(fits(torch::kDouble, torch::kDouble, torch::kFloat));
  EXPECT_FALSE(fits(torch::kBFloat16, torch::kFloat, torch::kFloat));
  EXPECT_FALSE(fits(torch::kFloat, torch::kHalf, torch::kFloat));
  EXPECT_FALSE(kernels::fusable_add_rms_norm(torch::zeros({2, 4}), torch::zeros({2, 4}), {}));
  EXPECT_FALSE(
      kernels::fusable_add_rms_norm(torch::zeros({2, 4}), torch::zeros({4, 2}), torch::ones({4})));
}

// ---- bfloat16 -----------------------------------------------------------------------------------
// Each op on bfloat16 rows computes in float32 and rounds each output once. Checked per element,
// on whatever instruction set ATen's capability picks (.ci/run's lowered passes run these in
// each class), against two references:
//   exact  the op in float64 from the same bfloat16 inputs and the same bfloat16 incoming
//          gradient. Rounded once, every output is within half a bfloat16 ulp (at most 2^-8 of
//          its value: 8 significant bits) of the float32 result, which is within `slack`
//          (relative) of the exact one, plus a floor tied to the largest value for elements that
//          cancel. An op that rounded twice (an intermediate stored as bfloat16) is up to 2^-7
//          off, and fails this.
//   ATen   the composition that bf16 autocast runs without normlab's kernels, rounding
//          `aten_roundings` times on the way, each rounding within 2^-8 of the output's scale:
//          within (aten_roundings + 1) x 2^-8 of ours, relative to the largest value (test::close;
//          per element, its roundings of intermediates that cancel would not be bounded).
// Outputs that are float32 (the loss, the residual stream) are held to `slack` alone.
namespace {

constexpr double kBf16Roundoff = 1.0 / 256;  // 2^-8: bfloat16's 8-bit significand, rounded once

struct Bf16Case {
  std::function<torch::Tensor(const std::vector<torch::Tensor>&)> ours, exact, aten;
  int aten_roundings;
  double slack, floor;
};

void expect_bf16_op(const Bf16Case& c, const std::vector<torch::Tensor>& inputs) {
  std::vector<torch::Tensor> in, in64, in_aten;
  for (const torch::Tensor& x : inputs) {
    const bool grad = x.is_floating_point();
    in.push_back(grad ? x.detach().clone().requires_grad_() : x);
    in64.push_back(grad ? x.detach().to(torch::kDouble).requires_grad_() : x);
    in_aten.push_back(grad ? x.detach().clone().requires_grad_() : x);
  }
  const auto leaves = [](const std::vector<torch::Tensor>& v) {
    std::vector<torch::Tensor> out;
    for (const torch::Tensor& x : v)
      if (x.requires_grad()) out.push_back(x);
    return out;
  };
  const torch::Tensor y = c.ours(in), y64 = c.exact(in64), ya = c.aten(in_aten);
  const torch::Tensor r = torch::randn(y64.sizes(), torch::kDouble).to(y.scalar_type());
  const auto g = torch::autograd::grad({y}, leaves(in), {r});
  const auto g64 = torch::autograd::grad({y64}, leaves(in64), {r.to(torch::kDouble)});
  const auto ga = torch::autograd::grad({ya}, leaves(in_aten), {r.to(ya.scalar_type())});
  const auto check = [&](const char* what, const torch::Tensor& a, const torch::Tensor& e,
                         const torch::Tensor& at) {
    const double once = a.scalar_type() == torch::kBFloat16 ? kBf16Roundoff : 0.0;
    EXPECT_TRUE(test::close_per_element(a.to(torch::kDouble), e, once + c.slack, c.floor))
        << what << " (" << a.scalar_type() << ") against the exact result";
    EXPECT_TRUE(test::close(a.to(torch::kDouble), at.to(torch::kDouble),
                            (c.aten_roundings + 1) * kBf16Roundoff + c.slack))
        << what << " against ATen's bf16 composition";
  };
  check("value", y, y64, ya);
  for (size_t i = 0; i < g.size(); ++i)
    check(("gradient " + std::to_string(i)).c_str(), g[i], g64[i], ga[i]);
}

torch::Tensor bf16_randn(std::vector<int64_t> shape, double scale = 1.0) {
  return (torch::randn(shape, torch::kDouble) * scale).to(torch::kBFloat16);
}

}  // namespace

TEST(KernelsBf16, SwiGluRoundsOnce) {
  std::cout << "bfloat16 rows on the float32 lanes here: " << kernels::vector_isa() << std::endl;
  torch::manual_seed(21);
  Bf16Case c;
  c.ours = [](const auto& in) { return kernels::swiglu(in[0]); };
  c.exact = [](const auto& in) { return swiglu_ref(in[0]); };
  c.aten = [](const auto& in) { return swiglu_ref(in[0]); };  // silu, then the product: 2
  c.aten_roundings = 2;
  c.slack = 2e-6;  // float32's exp (2 ulp), the products and the division
  c.floor = 1e-6;
  for (const int64_t F : {37, 48, 1376}) {
    SCOPED_TRACE("width " + std::to_string(F));
    const torch::Tensor u = bf16_randn({2, 5, 2 * F}, 3.0);
    ASSERT_EQ(kernels::swiglu(u).scalar_type(), torch::kBFloat16);
    expect_bf16_op(c, {u});
  }
}

TEST(KernelsBf16, RmsNormRoundsOnce) {
  torch::manual_seed(22);
  Bf16Case c;
  c.ours = [](const auto& in) { return kernels::rms_norm(in[0], in[1], 1e-5); };
  c.exact = [](const auto& in) { return rms_ref(in[0], in[1], 1e-5); };
  c.aten = [](const auto& in) {  // at::rms_norm on bfloat16: its own float32 inside, rounded once
    return at::rms_norm(in[0], {in[0].size(-1)}, in[1], 1e-5);
  };
  c.aten_roundings = 2;
  c.slack = 1e-5;  // the sum of squares over the row in float32
  c.floor = 1e-5;
  for (const int64_t D : {37, 512}) {
    SCOPED_TRACE("width " + std::to_string(D));
    expect_bf16_op(c, {bf16_randn({3, 11, D}, 2.0),
                       (torch::rand({D}, torch::kDouble) + 0.5).to(torch::kBFloat16)});
  }
}

TEST(KernelsBf16, RopeRoundsOnceWithFloat32OrBfloat16Tables) {
  torch::manual_seed(23);
  for (const auto table : {torch::kFloat, torch::kBFloat16}) {
    SCOPED_TRACE(table == torch::kFloat ? "float32 tables" : "bfloat16 tables");
    const torch::Tensor cos = torch::randn({9, 40}).to(table),
                        sin = torch::randn({9, 40}).to(table);
    Bf16Case c;
    c.ours = [&](const auto& in) { return kernels::rope(in[0], cos, sin); };
    c.exact = [&](const auto& in) {
      return rope_ref(in[0], cos.to(torch::kDouble), sin.to(torch::kDouble));
    };
    c.aten = [&](const auto& in) { return rope_ref(in[0], cos, sin).to(torch::kBFloat16); };
    c.aten_roundings = 3;  // two products and their sum
    c.slack = 1e-6;
    c.floor = 1e-6;
    expect_bf16_op(c, {bf16_randn({2, 9, 3, 40})});
    EXPECT_EQ(kernels::rope(bf16_randn({2, 9, 3, 40}), cos, sin).scalar_type(), torch::kBFloat16);
  }
}

// The loss of bfloat16 logits is float32, as the loss of the logits converted to float32 (the
// model's composition under autocast); their gradient is bfloat16, each entry rounded once, the
// target's entry too (rounding its softmax term first would lose every digit where p is near 1).
TEST(KernelsBf16, CrossEntropyOfBfloat16LogitsIsFloat32WithAGradientRoundedOnce) {
  torch::manual_seed(24);
  for (const int64_t V : {int64_t{37}, int64_t{4099}}) {
    SCOPED_TRACE("V " + std::to_string(V));
    const CrossEntropyCase cc(29, V, torch::kBFloat16);
    torch::Tensor logits = cc.logits.clone();
    logits[5][cc.targets[5].item<int64_t>()] = 60.0;  // a row whose target has p near 1
    Bf16Case c;
    c.ours = [&](const auto& in) { return kernels::cross_entropy(in[0], cc.targets); };
    c.exact = [&](const auto& in) { return torch::cross_entropy_loss(in[0], cc.targets); };
    c.aten = [&](const auto& in) {
      return torch::cross_entropy_loss(in[0].to(torch::kFloat), cc.targets);
    };
    c.aten_roundings = 1;  // the float32 gradient converted to bfloat16
    c.slack = 2e-5;        // as in float32: a few ulp of the exponentials and of lse
    c.floor = 1e-7;
    expect_bf16_op(c, {logits});
    EXPECT_EQ(kernels::cross_entropy(logits, cc.targets).scalar_type(), torch::kFloat);
  }
}

// Against SDPA: its math kernel in float64 (exact) and bf16 SDPA (ATen, what autocast runs,
// rounding the probabilities and the output: 2). float32 products over up to 300 terms:
// 5e-5 of the largest value, as in float32.
TEST(KernelsBf16, CausalAttentionComputesInFloat32AndRoundsOnce) {
  const auto sdpa = [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    return at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, /*is_causal=*/true, 0.125);
  };
  const auto heads = [](const torch::Tensor& x) { return x.transpose(1, 2); };
  for (const auto path : attention_paths()) {
    SCOPED_TRACE(path_name(path));
    for (const int64_t T : {37, 300}) {
      SCOPED_TRACE("length " + std::to_string(T));
      torch::manual_seed(25);
      Bf16Case c;
      c.ours = [&](const auto& in) {
        return kernels::causal_attention(heads(in[0]), heads(in[1]), heads(in[2]), 0.125, path);
      };
      c.exact = [&](const auto& in) { return sdpa(heads(in[0]), heads(in[1]), heads(in[2])); };
      c.aten = c.exact;
      c.aten_roundings = 2;
      c.slack = 0;
      c.floor = 5e-5;
      const auto make = [&] { return bf16_randn({2, T, 3, 64}, 2.0); };
      expect_bf16_op(c, {make(), make(), make()});
    }
  }
}

// The residual add and the norm after it, x float32 (the residual stream) and b bfloat16 (a
// sub-layer's output under autocast), or both bfloat16: r, n and the gradients against the
// formulas in float64 and against the composition (the add, then the norm).
TEST(KernelsBf16, AddRmsNormComputesInFloat32) {
  torch::manual_seed(26);
  for (const auto xt : {torch::kFloat, torch::kBFloat16}) {
    for (const double d : {1.0, 2.0 / 3.0}) {
      SCOPED_TRACE(std::string(xt == torch::kFloat ? "x float32" : "x bfloat16") + ", divisor " +
                   std::to_string(d));
      const torch::Tensor w = (torch::rand({40}) + 0.5);
      Bf16Case c;
      c.ours = [&](const auto& in) {
        EXPECT_TRUE(kernels::fusable_add_rms_norm(in[0], in[1], w));
        const auto [r, n] = kernels::add_rms_norm(in[0], in[1], d, w, 1e-5);
        return torch::cat({r.flatten(), n.flatten()});
      };
      c.exact = [&](const auto& in) {
        torch::Tensor r = in[0] + in[1] / d;
        // r is stored in x's dtype and the norm reads it as stored (the gradient passes the
        // rounding unchanged).
        r = r + (r.to(xt).to(torch::kDouble) - r).detach();
        return torch::cat({r.flatten(), rms_ref(r, w.to(torch::kDouble), 1e-5).flatten()});
      };
      c.aten = [&](const auto& in) {
        const torch::Tensor r = in[0] + in[1] / d;
        return torch::cat(
            {r.flatten(), at::rms_norm(r, {40}, w.to(r.scalar_type()), 1e-5).flatten()});
      };
      c.aten_roundings = 2;  // b / d, the add
      c.slack = 1e-5;
      c.floor = 1e-5;
      expect_bf16_op(c, {bf16_randn({3, 7, 40}).to(xt), bf16_randn({3, 7, 40})});
    }
  }
}
