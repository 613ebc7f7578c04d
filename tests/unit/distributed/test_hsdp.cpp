// Hybrid sharding (fsdp.h, shard_size: shard groups and replica groups split from the world)
// and FSDP's precision policy (keep_fp32), with threads as ranks (thread_comm.h);
// tests/distributed/hsdp.sh runs both over MPI.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <mutex>
#include <set>

#include "normlab/distributed/communicator.h"
#include "normlab/distributed/fsdp.h"
#include "normlab/nn/model.h"
#include "normlab/nn/parameter_roles.h"
#include "normlab/train/optimizer.h"
#include "support.h"
#include "unit/distributed/thread_comm.h"

namespace normlab {
namespace {

// The model every rank builds (one at a time: the seed is the process's generator), with every
// parameter that is not a matmul weight moved off the bf16 grid (+ 1.23 % of a sine), so that
// rounding a norm gain, a scheme parameter or the embedding to bf16 changes the function.
DecoderLM build(const ModelConfig& cfg) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(7);
  DecoderLM model(cfg);
  torch::NoGradGuard no_grad;
  const auto roles = parameter_roles(*model);
  for (auto& p : model->named_parameters())
    if (roles.at(p.key()) != ParamRole::Matmul) {
      const torch::Tensor t = p.value();
      t.add_(0.0123 * torch::sin(torch::arange(t.numel(), t.options()).view(t.sizes()) + 1.0) *
             (t.abs() + 1.0));
    }
  return model;
}

ModelConfig config(Scheme scheme, bool tied = false) {
  ModelConfig c = test::tiny_config(scheme);
  c.tie_embeddings = tied;
  return c;
}

// Joined per parameter in order of start: the first replica group's pieces.
using Pieces = std::map<std::string, std::vector<std::pair<int64_t, torch::Tensor>>>;
std::map<std::string, torch::Tensor> join(Pieces pieces) {
  std::map<std::string, torch::Tensor> out;
  for (auto& [name, parts] : pieces) {
    std::sort(parts.begin(), parts.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<torch::Tensor> flat;
    for (const auto& [start, t] : parts) flat.push_back(t);
    out[name] = torch::cat(flat);
  }
  return out;
}

// max |a - b| over the larger of max |b| and `scale`: a gradient that is a cancelling sum (a
// Hyper-Connections scalar's) keeps the rounding error of its terms, which are of the size of
// the model's gradients, not of the sum; `scale` is then the model's largest gradient entry.
double error_on_scale(const torch::Tensor& a, const torch::Tensor& b, double scale) {
  const double diff = (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
  return diff / std::max(b.abs().max().item<double>(), scale);
}
double largest_gradient(DecoderLM& model) {
  double g = 0;
  for (const auto& p : model->parameters()) g = std::max(g, p.grad().abs().max().item<double>());
  return g;
}

TEST(Hsdp, SplitGroupsRanksByColorInKeyOrder) {
  // Colors rank % 2, keys 3 - rank: group c is ranks {c + 2, c}, in that order.
  on_ranks(4, [&](int rank, Communicator& comm) {
    const std::unique_ptr<Communicator> sub = comm.split(rank % 2, 3 - rank);
    EXPECT_EQ(sub->world(), 2);
    EXPECT_EQ(sub->rank(), rank < 2 ? 1 : 0);
    torch::Tensor t = torch::tensor({static_cast<double>(rank)}, torch::kDouble);
    sub->all_reduce(t, ReduceOp::Sum);
    EXPECT_EQ(t.item<double>(), rank % 2 == 0 ? 0 + 2 : 1 + 3);
    torch::Tensor g = torch::empty({2}, torch::kDouble);
    sub->all_gather(g, torch::tensor({static_cast<double>(rank)}, torch::kDouble));
    EXPECT_EQ(g[0].item<double>(), rank % 2 + 2);
    EXPECT_EQ(g[1].item<double>(), rank % 2);
    // The world is still whole beside its parts.
    torch::Tensor w = torch::tensor({1.0}, torch::kDouble);
    comm.all_reduce(w, ReduceOp::Sum);
    EXPECT_EQ(w.item<double>(), 4.0);
  });
}

// W ranks in shard groups of S, each with its 2 rows of the batch: the joined shard gradients
// of the first replica group equal the plain model's gradient of the whole batch (fp32 sums in
// another order: 1e-5, as test_fsdp.cpp, on the scale of error_on_scale), and every replica
// holds bitwise the same shards.
void expect_hybrid_gradients(Scheme scheme, int world, int shard_size, bool tied) {
  SCOPED_TRACE(std::string(enum_name(scheme)) + " W=" + std::to_string(world) +
               " S=" + std::to_string(shard_size));
  const ModelConfig cfg = config(scheme, tied);
  torch::manual_seed(3);
  const torch::Tensor tokens = torch::randint(cfg.vocab_size, {2 * world, 6}, torch::kLong);
  const torch::Tensor targets = torch::randint(cfg.vocab_size, {2 * world, 6}, torch::kLong);
  DecoderLM ref = build(cfg);
  ref->loss(tokens, targets).loss.backward();

  std::mutex mu;
  std::map<int, Pieces> by_replica;
  std::vector<int> shard_worlds(world);
  on_ranks(world, [&](int rank, Communicator& comm) {
    DecoderLM model = build(cfg);
    FsdpOptions o;
    o.shard_size = shard_size;
    Fsdp fsdp(model, comm, o, weight_decay_names(*model, OptimizerConfig{}));
    fsdp.zero_grad();
    model->loss(tokens.narrow(0, 2 * rank, 2), targets.narrow(0, 2 * rank, 2)).loss.backward();
    fsdp.finish_backward();
    std::lock_guard<std::mutex> lock(mu);
    shard_worlds[rank] = fsdp.shard_world();
    EXPECT_EQ(fsdp.replica(), rank / shard_size);
    EXPECT_EQ(fsdp.shard_rank(), rank % shard_size);
    for (const ShardPiece& p : fsdp.pieces())
      by_replica[fsdp.replica()][p.name].emplace_back(p.start, p.param.grad().clone());
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(shard_worlds[r], shard_size);
  ASSERT_EQ(static_cast<int>(by_replica.size()), world / shard_size);
  const auto first = join(by_replica.at(0));
  const double scale = largest_gradient(ref);
  for (const auto& p : ref->named_parameters()) {
    const torch::Tensor g = p.value().grad();
    ASSERT_EQ(first.at(p.key()).numel(), g.numel()) << p.key();
    EXPECT_LE(error_on_scale(first.at(p.key()).view(g.sizes()), g, scale), 1e-5) << p.key();
  }
  for (const auto& [replica, pieces] : by_replica)
    for (const auto& [name, g] : join(pieces))
      EXPECT_TRUE(torch::equal(g, first.at(name))) << name << " replica " << replica;
}

TEST(Hsdp, GradientsOfShardGroupsTimesReplicasEqualTheWholeBatchGradient) {
  expect_hybrid_gradients(Scheme::PreNorm, 4, 2, false);       // 2 x 2
  expect_hybrid_gradients(Scheme::SiameseHybrid, 6, 3, true);  // 2 replicas of 3 (uneven)
  expect_hybrid_gradients(Scheme::Hyper, 4, 1, false);         // replicated: all-reduce only
  expect_hybrid_gradients(Scheme::ResiDual, 3, 3, false);      // S = W: plain FSDP
}

TEST(Hsdp, ShardSizeMustDivideTheWorld) {
  on_ranks(4, [&](int, Communicator& comm) {
    FsdpOptions o;
    o.shard_size = 3;
    EXPECT_THROW(Fsdp(build(config(Scheme::PreNorm)), comm, o, {}), c10::Error);
  });
}

TEST(Hsdp, TrainingStepsWithClippingMatchOneProcess) {
  // Three AdamW steps with clipping (the norm summed over one shard group, not the replicas):
  // 2 x 2 ranks end with one process's parameters (1e-5, as test_fsdp.cpp).
  const ModelConfig cfg = config(Scheme::SiameseHybrid);
  OptimizerConfig oc;
  oc.lr = 1e-2;
  oc.grad_clip = 0.5;
  torch::manual_seed(5);
  const torch::Tensor tokens = torch::randint(cfg.vocab_size, {8, 6}, torch::kLong);
  DecoderLM ref = build(cfg);
  {
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (const auto& p : ref->named_parameters()) named.emplace_back(p.key(), p.value());
    AdamW opt(named, oc);
    for (int s = 0; s < 3; ++s) {
      ref->zero_grad();
      ref->loss(tokens, tokens.roll(1, 1)).loss.backward();
      clip_grad_norm(ref->parameters(), oc.grad_clip);
      opt.step(oc.lr);
    }
  }
  std::mutex mu;
  std::map<int, Pieces> by_replica;
  std::vector<double> norms(4);
  on_ranks(4, [&](int rank, Communicator& comm) {
    DecoderLM model = build(cfg);
    FsdpOptions o;
    o.shard_size = 2;
    Fsdp fsdp(model, comm, o, weight_decay_names(*model, oc));
    std::vector<OptParam> ps;
    for (const ShardPiece& p : fsdp.pieces()) ps.push_back({p.name, p.param, p.decay});
    AdamW opt(ps, oc);
    for (int s = 0; s < 3; ++s) {
      fsdp.zero_grad();
      model->loss(tokens.narrow(0, 2 * rank, 2), tokens.roll(1, 1).narrow(0, 2 * rank, 2))
          .loss.backward();
      fsdp.finish_backward();
      norms[rank] = fsdp.clip_grad_norm(oc.grad_clip);
      opt.step(oc.lr);
    }
    std::lock_guard<std::mutex> lock(mu);
    for (const ShardPiece& p : fsdp.pieces())
      by_replica[fsdp.replica()][p.name].emplace_back(p.start, p.param.detach().clone());
  });
  for (int r = 1; r < 4; ++r) EXPECT_EQ(norms[r], norms[0]);
  const auto first = join(by_replica.at(0)), second = join(by_replica.at(1));
  for (const auto& p : ref->named_parameters()) {
    EXPECT_TRUE(test::close(first.at(p.key()).view(p.value().sizes()), p.value(), 1e-5)) << p.key();
    EXPECT_TRUE(torch::equal(first.at(p.key()), second.at(p.key()))) << p.key();
  }
}

// The loss and gradients of W = 2 ranks with bf16 gathers under a policy, against the plain
// model whose parameters outside `kept` are rounded to bf16 (what the gathers give).
struct PolicyResult {
  double loss_error = 0;  // relative, of the rank-averaged loss
  double grad_error = 0;  // the largest relative error of a parameter's gradient
};
PolicyResult policy_against_rounded_reference(Scheme scheme, const std::string& keep,
                                              const std::string& reference_keep) {
  const ModelConfig cfg = config(scheme);
  torch::manual_seed(3);
  const torch::Tensor tokens = torch::randint(cfg.vocab_size, {4, 6}, torch::kLong);
  DecoderLM ref = build(cfg);
  {
    torch::NoGradGuard no_grad;
    const std::set<std::string> kept = parameters_kept_fp32(*ref, reference_keep);
    for (auto& p : ref->named_parameters())
      if (!kept.count(p.key())) p.value().copy_(p.value().to(torch::kBFloat16).to(torch::kFloat));
  }
  const LossOutput out = ref->loss(tokens, tokens.roll(1, 1));
  out.loss.backward();
  const double ref_loss = out.loss.item<double>();
  std::mutex mu;
  Pieces pieces;
  double loss = 0;
  on_ranks(2, [&](int rank, Communicator& comm) {
    DecoderLM model = build(cfg);
    FsdpOptions o;
    o.param_dtype = torch::kBFloat16;
    o.keep_fp32 = parameters_kept_fp32(*model, keep);
    Fsdp fsdp(model, comm, o, {});
    fsdp.zero_grad();
    const LossOutput l =
        model->loss(tokens.narrow(0, 2 * rank, 2), tokens.roll(1, 1).narrow(0, 2 * rank, 2));
    l.loss.backward();
    fsdp.finish_backward();
    const double mean = comm.sum(l.loss.item<double>()) / 2;
    std::lock_guard<std::mutex> lock(mu);
    loss = mean;
    for (const ShardPiece& p : fsdp.pieces())
      pieces[p.name].emplace_back(p.start, p.param.grad().clone());
  });
  PolicyResult r;
  r.loss_error = std::abs(loss - ref_loss) / std::abs(ref_loss);
  const auto grads = join(pieces);
  const double scale = largest_gradient(ref);
  for (const auto& p : ref->named_parameters())
    r.grad_error = std::max(r.grad_error, error_on_scale(grads.at(p.key()).view(p.value().sizes()),
                                                         p.value().grad(), scale));
  return r;
}

TEST(Hsdp, KeptParametersAreGatheredInFp32) {
  // With the default policy the gathers round exactly the matmul weights: the gradients are
  // the rounded reference's to fp32 summation order (1e-5 on the scale of error_on_scale).
  // Rounding everything (keep none) misses that reference by the bf16 rounding (up to 2^-9
  // relative) of the moved gains, scheme parameters and embedding, ten times that bound at
  // least: the check can fail.
  for (const Scheme scheme : {Scheme::SiameseHybrid, Scheme::Hyper, Scheme::DeepNorm}) {
    SCOPED_TRACE(std::string(enum_name(scheme)));
    const std::string all = "norms,scheme,embeddings";
    const PolicyResult kept = policy_against_rounded_reference(scheme, all, all);
    EXPECT_LE(kept.loss_error, 1e-6);
    EXPECT_LE(kept.grad_error, 1e-5);
    const PolicyResult rounded = policy_against_rounded_reference(scheme, "none", all);
    EXPECT_GT(rounded.grad_error, 1e-4);
    // Only norms kept: the embedding (and the scheme's own parameters) are rounded.
    const PolicyResult norms = policy_against_rounded_reference(scheme, "norms", "norms");
    EXPECT_LE(norms.grad_error, 1e-5);
  }
}

TEST(Hsdp, GathersRoundTheMatmulWeightsAndNothingElse) {
  // What the gathered module holds, element for element (a copy and a rounding, no arithmetic):
  // under the default policy each matmul weight is its bf16 rounding, which bf16 autocast's
  // cast leaves as it is (round to nearest even is idempotent), and every other parameter is
  // the fp32 value one process holds; without the policy the moved gains differ.
  for (const Scheme scheme : {Scheme::SiameseHybrid, Scheme::Hyper}) {
    SCOPED_TRACE(std::string(enum_name(scheme)));
    const ModelConfig cfg = config(scheme, /*tied=*/scheme == Scheme::SiameseHybrid);
    DecoderLM one = build(cfg);
    const auto roles = parameter_roles(*one);
    torch::manual_seed(3);
    const torch::Tensor tokens = torch::randint(cfg.vocab_size, {4, 6}, torch::kLong);
    for (const std::string keep : {"norms,scheme,embeddings", "none"}) {
      std::mutex mu;
      int64_t exact = 0, rounded = 0, differ = 0;
      on_ranks(2, [&](int rank, Communicator& comm) {
        DecoderLM model = build(cfg);
        FsdpOptions o;
        o.param_dtype = torch::kBFloat16;
        o.reshard_after_forward = false;  // every unit stays gathered until its backward
        o.keep_fp32 = parameters_kept_fp32(*model, keep);
        Fsdp fsdp(model, comm, o, {});
        fsdp.zero_grad();
        const LossOutput l =
            model->loss(tokens.narrow(0, 2 * rank, 2), tokens.roll(1, 1).narrow(0, 2 * rank, 2));
        {
          std::lock_guard<std::mutex> lock(mu);
          for (const auto& p : model->named_parameters()) {
            const torch::Tensor want = one->named_parameters()[p.key()];
            const torch::Tensor cast = want.to(torch::kBFloat16).to(torch::kFloat);
            if (roles.at(p.key()) == ParamRole::Matmul || keep == "none") {
              EXPECT_TRUE(torch::equal(p.value(), cast)) << p.key();
              EXPECT_TRUE(torch::equal(cast.to(torch::kBFloat16).to(torch::kFloat), cast));
              ++rounded;
              if (!torch::equal(cast, want)) ++differ;
            } else {
              EXPECT_TRUE(torch::equal(p.value(), want)) << p.key();
              ++exact;
            }
          }
        }
        l.loss.backward();
        fsdp.finish_backward();
      });
      if (keep == "none") {
        EXPECT_EQ(exact, 0);
        // The moved parameters (build()) are off the bf16 grid: rounding changes them.
        EXPECT_GT(differ, 0);
      } else {
        EXPECT_GT(exact, 0);
      }
    }
  }
}

}  // namespace
}  // namespace normlab
