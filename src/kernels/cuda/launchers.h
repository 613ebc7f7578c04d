// The launchers of normlab's own CUDA kernels (add_rms_norm.cu, compiled by nvcc for
// NORMLAB_CUDA_ARCHS when NORMLAB_CUDA is on). Private to the kernels wing: callers go through
// the public ops that dispatch to them (normlab/kernels/ops.h). The launchers
// take raw device pointers and a cudaStream_t passed as void*, so that nvcc never compiles
// LibTorch's headers; they throw std::runtime_error when a launch fails.
#pragma once

#include <cstdint>

namespace normlab::kernels::cuda {

/// True: the kernels library was compiled and linked into this build.
bool compiled();

enum class Dtype { F32, BF16 };

/// The residual add and the RMSNorm after it, in one pass over each row of `cols` elements:
///   r = x + b * inv_div            stored in x's dtype `s` (b has dtype `bt`)
///   n = w * r * rstd,  rstd = rsqrt(mean(r^2) + eps)     in fp32, stored in dtype `s`
/// rstd (rows, fp32) is kept for the backward. w is fp32 (cols).
void add_rms_norm_forward(const void* x, Dtype s, const void* b, Dtype bt, const float* w, void* r,
                          void* n, float* rstd, int64_t rows, int cols, float inv_div, float eps,
                          void* stream);

/// Rows of the fp32 partial-sum buffer the backward needs for the gain's gradient: the
/// gradient of w is gw_partial.sum(0) over add_rms_norm_backward_blocks(rows) x cols.
int add_rms_norm_backward_blocks(int64_t rows);

/// Gradients of add_rms_norm_forward, given the saved r and rstd: with dn the gradient of n and
/// dr_in that of r (may be null),
///   dr = dr_in + rstd * (dn * w - r * rstd^2 * mean(dn * w * r))
///   gx = dr (dtype s),  gb = dr * inv_div (dtype bt),  gw_partial[block] += dn * r * rstd
/// gw_partial must hold add_rms_norm_backward_blocks(rows) x cols zeros.
void add_rms_norm_backward(const void* r, const float* rstd, const float* w, const void* dn,
                           const void* dr_in, Dtype s, void* gx, void* gb, Dtype bt,
                           float* gw_partial, int64_t rows, int cols, float inv_div, void* stream);

}  // namespace normlab::kernels::cuda
