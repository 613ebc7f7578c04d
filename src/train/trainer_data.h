// The trainer's data: the training sources and their loader (a mixture when several), the
// validation loader, the fixed diagnostics batch, the tokenizer and the multiple-choice tasks.
// Built once from the config (a bad source or task file fails the run before any work); the
// loader is a pure function of (step, micro-step), so this part holds no training progress
// except the epoch each source was last seen in (for the log). Private to src/train/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "normlab/data/loader.h"
#include "normlab/data/tokenizer.h"
#include "normlab/eval/tasks.h"
#include "train/trainer_context.h"

namespace normlab {

class TrainData {
 public:
  /// Opens data.train (each source's vocabulary checked against the model's), the tokenizer
  /// (data.tokenizer, when it exists), the validation source (data.val, else a shard folder's
  /// val split), the diagnostics batch (on the device) and eval.tasks; builds the loader for
  /// this rank. Throws ConfigError or DataError naming the key or file.
  explicit TrainData(const RunContext& ctx);

  /// One log line per training source: what it is, its share of the run and its epochs.
  void describe(const RunContext& ctx) const;
  /// Logs each source that begins a new epoch at `step` (not on the first call).
  void note_epochs(const RunContext& ctx, int64_t step);

  const TrainLoader& loader() const { return *loader_; }
  const ValLoader* val() const { return val_.get(); }
  /// The diagnostics' fixed batch: the first validation (else training) sequences.
  const Batch& diag_batch() const { return diag_batch_; }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  /// Each token's length in bytes (for bits per byte); empty without a tokenizer.
  const std::vector<int32_t>& token_bytes() const { return token_bytes_; }
  const std::vector<std::pair<std::string, std::vector<McItem>>>& tasks() const { return tasks_; }

 private:
  void load_validation(const RunContext& ctx);
  void load_tasks(const RunContext& ctx);

  std::shared_ptr<TokenDataset> train_data_;  // the first training source
  std::unique_ptr<TrainLoader> loader_;
  std::unique_ptr<ValLoader> val_;
  std::vector<int64_t> epochs_;  // each training source's epoch at the last step begun
  Batch diag_batch_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<int32_t> token_bytes_;
  std::vector<std::pair<std::string, std::vector<McItem>>> tasks_;
};

}  // namespace normlab
