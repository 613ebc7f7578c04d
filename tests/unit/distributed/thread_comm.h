// Threads as ranks, for unit tests of the distributed layer: W threads joined by an in-memory
// communicator, so FSDP and the launch checks run in one process (tests/distributed/ runs the
// real engines over MPI).
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "normlab/distributed/communicator.h"

namespace normlab {

// W threads as W ranks: every collective is a barrier-separated exchange through shared memory.
class ThreadGroup {
 public:
  explicit ThreadGroup(int world) : slots_(world), world_(world) {}
  int world() const { return world_; }
  void barrier() {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t gen = generation_;
    if (++arrived_ == world_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != gen; });
    }
  }
  std::vector<torch::Tensor> slots_;
  // The group of `size` ranks made by the seq-th split for `color` (the first caller creates
  // it; it lives as long as this group).
  ThreadGroup& subgroup(int64_t seq, int color, int size) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& g = subgroups_[{seq, color}];
    if (!g) g = std::make_unique<ThreadGroup>(size);
    return *g;
  }

 private:
  std::map<std::pair<int64_t, int>, std::unique_ptr<ThreadGroup>> subgroups_;
  int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int64_t generation_ = 0;
};

class ThreadComm final : public Communicator {
 public:
  ThreadComm(ThreadGroup& g, int rank) : g_(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int world() const override { return g_.world(); }
  std::string backend() const override { return "threads"; }
  void all_gather(torch::Tensor& out, const torch::Tensor& in) override {
    exchange(in);
    for (int r = 0; r < world(); ++r) out.narrow(0, r * in.numel(), in.numel()).copy_(g_.slots_[r]);
    g_.barrier();
  }
  void reduce_scatter(torch::Tensor& out, const torch::Tensor& in) override {
    ++reduce_scatters;
    exchange(in);
    out.zero_();
    for (int r = 0; r < world(); ++r)
      out.add_(g_.slots_[r].narrow(0, rank_ * out.numel(), out.numel()));
    g_.barrier();
  }
  void all_reduce(torch::Tensor& t, ReduceOp op) override {
    exchange(t.clone());
    torch::Tensor acc = g_.slots_[0].clone();
    for (int r = 1; r < world(); ++r)
      acc = op == ReduceOp::Sum ? acc + g_.slots_[r] : torch::maximum(acc, g_.slots_[r]);
    g_.barrier();
    t.copy_(acc);
  }
  void broadcast(torch::Tensor& t, int root) override {
    exchange(t.clone());
    torch::Tensor v = g_.slots_[root].clone();
    g_.barrier();
    t.copy_(v);
  }
  void barrier() override { g_.barrier(); }
  std::unique_ptr<Communicator> split(int color, int key) override {
    torch::Tensor mine = torch::tensor({static_cast<int64_t>(color), static_cast<int64_t>(key)});
    torch::Tensor all = torch::empty({2 * world()}, torch::kLong);
    all_gather(all, mine);
    std::vector<std::pair<int64_t, int>> members;  // (key, rank) of the ranks of this color
    for (int r = 0; r < world(); ++r)
      if (all[2 * r].item<int64_t>() == color)
        members.emplace_back(all[2 * r + 1].item<int64_t>(), r);
    std::sort(members.begin(), members.end());
    int rank = 0;
    while (members[static_cast<size_t>(rank)].second != rank_) ++rank;
    ThreadGroup& g = g_.subgroup(splits_++, color, static_cast<int>(members.size()));
    return std::make_unique<ThreadComm>(g, rank);
  }
  // Runs only in wait(): a caller that reads `out` or changes `in` before completing it gets a
  // wrong result, as it could from an engine that overlaps. Every rank completes its deferred
  // collectives in the same order relative to the others, as engines require.
  std::unique_ptr<Pending> reduce_scatter_async(torch::Tensor& out,
                                                const torch::Tensor& in) override {
    struct Deferred final : Pending {
      Deferred(ThreadComm* c, torch::Tensor o, torch::Tensor i)
          : comm(c), out(std::move(o)), in(std::move(i)) {}
      void wait() override {
        if (done) return;
        done = true;
        comm->reduce_scatter(out, in);
      }
      ThreadComm* comm;
      torch::Tensor out, in;
      bool done = false;
    };
    return std::make_unique<Deferred>(this, out, in);
  }
  int reduce_scatters = 0;  // reduce-scatters run by this rank

 private:
  void exchange(const torch::Tensor& t) {
    g_.slots_[rank_] = t;
    g_.barrier();
  }
  ThreadGroup& g_;
  int rank_;
  int64_t splits_ = 0;  // splits made from this communicator
};

// Runs fn(rank, comm) on `world` threads; rethrows the first failure.
inline void on_ranks(int world, const std::function<void(int, Communicator&)>& fn) {
  ThreadGroup group(world);
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(world);
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      ThreadComm comm(group, r);
      try {
        fn(r, comm);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace normlab
