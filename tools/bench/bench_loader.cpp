// normlab-bench-loader: the loader's token throughput against what a CPU training step of the
// same configuration consumes (forward, backward and an AdamW step over a global batch, the
// work the trainer does per step), measured in one process, and their ratio.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "normlab/config/config_io.h"
#include "normlab/data/loader.h"
#include "normlab/nn/model.h"

using namespace normlab;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string config, data, format = "shards", dtype;
  int steps = 3;
  CLI::App app{"loader throughput against a CPU training step"};
  app.add_option("--config", config, "run configuration")->required();
  app.add_option("--data", data,
                 "token shard folder (default: data.train), or a file with --format");
  app.add_option("--format", format, "format of --data: shards, tokens or megatron")
      ->capture_default_str();
  app.add_option("--dtype", dtype, "--format tokens: uint16 or uint32");
  app.add_option("--steps", steps, "timed training steps")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const RunConfig cfg = config_load(config);
  if (data.empty() && cfg.data.train.empty()) throw ConfigError(config + ": no data.train");
  const DataSource source =
      data.empty() ? cfg.data.train[0]
                   : DataSource{data, enum_from_name<DataFormat>(format, "--format"), dtype};
  const auto dataset =
      std::make_shared<TokenDataset>(source, "train", cfg.data.seq_len, cfg.model.vocab_size);
  LoaderOptions lo;
  lo.micro_batch = cfg.train.micro_batch;
  lo.global_batch = cfg.train.global_batch;
  const TrainLoader loader(dataset, lo);
  const double tokens_per_step = static_cast<double>(cfg.train.global_batch * cfg.data.seq_len);

  // Loader: whole global batches for at least a second.
  int64_t loaded = 0;
  const auto l0 = Clock::now();
  double loader_s = 0;
  for (int64_t step = 0; loader_s < 1.0; ++step) {
    for (int64_t m = 0; m < loader.micro_steps(); ++m)
      loaded += loader.batch(step, m).inputs.numel();
    loader_s = std::chrono::duration<double>(Clock::now() - l0).count();
  }
  const double loader_tps = static_cast<double>(loaded) / loader_s;

  // Training steps of the configured model (one untimed warm-up).
  torch::manual_seed(0);
  DecoderLM model(cfg.model);
  torch::optim::AdamW opt(model->parameters(),
                          torch::optim::AdamWOptions(cfg.optimizer.lr)
                              .betas({cfg.optimizer.beta1, cfg.optimizer.beta2})
                              .weight_decay(cfg.optimizer.weight_decay));
  auto train_step = [&](int64_t step) {
    opt.zero_grad();
    for (int64_t m = 0; m < loader.micro_steps(); ++m) {
      const Batch b = loader.batch(step, m);
      (model->loss(b.inputs, b.targets).loss / static_cast<double>(loader.micro_steps()))
          .backward();
    }
    opt.step();
  };
  train_step(0);
  const auto t0 = Clock::now();
  for (int s = 1; s <= steps; ++s) train_step(s);
  const double train_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double train_tps = tokens_per_step * steps / train_s;

  std::printf("loader vs CPU training step, %s (%s, %d threads), data %s (%s, %s):\n",
              config.c_str(), std::string(enum_name(cfg.model.scheme)).c_str(),
              at::get_num_threads(), source.path.c_str(),
              std::string(enum_name(source.format)).c_str(), dataset->dtype().c_str());
  std::printf("  loader          %12.0f tokens/s\n", loader_tps);
  std::printf("  training step   %12.0f tokens/s  (%.2f s per step of %.0f tokens)\n", train_tps,
              train_s / steps, tokens_per_step);
  std::printf("  ratio (loader / training)  %.0fx\n", loader_tps / train_tps);
  return 0;
}
