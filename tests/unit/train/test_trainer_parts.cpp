// The trainer's parts built and used alone (src/train/trainer_*.h): the context's checks, the
// run folder's refusal, the data's loader, one optimizer step of the run state, and the logs'
// resume cut and summary.
#include <gmock/gmock.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "normlab/config/config_io.h"
#include "normlab/util/file_io.h"
#include "support.h"
#include "train/trainer_checkpoints.h"
#include "train/trainer_context.h"
#include "train/trainer_data.h"
#include "train/trainer_logs.h"
#include "train/trainer_state.h"
#include "train_suite.h"

using namespace normlab;

namespace {

// Each part of the trainer built alone, on a pre_norm model trained 4 steps.
struct TrainerParts : test::TrainSuite<TrainerParts> {
  static constexpr test::ShardsSpec kShards{"trainer_parts", 300, 7};
  static RunConfig config(const std::vector<std::string>& extra = {}) {
    return run_config({"model.scheme=pre_norm", "train.steps=4"}, extra);
  }
};

TEST_F(TrainerParts, ContextRefusesTheDiagnosticsUnderFsdpAndResolvesThePrecision) {
  test::ScratchDir run("ctx");
  const RunContext ctx(config(), options(run.path.string()));
  EXPECT_EQ(ctx.world, 1);
  EXPECT_FALSE(ctx.sharded);
  EXPECT_TRUE(ctx.lead);
  EXPECT_FALSE(ctx.bf16);
  EXPECT_TRUE(ctx.device.is_cpu());
  try {
    RunContext bad(config({"distributed.force_fsdp=true", "diagnostics.every=2"}),
                   options(run.path.string()));
    FAIL() << "diagnostics under FSDP accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("diagnostics.every"));
  }
  EXPECT_FALSE(std::filesystem::exists(run.path / "config.yaml"));  // a context writes nothing
}

TEST_F(TrainerParts, DataServesTheLoadersBatchesAndItsValidation) {
  test::ScratchDir run("data");
  const RunContext ctx(config(), options(run.path.string()));
  TrainData data(ctx);
  EXPECT_EQ(data.loader().micro_steps(), 2);
  ASSERT_NE(data.val(), nullptr);
  EXPECT_GE(data.val()->num_batches(), 1);
  EXPECT_EQ(data.tokenizer(), nullptr);  // no data.tokenizer in the config
  LoaderOptions lo;
  lo.micro_batch = 2;
  lo.global_batch = 4;
  const TrainLoader direct(std::make_shared<TokenDataset>(*dir_ / "shards", "train", 16), lo);
  for (int64_t step : {0, 3})
    for (int64_t m : {0, 1})
      EXPECT_TRUE(torch::equal(data.loader().batch(step, m).inputs, direct.batch(step, m).inputs))
          << step << " " << m;
  const RunContext no_data(config({"data.train="}), options(run.path.string()));
  try {
    TrainData refused(no_data);
    FAIL() << "an empty data.train accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("data.train is empty"));
  }
}

TEST_F(TrainerParts, StateStepsDeterministicallyOnTheData) {
  test::ScratchDir run("state");
  const RunContext ctx(config(), options(run.path.string()));
  TrainData data(ctx);
  double first_loss = 0;
  for (int rep = 0; rep < 2; ++rep) {
    RunState state(ctx, /*resuming=*/false);
    EXPECT_EQ(state.steps_done(), 0);
    const StepMetrics m = state.step(ctx, data);
    EXPECT_EQ(m.step, 1);
    EXPECT_TRUE(m.finite);
    EXPECT_GT(m.loss, 0.0);
    EXPECT_EQ(state.steps_done(), 1);
    EXPECT_EQ(state.tokens_seen(), 4u * 16u);
    EXPECT_EQ(state.progress().last_loss, m.loss);
    if (rep == 0) first_loss = m.loss;
    EXPECT_EQ(m.loss, first_loss) << "one seed, one loss, bit for bit";
  }
}

TEST_F(TrainerParts, CheckpointsRefuseAFolderWithCheckpointsUnlessResuming) {
  test::ScratchDir run("ck");
  {
    const RunContext ctx(config(), options(run.path.string()));
    RunCheckpoints checkpoints(ctx);
    EXPECT_FALSE(checkpoints.resuming());
    TrainData data(ctx);
    RunState state(ctx, false);
    state.step(ctx, data);
    checkpoints.write_config(ctx);
    checkpoints.save(ctx, state);
  }
  const RunContext again(config(), options(run.path.string()));
  try {
    RunCheckpoints refused(again);
    FAIL() << "a folder with checkpoints taken without --resume";
  } catch (const CheckpointError& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("--resume"));
  }
  const RunContext ctx(config(), options(run.path.string(), /*resume=*/true));
  RunCheckpoints checkpoints(ctx);
  EXPECT_TRUE(checkpoints.resuming());
  RunState state(ctx, true);
  checkpoints.resume(ctx, state);
  EXPECT_EQ(state.steps_done(), 1);
  EXPECT_EQ(state.tokens_seen(), 4u * 16u);
}

TEST_F(TrainerParts, LogsKeepTheLinesBeforeTheResumePointAndWriteTheSummary) {
  test::ScratchDir run("logs");
  const RunContext ctx(config(), options(run.path.string()));
  {
    RunLogs logs;
    logs.open(ctx, 0);
    for (int64_t s = 1; s <= 3; ++s) logs.write_metrics(ctx, {{"step", s}, {"loss", 1.0 / s}});
  }
  RunLogs logs;
  logs.open(ctx, 2);  // a resume at step 2: step 3's line is the future, dropped
  logs.write_metrics(ctx, {{"step", 3}, {"loss", 0.25}});
  std::istringstream in(read_file((run.path / "metrics.jsonl").string()));
  std::vector<double> losses;
  for (std::string line; std::getline(in, line);)
    losses.push_back(nlohmann::json::parse(line).at("loss").get<double>());
  EXPECT_EQ(losses, (std::vector<double>{1.0, 0.5, 0.25}));
  TrainData data(ctx);
  RunState state(ctx, false);
  state.step(ctx, data);
  const RunSummary s = logs.finish(ctx, RunStatus::Completed, state);
  EXPECT_EQ(s.steps, 1);
  EXPECT_EQ(s.tokens, 64u);
  ASSERT_TRUE(run_summary_read(run.path.string()).has_value());
  EXPECT_EQ(run_summary_read(run.path.string())->steps, 1);
}

}  // namespace
