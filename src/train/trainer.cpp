// The training run. Trainer::Impl holds what construction builds (run folder, device, data,
// model, FSDP, optimizer, resumed state, open logs); each step of the loop is one member:
//   step()       micro-batches with gradient accumulation, clipping, the divergence guard, AdamW
//   evaluate()   validation loss and multiple-choice tasks
//   diagnose()   the paper's diagnostics on a fixed batch (diagnostics.every)
//   save()       a checkpoint (sharded under FSDP)
//   finish()     summary.json
// and run() strings them together with the metrics, the progress line and the stop flag.
#include "normlab/train/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "normlab/config/config_io.h"
#include "normlab/data/loader.h"
#include "normlab/data/tokenizer.h"
#include "normlab/distributed/communicator.h"
#include "normlab/distributed/fsdp.h"
#include "normlab/eval/diagnostics.h"
#include "normlab/eval/evaluate.h"
#include "normlab/eval/info.h"
#include "normlab/eval/tasks.h"
#include "normlab/nn/attention.h"
#include "normlab/nn/autocast.h"
#include "normlab/nn/model.h"
#include "normlab/nn/recompute.h"
#include "normlab/nn/weights.h"
#include "normlab/train/checkpoint.h"
#include "normlab/train/optimizer.h"
#include "normlab/train/schedule.h"
#include "normlab/train/stability.h"
#include "normlab/util/device.h"
#include "normlab/util/file_io.h"
#include "normlab/util/safetensors.h"
#include "normlab/util/tensorboard.h"

namespace normlab {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr double kPeakBf16Flops = 989e12;  // H100/H200 SXM dense bf16, the nominal MFU denominator

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string duration(double s) {
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s / 3600),
                  static_cast<int>(s / 60) % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s / 60), static_cast<int>(s) % 60);
  else
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  return buf;
}

nlohmann::json finite_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

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

// One rank's evaluation numbers -> the numbers over all ranks' batches.
EvalResult combine(EvalResult r, Communicator& comm) {
  torch::Tensor t =
      torch::tensor({r.loss * static_cast<double>(r.tokens), static_cast<double>(r.tokens),
                     static_cast<double>(r.bytes), static_cast<double>(r.batches)},
                    torch::kDouble);
  comm.all_reduce(t, ReduceOp::Sum);
  const double total = t[0].item<double>();
  r.tokens = static_cast<int64_t>(t[1].item<double>());
  r.bytes = static_cast<int64_t>(t[2].item<double>());
  r.batches = static_cast<int64_t>(t[3].item<double>());
  r.loss = r.tokens > 0 ? total / static_cast<double>(r.tokens) : 0.0;
  r.perplexity = std::exp(r.loss);
  if (r.bytes > 0) {
    r.byte_perplexity = std::exp(total / static_cast<double>(r.bytes));
    r.bits_per_byte = total / (static_cast<double>(r.bytes) * std::log(2.0));
  }
  return r;
}

// The lines of a JSONL file up to `step` (a resumed run keeps those of the steps before it).
void keep_lines_up_to(const std::string& path, int64_t step) {
  std::string kept;
  if (step > 0 && fs::exists(path)) {
    std::istringstream in(read_file(path));
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_discarded() && j.value("step", int64_t{0}) <= step) kept += line + "\n";
    }
  }
  write_file_atomic(path, [&](FileWriter& w) { w.write(kept); });
}

// A metrics line as TensorBoard scalars: train/<key> for the step's numbers, eval/<key> for the
// validation numbers, tasks/<name>_acc[_norm] for the multiple-choice tasks; flags (spike,
// skipped, diverged) and nulls are left out.
std::vector<Scalar> metrics_scalars(const nlohmann::json& line) {
  std::vector<Scalar> out;
  for (const auto& [key, value] : line.items()) {
    if (key == "step" || !value.is_number()) continue;
    const std::string tag = key.rfind("val_", 0) == 0    ? "eval/" + key
                            : key.rfind("task_", 0) == 0 ? "tasks/" + key.substr(5)
                                                         : "train/" + key;
    out.emplace_back(tag, value.get<double>());
  }
  return out;
}

// The diagnostics as TensorBoard scalars, one tag per layer: diagnostics/<what>_<stream>/entry
// and .../block_NN for the stream norms, stream gradients and logit lens;
// diagnostics/<attn|mlp>_grad/block_NN; diagnostics/gain_ratio_<branch>/block_NN and
// diagnostics/gain_ratio_final.
std::vector<Scalar> diagnostics_scalars(const DiagnosticsReport& d) {
  std::vector<Scalar> out;
  const auto layer_name = [](int64_t layer) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "block_%02lld", static_cast<long long>(layer));
    return layer < 0 ? std::string("entry") : std::string(buf);
  };
  const auto per_stream = [&](const char* what, const std::vector<PerStream>& v) {
    for (const PerStream& s : v)
      for (size_t i = 0; i < s.values.size(); ++i)
        out.emplace_back(std::string("diagnostics/") + what + "_" + s.stream + "/" +
                             layer_name(static_cast<int64_t>(i) - 1),
                         s.values[i]);
  };
  per_stream("rms", d.rms);
  per_stream("l2", d.l2);
  per_stream("stream_grad", d.stream_grad);
  per_stream("lens", d.lens);
  for (size_t l = 0; l < d.attn_grad.size(); ++l)
    out.emplace_back("diagnostics/attn_grad/" + layer_name(static_cast<int64_t>(l)),
                     d.attn_grad[l]);
  for (size_t l = 0; l < d.mlp_grad.size(); ++l)
    out.emplace_back("diagnostics/mlp_grad/" + layer_name(static_cast<int64_t>(l)), d.mlp_grad[l]);
  for (const GainRatio& g : d.gains)
    out.emplace_back(g.layer < 0 ? "diagnostics/gain_ratio_final"
                                 : "diagnostics/gain_ratio_" + g.branch + "/" + layer_name(g.layer),
                     g.ratio);
  return out;
}

const char* short_name(torch::ScalarType t) {
  return t == torch::kBFloat16 ? "bf16" : t == torch::kDouble ? "fp64" : "fp32";
}

at::Generator cpu_generator() { return at::detail::getDefaultCPUGenerator(); }

}  // namespace

struct Trainer::Impl {
  Impl(const RunConfig& config, const TrainOptions& options);

  void open_run_folder();
  void load_data();
  void load_validation();
  void load_tasks();
  void build_model();
  void resume();
  void restore(const Checkpoint& ck);
  void open_logs();
  void describe();

  StepMetrics step();
  double accumulate(int64_t s);
  EvalReport evaluate();
  void add_evaluation(int64_t step, nlohmann::json& line);
  void diagnose(int64_t completed, nlohmann::json& line);
  std::string save();
  RunSummary finish(RunStatus status);
  RunSummary run();
  void log_progress(const StepMetrics& m);
  void log_fsdp_memory();
  void write_metrics(const nlohmann::json& line);
  void write_events(int64_t step, const std::vector<Scalar>& scalars);
  void info(const std::string& m) const {
    if (log) log->info(m);
  }

  // ---- the run ----
  RunConfig cfg;
  TrainOptions o;
  Logger* log;
  SingleProcess single;
  Communicator& comm;
  int64_t rank, world;
  bool sharded, lead;
  std::unique_ptr<FileLock> run_lock;
  std::optional<std::string> latest;  // the newest checkpoint in the run folder
  torch::Device device{torch::kCPU};
  bool bf16 = false;  // autocast on CUDA
  bool fp64 = false;  // weights, state and activations in float64
  // ---- data ----
  std::shared_ptr<TokenDataset> train_data;
  std::unique_ptr<TrainLoader> loader;
  std::unique_ptr<ValLoader> val;
  Batch diag_batch;  // the fixed diagnostics batch: the first validation (else training) sequences
  std::unique_ptr<Tokenizer> tokenizer;  // per-byte numbers and tasks need it
  std::vector<int32_t> token_bytes;
  std::vector<std::pair<std::string, std::vector<McItem>>> tasks;
  // ---- model and optimizer ----
  DecoderLM model{nullptr};
  std::vector<torch::Tensor> params;
  int64_t n_params = 0;
  int64_t recompute_every = 0;  // activation checkpointing of every k-th block; 0 none
  std::unique_ptr<CheckpointedBlocks> recomputed_blocks;  // single process
  std::unique_ptr<Fsdp> fsdp;
  std::unique_ptr<AdamW> opt;
  std::string fsdp_dtypes;  // for the log
  SpikeDetector spikes;
  TrainState st;
  std::string config_yaml;
  // ---- outputs ----
  std::string metrics_path;
  std::ofstream metrics;
  bool metrics_failed = false;  // a failed write (full disk) is reported once
  std::ofstream diagnostics;
  std::unique_ptr<EventWriter> events;  // logging.tensorboard: RUN_DIR/tensorboard/
  bool events_failed = false;
  double flops_token = 0.0, tokens_per_step = 0.0, matmul_flops = 0.0;
  std::string attn_backend;
  RunSummary sum;
  std::map<std::string, TaskScore> final_tasks;  // the newest multiple-choice accuracies
  double window_seconds = 0.0;                   // since the last progress line
  int64_t window_steps = 0;
};

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
  open_run_folder();
  device = resolve_device(cfg.train.device, o.device_index);
  bf16 = device.is_cuda() &&
         (cfg.train.precision == Precision::Auto || cfg.train.precision == Precision::Bf16);
  fp64 = cfg.train.precision == Precision::Fp64;
  if (cfg.train.precision == Precision::Bf16 && !device.is_cuda())
    throw ConfigError(
        "train.precision = bf16 needs a CUDA device (train.device = " + cfg.train.device + ")");
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
    throw ConfigError("data.train is empty: set it to a folder written by `normlab data prepare`");
  train_data = std::make_shared<TokenDataset>(cfg.data.train, "train", cfg.data.seq_len);
  check_vocabulary(train_data->index(), cfg.data.train, cfg.model.vocab_size, cfg.data.tokenizer);
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
  loader = std::make_unique<TrainLoader>(train_data, lo);
}

void Trainer::Impl::load_validation() {
  const std::string val_dir = cfg.data.val.empty() ? cfg.data.train : cfg.data.val;
  const ShardIndex vidx = shard_index_read(val_dir);
  const auto it = vidx.splits.find("val");
  if (it == vidx.splits.end() || it->second.tokens <= static_cast<uint64_t>(cfg.data.seq_len)) {
    if (log) log->warn(val_dir + " has no validation split of at least one sample: no evaluation");
    return;
  }
  check_vocabulary(vidx, val_dir, cfg.model.vocab_size, cfg.data.tokenizer);
  const auto val_data = std::make_shared<TokenDataset>(val_dir, "val", cfg.data.seq_len);
  const int64_t vb = cfg.eval.micro_batch > 0 ? cfg.eval.micro_batch : cfg.train.micro_batch;
  val = std::make_unique<ValLoader>(
      val_data, std::min<int64_t>(vb, std::max<int64_t>(val_data->num_samples() / world, 1)), rank,
      world);
  if (cfg.diagnostics.every > 0)
    diag_batch =
        ValLoader(val_data, std::min<int64_t>(cfg.diagnostics.batch, val_data->num_samples()))
            .batch(0);
}

// Multiple-choice tasks are read before any work, so that a bad file fails the run at once.
void Trainer::Impl::load_tasks() {
  std::stringstream list(cfg.eval.tasks);
  for (std::string path; std::getline(list, path, ',');) {
    if (path.empty()) continue;
    if (!tokenizer)
      throw ConfigError("eval.tasks needs data.tokenizer (the model's SentencePiece model)");
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
  recompute_every = cfg.train.activation_checkpointing == Recompute::None ? 0
                    : cfg.train.activation_checkpointing == Recompute::Block
                        ? 1
                        : cfg.train.selective_every;
  if (!sharded) {
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (const auto& p : model->named_parameters()) named.emplace_back(p.key(), p.value());
    opt = std::make_unique<AdamW>(named, cfg.optimizer);
    recomputed_blocks = std::make_unique<CheckpointedBlocks>(recompute_every);
    if (recompute_every > 0) model->hooks = recomputed_blocks.get();
    return;
  }
  FsdpOptions fo;
  fo.reshard_after_forward = cfg.distributed.reshard_after_forward;
  fo.checkpoint_every = recompute_every;
  fo.prefetch = cfg.distributed.prefetch;
  // auto: the compute dtype (bf16 under autocast) for gathers; reductions follow the gathers.
  const auto dtype_of = [](Precision p, torch::ScalarType automatic) {
    return p == Precision::Auto   ? automatic
           : p == Precision::Bf16 ? torch::kBFloat16
                                  : torch::kFloat;
  };
  fo.param_dtype = dtype_of(cfg.distributed.param_dtype, bf16 ? torch::kBFloat16 : torch::kFloat);
  fo.reduce_dtype = dtype_of(cfg.distributed.reduce_dtype, fo.param_dtype);
  if (fp64) fo.param_dtype = fo.reduce_dtype = torch::kDouble;
  fsdp_dtypes = std::string(", gathers in ") + short_name(fo.param_dtype) + ", reductions in " +
                short_name(fo.reduce_dtype);
  fsdp = std::make_unique<Fsdp>(model, comm, fo, cfg.optimizer);
  std::vector<OptParam> pieces;
  for (const ShardPiece& p : fsdp->pieces()) pieces.push_back({p.name, p.param, p.decay});
  opt = std::make_unique<AdamW>(pieces, cfg.optimizer);
}

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
  const int64_t saved_world = checkpoint_world(*latest);
  if (saved_world > 1 && saved_world != world)
    throw CheckpointError(
        *latest + " was written by " + std::to_string(saved_world) + " ranks and this run has " +
        std::to_string(world) + ": join its shards with `normlab checkpoint consolidate " +
        "--checkpoint " + *latest + " --out NEW_RUN_DIR`, then resume NEW_RUN_DIR on any number " +
        "of ranks");
  const Checkpoint ck = checkpoint_load(*latest, rank);
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

// metrics.jsonl and diagnostics.jsonl keep the lines of the steps before the resume point. Only
// rank 0 writes the run folder's files.
void Trainer::Impl::open_logs() {
  metrics_path = (fs::path(o.run_dir) / "metrics.jsonl").string();
  if (lead) {
    keep_lines_up_to(metrics_path, st.step);
    metrics.open(metrics_path, std::ios::app);
    // The events of steps after the resume point go, as the metrics lines do, also when a
    // resumed run turns TensorBoard off.
    const std::string tb = (fs::path(o.run_dir) / "tensorboard").string();
    if (cfg.logging.tensorboard) {
      events = std::make_unique<EventWriter>(tb, st.step);
      info("tensorboard: " + events->path());
    } else if (fs::exists(tb)) {
      events_keep_up_to(tb, st.step);
    }
  }
  if (cfg.diagnostics.every > 0) {
    const std::string path = (fs::path(o.run_dir) / "diagnostics.jsonl").string();
    keep_lines_up_to(path, st.step);
    diagnostics.open(path, std::ios::app);
    diag_batch = {diag_batch.inputs.to(device), diag_batch.targets.to(device)};
  }
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
  char msg[200];
  std::snprintf(msg, sizeof msg,
                "attention: SDPA backend %s; %.3g FLOP per token (6N + causal attention)",
                attn_backend.c_str(), flops_token);
  info(msg);
  if (device.is_cuda()) {
    std::snprintf(msg, sizeof msg,
                  "matmul: %.1f TFLOP/s measured (bf16 8192^3); MFU over %.0f TFLOP/s nominal "
                  "and over this",
                  matmul_flops / 1e12, kPeakBf16Flops / 1e12);
    info(msg);
  }
}

// The micro-batches of step s, gradients accumulated with weight 1/micro-steps; returns the
// mean cross-entropy over the global batch (over every rank).
double Trainer::Impl::accumulate(int64_t s) {
  torch::Tensor loss_sum =
      torch::zeros({}, torch::TensorOptions().device(device).dtype(torch::kDouble));
  const double scale = 1.0 / static_cast<double>(loader->micro_steps());
  for (int64_t m = 0; m < loader->micro_steps(); ++m) {
    const Batch b = loader->batch(s, m);
    LossOutput out;
    {
      AutocastGuard autocast(bf16);
      out = model->loss(b.inputs.to(device, /*non_blocking=*/true),
                        b.targets.to(device, /*non_blocking=*/true), cfg.train.z_loss, nullptr,
                        cfg.train.loss_chunk_rows);
    }
    (out.loss * scale).backward();
    if (fsdp) fsdp->finish_backward();
    loss_sum.add_(out.ce.detach().to(torch::kDouble), scale);
  }
  return sharded ? comm.sum(loss_sum.item<double>()) / static_cast<double>(world)
                 : loss_sum.item<double>();
}

StepMetrics Trainer::Impl::step() {
  const auto t0 = Clock::now();
  const int64_t s = st.step;
  StepMetrics m;
  m.step = s + 1;
  m.lr = lr_at(cfg.scheduler, cfg.optimizer.lr, s, cfg.train.steps);
  model->zero_grad(/*set_to_none=*/true);
  if (fsdp) fsdp->zero_grad();
  m.loss = accumulate(s);
  m.grad_norm = fsdp ? fsdp->clip_grad_norm(cfg.optimizer.grad_clip)
                     : clip_grad_norm(params, cfg.optimizer.grad_clip);
  m.finite = std::isfinite(m.loss) && std::isfinite(m.grad_norm);
  if (!m.finite && !cfg.train.skip_nonfinite) {  // diverged: the caller ends the run
    m.seconds = seconds_since(t0);
    st.wall_seconds += m.seconds;
    return m;
  }
  if (m.finite) {
    opt->step(m.lr);
    st.max_grad_norm = std::max(st.max_grad_norm, m.grad_norm);
    st.last_loss = m.loss;
    m.spike = spikes.observe(m.loss);
  } else {
    ++st.skipped_steps;
    m.skipped = true;
  }
  st.tokens += static_cast<uint64_t>(tokens_per_step);
  st.step = m.step;
  if (device.is_cuda()) torch::cuda::synchronize(device.index());  // the step's kernels are done
  m.seconds = seconds_since(t0);
  st.wall_seconds += m.seconds;
  return m;
}

EvalReport Trainer::Impl::evaluate() {
  EvalReport rep;
  for (const auto& [name, items] : tasks) {
    const McResult r = evaluate_mc(*model, *tokenizer, items, cfg.train.micro_batch, device);
    rep.tasks[name] = final_tasks[name] = {r.acc, r.acc_norm, r.items};
  }
  if (!val) return rep;
  // eval.batches counts batches over all ranks.
  const int64_t batches = cfg.eval.batches > 0 ? std::max<int64_t>(cfg.eval.batches / world, 1) : 0;
  EvalResult r =
      normlab::evaluate(*model, *val, batches, device, bf16, tokenizer ? &token_bytes : nullptr);
  if (sharded) r = combine(r, comm);
  st.last_val_loss = r.loss;
  rep.val_loss = r.loss;
  rep.perplexity = r.perplexity;
  rep.tokens = r.tokens;
  if (r.bytes > 0) rep.bits_per_byte = r.bits_per_byte;
  return rep;
}

void Trainer::Impl::diagnose(int64_t completed, nlohmann::json& line) {
  const auto t0 = Clock::now();
  model->hooks = nullptr;  // the diagnostics take gradients with autograd::grad: no recompute
  DiagnosticsOptions options;
  options.top_k = cfg.diagnostics.top_k;
  options.pruning = cfg.diagnostics.pruning;
  DiagnosticsReport d = run_diagnostics(*model, diag_batch.inputs, diag_batch.targets, options);
  if (recompute_every > 0) model->hooks = recomputed_blocks.get();
  d.step = completed;
  diagnostics << diagnostics_json(d) << "\n" << std::flush;
  write_events(completed, diagnostics_scalars(d));
  const double secs = seconds_since(t0);
  line["diagnostics_seconds"] = secs;
  st.wall_seconds += secs;
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
  if (world == 1) {  // FSDP in one process (force_fsdp): its pieces are whole parameters
    for (const ShardPiece& p : fsdp->pieces()) {
      ck.model[p.name] = p.param.detach().reshape(p.shape);
      for (const std::string prefix : {"exp_avg.", "exp_avg_sq."}) {
        torch::Tensor& t = ck.optimizer.at(prefix + p.name);
        t = t.reshape(p.shape);
      }
    }
    return checkpoint_save(o.run_dir, ck, cfg.checkpoint.keep, o.checkpoint_fault);
  }
  ck.model = fsdp->local_weights();
  ck.world = world;
  ck.rank = rank;
  for (const ShardPiece& p : fsdp->pieces()) {
    ck.starts[p.name] = p.start;
    ck.shapes[p.name] = p.shape;
  }
  return checkpoint_save_sharded(
      o.run_dir, ck, cfg.checkpoint.keep, [&] { comm.barrier(); }, o.checkpoint_fault);
}

RunSummary Trainer::Impl::finish(RunStatus status) {
  sum.status = status;
  sum.steps = st.step;
  sum.final_train_loss = st.last_loss;
  sum.final_val_loss = st.last_val_loss;
  sum.val_perplexity = st.last_val_loss >= 0 ? std::exp(st.last_val_loss) : -1.0;
  sum.spikes = spikes.spikes();
  sum.max_grad_norm = st.max_grad_norm;
  sum.skipped_steps = st.skipped_steps;
  sum.tokens = st.tokens;
  sum.wall_seconds = st.wall_seconds;
  sum.peak_memory_bytes = device_memory_bytes(device, /*peak=*/true);
  sum.tasks = final_tasks;
  if (device.is_cuda() && sum.wall_seconds > 0) {
    sum.mfu = sum.tokens_per_s() * flops_token / kPeakBf16Flops;
    sum.mfu_measured = sum.tokens_per_s() * flops_token / matmul_flops;
    sum.matmul_flops = matmul_flops;
  }
  if (sharded) sum.world_size = world;
  if (lead) run_summary_write(o.run_dir, sum);
  return sum;
}

void Trainer::Impl::write_metrics(const nlohmann::json& line) {
  if (!lead) return;
  metrics << line.dump() << "\n" << std::flush;
  write_events(line.value("step", int64_t{0}), metrics_scalars(line));
  if (!metrics && !metrics_failed) {  // the run goes on; the next checkpoint save decides
    metrics_failed = true;
    if (log)
      log->error(metrics_path + ": write failed (disk full?): later steps are missing from it");
  }
}

void Trainer::Impl::write_events(int64_t step, const std::vector<Scalar>& scalars) {
  if (!events || events->scalars(step, scalars) || events_failed) return;
  events_failed = true;  // as for metrics.jsonl: the run goes on
  if (log)
    log->error(events->path() + ": write failed (disk full?): later steps may be missing from it");
}

void Trainer::Impl::log_progress(const StepMetrics& m) {
  window_seconds += m.seconds;
  ++window_steps;
  if (m.step % cfg.logging.every != 0 && m.step != 1 && m.step != cfg.train.steps) return;
  const double tps = tokens_per_step * static_cast<double>(window_steps) / window_seconds;
  char msg[256];
  int n = std::snprintf(msg, sizeof msg,
                        "step %lld/%lld | loss %.4f | lr %.2e | gnorm %.3f | %.0f tok/s",
                        static_cast<long long>(m.step), static_cast<long long>(cfg.train.steps),
                        m.loss, m.lr, m.grad_norm, tps);
  if (device.is_cuda())
    n += std::snprintf(msg + n, sizeof msg - n, " | mfu %.1f%% (%.1f%% of measured)",
                       100.0 * tps * flops_token / kPeakBf16Flops,
                       100.0 * tps * flops_token / matmul_flops);
  std::snprintf(msg + n, sizeof msg - n, " | mem %.2f GiB | eta %s",
                device_memory_bytes(device) / (1 << 30),
                duration(window_seconds / static_cast<double>(window_steps) *
                         static_cast<double>(cfg.train.steps - m.step))
                    .c_str());
  info(msg);
  window_seconds = 0.0;
  window_steps = 0;
}

// Under FSDP, once at rest after the first step: the state each rank holds, measured.
void Trainer::Impl::log_fsdp_memory() {
  if (!sharded || sum.unsharded_state_bytes != 0) return;
  sum.rank_state_bytes = static_cast<int64_t>(
      comm.max(static_cast<double>(fsdp->resident_bytes() + opt->state_bytes())));
  sum.unsharded_state_bytes = n_params * 16;  // fp32 parameter, gradient, two moments
  char msg[200];
  std::snprintf(
      msg, sizeof msg,
      "fsdp: at most %.3f MB of parameters, gradients and optimizer state per rank = "
      "%.4f of one unsharded process (%.3f MB); 1/%lld = %.4f",
      static_cast<double>(sum.rank_state_bytes) / 1e6,
      static_cast<double>(sum.rank_state_bytes) / static_cast<double>(sum.unsharded_state_bytes),
      static_cast<double>(sum.unsharded_state_bytes) / 1e6, static_cast<long long>(world),
      1.0 / static_cast<double>(world));
  info(msg);
}

// Validation loss and task accuracies after `step` (0: the initial weights), into the log and
// the metrics line.
void Trainer::Impl::add_evaluation(int64_t step, nlohmann::json& line) {
  const EvalReport e = evaluate();
  for (const auto& [name, t] : e.tasks) {
    line["task_" + name + "_acc"] = t.acc;
    line["task_" + name + "_acc_norm"] = t.acc_norm;
    info("task " + name + " step " + std::to_string(step) + ": acc " + std::to_string(t.acc) +
         ", acc_norm " + std::to_string(t.acc_norm));
  }
  if (e.val_loss >= 0) {
    line["val_loss"] = e.val_loss;
    line["val_ppl"] = e.perplexity;
    if (e.bits_per_byte >= 0) line["val_bits_per_byte"] = e.bits_per_byte;
    info("eval step " + std::to_string(step) + ": val loss " + std::to_string(e.val_loss) +
         ", perplexity " + std::to_string(e.perplexity) + " (" + std::to_string(e.tokens) +
         " tokens)");
  }
}

RunSummary Trainer::Impl::run() {
  model->train();
  const int64_t first_step = st.step;
  if (cfg.eval.at_start && st.step == 0) {
    nlohmann::json line = {{"step", 0}};
    add_evaluation(0, line);
    write_metrics(line);
  }
  while (st.step < cfg.train.steps) {
    const StepMetrics m = step();
    nlohmann::json line = {{"step", m.step},
                           {"lr", m.lr},
                           {"loss", finite_or_null(m.loss)},
                           {"grad_norm", finite_or_null(m.grad_norm)}};
    if (!m.finite && !m.skipped) {
      line["diverged"] = true;
      write_metrics(line);
      sum.diverged_at = m.step;
      if (log)
        log->error("diverged at step " + std::to_string(m.step) + ": loss " +
                   std::to_string(m.loss) + ", gradient norm " + std::to_string(m.grad_norm));
      return finish(RunStatus::Diverged);
    }
    if (m.skipped) {
      line["skipped"] = true;
      if (log)
        log->warn("step " + std::to_string(m.step) + ": non-finite loss or gradient, step skipped");
    } else {
      line["spike"] = m.spike;
    }
    line["tokens"] = st.tokens;
    line["tokens_per_s"] = tokens_per_step / m.seconds;
    line["step_seconds"] = m.seconds;
    log_progress(m);
    const bool last = m.step == cfg.train.steps;
    if (last || (cfg.eval.every > 0 && m.step % cfg.eval.every == 0)) add_evaluation(m.step, line);
    if (cfg.diagnostics.every > 0 && (m.step % cfg.diagnostics.every == 0 || last))
      diagnose(m.step, line);
    write_metrics(line);
    log_fsdp_memory();
    if (o.after_step) o.after_step(m.step);
    // Any rank's signal stops every rank after this same step.
    bool stop_flag = o.stop && o.stop->load();
    if (sharded) stop_flag = comm.max(stop_flag ? 1.0 : 0.0) > 0.0;
    const bool stop = stop_flag || (o.stop_after > 0 && m.step - first_step >= o.stop_after);
    if ((last && cfg.checkpoint.at_end) || (stop && !last) ||
        (cfg.checkpoint.every > 0 && m.step % cfg.checkpoint.every == 0))
      info("checkpoint " + save());
    if (stop && !last) {
      info("stopped at step " + std::to_string(m.step) + "; continue with --resume");
      return finish(RunStatus::Interrupted);
    }
  }
  return finish(RunStatus::Completed);
}

Trainer::Trainer(const RunConfig& cfg, const TrainOptions& options)
    : impl_(std::make_unique<Impl>(cfg, options)) {}
Trainer::~Trainer() = default;
RunSummary Trainer::run() { return impl_->run(); }
StepMetrics Trainer::step() { return impl_->step(); }
EvalReport Trainer::evaluate() { return impl_->evaluate(); }
std::string Trainer::save() { return impl_->save(); }
RunSummary Trainer::finish(RunStatus status) { return impl_->finish(status); }
int64_t Trainer::steps_done() const { return impl_->st.step; }

RunSummary train(const RunConfig& cfg, const TrainOptions& options) {
  return Trainer(cfg, options).run();
}

}  // namespace normlab
