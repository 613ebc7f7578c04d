#include "normlab/train/imported_run.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <torch/torch.h>

#include <filesystem>
#include <mutex>
#include <vector>

#include "normlab/config/config_io.h"
#include "normlab/nn/model.h"
#include "normlab/nn/weights.h"
#include "normlab/train/checkpoint.h"
#include "normlab/train/optimizer.h"
#include "normlab/util/error.h"
#include "normlab/util/file_io.h"

namespace normlab {
namespace fs = std::filesystem;

std::string imported_run_save(const TensorDict& weights, const RunConfig& cfg,
                              const std::string& run_dir, int64_t step, const std::string& what) {
  if (checkpoint_latest(run_dir))
    throw CheckpointError(run_dir + " already holds checkpoints: choose another --out");
  DecoderLM model(cfg.model, torch::kCPU);
  load_weights(*model, weights, what);

  Checkpoint ck;
  ck.model = weights_of(*model);
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& p : model->named_parameters()) named.emplace_back(p.key(), p.value());
  ck.optimizer = AdamW(named, cfg.optimizer).state();  // fresh moments: fine-tuning starts here
  {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    ck.optimizer["rng.cpu"] = gen.get_state();
  }
  ck.state.step = step;
  ck.config_yaml = config_to_yaml(cfg);
  fs::create_directories(run_dir);
  write_file_atomic((fs::path(run_dir) / "config.yaml").string(),
                    [&](FileWriter& w) { w.write(ck.config_yaml); });
  return checkpoint_save(run_dir, ck, /*keep=*/1);
}

}  // namespace normlab
