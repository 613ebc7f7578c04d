// The trainer's checkpoints: save() writes the run's state (weights, optimizer, the CPU
// generator, the counters; sharded under FSDP), resume() finds the newest intact checkpoint,
// checks that the config may continue it and restores that state.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <torch/torch.h>

#include <filesystem>
#include <mutex>

#include "normlab/config/config_io.h"
#include "normlab/nn/experts.h"
#include "normlab/nn/weights.h"
#include "train/trainer_impl.h"

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

// The newest checkpoint whose checksums hold. Corrupted newer ones are reported and, once every
// rank has looked, set aside (step-N.corrupted), so that pruning never keeps them in place of
// good ones.
void Trainer::Impl::resume() {
  const IntactCheckpoint intact = checkpoint_latest_intact(o.run_dir);
  for (const auto& [dir, why] : intact.corrupted)
    if (lead && log) log->error("not resuming from a corrupted checkpoint: " + why);
  comm.barrier();
  if (lead)
    for (const auto& [dir, why] : intact.corrupted)
      info("set aside " + dir + " as " + checkpoint_set_aside(dir));
  comm.barrier();
  if (!intact.dir)
    throw CheckpointError(o.run_dir + ": no intact checkpoint to resume from (" +
                          std::to_string(intact.corrupted.size()) +
                          " corrupted, set aside as step-N.corrupted)");
  latest = intact.dir;
  check_resumable(cfg, (fs::path(*latest) / "config.yaml").string(), lead ? log : nullptr);
  // Under hybrid sharding a checkpoint holds one shard group's pieces: S ranks' files.
  const int64_t shards = fsdp ? fsdp->shard_world() : world;
  const int64_t saved_world = checkpoint_world(*latest);
  if (saved_world > 1 && saved_world != shards)
    throw CheckpointError(
        *latest + " was written by " + std::to_string(saved_world) + " shards and this run " +
        (shards < world ? "has shard groups of " + std::to_string(shards) + " ranks"
                        : "has " + std::to_string(world) + " ranks") +
        ": join its shards with `normlab checkpoint consolidate " + "--checkpoint " + *latest +
        " --out NEW_RUN_DIR`, then resume NEW_RUN_DIR on any number of ranks");
  const Checkpoint ck = checkpoint_load(*latest, fsdp ? fsdp->shard_rank() : rank);
  restore(ck);
  {
    at::Generator gen = cpu_generator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(ck.optimizer.at("rng.cpu"));
  }
  st = ck.state;
  spikes.restore(st.spike_window, st.spikes);
  info("resumed from " + ck.path + " at step " + std::to_string(st.step));
}

// Weights and optimizer state: whole into one process, sliced onto FSDP ranks from a whole
// checkpoint, or each rank's own pieces from a sharded one.
void Trainer::Impl::restore(const Checkpoint& ck) {
  if (!sharded) {
    load_weights(*model, ck.model, ck.path);
    opt->load_state(ck.optimizer);
  } else if (ck.world == 1) {
    fsdp->load_full(ck.model, ck.path);
    opt->load_state(fsdp->slice_state(ck.optimizer));
  } else {
    if (has_legacy_experts(ck.model))
      throw CheckpointError(ck.path +
                            " holds MoE experts one by one (experts.<e>.up.weight, the layout "
                            "before they were stacked) in sharded pieces: join them with "
                            "`normlab checkpoint consolidate --checkpoint " +
                            ck.path +
                            " --out NEW_RUN_DIR`, which stacks them, then resume NEW_RUN_DIR");
    torch::NoGradGuard no_grad;
    for (const ShardPiece& p : fsdp->pieces()) {
      const auto it = ck.model.find(p.name);
      if (it == ck.model.end() || it->second.numel() != p.param.numel() ||
          ck.starts.at(p.name) != p.start)
        throw CheckpointError(ck.path + ": rank " + std::to_string(rank) + "'s piece of '" +
                              p.name + "' is missing or has another size");
      p.param.copy_(it->second.reshape(-1));
    }
    opt->load_state(ck.optimizer);
  }
}

std::string Trainer::Impl::save() {
  Checkpoint ck;
  ck.optimizer = opt->state();
  {
    at::Generator gen = cpu_generator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    ck.optimizer["rng.cpu"] = gen.get_state();
  }
  ck.state = st;
  ck.state.spike_window = spikes.window();
  ck.state.spikes = spikes.spikes();
  ck.config_yaml = config_yaml;
  if (!sharded) {
    ck.model = weights_of(*model);
    return checkpoint_save(o.run_dir, ck, cfg.checkpoint.keep, o.checkpoint_fault);
  }
  // Hybrid sharding: the replicas hold the same pieces; the first shard group writes them (a
  // checkpoint of S ranks) while the others wait for it.
  const int64_t shards = fsdp->shard_world();
  if (fsdp->replica() > 0) {
    comm.barrier();
    return "written by the first shard group";
  }
  std::string dir;
  if (shards == 1) {  // one shard holds whole parameters (force_fsdp, or shard_size 1)
    for (const ShardPiece& p : fsdp->pieces()) {
      ck.model[p.name] = p.param.detach().reshape(p.shape);
      for (const std::string prefix : {"exp_avg.", "exp_avg_sq."}) {
        torch::Tensor& t = ck.optimizer.at(prefix + p.name);
        t = t.reshape(p.shape);
      }
    }
    dir = checkpoint_save(o.run_dir, ck, cfg.checkpoint.keep, o.checkpoint_fault);
  } else {
    ck.model = fsdp->local_weights();
    ck.world = shards;
    ck.rank = fsdp->shard_rank();
    for (const ShardPiece& p : fsdp->pieces()) {
      ck.starts[p.name] = p.start;
      ck.shapes[p.name] = p.shape;
    }
    dir = checkpoint_save_sharded(
        o.run_dir, ck, cfg.checkpoint.keep, [&] { fsdp->shard_comm().barrier(); },
        o.checkpoint_fault);
  }
  if (shards < world) comm.barrier();  // the other replicas wait for the files
  return dir;
}

}  // namespace normlab
