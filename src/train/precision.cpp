#include "normlab/train/precision.h"

namespace normlab {

PrecisionChoice choose_precision(Precision requested, const torch::Device& device,
                                 const CpuClass& cpu) {
  const std::string& cpu_bf16 = cpu.bf16;
  PrecisionChoice c;
  const std::string where = device.is_cuda() ? "CUDA" : "the CPU";
  const bool native = device.is_cuda() || !cpu_bf16.empty();
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
      break;
    case Precision::Auto:
      c.bf16 = native;
      c.name = native ? "bf16" : "fp32";
      c.reason = "train.precision = auto and " + how;
      break;
  }
  c.reason = (c.bf16 ? "bf16 autocast on " + where + " with fp32 weights and optimizer state"
                     : c.name + " on " + where) +
             "; " + c.reason;
  return c;
}

}  // namespace normlab
