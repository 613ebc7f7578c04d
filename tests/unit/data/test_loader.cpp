// The loader: samples, the (seed, epoch) order, rank slices, exact resume, validation order.
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "normlab/data/data_prepare.h"
#include "normlab/data/loader.h"
#include "normlab/data/permutation.h"
#include "normlab/data/shard.h"
#include "support.h"

using namespace normlab;

namespace {

class LoaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::ScratchDir("loader");
    test::write_text(*dir_ / "a.txt", test::synthetic_corpus(600, 21));
    PrepareOptions o;
    o.tokenizer = test::test_tokenizer_path();
    o.inputs = {*dir_ / "a.txt"};
    o.out_dir = *dir_ / "shards";
    o.val_fraction = 0.2;
    o.shard_tokens = 5000;  // samples come from several shards
    data_prepare(o);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::shared_ptr<TokenDataset> train(int64_t seq_len = 16) {
    return std::make_shared<TokenDataset>(*dir_ / "shards", "train", seq_len);
  }
  static test::ScratchDir* dir_;
};
test::ScratchDir* LoaderTest::dir_ = nullptr;

LoaderOptions opts(int64_t micro, int64_t global, int64_t rank, int64_t world, uint64_t seed = 0) {
  LoaderOptions o;
  o.micro_batch = micro;
  o.global_batch = global;
  o.rank = rank;
  o.world_size = world;
  o.seed = seed;
  return o;
}

TEST(Permute, IsABijectionForAnySize) {
  for (int64_t n : {1, 2, 3, 7, 64, 100, 1000, 4097}) {
    std::set<int64_t> seen;
    for (int64_t i = 0; i < n; ++i) seen.insert(permute_index(i, n, 1234));
    EXPECT_EQ(static_cast<int64_t>(seen.size()), n);
    EXPECT_EQ(*seen.begin(), 0);
    EXPECT_EQ(*seen.rbegin(), n - 1);
  }
  int moved = 0;
  for (int64_t i = 0; i < 1000; ++i)
    moved += permute_index(i, 1000, 1) != permute_index(i, 1000, 2);
  EXPECT_GT(moved, 900);
}

TEST_F(LoaderTest, SamplesAreConsecutiveWindowsWithShiftedTargets) {
  const auto data = train();
  EXPECT_GT(data->index().splits.at("train").shards.size(), 2u);
  TrainLoader loader(data, opts(4, 8, 0, 1));
  const Batch b = loader.batch(3, 1);
  EXPECT_EQ(b.inputs.sizes(), (std::vector<int64_t>{4, 16}));
  EXPECT_TRUE(torch::equal(b.inputs.narrow(1, 1, 15), b.targets.narrow(1, 0, 15)));
  const auto ids = loader.sample_ids(3, 1);
  std::vector<int64_t> s(17);
  data->sample(ids[2], s.data());
  EXPECT_TRUE(
      torch::equal(b.inputs[2], torch::tensor(std::vector<int64_t>(s.begin(), s.end() - 1))));
  EXPECT_TRUE(
      torch::equal(b.targets[2], torch::tensor(std::vector<int64_t>(s.begin() + 1, s.end()))));
}

TEST_F(LoaderTest, EachEpochVisitsEverySampleOnce) {
  const auto data = train();
  const int64_t N = data->num_samples(), G = 8;
  TrainLoader loader(data, opts(8, G, 0, 1, 5));
  std::vector<int> count(static_cast<size_t>(N), 0);
  std::vector<int64_t> epoch0, epoch1;
  for (int64_t step = 0; step * G < 2 * N; ++step)
    for (int64_t p = 0; p < G; ++p) {
      const int64_t pos = step * G + p;
      const int64_t id = loader.sample_ids(step, 0)[static_cast<size_t>(p)];
      if (pos < N) {
        ++count[static_cast<size_t>(id)];
        epoch0.push_back(id);
      } else if (pos < 2 * N) {
        epoch1.push_back(id);
      }
    }
  EXPECT_TRUE(std::all_of(count.begin(), count.end(), [](int c) { return c == 1; }));
  EXPECT_NE(epoch0, epoch1) << "each epoch has its own order";
}

TEST_F(LoaderTest, RanksReadDisjointSlicesThatMakeUpTheGlobalBatch) {
  const auto data = train();
  const int64_t G = 16;
  TrainLoader single(data, opts(2, G, 0, 1, 9));  // 8 micro-steps of 2
  for (int64_t step : {0, 1, 7, 100}) {
    std::vector<int64_t> global;
    for (int64_t m = 0; m < single.micro_steps(); ++m)
      for (int64_t id : single.sample_ids(step, m)) global.push_back(id);
    std::vector<int64_t> from_ranks;
    for (int64_t r = 0; r < 4; ++r) {
      TrainLoader rank(data, opts(2, G, r, 4, 9));  // 2 micro-steps of 2 per rank
      ASSERT_EQ(rank.micro_steps(), 2);
      for (int64_t m = 0; m < 2; ++m)
        for (int64_t id : rank.sample_ids(step, m)) from_ranks.push_back(id);
    }
    EXPECT_EQ(from_ranks, global) << "step " << step;
    EXPECT_EQ(std::set<int64_t>(global.begin(), global.end()).size(), global.size()) << "disjoint";
  }
}

TEST_F(LoaderTest, ResumingAtAStepGivesTheSameBatchesAsAnUninterruptedRun) {
  const auto data = train();
  std::vector<torch::Tensor> uninterrupted;
  {
    TrainLoader a(data, opts(2, 4, 0, 1, 3));
    for (int64_t step = 0; step < 10; ++step)
      for (int64_t m = 0; m < a.micro_steps(); ++m)
        uninterrupted.push_back(a.batch(step, m).inputs);
  }
  TrainLoader resumed(std::make_shared<TokenDataset>(*dir_ / "shards", "train", 16),
                      opts(2, 4, 0, 1, 3));
  size_t k = 5 * 2 + 1;  // resume at step 5, micro-step 1
  for (int64_t step = 5; step < 10; ++step)
    for (int64_t m = step == 5 ? 1 : 0; m < resumed.micro_steps(); ++m)
      EXPECT_TRUE(torch::equal(resumed.batch(step, m).inputs, uninterrupted[k++]))
          << step << "/" << m;
  TrainLoader other_seed(data, opts(2, 4, 0, 1, 4));
  EXPECT_FALSE(torch::equal(other_seed.batch(0, 0).inputs, uninterrupted[0]));
}

TEST_F(LoaderTest, ValidationIsInFixedOrderAndSplitAcrossRanks) {
  const auto val = std::make_shared<TokenDataset>(*dir_ / "shards", "val", 16);
  ValLoader one(val, 2);
  ASSERT_GT(one.num_batches(), 3);
  std::vector<int64_t> s(17);
  val->sample(0, s.data());
  EXPECT_TRUE(torch::equal(one.batch(0).inputs[0],
                           torch::tensor(std::vector<int64_t>(s.begin(), s.end() - 1))));
  ValLoader r0(val, 1, 0, 2), r1(val, 1, 1, 2);
  EXPECT_TRUE(torch::equal(r0.batch(1).inputs[0], one.batch(1).inputs[0]));
  EXPECT_TRUE(torch::equal(r1.batch(1).inputs[0], one.batch(1).inputs[1]));
}

TEST_F(LoaderTest, RejectsInconsistentBatchSizes) {
  EXPECT_THROW(TrainLoader(train(), opts(3, 8, 0, 1)), c10::Error);
  EXPECT_THROW(TrainLoader(train(), opts(2, 8, 4, 4)), c10::Error);
  EXPECT_THROW(TokenDataset(*dir_ / "shards", "nope", 16), ShardError);
  EXPECT_THROW(TokenDataset(*dir_ / "shards", "val", 1 << 20), DataError);  // no full sample
}

}  // namespace

// A token id past the shards' own vocabulary inside shards whose checksums match (written by
// another tool, or edited and re-summed) is refused when the shards are opened, naming the shard
// file, the id's offset and byte, and the bound: read only when its sample came up, it stopped a
// run at that step ("forward of the embedding: index out of range"), and `data inspect` blamed
// the tokenizer.
TEST(ShardIds, AnIdPastTheShardsVocabularyIsRefusedAtOpenNamingTheShardAndOffset) {
  test::ScratchDir dir("shard_ids");
  const auto write = [&](int32_t bad_at, int32_t bad_id) {
    ShardIndex index;
    index.vocab_size = 100;
    index.eos_id = 0;
    SplitIndex split;
    for (int s = 0; s < 2; ++s) {
      const std::string file = "train-" + std::to_string(s) + ".bin";
      std::vector<int32_t> ids(3000);
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i % 100);
      if (s == 1 && bad_at >= 0) ids[static_cast<size_t>(bad_at)] = bad_id;
      const bool bad = s == 1 && bad_at >= 0;
      // The bad shard as another tool would write it: payload and checksum consistent, the
      // header's vocabulary (bytes 32-39) the index's (normlab's own writer refuses the id).
      ShardWriter w((dir.path / file).string(), 2, bad ? 1000 : index.vocab_size);
      w.append(ids.data(), ids.size());
      const ShardHeader h = w.finish();
      if (bad) {
        std::fstream f(dir.path / file, std::ios::in | std::ios::out | std::ios::binary);
        const uint64_t v = index.vocab_size;  // little-endian, as the header is written
        f.seekp(32);
        f.write(reinterpret_cast<const char*>(&v), sizeof v);
      }
      split.shards.push_back({file, h.tokens, h.crc32});
      split.tokens += h.tokens;
      split.documents += 30;
    }
    index.splits["train"] = split;
    shard_index_write(dir.path.string(), index);
  };
  write(-1, 0);
  EXPECT_NO_THROW(TokenDataset(dir.path.string(), "train", 16));
  write(2777, 150);  // deep in the second shard
  const std::string e = test::error_message([&] { TokenDataset(dir.path.string(), "train", 16); });
  EXPECT_NE(e.find("train-1.bin: token id 150 at offset 2777 (byte "), std::string::npos) << e;
  EXPECT_NE(e.find("is outside the vocabulary of 100 (the shards' vocabulary, index.json's "
                   "vocab_size)"),
            std::string::npos)
      << e;
}
