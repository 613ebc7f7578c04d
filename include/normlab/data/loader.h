// Reading tokens for training and evaluation.
//
// TokenDataset maps one source (source.h: the shards of one split of a normlab folder, a flat
// token array, a Megatron dataset) as token arrays read in place, and serves samples of
// seq_len + 1 tokens: sample j of an array (a shard, a file) is tokens [j*seq_len, j*seq_len +
// seq_len] (inputs are the first seq_len, targets the last seq_len). TrainLoader orders each
// source's samples by a permutation derived from (seed, epoch), draws from the sources by
// weight (mixture.h; one source: its stream as is) and cuts that stream into global batches;
// rank r of W reads the r-th contiguous slice of each global batch, in micro-batches.
// batch(step, micro_step) is a pure function of its arguments, so resuming at (step,
// micro_step) continues exactly. ValLoader reads one source in its fixed order.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "normlab/data/mixture.h"
#include "normlab/data/shard.h"
#include "normlab/data/source.h"
#include "normlab/data/token_array.h"

namespace normlab {

class TokenDataset {
 public:
  /// Opens split `split` ("train" or "val") of the folder `dir`; checks every shard's header
  /// against the index and, with `verify`, every shard's CRC-32 (about 1 GB/s) and every token
  /// id against the shards' vocabulary (index.json's vocab_size).
  TokenDataset(const std::string& dir, const std::string& split, int64_t seq_len,
               bool verify = true);
  /// Opens a source. A shard folder: its split `split`, whose vocabulary must fit
  /// model_vocab_size. A token array (every file its glob matches, in sorted order) or a
  /// Megatron dataset: the whole of it (`split` is not used); its files' sizes and header are
  /// checked and, with source.verify, every id against model_vocab_size. Every sample read is
  /// checked too. Errors (DataError) name the file, and for a bad id its offset.
  TokenDataset(const DataSource& source, const std::string& split, int64_t seq_len,
               int64_t model_vocab_size);

  int64_t seq_len() const { return seq_len_; }
  int64_t num_samples() const { return total_samples_; }
  uint64_t num_tokens() const;
  /// A shard folder's index; for other formats only dtype, vocab_size (the model's) and
  /// eos_id are set.
  const ShardIndex& index() const { return index_; }
  const DataSource& source() const { return source_; }
  /// The ids' type on disk ("uint16", ...).
  std::string dtype() const;
  /// Documents: a shard split's, a Megatron index's, a token array's EOS count when eos is
  /// given and the ids were verified; -1 when unknown.
  int64_t documents() const { return documents_; }
  /// The files read (shards, token files, the Megatron .bin).
  std::vector<std::string> files() const;
  /// Writes sample i (seq_len + 1 tokens) to out.
  void sample(int64_t i, int64_t* out) const;

 private:
  void add(TokenArray array);

  DataSource source_;
  ShardIndex index_;
  int64_t seq_len_;
  int64_t vocab_ = 0;  // > 0: every sample read is checked against it
  int64_t documents_ = -1;
  std::vector<TokenArray> arrays_;
  std::vector<int64_t> first_sample_{0};  // prefix sums of samples per array
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

/// A sample of a mixture: sample `sample` of source `source`, its draw `draw` from that source
/// (draw / the source's samples is the source's epoch).
struct SampleRef {
  int64_t source = 0;
  int64_t sample = 0;
  int64_t draw = 0;
};

class TrainLoader {
 public:
  TrainLoader(std::shared_ptr<const TokenDataset> data, const LoaderOptions& options);
  /// A mixture: sources drawn by weight (mixture.h), each in its own order of epochs.
  TrainLoader(std::vector<std::shared_ptr<const TokenDataset>> sources,
              const std::vector<double>& weights, const LoaderOptions& options);

  /// Micro-steps per optimizer step on each rank: global_batch / (micro_batch * world_size).
  int64_t micro_steps() const { return micro_steps_; }
  int64_t num_sources() const { return static_cast<int64_t>(data_.size()); }
  const TokenDataset& source(int64_t s) const { return *data_[static_cast<size_t>(s)]; }
  const MixturePlan& plan() const { return plan_; }
  /// The samples of (step, micro_step) on this rank.
  std::vector<SampleRef> sample_refs(int64_t step, int64_t micro_step) const;
  /// Their sample indices (with one source, indices into it).
  std::vector<int64_t> sample_ids(int64_t step, int64_t micro_step) const;
  Batch batch(int64_t step, int64_t micro_step) const;
  /// The epoch (pass over its samples) of source 0 that optimizer step `step` starts in.
  int64_t epoch_of(int64_t step) const { return source_epoch(0, step); }
  /// The epoch of source s that optimizer step `step` starts in.
  int64_t source_epoch(int64_t s, int64_t step) const;

 private:
  std::vector<std::shared_ptr<const TokenDataset>> data_;
  LoaderOptions o_;
  MixturePlan plan_;
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

}  // namespace normlab
