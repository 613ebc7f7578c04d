// Shared helpers of normlab's tests: tiny configs, tensor comparison with readable failures,
// golden files, finite-difference gradients, scratch folders.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "normlab/config/config_io.h"
#include "normlab/nn/model.h"
#include "normlab/nn/model_config.h"
#include "normlab/util/safetensors.h"
#include "test_paths.h"

/// Skips the current test (cleanly, as GTEST_SKIP) where CUDA is not available.
#define NORMLAB_REQUIRE_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

namespace normlab::test {

/// A small model of `scheme`: vocab 32, d_model 16, 2 layers, 4 heads / 2 kv heads, d_ff 24.
ModelConfig tiny_config(Scheme scheme);

/// One loss of `m` on `tokens` (each token's target the next one: tokens rolled by one) and its
/// backward, m's gradients zeroed first: the loss, the logits and every parameter's gradient by
/// name.
struct LossAndGrads {
  double loss = 0;
  torch::Tensor logits;
  std::map<std::string, torch::Tensor> grads;
};
LossAndGrads loss_and_grads(DecoderLM& m, const torch::Tensor& tokens);

/// A fresh, empty folder under the temp dir, removed by the destructor.
struct ScratchDir {
  explicit ScratchDir(const std::string& tag);
  ~ScratchDir();
  std::filesystem::path path;
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

/// The message of the exception that f() throws (its what()), or "" when it throws none.
std::string error_message(const std::function<void()>& f);

/// max |a - b| / max |b|: the relative error used by the golden and equivalence tests.
double max_rel_error(const torch::Tensor& a, const torch::Tensor& b);

/// EXPECT that a and b agree within `tol` relative error (max_rel_error), printing both.
::testing::AssertionResult close(const torch::Tensor& a, const torch::Tensor& b, double tol);

/// Per-element agreement: every element satisfies |a_i - b_i| <= rtol * |b_i| + floor * max|b|
/// (an absolute floor tied to b's scale, for elements near zero). On failure it names the
/// worst element (index, both values, its error over its bound). `worst`, when given, receives
/// max_i |a_i - b_i| / (|b_i| + (floor / rtol) * max|b|): the per-element relative error with
/// the floor, which is <= rtol exactly when the check passes.
::testing::AssertionResult close_per_element(const torch::Tensor& a, const torch::Tensor& b,
                                             double rtol, double floor, double* worst = nullptr);

/// The golden file tests/data/<dir>/<name>.safetensors and its config as a ModelConfig (the
/// moe_* keys of the MoE goldens, tests/reference/moe_ref.py, into model.moe).
struct Golden {
  SafetensorsContent content;
  ModelConfig config;
  double z_loss = 0.0;
};
Golden load_golden(const std::string& name, const std::string& dir = "golden");
std::vector<std::string> golden_names(const std::string& dir = "golden");

/// Deterministic English-like text with some non-ASCII words: `docs` paragraphs separated by
/// blank lines (the plain-text document format).
std::string synthetic_corpus(int docs, uint64_t seed);

/// A BPE tokenizer of 400 pieces trained (once per test process) on synthetic_corpus(400, 1).
const std::string& test_tokenizer_path();

/// Writes `text` to `path` (gzip-compressed when the path ends in .gz).
void write_text(const std::string& path, const std::string& text);

/// Writes synthetic_corpus(docs, seed) to DIR/a.txt and prepares it with the test tokenizer
/// into DIR/shards, `val_fraction` of the documents for validation; returns that folder.
std::string prepare_test_shards(const ScratchDir& dir, int docs, uint64_t seed,
                                double val_fraction);

/// Central difference of scalar f() along direction v of its input x (float64):
/// (f(x + eps v) - f(x - eps v)) / (2 eps). x is modified in place and restored.
double directional_derivative(const std::function<torch::Tensor()>& f, torch::Tensor x,
                              const torch::Tensor& v, double eps = 1e-6);

/// Norm::add_forward of an RMSNorm on `device` (the fused CUDA kernels where they apply, the
/// composition elsewhere) against an fp64 reference computed on the CPU from the formulas: r = x +
/// b / divisor, n = w r rsqrt(mean(r^2) + eps), and the gradients of x, b and w for a loss using n
/// only, r and n, and r only. x has dtype `s`, b dtype `bt`; inputs (rows, cols). Relative
/// tolerance `tol` (bf16 storage needs about 1e-2).
::testing::AssertionResult add_rms_norm_matches_reference(torch::Device device, torch::ScalarType s,
                                                          torch::ScalarType bt, int64_t rows,
                                                          int64_t cols, double divisor, double tol);

}  // namespace normlab::test
