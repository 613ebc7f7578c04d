// Crash safety and hostile inputs (docs/reliability.md): checkpoints carry checksums that catch
// every flipped bit and truncation, resuming skips and sets aside a corrupted checkpoint,
// interrupted saves leave nothing a reader would take for a checkpoint, and shard indexes that
// point outside their folder or do not add up are rejected.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "normlab/data/shard.h"
#include "normlab/nn/weights.h"
#include "normlab/train/checkpoint.h"
#include "normlab/util/file_io.h"
#include "support.h"

using namespace normlab;
namespace fs = std::filesystem;

namespace {

Checkpoint small_checkpoint(int64_t step) {
  Checkpoint c;
  torch::manual_seed(step);
  c.model = {{"embed.weight", torch::randn({5, 3})}, {"norm.weight", torch::ones({3})}};
  c.optimizer = {{"exp_avg.embed.weight", torch::randn({5, 3})},
                 {"step.embed.weight", torch::tensor({step})}};
  c.state.step = step;
  c.state.tokens = 100 * static_cast<uint64_t>(step);
  c.state.spike_window = {1.5, 2.5};
  c.config_yaml = "model: {d_model: 3}\n";
  return c;
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// How a checkpoint folder fails to verify and to load; "" when both succeed.
std::string failure_of(const std::string& dir) {
  std::string verify, load;
  try {
    checkpoint_verify(dir);
  } catch (const std::exception& e) {
    verify = e.what();
  }
  try {
    checkpoint_load(dir);
  } catch (const std::exception& e) {
    load = e.what();
  }
  return verify.empty() || load.empty() ? verify + load : verify;
}

}  // namespace

TEST(CheckpointIntegrity, StateListsEveryFileWithItsChecksum) {
  test::ScratchDir dir("ckpt_sum");
  const std::string ck = checkpoint_save(dir.path.string(), small_checkpoint(3), 2);
  const auto files = checkpoint_verify(ck);
  EXPECT_EQ(files, (std::vector<std::string>{"config.yaml", "model.safetensors",
                                             "optimizer.safetensors"}));
  const auto state = nlohmann::json::parse(read_file(ck + "/state.json"));
  for (const std::string& f : files) {
    const FileDigest d = file_digest(ck + "/" + f);
    EXPECT_EQ(state["files"][f]["bytes"].get<uint64_t>(), d.bytes) << f;
    EXPECT_EQ(state["files"][f]["crc32"].get<uint32_t>(), d.crc32) << f;
  }
  const Checkpoint c = checkpoint_load(ck);
  EXPECT_EQ(c.state.step, 3);
  EXPECT_TRUE(torch::equal(checkpoint_load_model(ck).at("norm.weight"), c.model.at("norm.weight")));
  EXPECT_EQ(c.state.spike_window, (std::vector<double>{1.5, 2.5}));
  EXPECT_TRUE(
      torch::equal(c.model.at("embed.weight"), small_checkpoint(3).model.at("embed.weight")));
}

TEST(CheckpointIntegrity, EveryFlippedBitAndEveryTruncationIsDetected) {
  test::ScratchDir dir("ckpt_flip");
  const std::string ck = checkpoint_save(dir.path.string(), small_checkpoint(4), 2);
  int flips = 0, detected = 0;
  for (const std::string name :
       {"model.safetensors", "optimizer.safetensors", "config.yaml", "state.json"}) {
    const fs::path path = fs::path(ck) / name;
    const std::string good = read_file(path.string());
    // One bit in every byte (the bit position rotates), then truncations.
    for (size_t i = 0; i < good.size(); ++i) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ (1 << (i % 8)));
      write_bytes(path, bad);
      ++flips;
      const std::string why = failure_of(ck);
      if (!why.empty())
        ++detected;
      else
        ADD_FAILURE() << name << ": flipping bit " << i % 8 << " of byte " << i
                      << " went unnoticed";
    }
    for (size_t keep : {size_t{0}, good.size() / 2, good.size() - 1}) {
      write_bytes(path, good.substr(0, keep));
      EXPECT_NE(failure_of(ck), "") << name << " truncated to " << keep << " bytes";
    }
    write_bytes(path, good);
    ASSERT_EQ(failure_of(ck), "") << name;
  }
  EXPECT_EQ(detected, flips);
  EXPECT_GT(flips, 500);
  // The message names the file and says what is wrong.
  const fs::path model = fs::path(ck) / "model.safetensors";
  std::string bad = read_file(model.string());
  bad[bad.size() - 3] ^= 0x10;  // a tensor byte: the file still parses, only the checksum knows
  write_bytes(model, bad);
  const std::string why = failure_of(ck);
  EXPECT_NE(why.find("model.safetensors: checksum mismatch"), std::string::npos) << why;
  EXPECT_NE(why.find("corrupted"), std::string::npos) << why;
  EXPECT_THROW(checkpoint_load_model(ck), CheckpointError);  // eval, analyze, generate
}

TEST(CheckpointIntegrity, ResumingSkipsAndSetsAsideCorruptedCheckpoints) {
  test::ScratchDir dir("ckpt_intact");
  const std::string run = dir.path.string();
  for (int64_t s : {2, 4, 6}) checkpoint_save(run, small_checkpoint(s), 3);
  // Corrupt the newest: a byte of its optimizer state, and the config of the middle one.
  std::string bad = read_file(run + "/checkpoints/step-00000006/optimizer.safetensors");
  bad[bad.size() - 1] ^= 0x01;
  write_bytes(run + "/checkpoints/step-00000006/optimizer.safetensors", bad);
  write_bytes(run + "/checkpoints/step-00000004/config.yaml", "model: {d_model: 4}\n");
  const IntactCheckpoint intact = checkpoint_latest_intact(run);
  ASSERT_TRUE(intact.dir);
  EXPECT_EQ(fs::path(*intact.dir).filename(), "step-00000002");
  ASSERT_EQ(intact.corrupted.size(), 2u);
  EXPECT_EQ(fs::path(intact.corrupted[0].first).filename(), "step-00000006");
  EXPECT_NE(intact.corrupted[0].second.find("optimizer.safetensors: checksum mismatch"),
            std::string::npos);
  EXPECT_NE(intact.corrupted[1].second.find("config.yaml: checksum mismatch"), std::string::npos);
  for (const auto& [d, why] : intact.corrupted) checkpoint_set_aside(d);
  EXPECT_TRUE(fs::is_directory(run + "/checkpoints/step-00000006.corrupted"));
  EXPECT_EQ(fs::path(*checkpoint_latest(run)).filename(), "step-00000002");
  // Pruning counts only real checkpoints: with keep 1 the new step 3 replaces step 2, and the
  // set-aside folders stay for inspection.
  checkpoint_save(run, small_checkpoint(3), 1);
  EXPECT_FALSE(fs::exists(run + "/checkpoints/step-00000002"));
  EXPECT_TRUE(fs::exists(run + "/checkpoints/step-00000003"));
  EXPECT_TRUE(fs::exists(run + "/checkpoints/step-00000004.corrupted"));
}

TEST(CheckpointIntegrity, InterruptedSavesLeaveNoCheckpointAndAreCleanedUp) {
  test::ScratchDir dir("ckpt_tmp");
  const std::string run = dir.path.string();
  checkpoint_save(run, small_checkpoint(1), 3);
  // What a save killed half-way leaves: a temporary folder with some of the files.
  const fs::path stale = fs::path(run) / "checkpoints/step-00000002.tmp-99999";
  fs::create_directories(stale);
  write_bytes(stale / "model.safetensors", "partial");
  write_bytes(stale / "state.json", "{\"step\": 2");
  EXPECT_EQ(fs::path(*checkpoint_latest(run)).filename(), "step-00000001");
  EXPECT_EQ(failure_of(*checkpoint_latest(run)), "");
  checkpoint_save(run, small_checkpoint(2), 3);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_EQ(failure_of(*checkpoint_latest(run)), "");
}

// The one atomic-folder writer (checkpoints, token shards, exports): a folder written half-way
// never replaces the previous one, a committed one replaces it whole, and the leftovers of
// killed writers are removed.
TEST(AtomicFolder, FailedWritesKeepThePreviousFolderAndCommitsReplaceItWhole) {
  test::ScratchDir dir("atomic_folder");
  const fs::path out = dir / "export";
  {
    AtomicFolder f(out.string());
    write_bytes(fs::path(f.path()) / "a.txt", "first");
    f.commit();
  }
  auto listing = [&] {
    std::string names;
    for (const auto& e : fs::directory_iterator(dir.path))
      names += e.path().filename().string() + ":";
    return names;
  };
  EXPECT_EQ(listing(), "export:");
  try {  // an exception half-way: the temporary folder goes, the previous folder stays
    AtomicFolder f(out.string());
    write_bytes(fs::path(f.path()) / "b.txt", "half");
    EXPECT_TRUE(fs::exists(fs::path(f.path()) / "b.txt"));
    throw std::runtime_error("disk full");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(listing(), "export:");
  EXPECT_EQ(read_file((out / "a.txt").string()), "first");
  EXPECT_FALSE(fs::exists(out / "b.txt"));
  {
    AtomicFolder f(out.string());
    write_bytes(fs::path(f.path()) / "b.txt", "second");
    f.commit();
  }
  EXPECT_EQ(listing(), "export:");  // no .old- folder is left either
  EXPECT_FALSE(fs::exists(out / "a.txt"));
  EXPECT_EQ(read_file((out / "b.txt").string()), "second");
  // A killed writer's folders (its pid is above Linux's pid_max: no such process) are removed;
  // a live process's are kept.
  fs::create_directories(dir / "export.tmp-4194305");
  fs::create_directories(dir / "export.old-4194306");
  const fs::path live = dir / ("export.tmp-" + std::to_string(::getpid()));
  fs::create_directories(live);
  remove_stale_siblings(out.string());
  EXPECT_FALSE(fs::exists(dir / "export.tmp-4194305"));
  EXPECT_FALSE(fs::exists(dir / "export.old-4194306"));
  EXPECT_TRUE(fs::exists(live));
}

TEST(CheckpointIntegrity, OlderCheckpointsWithoutChecksumsStillLoad) {
  test::ScratchDir dir("ckpt_old");
  const std::string ck = checkpoint_save(dir.path.string(), small_checkpoint(5), 1);
  auto state = nlohmann::json::parse(read_file(ck + "/state.json"));
  state.erase("files");
  state.erase("crc32");
  write_bytes(ck + "/state.json", state.dump(2));
  EXPECT_TRUE(checkpoint_verify(ck).empty());
  EXPECT_EQ(checkpoint_load(ck).state.step, 5);
}

// A weight that is NaN or infinite stops every reader of the checkpoint (train --resume, export
// and consolidate through checkpoint_load; eval, analyze and generate through
// checkpoint_load_model), naming the file, the tensor, the kind and its first bad index.
TEST(CheckpointIntegrity, NonFiniteWeightsAreRefusedNamingTheTensorAndIndex) {
  test::ScratchDir dir("ckpt_nonfinite");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    const char* tensor;
    std::vector<int64_t> at;
    double value;
    const char* says;
  };
  for (const Case& c : {Case{"embed.weight", {2, 1}, nan, "holds NaN at [2, 1]"},
                        Case{"embed.weight", {4, 2}, inf, "holds +inf at [4, 2]"},
                        Case{"norm.weight", {1}, -inf, "holds -inf at [1]"}}) {
    Checkpoint ck = small_checkpoint(3);
    torch::Tensor t = ck.model[c.tensor];
    if (c.at.size() == 2)
      t[c.at[0]][c.at[1]] = c.value;
    else
      t[c.at[0]] = c.value;
    const std::string run = (dir.path / c.tensor).string() + "-" + std::to_string(c.at[0]);
    const std::string saved = checkpoint_save(run, ck, 1);
    const std::string want = saved + "/model.safetensors: tensor '" + c.tensor + "' " + c.says +
                             " (its first non-finite element; 1 in all): weights must be finite";
    for (int pass = 0; pass < 2; ++pass) {
      std::string e;
      try {
        if (pass == 0)
          checkpoint_load(saved);
        else
          checkpoint_load_model(saved);
      } catch (const CheckpointError& x) {
        e = x.what();
      }
      EXPECT_NE(e.find(want), std::string::npos) << pass << ": " << e;
    }
    EXPECT_NO_THROW(checkpoint_verify(saved)) << "the file itself is intact";
  }
  // two bad elements: the first one in row-major order is named, and both counted
  std::string e;
  try {
    check_finite_weights({{"w", torch::tensor({1.0, nan, 2.0, inf}).reshape({2, 2})}}, "f");
  } catch (const CheckpointError& x) {
    e = x.what();
  }
  EXPECT_EQ(e,
            "f: tensor 'w' holds NaN at [0, 1] (its first non-finite element; 2 in all): "
            "weights must be finite numbers");
  EXPECT_NO_THROW(
      check_finite_weights({{"ids", torch::tensor({1, 2})}, {"w", torch::ones({2})}}, "f"));
}

// The optimizer state is refused as the weights are, by every reader (checkpoint_load: resume,
// consolidate, export; checkpoint_check_values: `checkpoint verify`), naming the file, the
// tensor and its first bad element: an infinite second moment stopped its weight silently, an
// infinite first moment ended as "diverged: loss -nan", and both were saved on. A second moment
// or a step count below zero is refused too (the square root of a negative mean of squares).
TEST(CheckpointIntegrity, OptimizerStateThatIsNotFiniteIsRefusedNamingTheTensorAndIndex) {
  test::ScratchDir dir("ckpt_opt_nonfinite");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    const char* tensor;
    int64_t row, col;
    double value;
    const char* says;
  };
  int k = 0;
  for (const Case& c :
       {Case{"exp_avg_sq.embed.weight", 3, 2, inf, "holds +inf at [3, 2] (its first non-finite"},
        Case{"exp_avg.embed.weight", 0, 1, -inf, "holds -inf at [0, 1] (its first non-finite"},
        Case{"exp_avg.embed.weight", 4, 0, nan, "holds NaN at [4, 0] (its first non-finite"},
        Case{"exp_avg_sq.embed.weight", 1, 1, -0.5,
             "holds a negative value at flat index 4 (-0.500000): a second moment"},
        Case{"step.embed.weight", -1, -1, -3.0, "holds a negative value at flat index 0"}}) {
    Checkpoint ck = small_checkpoint(3);
    ck.optimizer["exp_avg_sq.embed.weight"] = torch::rand({5, 3});
    torch::Tensor& t = ck.optimizer[c.tensor];
    if (c.row < 0)
      t = torch::tensor({c.value}, t.options());
    else
      t[c.row][c.col] = c.value;
    const std::string saved = checkpoint_save((dir.path / std::to_string(k++)).string(), ck, 1);
    EXPECT_NO_THROW(checkpoint_verify(saved)) << "the bytes are intact: the checksums match";
    const std::string want = saved + "/optimizer.safetensors: tensor '" + c.tensor + "' " + c.says;
    for (int pass = 0; pass < 2; ++pass) {
      const std::string e = test::error_message([&] {
        if (pass == 0)
          checkpoint_load(saved);
        else
          checkpoint_check_values(saved);
      });
      EXPECT_NE(e.find(want), std::string::npos) << pass << ": " << e;
    }
  }
  // The state as the optimizer writes it loads.
  Checkpoint ck = small_checkpoint(4);
  ck.optimizer["exp_avg_sq.embed.weight"] = torch::zeros({5, 3});
  const std::string saved = checkpoint_save((dir.path / "good").string(), ck, 1);
  EXPECT_NO_THROW(checkpoint_check_values(saved));
}

TEST(CheckpointIntegrity, HostileStateIsRejectedClearly) {
  test::ScratchDir dir("ckpt_hostile");
  const std::string ck = checkpoint_save(dir.path.string(), small_checkpoint(5), 1);
  const auto good = nlohmann::json::parse(read_file(ck + "/state.json"));
  auto rewrite = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = good;
    edit(j);
    // A hostile state comes with a checksum that matches it.
    j.erase("crc32");
    const std::string text = j.dump(2);
    j["crc32"] = crc32_of(text.data(), text.size());
    write_bytes(ck + "/state.json", j.dump(2) + "\n");
    return failure_of(ck);
  };
  EXPECT_NE(rewrite([](auto& j) { j["step"] = 1e30; }).find("step = 1e+30 is not an integer"),
            std::string::npos);
  EXPECT_NE(rewrite([](auto& j) { j["world_size"] = 1e12; }).find("world_size"), std::string::npos);
  EXPECT_NE(rewrite([](auto& j) {
              j["files"]["../../etc/passwd"] = {{"bytes", 1}, {"crc32", 1}};
            }).find("not a file name in the checkpoint folder"),
            std::string::npos);
  EXPECT_NE(
      rewrite([](auto& j) { j["files"].erase("model.safetensors"); }).find("model.safetensors"),
      std::string::npos);
  EXPECT_NE(rewrite([](auto& j) {
              j["files"]["config.yaml"]["bytes"] = 3;
            }).find("truncated or corrupted"),
            std::string::npos);
  // A NaN loss is written as null and read back as NaN.
  EXPECT_EQ(rewrite([](auto& j) { j["last_loss"] = nullptr; }), "");
  EXPECT_TRUE(std::isnan(checkpoint_load(ck).state.last_loss));
}

TEST(ShardIndexHostile, NamesOutsideTheFolderAndInconsistentCountsAreRejected) {
  const nlohmann::json good = {
      {"format", "normlab-token-shards"},
      {"version", 1},
      {"dtype", "uint16"},
      {"tokenizer", {{"file", "t.model"}, {"crc32", 7}, {"vocab_size", 400}, {"eos_id", 2}}},
      {"splits",
       {{"train",
         {{"documents", 1},
          {"tokens", 30},
          {"shards", {{{"file", "train-00000.bin"}, {"tokens", 30}, {"crc32", 1}}}}}}}}};
  EXPECT_EQ(shard_index_parse(good.dump(), "index.json").splits.at("train").tokens, 30u);
  auto error_of = [&](const std::function<void(nlohmann::json&)>& edit) -> std::string {
    nlohmann::json j = good;
    edit(j);
    try {
      shard_index_parse(j.dump(), "index.json");
    } catch (const ShardError& e) {
      return e.what();
    }
    return "";
  };
  const auto shard0 = [](nlohmann::json& j) -> nlohmann::json& {
    return j["splits"]["train"]["shards"][0];
  };
  for (const std::string name : {"../train-00000.bin", "/etc/passwd", "sub/train.bin", "..", ""})
    EXPECT_NE(error_of([&](auto& j) {
                shard0(j)["file"] = name;
              }).find("not a file name in the index's folder"),
              std::string::npos)
        << name;
  EXPECT_NE(
      error_of([&](auto& j) { j["splits"]["train"]["tokens"] = 31; }).find("its shards hold 30"),
      std::string::npos);
  EXPECT_NE(error_of([&](auto& j) {
              shard0(j)["tokens"] = 1.8446744073709552e19;
            }).find("must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&](auto& j) { shard0(j)["crc32"] = -1; }).find("must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&](auto& j) { j["version"] = 1e30; }).find("index version"),
            std::string::npos);
  EXPECT_NE(error_of([&](auto& j) { j["tokenizer"]["eos_id"] = "x"; }).find("eos_id"),
            std::string::npos);
  EXPECT_NE(
      error_of([](auto& j) { j = nlohmann::json::array(); }).find("not a normlab shard index"),
      std::string::npos);
}
