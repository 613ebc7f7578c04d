// Fsdp: ZeRO-3 / FSDP-style sharding, a layer applied to a built DecoderLM (the model code
// knows only its ForwardHooks). One unit per block plus a root unit (embedding, end norms,
// head); each unit's parameters are flattened, padded and cut into equal fp32 shards, gathered
// before the unit runs and reduce-scattered after its backward. How a step runs (units,
// hybrid groups, dtypes and keep_fp32, prefetch, overlap, gradient accumulation) and what
// pieces() promise the checkpoints: docs/distributed.md, "What a step does".
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "normlab/distributed/communicator.h"
#include "normlab/nn/model.h"
#include "normlab/util/safetensors.h"

namespace normlab {

struct FsdpOptions {
  bool reshard_after_forward = true;  // free each block's gathered parameters after its forward
  // Activation checkpointing (nn/activation_checkpointing.h) of every k-th block; 0: none.
  int64_t activation_checkpointing_every = 0;
  bool prefetch = true;  // start the next unit's all-gather before running this one
  torch::ScalarType param_dtype =
      torch::kFloat;  // all-gather dtype (kFloat, kBFloat16; fp64 model: kDouble)
  torch::ScalarType reduce_dtype = torch::kFloat;  // reduce-scatter dtype (likewise)
  // Start each unit's reduce-scatter without waiting for it; it completes when the next unit's
  // starts, or in finish_backward (at most one in flight).
  bool overlap_reduce = true;
  // Ranks per shard group (hybrid sharding); 0: all ranks. Must divide the world size.
  int64_t shard_size = 0;
  // Parameters (by name) gathered and reduced in the shards' dtype, not param_dtype and
  // reduce_dtype.
  std::set<std::string> keep_fp32;
};

/// This rank's elements of one parameter.
struct ShardPiece {
  std::string name;            // the parameter's name (blocks.3.attn.wq.weight)
  torch::Tensor param;         // 1-D view into the unit's shard; .grad() views the shard gradient
  int64_t start = 0;           // index of param[0] in the flattened parameter
  std::vector<int64_t> shape;  // the whole parameter's shape
  bool decay = false;          // in AdamW's weight-decay group
};

class Fsdp final : public ForwardHooks {
 public:
  /// Shards `model` (built identically on every rank) over `comm`; the model's parameter
  /// storage is released. `decayed` names the parameters in AdamW's weight-decay group (the
  /// caller decides: weight_decay_names, train/optimizer.h); pieces() carry that flag.
  Fsdp(DecoderLM model, Communicator& comm, const FsdpOptions& options,
       const std::set<std::string>& decayed);
  ~Fsdp() override;
  Fsdp(const Fsdp&) = delete;
  Fsdp& operator=(const Fsdp&) = delete;

  const std::vector<ShardPiece>& pieces() const { return pieces_; }
  /// Shard gradients to zero (before a step's micro-batches).
  void zero_grad();
  /// Whether the next backward reduces its gradients over ranks (true, the default) or keeps
  /// adding them to this rank's unsharded buffers until a backward that does.
  void set_gradient_sync(bool sync) { sync_ = sync; }
  /// After each backward: reduces the units whose hooks did not complete (parameters that got
  /// no gradient), in unit order on every rank, and completes every reduction in flight.
  void finish_backward();
  /// The shard group this rank belongs to (the world, without hybrid sharding): its size S,
  /// this rank's index in it, and the replica group's index r / S (0 .. W / S - 1).
  Communicator& shard_comm() { return *shard_; }
  int shard_world() const { return shard_->world(); }
  int shard_rank() const { return shard_->rank(); }
  int replica() const { return comm_.rank() / shard_->world(); }
  /// The global gradient norm over all shards; clips like clip_grad_norm (optimizer.h).
  double clip_grad_norm(double max_norm);
  /// Seconds the calling thread has waited for gathers and reductions to complete since the
  /// last call (the communication not hidden behind compute; on CUDA a wait only orders
  /// streams, so this measures the host side only).
  double take_wait_seconds();

  /// This rank's pieces by parameter name, and their starts and shapes (checkpoint metadata).
  TensorDict local_weights() const;
  /// Loads this rank's slices of whole parameters (a single-process or consolidated checkpoint).
  void load_full(const TensorDict& full, const std::string& what);
  /// The same slicing for optimizer state of whole parameters: "<prefix>.<name>" entries whose
  /// size is the parameter's are sliced; the rest pass through.
  TensorDict slice_state(const TensorDict& full) const;

  /// Bytes this rank holds between steps: shards, shard gradients and any module parameter
  /// storage (zero when all units are freed).
  int64_t resident_bytes() const;

  // ForwardHooks
  void before_forward() override;
  Streams run_block(size_t layer, SchemeBlockImpl& block, const Streams& in) override;
  torch::Tensor after_forward(torch::Tensor logits) override;

  struct Unit;
  void gather(Unit& u);  // public for the backward node
  /// Gathers the units of `slot` (block `slot`, or the root: slot L), then starts the gathers
  /// of the slot after it in this pass (prefetch).
  void gather_and_prefetch(size_t slot, bool backward);

 private:
  void start_gather(Unit& u);
  void free(Unit& u);
  void reduce_grads(Unit& u);
  void finish_reduce(Unit& u);

  DecoderLM model_;
  Communicator& comm_;
  FsdpOptions options_;
  std::unique_ptr<Communicator> shard_group_, replica_group_;  // hybrid sharding only
  Communicator* shard_ = nullptr;             // the shard group: shard_group_, or comm_
  std::vector<std::unique_ptr<Unit>> units_;  // in slot order
  std::vector<std::vector<Unit*>> slots_;     // blocks 0..L-1, then the root: their units
  std::vector<ShardPiece> pieces_;
  bool sync_ = true;
  double wait_seconds_ = 0.0;
  Unit* reducing_ = nullptr;  // the unit whose reduce-scatter is in flight
};

}  // namespace normlab
