// The configuration schema, written once: one visit() per section lists its keys in order, each
// with its field (whose type and default the struct in config.h gives) and its documentation
// string. A visitor V has operator()(key, field, doc) for a value and section(key, sub, doc)
// for a nested section; the YAML decoder and encoder (config_io.cpp) and the documented list of
// keys (config_reference.cpp) are such visitors. Private to src/config/.
#pragma once

#include "normlab/config/config.h"

namespace normlab::config_schema {

template <class V>
void visit(V& v, HyperOptions& h) {
  v("variant", h.variant,
    "hc = Hyper-Connections; mhc = manifold-constrained (sigmoid H_pre, H_post, Sinkhorn H_res)");
  v("n", h.n, "expansion rate: the residual state is n streams (1, 2, 4 or 8)");
  v("dynamic", h.dynamic,
    "hc: dynamic connections (DHC), alpha and beta depend on the token through W_alpha, W_beta");
  v("tanh", h.tanh, "hc, DHC: tanh on the dynamic projections");
  v("out_std_mult", h.out_std_mult,
    "init std of the attention and MLP output projections times sqrt_n (the HC paper's) or 1");
}

template <class V>
void visit(V& v, SiameseHyperOptions& h) {
  v("variant", h.variant, "hc or mhc, as model.hyper.variant");
  v("n", h.n,
    "hyper-streams of the Pre-Norm-like stream Y (1, 2, 4 or 8); 0 = off, the plain Y stream");
  v("dynamic", h.dynamic, "hc: dynamic connections (DHC), as model.hyper.dynamic");
  v("tanh", h.tanh, "hc, DHC: tanh on the dynamic projections");
  v("out_std_mult", h.out_std_mult,
    "init std of the shared attention and MLP output projections times 1 or sqrt_n");
}

template <class V>
void visit(V& v, SiameseOptions& s) {
  v("depth_scale", s.depth_scale,
    "divide the X-stream update by c_l = sqrt(2(l+1)) (off: c_l = 1)");
  v("input_norm", s.input_norm, "normalized input fusion: N_in before each shared branch");
  v("output_fusion", s.output_fusion,
    "end of network: code = N(N_x(X) + N_y(Y)), paper = N_x(X) + N_y(Y)");
  v.section("hyper", s.hyper,
            "SiameseNorm x Hyper-Connections: Y as n hyper-streams (docs/schemes.md)");
}

template <class V>
void visit(V& v, MoeOptions& m) {
  v("n_experts", m.n_experts, "experts per MoE layer; 0 = dense MLP in every block");
  v("top_k", m.top_k, "experts each token is routed to (token choice, dropless)");
  v("d_expert", m.d_expert, "SwiGLU intermediate width of each expert; 0 = model.d_ff");
  v("renormalize", m.renormalize,
    "renormalise the top_k router probabilities to sum to 1 (false: OLMoE, raw softmax weights)");
  v("every", m.every, "MoE in blocks 0, k, 2k, ... for k = this (1: every block); others dense");
  v("lb_loss_weight", m.lb_loss_weight,
    "weight of the load-balancing loss E * sum_e f_e P_e (mean over MoE layers)");
  v("z_loss_weight", m.z_loss_weight,
    "weight of the router z-loss mean(logsumexp(router logits)^2) (mean over MoE layers)");
  v("dispatch", m.dispatch,
    "how the experts run on their rows sorted by expert: loop (one GEMM pair per expert), grouped "
    "(two grouped GEMMs for all experts; float32/bf16/fp16, d_model and d_expert multiples of 16 "
    "bytes), auto (grouped on CUDA where possible, else loop)");
}

template <class V>
void visit(V& v, ModelConfig& m) {
  v("scheme", m.scheme, "normalization scheme (docs/schemes.md)");
  v("vocab_size", m.vocab_size, "vocabulary size; the tokenizer's must fit");
  v("d_model", m.d_model, "hidden width");
  v("n_layers", m.n_layers, "number of blocks");
  v("n_heads", m.n_heads, "attention heads; head dim = d_model / n_heads (even)");
  v("n_kv_heads", m.n_kv_heads,
    "key/value heads: 0 = n_heads (full multi-head), fewer = grouped-query");
  v("d_ff", m.d_ff, "SwiGLU intermediate width");
  v("rope_theta", m.rope_theta, "RoPE base");
  v("norm_type", m.norm_type, "norm of every norm position, q/k/v norms included");
  v("norm_eps", m.norm_eps, "epsilon of every norm");
  v("qkv_norm", m.qkv_norm,
    "per-head norms on q, k, v before RoPE (always on for the hybrid schemes)");
  v("qk_norm", m.qk_norm,
    "none, or full: one norm over the whole q projection (n_heads x head_dim) and one over the "
    "whole k projection (n_kv_heads x head_dim) before the heads are split, v untouched "
    "(OLMo-2, OLMoE); not with qkv_norm");
  v("tie_embeddings", m.tie_embeddings, "use the embedding matrix as the LM head");
  v("init", m.init, "weight initialisation (docs/schemes.md)");
  v("init_std", m.init_std, "base std of the normal and megatron inits");
  v.section("siamese", m.siamese, "SiameseNorm switches (siamese, siamese_hybrid)");
  v.section("hyper", m.hyper, "Hyper-Connections options (hyper)");
  v("deep_norm_alpha", m.deep_norm_alpha, "DeepNorm residual scale; null = (2L)^(1/4)");
  v("deep_norm_beta", m.deep_norm_beta, "DeepNorm init scale; null = (8L)^(-1/4)");
  v("mix_ln_post_layers", m.mix_ln_post_layers,
    "Mix-LN: Post-Norm blocks at the bottom; null = floor(L/4)");
  v.section("moe", m.moe, "Mixture-of-Experts MLP (docs/moe.md); n_experts 0 = dense");
}

template <class V>
void visit(V& v, DataConfig& d) {
  v("train", d.train,
    "training data: a folder of token shards (normlab data prepare), a source {path, format "
    "(shards, tokens, megatron), dtype, eos, verify} or a list of sources with weights (a "
    "mixture; docs/data.md)");
  v("val", d.val,
    "validation data: a folder or one source; empty = the train folder's validation split");
  v("tokenizer", d.tokenizer, "tokenizer of the shards: tokenizer.model or tokenizer.json");
  v("seq_len", d.seq_len, "tokens per training sample");
}

template <class V>
void visit(V& v, OptimizerConfig& o) {
  v("lr", o.lr, "peak learning rate (AdamW)");
  v("beta1", o.beta1, "AdamW beta1");
  v("beta2", o.beta2, "AdamW beta2");
  v("eps", o.eps, "AdamW epsilon");
  v("weight_decay", o.weight_decay, "decoupled weight decay; never on norm gains, c1 or biases");
  v("decay_embeddings", o.decay_embeddings, "apply weight decay to the embedding and head");
  v("grad_clip", o.grad_clip, "clip the global gradient norm to this; 0 = off");
  v("fused", o.fused,
    "one fused AdamW kernel (at::_fused_adamw_); false = the reference per-tensor loop");
}

template <class V>
void visit(V& v, SchedulerConfig& s) {
  v("kind", s.kind, "learning-rate schedule");
  v("warmup_steps", s.warmup_steps, "linear warm-up steps from 0 to the peak");
  v("final_lr_fraction", s.final_lr_fraction,
    "lr at the end as a fraction of the peak (cosine, linear, wsd)");
  v("decay_fraction", s.decay_fraction, "wsd: fraction of the steps spent decaying at the end");
}

template <class V>
void visit(V& v, TrainConfig& t) {
  v("steps", t.steps, "optimizer steps");
  v("global_batch", t.global_batch, "sequences per optimizer step over all ranks");
  v("micro_batch", t.micro_batch, "sequences per forward/backward on one rank");
  v("seed", t.seed, "seed of initialisation and data order");
  v("device", t.device, "auto (CUDA when available), cpu, cuda or cuda:N");
  v("precision", t.precision,
    "auto = bf16 autocast on CUDA; on a CPU with native bf16 (AMX or AVX512-BF16) the faster of "
    "bf16 and fp32 for this model, measured at the start of the run and cached (a resumed run "
    "keeps its first segment's); else fp32; bf16 = bf16 autocast with fp32 weights and "
    "optimizer state on any device "
    "(emulated, slow, on a CPU without native bf16); fp64 = weights, optimizer state, "
    "activations and FSDP traffic in float64 (exact checks against a reference; slow)");
  v("z_loss", t.z_loss, "weight of the z-loss mean(logsumexp(logits)^2); 0 = off");
  v("skip_nonfinite", t.skip_nonfinite,
    "skip steps whose loss or gradient is not finite instead of ending the run as diverged");
  v("spike_window", t.spike_window, "loss-spike detector: rolling window of steps");
  v("spike_sigma", t.spike_sigma,
    "loss-spike detector: a spike is a loss above mean + sigma * std of the window");
  v("loss_chunk_rows", t.loss_chunk_rows,
    "> 0: cross-entropy over chunks of this many token rows, gradients formed in the forward, "
    "never the whole (tokens x vocabulary) logits; 0 = the plain loss");
  v("activation_checkpointing", t.activation_checkpointing,
    "none; block: keep only each block's inputs and recompute the block in the backward (less "
    "memory, about one more forward); selective: the same for every selective_every-th block only");
  v("selective_every", t.selective_every,
    "activation_checkpointing: selective checkpoints blocks 0, k, 2k, ... for k = this (2: half "
    "the blocks)");
}

template <class V>
void visit(V& v, EvalConfig& e) {
  v("every", e.every,
    "evaluate on the validation split every N steps (and at the end); 0 = only at the end");
  v("at_start", e.at_start,
    "also evaluate the initial weights before the first step (metrics.jsonl line of step 0)");
  v("batches", e.batches, "validation batches per evaluation; 0 = the whole split");
  v("micro_batch", e.micro_batch, "sequences per validation batch; 0 = train.micro_batch");
  v("tasks", e.tasks,
    "multiple-choice task files (JSONL, docs/evaluation.md), comma-separated: accuracy at every "
    "evaluation");
}

template <class V>
void visit(V& v, DiagnosticsConfig& d) {
  v("every", d.every,
    "run the paper's diagnostics every N steps into diagnostics.jsonl (docs/diagnostics.md); 0 = "
    "off");
  v("batch", d.batch,
    "sequences of the fixed diagnostics batch (the first of the validation split)");
  v("top_k", d.top_k, "massive activations kept per layer and stream; 0 = none");
  v("pruning", d.pruning,
    "also the loss with each block skipped in turn (n_layers more forward passes)");
}

template <class V>
void visit(V& v, CheckpointConfig& c) {
  v("every", c.every, "save a checkpoint every N steps (and at the end); 0 = only at the end");
  v("keep", c.keep, "keep the last K checkpoints");
  v("at_end", c.at_end,
    "save a checkpoint after the last step (false: benchmarks; a stop signal still saves)");
}

template <class V>
void visit(V& v, LoggingConfig& l) {
  v("every", l.every, "console progress line every N steps (metrics.jsonl gets every step)");
  v("level", l.level, "debug, info, warn or error");
  v("tensorboard", l.tensorboard,
    "also write the metrics (and diagnostics' stream norms) as TensorBoard event files under "
    "RUN_DIR/tensorboard/");
  v("peak_tflops", l.peak_tflops,
    "MFU's denominator in TFLOP/s; 0 = the GPU's dense bf16 peak looked up by its name "
    "(docs/gpu.md), no nominal MFU for a GPU not in the table");
  v("mfu_warmup", l.mfu_warmup,
    "first steps of a run left out of its MFU (allocator growth, kernel selection); the rest "
    "are the timed window");
}

template <class V>
void visit(V& v, DistributedConfig& d) {
  v("backend", d.backend,
    "collective engine over several processes: auto = nccl on CUDA, mpi on CPU");
  v("timeout_seconds", d.timeout_seconds,
    "a collective that waits longer ends the run with an error naming it");
  v("reshard_after_forward", d.reshard_after_forward,
    "FSDP: free each block's gathered weights after its forward (less memory, one more "
    "all-gather)");
  v("prefetch", d.prefetch,
    "FSDP: start the next block's all-gather before running this one (overlaps on GPUs)");
  v("force_fsdp", d.force_fsdp,
    "FSDP even in a single process (on CUDA through NCCL): measures the layer's cost");
  v("param_dtype", d.param_dtype,
    "FSDP: dtype of the parameter all-gathers; auto = bf16 when training in bf16 (the compute "
    "dtype), else fp32 (fp64 with train.precision = fp64, which also reduces in fp64)");
  v("reduce_dtype", d.reduce_dtype,
    "FSDP: dtype of the gradient reduce-scatter; fp32 (exact sums), bf16 (half the traffic), auto "
    "= param_dtype");
  v("reduce", d.reduce,
    "FSDP with gradient accumulation: reduce-scatter each block's gradient after every "
    "micro-step (per_micro_step), or accumulate it unsharded and reduce once per step "
    "(per_step: fewer collectives, one unsharded gradient more per rank, normlab info)");
  v("overlap_reduce", d.overlap_reduce,
    "FSDP: start a block's gradient reduce-scatter as soon as its backward is done and let it "
    "run while the blocks before it compute (completed before the optimizer step)");
  v("shard_size", d.shard_size,
    "FSDP: ranks per shard group; 0 = all ranks (plain FSDP); a divisor S of the world size: "
    "hybrid sharding, parameters sharded over S ranks, replicated over world / S groups");
  v("keep_fp32", d.keep_fp32,
    "FSDP: parameters gathered and reduced in fp32 whatever param_dtype and reduce_dtype say, "
    "comma-separated: norms (gains), scheme (SiameseNorm c1, Hyper-Connections), embeddings; "
    "none. The default rounds only matmul weights: what bf16 autocast rounds anyway");
}

template <class V>
void visit(V& v, RunConfig& r) {
  v.section("model", r.model, "architecture and initialisation");
  v.section("data", r.data, "token shards and tokenizer");
  v.section("optimizer", r.optimizer, "AdamW");
  v.section("scheduler", r.scheduler, "learning-rate schedule");
  v.section("train", r.train, "the training loop");
  v.section("eval", r.eval, "evaluation during training");
  v.section("diagnostics", r.diagnostics, "the paper's diagnostics during training");
  v.section("checkpoint", r.checkpoint, "checkpoints");
  v.section("logging", r.logging, "console and log output");
  v.section("distributed", r.distributed, "multi-process training (FSDP, docs/distributed.md)");
}

}  // namespace normlab::config_schema
