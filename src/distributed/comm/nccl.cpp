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
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = std::chrono::duration_cast<std::chrono::milliseconds>(o.timeout);
    pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world, opts);
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

 private:
  int rank_, world_;
  torch::Device device_{torch::kCUDA};
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
