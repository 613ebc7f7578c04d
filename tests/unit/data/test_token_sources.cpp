// Token arrays and Megatron datasets written by independent writers (numpy, a Python writer of
// Megatron's .idx layout: tests/reference/token_formats.py) read back exactly; the loader over
// them resumes exactly and splits across ranks; mixtures of them draw by weight; hostile files
// fail with one line naming the file. The headers on bytes built here: test_token_headers.cpp;
// the mixture's plan without files: test_mixture.cpp.
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <map>
#include <set>

#include "normlab/data/loader.h"
#include "normlab/util/file_io.h"
#include "support.h"

using namespace normlab;

namespace {

class TokenSourcesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::ScratchDir("token_sources");
    const std::string python = test::test_python();
    const std::string cmd = python + " " + test::source_dir() +
                            "/tests/reference/token_formats.py " + (*dir_ / "d") + " 1000 > " +
                            (*dir_ / "writer.log") + " 2>&1";
    status_ = python.empty() ? -1 : std::system(cmd.c_str());
    if (status_ == 0)
      expected_ = nlohmann::json::parse(read_file(*dir_ / "d/expected.json"));
    else if (!python.empty())
      writer_log_ = read_file(*dir_ / "writer.log");
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    // tools/setup.sh installs numpy into the venv that test_python() names: a missing
    // Python or numpy is a failure, never a skip.
    if (status_ != 0)
      GTEST_FAIL() << "tests/reference/token_formats.py did not run with '" << test::test_python()
                   << "' (status " << status_ << "): a Python with numpy is needed (run "
                   << "tools/setup.sh, which installs it into the venv)\n"
                   << writer_log_;
  }
  static std::string path(const std::string& name) { return *dir_ / ("d/" + name); }
  // The ids of dataset `name`'s files as the writer wrote them.
  static std::vector<std::vector<int64_t>> truth(const std::string& name) {
    return expected_["datasets"][name]["files"].get<std::vector<std::vector<int64_t>>>();
  }
  static std::shared_ptr<TokenDataset> open(const DataSource& s, int64_t seq_len = 16) {
    return std::make_shared<TokenDataset>(s, "train", seq_len, 1000);
  }
  // Every sample of `d` against the writer's ids: sample j of a file is its ids [jT, jT + T].
  static void expect_samples(const TokenDataset& d,
                             const std::vector<std::vector<int64_t>>& files) {
    const int64_t T = d.seq_len();
    std::vector<int64_t> got(static_cast<size_t>(T + 1));
    int64_t i = 0;
    for (const auto& f : files)
      for (size_t j = 0; (j + 1) * T + 1 <= f.size(); ++j, ++i) {
        ASSERT_LT(i, d.num_samples());
        d.sample(i, got.data());
        const std::vector<int64_t> want(f.begin() + static_cast<int64_t>(j) * T,
                                        f.begin() + static_cast<int64_t>(j + 1) * T + 1);
        ASSERT_EQ(got, want) << "sample " << i;
      }
    EXPECT_EQ(i, d.num_samples());
  }
  static test::ScratchDir* dir_;
  static int status_;
  static nlohmann::json expected_;
  static std::string writer_log_;  // token_formats.py's output when it failed
};
test::ScratchDir* TokenSourcesTest::dir_ = nullptr;
int TokenSourcesTest::status_ = 0;
nlohmann::json TokenSourcesTest::expected_;
std::string TokenSourcesTest::writer_log_;

LoaderOptions source_opts(int64_t micro, int64_t global, int64_t rank, int64_t world,
                          uint64_t seed) {
  LoaderOptions o;
  o.micro_batch = micro;
  o.global_batch = global;
  o.rank = rank;
  o.world_size = world;
  o.seed = seed;
  return o;
}

// f fails with one line that names `file` and holds `phrase`.
void expect_error(const std::function<void()>& f, const std::string& file,
                  const std::string& phrase) {
  const std::string e = test::error_message(f);
  EXPECT_NE(e.find(file), std::string::npos) << e;
  EXPECT_NE(e.find(phrase), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST_F(TokenSourcesTest, NanoGptUint16ArrayReadsAsWritten) {
  const auto d = open({path("flat16.bin"), DataFormat::Tokens, "uint16", 0});
  expect_samples(*d, truth("flat16"));
  EXPECT_EQ(d->dtype(), "uint16");
  EXPECT_EQ(d->documents(), expected_["datasets"]["flat16"]["documents"].get<int64_t>());
}

TEST_F(TokenSourcesTest, OlmoUint32ArraysReadInSortedOrder) {
  const auto d = open({path("olmo32/part-*.npy"), DataFormat::Tokens, "uint32", 0}, 32);
  ASSERT_EQ(d->files().size(), 2u);
  expect_samples(*d, truth("olmo32"));
  EXPECT_EQ(d->documents(), expected_["datasets"]["olmo32"]["documents"].get<int64_t>());
}

TEST_F(TokenSourcesTest, MegatronDatasetsReadAsWritten) {
  const auto d32 = open({path("mega32"), DataFormat::Megatron});
  expect_samples(*d32, truth("mega32"));
  EXPECT_EQ(d32->dtype(), "int32");
  EXPECT_EQ(d32->documents(), expected_["datasets"]["mega32"]["documents"].get<int64_t>());
  const auto d16 =
      open({path("mega16.idx"), DataFormat::Megatron}, 8);  // a prefix with .idx works too
  expect_samples(*d16, truth("mega16"));
  EXPECT_EQ(d16->dtype(), "uint16");
  EXPECT_EQ(d16->documents(), expected_["datasets"]["mega16"]["documents"].get<int64_t>());
}

// Resume and ranks over a token array: a loader made afresh at step 7 continues with the same
// batches; two ranks' micro-batches together are the one-process global batch; one epoch
// visits every sample once.
TEST_F(TokenSourcesTest, LoaderResumesExactlyAndSplitsAcrossRanks) {
  const DataSource src{path("flat16.bin"), DataFormat::Tokens, "uint16", 0};
  const auto d = open(src);
  const int64_t G = 8, N = d->num_samples();
  const TrainLoader one(d, source_opts(4, G, 0, 1, 11));
  const TrainLoader resumed(open(src), source_opts(4, G, 0, 1, 11));
  TrainLoader r0(d, source_opts(2, G, 0, 2, 11)), r1(d, source_opts(2, G, 1, 2, 11));
  std::vector<int64_t> first_epoch;
  for (int64_t step = 0; step < 20; ++step) {
    std::vector<int64_t> global, ranks;
    for (int64_t m = 0; m < one.micro_steps(); ++m) {
      const auto ids = one.sample_ids(step, m);
      global.insert(global.end(), ids.begin(), ids.end());
      if (step >= 7) {
        const Batch a = one.batch(step, m), b = resumed.batch(step, m);
        ASSERT_TRUE(torch::equal(a.inputs, b.inputs) && torch::equal(a.targets, b.targets));
      }
    }
    for (const TrainLoader* r : {&r0, &r1})
      for (int64_t m = 0; m < r->micro_steps(); ++m) {
        const auto ids = r->sample_ids(step, m);
        ranks.insert(ranks.end(), ids.begin(), ids.end());
      }
    EXPECT_EQ(global, ranks) << "step " << step;
    for (int64_t id : global)
      if (static_cast<int64_t>(first_epoch.size()) < N) first_epoch.push_back(id);
  }
  ASSERT_EQ(static_cast<int64_t>(first_epoch.size()), N);
  EXPECT_EQ(static_cast<int64_t>(std::set<int64_t>(first_epoch.begin(), first_epoch.end()).size()),
            N);
}

// 0.7 / 0.3 over 1,000 steps: source a's ids are below 500, source b's from 500 (but EOS, 0),
// so the tokens of the batches say where they came from. The shares are counted from the
// batches, not from the plan.
TEST_F(TokenSourcesTest, MixtureDrawsByWeightRepeatsTheSmallSourceAndResumes) {
  const DataSource a{path("mix_a.bin"), DataFormat::Tokens, "uint16", 0, 0.7};
  const DataSource b{path("mix_b"), DataFormat::Megatron, "", 0, 0.3};
  const auto da = open(a), db = open(b);
  const int64_t G = 10, steps = 1000;
  const TrainLoader loader({da, db}, {0.7, 0.3}, source_opts(5, G, 0, 1, 3));
  double from_b = 0, nonzero = 0;
  std::map<int64_t, std::multiset<int64_t>> b_by_epoch;  // source b's samples per its epoch
  int64_t b_draws = 0;
  std::set<int64_t> b_draws_seen;  // each draw index once: 0 .. b_draws - 1
  for (int64_t step = 0; step < steps; ++step)
    for (int64_t m = 0; m < loader.micro_steps(); ++m) {
      const Batch batch = loader.batch(step, m);
      const torch::Tensor t = batch.inputs;
      nonzero += static_cast<double>((t != 0).sum().item<int64_t>());
      from_b += static_cast<double>((t >= 500).sum().item<int64_t>());
      for (const SampleRef& r : loader.sample_refs(step, m))
        if (r.source == 1) {
          b_by_epoch[r.draw / db->num_samples()].insert(r.sample);
          b_draws_seen.insert(r.draw);
          ++b_draws;
        }
    }
  // Token shares among non-EOS ids (both sources hold about the same fraction of EOS).
  const double share_b = from_b / nonzero;
  EXPECT_NEAR(share_b, 0.3, 0.01) << "source b's share of tokens";
  EXPECT_EQ(static_cast<int64_t>(b_draws_seen.size()), b_draws);
  EXPECT_EQ(*b_draws_seen.rbegin(), b_draws - 1);
  EXPECT_EQ(b_draws, loader.plan().draws_before(1, steps * G));
  // b is small: it repeats, every epoch a permutation of its samples.
  EXPECT_EQ(loader.source_epoch(1, steps), b_draws / db->num_samples());
  EXPECT_GT(loader.source_epoch(1, steps), 5);
  for (const auto& [epoch, samples] : b_by_epoch) {
    if (epoch >= b_draws / db->num_samples()) continue;  // the last epoch, not complete
    EXPECT_EQ(std::set<int64_t>(samples.begin(), samples.end()).size(), samples.size())
        << "epoch " << epoch << " of source b repeats a sample";
    EXPECT_EQ(static_cast<int64_t>(samples.size()), db->num_samples());
  }
  // A resumed loader (sources opened afresh) continues with the same order.
  const TrainLoader resumed({open(a), open(b)}, {0.7, 0.3}, source_opts(5, G, 0, 1, 3));
  for (int64_t step = 600; step < 620; ++step)
    for (int64_t m = 0; m < loader.micro_steps(); ++m) {
      const Batch x = loader.batch(step, m), y = resumed.batch(step, m);
      ASSERT_TRUE(torch::equal(x.inputs, y.inputs)) << "step " << step;
    }
  // Another seed, another order.
  const TrainLoader other({da, db}, {0.7, 0.3}, source_opts(5, G, 0, 1, 4));
  EXPECT_FALSE(torch::equal(loader.batch(3, 0).inputs, other.batch(3, 0).inputs));
}

TEST_F(TokenSourcesTest, HostileFilesFailWithOneLineNamingTheFile) {
  expect_error(
      [&] {
        open({path("bad_truncated.bin"), DataFormat::Tokens, "uint16"});
      },
      "bad_truncated.bin", "not a whole number of uint16 ids");
  expect_error(
      [&] {
        open({path("bad_uint32.bin"), DataFormat::Tokens, "uint16"});
      },
      "bad_uint32.bin", "is its dtype uint32?");
  expect_error(
      [&] {
        open({path("flat16.bin"), DataFormat::Tokens, "uint32"});
      },
      "flat16.bin", "is its dtype uint16?");
  const auto& bad = expected_["datasets"]["bad_id"];
  const std::string at = "token id " + std::to_string(bad["id"].get<int64_t>()) + " at offset " +
                         std::to_string(bad["offset"].get<int64_t>()) + " (byte " +
                         std::to_string(2 * bad["offset"].get<int64_t>()) + ")";
  expect_error([&] { open({path("bad_id.bin"), DataFormat::Tokens, "uint16"}); }, "bad_id.bin", at);
  // Unverified at open, the bad id still stops the sample that holds it.
  const auto unverified = open({path("bad_id.bin"), DataFormat::Tokens, "uint16", -1, 1.0, false});
  std::vector<int64_t> row(17);
  const int64_t holder = bad["offset"].get<int64_t>() / 16;
  expect_error([&] { unverified->sample(holder, row.data()); }, "bad_id.bin", at);
  expect_error(
      [&] {
        open({path("bad_pointers"), DataFormat::Megatron});
      },
      "bad_pointers.idx", "the sizes do not add up");
  expect_error(
      [&] {
        open({path("bad_lengths"), DataFormat::Megatron});
      },
      "bad_lengths.bin", "the sizes do not add up");
  expect_error(
      [&] {
        open({path("bad_docs"), DataFormat::Megatron});
      },
      "bad_docs.idx", "the document index ends at sequence 5");
  expect_error(
      [&] {
        open({path("mega32"), DataFormat::Megatron, "uint16"});
      },
      "mega32.idx", "holds int32 ids");
  expect_error(
      [&] {
        open({path("nothing_here"), DataFormat::Megatron});
      },
      "nothing_here.idx", "not found");
  expect_error(
      [&] {
        open({path("flat16.bin"), DataFormat::Tokens, "uint16", 1000});
      },
      "flat16.bin", "eos 1000");
}

TEST_F(TokenSourcesTest, NumPyFilesReadThroughTheirHeader) {
  const auto d16 =
      open({path("saved16.npy"), DataFormat::Tokens, "", 0});  // the header gives the dtype
  expect_samples(*d16, truth("saved16"));
  EXPECT_EQ(d16->dtype(), "uint16");
  EXPECT_EQ(d16->documents(), expected_["datasets"]["saved16"]["documents"].get<int64_t>());
  const auto d64 =
      open({path("saved64_v2.npy"), DataFormat::Tokens, "int64"});  // a matching dtype is fine
  expect_samples(*d64, truth("saved64_v2"));
  EXPECT_EQ(d64->dtype(), "int64");
  const auto d32 = open({path("saved32_v3.npy"), DataFormat::Tokens});
  expect_samples(*d32, truth("saved32_v3"));
  EXPECT_EQ(d32->dtype(), "uint32");
  const auto raw = open({path("raw_i32.bin"), DataFormat::Tokens, "int32", 0});
  expect_samples(*raw, truth("raw_i32"));
  EXPECT_EQ(raw->documents(), expected_["datasets"]["raw_i32"]["documents"].get<int64_t>());
}

TEST_F(TokenSourcesTest, BadNumPyHeadersAndNegativeIdsAreRefusedByName) {
  expect_error(
      [&] {
        open({path("bad_npy_fortran.npy"), DataFormat::Tokens});
      },
      "bad_npy_fortran.npy", "Fortran order");
  expect_error(
      [&] {
        open({path("bad_npy_float.npy"), DataFormat::Tokens});
      },
      "bad_npy_float.npy", "dtype '<f4' does not hold token ids");
  expect_error(
      [&] {
        open({path("bad_npy_big.npy"), DataFormat::Tokens});
      },
      "bad_npy_big.npy", "dtype '>u2' is big-endian");
  expect_error(
      [&] {
        open({path("bad_npy_cut.npy"), DataFormat::Tokens});
      },
      "bad_npy_cut.npy", "(truncated)");
  expect_error(
      [&] {
        open({path("saved16.npy"), DataFormat::Tokens, "uint32"});
      },
      "saved16.npy", "a .npy array of uint16 ids, the source says dtype uint32");
  expect_error(
      [&] {
        open({path("flat16.bin"), DataFormat::Tokens});
      },
      "flat16.bin", "a raw token array (no .npy header) needs the source's dtype");
  // A source's files share one dtype.
  expect_error(
      [&] {
        open({path("saved*.npy"), DataFormat::Tokens});
      },
      "saved32_v3.npy",
      "holds uint32 ids, " + path("saved16.npy") + " of the same source holds uint16");
  // Negative ids in signed arrays: .npy, raw and Megatron; verified at open, or when read.
  const auto& bad = expected_["datasets"]["bad_neg"];
  const std::string at = "token id -3 at offset " + std::to_string(bad["offset"].get<int64_t>());
  expect_error([&] { open({path("bad_neg.npy"), DataFormat::Tokens}); }, "bad_neg.npy", at);
  expect_error(
      [&] {
        open({path("bad_neg_i64.bin"), DataFormat::Tokens, "int64"});
      },
      "bad_neg_i64.bin",
      at + " (byte " + std::to_string(8 * bad["offset"].get<int64_t>()) + ") is negative");
  expect_error([&] { open({path("bad_neg_mega"), DataFormat::Megatron}); }, "bad_neg_mega.bin", at);
  const auto unverified = open({path("bad_neg.npy"), DataFormat::Tokens, "", -1, 1.0, false});
  std::vector<int64_t> row(17);
  const int64_t holder = bad["offset"].get<int64_t>() / 16;
  expect_error([&] { unverified->sample(holder, row.data()); }, "bad_neg.npy", at);
}

}  // namespace
