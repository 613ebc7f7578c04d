// Reading token shards for training and evaluation.
//
// TokenDataset maps the shards of one split and serves samples of seq_len + 1 tokens: sample
// j of a shard is tokens [j*seq_len, j*seq_len + seq_len] (inputs are the first seq_len,
// targets the last seq_len). TrainLoader orders all samples of the split by a permutation
// derived from (seed, epoch) and cuts that stream into global batches; rank r of W reads the
// r-th contiguous slice of each global batch, in micro-batches. batch(step, micro_step) is a
// pure function of its arguments, so resuming at (step, micro_step) continues exactly.
// ValLoader reads the validation split in its fixed order.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "normlab/data/shard.h"

namespace normlab {

class TokenDataset {
 public:
  /// Opens split `split` ("train" or "val") of the folder `dir`; checks every shard's header
  /// against the index and, with `verify`, every shard's CRC-32 (about 1 GB/s).
  TokenDataset(const std::string& dir, const std::string& split, int64_t seq_len,
               bool verify = true);

  int64_t seq_len() const { return seq_len_; }
  int64_t num_samples() const { return total_samples_; }
  uint64_t num_tokens() const;
  const ShardIndex& index() const { return index_; }
  /// Writes sample i (seq_len + 1 tokens) to out.
  void sample(int64_t i, int64_t* out) const;

 private:
  ShardIndex index_;
  int64_t seq_len_;
  std::vector<ShardFile> shards_;
  std::vector<int64_t> first_sample_;  // prefix sums of samples per shard
  int64_t total_samples_ = 0;
};

struct Batch {
  torch::Tensor inputs;   // (B, T) int64
  torch::Tensor targets;  // (B, T) int64
};

struct LoaderOptions {
  int64_t micro_batch = 8;   // sequences per micro-step on one rank
  int64_t global_batch = 8;  // sequences per optimizer step over all ranks
  int64_t rank = 0;
  int64_t world_size = 1;
  uint64_t seed = 0;
};

class TrainLoader {
 public:
  TrainLoader(std::shared_ptr<const TokenDataset> data, const LoaderOptions& options);

  /// Micro-steps per optimizer step on each rank: global_batch / (micro_batch * world_size).
  int64_t micro_steps() const { return micro_steps_; }
  /// The sample indices of (step, micro_step) on this rank.
  std::vector<int64_t> sample_ids(int64_t step, int64_t micro_step) const;
  Batch batch(int64_t step, int64_t micro_step) const;
  /// The epoch (pass over the samples) that optimizer step `step` starts in.
  int64_t epoch_of(int64_t step) const;

 private:
  std::shared_ptr<const TokenDataset> data_;
  LoaderOptions o_;
  int64_t micro_steps_;
};

class ValLoader {
 public:
  ValLoader(std::shared_ptr<const TokenDataset> data, int64_t batch_size, int64_t rank = 0,
            int64_t world_size = 1);
  /// Batches per rank in one pass (every rank gets the same number).
  int64_t num_batches() const;
  Batch batch(int64_t k) const;

 private:
  std::shared_ptr<const TokenDataset> data_;
  int64_t batch_size_, rank_, world_;
};

/// Checks that shards fit a model: every token id below model_vocab_size, and, when
/// `tokenizer_path` is given, that it is the tokenizer the shards were made with (by CRC-32).
/// Throws ShardError naming the folder, the file and the numbers.
void check_vocabulary(const ShardIndex& index, const std::string& dir, int64_t model_vocab_size,
                      const std::string& tokenizer_path);

/// A bijection of [0, n) chosen by `key` (a Feistel network with cycle walking): the sample
/// order of one epoch. O(1) memory, so any position of any epoch is computed directly.
int64_t permute_index(int64_t i, int64_t n, uint64_t key);

}  // namespace normlab
