// What a run computes in: train.precision resolved against the device (and, on a CPU, against
// whether it computes bf16 natively and how fast, measured). One policy on CPU and CUDA: under
// bf16 the weights and the optimizer state stay fp32 and the matmuls run under bf16 autocast
// (nn/autocast.h).
#pragma once

#include <torch/types.h>

#include <optional>
#include <string>

#include "normlab/config/enums.h"
#include "normlab/train/precision_probe.h"
#include "normlab/util/cpu_class.h"

namespace normlab {

struct PrecisionChoice {
  bool bf16 = false;    // bf16 autocast on the run's device, fp32 master weights
  bool fp64 = false;    // weights, optimizer state and activations in float64
  std::string name;     // "bf16", "fp32" or "fp64"
  std::string reason;   // what and why, for the run log: "bf16 autocast on the CPU with fp32
                        // weights and optimizer state; train.precision = auto and this CPU
                        // computes bf16 natively (AMX); measured here ..."
  std::string warning;  // non-empty when the choice runs but slowly: bf16 emulated on this CPU
                        // (how much slower), or native bf16 measured slower than fp32 here
  std::optional<PrecisionTiming> timing;  // the measurement the choice rests on, if any
};

/// Whether choose_precision wants a measurement (precision_probe.h) for `requested`: on a CPU
/// that computes bf16 natively, for auto (which picks the faster) and bf16 (whose warning says
/// whether it is slower). Never on CUDA (bf16) or where bf16 is emulated (fp32 for auto; the
/// warning gives the measured size of the emulation's slowdown).
bool precision_needs_timing(Precision requested, const torch::Device& device, const CpuClass& cpu);

/// Resolves `requested` for `device`. `cpu` is the CPU's class as the kernels see it
/// (util/cpu_class.h; its bf16 is "AMX", "AVX512-BF16", or "" for neither); it matters only on
/// the CPU. `timing`: this model's bf16 and fp32 GEMMs as measured on this CPU, where
/// precision_needs_timing asks for it (nullptr: not measured).
///   auto  bf16 on CUDA; on a CPU with native bf16, the faster of the two as measured (fp32,
///         saying so, without a measurement); fp32 where bf16 is emulated
///   bf16  runs anywhere; warns where it is emulated (correct, and 4x to 600x slower than fp32
///         in matmuls) or measured slower than fp32 here
///   fp32, fp64  as asked
PrecisionChoice choose_precision(Precision requested, const torch::Device& device,
                                 const CpuClass& cpu, const PrecisionTiming* timing = nullptr);

/// "bf16 41.2 ms, fp32 60.3 ms (bf16 0.68x fp32) for this model's GEMMs on 576 rows, forward
/// and backward, measured here" (or "cached").
std::string describe_timing(const PrecisionTiming& t);

}  // namespace normlab
