#include "train/trainer_context.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "normlab/eval/info.h"
#include "normlab/train/checkpoint.h"
#include "normlab/util/device.h"
#include "normlab/util/error.h"

namespace normlab {
namespace fs = std::filesystem;

std::string run_precision(const std::string& run_dir) {
  // RUN/checkpoints/step-<step> (checkpoint.h), newest first; names with a suffix are set aside
  // or unfinished. A state.json that does not read is resume()'s to report; an older one tells.
  std::vector<std::string> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(run_dir) / "checkpoints", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && name.find('.') == std::string::npos) steps.push_back(name);
  }
  std::sort(steps.rbegin(), steps.rend());
  for (const std::string& name : steps) {
    try {
      const std::string p =
          checkpoint_precision((fs::path(run_dir) / "checkpoints" / name).string());
      if (!p.empty()) return p;
    } catch (const CheckpointError&) {
    }
  }
  return "";
}

namespace {

// The precision that the run being resumed trained in ("" when it has no checkpoint that
// records one, as checkpoints written before the record).
std::string resumed_precision(const TrainOptions& o) {
  return o.resume && !o.run_dir.empty() ? run_precision(o.run_dir) : "";
}

// train.precision = auto on resume: the precision the run's checkpoints record, as if asked for
// (with the warning an emulated bf16 gets on this machine), said to be kept.
PrecisionChoice kept_precision(const std::string& name, const torch::Device& device,
                               const CpuClass& cpu) {
  PrecisionChoice c = choose_precision(enum_from_name<Precision>(name, "precision"), device, cpu);
  const std::string where = device.is_cuda() ? "CUDA" : "the CPU";
  c.reason = (c.bf16 ? "bf16 autocast on " + where + " with fp32 weights and optimizer state"
                     : name + " on " + where) +
             "; train.precision = auto, kept from the run's first segment (its checkpoints "
             "record " +
             name +
             "; a run never changes precision on resume, whatever this "
             "machine would choose)";
  return c;
}

}  // namespace

RunContext::RunContext(const RunConfig& config, const TrainOptions& options)
    : cfg(config),
      o(options),
      log(options.logger),
      comm(options.comm ? *options.comm : single_),
      rank(comm.rank()),
      world(comm.world()),
      sharded(world > 1 || config.distributed.force_fsdp),
      lead(rank == 0) {
  if (sharded && cfg.diagnostics.every > 0)
    throw ConfigError(
        "diagnostics.every = " + std::to_string(cfg.diagnostics.every) +
        ": the diagnostics need a single process (run `normlab analyze` on a checkpoint)");
  const int64_t shard_size = cfg.distributed.shard_size;
  if (sharded && shard_size > 0 && (shard_size > world || world % shard_size != 0))
    throw ConfigError("distributed.shard_size = " + std::to_string(shard_size) +
                      ": must divide the number of ranks (" + std::to_string(world) +
                      "), e.g. the GPUs of one node; 0 shards over all ranks");
  device = resolve_device(cfg.train.device, o.device_index);
  cpu = cpu_class(o.onednn_max_isa);
  // Before any tensor (the precision's measurement allocates the model's GEMMs): a model that
  // cannot fit stops here with its key, not in an allocation.
  const double shards = !sharded ? 1.0 : static_cast<double>(shard_size > 0 ? shard_size : world);
  const auto check_fits = [&](bool in_fp64) {
    require_model_fits(cfg.model, in_fp64 ? 32.0 : 16.0, shards, device_capacity_bytes(device),
                       device.str(), "its weights, gradients and AdamW moments");
  };
  check_fits(cfg.train.precision == Precision::Fp64);
  precision = decide_precision();
  bf16 = precision.bf16;
  fp64 = precision.fp64;
  if (fp64 && cfg.train.precision != Precision::Fp64) check_fits(true);  // fp64 kept on resume
}

PrecisionChoice RunContext::decide_precision() {
  const Precision requested = cfg.train.precision;
  const std::string before = resumed_precision(o);
  if (requested == Precision::Auto && !before.empty()) return kept_precision(before, device, cpu);
  if (!precision_needs_timing(requested, device, cpu))
    return choose_precision(requested, device, cpu);
  // One measurement for all ranks: rank 0's, so that every rank trains in the same precision.
  PrecisionTiming t;
  if (lead)
    t = precision_timing(cfg.model, cfg.train.micro_batch * cfg.data.seq_len, cpu,
                         [this](const std::string& m) {
                           if (log) log->warn(m);
                         });
  if (world > 1) {
    torch::Tensor v = torch::tensor({t.fp32_seconds, t.bf16_seconds, static_cast<double>(t.rows)},
                                    torch::kDouble);
    comm.broadcast(v, 0);
    if (!lead) {
      t.fp32_seconds = v[0].item<double>();
      t.bf16_seconds = v[1].item<double>();
      t.rows = static_cast<int64_t>(v[2].item<double>());
      t.source = "measured";
    }
  }
  return choose_precision(requested, device, cpu, &t);
}

}  // namespace normlab
