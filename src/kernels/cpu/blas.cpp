#include "blas.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <climits>

#include "build_config.h"

#if NORMLAB_HAVE_BLAS_GEMM
// Exported by libtorch_cpu (MKL, statically linked) without an installed header; declared as
// ATen's own BLAS calls declare them (ATen/native/BlasKernel.cpp), with 32-bit integers. The
// build checks that they link (cmake/checks/blas_gemm.cpp).
extern "C" {
void sgemm_(char* transa, char* transb, int* m, int* n, int* k, float* alpha, const float* a,
            int* lda, const float* b, int* ldb, float* beta, float* c, int* ldc);
void dgemm_(char* transa, char* transb, int* m, int* n, int* k, double* alpha, const double* a,
            int* lda, const double* b, int* ldb, double* beta, double* c, int* ldc);
}
#endif

namespace normlab::kernels::cpu::blas {
#if NORMLAB_HAVE_BLAS_GEMM
namespace {

int as_int(int64_t v, const char* what) {
  TORCH_CHECK(v >= 0 && v <= INT_MAX, "blas::gemm: ", what, " ", v,
              " is past the BLAS's 32-bit integers");
  return static_cast<int>(v);
}

// Row-major c = op(a) op(b) is column-major c^T = op(b)^T op(a)^T: the operands swap, each
// keeps its own transposition, and a row stride is the column-major leading dimension.
template <class T, class Fn>
void row_major(Fn fortran_gemm, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
               T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
               int64_t ldc) {
  if (m == 0 || n == 0) return;
  char ta = trans_b ? 'T' : 'N', tb = trans_a ? 'T' : 'N';
  int mi = as_int(n, "n"), ni = as_int(m, "m"), ki = as_int(k, "k");
  // A BLAS checks every leading dimension against at least 1, also for an empty k.
  int la = as_int(std::max<int64_t>(ldb, 1), "ldb"), lb = as_int(std::max<int64_t>(lda, 1), "lda");
  int lc = as_int(std::max<int64_t>(ldc, 1), "ldc");
  fortran_gemm(&ta, &tb, &mi, &ni, &ki, &alpha, b, &la, a, &lb, &beta, c, &lc);
}

// The products a b and a^T b^T (a 2 x 3, b 3 x 2, small integers: exact in any order of sums)
// against the sums written out.
template <class T>
bool computes_known_products() {
  const T a[6] = {1, 2, 3, 4, 5, 6};     // 2 x 3
  const T b[6] = {7, 8, 9, 10, 11, 12};  // 3 x 2
  T ab[4] = {-1, -1, -1, -1}, atbt[9];
  gemm(false, false, 2, 2, 3, T(1), a, 3, b, 2, T(0), ab, 2);
  gemm(true, true, 3, 3, 2, T(1), a, 3, b, 2, T(0), atbt, 3);
  const T want_ab[4] = {58, 64, 139, 154};
  for (int i = 0; i < 4; ++i)
    if (ab[i] != want_ab[i]) return false;
  // (a^T b^T)[i][j] = sum_r a[r][i] b[j][r]
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      T want = 0;
      for (int r = 0; r < 2; ++r) want += a[r * 3 + i] * b[j * 2 + r];
      if (atbt[i * 3 + j] != want) return false;
    }
  return true;
}

}  // namespace
#endif

bool linked() { return NORMLAB_HAVE_BLAS_GEMM; }

bool available() {
#if NORMLAB_HAVE_BLAS_GEMM
  static const bool works = computes_known_products<float>() && computes_known_products<double>();
  return works;
#else
  return false;
#endif
}

#if NORMLAB_HAVE_BLAS_GEMM
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  row_major<float>(sgemm_, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc) {
  row_major<double>(dgemm_, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
#else
void gemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
          int64_t, float, float*, int64_t) {
  TORCH_CHECK(false, "blas::gemm: this LibTorch exports no BLAS GEMM (see blas::available)");
}

void gemm(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*,
          int64_t, double, double*, int64_t) {
  TORCH_CHECK(false, "blas::gemm: this LibTorch exports no BLAS GEMM (see blas::available)");
}
#endif

}  // namespace normlab::kernels::cpu::blas
