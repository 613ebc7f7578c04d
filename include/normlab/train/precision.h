// What a run computes in: train.precision resolved against the device (and, on a CPU, against
// whether it computes bf16 natively). One policy on CPU and CUDA: under bf16 the weights and
// the optimizer state stay fp32 and the matmuls run under bf16 autocast (nn/autocast.h).
#pragma once

#include <torch/types.h>

#include <string>

#include "normlab/config/enums.h"
#include "normlab/util/cpu_class.h"

namespace normlab {

struct PrecisionChoice {
  bool bf16 = false;    // bf16 autocast on the run's device, fp32 master weights
  bool fp64 = false;    // weights, optimizer state and activations in float64
  std::string name;     // "bf16", "fp32" or "fp64"
  std::string reason;   // what and why, for the run log: "bf16 autocast on the CPU with fp32
                        // weights and optimizer state; train.precision = auto and this CPU
                        // computes bf16 natively (AMX)"
  std::string warning;  // non-empty when the choice runs but slowly (bf16 emulated on this
                        // CPU: how much slower)
};

/// Resolves `requested` for `device`. `cpu` is the CPU's class as the kernels see it
/// (util/cpu_class.h; its bf16 is "AMX", "AVX512-BF16", or "" for neither); it matters only on
/// the CPU. auto: bf16 on CUDA and on a CPU with AMX, else fp32 (AVX512-BF16 without AMX computes
/// bf16 natively but more slowly than fp32: auto keeps fp32 there and says why). bf16 runs
/// anywhere; on a CPU without native bf16 it is emulated (correct, and 4x to 600x slower than fp32
/// in matmuls) and the warning gives the size of the slowdown.
PrecisionChoice choose_precision(Precision requested, const torch::Device& device,
                                 const CpuClass& cpu);

}  // namespace normlab
