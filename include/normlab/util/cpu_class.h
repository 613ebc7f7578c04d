// The CPU class as LibTorch's kernels see it, and what normlab chooses from it.
//
// Three libraries inside LibTorch read the CPU, each for itself:
//   ATen's vector kernels    AVX512, AVX2 or DEFAULT (portable); ATEN_CPU_CAPABILITY lowers them
//   oneDNN (matmuls, bf16)   its instruction set, e.g. AVX512_CORE_AMX, AVX2, SSE41;
//                            ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) lowers it
//   MKL (fp32 GEMMs)         MKL_ENABLE_INSTRUCTIONS lowers it; normlab makes no choice from it
// normlab's own choices follow what the kernels see, not the CPU's flags alone, so that a CPU
// simulated by lowering them together (tools/simulate_cpu.sh) behaves as a real CPU of its class:
//   the linear path   oneDNN's matmul where LibTorch's own check lets it run, else ATen's
//   bf16              native (AMX, AVX512-BF16) where oneDNN runs at that level, else emulated
//                     (correct, and far slower than fp32); train.precision = auto measures
//                     bf16 against fp32 where it is native (train/precision.h)
// LibTorch does not export oneDNN's query of its effective ISA, so the limit is an argument:
// the program reads the variable (as oneDNN does) and passes it.
#pragma once

#include <string>

namespace normlab {

struct CpuClass {
  std::string hardware;        // the best oneDNN ISA this CPU has, from its flags ("AVX2", ...)
  std::string onednn_limit;    // the limit asked for ("" for none, or one oneDNN ignores)
  std::string onednn;          // the ISA oneDNN runs with: the best one within both
  std::string aten;            // ATen's CPU capability now: "AVX512", "AVX2" or "DEFAULT"
  bool onednn_matmul = false;  // LibTorch lets its oneDNN matmul run here (its check passes)
  std::string bf16;            // "AMX", "AVX512-BF16", or "" when bf16 is emulated

  /// "oneDNN" or "ATen": the path of normlab's fp32 linear layers on the CPU.
  std::string linear() const { return onednn_matmul ? "oneDNN" : "ATen"; }
  /// One line: "oneDNN AVX2 (limit AVX2; the CPU has AVX512_CORE_AMX), ATen AVX2, linear
  /// through ATen, bf16 emulated".
  std::string describe() const;
};

/// The class of this CPU under the oneDNN limit `onednn_max_isa` (the value of
/// ONEDNN_MAX_CPU_ISA, else DNNL_MAX_CPU_ISA, else ""; any case, as oneDNN reads it).
CpuClass cpu_class(const std::string& onednn_max_isa = "");

/// Whether LibTorch's oneDNN matmul runs on this CPU as oneDNN sees it: LibTorch refuses it,
/// for fp32 too, below oneDNN's bf16 level (AVX512_CORE, or AVX2_VNNI_2). Asked once, through
/// the dispatcher's mkldnn::_is_mkldnn_bf16_supported (the check the matmul itself makes);
/// false where the operator is missing or LibTorch has no oneDNN.
bool onednn_matmul_usable();

/// The matmul slowdown of bf16 against fp32 on a CPU without native bf16, as a phrase for
/// warnings, as measured (docs/setup.md, "CPU classes"): "30x to 600x slower than fp32 in
/// matmuls" when oneDNN runs below AVX512_CORE, "4x to 14x slower ..." at AVX512_CORE; "" where
/// bf16 is native.
std::string bf16_emulation_cost(const CpuClass& cpu);

}  // namespace normlab
