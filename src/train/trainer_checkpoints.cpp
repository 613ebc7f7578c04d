// RunCheckpoints: the run folder's lock, config.yaml, and the trainer's checkpoints: save()
// writes the run's state (weights, optimizer, the CPU generator, the counters; sharded under
// FSDP), resume() finds the newest intact checkpoint, checks that the config may continue it
// and restores that state.
#include "train/trainer_checkpoints.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <torch/torch.h>

#include <filesystem>
#include <mutex>

#include "normlab/config/config_io.h"
#include "normlab/nn/weights.h"

namespace normlab {
namespace fs = std::filesystem;
namespace {

// Resuming may change how long to train or how to log, never what the model is.
void check_resumable(const RunConfig& now, const std::string& saved_config_path, Logger* log) {
  const RunConfig saved = config_load(saved_config_path);
  const auto a = config_flatten(saved), b = config_flatten(now);
  std::string arch, other;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].second == b[i].second) continue;
    const std::string line = "\n  " + a[i].first + ": " + a[i].second + " -> " + b[i].second;
    (a[i].first.rfind("model.", 0) == 0 ? arch : other) += line;
  }
  if (!arch.empty())
    throw CheckpointError("cannot resume " + saved_config_path +
                          " with a changed architecture:" + arch);
  if (!other.empty() && log) log->warn("resuming with changed settings:" + other);
}

at::Generator cpu_generator() { return at::detail::getDefaultCPUGenerator(); }

}  // namespace

RunCheckpoints::RunCheckpoints(const RunContext& ctx) {
  const std::string& dir = ctx.o.run_dir;
  if (dir.empty()) throw ConfigError("train: no run folder (--out)");
  fs::create_directories(dir);
  // One process per run folder: a second `normlab train` on it (or a sweep relaunching a point
  // whose killed predecessor is still exiting) stops here instead of interleaving writes. In a
  // multi-process run rank 0 holds it for all.
  if (ctx.lead)
    lock_ = std::make_unique<FileLock>((fs::path(dir) / ".lock").string(),
                                       "a normlab train runs there");
  latest_ = checkpoint_latest(dir);
  if (latest_ && !ctx.o.resume)
    throw CheckpointError(dir + " already holds checkpoints (newest " +
                          fs::path(*latest_).filename().string() +
                          "): pass --resume to continue that run, or choose another --out");
  resuming_ = ctx.o.resume && latest_;
}

// The newest checkpoint whose checksums hold. Corrupted newer ones are reported and, once every
// rank has looked, set aside (step-N.corrupted), so that pruning never keeps them in place of
// good ones.
void RunCheckpoints::resume(const RunContext& ctx, RunState& state) {
  const IntactCheckpoint intact = checkpoint_latest_intact(ctx.o.run_dir);
  for (const auto& [dir, why] : intact.corrupted)
    if (ctx.lead && ctx.log) ctx.log->error("not resuming from a corrupted checkpoint: " + why);
  ctx.comm.barrier();
  if (ctx.lead)
    for (const auto& [dir, why] : intact.corrupted)
      ctx.info("set aside " + dir + " as " + checkpoint_set_aside(dir));
  ctx.comm.barrier();
  if (!intact.dir)
    throw CheckpointError(ctx.o.run_dir + ": no intact checkpoint to resume from (" +
                          std::to_string(intact.corrupted.size()) +
                          " corrupted, set aside as step-N.corrupted)");
  latest_ = intact.dir;
  check_resumable(ctx.cfg, (fs::path(*latest_) / "config.yaml").string(),
                  ctx.lead ? ctx.log : nullptr);
  // Under hybrid sharding a checkpoint holds one shard group's pieces: S ranks' files.
  const Fsdp* fsdp = state.fsdp();
  const int64_t shards = fsdp ? fsdp->shard_world() : ctx.world;
  const int64_t saved_world = checkpoint_world(*latest_);
  if (saved_world > 1 && saved_world != shards)
    throw CheckpointError(
        *latest_ + " was written by " + std::to_string(saved_world) + " shards and this run " +
        (shards < ctx.world ? "has shard groups of " + std::to_string(shards) + " ranks"
                            : "has " + std::to_string(ctx.world) + " ranks") +
        ": join its shards with `normlab checkpoint consolidate " + "--checkpoint " + *latest_ +
        " --out NEW_RUN_DIR`, then resume NEW_RUN_DIR on any number of ranks");
  const Checkpoint ck = checkpoint_load(*latest_, fsdp ? fsdp->shard_rank() : ctx.rank);
  state.restore(ctx, ck);
  {
    at::Generator gen = cpu_generator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(ck.optimizer.at("rng.cpu"));
  }
  state.restore_progress(ck.state);
  ctx.info("resumed from " + ck.path + " at step " + std::to_string(state.steps_done()));
}

void RunCheckpoints::write_config(const RunContext& ctx) {
  config_yaml_ = config_to_yaml(ctx.cfg);
  if (ctx.lead)
    write_file_atomic((fs::path(ctx.o.run_dir) / "config.yaml").string(),
                      [&](FileWriter& w) { w.write(config_yaml_); });
}

std::string RunCheckpoints::save(const RunContext& ctx, RunState& state) {
  Checkpoint ck;
  ck.optimizer = state.optimizer().state();
  {
    at::Generator gen = cpu_generator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    ck.optimizer["rng.cpu"] = gen.get_state();
  }
  ck.state = state.progress();
  ck.config_yaml = config_yaml_;
  const std::string& dir = ctx.o.run_dir;
  const int64_t keep = ctx.cfg.checkpoint.keep;
  Fsdp* fsdp = state.fsdp();
  if (!fsdp) {
    ck.model = weights_of(*state.model());
    return checkpoint_save(dir, ck, keep, ctx.o.checkpoint_fault);
  }
  // Hybrid sharding: the replicas hold the same pieces; the first shard group writes them (a
  // checkpoint of S ranks) while the others wait for it.
  const int64_t shards = fsdp->shard_world();
  if (fsdp->replica() > 0) {
    ctx.comm.barrier();
    return "written by the first shard group";
  }
  std::string out;
  if (shards == 1) {  // one shard holds whole parameters (force_fsdp, or shard_size 1)
    for (const ShardPiece& p : fsdp->pieces()) {
      ck.model[p.name] = p.param.detach().reshape(p.shape);
      for (const std::string prefix : {"exp_avg.", "exp_avg_sq."}) {
        torch::Tensor& t = ck.optimizer.at(prefix + p.name);
        t = t.reshape(p.shape);
      }
    }
    out = checkpoint_save(dir, ck, keep, ctx.o.checkpoint_fault);
  } else {
    ck.model = fsdp->local_weights();
    ck.world = shards;
    ck.rank = fsdp->shard_rank();
    for (const ShardPiece& p : fsdp->pieces()) {
      ck.starts[p.name] = p.start;
      ck.shapes[p.name] = p.shape;
    }
    out = checkpoint_save_sharded(
        dir, ck, keep, [&] { fsdp->shard_comm().barrier(); }, ctx.o.checkpoint_fault);
  }
  if (shards < ctx.world) ctx.comm.barrier();  // the other replicas wait for the files
  return out;
}

}  // namespace normlab
