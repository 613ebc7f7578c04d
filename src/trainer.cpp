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

#include "normlab/autocast.h"
#include "normlab/checkpoint.h"
#include "normlab/config_io.h"
#include "normlab/device.h"
#include "normlab/diagnostics.h"
#include "normlab/evaluate.h"
#include "normlab/file_io.h"
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

constexpr double kPeakBf16Flops = 989e12;  // H100/H200 SXM dense bf16, the MFU denominator

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

TrainState state_from(const SpikeDetector& spikes, TrainState st) {
  st.spike_window = spikes.window();
  st.spikes = spikes.spikes();
  return st;
}

}  // namespace

TrainSummary train(const RunConfig& cfg, const TrainOptions& o) {
  Logger* log = o.logger;
  auto info = [&](const std::string& m) { if (log) log->info(m); };

  // ---- run folder ----------------------------------------------------------------------------
  if (o.run_dir.empty()) throw std::invalid_argument("train: no run folder (--out)");
  fs::create_directories(o.run_dir);
  // One process per run folder: a second `normlab train` on it (or a sweep relaunching a point
  // whose killed predecessor is still exiting) stops here instead of interleaving writes.
  const FileLock lock((fs::path(o.run_dir) / ".lock").string(), "a normlab train runs there");
  const auto latest = checkpoint_latest(o.run_dir);
  if (latest && !o.resume)
    throw std::invalid_argument(o.run_dir + " already holds checkpoints (newest " + fs::path(*latest).filename().string() +
                                "): pass --resume to continue that run, or choose another --out");

  // ---- model, data, optimizer ---------------------------------------------------------------
  const torch::Device device = resolve_device(cfg.train.device);
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
      val = std::make_unique<ValLoader>(val_data, std::min<int64_t>(vb, val_data->num_samples()));
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
  const TrainLoader loader(train_data, lo);

  torch::manual_seed(cfg.train.seed);
  DecoderLM model(cfg.model, device);
  std::vector<std::pair<std::string, torch::Tensor>> named;
  std::vector<torch::Tensor> params;
  for (const auto& p : model->named_parameters()) {
    named.emplace_back(p.key(), p.value());
    params.push_back(p.value());
  }
  AdamW opt(named, cfg.optimizer);
  SpikeDetector spikes(cfg.train.spike_window, cfg.train.spike_sigma);
  TrainState st;

  if (o.resume && latest) {
    check_resumable(cfg, (fs::path(*latest) / "config.yaml").string(), log);
    const Checkpoint ck = checkpoint_load(*latest);
    load_weights(*model, ck.model, ck.path);
    opt.load_state(ck.optimizer);
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
  write_file_atomic((fs::path(o.run_dir) / "config.yaml").string(), [&](FileWriter& w) { w.write(config_yaml); });

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
  const std::string metrics_path = (fs::path(o.run_dir) / "metrics.jsonl").string();
  keep_lines_up_to(metrics_path);
  std::ofstream metrics(metrics_path, std::ios::app);
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
       std::to_string(loader.micro_steps()) + " micro-steps); run folder " + o.run_dir);

  TrainSummary sum;
  sum.run_dir = o.run_dir;
  nlohmann::json final_tasks = nlohmann::json::object();  // the newest multiple-choice accuracies
  auto save = [&](int64_t completed) {
    TrainState s = state_from(spikes, st);
    s.step = completed;
    Checkpoint ck;
    ck.model = weights_of(*model);
    ck.optimizer = opt.state();
    {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      ck.optimizer["rng.cpu"] = gen.get_state();
    }
    ck.state = s;
    ck.config_yaml = config_yaml;
    info("checkpoint " + checkpoint_save(o.run_dir, ck, cfg.checkpoint.keep));
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
    const EvalResult r = evaluate(*model, *val, cfg.eval.batches, device, bf16, tokenizer ? &token_bytes : nullptr);
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
    const nlohmann::json j = {{"status", std::string(enum_name(status))},
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
                              {"parameters", counts.total},
                              {"tasks", final_tasks}};
    const std::string text = j.dump(2) + "\n";
    write_file_atomic((fs::path(o.run_dir) / "summary.json").string(), [&](FileWriter& w) { w.write(text); });
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
    torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().device(device).dtype(torch::kFloat));
    const double scale = 1.0 / static_cast<double>(loader.micro_steps());
    for (int64_t m = 0; m < loader.micro_steps(); ++m) {
      const Batch b = loader.batch(s, m);
      LossOutput out;
      {
        AutocastGuard autocast(bf16);
        out = model->loss(b.inputs.to(device, /*non_blocking=*/true), b.targets.to(device, /*non_blocking=*/true),
                          cfg.train.z_loss);
      }
      (out.loss * scale).backward();
      loss_sum.add_(out.ce.detach().to(torch::kFloat), scale);
    }
    const double loss = loss_sum.item<double>();
    const double grad_norm = clip_grad_norm(params, cfg.optimizer.grad_clip);
    const bool finite = std::isfinite(loss) && std::isfinite(grad_norm);
    const int64_t completed = s + 1;
    nlohmann::json line = {{"step", completed}, {"lr", lr}};
    line["loss"] = std::isfinite(loss) ? nlohmann::json(loss) : nlohmann::json(nullptr);
    line["grad_norm"] = std::isfinite(grad_norm) ? nlohmann::json(grad_norm) : nlohmann::json(nullptr);

    if (!finite && !cfg.train.skip_nonfinite) {
      st.wall_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      line["diverged"] = true;
      metrics << line.dump() << "\n" << std::flush;
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
      if (device.is_cuda()) n += std::snprintf(msg + n, sizeof msg - n, " | mfu %.1f%%", 100.0 * tps * flops_token / kPeakBf16Flops);
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
      DiagnosticsReport d = run_diagnostics(*model, diag_batch.inputs, diag_batch.targets, diag_options);
      d.step = completed;
      diagnostics << diagnostics_json(d) << "\n" << std::flush;
      const double secs = std::chrono::duration<double>(Clock::now() - d0).count();
      line["diagnostics_seconds"] = secs;
      st.wall_seconds += secs;
    }
    metrics << line.dump() << "\n" << std::flush;

    const bool stop = (o.stop && o.stop->load()) || (o.stop_after > 0 && completed - first_step >= o.stop_after);
    if (last || stop || (cfg.checkpoint.every > 0 && completed % cfg.checkpoint.every == 0)) save(completed);
    if (stop && !last) {
      info("stopped at step " + std::to_string(completed) + "; continue with --resume");
      return finish(RunStatus::Interrupted);
    }
  }
  return finish(RunStatus::Completed);
}

}  // namespace normlab
