#include "train/trainer_data.h"

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "normlab/util/error.h"

namespace normlab {
namespace fs = std::filesystem;

TrainData::TrainData(const RunContext& ctx) {
  const RunConfig& cfg = ctx.cfg;
  if (cfg.data.train.empty())
    throw ConfigError(
        "data.train is empty: set it to a folder written by `normlab data prepare` or to a "
        "source (docs/data.md)");
  std::vector<std::shared_ptr<const TokenDataset>> sources;
  std::vector<double> weights;
  for (const DataSource& s : cfg.data.train) {
    auto d = std::make_shared<TokenDataset>(s, "train", cfg.data.seq_len, cfg.model.vocab_size);
    if (s.format == DataFormat::Shards)
      check_vocabulary(d->index(), s.path, cfg.model.vocab_size, cfg.data.tokenizer);
    if (!train_data_) train_data_ = d;
    sources.push_back(std::move(d));
    weights.push_back(s.weight);
  }
  if (!cfg.data.tokenizer.empty() && fs::exists(cfg.data.tokenizer)) {
    tokenizer_ = std::make_unique<Tokenizer>(cfg.data.tokenizer);
    token_bytes_ = tokenizer_->token_byte_lengths();
  }
  load_validation(ctx);
  if (cfg.diagnostics.every > 0 && !diag_batch_.inputs.defined())  // no validation split
    diag_batch_ =
        ValLoader(train_data_, std::min<int64_t>(cfg.diagnostics.batch, train_data_->num_samples()))
            .batch(0);
  load_tasks(ctx);
  if (cfg.train.global_batch % (cfg.train.micro_batch * ctx.world) != 0)
    throw ConfigError("train.global_batch = " + std::to_string(cfg.train.global_batch) +
                      " must be a multiple of train.micro_batch x world size = " +
                      std::to_string(cfg.train.micro_batch) + " x " + std::to_string(ctx.world));
  LoaderOptions lo;
  lo.micro_batch = cfg.train.micro_batch;
  lo.global_batch = cfg.train.global_batch;
  lo.seed = cfg.train.seed;
  lo.rank = ctx.rank;
  lo.world_size = ctx.world;
  loader_ = std::make_unique<TrainLoader>(std::move(sources), weights, lo);
  if (cfg.diagnostics.every > 0)
    diag_batch_ = {diag_batch_.inputs.to(ctx.device), diag_batch_.targets.to(ctx.device)};
}

void TrainData::load_validation(const RunContext& ctx) {
  const RunConfig& cfg = ctx.cfg;
  DataSource source;
  if (!cfg.data.val.empty())
    source = cfg.data.val[0];
  else if (cfg.data.train.size() == 1 && cfg.data.train[0].format == DataFormat::Shards)
    source.path = cfg.data.train[0].path;
  if (source.path.empty()) {
    if (ctx.log) ctx.log->warn("no data.val for a data.train of this kind: no evaluation");
    return;
  }
  if (source.format == DataFormat::Shards) {
    const ShardIndex vidx = shard_index_read(source.path);
    const auto it = vidx.splits.find("val");
    if (it == vidx.splits.end() || it->second.tokens <= static_cast<uint64_t>(cfg.data.seq_len)) {
      if (ctx.log)
        ctx.log->warn(source.path +
                      " has no validation split of at least one sample: no evaluation");
      return;
    }
    check_vocabulary(vidx, source.path, cfg.model.vocab_size, cfg.data.tokenizer);
  }
  auto val_data =
      std::make_shared<TokenDataset>(source, "val", cfg.data.seq_len, cfg.model.vocab_size);
  const int64_t vb = cfg.eval.micro_batch > 0 ? cfg.eval.micro_batch : cfg.train.micro_batch;
  val_ = std::make_unique<ValLoader>(
      val_data, std::min<int64_t>(vb, std::max<int64_t>(val_data->num_samples() / ctx.world, 1)),
      ctx.rank, ctx.world);
  if (cfg.diagnostics.every > 0)
    diag_batch_ =
        ValLoader(val_data, std::min<int64_t>(cfg.diagnostics.batch, val_data->num_samples()))
            .batch(0);
}

// Multiple-choice tasks are read before any work, so that a bad file fails the run at once.
void TrainData::load_tasks(const RunContext& ctx) {
  std::stringstream list(ctx.cfg.eval.tasks);
  for (std::string path; std::getline(list, path, ',');) {
    if (path.empty()) continue;
    if (!tokenizer_) throw ConfigError("eval.tasks needs data.tokenizer (the model's tokenizer)");
    tasks_.emplace_back(fs::path(path).stem().string(), load_mc_task(path));
  }
}

// Each training source in the log: what it is, its share of the run's samples (the loader's
// exact draws over train.steps) and how many times it is read; a source read more than once
// repeats, which the log states when each new epoch begins (note_epochs).
void TrainData::describe(const RunContext& ctx) const {
  const int64_t total = ctx.cfg.train.steps * ctx.cfg.train.global_batch;
  for (int64_t s = 0; s < loader_->num_sources(); ++s) {
    const TokenDataset& d = loader_->source(s);
    const int64_t draws = loader_->plan().draws_before(s, total);
    char msg[160];
    std::snprintf(msg, sizeof msg,
                  ": %llu %s tokens, %lld samples; weight %.4g, %.2f%% of the run's tokens "
                  "(%lld samples), %.3g epochs",
                  static_cast<unsigned long long>(d.num_tokens()), d.dtype().c_str(),
                  static_cast<long long>(d.num_samples()), loader_->plan().share(s),
                  100.0 * static_cast<double>(draws) / static_cast<double>(total),
                  static_cast<long long>(draws),
                  static_cast<double>(draws) / static_cast<double>(d.num_samples()));
    ctx.info("data source " + std::to_string(s) + " (" + std::string(enum_name(d.source().format)) +
             " " + d.source().path + ")" + msg + (draws > d.num_samples() ? ": it repeats" : ""));
  }
}

void TrainData::note_epochs(const RunContext& ctx, int64_t step) {
  const auto n = static_cast<size_t>(loader_->num_sources());
  const bool first = epochs_.empty();
  epochs_.resize(n, 0);
  for (size_t s = 0; s < n; ++s) {
    const int64_t e = loader_->source_epoch(static_cast<int64_t>(s), step);
    if (!first && e > epochs_[s])
      ctx.info("data source " + std::to_string(s) + " (" +
               loader_->source(static_cast<int64_t>(s)).source().path + ") begins epoch " +
               std::to_string(e) + " at step " + std::to_string(step) +
               ": its samples repeat, in a new order");
    epochs_[s] = e;
  }
}

}  // namespace normlab
