// train.precision resolved against the device (train/precision.h): auto is bf16 on CUDA and on a
// CPU with native bf16 (AMX, AVX512-BF16), fp32 elsewhere; an explicit bf16 runs anywhere, with
// a warning where it is emulated.
#include <gmock/gmock.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "normlab/train/precision.h"
#include "normlab/util/cpu_class.h"

using namespace normlab;
using testing::HasSubstr;

namespace {
// A CPU class whose oneDNN runs at `onednn` with bf16 `how` ("" emulated).
CpuClass cpu_with(const std::string& how, const std::string& onednn = "AVX2") {
  CpuClass c;
  c.bf16 = how;
  c.onednn = how.empty() ? onednn : "AVX512_CORE_AMX";
  return c;
}
}  // namespace

TEST(Bf16Precision, AutoIsBf16WhereTheCpuComputesItNativelyAndFaster) {
  const torch::Device cpu(torch::kCPU);
  const PrecisionChoice amx = choose_precision(Precision::Auto, cpu, cpu_with("AMX"));
  EXPECT_TRUE(amx.bf16);
  EXPECT_FALSE(amx.fp64);
  EXPECT_EQ(amx.name, "bf16");
  EXPECT_THAT(amx.reason, HasSubstr("bf16 autocast on the CPU"));
  EXPECT_THAT(amx.reason, HasSubstr("AMX"));
  EXPECT_EQ(amx.warning, "");
  // AVX512-BF16 without AMX: native, but a training step is slower than in fp32.
  const PrecisionChoice avx512 = choose_precision(Precision::Auto, cpu, cpu_with("AVX512-BF16"));
  EXPECT_FALSE(avx512.bf16);
  EXPECT_EQ(avx512.name, "fp32");
  EXPECT_THAT(avx512.reason, HasSubstr("natively (AVX512-BF16), but slower than fp32"));
  EXPECT_EQ(avx512.warning, "");
  const PrecisionChoice none = choose_precision(Precision::Auto, cpu, cpu_with(""));
  EXPECT_FALSE(none.bf16);
  EXPECT_EQ(none.name, "fp32");
  EXPECT_THAT(none.reason,
              HasSubstr("bf16 is not native here (oneDNN AVX2: no AMX, no AVX512-BF16)"));
  EXPECT_EQ(none.warning, "");
}

TEST(Bf16Precision, ExplicitBf16RunsEverywhereAndWarnsWhereEmulated) {
  const torch::Device cpu(torch::kCPU);
  const PrecisionChoice emulated = choose_precision(Precision::Bf16, cpu, cpu_with(""));
  EXPECT_TRUE(emulated.bf16);
  EXPECT_THAT(emulated.warning, HasSubstr("emulated"));
  EXPECT_THAT(emulated.warning, HasSubstr("30x to 600x slower than fp32 in matmuls"));
  EXPECT_EQ(choose_precision(Precision::Bf16, cpu, cpu_with("AMX")).warning, "");
  const PrecisionChoice slower = choose_precision(Precision::Bf16, cpu, cpu_with("AVX512-BF16"));
  EXPECT_TRUE(slower.bf16);
  EXPECT_THAT(slower.warning, HasSubstr("slower than fp32 here"));
  const PrecisionChoice cuda =
      choose_precision(Precision::Auto, torch::Device(torch::kCUDA, 0), cpu_with(""));
  EXPECT_TRUE(cuda.bf16);
  EXPECT_THAT(cuda.reason, HasSubstr("on CUDA"));
}

TEST(Bf16Precision, Fp32AndFp64AreTakenAsAsked) {
  for (const std::string how : {"", "AMX"}) {
    const PrecisionChoice f =
        choose_precision(Precision::Fp32, torch::Device(torch::kCPU), cpu_with(how));
    EXPECT_FALSE(f.bf16);
    EXPECT_FALSE(f.fp64);
    const PrecisionChoice d =
        choose_precision(Precision::Fp64, torch::Device(torch::kCPU), cpu_with(how));
    EXPECT_TRUE(d.fp64);
    EXPECT_FALSE(d.bf16);
  }
}

// This CPU's answer agrees with its flags in /proc/cpuinfo (where Linux has one), under the
// oneDNN limit this test runs with (the simulated CPU classes of .ci/run lower it).
TEST(Bf16Precision, TheCpuDetectionAgreesWithProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) {
      flags = line + " ";
      break;
    }
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags here";
  const char* limit_env = std::getenv("ONEDNN_MAX_CPU_ISA");
  const std::string limit = limit_env ? limit_env : "";
  const CpuClass cpu = cpu_class(limit);
  const bool amx = flags.find(" amx_bf16 ") != std::string::npos;
  const bool avx512_bf16 = flags.find(" avx512_bf16 ") != std::string::npos;
  const std::string& got = cpu.bf16;
  if (cpu.onednn != cpu.hardware) {  // lowered: native only where the limit keeps the level
    EXPECT_THAT(cpu.onednn,
                testing::AnyOf("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX512_CORE",
                               "AVX512_CORE_VNNI", "AVX512_CORE_BF16", "AVX512_CORE_FP16"))
        << limit;
  }
  if (cpu.onednn != cpu.hardware && cpu.onednn != "AVX512_CORE_BF16" &&
      cpu.onednn != "AVX512_CORE_FP16")
    EXPECT_EQ(got, "");
  else if (amx)
    EXPECT_THAT(got, testing::AnyOf("AMX", "AVX512-BF16"));  // AMX unless the kernel refuses it
  else if (avx512_bf16)
    EXPECT_EQ(got, "AVX512-BF16");
  else
    EXPECT_EQ(got, "");
}
