// Sweeps: learning-rate lists and ranges, the grid, sweep files, GPU slots, the state of a
// point on disk, and the paper-style table. (Child processes: tests/cli/sweep.sh.)
#include <fstream>

#include "normlab/config/config_io.h"
#include "normlab/sweep/asha.h"
#include "normlab/sweep/slurm.h"
#include "normlab/sweep/sweep.h"
#include "normlab/sweep/sweep_report.h"
#include "normlab/train/checkpoint.h"
#include "normlab/util/error.h"
#include "normlab/util/file_io.h"
#include "support.h"

using namespace normlab;
using normlab::test::ScratchDir;

namespace {

void sweep_write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

template <class F>
std::string sweep_error_of(F f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::string tiny_config() { return test::source_dir() + "/configs/tiny/lm.yaml"; }

PointResult result(Scheme s, double lr, uint64_t seed, PointState st, double ppl = 0,
                   int64_t diverged_at = 0, int64_t spikes = 0) {
  PointResult r;
  r.point = {s,
             lr,
             seed,
             std::string(enum_name(s)) + "-lr" + lr_label(lr) + "-s" + std::to_string(seed),
             {}};
  r.state = st;
  r.steps = r.steps_planned = 100;
  if (st == PointState::Completed) r.val_perplexity = ppl;
  if (st == PointState::Diverged) r.diverged_at = diverged_at, r.steps = diverged_at - 1;
  r.spikes = spikes;
  return r;
}

}  // namespace

TEST(Sweep, LearningRateListsAndLogRanges) {
  EXPECT_EQ(parse_lr_list("4e-4,1e-3,2e-3"), (std::vector<double>{4e-4, 1e-3, 2e-3}));
  EXPECT_EQ(parse_lr_list("1e-4:1e-2:5"),
            (std::vector<double>{1e-4, 3.16e-4, 1e-3, 3.16e-3, 1e-2}));
  EXPECT_EQ(parse_lr_list("1e-3:8e-3:4"), (std::vector<double>{1e-3, 2e-3, 4e-3, 8e-3}));
  EXPECT_EQ(lr_label(4e-4), "4e-4");
  EXPECT_EQ(lr_label(3.16e-3), "3.16e-3");
  EXPECT_EQ(lr_label(2.5e-3), "2.5e-3");
  EXPECT_EQ(lr_label(1e3), "1e3");
  EXPECT_EQ(lr_label(0.1), "1e-1");
}

TEST(Sweep, MalformedLearningRatesAreRejectedClearly) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty list"},
      {"1e-3,,2e-3", "'' is not a positive number"},
      {"1e-3,abc", "'abc' is not a positive number"},
      {"-1e-3", "'-1e-3' is not a positive number"},
      {"0", "'0' is not a positive number"},
      {"1e-4:1e-2", "a range is FIRST:LAST:COUNT"},
      {"1e-4:1e-2:1", "COUNT must be an integer from 2 to 100"},
      {"1e-4:1e-2:x", "COUNT must be an integer from 2 to 100"},
      {"1e-2:1e-4:3", "LAST must be above FIRST"},
      {"1e-3,1e-3", "1e-3 appears twice"},
      {"1e-3,1.0001e-3", "1e-3 appears twice"},
  };
  for (const auto& [text, expect] : cases) {
    const std::string err = sweep_error_of([&] { parse_lr_list(text); });
    EXPECT_NE(err.find(expect), std::string::npos) << "'" << text << "': got '" << err << "'";
  }
}

TEST(Sweep, GridIsSchemeMajorWithEachPointsOverrides) {
  SweepSpec spec;
  spec.config = tiny_config();
  spec.overrides = {"train.steps=7"};
  spec.schemes = {Scheme::PreNorm, Scheme::SiameseHybrid};
  spec.lrs = {1e-3, 2e-3};
  spec.seeds = {0, 5};
  const auto points = sweep_points(spec);
  ASSERT_EQ(points.size(), 8u);
  EXPECT_EQ(points[0].name, "pre_norm-lr1e-3-s0");
  EXPECT_EQ(points[1].name, "pre_norm-lr1e-3-s5");
  EXPECT_EQ(points[2].name, "pre_norm-lr2e-3-s0");
  EXPECT_EQ(points[7].name, "siamese_hybrid-lr2e-3-s5");
  EXPECT_EQ(points[7].overrides,
            (std::vector<std::string>{"train.steps=7", "model.scheme=siamese_hybrid",
                                      "optimizer.lr=0.002", "train.seed=5"}));
  // What the child will load is exactly the point.
  const RunConfig c = config_load(spec.config, points[7].overrides);
  EXPECT_EQ(c.model.scheme, Scheme::SiameseHybrid);
  EXPECT_EQ(c.optimizer.lr, 2e-3);
  EXPECT_EQ(c.train.seed, 5u);
  EXPECT_EQ(c.train.steps, 7);

  // Empty axes take the base config's values.
  SweepSpec plain;
  plain.config = tiny_config();
  const auto one = sweep_points(plain);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].name, "siamese_hybrid-lr3e-3-s0");
}

TEST(Sweep, BadGridsFailBeforeAnythingRuns) {
  SweepSpec spec;
  spec.config = tiny_config();
  spec.overrides = {"train.stepz=3"};
  EXPECT_NE(sweep_error_of([&] { sweep_points(spec); }).find("did you mean 'train.steps'"),
            std::string::npos);
  spec.overrides = {"train.steps=-3"};
  EXPECT_NE(sweep_error_of([&] { sweep_points(spec); }).find("train.steps"), std::string::npos);
  spec.overrides = {};
  spec.schemes = {Scheme::PreNorm, Scheme::PreNorm};
  EXPECT_NE(sweep_error_of([&] { sweep_points(spec); }).find("scheme pre_norm listed twice"),
            std::string::npos);
  spec.schemes = {};
  spec.config = "";
  EXPECT_NE(sweep_error_of([&] { sweep_points(spec); }).find("no base config"), std::string::npos);
}

TEST(Sweep, SweepFilesLoadAndRejectMistakes) {
  ScratchDir dir("sweep_files");
  sweep_write(dir / "base.yaml", "train:\n  steps: 5\n");
  sweep_write(dir / "ok.yaml",
              "config: base.yaml\nscheme: [pre_norm, siamese]\nlr: 1e-4:1e-2:3\nseed: 0,1\n"
              "set:\n  train.steps: 9\njobs: 2\ngpus_per_run: 1\n");
  const SweepSpec s = sweep_load(dir / "ok.yaml");
  EXPECT_EQ(s.config, dir / "base.yaml");
  EXPECT_EQ(s.schemes, (std::vector<Scheme>{Scheme::PreNorm, Scheme::Siamese}));
  EXPECT_EQ(s.lrs, (std::vector<double>{1e-4, 1e-3, 1e-2}));
  EXPECT_EQ(s.seeds, (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(s.overrides, (std::vector<std::string>{"train.steps=9"}));
  EXPECT_EQ(s.jobs, 2);
  EXPECT_EQ(s.gpus_per_run, 1);

  const std::vector<std::pair<std::string, std::string>> cases = {
      {"config: base.yaml\nschemes: [pre_norm]\n", "schemes: unknown key (did you mean 'scheme'?)"},
      {"scheme: [pre_norm]\n", "config: required"},
      {"config: base.yaml\nscheme: [pre_nrom]\n", "scheme: unknown value 'pre_nrom'"},
      {"config: base.yaml\nlr: [1e-3, fast]\n",
       "lr: learning rates '1e-3,fast': 'fast' is not a positive number"},
      {"config: base.yaml\nlr: {a: 1}\n", "lr: expected a list or comma-separated text, got a map"},
      {"config: base.yaml\nseed: [-1]\n", "seed: expected an integer, got '-1'"},
      {"config: base.yaml\nset: [train.steps]\n", "set: expected section.key=value"},
      {"config: base.yaml\njobs: many\n", "jobs: expected an integer, got 'many'"},
      {"config: base.yaml\ngpus_per_run: -2\n", "gpus_per_run: expected 0 or more"},
      {"config: base.yaml\nlr: [1e-3\n", "invalid YAML"},
      {"- a\n- b\n", "expected a map of sweep keys"},
      {"config: base.yaml\nearly_stop: hyperband\n", "early_stop: expected asha or none"},
      {"config: base.yaml\nearly_stop: {method: asha, reduction: 1}\n",
       "early_stop.reduction: expected at least 2, got 1"},
      {"config: base.yaml\nearly_stop: {method: asha, min_step: 5}\n",
       "early_stop.min_step: unknown key (did you mean 'min_steps'?)"},
  };
  for (const auto& [text, expect] : cases) {
    sweep_write(dir / "bad.yaml", text);
    const std::string err = sweep_error_of([&] { sweep_load(dir / "bad.yaml"); });
    EXPECT_NE(err.find(expect), std::string::npos) << text << "got '" << err << "'";
    EXPECT_NE(err.find("bad.yaml"), std::string::npos) << err;
  }
  EXPECT_NE(sweep_error_of([&] { sweep_load(dir / "missing.yaml"); }).find("sweep file not found"),
            std::string::npos);
}

TEST(Sweep, EarlyStoppingLoadsFromSweepFiles) {
  ScratchDir dir("sweep_files");
  sweep_write(dir / "base.yaml", "train:\n  steps: 5\n");
  sweep_write(dir / "a.yaml", "config: base.yaml\nearly_stop: asha\n");
  EXPECT_TRUE(sweep_load(dir / "a.yaml").early_stop.asha);
  EXPECT_EQ(sweep_load(dir / "a.yaml").early_stop.reduction, 3);
  sweep_write(dir / "b.yaml",
              "config: base.yaml\nearly_stop:\n  method: asha\n  min_steps: 50\n  reduction: 4\n");
  const EarlyStopSpec e = sweep_load(dir / "b.yaml").early_stop;
  EXPECT_TRUE(e.asha);
  EXPECT_EQ(e.min_steps, 50);
  EXPECT_EQ(e.reduction, 4);
  sweep_write(dir / "c.yaml", "config: base.yaml\n");
  EXPECT_FALSE(sweep_load(dir / "c.yaml").early_stop.asha);
}

// ASHA's bookkeeping: rungs min_steps * eta^k below the run's length; a point is promoted past
// a rung once it is among the best floor(n / eta) of the n that reached it, the highest rung
// first; when nothing else can happen, each rung lets its best point go on.
TEST(Asha, RungsAndPromotions) {
  Asha a({/*min_steps=*/10, /*reduction=*/3, /*steps=*/100});
  EXPECT_EQ(a.rungs(), (std::vector<int64_t>{10, 30, 90}));
  EXPECT_EQ(a.next_target(0), 10);
  EXPECT_EQ(a.next_target(10), 30);
  EXPECT_EQ(a.next_target(95), 100);
  EXPECT_EQ(a.rung_of(30), 1u);
  EXPECT_FALSE(a.rung_of(20));

  a.report(0, 0, 5.0);
  a.report(1, 0, 4.0);
  EXPECT_FALSE(a.promote(false)) << "2 points: the top third is empty";
  EXPECT_EQ(a.paused_at(1), 0u);
  a.report(2, 0, 6.0);
  EXPECT_EQ(a.promote(false), 1u) << "3 points: the best goes on";
  EXPECT_FALSE(a.promote(false)) << "and only it";
  EXPECT_FALSE(a.paused_at(1));
  a.report(1, 1, 3.0);
  for (size_t p = 3; p < 6; ++p) a.report(p, 0, 1.0 + static_cast<double>(p));  // 4, 5, 6
  EXPECT_EQ(a.promote(false), 3u) << "6 points at rung 0: the second best (4.0, point 3)";
  EXPECT_FALSE(a.promote(false));
  EXPECT_EQ(a.promote(true), 1u) << "settled: rung 1's best goes on although 1 < eta";
  EXPECT_FALSE(a.promote(true)) << "rung 1 has promoted one; rung 0 two";
  EXPECT_EQ(a.paused_at(0), 0u);
  EXPECT_EQ(a.paused_at(2), 0u);
  EXPECT_FALSE(a.paused_at(1));

  EXPECT_THROW(Asha({0, 3, 100}), ConfigError);
  EXPECT_THROW(Asha({100, 3, 100}), ConfigError);
  EXPECT_THROW(Asha({10, 1, 100}), ConfigError);
}

TEST(Sweep, ShippedSweepFilesLoad) {
  for (const char* f : {"configs/sweeps/mini.yaml", "configs/sweeps/paper_table1.yaml"}) {
    const SweepSpec s = sweep_load(test::source_dir() + "/" + f);
    EXPECT_NO_THROW(sweep_points(s)) << f;
  }
  const SweepSpec t = sweep_load(test::source_dir() + "/configs/sweeps/paper_table1.yaml");
  EXPECT_EQ(t.schemes.size(), 7u);
  EXPECT_EQ(t.lrs, (std::vector<double>{4e-4, 1e-3, 2e-3}));
  EXPECT_EQ(config_load(t.config).model.d_model, 2048);
}

TEST(Sweep, GpuSlotsAreDisjointDeviceSets) {
  EXPECT_EQ(gpu_slots({"0", "1", "2", "3"}, 1), (std::vector<std::string>{"0", "1", "2", "3"}));
  EXPECT_EQ(gpu_slots({"0", "1", "2", "3"}, 2), (std::vector<std::string>{"0,1", "2,3"}));
  EXPECT_EQ(gpu_slots({"4", "5", "6"}, 2), (std::vector<std::string>{"4,5"}));  // the odd one idles
  EXPECT_TRUE(gpu_slots({"0"}, 2).empty());
  EXPECT_THROW(gpu_slots({"0"}, 0), std::invalid_argument);
}

TEST(Sweep, MultiGpuRunsStartUnderTheLauncher) {
  SweepPoint p;
  p.overrides = {"model.scheme=pre_norm", "optimizer.lr=0.001"};
  using V = std::vector<std::string>;
  EXPECT_EQ(point_command(p, "c.yaml", "/bin/normlab", "out/r", false, 1, {}),
            (V{"/bin/normlab", "train", "--config", "c.yaml", "--set", "model.scheme=pre_norm",
               "--set", "optimizer.lr=0.001", "--out", "out/r", "--resume"}));
  EXPECT_EQ(
      point_command(p, "c.yaml", "/bin/normlab", "out/r", true, 1, {"torchrun"}),
      (V{"/bin/normlab", "train", "--config", "c.yaml", "--set", "model.scheme=pre_norm", "--set",
         "optimizer.lr=0.001", "--set", "train.device=cuda", "--out", "out/r", "--resume"}));
  EXPECT_EQ(point_command(p, "c.yaml", "/bin/normlab", "out/r", true, 4,
                          {"/usr/bin/python3", "-m", "torch.distributed.run"}),
            (V{"/usr/bin/python3",
               "-m",
               "torch.distributed.run",
               "--no-python",
               "--standalone",
               "--nproc-per-node",
               "4",
               "/bin/normlab",
               "train",
               "--config",
               "c.yaml",
               "--set",
               "model.scheme=pre_norm",
               "--set",
               "optimizer.lr=0.001",
               "--set",
               "train.device=cuda",
               "--out",
               "out/r",
               "--resume"}));
  EXPECT_THROW(point_command(p, "c.yaml", "/bin/normlab", "out/r", true, 2, {}), ConfigError);
}

TEST(Sweep, PointStateComesFromTheRunFolder) {
  ScratchDir dir("sweep_state");
  const std::string run = dir / "run";
  EXPECT_EQ(point_state(run), PointState::Pending);  // no folder yet
  std::filesystem::create_directories(run);
  EXPECT_EQ(point_state(run), PointState::Pending);
  std::filesystem::create_directories(run + "/checkpoints/step-00000010");
  sweep_write(run + "/checkpoints/step-00000010/state.json", "{}");
  EXPECT_EQ(point_state(run), PointState::Interrupted);  // a checkpoint without a summary: killed
  sweep_write(run + "/summary.json", R"({"status": "interrupted", "steps": 10})");
  EXPECT_EQ(point_state(run), PointState::Interrupted);
  sweep_write(run + "/summary.json", R"({"status": "completed", "steps": 20})");
  EXPECT_EQ(point_state(run), PointState::Completed);
  sweep_write(run + "/summary.json", R"({"status": "diverged", "steps": 4, "diverged_at": 5})");
  EXPECT_EQ(point_state(run), PointState::Diverged);
  sweep_write(run + "/sweep_status.json",
              R"({"state": "crashed", "exit_code": 1})");  // the latest child failed
  EXPECT_EQ(point_state(run), PointState::Crashed);
  const PointResult r = read_point_result(run, {Scheme::PreNorm, 1e-3, 0, "run", {}});
  EXPECT_EQ(r.exit_code, 1);
  sweep_write(run + "/sweep_status.json", R"({"state": "stopped", "step": 10, "rung": 0})");
  EXPECT_EQ(point_state(run), PointState::Stopped);  // early stopping ended it at a rung
}

TEST(Sweep, CellsFollowThePapersTable) {
  using S = PointState;
  EXPECT_EQ(sweep_cell({result(Scheme::PreNorm, 1e-3, 0, S::Completed, 10.844)}).text, "10.84");
  EXPECT_EQ(sweep_cell({result(Scheme::PreNorm, 1e-3, 0, S::Completed, 10.844, 0, 3)}).text,
            "10.84 (3 spikes)");
  EXPECT_EQ(sweep_cell({result(Scheme::PreNorm, 1e-3, 0, S::Diverged, 0, 812)}).text,
            "diverged @ 812");
  // Seeds: mean ± sample standard deviation; any diverged seed makes the cell diverged.
  const SweepCell two = sweep_cell({result(Scheme::PreNorm, 1e-3, 0, S::Completed, 10.0, 0, 1),
                                    result(Scheme::PreNorm, 1e-3, 1, S::Completed, 12.0, 0, 1)});
  EXPECT_EQ(two.text, "11.00 ± 1.41 (2 spikes)");
  EXPECT_DOUBLE_EQ(*two.mean_perplexity, 11.0);
  EXPECT_EQ(sweep_cell({result(Scheme::PreNorm, 1e-3, 0, S::Completed, 10.0),
                        result(Scheme::PreNorm, 1e-3, 1, S::Diverged, 0, 90)})
                .text,
            "diverged @ 90 (1/2 seeds)");
  EXPECT_EQ(sweep_cell({result(Scheme::PreNorm, 1e-3, 0, S::Completed, 10.0),
                        result(Scheme::PreNorm, 1e-3, 1, S::Pending)})
                .text,
            "pending (seed 1)");
  PointResult crashed = result(Scheme::PreNorm, 1e-3, 0, S::Crashed);
  crashed.exit_code = 1;
  EXPECT_EQ(sweep_cell({crashed}).text, "crashed (exit 1)");
  EXPECT_FALSE(sweep_cell({crashed}).mean_perplexity);
}

TEST(Sweep, TableMarksTheBestLearningRatePerScheme) {
  using S = PointState;
  const std::vector<PointResult> rs = {
      result(Scheme::PreNorm, 4e-4, 0, S::Completed, 11.21),
      result(Scheme::PreNorm, 1e-3, 0, S::Completed, 10.84),
      result(Scheme::PreNorm, 2e-3, 0, S::Completed, 10.89),
      result(Scheme::PostNorm, 4e-4, 0, S::Completed, 12.5),
      result(Scheme::PostNorm, 1e-3, 0, S::Diverged, 0, 300),
      result(Scheme::PostNorm, 2e-3, 0, S::Diverged, 0, 120),
  };
  const std::string md = sweep_markdown(rs, "test");
  EXPECT_NE(md.find("| scheme | 4e-4 | 1e-3 | 2e-3 |\n|---|---|---|---|\n"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| pre_norm | 11.21 | **10.84** | 10.89 |\n"), std::string::npos) << md;
  EXPECT_NE(md.find("| post_norm | **12.50** | diverged @ 300 | diverged @ 120 |\n"),
            std::string::npos)
      << md;
  const std::string csv = sweep_csv(rs);
  EXPECT_NE(csv.find("post_norm-lr2e-3-s0,post_norm,0.002,0,diverged,119,100,120,,,,0,,0.000\n"),
            std::string::npos)
      << csv;
  EXPECT_NE(sweep_json(rs, "t").find("\"pre_norm\": 0.001"), std::string::npos);
}

TEST(SweepSlurm, SbatchArgumentsSplitIntoOneOptionEach) {
  EXPECT_EQ(
      split_sbatch_args("--partition gpu --time=4:00:00  -A proj --exclusive"),
      (std::vector<std::string>{"--partition gpu", "--time=4:00:00", "-A proj", "--exclusive"}));
  EXPECT_TRUE(split_sbatch_args("  ").empty());
}

TEST(SweepSlurm, JobScriptAsksForTheNodesAndGpusAndResumes) {
  RunStart run;
  run.name = "pre_norm-lr1e-3-s0";
  run.dir = "/sweeps/a b/runs/pre_norm-lr1e-3-s0";
  run.argv = {"/bin/normlab", "train", "--set",   "model.scheme=pre_norm",
              "--out",        run.dir, "--resume"};
  run.target = 300;
  SlurmOptions o;
  o.nodes = 2;
  o.gpus_per_node = 8;
  o.sbatch_args = {"--partition gpu", "--time=1:00:00"};
  const std::string s = slurm_job_script(run, o);
  for (const char* line :
       {"#!/bin/bash\n", "#SBATCH --job-name='normlab-pre_norm-lr1e-3-s0'\n",
        "#SBATCH --output='/sweeps/a b/runs/pre_norm-lr1e-3-s0/slurm-%j.out'\n",
        "#SBATCH --nodes=2\n", "#SBATCH --ntasks-per-node=8\n", "#SBATCH --gpus-per-node=8\n",
        "#SBATCH --signal=B:TERM@120\n", "#SBATCH --requeue\n", "#SBATCH --partition gpu\n",
        "#SBATCH --time=1:00:00\n", "cd '/sweeps/a b/runs/pre_norm-lr1e-3-s0' || exit 1\n",
        "scancel --signal=TERM \"$SLURM_JOB_ID\"",
        "srun '/bin/normlab' 'train' '--set' 'model.scheme=pre_norm' '--out' "
        "'/sweeps/a b/runs/pre_norm-lr1e-3-s0' '--resume' &\n"})
    EXPECT_NE(s.find(line), std::string::npos) << line << "\nnot in:\n" << s;
  // The options sbatch reads come before the first command.
  EXPECT_LT(s.rfind("#SBATCH"), s.find("\ncd "));
  // CPU: one task, no GPUs.
  o.gpus_per_node = 0;
  o.nodes = 1;
  const std::string cpu = slurm_job_script(run, o);
  EXPECT_NE(cpu.find("#SBATCH --ntasks-per-node=1\n"), std::string::npos);
  EXPECT_EQ(cpu.find("--gpus-per-node"), std::string::npos);
}

TEST(SweepSlurm, SingleQuotesInArgumentsAreQuoted) {
  RunStart run;
  run.name = "p";
  run.dir = "/d";
  run.argv = {"it's"};
  EXPECT_NE(slurm_job_script(run, SlurmOptions{}).find("srun 'it'\\''s' &"), std::string::npos);
}
