// What a model configuration costs: parameter counts (from the model built on the meta
// device, so they cannot drift from the code), FLOPs per token as torchtitan counts them, and
// an estimate of training memory per GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "normlab/nn/model_config.h"

namespace normlab {

struct ParamCounts {
  int64_t total = 0;
  int64_t active = 0;              // used per token: total less, in each MoE layer, the
                                   // n_experts - top_k experts a token is not routed to
  int64_t embedding = 0;           // embed.weight
  int64_t head = 0;                // head.weight (0 when tied)
  std::vector<int64_t> per_block;  // blocks.<l>.*
  int64_t ends = 0;                // the scheme's end-of-network norms
  int64_t connections = 0;         // Hyper-Connections layers (blocks.<l>.*_hc.*; in per_block)
  Scheme base = Scheme::PreNorm;   // the single-stream scheme the overhead is counted against
  int64_t base_total = 0;          // total of `base` with the same config
  int64_t extra() const { return total - base_total; }
  int64_t non_embedding() const { return total - embedding; }
};
ParamCounts count_parameters(const ModelConfig& cfg);

/// Training FLOPs per token: 6 N + 6 L H D T, N = active parameters without the input embedding
/// (the head is counted; with tied embeddings the shared matrix is counted once as the head),
/// L layers, H heads, D head dim, T sequence length. The attention term is the score and
/// value matmuls of a causal mask, half of the 12 L H D T of full attention (as in the
/// FlashAttention papers and Megatron's MFU): the FLOPs the kernels actually perform.
double flops_per_token(const ModelConfig& cfg, int64_t seq_len);

struct MemoryPlan {
  int64_t seq_len = 2048;
  int64_t micro_batch = 8;
  int64_t world_size = 1;
  bool fsdp = false;                      // parameters, gradients and AdamW state sharded
  int64_t shard_size = 0;                 // FSDP over groups of this many ranks; 0: world_size
  bool activation_checkpointing = false;  // per block: keep block inputs, recompute inside
  bool bf16 = true;                       // bf16 autocast compute, fp32 master weights
  bool overlap_reduce = true;    // FSDP: one unit's flat gradient in flight beside the one filled
  bool reduce_per_step = false;  // FSDP: an unsharded fp32 gradient summed over micro-steps
};

/// Bytes per GPU, by kind. Activations count the tensors autograd keeps for one micro-batch;
/// the CUDA context, allocator fragmentation and communication buffers are not included.
struct MemoryEstimate {
  double weights = 0;      // fp32 master parameters (this rank's share)
  double gradients = 0;    // fp32 gradients (this rank's share)
  double optimizer = 0;    // AdamW moments, fp32
  double working = 0;      // bf16 weight copies of autocast (every matmul's, also under FSDP),
                           // FSDP's gathered units, flat gradients and per-step gradient sum
  double activations = 0;  // saved for backward by the blocks
  double logits = 0;       // logits, their fp32 softmax and gradient
  double total() const { return weights + gradients + optimizer + working + activations + logits; }
};
MemoryEstimate estimate_memory(const ModelConfig& cfg, const MemoryPlan& plan);

/// The least memory a model of `cfg` holds on each rank: `bytes_per_parameter` for each of its
/// parameters (training: 16 in fp32 for weights, gradients and the two AdamW moments, 32 in
/// fp64), over `shards` ranks (FSDP; 1: unsharded). Throws ConfigError, one line naming the model
/// key whose tensors dominate the count (model.vocab_size, model.moe.n_experts or
/// model.n_layers), `holds` (what the bytes are) and both sizes, when that exceeds `capacity`
/// bytes, the memory of `device` (e.g. "cpu", "cuda:0").
void require_model_fits(const ModelConfig& cfg, double bytes_per_parameter, double shards,
                        double capacity, const std::string& device, const std::string& holds);

}  // namespace normlab
