// Hugging Face transformers checkpoints (a save_pretrained folder: config.json and
// model.safetensors, or shards listed in model.safetensors.index.json) of LlamaForCausalLM,
// OlmoeForCausalLM and Olmo2ForCausalLM as normlab runs (`normlab import --from hf`;
// docs/interop.md). Llama and OLMoE are normlab's pre_norm block (input_layernorm = attn_norm
// before attention, post_attention_layernorm = mlp_norm before the MLP), OLMo-2 its
// reordered_norm block (post_attention_layernorm = attn_out_norm on attention's output,
// post_feedforward_layernorm = mlp_out_norm on the MLP's), all with RoPE on split halves as
// normlab's; OLMoE and OLMo-2 with model.qk_norm: full, OLMoE with model.moe. The weights are
// the same tensors, some joined (a name of one scheme only, e.g. mlp_norm or attn_out_norm,
// maps where that scheme is imported):
//
//   model.embed_tokens.weight                   embed.weight
//   lm_head.weight                              head.weight (absent when tied)
//   model.norm.weight                           final_norm.weight
//   model.layers.<l>.input_layernorm.weight     blocks.<l>.attn_norm.weight
//          post_attention_layernorm.weight                 mlp_norm.weight (Llama, OLMoE)
//          post_attention_layernorm.weight                 attn_out_norm.weight (OLMo-2)
//          post_feedforward_layernorm.weight               mlp_out_norm.weight (OLMo-2)
//          self_attn.q_proj|k_proj|v_proj.weight           attn.qkv.weight (rows q, k, v)
//          self_attn.o_proj.weight                         attn.out.weight
//          self_attn.q_norm|k_norm.weight                  attn.q_norm|k_norm.weight (OLMoE,
//                                                          OLMo-2)
//          mlp.up_proj|gate_proj.weight                    mlp.up.weight (rows up, gate)
//          mlp.down_proj.weight                            mlp.down.weight
//          mlp.gate.weight                                 mlp.router.weight (OLMoE)
//          mlp.experts.<e>.up_proj|gate_proj.weight        mlp.experts.<e>.up.weight
//          mlp.experts.<e>.down_proj.weight                mlp.experts.<e>.down.weight
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "normlab/config/config.h"
#include "normlab/util/safetensors.h"

namespace normlab {

/// `base` (the user's YAML: train, data, optimizer, ...) with its model section replaced by the
/// one DIR/config.json describes, validated. From base.model only what config.json cannot say
/// is kept: init, init_std, moe.z_loss_weight and moe.dispatch. Throws ConfigError naming the
/// config.json key and value of every option normlab cannot express (an architecture other
/// than the three above, rope scaling, biases, an activation other than silu, clip_qkv, ...).
RunConfig hf_run_config(const std::string& dir, const RunConfig& base);

/// The Hugging Face names whose tensors, joined along dim 0 in this order, make normlab's
/// parameter `normlab_name` of a model of `cfg` (the stacked experts take one name per expert
/// and projection); throws std::invalid_argument for a name that has none.
std::vector<std::string> hf_sources(const std::string& normlab_name, const ModelConfig& cfg);

/// The tensors of a save_pretrained folder: every shard of model.safetensors.index.json (each
/// name where the index says), or model.safetensors. Throws CheckpointError naming the file.
TensorDict hf_read(const std::string& dir);

/// Hugging Face weights under normlab's names, as fp32, checked against the model `cfg` builds:
/// names it lacks and names it needs are listed together in one CheckpointError, a shape that
/// differs names the tensors and both shapes; `what` names the source.
TensorDict hf_to_normlab(const TensorDict& hf, const ModelConfig& cfg, const std::string& what);

/// Writes a normlab run folder (imported_run.h) from the save_pretrained folder `dir`; cfg is
/// hf_run_config's. Returns the checkpoint folder.
std::string hf_import(const std::string& dir, const RunConfig& cfg, const std::string& run_dir,
                      int64_t step = 0);

}  // namespace normlab
