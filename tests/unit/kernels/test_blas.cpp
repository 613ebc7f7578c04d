// The private BLAS GEMMs of the causal attention's per-head path (src/kernels/cpu/blas.h).
#include <torch/torch.h>

#include <cmath>
#include <string>

#include "kernels/cpu/blas.h"
#include "support.h"

using normlab::test::close;
namespace blas = normlab::kernels::cpu::blas;

namespace {

// The BLAS products the per-head attention makes, against at::mm: every transposition, row
// strides wider than the rows, beta 0 over NaN (written, not read) and beta 1 (added to).
template <class T>
void expect_blas_gemm_matches_mm(torch::ScalarType dtype, double tol) {
  const int64_t m = 5, n = 7, k = 3, pad = 2;
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      SCOPED_TRACE(std::string(ta ? "a^T" : "a") + (tb ? " b^T" : " b"));
      // Operands stored as the BLAS reads them, each row `pad` wider than it is used.
      const torch::Tensor a_store = torch::randn({ta ? k : m, (ta ? m : k) + pad}, dtype);
      const torch::Tensor b_store = torch::randn({tb ? n : k, (tb ? k : n) + pad}, dtype);
      const torch::Tensor a = a_store.narrow(1, 0, ta ? m : k),
                          b = b_store.narrow(1, 0, tb ? k : n);
      const torch::Tensor want = at::mm(ta ? a.t() : a, tb ? b.t() : b);
      torch::Tensor c = torch::full({m, n + pad}, std::nan(""), dtype);
      blas::gemm(ta, tb, m, n, k, T(1), a_store.data_ptr<T>(), a_store.size(1),
                 b_store.data_ptr<T>(), b_store.size(1), T(0), c.data_ptr<T>(), n + pad);
      EXPECT_TRUE(close(c.narrow(1, 0, n), want, tol)) << "beta 0";
      EXPECT_TRUE(torch::isnan(c.narrow(1, n, pad)).all().item<bool>()) << "past the rows";
      blas::gemm(ta, tb, m, n, k, T(2), a_store.data_ptr<T>(), a_store.size(1),
                 b_store.data_ptr<T>(), b_store.size(1), T(1), c.data_ptr<T>(), n + pad);
      EXPECT_TRUE(close(c.narrow(1, 0, n), want * 3, tol)) << "beta 1, alpha 2";
    }
}

}  // namespace

TEST(KernelsBlas, GemmMatchesMm) {
  // A BLAS that links must pass the run-time check (else the per-head attention never runs).
  EXPECT_EQ(blas::available(), blas::linked());
  if (!blas::available()) GTEST_SKIP() << "no BLAS GEMM in this LibTorch";
  expect_blas_gemm_matches_mm<double>(torch::kDouble, 1e-12);
  expect_blas_gemm_matches_mm<float>(torch::kFloat, 1e-5);
  EXPECT_THROW(blas::gemm(false, false, int64_t{1} << 31, 1, 1, 1.0f, nullptr, 1, nullptr, 1, 0.0f,
                          nullptr, 1),
               c10::Error);
}
