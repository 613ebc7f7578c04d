// Fsdp's unit (fsdp.h): the flat buffers of one block's (or the root's) parameters, private to
// fsdp.cpp (gathers, frees, reductions) and fsdp_state.cpp (clipping, checkpoints, memory).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "normlab/distributed/fsdp.h"

namespace normlab {

struct Fsdp::Unit {
  struct Param {
    std::string name;
    torch::Tensor tensor;  // the module's parameter (storage only while gathered)
    std::vector<int64_t> shape;
    int64_t numel = 0, offset = 0;  // place in the flat buffer
  };
  std::string name;
  size_t slot = 0;  // block index, or L for the root
  std::vector<Param> params;
  int64_t padded = 0, shard = 0;  // flat size (a multiple of S) and shard size
  torch::ScalarType gather_dtype = torch::kFloat, reduce_dtype = torch::kFloat;
  torch::Tensor shard_param, shard_grad;  // the master dtype (shard)
  bool gathered = false;
  torch::Tensor incoming;  // the buffer of a gather in flight (gather_dtype)
  torch::Tensor outgoing;  // this rank's shard in gather_dtype while its gather is in flight
  std::unique_ptr<Communicator::Pending> in_flight;
  torch::Tensor accumulated;  // unsharded gradient of the micro-steps without sync (padded)
  torch::Tensor reduce_in, reduce_out;  // a reduce-scatter in flight: flat gradient, its result
  std::unique_ptr<Communicator::Pending> reducing;
  int64_t pending = 0;  // parameters still to accumulate in this backward
  bool reduced = true;  // this backward's gradient is in shard_grad
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks;
};

}  // namespace normlab
