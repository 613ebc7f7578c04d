// Launch agreement: before the first collective of training every rank states what it is about
// to run (the resolved config's hash, the world size, the LibTorch and NCCL versions, the device
// type, a checksum of its initial weights) and all ranks compare, so that a job whose ranks
// were started differently stops at once with one line naming what differs and on which rank,
// instead of hanging in a collective or training something else than asked.
#pragma once

#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

#include "normlab/distributed/communicator.h"

namespace normlab {

/// One thing every rank must agree on.
struct RankFact {
  std::string what;   // "config hash"
  std::string value;  // this rank's; at most kRankFactWidth - 1 bytes are compared
  std::string hint;   // what to change when ranks differ ("give every rank the same --config")
};
inline constexpr int kRankFacts = 8;       // at most this many facts
inline constexpr int kRankFactWidth = 64;  // bytes per value

/// Gathers every rank's `facts` (one all_gather of a fixed size, on `device`: where `comm`'s
/// collectives run) and throws DistributedError when a rank differs from rank 0, every rank
/// with the same one line, e.g.
///   ranks disagree before training: config hash differs (rank 0 has 5d1e0c1f9a7b3e22, rank 1
///   has 8a03f4c2d9e1b650; give every rank the same --config and --set)
/// (each differing fact once, with the first differing rank and how many others differ).
void check_ranks_agree(Communicator& comm, const std::vector<RankFact>& facts,
                       torch::Device device);

/// 16 hex digits: FNV-1a (64-bit) of `text`.
std::string text_hash(const std::string& text);

/// 16 hex digits that change when any byte of any tensor, a name, or the order changes:
/// computed on the tensors' own device (exact integer sums of 16-bit words, also weighted by
/// position), so only a few numbers per tensor reach the host.
std::string tensors_checksum(const std::vector<std::pair<std::string, torch::Tensor>>& named);

/// What the trainer checks before FSDP's first gather: the hash of `resolved_config` (the YAML
/// of the resolved config), comm's world size, LibTorch's version, comm's engine version (NCCL)
/// when it has one, `device`'s type, and `initial_weights`' checksum.
std::vector<RankFact> launch_facts(
    const std::string& resolved_config, const Communicator& comm, torch::Device device,
    const std::vector<std::pair<std::string, torch::Tensor>>& initial_weights);

}  // namespace normlab
