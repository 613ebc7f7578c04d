#include "normlab/distributed/agreement.h"

#include <torch/torch.h>

#include <cstdio>
#include <cstring>

#include "normlab/util/device.h"
#include "normlab/util/error.h"

namespace normlab {

namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

void fnv(uint64_t& h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
}

std::string hex16(uint64_t h) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(h));
  return s;
}

// Four exact integer sums over one tensor's bytes as 16-bit words w_i: sum(w_lo), sum(w_hi),
// sum(w_lo * p_i), sum(w_hi * p_i) with p_i = i mod 251 + 1 (at most 2^24 per term, and at most
// 2^22 terms per chunk: no overflow in int64, the same result in any summation order).
torch::Tensor word_sums(const torch::Tensor& t) {
  constexpr int64_t kChunk = int64_t{1} << 22;
  const torch::Tensor flat = t.detach().contiguous().view(-1);
  const torch::Tensor words = flat.element_size() == 2   ? flat.view(torch::kInt16)
                              : flat.element_size() == 1 ? flat.view(torch::kUInt8)
                                                         : flat.view(torch::kInt32);
  const auto on = torch::TensorOptions().dtype(torch::kLong).device(t.device());
  torch::Tensor acc = torch::zeros({4}, on);
  for (int64_t start = 0; start < words.numel(); start += kChunk) {
    const int64_t len = std::min(kChunk, words.numel() - start);
    const torch::Tensor w = words.narrow(0, start, len).to(torch::kLong).bitwise_and(0xFFFFFFFFll);
    const torch::Tensor lo = w.bitwise_and(0xFFFF);
    const torch::Tensor hi = torch::bitwise_right_shift(w, 16).bitwise_and(0xFFFF);
    const torch::Tensor pos = torch::arange(start, start + len, on).remainder(251) + 1;
    acc += torch::stack({lo.sum(), hi.sum(), (lo * pos).sum(), (hi * pos).sum()});
  }
  return acc;
}

}  // namespace

std::string text_hash(const std::string& text) {
  uint64_t h = kFnvOffset;
  fnv(h, text.data(), text.size());
  return hex16(h);
}

std::string tensors_checksum(const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> sums;
  sums.reserve(named.size());
  for (const auto& [name, t] : named) sums.push_back(word_sums(t));
  uint64_t h = kFnvOffset;
  const torch::Tensor all =
      sums.empty() ? torch::zeros({0}, torch::kLong) : torch::stack(sums).cpu().contiguous();
  for (size_t i = 0; i < named.size(); ++i) {
    fnv(h, named[i].first.data(), named[i].first.size() + 1);  // with the NUL: names separate
    const auto& t = named[i].second;
    const int64_t meta[2] = {static_cast<int64_t>(t.scalar_type()), t.numel()};
    fnv(h, meta, sizeof meta);
    fnv(h, all[static_cast<int64_t>(i)].data_ptr<int64_t>(), 4 * sizeof(int64_t));
  }
  return hex16(h);
}

void check_ranks_agree(Communicator& comm, const std::vector<RankFact>& facts,
                       torch::Device device) {
  TORCH_CHECK(facts.size() <= static_cast<size_t>(kRankFacts), "check_ranks_agree: ", facts.size(),
              " facts, at most ", kRankFacts);
  constexpr int64_t kBytes = int64_t{kRankFacts} * kRankFactWidth;
  torch::Tensor mine = torch::zeros({kBytes}, torch::kUInt8);
  for (size_t i = 0; i < facts.size(); ++i)
    std::memcpy(mine.data_ptr<uint8_t>() + i * kRankFactWidth, facts[i].value.data(),
                std::min<size_t>(facts[i].value.size(), kRankFactWidth - 1));
  // As int64 words: a dtype every engine gathers.
  const torch::Tensor in = mine.view(torch::kLong).to(device);
  torch::Tensor out = torch::empty({comm.world() * in.numel()}, in.options());
  comm.all_gather(out, in);
  const torch::Tensor all = out.cpu().contiguous().view(torch::kUInt8);
  const auto value = [&](int rank, size_t i) {
    const char* p = reinterpret_cast<const char*>(all.data_ptr<uint8_t>()) + rank * kBytes +
                    static_cast<int64_t>(i) * kRankFactWidth;
    return std::string(p, strnlen(p, kRankFactWidth));
  };
  std::string msg;
  for (size_t i = 0; i < facts.size(); ++i) {
    int first = -1, others = 0;
    for (int r = 1; r < comm.world(); ++r) {
      if (value(r, i) == value(0, i)) continue;
      if (first < 0)
        first = r;
      else
        ++others;
    }
    if (first < 0) continue;
    msg +=
        std::string(msg.empty() ? "" : "; ") + facts[i].what + " differs (rank 0 has " +
        value(0, i) + ", rank " + std::to_string(first) + " has " + value(first, i) +
        (others > 0 ? ", and " + std::to_string(others) + " more ranks differ from rank 0" : "") +
        (facts[i].hint.empty() ? "" : "; " + facts[i].hint) + ")";
  }
  if (!msg.empty()) throw DistributedError("ranks disagree before training: " + msg);
}

std::vector<RankFact> launch_facts(
    const std::string& resolved_config, const Communicator& comm, torch::Device device,
    const std::vector<std::pair<std::string, torch::Tensor>>& initial_weights) {
  const std::string engine = comm.engine_version();
  return {
      {"config hash", text_hash(resolved_config), "give every rank the same --config and --set"},
      {"world size", std::to_string(comm.world()),
       "every rank must be started by the same launcher for the same job"},
      {"torch version", torch_version(), "every rank must run the same normlab build and torch"},
      {"NCCL version", engine.empty() ? "-" : engine,
       "every rank must load the same NCCL (torch's nvidia-nccl package)"},
      {"device type", c10::DeviceTypeName(device.type(), /*lower_case=*/true),
       "every rank must train on the same kind of device (train.device)"},
      {"initial weights checksum", tensors_checksum(initial_weights),
       "--init-from must name the same weights on every rank"},
  };
}

}  // namespace normlab
