// A downstream GoogleTest on the installed package: normlab/testing/equivalence.h checks that
// Hyper-Connections with one static stream, at init, is Pre-Norm on the same weights (docs/
// schemes.md). The configs are normlab's tiny ones (CONSUMER_CONFIGS_DIR), the map holds the
// hyper connections at their init. Prints the report, whose worst figure tests/consumer/run.sh
// compares with what `normlab compare` prints for the same pair.
#include <gtest/gtest.h>
#include <normlab/config/config_io.h>
#include <normlab/nn/weights.h>
#include <normlab/testing/equivalence.h>

#include <iostream>
#include <string>

namespace {

normlab::ModelConfig hyper(int n) {
  return normlab::config_load(std::string(CONSUMER_CONFIGS_DIR) + "/tiny/hyper_dhc2.yaml",
                              {"model.hyper.n=" + std::to_string(n), "model.hyper.dynamic=false"})
      .model;
}

normlab::ModelConfig pre_norm() {
  return normlab::config_load(std::string(CONSUMER_CONFIGS_DIR) + "/tiny/lm.yaml",
                              {"model.scheme=pre_norm"})
      .model;
}

normlab::equivalence::WeightMap connections_at_init() {
  normlab::equivalence::WeightMap map;
  map.fix_a("blocks.*.*_hc.*", normlab::equivalence::kInit);
  return map;
}

}  // namespace

// One stream: A_m = A_r = beta = 1 multiply by one and the final norm sees the single stream,
// so every number is Pre-Norm's up to the order of float64 operations (1e-10 relative).
TEST(HyperEquivalence, OneStaticStreamAtInitIsPreNorm) {
  const auto report =
      normlab::equivalence::compare_configs(hyper(1), pre_norm(), connections_at_init());
  std::cout << report;
  EXPECT_LE(report.worst(), 1e-10) << report;
  // every gradient of Pre-Norm is compared, and the connections are the only held parameters
  EXPECT_EQ(report.gradients.size(),
            normlab::weights_of(*normlab::DecoderLM(pre_norm(), torch::kMeta)).size());
  EXPECT_EQ(report.held_a.size(), 2u * 2u * 2u);  // static alpha, beta of 2 HC layers x 2 blocks
}

// Two streams: the final norm sees 2 x, i.e. eps / 4 instead of eps; the logits differ by about
// eps (1 - 1/4) / (2 mean(x^2)), far above float64 rounding, so the check above can fail.
TEST(HyperEquivalence, TwoStreamsDifferByTheFinalNormsEps) {
  const auto report =
      normlab::equivalence::compare_configs(hyper(2), pre_norm(), connections_at_init());
  EXPECT_GT(report.logits.max_rel, 1e-8) << report;
}
