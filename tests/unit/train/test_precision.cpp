// train.precision resolved against the device (train/precision.h): auto is bf16 on CUDA and on a
// CPU with native bf16 (AMX, AVX512-BF16), fp32 elsewhere; an explicit bf16 runs anywhere, with
// a warning where it is emulated.
#include <gmock/gmock.h>

#include <fstream>
#include <string>

#include "normlab/train/precision.h"
#include "normlab/util/device.h"

using namespace normlab;
using testing::HasSubstr;

TEST(Bf16Precision, AutoIsBf16WhereTheCpuComputesItNatively) {
  const torch::Device cpu(torch::kCPU);
  for (const std::string how : {"AMX", "AVX512-BF16"}) {
    const PrecisionChoice c = choose_precision(Precision::Auto, cpu, how);
    EXPECT_TRUE(c.bf16);
    EXPECT_FALSE(c.fp64);
    EXPECT_EQ(c.name, "bf16");
    EXPECT_THAT(c.reason, HasSubstr("bf16 autocast on the CPU"));
    EXPECT_THAT(c.reason, HasSubstr(how));
    EXPECT_EQ(c.warning, "");
  }
  const PrecisionChoice none = choose_precision(Precision::Auto, cpu, "");
  EXPECT_FALSE(none.bf16);
  EXPECT_EQ(none.name, "fp32");
  EXPECT_THAT(none.reason, HasSubstr("neither AMX nor AVX512-BF16"));
  EXPECT_EQ(none.warning, "");
}

TEST(Bf16Precision, ExplicitBf16RunsEverywhereAndWarnsWhereEmulated) {
  const torch::Device cpu(torch::kCPU);
  const PrecisionChoice emulated = choose_precision(Precision::Bf16, cpu, "");
  EXPECT_TRUE(emulated.bf16);
  EXPECT_THAT(emulated.warning, HasSubstr("emulated"));
  EXPECT_EQ(choose_precision(Precision::Bf16, cpu, "AMX").warning, "");
  const PrecisionChoice cuda =
      choose_precision(Precision::Auto, torch::Device(torch::kCUDA, 0), "");
  EXPECT_TRUE(cuda.bf16);
  EXPECT_THAT(cuda.reason, HasSubstr("on CUDA"));
}

TEST(Bf16Precision, Fp32AndFp64AreTakenAsAsked) {
  for (const std::string how : {"", "AMX"}) {
    const PrecisionChoice f = choose_precision(Precision::Fp32, torch::Device(torch::kCPU), how);
    EXPECT_FALSE(f.bf16);
    EXPECT_FALSE(f.fp64);
    const PrecisionChoice d = choose_precision(Precision::Fp64, torch::Device(torch::kCPU), how);
    EXPECT_TRUE(d.fp64);
    EXPECT_FALSE(d.bf16);
  }
}

// This CPU's answer agrees with its flags in /proc/cpuinfo (where Linux has one).
TEST(Bf16Precision, TheCpuDetectionAgreesWithProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) {
      flags = line + " ";
      break;
    }
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags here";
  const bool amx = flags.find(" amx_bf16 ") != std::string::npos;
  const bool avx512_bf16 = flags.find(" avx512_bf16 ") != std::string::npos;
  const std::string got = cpu_native_bf16();
  if (amx)
    EXPECT_THAT(got, testing::AnyOf("AMX", "AVX512-BF16"));  // AMX unless the kernel refuses it
  else if (avx512_bf16)
    EXPECT_EQ(got, "AVX512-BF16");
  else
    EXPECT_EQ(got, "");
}
