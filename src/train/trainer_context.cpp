#include "train/trainer_context.h"

#include "normlab/eval/info.h"
#include "normlab/util/device.h"
#include "normlab/util/error.h"

namespace normlab {

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
  precision = choose_precision(cfg.train.precision, device, cpu);
  bf16 = precision.bf16;
  fp64 = precision.fp64;
  // Before any tensor: a model that cannot fit stops here with its key, not in an allocation.
  const double shards = !sharded ? 1.0 : static_cast<double>(shard_size > 0 ? shard_size : world);
  require_model_fits(cfg.model, fp64 ? 32.0 : 16.0, shards, device_capacity_bytes(device),
                     device.str(), "its weights, gradients and AdamW moments");
}

}  // namespace normlab
