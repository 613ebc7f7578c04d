// The CPU class as the kernels see it (util/cpu_class.h) and LibTorch errors with their context
// (util/library_error.h). The class under oneDNN limits is checked against what oneDNN itself
// answers: its matmul check runs in this process under the limit .ci/run's simulated passes set.
#include <gmock/gmock.h>

#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <vector>

#include "normlab/kernels/capabilities.h"
#include "normlab/kernels/ops.h"
#include "normlab/nn/model.h"
#include "normlab/util/cpu_class.h"
#include "normlab/util/library_error.h"
#include "support.h"

using namespace normlab;
using testing::AnyOf;
using testing::HasSubstr;
using testing::Not;

namespace {

std::string env_limit() {
  for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"})
    if (const char* v = std::getenv(name); v && *v) return v;
  return "";
}

bool avx512_core_or_more(const std::string& isa) { return isa.rfind("AVX512_CORE", 0) == 0; }

// What the class should say from the CPU's level and the limit alone, with oneDNN's levels in
// their order (each holds the ones before it): the lower of the two; "" where the limit is a
// name this list does not hold (the test then has no expectation of its own). AVX2_VNNI and
// AVX2_VNNI_2 are left out: they are not nested with the AVX-512 levels (a CPU with AVX-VNNI
// limited to AVX512_CORE keeps plain AVX2), so an order says nothing about them.
std::string expected_level(const std::string& hardware, const std::string& limit) {
  static const std::vector<std::string> order = {"SSE41",
                                                 "AVX",
                                                 "AVX2",
                                                 "AVX512_CORE",
                                                 "AVX512_CORE_VNNI",
                                                 "AVX512_CORE_BF16",
                                                 "AVX512_CORE_FP16",
                                                 "AVX512_CORE_AMX",
                                                 "AVX512_CORE_AMX_FP16"};
  if (limit.empty()) return hardware;
  std::string upper = limit;
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  const auto at = [&](const std::string& name) {
    return std::find(order.begin(), order.end(), name) - order.begin();
  };
  if (at(upper) == static_cast<std::ptrdiff_t>(order.size()) ||
      at(hardware) == static_cast<std::ptrdiff_t>(order.size()))
    return "";
  return at(upper) < at(hardware) ? upper : hardware;
}

}  // namespace

TEST(CpuClass, ALimitLowersOnednnAndNothingAboveIt) {
  const CpuClass native = cpu_class("");
  if (native.hardware.empty() || native.hardware == "SSE41" || native.hardware == "AVX")
    GTEST_SKIP() << "this CPU has no AVX2 (" << native.hardware << ")";
  for (const std::string limit : {"AVX2", "avx2", "Avx2"}) {
    const CpuClass c = cpu_class(limit);
    EXPECT_EQ(c.onednn, "AVX2") << limit;  // the CPU has AVX2 and the limit keeps nothing above
    EXPECT_EQ(c.bf16, "") << limit;
    EXPECT_EQ(c.hardware, native.hardware);
    EXPECT_THAT(c.describe(), HasSubstr("oneDNN AVX2"));
    EXPECT_THAT(c.describe(), HasSubstr("bf16 emulated"));
  }
  EXPECT_EQ(cpu_class("SSE41").onednn, "SSE41");
  EXPECT_EQ(cpu_class("").onednn_limit, "");
  // oneDNN ignores a name it does not know; so does the class.
  EXPECT_EQ(cpu_class("AVX3000").onednn, cpu_class("").onednn);
  if (native.bf16 == "AMX") {  // a CPU with AMX stands in for the lower classes
    EXPECT_EQ(cpu_class("AVX512_CORE_BF16").bf16, "AVX512-BF16");
    EXPECT_EQ(cpu_class("AVX512_CORE").bf16, "");
    EXPECT_EQ(cpu_class("AVX512_CORE_AMX").bf16, "AMX");
    EXPECT_EQ(cpu_class("AVX10_1_512_AMX").bf16, "AMX");  // oneDNN's other name of the level
  }
}

// The linear path is oneDNN's matmul exactly where LibTorch's own check lets it run: at or above
// oneDNN's AVX512_CORE (or AVX2_VNNI_2), and never below, whatever the CPU's flags say.
TEST(CpuClass, TheLinearPathFollowsWhatOnednnRunsWith) {
  const CpuClass c = cpu_class(env_limit());
  // normlab's reading of the flags and the limit, against oneDNN's own answer (its matmul
  // check, in this process under this limit): where they disagreed, cpu_class would lower the
  // level to oneDNN's answer, and the level would differ from the flags-and-limit one.
  const std::string expected = expected_level(c.hardware, env_limit());
  if (!expected.empty()) {
    EXPECT_EQ(c.onednn, expected) << c.describe();
  }
  EXPECT_EQ(kernels::onednn_linear_available(), c.onednn_matmul && at::hasMKLDNN());
  if (avx512_core_or_more(c.onednn) || c.onednn == "AVX2_VNNI_2")
    EXPECT_TRUE(c.onednn_matmul) << c.describe();
  else
    EXPECT_FALSE(c.onednn_matmul) << c.describe();
  EXPECT_EQ(c.linear(), c.onednn_matmul ? "oneDNN" : "ATen");
  // Whatever the path, the layer computes x w^T, forward and backward.
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({3, 5, 16}, torch::requires_grad());
  const torch::Tensor w = torch::randn({8, 16}, torch::requires_grad());
  const torch::Tensor y = kernels::linear(x, w);
  const torch::Tensor ref =
      torch::matmul(x.detach().to(torch::kDouble), w.detach().to(torch::kDouble).t());
  EXPECT_TRUE(torch::allclose(y.detach().to(torch::kDouble), ref, 1e-5, 1e-5));
  y.sum().backward();
  EXPECT_TRUE(torch::allclose(x.grad(), w.detach().sum(0).expand({3, 5, 16}), 1e-5, 1e-5));
}

TEST(CpuClass, TheBf16WarningGivesTheSizeOfTheSlowdown) {
  CpuClass emulated;
  emulated.onednn = "AVX2";
  EXPECT_THAT(bf16_emulation_cost(emulated), HasSubstr("600x slower than fp32"));
  emulated.onednn = "AVX512_CORE";
  EXPECT_THAT(bf16_emulation_cost(emulated), HasSubstr("4x to 14x slower than fp32"));
  CpuClass native;
  native.bf16 = "AMX";
  EXPECT_EQ(bf16_emulation_cost(native), "");
}

TEST(LibraryError, AC10ErrorBecomesOneLineWithItsContext) {
  try {
    try {
      try {
        TORCH_CHECK(false, "the first line\nthe second line");
      } catch (...) {
        rethrow_with_context("forward of blocks.0");
      }
    } catch (...) {
      rethrow_with_context("training step 1");
    }
    FAIL() << "nothing thrown";
  } catch (const LibraryError& e) {
    EXPECT_EQ(e.doing(), "training step 1, forward of blocks.0");
    EXPECT_EQ(e.message(), "the first line; the second line");
    EXPECT_EQ(std::string(e.what()),
              "training step 1, forward of blocks.0: the first line; the second line");
    EXPECT_STREQ(e.kind(), "LibTorch");
    EXPECT_THAT(e.backtrace(), HasSubstr("the first line"));
  }
}

TEST(LibraryError, AnotherStdExceptionGetsTheContextAsAnUnexpectedError) {
  try {
    try {
      try {
        throw std::invalid_argument("bad index\n  at the second line");
      } catch (...) {
        rethrow_with_context("forward of blocks.1");
      }
    } catch (...) {
      rethrow_with_context("training step 2");
    }
    FAIL() << "nothing thrown";
  } catch (const LibraryError& e) {
    EXPECT_EQ(std::string(e.what()),
              "training step 2, forward of blocks.1: bad index; at the second line");
    EXPECT_STREQ(e.kind(), "unexpected");
    EXPECT_FALSE(e.from_torch());
  }
}

TEST(LibraryError, NormlabsOwnErrorsAndNonStdExceptionsPassUnchanged) {
  EXPECT_THROW(
      {
        try {
          throw ConfigError("train.steps = 0");
        } catch (...) {
          rethrow_with_context("training step 1");
        }
      },
      ConfigError);
  EXPECT_THROW(
      {
        try {
          throw 42;
        } catch (...) {
          rethrow_with_context("training step 1");
        }
      },
      int);
  EXPECT_EQ(one_line("  a \n\n b\r\n"), "a; b");
}

namespace {
class FailInBlock : public ForwardHooks {
 public:
  explicit FailInBlock(size_t block) : block_(block) {}
  Streams run_block(size_t layer, SchemeBlockImpl& block, const Streams& in) override {
    TORCH_CHECK(layer != block_, "forced");
    return block.forward(in);
  }

 private:
  size_t block_;
};
}  // namespace

TEST(LibraryError, TheModelNamesTheBlockWhoseForwardFailed) {
  ModelConfig cfg;
  cfg.vocab_size = 32;
  cfg.d_model = 16;
  cfg.n_layers = 3;
  cfg.n_heads = 2;
  cfg.d_ff = 32;
  DecoderLM model(cfg);
  FailInBlock hooks(2);
  model->hooks = &hooks;
  try {
    model->forward(torch::zeros({1, 4}, torch::kLong));
    FAIL() << "nothing thrown";
  } catch (const LibraryError& e) {
    EXPECT_EQ(e.doing(), "forward of blocks.2");
    EXPECT_EQ(e.message(), "forced");
  }
}

// A real LibTorch error inside a branch (a weight of the wrong shape) names the branch too, in
// every scheme's block: "forward of blocks.1.attn", "forward of blocks.1.mlp".
TEST(LibraryError, TheModelNamesTheBranchWhoseForwardFailed) {
  for (const auto& [value, scheme] : EnumNames<Scheme>::rows) {
    for (const std::string branch : {"attn", "mlp"}) {
      DecoderLM model(test::tiny_config(value));  // two blocks
      const std::string prefix = "blocks.1." + branch + ".";
      bool broken = false;
      for (auto& p : model->named_parameters()) {
        if (p.key().rfind(prefix, 0) == 0 && p.value().dim() == 2 && !broken) {
          torch::NoGradGuard g;
          p.value().set_data(torch::zeros({3, 5}));
          broken = true;
        }
      }
      ASSERT_TRUE(broken) << scheme << ": no matrix under " << prefix;
      try {
        model->forward(torch::zeros({1, 4}, torch::kLong));
        ADD_FAILURE() << scheme << " " << branch << ": nothing thrown";
      } catch (const LibraryError& e) {
        EXPECT_EQ(e.doing(), "forward of blocks.1." + branch) << scheme;
        EXPECT_STREQ(e.kind(), "LibTorch") << e.what();
        EXPECT_THAT(std::string(e.what()), HasSubstr("forward of blocks.1." + branch + ": "));
      }
    }
  }
}

TEST(LibraryError, ASubModulesContextAloneReadsWithoutItsDot) {
  try {
    try {
      TORCH_CHECK(false, "bad");
    } catch (...) {
      rethrow_with_context(".attn");
    }
  } catch (const LibraryError& e) {
    EXPECT_EQ(std::string(e.what()), "attn: bad");
  }
}
