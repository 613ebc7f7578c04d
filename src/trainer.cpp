// The training loop. Reads top to bottom: set up (device, model, data, optimizer, resume),
// then per step: micro-batches with gradient accumulation, clipping, the divergence guard,
// AdamW, spike counting, metrics, evaluation (and multiple-choice tasks), diagnostics,
// checkpoints, the stop flag.
#include "normlab/trainer.h"

#include <ATen/core/Generator.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "normlab/attention.h"
#include "normlab/autocast.h"
#include "normlab/checkpoint.h"
#include "normlab/checkpointing.h"
#include "normlab/communicator.h"
#include "normlab/config_io.h"
#include "normlab/device.h"
#include "normlab/diagnostics.h"
#include "normlab/evaluate.h"
#include "normlab/file_io.h"
#include "normlab/fsdp.h"
#include "normlab/info.h"
#include "normlab/loader.h"
#include "normlab/model.h"
#include "normlab/optimizer.h"
#include "normlab/schedule.h"
#include "normlab/stability.h"
#include "normlab/tasks.h"
#include "normlab/tokenizer.h"
#include "normlab/weights.h"

namespace normlab {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

int exit_code(RunStatus status) {
  switch (status) {
    case RunStatus::Completed:   return 0;
    case RunStatus::Diverged:    return 3;
    case RunStatus::Interrupted: return 4;
  }
  return 1;
}

namespace {

constexpr double kPeakBf16Flops = 989e12;  // H100/H200 SXM dense bf16, the nominal MFU denominator

torch::Device resolve_device(const std::string& name) {
  if (name == "auto") return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  const torch::Device d(name);
  if (d.is_cuda() && !torch::cuda::is_available()) throw std::invalid_argument("train.device = " + name + ": CUDA is not available");
  return d;
}

std::string duration(double s) {
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s / 3600), static_cast<int>(s / 60) % 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s / 60), static_cast<int>(s) % 60);
  else std::snprintf(buf, sizeof buf, "%.0fs", s);
  return buf;
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
    throw std::invalid_argument("cannot resume " + saved_config_path + " with a changed architecture:" + arch);
  if (!other.empty() && log) log->warn("resuming with changed settings:" + other);
}

// One rank's evaluation numbers -> the numbers over all ranks' batches.
EvalResult combine(EvalResult r, Communicator& comm) {
  torch::Tensor t = torch::tensor({r.loss * static_cast<double>(r.tokens), static_cast<double>(r.tokens),
                                   static_cast<double>(r.bytes), static_cast<double>(r.batches)}, torch::kDouble);
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

TrainState state_from(const SpikeDetector& spikes, TrainState st) {
  st.spike_window = spikes.window();
  st.spikes = spikes.spikes();
  return st;
}

}  // namespace

TrainSummary train(const RunConfig& cfg, const TrainOptions& o) {
  Logger* log = o.logger;
  auto info = [&](const std::string& m) { if (log) log->info(m); };
  SingleProcess single;
  Communicator& comm = o.comm ? *o.comm : single;
  const int64_t rank = comm.rank(), world = comm.world();
  const bool sharded = world > 1 || cfg.distributed.force_fsdp, lead = rank == 0;
  if (sharded && cfg.diagnostics.every > 0)
    throw std::invalid_argument("diagnostics.every = " + std::to_string(cfg.diagnostics.every) +
                                ": the diagnostics need a single process (run `normlab analyze` on a checkpoint)");

  // ---- run folder ----------------------------------------------------------------------------
  if (o.run_dir.empty()) throw std::invalid_argument("train: no run folder (--out)");
  fs::create_directories(o.run_dir);
  // One process per run folder: a second `normlab train` on it (or a sweep relaunching a point
  // whose killed predecessor is still exiting) stops here instead of interleaving writes. In a
  // multi-process run rank 0 holds it for all.
  std::unique_ptr<FileLock> run_lock;
  if (lead) run_lock = std::make_unique<FileLock>((fs::path(o.run_dir) / ".lock").string(), "a normlab train runs there");
  auto latest = checkpoint_latest(o.run_dir);
  if (latest && !o.resume)
    throw std::invalid_argument(o.run_dir + " already holds checkpoints (newest " + fs::path(*latest).filename().string() +
                                "): pass --resume to continue that run, or choose another --out");

  // ---- model, data, optimizer ---------------------------------------------------------------
  torch::Device device = resolve_device(cfg.train.device);
  if (device.is_cuda() && o.device_index >= 0 && cfg.train.device.find(':') == std::string::npos)
    device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(o.device_index));
  const bool bf16 = device.is_cuda() && cfg.train.precision != Precision::Fp32;
  if (cfg.train.precision == Precision::Bf16 && !device.is_cuda())
    throw std::invalid_argument("train.precision = bf16 needs a CUDA device (train.device = " + cfg.train.device + ")");
  if (cfg.data.train.empty())
    throw std::invalid_argument("data.train is empty: set it to a folder written by `normlab data prepare`");

  const auto train_data = std::make_shared<TokenDataset>(cfg.data.train, "train", cfg.data.seq_len);
  check_vocabulary(train_data->index(), cfg.data.train, cfg.model.vocab_size, cfg.data.tokenizer);
  std::unique_ptr<ValLoader> val;
  Batch diag_batch;  // the fixed diagnostics batch: the first sequences of the validation split
  {
    const std::string val_dir = cfg.data.val.empty() ? cfg.data.train : cfg.data.val;
    const ShardIndex vidx = shard_index_read(val_dir);
    const auto it = vidx.splits.find("val");
    if (it != vidx.splits.end() && it->second.tokens > static_cast<uint64_t>(cfg.data.seq_len)) {
      check_vocabulary(vidx, val_dir, cfg.model.vocab_size, cfg.data.tokenizer);
      const auto val_data = std::make_shared<TokenDataset>(val_dir, "val", cfg.data.seq_len);
      const int64_t vb = cfg.eval.micro_batch > 0 ? cfg.eval.micro_batch : cfg.train.micro_batch;
      val = std::make_unique<ValLoader>(val_data, std::min<int64_t>(vb, std::max<int64_t>(val_data->num_samples() / world, 1)),
                                        rank, world);
      if (cfg.diagnostics.every > 0)
        diag_batch = ValLoader(val_data, std::min<int64_t>(cfg.diagnostics.batch, val_data->num_samples())).batch(0);
    } else if (log) {
      log->warn(val_dir + " has no validation split of at least one sample: no evaluation");
    }
  }
  if (cfg.diagnostics.every > 0 && !diag_batch.inputs.defined())  // no validation split: training samples
    diag_batch = ValLoader(train_data, std::min<int64_t>(cfg.diagnostics.batch, train_data->num_samples())).batch(0);
  // Per-byte numbers and multiple-choice tasks need the tokenizer; tasks are read before any work.
  std::unique_ptr<Tokenizer> tokenizer;
  if (!cfg.data.tokenizer.empty() && fs::exists(cfg.data.tokenizer)) tokenizer = std::make_unique<Tokenizer>(cfg.data.tokenizer);
  const std::vector<int32_t> token_bytes = tokenizer ? tokenizer->token_byte_lengths() : std::vector<int32_t>{};
  std::vector<std::pair<std::string, std::vector<McItem>>> tasks;
  {
    std::stringstream list(cfg.eval.tasks);
    for (std::string path; std::getline(list, path, ',');) {
      if (path.empty()) continue;
      if (!tokenizer) throw std::invalid_argument("eval.tasks needs data.tokenizer (the model's SentencePiece model)");
      tasks.emplace_back(fs::path(path).stem().string(), load_mc_task(path));
    }
  }
  LoaderOptions lo;
  lo.micro_batch = cfg.train.micro_batch;
  lo.global_batch = cfg.train.global_batch;
  lo.seed = cfg.train.seed;
  lo.rank = rank;
  lo.world_size = world;
  if (cfg.train.global_batch % (cfg.train.micro_batch * world) != 0)
    throw std::invalid_argument("train.global_batch = " + std::to_string(cfg.train.global_batch) +
                                " must be a multiple of train.micro_batch x world size = " +
                                std::to_string(cfg.train.micro_batch) + " x " + std::to_string(world));
  const TrainLoader loader(train_data, lo);

  torch::manual_seed(cfg.train.seed);  // the same initial weights on every rank
  DecoderLM model(cfg.model, device);
  std::vector<torch::Tensor> params;
  int64_t n_params = 0;
  for (const auto& p : model->parameters()) {
    params.push_back(p);
    n_params += p.numel();
  }
  // Activation checkpointing of every k-th block: none 0, block 1, selective k.
  const int64_t recompute_every = cfg.train.activation_checkpointing == Recompute::None    ? 0
                                  : cfg.train.activation_checkpointing == Recompute::Block ? 1
                                                                                           : cfg.train.selective_every;
  std::unique_ptr<Fsdp> fsdp;
  std::unique_ptr<AdamW> opt_holder;
  std::string fsdp_dtypes;  // for the log
  if (sharded) {
    FsdpOptions fo;
    fo.reshard_after_forward = cfg.distributed.reshard_after_forward;
    fo.checkpoint_every = recompute_every;
    fo.prefetch = cfg.distributed.prefetch;
    // auto: the compute dtype (bf16 under autocast) for gathers; reductions follow the gathers.
    const auto dtype_of = [](Precision p, torch::ScalarType automatic) {
      return p == Precision::Auto ? automatic : p == Precision::Bf16 ? torch::kBFloat16 : torch::kFloat;
    };
    fo.param_dtype = dtype_of(cfg.distributed.param_dtype, bf16 ? torch::kBFloat16 : torch::kFloat);
    fo.reduce_dtype = dtype_of(cfg.distributed.reduce_dtype, fo.param_dtype);
    fsdp_dtypes = std::string(", gathers in ") + (fo.param_dtype == torch::kBFloat16 ? "bf16" : "fp32") +
                  ", reductions in " + (fo.reduce_dtype == torch::kBFloat16 ? "bf16" : "fp32");
    fsdp = std::make_unique<Fsdp>(model, comm, fo, cfg.optimizer);
    std::vector<OptParam> pieces;
    for (const ShardPiece& p : fsdp->pieces()) pieces.push_back({p.name, p.param, p.decay});
    opt_holder = std::make_unique<AdamW>(pieces, cfg.optimizer);
  } else {
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (const auto& p : model->named_parameters()) named.emplace_back(p.key(), p.value());
    opt_holder = std::make_unique<AdamW>(named, cfg.optimizer);
  }
  CheckpointedBlocks checkpointed_blocks(recompute_every);  // single process with activation checkpointing
  if (!sharded && recompute_every > 0) model->hooks = &checkpointed_blocks;
  AdamW& opt = *opt_holder;
  SpikeDetector spikes(cfg.train.spike_window, cfg.train.spike_sigma);
  TrainState st;

  if (o.resume && latest) {
    // The newest checkpoint whose checksums hold. Corrupted newer ones are reported and, once
    // every rank has looked, set aside (step-N.corrupted), so that pruning never keeps them in
    // place of good ones.
    const IntactCheckpoint intact = checkpoint_latest_intact(o.run_dir);
    for (const auto& [dir, why] : intact.corrupted)
      if (lead && log) log->error("not resuming from a corrupted checkpoint: " + why);
    comm.barrier();
    if (lead)
      for (const auto& [dir, why] : intact.corrupted) info("set aside " + dir + " as " + checkpoint_set_aside(dir));
    comm.barrier();
    if (!intact.dir)
      throw CheckpointError(o.run_dir + ": no intact checkpoint to resume from (" +
                            std::to_string(intact.corrupted.size()) + " corrupted, set aside as step-N.corrupted)");
    latest = intact.dir;
    check_resumable(cfg, (fs::path(*latest) / "config.yaml").string(), lead ? log : nullptr);
    const int64_t saved_world = checkpoint_world(*latest);
    if (saved_world > 1 && saved_world != world)
      throw std::invalid_argument(*latest + " was written by " + std::to_string(saved_world) + " ranks and this run has " +
                                  std::to_string(world) + ": join its shards with `normlab checkpoint consolidate --checkpoint " +
                                  *latest + " --out NEW_RUN_DIR`, then resume NEW_RUN_DIR on any number of ranks");
    const Checkpoint ck = checkpoint_load(*latest, rank);
    if (!sharded) {
      load_weights(*model, ck.model, ck.path);
      opt.load_state(ck.optimizer);
    } else if (ck.world == 1) {  // a whole checkpoint: take this rank's slices
      fsdp->load_full(ck.model, ck.path);
      opt.load_state(fsdp->slice_state(ck.optimizer));
    } else {
      torch::NoGradGuard no_grad;
      for (const ShardPiece& p : fsdp->pieces()) {
        const auto it = ck.model.find(p.name);
        if (it == ck.model.end() || it->second.numel() != p.param.numel() || ck.starts.at(p.name) != p.start)
          throw std::invalid_argument(ck.path + ": rank " + std::to_string(rank) + "'s piece of '" + p.name +
                                      "' is missing or has another size");
        p.param.copy_(it->second.reshape(-1));
      }
      opt.load_state(ck.optimizer);
    }
    {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(ck.optimizer.at("rng.cpu"));
    }
    st = ck.state;
    spikes.restore(st.spike_window, st.spikes);
    info("resumed from " + ck.path + " at step " + std::to_string(st.step));
  }
  const std::string config_yaml = config_to_yaml(cfg);
  if (lead) write_file_atomic((fs::path(o.run_dir) / "config.yaml").string(), [&](FileWriter& w) { w.write(config_yaml); });

  // metrics.jsonl and diagnostics.jsonl keep the lines of the steps before the resume point.
  auto keep_lines_up_to = [&](const std::string& path) {
    std::string kept;
    if (st.step > 0 && fs::exists(path)) {
      std::istringstream in(read_file(path));
      for (std::string line; std::getline(in, line);) {
        const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (!j.is_discarded() && j.value("step", int64_t{0}) <= st.step) kept += line + "\n";
      }
    }
    write_file_atomic(path, [&](FileWriter& w) { w.write(kept); });
  };
  // Only rank 0 writes the run folder's files (a stream of other ranks writes nowhere).
  const std::string metrics_path = (fs::path(o.run_dir) / "metrics.jsonl").string();
  if (lead) keep_lines_up_to(metrics_path);
  std::ofstream metrics;
  if (lead) metrics.open(metrics_path, std::ios::app);
  // A failed write (a full disk) is reported once; the run goes on, and the next checkpoint
  // save decides whether it can continue.
  bool metrics_failed = false;
  auto write_metrics = [&](const nlohmann::json& line) {
    metrics << line.dump() << "\n" << std::flush;
    if (!metrics && !metrics_failed) {
      metrics_failed = true;
      if (log) log->error(metrics_path + ": write failed (disk full?): later steps are missing from it");
    }
  };
  std::ofstream diagnostics;
  if (cfg.diagnostics.every > 0) {
    const std::string path = (fs::path(o.run_dir) / "diagnostics.jsonl").string();
    keep_lines_up_to(path);
    diagnostics.open(path, std::ios::app);
    diag_batch = {diag_batch.inputs.to(device), diag_batch.targets.to(device)};
  }
  DiagnosticsOptions diag_options;
  diag_options.top_k = cfg.diagnostics.top_k;
  diag_options.pruning = cfg.diagnostics.pruning;

  const ParamCounts counts = count_parameters(cfg.model);
  const double flops_token = flops_per_token(cfg.model, cfg.data.seq_len);
  const double tokens_per_step = static_cast<double>(cfg.train.global_batch * cfg.data.seq_len);
  info("model " + std::string(enum_name(cfg.model.scheme)) + ": " + std::to_string(counts.total) + " parameters on " +
       device.str() + (bf16 ? " (bf16 autocast)" : " (fp32)") + "; " + std::to_string(cfg.train.steps) + " steps of " +
       std::to_string(cfg.train.global_batch) + " x " + std::to_string(cfg.data.seq_len) + " tokens (" +
       std::to_string(loader.micro_steps()) + " micro-steps" +
       (sharded ? " on each of " + std::to_string(world) + " ranks, FSDP over " + comm.backend() + fsdp_dtypes : "") +
       "); run folder " +
       o.run_dir);
  // What the step runs on: the attention kernel LibTorch dispatches to for this shape, and on
  // CUDA the matmul rate this GPU reaches now, the second MFU denominator beside the nominal.
  const std::string attn_backend = attention_backend(attention_options(cfg.model, device), cfg.train.micro_batch,
                                                     cfg.data.seq_len, bf16 ? torch::kBFloat16 : torch::kFloat);
  const double matmul_flops = device.is_cuda() ? measure_matmul_flops(device) : 0.0;
  {
    char msg[200];
    std::snprintf(msg, sizeof msg, "attention: SDPA backend %s; %.3g FLOP per token (6N + causal attention)",
                  attn_backend.c_str(), flops_token);
    info(msg);
    if (device.is_cuda()) {
      std::snprintf(msg, sizeof msg, "matmul: %.1f TFLOP/s measured (bf16 8192^3); MFU over %.0f TFLOP/s nominal and over this",
                    matmul_flops / 1e12, kPeakBf16Flops / 1e12);
      info(msg);
    }
  }

  TrainSummary sum;
  sum.run_dir = o.run_dir;
  nlohmann::json final_tasks = nlohmann::json::object();  // the newest multiple-choice accuracies
  auto save = [&](int64_t completed) {
    TrainState s = state_from(spikes, st);
    s.step = completed;
    Checkpoint ck;
    ck.optimizer = opt.state();
    {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      ck.optimizer["rng.cpu"] = gen.get_state();
    }
    ck.state = s;
    ck.config_yaml = config_yaml;
    if (!sharded) {
      ck.model = weights_of(*model);
      info("checkpoint " + checkpoint_save(o.run_dir, ck, cfg.checkpoint.keep));
      return;
    }
    if (world == 1) {  // FSDP in one process (force_fsdp): its pieces are whole parameters
      for (const ShardPiece& p : fsdp->pieces()) {
        ck.model[p.name] = p.param.detach().reshape(p.shape);
        for (const std::string prefix : {"exp_avg.", "exp_avg_sq."}) {
          torch::Tensor& t = ck.optimizer.at(prefix + p.name);
          t = t.reshape(p.shape);
        }
      }
      info("checkpoint " + checkpoint_save(o.run_dir, ck, cfg.checkpoint.keep));
      return;
    }
    ck.model = fsdp->local_weights();
    ck.world = world;
    ck.rank = rank;
    for (const ShardPiece& p : fsdp->pieces()) {
      ck.starts[p.name] = p.start;
      ck.shapes[p.name] = p.shape;
    }
    info("checkpoint " + checkpoint_save_sharded(o.run_dir, ck, cfg.checkpoint.keep, [&] { comm.barrier(); }));
  };
  auto run_eval = [&](int64_t completed, nlohmann::json& line) {
    for (const auto& [name, items] : tasks) {
      const McResult r = evaluate_mc(*model, *tokenizer, items, cfg.train.micro_batch, device);
      line["task_" + name + "_acc"] = r.acc;
      line["task_" + name + "_acc_norm"] = r.acc_norm;
      final_tasks[name] = {{"acc", r.acc}, {"acc_norm", r.acc_norm}, {"items", r.items}};
      info("task " + name + " step " + std::to_string(completed) + ": acc " + std::to_string(r.acc) + ", acc_norm " +
           std::to_string(r.acc_norm));
    }
    if (!val) return;
    // eval.batches counts batches over all ranks.
    const int64_t batches = cfg.eval.batches > 0 ? std::max<int64_t>(cfg.eval.batches / world, 1) : 0;
    EvalResult r = evaluate(*model, *val, batches, device, bf16, tokenizer ? &token_bytes : nullptr);
    if (sharded) r = combine(r, comm);
    st.last_val_loss = r.loss;
    line["val_loss"] = r.loss;
    line["val_ppl"] = r.perplexity;
    if (r.bytes > 0) line["val_bits_per_byte"] = r.bits_per_byte;
    info("eval step " + std::to_string(completed) + ": val loss " + std::to_string(r.loss) + ", perplexity " +
         std::to_string(r.perplexity) + " (" + std::to_string(r.tokens) + " tokens)");
  };
  auto finish = [&](RunStatus status) {
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
    auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
    nlohmann::json j = {{"status", std::string(enum_name(status))},
                        {"exit_code", exit_code(status)},
                        {"scheme", std::string(enum_name(cfg.model.scheme))},
                        {"steps", sum.steps},
                        {"steps_planned", cfg.train.steps},
                        {"diverged_at", sum.diverged_at >= 0 ? nlohmann::json(sum.diverged_at) : nlohmann::json(nullptr)},
                        {"final_train_loss", num(sum.final_train_loss)},
                        {"final_val_loss", sum.final_val_loss >= 0 ? num(sum.final_val_loss) : nullptr},
                        {"val_perplexity", sum.val_perplexity >= 0 ? num(sum.val_perplexity) : nullptr},
                        {"spikes", sum.spikes},
                        {"max_grad_norm", num(sum.max_grad_norm)},
                        {"skipped_steps", sum.skipped_steps},
                        {"tokens", sum.tokens},
                        {"wall_seconds", sum.wall_seconds},
                        {"tokens_per_s", sum.wall_seconds > 0 ? num(static_cast<double>(sum.tokens) / sum.wall_seconds) : nullptr},
                        {"attention_backend", attn_backend},
                        {"parameters", counts.total},
                        {"peak_memory_bytes", device_memory_bytes(device, /*peak=*/true)},
                        {"tasks", final_tasks}};
    if (device.is_cuda() && sum.wall_seconds > 0) {
      const double tps = static_cast<double>(sum.tokens) / sum.wall_seconds;
      j["mfu"] = tps * flops_token / kPeakBf16Flops;
      j["mfu_measured"] = tps * flops_token / matmul_flops;
      j["matmul_flops_measured"] = matmul_flops;
    }
    if (sharded) {
      j["world_size"] = world;
      j["rank_state_bytes"] = sum.rank_state_bytes;
      j["unsharded_state_bytes"] = sum.unsharded_state_bytes;
    }
    const std::string text = j.dump(2) + "\n";
    if (lead) write_file_atomic((fs::path(o.run_dir) / "summary.json").string(), [&](FileWriter& w) { w.write(text); });
    return sum;
  };

  // ---- the loop ------------------------------------------------------------------------------
  model->train();
  const int64_t first_step = st.step;
  double window_seconds = 0.0;
  int64_t window_steps = 0;
  for (int64_t s = st.step; s < cfg.train.steps; ++s) {
    const auto t0 = Clock::now();
    const double lr = lr_at(cfg.scheduler, cfg.optimizer.lr, s, cfg.train.steps);
    model->zero_grad(/*set_to_none=*/true);
    if (fsdp) fsdp->zero_grad();
    torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().device(device).dtype(torch::kFloat));
    const double scale = 1.0 / static_cast<double>(loader.micro_steps());
    for (int64_t m = 0; m < loader.micro_steps(); ++m) {
      const Batch b = loader.batch(s, m);
      LossOutput out;
      {
        AutocastGuard autocast(bf16);
        out = model->loss(b.inputs.to(device, /*non_blocking=*/true), b.targets.to(device, /*non_blocking=*/true),
                          cfg.train.z_loss, nullptr, cfg.train.loss_chunk_rows);
      }
      (out.loss * scale).backward();
      if (fsdp) fsdp->finish_backward();
      loss_sum.add_(out.ce.detach().to(torch::kFloat), scale);
    }
    const double loss = sharded ? comm.sum(loss_sum.item<double>()) / static_cast<double>(world) : loss_sum.item<double>();
    const double grad_norm = fsdp ? fsdp->clip_grad_norm(cfg.optimizer.grad_clip)
                                  : clip_grad_norm(params, cfg.optimizer.grad_clip);
    const bool finite = std::isfinite(loss) && std::isfinite(grad_norm);
    const int64_t completed = s + 1;
    nlohmann::json line = {{"step", completed}, {"lr", lr}};
    line["loss"] = std::isfinite(loss) ? nlohmann::json(loss) : nlohmann::json(nullptr);
    line["grad_norm"] = std::isfinite(grad_norm) ? nlohmann::json(grad_norm) : nlohmann::json(nullptr);

    if (!finite && !cfg.train.skip_nonfinite) {
      st.wall_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      line["diverged"] = true;
      if (lead) write_metrics(line);
      sum.diverged_at = completed;
      if (log) log->error("diverged at step " + std::to_string(completed) + ": loss " + std::to_string(loss) +
                          ", gradient norm " + std::to_string(grad_norm));
      return finish(RunStatus::Diverged);
    }
    if (finite) {
      opt.step(lr);
      st.max_grad_norm = std::max(st.max_grad_norm, grad_norm);
      st.last_loss = loss;
      line["spike"] = spikes.observe(loss);
    } else {
      ++st.skipped_steps;
      line["skipped"] = true;
      if (log) log->warn("step " + std::to_string(completed) + ": non-finite loss or gradient, step skipped");
    }
    st.tokens += static_cast<uint64_t>(tokens_per_step);
    st.step = completed;
    if (device.is_cuda()) torch::cuda::synchronize(device.index());  // the step's kernels are done
    const double step_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    st.wall_seconds += step_seconds;
    window_seconds += step_seconds;
    ++window_steps;
    line["tokens"] = st.tokens;
    line["tokens_per_s"] = tokens_per_step / step_seconds;
    line["step_seconds"] = step_seconds;

    if (completed % cfg.logging.every == 0 || completed == 1 || completed == cfg.train.steps) {
      const double tps = tokens_per_step * static_cast<double>(window_steps) / window_seconds;
      char msg[256];
      int n = std::snprintf(msg, sizeof msg, "step %lld/%lld | loss %.4f | lr %.2e | gnorm %.3f | %.0f tok/s",
                            static_cast<long long>(completed), static_cast<long long>(cfg.train.steps), loss, lr,
                            grad_norm, tps);
      if (device.is_cuda())
        n += std::snprintf(msg + n, sizeof msg - n, " | mfu %.1f%% (%.1f%% of measured)",
                           100.0 * tps * flops_token / kPeakBf16Flops, 100.0 * tps * flops_token / matmul_flops);
      n += std::snprintf(msg + n, sizeof msg - n, " | mem %.2f GiB | eta %s", device_memory_bytes(device) / (1 << 30),
                         duration(window_seconds / static_cast<double>(window_steps) *
                                  static_cast<double>(cfg.train.steps - completed)).c_str());
      info(msg);
      window_seconds = 0.0;
      window_steps = 0;
    }
    const bool last = completed == cfg.train.steps;
    if (last || (cfg.eval.every > 0 && completed % cfg.eval.every == 0)) run_eval(completed, line);
    if (cfg.diagnostics.every > 0 && (completed % cfg.diagnostics.every == 0 || last)) {
      const auto d0 = Clock::now();
      model->hooks = nullptr;  // the diagnostics take gradients with autograd::grad: no reentrant recompute
      DiagnosticsReport d = run_diagnostics(*model, diag_batch.inputs, diag_batch.targets, diag_options);
      if (recompute_every > 0) model->hooks = &checkpointed_blocks;
      d.step = completed;
      diagnostics << diagnostics_json(d) << "\n" << std::flush;
      const double secs = std::chrono::duration<double>(Clock::now() - d0).count();
      line["diagnostics_seconds"] = secs;
      st.wall_seconds += secs;
    }
    if (lead) write_metrics(line);
    if (sharded && sum.unsharded_state_bytes == 0) {  // at rest after the first step: measured, logged once
      sum.rank_state_bytes = static_cast<int64_t>(comm.max(static_cast<double>(fsdp->resident_bytes() + opt.state_bytes())));
      sum.unsharded_state_bytes = n_params * 16;  // fp32 parameter, gradient, two moments
      char msg[200];
      std::snprintf(msg, sizeof msg, "fsdp: at most %.3f MB of parameters, gradients and optimizer state per rank = %.4f of one unsharded process (%.3f MB); 1/%lld = %.4f",
                    sum.rank_state_bytes / 1e6, static_cast<double>(sum.rank_state_bytes) / static_cast<double>(sum.unsharded_state_bytes),
                    sum.unsharded_state_bytes / 1e6, static_cast<long long>(world), 1.0 / static_cast<double>(world));
      info(msg);
    }

    // Any rank's signal stops every rank after this same step.
    bool stop_flag = o.stop && o.stop->load();
    if (sharded) stop_flag = comm.max(stop_flag ? 1.0 : 0.0) > 0.0;
    const bool stop = stop_flag || (o.stop_after > 0 && completed - first_step >= o.stop_after);
    if ((last && cfg.checkpoint.at_end) || (stop && !last) || (cfg.checkpoint.every > 0 && completed % cfg.checkpoint.every == 0))
      save(completed);
    if (stop && !last) {
      info("stopped at step " + std::to_string(completed) + "; continue with --resume");
      return finish(RunStatus::Interrupted);
    }
  }
  return finish(RunStatus::Completed);
}

}  // namespace normlab
