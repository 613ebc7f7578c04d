// The fused residual-add + RMSNorm forward and backward on CUDA (launchers.h).
// One thread block per row at a time (grid-stride over rows), fp32 arithmetic whatever the
// storage dtype, one block-wide reduction per row. The chain they replace (add, square, mean,
// rsqrt, two multiplies, and in the backward as many again) is memory-bound: each kernel reads
// and writes every element once, where ATen's composition makes one pass per op.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/launchers.h"

namespace normlab::kernels::cuda {

bool compiled() { return true; }

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;  // rows per launch beyond this are strided

__device__ __forceinline__ float load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16(v);
}

// The sum of v over the block, returned to every thread. `scratch` holds 32 floats.
__device__ float block_sum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();  // the previous call's readers are done with scratch
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <class S, class B>
__global__ void add_rms_norm_fwd(const S* __restrict__ x, const B* __restrict__ b,
                                 const float* __restrict__ w, S* __restrict__ r, S* __restrict__ n,
                                 float* __restrict__ rstd, int64_t rows, int cols, float inv_div,
                                 float eps) {
  __shared__ float scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * cols;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      store(r, base + c, load(x, base + c) + load(b, base + c) * inv_div);
      const float v = load(r, base + c);  // the stored (rounded) value, as the composition norms it
      ss += v * v;
    }
    const float rs = rsqrtf(block_sum(ss, scratch) / static_cast<float>(cols) + eps);
    if (threadIdx.x == 0) rstd[row] = rs;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
      store(n, base + c, load(r, base + c) * rs * w[c]);
  }
}

template <class S, class B>
__global__ void add_rms_norm_bwd(const S* __restrict__ r, const float* __restrict__ rstd,
                                 const float* __restrict__ w, const S* __restrict__ dn,
                                 const S* __restrict__ dr_in, S* __restrict__ gx,
                                 B* __restrict__ gb, float* __restrict__ gw_partial, int64_t rows,
                                 int cols, float inv_div) {
  __shared__ float scratch[32];
  float* gw = gw_partial + static_cast<int64_t>(blockIdx.x) * cols;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * cols;
    const float rs = rstd[row];
    float dot = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
      dot += load(dn, base + c) * w[c] * load(r, base + c);
    const float m = block_sum(dot, scratch) / static_cast<float>(cols);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      const float rv = load(r, base + c), g = load(dn, base + c);
      float d = rs * (g * w[c] - rv * rs * rs * m);
      if (dr_in) d += load(dr_in, base + c);
      store(gx, base + c, d);
      store(gb, base + c, d * inv_div);
      gw[c] += g * rv * rs;  // this block's columns: no other block writes them
    }
  }
}

int blocks_for(int64_t rows) { return static_cast<int>(std::min<int64_t>(rows, kMaxBlocks)); }

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("normlab CUDA kernel ") + what + ": " +
                             cudaGetErrorString(e));
}

// Calls f(S*, B*) with the storage types of s and bt.
template <class F>
void with_types(Dtype s, Dtype bt, F&& f) {
  using bf16 = __nv_bfloat16;
  if (s == Dtype::F32 && bt == Dtype::F32)
    f(static_cast<float*>(nullptr), static_cast<float*>(nullptr));
  else if (s == Dtype::F32 && bt == Dtype::BF16)
    f(static_cast<float*>(nullptr), static_cast<bf16*>(nullptr));
  else if (s == Dtype::BF16 && bt == Dtype::BF16)
    f(static_cast<bf16*>(nullptr), static_cast<bf16*>(nullptr));
  else
    throw std::invalid_argument(
        "normlab add_rms_norm: a bf16 residual with an fp32 branch is not fused");
}

}  // namespace

void add_rms_norm_forward(const void* x, Dtype s, const void* b, Dtype bt, const float* w, void* r,
                          void* n, float* rstd, int64_t rows, int cols, float inv_div, float eps,
                          void* stream) {
  if (rows == 0) return;
  with_types(s, bt, [&](auto* s_tag, auto* b_tag) {
    using S = std::remove_pointer_t<decltype(s_tag)>;
    using B = std::remove_pointer_t<decltype(b_tag)>;
    add_rms_norm_fwd<S, B><<<blocks_for(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const S*>(x), static_cast<const B*>(b), w, static_cast<S*>(r),
        static_cast<S*>(n), rstd, rows, cols, inv_div, eps);
  });
  check_launch("add_rms_norm forward");
}

int add_rms_norm_backward_blocks(int64_t rows) { return std::max(1, blocks_for(rows)); }

void add_rms_norm_backward(const void* r, const float* rstd, const float* w, const void* dn,
                           const void* dr_in, Dtype s, void* gx, void* gb, Dtype bt,
                           float* gw_partial, int64_t rows, int cols, float inv_div, void* stream) {
  if (rows == 0) return;
  with_types(s, bt, [&](auto* s_tag, auto* b_tag) {
    using S = std::remove_pointer_t<decltype(s_tag)>;
    using B = std::remove_pointer_t<decltype(b_tag)>;
    add_rms_norm_bwd<S, B><<<blocks_for(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const S*>(r), rstd, w, static_cast<const S*>(dn), static_cast<const S*>(dr_in),
        static_cast<S*>(gx), static_cast<B*>(gb), gw_partial, rows, cols, inv_div);
  });
  check_launch("add_rms_norm backward");
}

}  // namespace normlab::kernels::cuda
