// train.precision resolved against the device (train/precision.h): auto is bf16 on CUDA, and on a
// CPU with native bf16 (AMX, AVX512-BF16) the faster of bf16 and fp32 as measured for the model
// (precision_probe.h), fp32 elsewhere; an explicit bf16 runs anywhere, with a warning where it
// is emulated or measured slower. The measurement's cache: its key, reading and writing, corrupt
// and foreign files and entries.
#include <gmock/gmock.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "normlab/train/precision.h"
#include "normlab/train/precision_probe.h"
#include "normlab/util/cpu_class.h"
#include "normlab/util/file_io.h"
#include "support.h"

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

// A measurement of this model's GEMMs (precision_probe.h) with the given times.
PrecisionTiming timing(double bf16_ms, double fp32_ms) {
  PrecisionTiming t;
  t.bf16_seconds = bf16_ms / 1e3;
  t.fp32_seconds = fp32_ms / 1e3;
  t.rows = 512;
  t.source = "measured";
  return t;
}

TEST(Bf16Precision, AutoTakesWhatMeasuredFasterWhereTheCpuComputesBf16Natively) {
  const torch::Device cpu(torch::kCPU);
  for (const std::string how : {"AMX", "AVX512-BF16"}) {
    SCOPED_TRACE(how);
    EXPECT_TRUE(precision_needs_timing(Precision::Auto, cpu, cpu_with(how)));
    const PrecisionTiming fast = timing(40.0, 60.0), slow = timing(75.0, 60.0);
    const PrecisionChoice b = choose_precision(Precision::Auto, cpu, cpu_with(how), &fast);
    EXPECT_TRUE(b.bf16);
    EXPECT_EQ(b.name, "bf16");
    EXPECT_THAT(b.reason, HasSubstr("bf16 autocast on the CPU"));
    EXPECT_THAT(b.reason, HasSubstr("natively (" + how + "), and faster than fp32"));
    EXPECT_THAT(b.reason, HasSubstr("bf16 40.0 ms, fp32 60.0 ms (bf16 0.67x fp32)"));
    ASSERT_TRUE(b.timing.has_value());
    EXPECT_EQ(b.warning, "");
    const PrecisionChoice f = choose_precision(Precision::Auto, cpu, cpu_with(how), &slow);
    EXPECT_FALSE(f.bf16);
    EXPECT_EQ(f.name, "fp32");
    EXPECT_THAT(f.reason, HasSubstr("but slower than fp32 for this model"));
    EXPECT_THAT(f.reason, HasSubstr("(bf16 1.25x fp32)"));
    EXPECT_EQ(f.warning, "");
    // A tie keeps fp32; so does no measurement at all (normlab version), saying why.
    const PrecisionTiming tie = timing(60.0, 60.0);
    EXPECT_EQ(choose_precision(Precision::Auto, cpu, cpu_with(how), &tie).name, "fp32");
    const PrecisionChoice none = choose_precision(Precision::Auto, cpu, cpu_with(how));
    EXPECT_EQ(none.name, "fp32");
    EXPECT_THAT(none.reason, HasSubstr("fp32 until bf16 is measured faster for a model"));
  }
  // Emulated bf16 is never measured: fp32, as before.
  EXPECT_FALSE(precision_needs_timing(Precision::Auto, cpu, cpu_with("")));
  const PrecisionTiming fast = timing(40.0, 60.0);
  const PrecisionChoice none = choose_precision(Precision::Auto, cpu, cpu_with(""), &fast);
  EXPECT_FALSE(none.bf16);
  EXPECT_FALSE(none.timing.has_value());
  EXPECT_THAT(none.reason,
              HasSubstr("bf16 is not native here (oneDNN AVX2: no AMX, no AVX512-BF16)"));
  EXPECT_EQ(none.warning, "");
}

TEST(Bf16Precision, ExplicitBf16RunsEverywhereAndWarnsWhereEmulatedOrMeasuredSlower) {
  const torch::Device cpu(torch::kCPU);
  const PrecisionChoice emulated = choose_precision(Precision::Bf16, cpu, cpu_with(""));
  EXPECT_TRUE(emulated.bf16);
  EXPECT_THAT(emulated.warning, HasSubstr("emulated"));
  EXPECT_THAT(emulated.warning, HasSubstr("30x to 600x slower than fp32 in matmuls"));
  const PrecisionTiming fast = timing(40.0, 60.0), slow = timing(75.0, 60.0);
  for (const std::string how : {"AMX", "AVX512-BF16"}) {
    SCOPED_TRACE(how);
    EXPECT_TRUE(precision_needs_timing(Precision::Bf16, cpu, cpu_with(how)));
    EXPECT_EQ(choose_precision(Precision::Bf16, cpu, cpu_with(how), &fast).warning, "");
    EXPECT_EQ(choose_precision(Precision::Bf16, cpu, cpu_with(how)).warning, "")
        << "no reputation without a measurement";
    const PrecisionChoice slower = choose_precision(Precision::Bf16, cpu, cpu_with(how), &slow);
    EXPECT_TRUE(slower.bf16) << "an explicit bf16 is never overridden";
    EXPECT_THAT(slower.warning, HasSubstr("although fp32 is faster for this model on this CPU"));
    EXPECT_THAT(slower.warning, HasSubstr("bf16 75.0 ms, fp32 60.0 ms"));
  }
  const PrecisionChoice cuda =
      choose_precision(Precision::Auto, torch::Device(torch::kCUDA, 0), cpu_with(""));
  EXPECT_TRUE(cuda.bf16);
  EXPECT_THAT(cuda.reason, HasSubstr("on CUDA"));
  EXPECT_FALSE(precision_needs_timing(Precision::Auto, torch::Device(torch::kCUDA, 0),
                                      cpu_with("AVX512-BF16")));
  EXPECT_FALSE(precision_needs_timing(Precision::Fp32, cpu, cpu_with("AMX")));
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

namespace {
ModelConfig probe_model() {
  ModelConfig m;
  m.vocab_size = 96;
  m.d_model = 32;
  m.n_heads = 4;
  m.d_ff = 48;
  return m;
}
}  // namespace

// The key names what the timing depends on: the CPU, the threads, the model's shapes, the rows.
TEST(PrecisionProbe, TheKeyChangesWithTheCpuThreadsShapeAndRows) {
  const ModelConfig m = probe_model();
  const CpuClass c = cpu_with("AVX512-BF16");
  const std::string k = precision_probe_key(m, 64, c, 2);
  EXPECT_THAT(k, HasSubstr("threads 2"));
  EXPECT_THAT(k, HasSubstr("torch "));
  EXPECT_NE(k, precision_probe_key(m, 64, c, 4));
  EXPECT_NE(k, precision_probe_key(m, 128, c, 2));
  CpuClass capped = c;
  capped.onednn_limit = "AVX512_CORE";
  EXPECT_NE(k, precision_probe_key(m, 64, capped, 2));
  ModelConfig wider = m;
  wider.d_ff = 64;
  EXPECT_NE(k, precision_probe_key(wider, 64, c, 2));
  // Rows: the micro-batch's tokens, at most 1024, fewer for a wide model (a pass near 20 GFLOP).
  EXPECT_EQ(precision_probe_rows(m, 300), 300);
  EXPECT_EQ(precision_probe_rows(m, 1 << 20), 1024);
  ModelConfig big = m;
  big.d_model = 2048;
  big.n_heads = 16;
  big.d_ff = 8192;
  big.vocab_size = 50304;
  const int64_t rows = precision_probe_rows(big, 8 * 2048);
  EXPECT_GE(rows, 64);
  EXPECT_LT(rows, 1024);
  EXPECT_EQ(rows % 64, 0);
}

// Written and read back; other entries kept; a corrupt file, a foreign one and an entry that does
// not read are each ignored with one warning, never an error.
TEST(PrecisionProbe, TheCacheReadsBackAndIgnoresWhatDoesNotRead) {
  test::ScratchDir dir("precision_cache");
  const std::string path = (dir.path / "sub" / "precision.json").string();
  std::vector<std::string> warnings;
  const PrecisionWarn warn = [&](const std::string& m) { warnings.push_back(m); };
  EXPECT_FALSE(precision_cache_read(path, "k1", warn).has_value()) << "no file yet";
  PrecisionTiming t = timing(40.0, 60.0);
  t.key = "k1";
  precision_cache_write(path, t, warn);
  PrecisionTiming u = timing(70.0, 50.0);
  u.key = "k2";
  u.rows = 256;
  precision_cache_write(path, u, warn);
  EXPECT_TRUE(warnings.empty());
  const auto r1 = precision_cache_read(path, "k1", warn);
  ASSERT_TRUE(r1.has_value());
  EXPECT_EQ(r1->fp32_seconds, t.fp32_seconds);
  EXPECT_EQ(r1->bf16_seconds, t.bf16_seconds);
  EXPECT_EQ(r1->rows, 512);
  EXPECT_EQ(r1->source, "cached");
  const auto r2 = precision_cache_read(path, "k2", warn);
  ASSERT_TRUE(r2.has_value());
  EXPECT_FALSE(r2->bf16_faster());
  EXPECT_FALSE(precision_cache_read(path, "k3", warn).has_value());
  EXPECT_TRUE(warnings.empty());

  test::write_text(path, "{ not json");
  EXPECT_FALSE(precision_cache_read(path, "k1", warn).has_value());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr(path + " does not read"));
  precision_cache_write(path, t, warn);  // a corrupt file is replaced
  EXPECT_TRUE(precision_cache_read(path, "k1", warn).has_value());

  test::write_text(path, R"({"format": "something else", "entries": {"k1": {}}})");
  EXPECT_FALSE(precision_cache_read(path, "k1", warn).has_value());
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(warnings[1], HasSubstr("is not a normlab precision cache"));

  test::write_text(path, R"({"format": "normlab precision cache 1", "entries": {"k1":)"
                         R"( {"fp32_seconds": -1, "bf16_seconds": 0.04, "rows": 512}}})");
  EXPECT_FALSE(precision_cache_read(path, "k1", warn).has_value());
  ASSERT_EQ(warnings.size(), 3u);
  EXPECT_THAT(warnings[2], HasSubstr("the entry for this machine and model does not read"));
}

// precision_timing measures once and caches: the second call reads the same numbers back.
TEST(PrecisionProbe, MeasuresOnceThenReadsTheCache) {
  test::ScratchDir dir("precision_cache");
  const char* before = std::getenv("NORMLAB_CACHE_DIR");
  const std::string saved = before ? before : "";
  setenv("NORMLAB_CACHE_DIR", dir.path.c_str(), 1);
  EXPECT_EQ(precision_cache_path(), (dir.path / "precision.json").string());
  std::vector<std::string> warnings;
  const PrecisionWarn warn = [&](const std::string& m) { warnings.push_back(m); };
  const CpuClass cpu = cpu_class("");
  const PrecisionTiming first = precision_timing(probe_model(), 64, cpu, warn);
  EXPECT_EQ(first.source, "measured");
  EXPECT_GT(first.fp32_seconds, 0.0);
  EXPECT_GT(first.bf16_seconds, 0.0);
  EXPECT_EQ(first.rows, 64);
  const PrecisionTiming second = precision_timing(probe_model(), 64, cpu, warn);
  EXPECT_EQ(second.source, "cached");
  EXPECT_EQ(second.fp32_seconds, first.fp32_seconds);
  EXPECT_EQ(second.bf16_seconds, first.bf16_seconds);
  EXPECT_EQ(second.key, first.key);
  EXPECT_TRUE(warnings.empty());
  if (before)
    setenv("NORMLAB_CACHE_DIR", saved.c_str(), 1);
  else
    unsetenv("NORMLAB_CACHE_DIR");
}
