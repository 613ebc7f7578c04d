// Trainer construction: the run folder and its lock, the device, the data (training, validation,
// the diagnostics batch, tasks), the model, the ranks' agreement on what they run (several
// processes), FSDP when sharded and the optimizer, then the
// resumed state, the resolved config.yaml, the logs and the run's description in the log.
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "normlab/config/config_io.h"
#include "normlab/distributed/agreement.h"
#include "normlab/eval/info.h"
#include "normlab/nn/attention.h"
#include "normlab/nn/parameter_roles.h"
#include "normlab/nn/weights.h"
#include "normlab/util/device.h"
#include "normlab/util/safetensors.h"
#include "train/trainer_impl.h"

namespace normlab {
namespace fs = std::filesystem;
namespace {

const char* short_name(torch::ScalarType t) {
  return t == torch::kBFloat16 ? "bf16" : t == torch::kDouble ? "fp64" : "fp32";
}

}  // namespace

Trainer::Impl::Impl(const RunConfig& config, const TrainOptions& options)
    : cfg(config),
      o(options),
      log(options.logger),
      comm(options.comm ? *options.comm : single),
      rank(comm.rank()),
      world(comm.world()),
      sharded(world > 1 || config.distributed.force_fsdp),
      lead(rank == 0),
      spikes(config.train.spike_window, config.train.spike_sigma) {
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
  precision = choose_precision(cfg.train.precision, device,
                               device.is_cuda() ? std::string() : cpu_native_bf16());
  bf16 = precision.bf16;
  fp64 = precision.fp64;
  // Before any tensor: a model that cannot fit stops here with its key, not in an allocation.
  const double shards = !sharded ? 1.0 : static_cast<double>(shard_size > 0 ? shard_size : world);
  require_model_fits(cfg.model, fp64 ? 32.0 : 16.0, shards, device_capacity_bytes(device),
                     device.str(), "its weights, gradients and AdamW moments");
  open_run_folder();  // after the checks above: a refused run leaves no folder behind
  load_data();
  build_model();
  if (o.resume && latest) resume();
  config_yaml = config_to_yaml(cfg);
  if (lead)
    write_file_atomic((fs::path(o.run_dir) / "config.yaml").string(),
                      [&](FileWriter& w) { w.write(config_yaml); });
  open_logs();
  describe();
}

void Trainer::Impl::open_run_folder() {
  if (o.run_dir.empty()) throw ConfigError("train: no run folder (--out)");
  fs::create_directories(o.run_dir);
  // One process per run folder: a second `normlab train` on it (or a sweep relaunching a point
  // whose killed predecessor is still exiting) stops here instead of interleaving writes. In a
  // multi-process run rank 0 holds it for all.
  if (lead)
    run_lock = std::make_unique<FileLock>((fs::path(o.run_dir) / ".lock").string(),
                                          "a normlab train runs there");
  latest = checkpoint_latest(o.run_dir);
  if (latest && !o.resume)
    throw CheckpointError(o.run_dir + " already holds checkpoints (newest " +
                          fs::path(*latest).filename().string() +
                          "): pass --resume to continue that run, or choose another --out");
}

void Trainer::Impl::load_data() {
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
    if (!train_data) train_data = d;
    sources.push_back(std::move(d));
    weights.push_back(s.weight);
  }
  if (!cfg.data.tokenizer.empty() && fs::exists(cfg.data.tokenizer)) {
    tokenizer = std::make_unique<Tokenizer>(cfg.data.tokenizer);
    token_bytes = tokenizer->token_byte_lengths();
  }
  load_validation();
  if (cfg.diagnostics.every > 0 && !diag_batch.inputs.defined())  // no validation split
    diag_batch =
        ValLoader(train_data, std::min<int64_t>(cfg.diagnostics.batch, train_data->num_samples()))
            .batch(0);
  load_tasks();
  if (cfg.train.global_batch % (cfg.train.micro_batch * world) != 0)
    throw ConfigError("train.global_batch = " + std::to_string(cfg.train.global_batch) +
                      " must be a multiple of train.micro_batch x world size = " +
                      std::to_string(cfg.train.micro_batch) + " x " + std::to_string(world));
  LoaderOptions lo;
  lo.micro_batch = cfg.train.micro_batch;
  lo.global_batch = cfg.train.global_batch;
  lo.seed = cfg.train.seed;
  lo.rank = rank;
  lo.world_size = world;
  loader = std::make_unique<TrainLoader>(std::move(sources), weights, lo);
}

void Trainer::Impl::load_validation() {
  DataSource source;
  if (!cfg.data.val.empty())
    source = cfg.data.val[0];
  else if (cfg.data.train.size() == 1 && cfg.data.train[0].format == DataFormat::Shards)
    source.path = cfg.data.train[0].path;
  if (source.path.empty()) {
    if (log) log->warn("no data.val for a data.train of this kind: no evaluation");
    return;
  }
  std::shared_ptr<TokenDataset> val_data;
  if (source.format == DataFormat::Shards) {
    const ShardIndex vidx = shard_index_read(source.path);
    const auto it = vidx.splits.find("val");
    if (it == vidx.splits.end() || it->second.tokens <= static_cast<uint64_t>(cfg.data.seq_len)) {
      if (log)
        log->warn(source.path + " has no validation split of at least one sample: no evaluation");
      return;
    }
    check_vocabulary(vidx, source.path, cfg.model.vocab_size, cfg.data.tokenizer);
  }
  val_data = std::make_shared<TokenDataset>(source, "val", cfg.data.seq_len, cfg.model.vocab_size);
  const int64_t vb = cfg.eval.micro_batch > 0 ? cfg.eval.micro_batch : cfg.train.micro_batch;
  val = std::make_unique<ValLoader>(
      val_data, std::min<int64_t>(vb, std::max<int64_t>(val_data->num_samples() / world, 1)), rank,
      world);
  if (cfg.diagnostics.every > 0)
    diag_batch =
        ValLoader(val_data, std::min<int64_t>(cfg.diagnostics.batch, val_data->num_samples()))
            .batch(0);
}

// Each training source in the log: what it is, its share of the run's samples (the loader's
// exact draws over train.steps) and how many times it is read; a source read more than once
// repeats, which the log states when each new epoch begins (note_data_epochs).
void Trainer::Impl::describe_data() {
  const int64_t total = cfg.train.steps * cfg.train.global_batch;
  for (int64_t s = 0; s < loader->num_sources(); ++s) {
    const TokenDataset& d = loader->source(s);
    const int64_t draws = loader->plan().draws_before(s, total);
    char msg[160];
    std::snprintf(msg, sizeof msg,
                  ": %llu %s tokens, %lld samples; weight %.4g, %.2f%% of the run's tokens "
                  "(%lld samples), %.3g epochs",
                  static_cast<unsigned long long>(d.num_tokens()), d.dtype().c_str(),
                  static_cast<long long>(d.num_samples()), loader->plan().share(s),
                  100.0 * static_cast<double>(draws) / static_cast<double>(total),
                  static_cast<long long>(draws),
                  static_cast<double>(draws) / static_cast<double>(d.num_samples()));
    info("data source " + std::to_string(s) + " (" + std::string(enum_name(d.source().format)) +
         " " + d.source().path + ")" + msg + (draws > d.num_samples() ? ": it repeats" : ""));
  }
}

void Trainer::Impl::note_data_epochs(int64_t step) {
  const auto n = static_cast<size_t>(loader->num_sources());
  const bool first = data_epochs.empty();
  data_epochs.resize(n, 0);
  for (size_t s = 0; s < n; ++s) {
    const int64_t e = loader->source_epoch(static_cast<int64_t>(s), step);
    if (!first && e > data_epochs[s])
      info("data source " + std::to_string(s) + " (" +
           loader->source(static_cast<int64_t>(s)).source().path + ") begins epoch " +
           std::to_string(e) + " at step " + std::to_string(step) +
           ": its samples repeat, in a new order");
    data_epochs[s] = e;
  }
}

// Multiple-choice tasks are read before any work, so that a bad file fails the run at once.
void Trainer::Impl::load_tasks() {
  std::stringstream list(cfg.eval.tasks);
  for (std::string path; std::getline(list, path, ',');) {
    if (path.empty()) continue;
    if (!tokenizer) throw ConfigError("eval.tasks needs data.tokenizer (the model's tokenizer)");
    tasks.emplace_back(fs::path(path).stem().string(), load_mc_task(path));
  }
}

void Trainer::Impl::build_model() {
  torch::manual_seed(cfg.train.seed);  // the same initial weights on every rank
  model = DecoderLM(cfg.model, device);
  if (fp64) model->to(torch::kDouble);
  if (!o.init_from.empty() && !(o.resume && latest)) {  // a checkpoint, if any, wins
    const std::string file = fs::is_directory(o.init_from)
                                 ? (fs::path(o.init_from) / "model.safetensors").string()
                                 : o.init_from;
    load_weights(*model, safetensors_load(file).tensors, file);
    info("initial weights from " + file);
  }
  for (const auto& p : model->parameters()) {
    params.push_back(p);
    n_params += p.numel();
  }
  if (world > 1) {  // before FSDP's first gather: every rank about to run the same thing
    std::vector<std::pair<std::string, torch::Tensor>> weights;
    for (const auto& p : model->named_parameters()) weights.emplace_back(p.key(), p.value());
    check_ranks_agree(comm, launch_facts(config_to_yaml(cfg), comm, device, weights), device);
  }
  activation_checkpointing_every =
      cfg.train.activation_checkpointing == ActivationCheckpointing::None ? 0
      : cfg.train.activation_checkpointing == ActivationCheckpointing::Block
          ? 1
          : cfg.train.selective_every;
  if (!sharded) {
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (const auto& p : model->named_parameters()) named.emplace_back(p.key(), p.value());
    opt = std::make_unique<AdamW>(named, cfg.optimizer);
    activation_checkpointed_blocks =
        std::make_unique<ActivationCheckpointedBlocks>(activation_checkpointing_every);
    if (activation_checkpointing_every > 0) model->hooks = activation_checkpointed_blocks.get();
    return;
  }
  FsdpOptions fo;
  fo.reshard_after_forward = cfg.distributed.reshard_after_forward;
  fo.activation_checkpointing_every = activation_checkpointing_every;
  fo.prefetch = cfg.distributed.prefetch;
  fo.overlap_reduce = cfg.distributed.overlap_reduce;
  // auto: the compute dtype (bf16 under autocast) for gathers; reductions follow the gathers.
  const auto dtype_of = [](Precision p, torch::ScalarType automatic) {
    return p == Precision::Auto   ? automatic
           : p == Precision::Bf16 ? torch::kBFloat16
                                  : torch::kFloat;
  };
  fo.param_dtype = dtype_of(cfg.distributed.param_dtype, bf16 ? torch::kBFloat16 : torch::kFloat);
  fo.reduce_dtype = dtype_of(cfg.distributed.reduce_dtype, fo.param_dtype);
  if (fp64) fo.param_dtype = fo.reduce_dtype = torch::kDouble;
  fo.shard_size = cfg.distributed.shard_size;
  fo.keep_fp32 = parameters_kept_fp32(*model, cfg.distributed.keep_fp32);
  fsdp_dtypes = std::string(", gathers in ") + short_name(fo.param_dtype) + ", reductions in " +
                short_name(fo.reduce_dtype);
  if (!fp64 && (fo.param_dtype != torch::kFloat || fo.reduce_dtype != torch::kFloat))
    fsdp_dtypes += " (" + std::to_string(fo.keep_fp32.size()) +
                   " parameters kept in fp32: " + cfg.distributed.keep_fp32 + ")";
  fsdp = std::make_unique<Fsdp>(model, comm, fo, weight_decay_names(*model, cfg.optimizer));
  if (fsdp->shard_world() < world)
    fsdp_dtypes += ", hybrid: shard groups of " + std::to_string(fsdp->shard_world()) + " ranks, " +
                   std::to_string(world / fsdp->shard_world()) + " replicas";
  std::vector<OptParam> pieces;
  for (const ShardPiece& p : fsdp->pieces()) pieces.push_back({p.name, p.param, p.decay});
  opt = std::make_unique<AdamW>(pieces, cfg.optimizer);
}

// The run's shape in the log, with what the steps run on: the attention kernel LibTorch
// dispatches to for this shape and, on CUDA, the matmul rate this GPU reaches now (the second
// MFU denominator beside the nominal one).
void Trainer::Impl::describe() {
  const ParamCounts counts = count_parameters(cfg.model);
  flops_token = flops_per_token(cfg.model, cfg.data.seq_len);
  tokens_per_step = static_cast<double>(cfg.train.global_batch * cfg.data.seq_len);
  attn_backend = attention_backend(attention_options(cfg.model, device), cfg.train.micro_batch,
                                   cfg.data.seq_len, bf16 ? torch::kBFloat16 : torch::kFloat);
  matmul_flops = device.is_cuda() ? measure_matmul_flops(device) : 0.0;
  sum.run_dir = o.run_dir;
  sum.scheme = std::string(enum_name(cfg.model.scheme));
  sum.steps_planned = cfg.train.steps;
  sum.parameters = counts.total;
  sum.attention_backend = attn_backend;
  info("model " + sum.scheme + ": " + std::to_string(counts.total) + " parameters on " +
       device.str() +
       (bf16   ? " (bf16 autocast)"
        : fp64 ? " (fp64)"
               : " (fp32)") +
       "; " + std::to_string(cfg.train.steps) + " steps of " +
       std::to_string(cfg.train.global_batch) + " x " + std::to_string(cfg.data.seq_len) +
       " tokens (" + std::to_string(loader->micro_steps()) + " micro-steps" +
       (sharded ? " on each of " + std::to_string(world) + " ranks, FSDP over " + comm.backend() +
                      fsdp_dtypes
                : "") +
       "); run folder " + o.run_dir);
  info("precision: " + precision.reason);
  if (!precision.warning.empty() && log && lead) log->warn(precision.warning);
  describe_data();
  char msg[200];
  std::snprintf(msg, sizeof msg,
                "attention: SDPA backend %s; %.3g FLOP per token (6N + causal attention)",
                attn_backend.c_str(), flops_token);
  info(msg);
  if (device.is_cuda()) {
    gpu_name = cuda_devices().at(static_cast<size_t>(std::max<int>(device.index(), 0))).name;
    peak = mfu_peak(gpu_name, cfg.logging.peak_tflops * 1e12);
    if (peak)
      std::snprintf(msg, sizeof msg,
                    "matmul: %.1f TFLOP/s measured (bf16 8192^3); MFU over %.0f TFLOP/s (%s, %s) "
                    "and over this",
                    matmul_flops / 1e12, peak->flops / 1e12, gpu_name.c_str(),
                    peak->model == "given" ? "logging.peak_tflops" : peak->model.c_str());
    else
      std::snprintf(msg, sizeof msg,
                    "matmul: %.1f TFLOP/s measured (bf16 8192^3); %s has no peak in the table: "
                    "MFU over this only (logging.peak_tflops sets one)",
                    matmul_flops / 1e12, gpu_name.c_str());
    info(msg);
  }
}

}  // namespace normlab
