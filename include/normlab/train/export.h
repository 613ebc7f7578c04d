// Export: a checkpoint's model as a folder that other tools read:
//   model.safetensors   the weights by parameter name (metadata format = pt), fp32
//   config.json         {"format": "normlab", "version": 1, "model": {every model.* key}}
//   tokenizer.model     the run's data.tokenizer, when it has one (tokenizer.json when it is a
//                       Hugging Face tokenizer.json)
// import_model reads such a folder back into a DecoderLM with identical logits.
#pragma once

#include <string>
#include <vector>

#include "normlab/nn/model.h"

namespace normlab {

class WriteFault;   // util/file_io.h
class OutputFiles;  // util/output_contract.h

/// `source` is a checkpoint folder or a run folder (its newest checkpoint). Returns the
/// checkpoint exported. The files go into `out_dir` beside whatever it already holds (a git
/// clone of a model repository keeps its .git, README and the rest); each file written replaces
/// the one of its name atomically (util/file_io.h, StagedFiles), so a crash leaves the previous
/// files whole. An `out_dir` that exists and is not a folder is a FileError, nothing written.
/// `fault` (tests only): its files are written through it (util/file_io.h, WriteFault).
/// `written`: the names of the files written. `contract`: the command's output contract for
/// `out_dir` (util/output_contract.h), which the final renames follow.
std::string export_model(const std::string& source, const std::string& out_dir,
                         WriteFault* fault = nullptr, std::vector<std::string>* written = nullptr,
                         OutputFiles* contract = nullptr);

/// The model config of an export folder's config.json.
ModelConfig export_config(const std::string& dir);

/// The model of an export folder, on `device`.
DecoderLM import_model(const std::string& dir, torch::Device device = torch::kCPU);

/// A trained model and where it came from.
struct LoadedModel {
  DecoderLM model{nullptr};
  std::string from;       // the export or checkpoint folder read
  std::string tokenizer;  // its tokenizer.model or .json (export) or data.tokenizer (run), or ""
  int64_t step = -1;      // the training step of a checkpoint (-1: unknown)
  int64_t seq_len = 0;    // the run's data.seq_len (0: unknown, an export folder)
};

/// `source` is an export folder (config.json), a checkpoint folder or a run folder (its newest
/// checkpoint); the weights are checked against the configuration.
LoadedModel load_model(const std::string& source, torch::Device device = torch::kCPU);

}  // namespace normlab
