// FSDP (fsdp.h), the communicator's launcher parsing (communicator.h) and sharded checkpoints
// (checkpoint.h), in one process: ranks are threads joined by an in-memory communicator, so
// the sharding logic is checked here quickly; tests/distributed/fsdp.sh runs the real thing
// over MPI.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "normlab/distributed/communicator.h"
#include "normlab/distributed/fsdp.h"
#include "normlab/nn/model.h"
#include "normlab/train/checkpoint.h"
#include "normlab/train/optimizer.h"
#include "normlab/util/error.h"
#include "normlab/util/file_io.h"
#include "support.h"
#include "unit/distributed/thread_comm.h"

namespace normlab {
namespace {

// Rank threads build their models one at a time: the seed is the process's generator.
DecoderLM build(const ModelConfig& cfg, uint64_t seed) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(seed);
  return DecoderLM(cfg);
}

ModelConfig model_config(Scheme scheme, bool tied) {
  ModelConfig c = test::tiny_config(scheme);
  c.tie_embeddings = tied;
  return c;
}

// The plain model's gradients of one loss on `tokens` (ranks' slices together).
// bf16_weights: the plain model's parameters rounded to bfloat16 first (what bf16 gathers give).
std::map<std::string, torch::Tensor> reference_grads(const ModelConfig& cfg,
                                                     const torch::Tensor& tokens,
                                                     const torch::Tensor& targets, double* loss,
                                                     bool bf16_weights = false) {
  torch::manual_seed(7);
  DecoderLM model(cfg);
  if (bf16_weights) {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.copy_(p.to(torch::kBFloat16).to(torch::kFloat));
  }
  const LossOutput out = model->loss(tokens, targets);
  out.loss.backward();
  *loss = out.loss.item<double>();
  std::map<std::string, torch::Tensor> grads;
  for (const auto& p : model->named_parameters()) grads[p.key()] = p.value().grad().clone();
  return grads;
}

// W ranks each compute the loss on their slice of the batch under FSDP; the joined shard
// gradients must be the plain model's gradient of the whole batch.
// Gathers in `gather` dtype: the reference model's weights are rounded the same way. Reductions
// in bf16: the sums are bf16 numbers (checked exactly for W = 2, where sum / 2 stays one).
void expect_sharded_gradients_of(const ModelConfig& cfg, int world, bool reshard,
                                 bool checkpoint = false, torch::ScalarType gather = torch::kFloat,
                                 torch::ScalarType reduce = torch::kFloat) {
  SCOPED_TRACE(std::string(enum_name(cfg.scheme)) + " W=" + std::to_string(world) +
               (cfg.tie_embeddings ? " tied" : "") + (reshard ? "" : " no-reshard") +
               (checkpoint ? " checkpointed" : "") +
               (gather == torch::kBFloat16 ? " bf16 gathers" : "") +
               (reduce == torch::kBFloat16 ? " bf16 sums" : ""));
  torch::manual_seed(3);
  const int64_t B = 2 * world, T = 6;
  const torch::Tensor tokens = torch::randint(cfg.vocab_size, {B, T}, torch::kLong);
  const torch::Tensor targets = torch::randint(cfg.vocab_size, {B, T}, torch::kLong);
  double ref_loss = 0.0;
  const auto ref = reference_grads(cfg, tokens, targets, &ref_loss, gather == torch::kBFloat16);

  std::mutex mu;
  std::map<std::string, std::vector<std::pair<int64_t, torch::Tensor>>>
      pieces;  // name -> (start, grad)
  std::vector<double> losses(world);
  std::vector<int64_t> resident(world);
  on_ranks(world, [&](int rank, Communicator& comm) {
    DecoderLM model = build(cfg, 7);
    FsdpOptions o;
    o.reshard_after_forward = reshard;
    o.activation_checkpointing_every =
        checkpoint ? 2 : 0;  // blocks 0, 2, ...: checkpointed and plain ones
    o.param_dtype = gather;
    o.reduce_dtype = reduce;
    Fsdp fsdp(model, comm, o, weight_decay_names(*model, OptimizerConfig{}));
    fsdp.zero_grad();
    const LossOutput out =
        model->loss(tokens.narrow(0, rank * 2, 2), targets.narrow(0, rank * 2, 2));
    out.loss.backward();
    fsdp.finish_backward();
    losses[rank] = comm.sum(out.loss.item<double>()) / world;
    resident[rank] = fsdp.resident_bytes();
    std::lock_guard<std::mutex> lock(mu);
    for (const ShardPiece& p : fsdp.pieces())
      pieces[p.name].emplace_back(p.start, p.param.grad().clone());
  });
  EXPECT_NEAR(losses[0], ref_loss, 1e-6 * std::abs(ref_loss));
  ASSERT_EQ(pieces.size(), ref.size());
  for (const auto& [name, g] : ref) {
    auto parts = pieces.at(name);
    std::sort(parts.begin(), parts.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<torch::Tensor> flat;
    for (const auto& [start, t] : parts) flat.push_back(t);
    const torch::Tensor joined = torch::cat(flat);
    ASSERT_EQ(joined.numel(), g.numel()) << name;
    if (reduce == torch::kFloat) {
      EXPECT_TRUE(test::close(joined.view(g.sizes()), g, 1e-5)) << name;
    } else {
      EXPECT_TRUE(test::close(joined.view(g.sizes()), g, 2e-2))
          << name;  // bf16 has 8 mantissa bits
      if (world == 2) {
        EXPECT_TRUE(torch::equal(joined, joined.to(torch::kBFloat16).to(torch::kFloat))) << name;
      }
    }
  }
  // Between steps a rank holds its shards (parameters and gradients) and nothing else.
  int64_t total = 0;
  for (const auto& [name, g] : ref) total += g.numel();
  for (int r = 0; r < world; ++r)
    EXPECT_LE(resident[r], (total / world + 2 * 3 * world) * 2 * 4) << "rank " << r;
}

void expect_sharded_gradients(Scheme scheme, int world, bool tied, bool reshard,
                              bool checkpoint = false, torch::ScalarType gather = torch::kFloat,
                              torch::ScalarType reduce = torch::kFloat) {
  expect_sharded_gradients_of(model_config(scheme, tied), world, reshard, checkpoint, gather,
                              reduce);
}

// SiameseNorm x Hyper-Connections: X (B, T, C) beside Y's (B, T, n, C) hyper-streams.
ModelConfig siamese_hyper_config() {
  ModelConfig c = model_config(Scheme::SiameseHybrid, false);
  c.siamese.hyper.n = 2;
  return c;
}

TEST(Fsdp, ShardedGradientsEqualTheWholeBatchGradient) {
  expect_sharded_gradients(Scheme::PreNorm, 1, false, true);
  expect_sharded_gradients(Scheme::PreNorm, 2, false, true);
  expect_sharded_gradients(Scheme::SiameseHybrid, 3, false, true);  // uneven shards
  expect_sharded_gradients(Scheme::Siamese, 2, true,
                           false);  // tied head, gathered through backward
  expect_sharded_gradients(Scheme::ResiDual, 3, true, true);
  expect_sharded_gradients(Scheme::Hyper, 2, false, true);  // (B, T, n, C) state, scalars s
  expect_sharded_gradients_of(siamese_hyper_config(), 3, true);
}

TEST(Fsdp, GathersAndReducesInBfloat16) {
  // bf16 gathers: exactly the gradients of the model with bf16-rounded weights (fp32 sums).
  expect_sharded_gradients(Scheme::SiameseHybrid, 3, false, true, false, torch::kBFloat16,
                           torch::kFloat);
  expect_sharded_gradients(Scheme::Hyper, 2, false, true, false, torch::kBFloat16, torch::kFloat);
  // bf16 sums: within bf16 precision of them, and bf16 numbers.
  expect_sharded_gradients(Scheme::PreNorm, 2, true, true, false, torch::kBFloat16,
                           torch::kBFloat16);
  expect_sharded_gradients(Scheme::Siamese, 2, false, false, false, torch::kFloat,
                           torch::kBFloat16);
  FsdpOptions wrong;
  wrong.param_dtype = torch::kHalf;
  SingleProcess one;
  EXPECT_THROW(Fsdp(build(model_config(Scheme::PreNorm, false), 7), one, wrong, {}), c10::Error);
}

TEST(Fsdp, ComposesWithActivationCheckpointing) {
  expect_sharded_gradients(Scheme::SiameseHybrid, 2, false, true, true);
  expect_sharded_gradients(Scheme::PreNorm, 3, true, false, true);
  expect_sharded_gradients(Scheme::Hyper, 3, false, true, true);
  expect_sharded_gradients_of(siamese_hyper_config(), 2, false, true);
}

// W ranks run `micro` micro-steps of 2 sequences each (loss / micro, as the trainer scales it)
// under `o`, syncing gradients every micro-step or only in the last (distributed.reduce
// per_step); returns the joined shard gradients and each rank's reduce-scatter count.
struct AccumulatedGradients {
  std::map<std::string, torch::Tensor> grads;
  std::vector<int> reduce_scatters;
};
AccumulatedGradients accumulated_gradients(const ModelConfig& cfg, int world, int micro,
                                           bool per_step, const FsdpOptions& o,
                                           const torch::Tensor& tokens,
                                           const torch::Tensor& targets) {
  AccumulatedGradients r;
  r.reduce_scatters.assign(world, 0);
  std::map<std::string, std::vector<std::pair<int64_t, torch::Tensor>>> pieces;
  std::mutex mu;
  on_ranks(world, [&](int rank, Communicator& comm) {
    DecoderLM model = build(cfg, 7);
    Fsdp fsdp(model, comm, o, weight_decay_names(*model, OptimizerConfig{}));
    fsdp.zero_grad();
    for (int m = 0; m < micro; ++m) {
      fsdp.set_gradient_sync(!per_step || m + 1 == micro);
      const int64_t row = (rank * micro + m) * 2;
      (model->loss(tokens.narrow(0, row, 2), targets.narrow(0, row, 2)).loss / micro).backward();
      fsdp.finish_backward();
    }
    std::lock_guard<std::mutex> lock(mu);
    r.reduce_scatters[rank] = dynamic_cast<ThreadComm&>(comm).reduce_scatters;
    for (const ShardPiece& p : fsdp.pieces())
      pieces[p.name].emplace_back(p.start, p.param.grad().clone());
  });
  for (auto& [name, parts] : pieces) {
    std::sort(parts.begin(), parts.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<torch::Tensor> flat;
    for (const auto& [start, t] : parts) flat.push_back(t);
    r.grads[name] = torch::cat(flat);
  }
  return r;
}

TEST(Fsdp, OverlappedReductionsEqualBlockingOnes) {
  // The test communicator runs an overlapped reduce-scatter only when it is waited for: a
  // gradient read or a buffer reused before that would differ here. Same sums in the same
  // order: bitwise equal.
  const ModelConfig cfg = model_config(Scheme::SiameseHybrid, true);
  torch::manual_seed(3);
  const torch::Tensor tokens = torch::randint(cfg.vocab_size, {12, 6}, torch::kLong);
  const torch::Tensor targets = torch::randint(cfg.vocab_size, {12, 6}, torch::kLong);
  FsdpOptions blocking;
  blocking.overlap_reduce = false;
  for (const int world : {2, 3}) {
    const auto a = accumulated_gradients(cfg, world, 2, false, FsdpOptions{}, tokens, targets);
    const auto b = accumulated_gradients(cfg, world, 2, false, blocking, tokens, targets);
    for (const auto& [name, g] : a.grads)
      EXPECT_TRUE(torch::equal(g, b.grads.at(name))) << name << " W=" << world;
  }
}

TEST(Fsdp, ReducingOncePerStepEqualsReducingEveryMicroStep) {
  // 2 ranks x 3 micro-steps: the gradient of the whole batch either way (fp32 sums in another
  // order: 1e-5 as above), with one reduce-scatter per unit and step instead of per micro-step.
  const ModelConfig cfg = model_config(Scheme::PreNorm, false);
  const int world = 2, micro = 3;
  torch::manual_seed(3);
  const torch::Tensor tokens = torch::randint(cfg.vocab_size, {world * micro * 2, 6}, torch::kLong);
  const torch::Tensor targets =
      torch::randint(cfg.vocab_size, {world * micro * 2, 6}, torch::kLong);
  double loss = 0.0;
  const auto ref = reference_grads(cfg, tokens, targets, &loss);
  const auto every =
      accumulated_gradients(cfg, world, micro, false, FsdpOptions{}, tokens, targets);
  const auto once = accumulated_gradients(cfg, world, micro, true, FsdpOptions{}, tokens, targets);
  const int units = static_cast<int>(cfg.n_layers) + 1;
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(every.reduce_scatters[r], micro * units);
    EXPECT_EQ(once.reduce_scatters[r], units);
  }
  for (const auto& [name, g] : ref) {
    EXPECT_TRUE(test::close(every.grads.at(name).view(g.sizes()), g, 1e-5)) << name;
    EXPECT_TRUE(test::close(once.grads.at(name).view(g.sizes()), g, 1e-5)) << name;
  }
}

TEST(Fsdp, TrainingStepsMatchOneProcess) {
  // Three AdamW steps with clipping: the parameters of W = 2 ranks equal one process's.
  const ModelConfig cfg = model_config(Scheme::SiameseHybrid, false);
  OptimizerConfig oc;
  oc.lr = 1e-2;
  oc.grad_clip = 0.5;
  torch::manual_seed(5);
  const torch::Tensor tokens = torch::randint(cfg.vocab_size, {4, 6}, torch::kLong);
  torch::manual_seed(7);
  DecoderLM ref(cfg);
  {
    std::vector<torch::Tensor> params = ref->parameters();
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (const auto& p : ref->named_parameters()) named.emplace_back(p.key(), p.value());
    AdamW opt(named, oc);
    for (int s = 0; s < 3; ++s) {
      ref->zero_grad();
      ref->loss(tokens, tokens.roll(1, 1)).loss.backward();
      clip_grad_norm(params, oc.grad_clip);
      opt.step(oc.lr);
    }
  }
  std::map<std::string, std::vector<std::pair<int64_t, torch::Tensor>>> pieces;
  std::mutex mu;
  on_ranks(2, [&](int rank, Communicator& comm) {
    DecoderLM model = build(cfg, 7);
    Fsdp fsdp(model, comm, FsdpOptions{}, weight_decay_names(*model, oc));
    std::vector<OptParam> ps;
    for (const ShardPiece& p : fsdp.pieces()) ps.push_back({p.name, p.param, p.decay});
    AdamW opt(ps, oc);
    for (int s = 0; s < 3; ++s) {
      fsdp.zero_grad();
      model->loss(tokens.narrow(0, 2 * rank, 2), tokens.roll(1, 1).narrow(0, 2 * rank, 2))
          .loss.backward();
      fsdp.finish_backward();
      fsdp.clip_grad_norm(oc.grad_clip);
      opt.step(oc.lr);
    }
    std::lock_guard<std::mutex> lock(mu);
    for (const ShardPiece& p : fsdp.pieces())
      pieces[p.name].emplace_back(p.start, p.param.detach().clone());
  });
  for (const auto& p : ref->named_parameters()) {
    auto parts = pieces.at(p.key());
    std::sort(parts.begin(), parts.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<torch::Tensor> flat;
    for (const auto& [start, t] : parts) flat.push_back(t);
    EXPECT_TRUE(test::close(torch::cat(flat).view(p.value().sizes()), p.value(), 1e-5)) << p.key();
  }
}

TEST(Fsdp, EvaluationWithoutGradientsLeavesNothingGathered) {
  const ModelConfig cfg = model_config(Scheme::PreNorm, false);
  torch::manual_seed(7);
  DecoderLM plain(cfg);
  torch::manual_seed(7);
  DecoderLM model(cfg);
  SingleProcess one;
  Fsdp fsdp(model, one, FsdpOptions{}, weight_decay_names(*model, OptimizerConfig{}));
  const int64_t at_rest = fsdp.resident_bytes();
  const torch::Tensor tokens = torch::randint(cfg.vocab_size, {2, 5}, torch::kLong);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(test::close(model->forward(tokens), plain->forward(tokens), 1e-6));
  EXPECT_EQ(fsdp.resident_bytes(), at_rest);
}

TEST(Fsdp, LoadsSlicesOfAWholeCheckpoint) {
  const ModelConfig cfg = model_config(Scheme::Siamese, false);
  torch::manual_seed(11);
  DecoderLM source(cfg);
  TensorDict full;
  for (const auto& p : source->named_parameters()) full[p.key()] = p.value().detach().clone();
  on_ranks(3, [&](int rank, Communicator& comm) {
    DecoderLM model = build(cfg, 7);  // other initial weights
    Fsdp fsdp(model, comm, FsdpOptions{}, weight_decay_names(*model, OptimizerConfig{}));
    fsdp.load_full(full, "test");
    for (const ShardPiece& p : fsdp.pieces())
      EXPECT_TRUE(
          torch::equal(p.param, full.at(p.name).reshape(-1).narrow(0, p.start, p.param.numel())))
          << rank;
    TensorDict bad = full;
    bad.erase("embed.weight");
    EXPECT_THROW(fsdp.load_full(bad, "test"), CheckpointError);
  });
}

TEST(ShardedCheckpoint, SavedByThreeRanksConsolidatesToTheWhole) {
  test::ScratchDir dir("sharded_ckpt");
  const ModelConfig cfg = model_config(Scheme::PreNorm, true);
  torch::manual_seed(7);
  DecoderLM whole(cfg);
  on_ranks(3, [&](int rank, Communicator& comm) {
    DecoderLM model = build(cfg, 7);
    Fsdp fsdp(model, comm, FsdpOptions{}, weight_decay_names(*model, OptimizerConfig{}));
    std::vector<OptParam> ps;
    for (const ShardPiece& p : fsdp.pieces()) ps.push_back({p.name, p.param, p.decay});
    AdamW opt(ps, OptimizerConfig{});
    Checkpoint c;
    c.model = fsdp.local_weights();
    c.optimizer = opt.state();
    c.optimizer["exp_avg.embed.weight"].fill_(static_cast<float>(rank));  // mark the pieces
    c.state.step = 4;
    c.config_yaml = "model: {}\n";
    c.world = 3;
    c.rank = rank;
    for (const ShardPiece& p : fsdp.pieces()) {
      c.starts[p.name] = p.start;
      c.shapes[p.name] = p.shape;
    }
    checkpoint_save_sharded(dir.path.string(), c, 2, [&] { comm.barrier(); });
  });
  const auto latest = checkpoint_latest(dir.path.string());
  ASSERT_TRUE(latest);
  EXPECT_EQ(checkpoint_world(*latest), 3);
  const Checkpoint c = checkpoint_consolidate(*latest);
  EXPECT_EQ(c.world, 1);
  EXPECT_EQ(c.state.step, 4);
  for (const auto& p : whole->named_parameters())
    EXPECT_TRUE(torch::equal(c.model.at(p.key()), p.value())) << p.key();
  // The embedding's first moment: rank 0's piece, then 1's, then 2's, in order.
  const torch::Tensor m = c.optimizer.at("exp_avg.embed.weight").reshape(-1);
  EXPECT_EQ(m.numel(), whole->embed->weight.numel());
  EXPECT_EQ(m[0].item<float>(), 0.0f);
  EXPECT_EQ(m[-1].item<float>(), 2.0f);
  EXPECT_TRUE(
      torch::equal(std::get<0>(torch::sort(m)), m));  // non-decreasing: pieces in rank order
  EXPECT_THROW(checkpoint_load(*latest, 3), CheckpointError);
  // state.json lists every rank's files with their checksums (the per-rank digest lists that
  // rank 0 gathered are gone); a flipped bit in rank 1's model is caught by verify and by rank
  // 1's load, while rank 0 still loads its own files.
  EXPECT_EQ(checkpoint_verify(*latest).size(), 7u);
  for (const auto& e : std::filesystem::directory_iterator(*latest))
    EXPECT_EQ(e.path().filename().string().rfind("digests", 0), std::string::npos) << e.path();
  {
    const std::string path = *latest + "/model.rank-00001-of-00003.safetensors";
    std::string bytes = read_file(path);
    bytes[bytes.size() - 2] ^= 0x20;
    write_file_atomic(path, [&](FileWriter& w) { w.write(bytes); });
  }
  EXPECT_THROW(checkpoint_verify(*latest), CheckpointError);
  EXPECT_THROW(checkpoint_load(*latest, 1), CheckpointError);
  EXPECT_EQ(checkpoint_load(*latest, 0).rank, 0);
  std::filesystem::remove(std::filesystem::path(*latest) / "model.rank-00001-of-00003.safetensors");
  EXPECT_ANY_THROW(checkpoint_consolidate(*latest));
}

TEST(DistEnv, ReadsTheLaunchersVariables) {
  EXPECT_EQ(dist_env_from({}).world, 1);
  EXPECT_EQ(dist_env_from({}).launcher, "none");
  const DistEnv t = dist_env_from({{"RANK", "3"},
                                   {"WORLD_SIZE", "8"},
                                   {"LOCAL_RANK", "1"},
                                   {"MASTER_ADDR", "node7"},
                                   {"MASTER_PORT", "29400"},
                                   {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  EXPECT_EQ(t.launcher, "torchrun");
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.world, 8);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.master_addr, "node7");
  EXPECT_EQ(t.master_port, 29400);
  EXPECT_TRUE(t.agent_store);
  const DistEnv m = dist_env_from({{"OMPI_COMM_WORLD_RANK", "1"},
                                   {"OMPI_COMM_WORLD_SIZE", "3"},
                                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  EXPECT_EQ(m.launcher, "mpi");
  EXPECT_EQ(m.rank, 1);
  EXPECT_EQ(m.world, 3);
  const DistEnv s =
      dist_env_from({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "1"}});
  EXPECT_EQ(s.launcher, "slurm");
  EXPECT_EQ(s.rank, 5);
  auto message = [](const std::map<std::string, std::string>& env) {
    try {
      dist_env_from(env);
    } catch (const DistributedError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK=x"), std::string::npos);
  EXPECT_NE(message({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("[0, 1]"), std::string::npos);
  EXPECT_NE(
      message({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}).find("MASTER_PORT"),
      std::string::npos);
}

TEST(DistEnv, CpuTrainingOverSeveralProcessesNeedsAnMpiLauncher) {
  DistEnv env;
  env.launcher = "torchrun";
  env.world = 2;
  try {
    make_communicator(env, CommOptions{}, torch::kCPU);
    FAIL() << "expected an error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("mpirun -n N normlab train"), std::string::npos)
        << e.what();
  }
  env.world = 1;
  EXPECT_EQ(make_communicator(env, CommOptions{}, torch::kCPU)->backend(), "single");
}

}  // namespace
}  // namespace normlab
