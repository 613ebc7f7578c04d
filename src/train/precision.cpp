#include "normlab/train/precision.h"

namespace normlab {
namespace {

// docs/performance-cpu.md, "CPU classes": the AVX512-BF16 class simulated on a Xeon with AMX.
constexpr const char* kAvx512Bf16Step =
    "a training step at d_model 512 took 1.46x its fp32 time in bf16";

}  // namespace

PrecisionChoice choose_precision(Precision requested, const torch::Device& device,
                                 const CpuClass& cpu) {
  const std::string& cpu_bf16 = cpu.bf16;
  PrecisionChoice c;
  const std::string where = device.is_cuda() ? "CUDA" : "the CPU";
  const bool native = device.is_cuda() || !cpu_bf16.empty();
  // auto takes bf16 where it is faster than fp32: on CUDA and with AMX. AVX512-BF16 without AMX
  // computes bf16 natively, yet its bf16 matmuls are slower than MKL's fp32 ones.
  const bool faster = device.is_cuda() || cpu_bf16 == "AMX";
  const std::string how = device.is_cuda()   ? "CUDA computes bf16 natively"
                          : cpu_bf16.empty() ? "bf16 is not native here (oneDNN " +
                                                   (cpu.onednn.empty() ? "unknown" : cpu.onednn) +
                                                   ": no AMX, no AVX512-BF16)"
                                             : "this CPU computes bf16 natively (" + cpu_bf16 + ")";
  switch (requested) {
    case Precision::Fp64:
      c.fp64 = true;
      c.name = "fp64";
      c.reason = "train.precision = fp64";
      break;
    case Precision::Fp32:
      c.name = "fp32";
      c.reason = "train.precision = fp32";
      break;
    case Precision::Bf16:
      c.bf16 = true;
      c.name = "bf16";
      c.reason = "train.precision = bf16; " + how;
      if (!native)
        c.warning =
            "train.precision = bf16 on a CPU without native bf16 (no AMX, no "
            "AVX512-BF16 as oneDNN runs here: " +
            (cpu.onednn.empty() ? std::string("unknown") : cpu.onednn) +
            "): bf16 is emulated, correct but " + bf16_emulation_cost(cpu) +
            "; train.precision = fp32 (or auto) is faster here";
      else if (!faster)
        c.warning =
            "train.precision = bf16 with AVX512-BF16 and no AMX: native, but slower than "
            "fp32 here (" +
            std::string(kAvx512Bf16Step) + "); train.precision = fp32 (or auto) is faster";
      break;
    case Precision::Auto:
      c.bf16 = faster;
      c.name = faster ? "bf16" : "fp32";
      c.reason = "train.precision = auto and " + how;
      if (native && !faster)
        c.reason += ", but slower than fp32 (" + std::string(kAvx512Bf16Step) + ")";
      break;
  }
  c.reason = (c.bf16 ? "bf16 autocast on " + where + " with fp32 weights and optimizer state"
                     : c.name + " on " + where) +
             "; " + c.reason;
  return c;
}

}  // namespace normlab
