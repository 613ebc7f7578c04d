#include "normlab/util/cpu_class.h"

#include <ATen/Context.h>
#include <ATen/Version.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/cpu/Utils.h>

#include <algorithm>
#include <cctype>
#include <initializer_list>

namespace normlab {
namespace {

// oneDNN's x86 instruction sets, lowest first, with the masks of dnnl_cpu_isa_t (oneDNN 3.x,
// dnnl_types.h): a level runs where its mask is a subset of the CPU's and of the limit's.
// Aliases name the same mask (AVX512_CORE_FP16 is AVX10_1_512).
struct IsaLevel {
  const char* name;
  unsigned mask;
};
constexpr IsaLevel kLevels[] = {
    {"SSE41", 0x1},
    {"AVX", 0x3},
    {"AVX2", 0x7},
    {"AVX2_VNNI", 0xf},
    {"AVX2_VNNI_2", 0x1f},
    {"AVX512_CORE", 0x27},
    {"AVX512_CORE_VNNI", 0x67},
    {"AVX512_CORE_BF16", 0xe7},
    {"AVX512_CORE_FP16", 0x1ef},
    {"AVX512_CORE_AMX", 0xfef},
    {"AVX512_CORE_AMX_FP16", 0x1fef},
};
constexpr IsaLevel kAliases[] = {
    {"AVX10_1_512", 0x1ef}, {"AVX10_1_512_AMX", 0xfef}, {"AVX10_1_512_AMX_FP16", 0x1fef},
    {"ALL", 0xffffffffu},   {"DEFAULT", 0xffffffffu},
};

bool subset(unsigned a, unsigned b) { return (a & b) == a; }

// The mask of the CPU, from the flags ATen reads (cpuinfo), as oneDNN's own checks group them.
unsigned hardware_mask() {
  const auto caps = at::cpu::get_cpu_capabilities();
  const auto has = [&](std::initializer_list<const char*> names) {
    return std::all_of(names.begin(), names.end(), [&](const char* n) {
      const auto it = caps.find(n);
      return it != caps.end() && it->second.isBool() && it->second.toBool();
    });
  };
  unsigned best = 0;
  const auto level = [&](const char* name) {
    for (const IsaLevel& l : kLevels)
      if (std::string(name) == l.name) best = l.mask;
  };
  if (has({"sse4_1"})) level("SSE41");
  if (has({"avx"})) level("AVX");
  if (has({"avx2", "fma3"})) level("AVX2");
  if (has({"avx2", "fma3", "avx_vnni"})) level("AVX2_VNNI");
  if (has({"avx2", "fma3", "avx_vnni", "avx_ne_convert", "avx_vnni_int8"})) level("AVX2_VNNI_2");
  if (has({"avx512_f", "avx512_bw", "avx512_vl", "avx512_dq"})) {
    level("AVX512_CORE");
    if (has({"avx512_vnni"})) level("AVX512_CORE_VNNI");
    if (has({"avx512_vnni", "avx512_bf16"})) level("AVX512_CORE_BF16");
    if (has({"avx512_vnni", "avx512_bf16", "avx512_fp16"})) level("AVX512_CORE_FP16");
    // Linux hands out the AMX tile state on request (arch_prctl); without it AMX would fault.
    if (has({"avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"}) &&
        at::cpu::init_amx()) {
      level("AVX512_CORE_AMX");
      if (has({"amx_fp16"})) level("AVX512_CORE_AMX_FP16");
    }
  }
  return best;
}

// The mask a limit names; all bits for none or a name oneDNN ignores (it keeps its default).
unsigned limit_mask(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  for (const IsaLevel& l : kLevels)
    if (name == l.name) return l.mask;
  for (const IsaLevel& l : kAliases)
    if (name == l.name) return l.mask;
  return 0xffffffffu;
}

// The highest named level within `mask`; "" when none is.
std::string level_name(unsigned mask) {
  std::string name;
  for (const IsaLevel& l : kLevels)
    if (subset(l.mask, mask)) name = l.name;
  return name;
}

bool at_least(const std::string& isa, const char* level) {
  for (const IsaLevel& l : kLevels)
    if (isa == l.name) return subset(limit_mask(level), l.mask);
  return false;
}

}  // namespace

bool onednn_matmul_usable() {
  static const bool usable = [] {
    if (!at::hasMKLDNN()) return false;
    const auto op =
        c10::Dispatcher::singleton().findSchema({"mkldnn::_is_mkldnn_bf16_supported", ""});
    if (!op) return false;
    return op->typed<bool()>().call();
  }();
  return usable;
}

CpuClass cpu_class(const std::string& onednn_max_isa) {
  CpuClass c;
  const unsigned hw = hardware_mask();
  c.hardware = level_name(hw);
  c.onednn_limit = onednn_max_isa;
  c.onednn = level_name(hw & limit_mask(onednn_max_isa));
  c.aten = at::get_cpu_capability();
  c.onednn_matmul = onednn_matmul_usable();
  // oneDNN's own answer wins where it is lower than the limit says (a limit set some other
  // way): below its bf16 level, the best level under AVX512_CORE.
  if (!c.onednn_matmul && at_least(c.onednn, "AVX512_CORE"))
    c.onednn = level_name(hw & limit_mask(onednn_max_isa) & limit_mask("AVX2_VNNI"));
  if (at_least(c.onednn, "AVX512_CORE_AMX"))
    c.bf16 = "AMX";
  else if (at_least(c.onednn, "AVX512_CORE_BF16"))
    c.bf16 = "AVX512-BF16";
  return c;
}

std::string CpuClass::describe() const {
  std::string s = "oneDNN " + (onednn.empty() ? std::string("(none)") : onednn);
  if (onednn != hardware)
    s += " (" + (onednn_limit.empty() ? std::string() : "limit " + onednn_limit + "; ") +
         "the CPU has " + hardware + ")";
  s += ", ATen " + aten + ", linear through " + linear() + ", bf16 " +
       (bf16.empty() ? "emulated" : "native (" + bf16 + ")");
  return s;
}

std::string bf16_emulation_cost(const CpuClass& cpu) {
  if (!cpu.bf16.empty()) return "";
  // docs/setup.md, "CPU classes": 4x to 14x at oneDNN AVX512_CORE; below it 95x to 218x at
  // AVX2 and 34x to 231x at SSE41 (512^3, a Xeon with AMX lowered), 600x at 2048^3 on a real
  // AVX2 EPYC.
  return at_least(cpu.onednn, "AVX512_CORE") ? "4x to 14x slower than fp32 in matmuls"
                                             : "30x to 600x slower than fp32 in matmuls";
}

}  // namespace normlab
