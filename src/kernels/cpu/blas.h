// Row-major GEMMs on raw pointers through the Fortran BLAS that LibTorch carries (MKL's sgemm_
// and dgemm_ in the x86-64 wheels), for a kernel that makes many small products inside its own
// parallel loop (kernels::causal_attention, per head), where an ATen op per product would cost
// more than the product and ATen's batched ops wait for every thread between products. Called
// on one of ATen's threads, the BLAS runs on that thread alone.
//
// No installed header declares these symbols (docs/dependencies.md): the build checks that they
// link (NORMLAB_HAVE_BLAS_GEMM), and available() checks known products once at run time. A
// caller falls back to ATen's ops where it is false.
#pragma once
#include <cstdint>

namespace normlab::kernels::cpu::blas {

/// True when this build links the BLAS GEMMs (the configure check, NORMLAB_HAVE_BLAS_GEMM).
bool linked();

/// True when gemm below runs: the BLAS links and computed known products exactly.
bool available();

/// c (m x n, rows ldc apart) = alpha op(a) op(b) + beta c, every matrix row-major with the given
/// row stride; op(x) is x transposed when trans_x. With beta 0, c is only written (NaN in it
/// does not propagate). Throws when a size or stride is past the BLAS's 32-bit integers.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc);

}  // namespace normlab::kernels::cpu::blas
