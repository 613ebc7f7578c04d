// Equivalence testing of two models: build both from their ModelConfigs, give B the weights of A
// by name (or through a WeightMap), run both in float64 on the same batch and report the largest
// relative difference of the logits, the loss and every shared parameter's gradient. Test-support
// for normlab's own tests and for a downstream project's (find_package(normlab); docs/schemes.md,
// "An equivalence test in your own project"); `normlab compare` prints the same table. It needs no
// test framework: a GoogleTest asserts on worst() and streams the report into the message.
//
//   normlab::equivalence::WeightMap map;
//   map.fix_b("blocks.*.*_hc.*", normlab::equivalence::kInit);  // B's connections keep their init
//   const auto report = normlab::equivalence::compare_configs(pre_norm_cfg, hyper_cfg, map);
//   EXPECT_LE(report.worst(), 1e-10) << report;
//
// The weight map B gets A's weights through: normlab/testing/weight_map.h.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "normlab/nn/model.h"
#include "normlab/nn/model_config.h"
#include "normlab/testing/weight_map.h"

namespace normlab::equivalence {

struct EquivalenceOptions {
  uint64_t seed = 0;         // torch::manual_seed before each model is built, and for the batch
  int64_t batch = 2;         // sequences
  int64_t seq_len = 8;       // tokens per sequence (inputs; targets are the next tokens)
  bool random_gains = true;  // A's 1-D parameters (norm gains, scalars) drawn from U(0.5, 1.5)
                             // before the holds, so that every gain matters
};

/// One copied parameter: A's name and B's.
struct WeightLink {
  std::string a, b;
};
/// One held parameter and its value.
struct HeldWeight {
  std::string name;
  HeldValue value;
};

/// Two models in float64 on the CPU, B holding A's weights (build_pair). Change either before
/// compare() (a module option, a weight) to test a variant of the reduction.
struct ModelPair {
  ModelConfig config_a, config_b;
  DecoderLM a{nullptr}, b{nullptr};
  std::vector<WeightLink> links;  // in B's parameter order
  std::vector<HeldWeight> held_a, held_b;
};

/// max |a - b| / max |b| of one tensor (0 when both are zero), and the scale max |b|.
struct Difference {
  std::string what;  // "logits", "loss", "grad blocks.0.attn.qkv.weight" (A's name; "-> B's")
  double max_rel = 0.0;
  double max_abs_b = 0.0;
  std::string nonfinite;  // "" when both sides are finite, else which side holds what: "NaN in
                          // A", "+inf in B", "NaN in A and B", "-inf in A, +inf in B"
};

/// One row of a report: max |a - b| / max |b| (a and b of one shape, any floating dtype; 0 when
/// both are zero). A NaN or an infinity on either side makes the difference infinite, so that it
/// fails every bound and is the report's worst row: the verdict vouches for finite numbers only.
/// That includes an infinity against the same infinity in the same place (both models
/// overflowed there, which hides whatever they differ by) and NaN on both sides.
Difference difference(std::string what, const torch::Tensor& a, const torch::Tensor& b);

struct EquivalenceReport {
  std::string label_a, label_b;  // the schemes, or what the caller names them
  EquivalenceOptions options;
  Difference logits, loss;
  std::vector<Difference> gradients;  // one per WeightLink, in B's parameter order
  std::vector<HeldWeight> held_a, held_b;

  /// The largest max_rel of the logits, the loss and every gradient, and which it is (the
  /// first of equal ones; a NaN max_rel, which difference() never gives, counts as infinite).
  double worst() const;
  const Difference& worst_row() const;
  /// The table: one row per compared tensor, the worst, and what was held.
  std::string table() const;
};
std::ostream& operator<<(std::ostream& os, const EquivalenceReport& report);

/// Builds A and B (each after torch::manual_seed(options.seed)), in float64, and gives B A's
/// weights through `map`. ConfigError names an unmapped parameter, a shape that disagrees or a
/// rule that matches nothing.
ModelPair build_pair(const ModelConfig& a, const ModelConfig& b, const WeightMap& map = {},
                     const EquivalenceOptions& options = {});

/// Runs both models of `pair` on the same random batch (tokens below the smaller vocabulary):
/// the loss against the next tokens, backward, and the differences A vs B. The gradients stay on
/// the parameters for the caller to inspect.
EquivalenceReport compare(ModelPair& pair, const EquivalenceOptions& options = {});

/// build_pair then compare.
EquivalenceReport compare_configs(const ModelConfig& a, const ModelConfig& b,
                                  const WeightMap& map = {},
                                  const EquivalenceOptions& options = {});

}  // namespace normlab::equivalence
