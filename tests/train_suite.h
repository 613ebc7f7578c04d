// The fixture of the trainer tests (test_trainer.cpp, test_trainer_parts.cpp): a suite's token
// shards, a tiny run config and the options of a run. Apart from support.h so that the other
// tests do not include the trainer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "normlab/config/config_io.h"
#include "normlab/train/trainer.h"
#include "support.h"

namespace normlab::test {

/// A fixture for training tests: its suite shares one scratch folder with token shards, made
/// before its first test and removed after its last. `Suite` (the fixture deriving from this)
/// names the folder and its corpus with `static constexpr ShardsSpec kShards`; tests read
/// `*dir_`.
struct ShardsSpec {
  const char* tag;  // the scratch folder's name
  int docs;         // prepare_test_shards(dir, docs, seed, 0.1)
  uint64_t seed;
};
template <class Suite>
class TrainSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir(Suite::kShards.tag);
    prepare_test_shards(*dir_, Suite::kShards.docs, Suite::kShards.seed, 0.1);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  /// A tiny model (vocabulary 400, d_model 32, 2 layers, 4 heads, d_ff 64) trained in fp32 (auto
  /// could be bf16 on a CPU with AMX or AVX512-BF16) on the suite's shards, sequences of 16, 4 a
  /// step in micro-batches of 2; then `overrides`, then `extra`.
  static RunConfig run_config(std::vector<std::string> overrides,
                              const std::vector<std::string>& extra) {
    std::vector<std::string> s = {"model.vocab_size=400", "model.d_model=32",
                                  "model.n_layers=2",     "model.n_heads=4",
                                  "model.d_ff=64",        "data.train=" + *dir_ / "shards",
                                  "data.seq_len=16",      "train.global_batch=4",
                                  "train.micro_batch=2",  "train.precision=fp32"};
    s.insert(s.end(), overrides.begin(), overrides.end());
    s.insert(s.end(), extra.begin(), extra.end());
    return config_load("", s);
  }
  static TrainOptions options(const std::string& run, bool resume = false, int64_t stop_after = 0) {
    TrainOptions o;
    o.run_dir = run;
    o.resume = resume;
    o.stop_after = stop_after;
    return o;
  }
  static inline ScratchDir* dir_ = nullptr;
};

}  // namespace normlab::test
