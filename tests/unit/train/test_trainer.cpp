// The trainer end to end on a tiny model: exact resume, divergence, skipping, run-folder and
// data errors, export round trip.
#include <gmock/gmock.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "normlab/config/config_io.h"
#include "normlab/nn/experts.h"
#include "normlab/nn/model.h"
#include "normlab/nn/weights.h"
#include "normlab/train/checkpoint.h"
#include "normlab/train/export.h"
#include "normlab/train/trainer.h"
#include "normlab/util/file_io.h"
#include "normlab/util/log.h"
#include "support.h"
#include "train_suite.h"

using namespace normlab;
namespace fs = std::filesystem;

namespace {

class TrainerTest : public test::TrainSuite<TrainerTest> {
 public:
  static constexpr test::ShardsSpec kShards{"trainer", 500, 31};

 protected:
  static RunConfig config(const std::vector<std::string>& extra = {}) {
    return run_config(
        {"model.scheme=siamese_hybrid", "data.tokenizer=" + test::test_tokenizer_path(),
         "train.steps=8", "scheduler.warmup_steps=2", "eval.every=4", "eval.batches=2",
         "checkpoint.every=4", "checkpoint.keep=5", "optimizer.lr=0.003"},
        extra);
  }
  static std::vector<double> losses(const std::string& run) {
    std::vector<double> out;
    std::istringstream in(read_file(run + "/metrics.jsonl"));
    for (std::string line; std::getline(in, line);) {
      const auto at = line.find("\"loss\":");
      out.push_back(std::stod(line.substr(at + 7)));
    }
    return out;
  }
};

TEST_F(TrainerTest, CompletesAndWritesItsOutputs) {
  test::ScratchDir run("run");
  const RunSummary s = train(config(), options(run.path));
  EXPECT_EQ(s.status, RunStatus::Completed);
  EXPECT_EQ(s.steps, 8);
  EXPECT_GT(s.final_val_loss, 0.0);
  EXPECT_NEAR(s.val_perplexity, std::exp(s.final_val_loss), 1e-9);
  EXPECT_EQ(s.tokens, 8u * 4 * 16);
  EXPECT_EQ(losses(run.path.string()).size(), 8u);
  const std::string summary = read_file(run / "summary.json");
  EXPECT_NE(summary.find("\"status\": \"completed\""), std::string::npos) << summary;
  // Throughput is total tokens over total time, and the attention kernel is named.
  const auto j = nlohmann::json::parse(summary);
  EXPECT_NEAR(j.at("tokens_per_s").get<double>(), static_cast<double>(s.tokens) / s.wall_seconds,
              1e-6 * j.at("tokens_per_s").get<double>());
  EXPECT_THAT(
      j.at("attention_backend").get<std::string>(),
      testing::AnyOf("normlab (products over causal blocks)", "flash", "math", "efficient"));
  EXPECT_FALSE(j.contains("mfu")) << "MFU is a CUDA figure";
  EXPECT_TRUE(fs::exists(run / "checkpoints/step-00000004/model.safetensors"));
  EXPECT_TRUE(fs::exists(run / "checkpoints/step-00000008/state.json"));
  EXPECT_EQ(config_to_yaml(config_load(run / "config.yaml")), config_to_yaml(config()));
}

// Stopped after 3 steps and resumed, the run ends with bitwise the same weights, optimizer
// state and losses as an uninterrupted one.
TEST_F(TrainerTest, ResumeIsBitwiseExact) {
  test::ScratchDir a("run"), b("run");
  train(config(), options(a.path));
  const RunSummary first = train(config(), options(b.path, false, /*stop_after=*/3));
  EXPECT_EQ(first.status, RunStatus::Interrupted);
  EXPECT_EQ(first.steps, 3);
  const RunSummary second = train(config(), options(b.path, /*resume=*/true));
  EXPECT_EQ(second.status, RunStatus::Completed);
  EXPECT_EQ(losses(a.path.string()), losses(b.path.string()));
  const Checkpoint ca = checkpoint_load(a / "checkpoints/step-00000008");
  const Checkpoint cb = checkpoint_load(b / "checkpoints/step-00000008");
  for (const auto& [name, t] : ca.model) EXPECT_TRUE(torch::equal(t, cb.model.at(name))) << name;
  for (const auto& [name, t] : ca.optimizer)
    EXPECT_TRUE(torch::equal(t, cb.optimizer.at(name))) << name;
  auto val_line = [](const std::string& summary) {
    return summary.substr(summary.find("\"final_val_loss\"")).substr(0, 40);
  };
  EXPECT_EQ(val_line(read_file(a / "summary.json")), val_line(read_file(b / "summary.json")));
}

// A dictionary in the layout before the MoE experts were stacked: every <p>.experts.up (E, ...)
// becomes <p>.experts.<e>.up.weight (and .down), any prefix kept (exp_avg.<name>, step.<name>,
// whose per-expert step counts are the stacked tensor's one count), for E experts.
TensorDict unstack_experts(const TensorDict& stacked, int64_t E) {
  TensorDict out;
  for (const auto& [name, t] : stacked) {
    const auto at = name.rfind(".experts.");
    const std::string which = at == std::string::npos ? "" : name.substr(at + 9);
    if (which != "up" && which != "down") {
      out.emplace(name, t);
      continue;
    }
    for (int64_t e = 0; e < E; ++e)
      out.emplace(name.substr(0, at) + ".experts." + std::to_string(e) + "." + which + ".weight",
                  t.dim() > 0 ? t[e].clone() : t.clone());
  }
  return out;
}

// A checkpoint written before the MoE experts were stacked (experts.<e>.up.weight, their AdamW
// moments and step counts likewise) loads into the stacked layout bitwise, gives the same
// logits, and resumes to bitwise the same run as an uninterrupted one.
TEST_F(TrainerTest, MoeCheckpointInThePerExpertLayoutLoadsAndResumesExactly) {
  const std::vector<std::string> moe = {"model.moe.n_experts=4", "model.moe.top_k=2",
                                        "model.moe.d_expert=16"};
  test::ScratchDir a("run"), b("run");
  train(config(moe), options(a.path));
  train(config(moe), options(b.path, false, /*stop_after=*/3));
  const std::string dir = *checkpoint_latest(b.path);
  const Checkpoint now = checkpoint_load(dir);
  ASSERT_TRUE(now.model.count("blocks.1.mlp.experts.up"));
  Checkpoint old = now;
  old.model = unstack_experts(now.model, 4);
  old.optimizer = unstack_experts(now.optimizer, 4);
  ASSERT_TRUE(old.model.count("blocks.1.mlp.experts.3.down.weight"));
  ASSERT_TRUE(old.optimizer.count("exp_avg_sq.blocks.0.mlp.experts.2.up.weight"));
  ASSERT_FALSE(old.model.count("blocks.1.mlp.experts.up"));
  checkpoint_save(b.path, old, 5);  // replaces the folder
  ASSERT_TRUE(has_legacy_experts(safetensors_load(dir + "/model.safetensors").tensors));

  const Checkpoint back = checkpoint_load(dir);
  ASSERT_EQ(back.model.size(), now.model.size());
  ASSERT_EQ(back.optimizer.size(), now.optimizer.size());
  for (const auto& [name, t] : now.model) EXPECT_TRUE(torch::equal(t, back.model.at(name))) << name;
  for (const auto& [name, t] : now.optimizer)
    EXPECT_TRUE(torch::equal(t, back.optimizer.at(name))) << name;
  DecoderLM from_new(config(moe).model), from_old(config(moe).model);
  load_weights(*from_new, now.model, "stacked");
  load_weights(*from_old, old.model, "per expert");
  const torch::Tensor tokens = torch::randint(400, {2, 16}, torch::kLong);
  EXPECT_TRUE(torch::equal(from_new->forward(tokens), from_old->forward(tokens)));

  train(config(moe), options(b.path, /*resume=*/true));
  EXPECT_EQ(losses(a.path.string()), losses(b.path.string()));
  // The routing numbers of every step too: the resumed run's router log starts empty at step 4,
  // so these hold only if the uninterrupted run's log was emptied every step.
  const auto routing = [](const std::string& run) {
    std::vector<nlohmann::json> out;
    std::istringstream in(read_file(run + "/metrics.jsonl"));
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      out.push_back({j.at("moe_lb_loss"), j.at("moe_router_z_loss"), j.at("moe_router_entropy"),
                     j.at("moe_max_expert_share"), j.at("moe_idle_experts")});
    }
    return out;
  };
  EXPECT_EQ(routing(a.path.string()), routing(b.path.string()));
  const Checkpoint ca = checkpoint_load(a / "checkpoints/step-00000008");
  const Checkpoint cb = checkpoint_load(b / "checkpoints/step-00000008");
  for (const auto& [name, t] : ca.model) EXPECT_TRUE(torch::equal(t, cb.model.at(name))) << name;
  for (const auto& [name, t] : ca.optimizer)
    EXPECT_TRUE(torch::equal(t, cb.optimizer.at(name))) << name;
}

// Activation checkpointing (all blocks, every second one) and the chunked loss change memory,
// not the run: the same losses up to summation order.
TEST_F(TrainerTest, ActivationCheckpointingAndChunkedLossKeepTheLosses) {
  test::ScratchDir plain("run");
  train(config({"checkpoint.every=0", "eval.every=0"}), options(plain.path));
  const std::vector<double> ref = losses(plain.path.string());
  for (const auto& extra :
       std::vector<std::vector<std::string>>{{"train.activation_checkpointing=block"},
                                             {"train.activation_checkpointing=selective"},
                                             {"train.loss_chunk_rows=5"}}) {
    SCOPED_TRACE(extra[0]);
    test::ScratchDir run("run");
    std::vector<std::string> e = extra;
    e.insert(e.end(), {"checkpoint.every=0", "eval.every=0"});
    EXPECT_EQ(train(config(e), options(run.path)).status, RunStatus::Completed);
    const std::vector<double> got = losses(run.path.string());
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_NEAR(got[i], ref[i], 1e-5 * ref[i]) << "step " << i + 1;
  }
}

TEST_F(TrainerTest, AHugeLearningRateEndsAsDiverged) {
  test::ScratchDir run("run");
  const RunSummary s =
      train(config({"optimizer.lr=1e12", "optimizer.grad_clip=0", "scheduler.warmup_steps=0"}),
            options(run.path));
  EXPECT_EQ(s.status, RunStatus::Diverged);
  EXPECT_EQ(exit_code(s.status), 3);
  EXPECT_GT(s.diverged_at, 0);
  EXPECT_LE(s.diverged_at, 8);
  const std::string summary = read_file(run / "summary.json");
  EXPECT_NE(summary.find("\"status\": \"diverged\""), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"diverged_at\": " + std::to_string(s.diverged_at)), std::string::npos)
      << summary;
}

TEST_F(TrainerTest, NonFiniteStepsCanBeSkippedInstead) {
  test::ScratchDir run("run");
  const RunSummary s = train(config({"optimizer.lr=1e12", "optimizer.grad_clip=0",
                                     "scheduler.warmup_steps=0", "train.skip_nonfinite=true"}),
                             options(run.path));
  EXPECT_EQ(s.status, RunStatus::Completed);
  EXPECT_GT(s.skipped_steps, 0);
}

TEST_F(TrainerTest, RefusesUnsafeRunFoldersAndMismatchedData) {
  test::ScratchDir run("run");
  train(config({"train.steps=2"}), options(run.path));
  auto error = [](const RunConfig& c, const TrainOptions& o) -> std::string {
    try {
      train(c, o);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error(config({"train.steps=2"}), options(run.path)).find("already holds checkpoints"),
            std::string::npos);
  EXPECT_NE(error(config({"train.steps=4", "model.d_ff=96"}), options(run.path, true))
                .find("changed architecture"),
            std::string::npos);
  EXPECT_NE(error(config({"model.vocab_size=300"}), options(run / "x"))
                .find("more than model.vocab_size = 300"),
            std::string::npos);
  EXPECT_NE(error(config({"data.train=" + *dir_ / "nowhere"}), options(run / "y"))
                .find("index.json: not found"),
            std::string::npos);
  EXPECT_NE(error(config({"data.train="}), options(run / "z")).find("data.train is empty"),
            std::string::npos);
  {  // another process training in the folder (its lock held) is refused, not joined
    const FileLock other(run / ".lock", "test");
    EXPECT_NE(error(config({"train.steps=3"}), options(run.path, true))
                  .find(".lock: in use by another process"),
              std::string::npos);
    EXPECT_TRUE(FileLock::busy(run / ".lock"));
  }
  EXPECT_FALSE(FileLock::busy(run / ".lock"));
  // Resuming with more steps (not an architecture change) is fine.
  EXPECT_EQ(train(config({"train.steps=3"}), options(run.path, true)).steps, 3);
}

// --init-from starts a run from given weights (here a checkpoint's step folder), and
// eval.at_start evaluates them before the first step: the same validation loss as the run that
// wrote them measured at that step. Weights of another model are refused, naming the file.
TEST_F(TrainerTest, StartsFromGivenWeightsAndEvaluatesThemFirst) {
  test::ScratchDir a("run"), b("run"), c("run");
  train(config(), options(a.path));
  TrainOptions o = options(b.path);
  o.init_from = a / "checkpoints/step-00000008";
  train(config({"eval.at_start=true", "train.steps=1"}), o);
  std::istringstream in(read_file(b / "metrics.jsonl"));
  std::string first;
  std::getline(in, first);
  const auto start = nlohmann::json::parse(first);
  EXPECT_EQ(start.at("step"), 0);
  EXPECT_FALSE(start.contains("loss")) << "no step was taken yet";
  const auto summary_a = nlohmann::json::parse(read_file(a / "summary.json"));
  EXPECT_EQ(start.at("val_loss").get<double>(), summary_a.at("final_val_loss").get<double>());

  o = options(c.path);
  o.init_from = a / "checkpoints/step-00000008/model.safetensors";
  try {
    train(config({"model.d_model=48"}), o);
    ADD_FAILURE() << "weights of another shape were accepted";
  } catch (const CheckpointError& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr(o.init_from + ": weights do not match the model"));
  }
}

// train.precision = fp64: weights and optimizer state in float64, and a resumed run is still
// bitwise the uninterrupted one.
TEST_F(TrainerTest, Float64RunsAndResumesInFloat64) {
  test::ScratchDir a("run"), b("run");
  const RunConfig cfg = config({"train.precision=fp64", "eval.every=0"});
  train(cfg, options(a.path));
  train(cfg, options(b.path, false, /*stop_after=*/3));
  train(cfg, options(b.path, /*resume=*/true));
  const Checkpoint ca = checkpoint_load(a / "checkpoints/step-00000008");
  const Checkpoint cb = checkpoint_load(b / "checkpoints/step-00000008");
  for (const auto& [name, t] : ca.model) {
    EXPECT_EQ(t.scalar_type(), torch::kDouble) << name;
    EXPECT_TRUE(torch::equal(t, cb.model.at(name))) << name;
  }
  EXPECT_EQ(ca.optimizer.at("exp_avg.embed.weight").scalar_type(), torch::kDouble);
  EXPECT_EQ(losses(a.path.string()), losses(b.path.string()));
}

// train.precision = bf16 on the CPU: CPU autocast with fp32 weights and optimizer state, said in
// the log; resumable bitwise like fp32. Its losses differ from the fp32 run's (the matmuls did
// run in bf16) by less, on average over the steps, than two fp32 runs with different seeds
// differ from each other: bf16 moves the curve less than the seed does.
TEST_F(TrainerTest, Bf16TrainsOnTheCpuWithinTheSeedSpreadOfFp32) {
  test::ScratchDir a("run"), b("run"), f("run"), g("run");
  const RunConfig cfg = config({"train.precision=bf16", "train.device=cpu", "eval.every=0"});
  {
    Logger log("bf16", LogLevel::Info, a / "log.txt");
    TrainOptions o = options(a.path);
    o.logger = &log;
    EXPECT_EQ(train(cfg, o).status, RunStatus::Completed);
  }
  EXPECT_THAT(read_file(a / "log.txt"),
              testing::HasSubstr("precision: bf16 autocast on the CPU with fp32 weights"));
  train(cfg, options(b.path, false, /*stop_after=*/3));
  train(cfg, options(b.path, /*resume=*/true));
  const Checkpoint ca = checkpoint_load(a / "checkpoints/step-00000008");
  const Checkpoint cb = checkpoint_load(b / "checkpoints/step-00000008");
  for (const auto& [name, t] : ca.model) {
    EXPECT_EQ(t.scalar_type(), torch::kFloat) << name;
    EXPECT_TRUE(torch::equal(t, cb.model.at(name))) << name;
  }
  EXPECT_EQ(ca.optimizer.at("exp_avg.embed.weight").scalar_type(), torch::kFloat);
  const std::vector<double> bf16 = losses(a.path.string());
  EXPECT_EQ(bf16, losses(b.path.string()));

  train(config({"train.precision=fp32", "eval.every=0"}), options(f.path));
  train(config({"train.precision=fp32", "eval.every=0", "train.seed=7"}), options(g.path));
  const std::vector<double> fp32 = losses(f.path.string()), other = losses(g.path.string());
  ASSERT_EQ(bf16.size(), fp32.size());
  ASSERT_EQ(other.size(), fp32.size());
  double precision_gap = 0, seed_gap = 0;
  for (size_t i = 0; i < fp32.size(); ++i) {
    ASSERT_TRUE(std::isfinite(bf16[i])) << "step " << i + 1;
    precision_gap += std::abs(bf16[i] - fp32[i]) / fp32.size();
    seed_gap += std::abs(other[i] - fp32[i]) / fp32.size();
  }
  EXPECT_GT(precision_gap, 0.0);
  EXPECT_LT(precision_gap, seed_gap);
}

// A resumed run keeps the precision its first segment trained in, whatever train.precision =
// auto would choose on the machine that resumes it: a run started in bf16 and resumed under auto
// ends bitwise as the uninterrupted bf16 run, its checkpoints and summary.json say bf16, and the
// log says the precision was kept. (On a CPU where auto picks fp32 a switch would change every
// weight; where it picks bf16 the log and the record still show that it was kept, not chosen.)
TEST_F(TrainerTest, AResumedRunKeepsThePrecisionOfItsFirstSegment) {
  test::ScratchDir a("run"), b("run");
  const std::vector<std::string> common = {"train.device=cpu", "eval.every=0"};
  std::vector<std::string> bf16 = common, automatic = common;
  bf16.push_back("train.precision=bf16");
  automatic.push_back("train.precision=auto");
  train(config(bf16), options(a.path));
  train(config(bf16), options(b.path, false, /*stop_after=*/3));
  EXPECT_EQ(checkpoint_precision(*checkpoint_latest(b.path.string())), "bf16");  // the stop's
  {
    Logger log("resume", LogLevel::Info, b / "resume.log");
    TrainOptions o = options(b.path, /*resume=*/true);
    o.logger = &log;
    EXPECT_EQ(train(config(automatic), o).status, RunStatus::Completed);
  }
  EXPECT_THAT(read_file(b / "resume.log"),
              testing::HasSubstr("train.precision = auto, kept from the run's first segment"));
  EXPECT_EQ(checkpoint_precision(b / "checkpoints/step-00000008"), "bf16");
  const auto j = nlohmann::json::parse(read_file(b / "summary.json"));
  EXPECT_EQ(j.at("precision").get<std::string>(), "bf16");
  const Checkpoint ca = checkpoint_load(a / "checkpoints/step-00000008");
  const Checkpoint cb = checkpoint_load(b / "checkpoints/step-00000008");
  EXPECT_EQ(cb.state.precision, "bf16");
  for (const auto& [name, t] : ca.model) EXPECT_TRUE(torch::equal(t, cb.model.at(name))) << name;
}

TEST_F(TrainerTest, ExportRoundTripGivesIdenticalLogits) {
  test::ScratchDir run("run");
  train(config({"train.steps=2"}), options(run.path));
  export_model(run.path.string(), run / "export");
  EXPECT_TRUE(fs::exists(run / "export/tokenizer.model"));
  DecoderLM imported = import_model(run / "export");
  DecoderLM trained(config().model);
  load_weights(*trained, checkpoint_load(run / "checkpoints/step-00000002").model, "checkpoint");
  const torch::Tensor tokens = torch::randint(400, {2, 10}, torch::kLong);
  EXPECT_TRUE(torch::equal(imported->forward(tokens), trained->forward(tokens)));
  EXPECT_EQ(export_config(run / "export").scheme, Scheme::SiameseHybrid);
}

// Diagnostics during training: one line every N steps and at the end, none when off, and the
// training itself untouched (bitwise the same losses and weights); a resume drops the lines
// past its checkpoint.
TEST_F(TrainerTest, DiagnosticsObserveWithoutChangingTheRun) {
  test::ScratchDir off("run"), on("run"), resumed("run");
  train(config(), options(off.path));
  EXPECT_FALSE(fs::exists(off / "diagnostics.jsonl"));
  const std::vector<std::string> diag = {"diagnostics.every=3", "diagnostics.pruning=true",
                                         "diagnostics.batch=2"};
  train(config(diag), options(on.path));
  EXPECT_EQ(losses(off.path.string()), losses(on.path.string()));
  const Checkpoint a = checkpoint_load(off / "checkpoints/step-00000008");
  const Checkpoint b = checkpoint_load(on / "checkpoints/step-00000008");
  for (const auto& [name, t] : a.model) EXPECT_TRUE(torch::equal(t, b.model.at(name))) << name;
  auto steps_of = [](const std::string& path) {
    std::vector<int64_t> steps;
    std::istringstream in(read_file(path));
    for (std::string line; std::getline(in, line);) {
      EXPECT_NE(line.find("\"pruning\":["), std::string::npos);
      steps.push_back(std::stoll(line.substr(line.find("\"step\":") + 7)));
    }
    return steps;
  };
  EXPECT_EQ(steps_of(on / "diagnostics.jsonl"), (std::vector<int64_t>{3, 6, 8}));

  train(config(diag),
        options(resumed.path, false, /*stop_after=*/7));  // lines 3 and 6, checkpoint at 7
  {  // a line past the checkpoint, as if the process died after writing it
    std::ofstream(resumed / "diagnostics.jsonl", std::ios::app) << R"({"step":99,"pruning":[]})"
                                                                << "\n";
  }
  train(config(diag), options(resumed.path, /*resume=*/true));
  EXPECT_EQ(steps_of(resumed / "diagnostics.jsonl"), (std::vector<int64_t>{3, 6, 8}));
  EXPECT_EQ(read_file(on / "diagnostics.jsonl"), read_file(resumed / "diagnostics.jsonl"));
}

}  // namespace
