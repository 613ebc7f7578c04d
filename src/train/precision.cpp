#include "normlab/train/precision.h"

#include <cstdio>

namespace normlab {

bool precision_needs_timing(Precision requested, const torch::Device& device, const CpuClass& cpu) {
  return !device.is_cuda() && !cpu.bf16.empty() &&
         (requested == Precision::Auto || requested == Precision::Bf16);
}

std::string describe_timing(const PrecisionTiming& t) {
  char buf[200];
  std::snprintf(
      buf, sizeof buf,
      "bf16 %.1f ms, fp32 %.1f ms (bf16 %.2fx fp32) for this model's GEMMs on %lld "
      "rows, forward and backward, %s",
      t.bf16_seconds * 1e3, t.fp32_seconds * 1e3, t.bf16_seconds / t.fp32_seconds,
      static_cast<long long>(t.rows),
      t.source == "cached" ? "measured on this machine earlier (cached)" : "measured here");
  return buf;
}

PrecisionChoice choose_precision(Precision requested, const torch::Device& device,
                                 const CpuClass& cpu, const PrecisionTiming* timing) {
  const std::string& cpu_bf16 = cpu.bf16;
  PrecisionChoice c;
  const std::string where = device.is_cuda() ? "CUDA" : "the CPU";
  const bool native = device.is_cuda() || !cpu_bf16.empty();
  const bool measured = timing && !device.is_cuda() && native;
  if (measured) c.timing = *timing;
  // auto takes bf16 where it is faster than fp32: on CUDA, and on a CPU with native bf16 where
  // this model's GEMMs measured faster in bf16.
  const bool faster = device.is_cuda() || (measured && timing->bf16_faster());
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
      if (measured) c.reason += "; " + describe_timing(*timing);
      if (!native)
        c.warning =
            "train.precision = bf16 on a CPU without native bf16 (no AMX, no "
            "AVX512-BF16 as oneDNN runs here: " +
            (cpu.onednn.empty() ? std::string("unknown") : cpu.onednn) +
            "): bf16 is emulated, correct but " + bf16_emulation_cost(cpu) +
            "; train.precision = fp32 (or auto) is faster here";
      else if (measured && !faster)
        c.warning = "train.precision = bf16 although fp32 is faster for this model on this CPU (" +
                    describe_timing(*timing) + "); train.precision = auto (or fp32) takes fp32";
      break;
    case Precision::Auto:
      c.bf16 = faster;
      c.name = faster ? "bf16" : "fp32";
      c.reason = "train.precision = auto and " + how;
      if (measured)
        c.reason += std::string(faster ? ", and faster than fp32" : ", but slower than fp32") +
                    " for this model (" + describe_timing(*timing) + ")";
      else if (native && !device.is_cuda())
        c.reason +=
            ": fp32 until bf16 is measured faster for a model (each run measures its own "
            "at the start, or reads it from the cache)";
      break;
  }
  c.reason = (c.bf16 ? "bf16 autocast on " + where + " with fp32 weights and optimizer state"
                     : c.name + " on " + where) +
             "; " + c.reason;
  return c;
}

}  // namespace normlab
