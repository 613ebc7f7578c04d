#include "normlab/train/imported_run.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <torch/torch.h>

#include <algorithm>
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

std::string imported_shape_text(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

std::string imported_name_lines(const std::vector<std::string>& names) {
  std::string s;
  const size_t shown = std::min<size_t>(names.size(), 12);
  for (size_t i = 0; i < shown; ++i) s += "\n    " + names[i];
  if (names.size() > shown) s += "\n    ... and " + std::to_string(names.size() - shown) + " more";
  return s;
}

}  // namespace normlab
