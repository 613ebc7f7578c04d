// The GPU engine: c10d ProcessGroupNCCL from LibTorch, with the rendezvous torchrun expects
// (torch.distributed's env:// handler): rank 0 serves a TCPStore on MASTER_ADDR:MASTER_PORT,
// or, under torchrun's elastic agent, every rank is a client of the agent's store behind the
// "/worker/attempt_<restart>" prefix. Timeouts are NCCL's own: its watchdog ends a process
// whose collective waits longer than distributed.timeout_seconds. Host tensors (the
// trainer's scalars) travel through the device. Built with NORMLAB_WITH_NCCL (a CUDA build
// with nccl.h); this file alone defines USE_C10D_NCCL, which the c10d headers need.
#include "build_config.h"
#include "distributed/comm/backends.h"
#include "normlab/util/error.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#if NORMLAB_WITH_NCCL
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <c10/cuda/CUDAFunctions.h>
#include <nccl.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif

namespace normlab::comm {

#if NORMLAB_WITH_NCCL
namespace {

class NcclCommunicator final : public Communicator {
  struct InFlight final : Pending {
    explicit InFlight(c10::intrusive_ptr<c10d::Work> w) : work(std::move(w)) {}
    void wait() override { work->wait(); }
    c10::intrusive_ptr<c10d::Work> work;
  };

 public:
  NcclCommunicator(const DistEnv& env, const CommOptions& o, torch::Device device)
      : rank_(env.rank), world_(env.world), device_(device) {
    c10::cuda::set_device(device_.index());  // before the first collective
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env.master_port);
    so.isServer = !env.agent_store && env.rank == 0;
    so.numWorkers = static_cast<size_t>(env.world);
    so.multiTenant = !env.agent_store;
    so.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(o.timeout);
    c10::intrusive_ptr<c10d::Store> store =
        c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
    if (env.agent_store)
      store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + env.restart_count, store);
    store_ = store;
    timeout_ = std::chrono::duration_cast<std::chrono::milliseconds>(o.timeout);
    pg_ = make_group(store_, rank_, world_);
  }
  // A part of the world (split): its own process group (a new NCCL communicator) over the
  // world's store, under a prefix unique to the split and the color.
  NcclCommunicator(const NcclCommunicator& parent, const std::string& prefix, int rank, int world)
      : rank_(rank),
        world_(world),
        device_(parent.device_),
        store_(c10::make_intrusive<c10d::PrefixStore>(prefix, parent.store_)),
        timeout_(parent.timeout_) {
    pg_ = make_group(store_, rank_, world_);
  }
  ~NcclCommunicator() override {
    if (pg_) pg_->shutdown();
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend() const override { return "nccl"; }
  std::string engine_version() const override {
    int v = 0;  // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch (since 2.9)
    if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
    return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
           std::to_string(v % 100);
  }

  void all_gather(torch::Tensor& out, const torch::Tensor& in) override {
    torch::Tensor src = in;
    pg_->_allgather_base(out, src)->wait();
  }
  std::unique_ptr<Pending> all_gather_async(torch::Tensor& out, const torch::Tensor& in) override {
    torch::Tensor src = in;
    return std::make_unique<InFlight>(
        pg_->_allgather_base(out, src));  // on the group's NCCL stream
  }

  void reduce_scatter(torch::Tensor& out, const torch::Tensor& in) override {
    torch::Tensor src = in;
    c10d::ReduceScatterOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    pg_->_reduce_scatter_base(out, src, o)->wait();
  }
  std::unique_ptr<Pending> reduce_scatter_async(torch::Tensor& out,
                                                const torch::Tensor& in) override {
    torch::Tensor src = in;
    c10d::ReduceScatterOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    return std::make_unique<InFlight>(pg_->_reduce_scatter_base(out, src, o));
  }
  void all_reduce(torch::Tensor& t, ReduceOp op) override {
    std::vector<torch::Tensor> ts{t.is_cuda() ? t : t.to(device_)};
    c10d::AllreduceOptions o;
    o.reduceOp = op == ReduceOp::Sum ? c10d::ReduceOp::SUM : c10d::ReduceOp::MAX;
    pg_->allreduce(ts, o)->wait();
    if (!t.is_cuda()) t.copy_(ts[0].cpu());
  }
  void broadcast(torch::Tensor& t, int root) override {
    std::vector<torch::Tensor> ts{t.is_cuda() ? t : t.to(device_)};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    pg_->broadcast(ts, o)->wait();
    if (!t.is_cuda()) t.copy_(ts[0].cpu());
  }
  void barrier() override { pg_->barrier()->wait(); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    torch::Tensor mine = torch::tensor({static_cast<int64_t>(color), static_cast<int64_t>(key)},
                                       torch::TensorOptions().dtype(torch::kLong).device(device_));
    torch::Tensor all = torch::empty({2 * world_}, mine.options());
    all_gather(all, mine);
    const torch::Tensor host = all.cpu();
    const int64_t* v = host.data_ptr<int64_t>();
    std::vector<std::pair<int64_t, int>> members;  // (key, rank) of the ranks of this color
    for (int r = 0; r < world_; ++r)
      if (v[2 * r] == color) members.emplace_back(v[2 * r + 1], r);
    std::sort(members.begin(), members.end());
    int rank = 0;
    while (members[static_cast<size_t>(rank)].second != rank_) ++rank;
    const std::string prefix =
        "split_" + std::to_string(splits_++) + "_color_" + std::to_string(color);
    return std::unique_ptr<Communicator>(
        new NcclCommunicator(*this, prefix, rank, static_cast<int>(members.size())));
  }

 private:
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> make_group(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int world) const {
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = timeout_;
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, opts);
  }

  int rank_, world_;
  torch::Device device_{torch::kCUDA};
  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_{600000};
  int splits_ = 0;  // splits made from this communicator (each gets its own store prefix)
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> pg_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl(const DistEnv& env, const CommOptions& options,
                                        torch::Device device) {
  return std::make_unique<NcclCommunicator>(env, options, device);
}

#else

std::unique_ptr<Communicator> make_nccl(const DistEnv&, const CommOptions&, torch::Device) {
  throw ConfigError(
      "this normlab was built without NCCL (a CUDA build with nccl.h): "
      "distributed.backend = nccl is unavailable");
}

#endif

}  // namespace normlab::comm
