// Checkpoints of the official SiameseNorm code (an OLMo fork; its "hybrid-pre" model is
// normlab's siamese_hybrid with untied head, no biases, per-head q/k/v norms of head_dim, a
// fused q|k|v projection and the SwiGLU projection's value half first, gate half second, the
// same layouts as normlab's). The weights are the same tensors under other names:
//
//   transformer.wte.weight                      embed.weight
//   transformer.ff_out.weight                   head.weight
//   transformer.ln_f.weight                     final_norm_x.weight
//   transformer.ln_y_f.weight                   final_norm_y.weight
//   transformer.ln_final_f.weight               final_norm.weight      (output_fusion: code)
//   transformer.blocks.<l>.att_proj.weight      blocks.<l>.attn.qkv.weight
//                          attn_out.weight                 attn.out.weight
//                          q_norm|k_norm|v_norm.weight     attn.q_norm|k_norm|v_norm.weight
//                          ff_proj.weight                  mlp.up.weight
//                          ff_out.weight                   mlp.down.weight
//                          c1                              c1
//                          attn_y_norm.weight              attn_y_norm.weight
//                          ff_norm.weight                  mlp_norm.weight
//                          ff_y_norm.weight                mlp_y_norm.weight
//                          ff_input_norm.weight            mlp_in_norm.weight (input_norm: true)
//
// The official code saves state dicts with torch.save (.pt); tools/olmo_checkpoint.py turns
// one into a safetensors file (and back), which is what these functions read and write.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "normlab/config/config.h"
#include "normlab/util/safetensors.h"

namespace normlab {

class OutputFiles;  // util/output_contract.h

/// Throws ConfigError naming the key when the official code has no such model: a scheme other
/// than siamese_hybrid, or tied embeddings.
void olmo_check_config(const ModelConfig& cfg);

/// The official name of a normlab parameter name of a siamese_hybrid model; throws
/// std::invalid_argument for a name that has none.
std::string olmo_name(const std::string& normlab_name);

/// normlab weights under the official names (the same tensors).
TensorDict olmo_from_normlab(const TensorDict& weights);

/// Official weights under normlab's names, as fp32, checked against the model `cfg` builds:
/// names it lacks and names it needs are listed together in one CheckpointError, a shape that
/// differs names the tensor and both shapes; `what` names the source.
TensorDict olmo_to_normlab(const TensorDict& olmo, const ModelConfig& cfg, const std::string& what);

/// The tensors of a safetensors file, or of the one safetensors file of a folder
/// (model.safetensors when there are several). Throws CheckpointError naming the path.
TensorDict olmo_read(const std::string& file_or_dir);

/// Writes a normlab run folder from official weights: RUN_DIR/config.yaml (cfg, resolved) and
/// RUN_DIR/checkpoints/step-<step>/ with the weights, a fresh AdamW state and the loop state of
/// `step`, so that eval, generate, analyze, export and `train --resume` (fine-tuning from
/// there) take it. Refuses a run folder that already holds checkpoints. Returns the checkpoint
/// folder.
std::string olmo_import(const std::string& file_or_dir, const RunConfig& cfg,
                        const std::string& run_dir, int64_t step = 0);

/// Writes OUT_DIR/model.safetensors under the official names (fp32) and
/// OUT_DIR/normlab_config.yaml (the run's configuration, for importing it back) from a
/// checkpoint or run folder, each file atomically and beside whatever else OUT_DIR holds (as
/// export_model, export.h). Returns the checkpoint exported; `written`: the names written;
/// `contract`: as export_model's.
std::string olmo_export(const std::string& source, const std::string& out_dir,
                        std::vector<std::string>* written = nullptr,
                        OutputFiles* contract = nullptr);

}  // namespace normlab
