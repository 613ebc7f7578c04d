// data prepare: shards equal direct encoding, identical for any thread count, all input
// formats, and every kind of bad input rejected with the file named and nothing left behind.
#include <fstream>

#include "normlab/data/data_prepare.h"
#include "normlab/data/loader.h"
#include "normlab/data/shard.h"
#include "normlab/data/text_input.h"
#include "normlab/data/tokenizer.h"
#include "normlab/util/file_io.h"
#include "support.h"

using namespace normlab;
namespace fs = std::filesystem;

namespace {

PrepareOptions options(const std::vector<std::string>& inputs, const std::string& out,
                       int threads = 2) {
  PrepareOptions o;
  o.tokenizer = test::test_tokenizer_path();
  o.inputs = inputs;
  o.out_dir = out;
  o.threads = threads;
  o.val_fraction = 0.1;
  return o;
}

// All tokens of a split, in order.
std::vector<int64_t> split_tokens(const std::string& dir, const std::string& split) {
  const ShardIndex idx = shard_index_read(dir);
  std::vector<int64_t> out;
  for (const auto& e : idx.splits.at(split).shards) {
    ShardFile f((fs::path(dir) / e.file).string());
    f.verify();
    const size_t at = out.size();
    out.resize(at + f.header().tokens);
    f.copy(0, f.header().tokens, out.data() + at);
  }
  return out;
}

// What the shards must hold: each document encoded whole, followed by EOS, in input order.
std::vector<int64_t> expected_tokens(const std::vector<std::string>& docs, bool val,
                                     double fraction) {
  const Tokenizer tok(test::test_tokenizer_path());
  std::vector<int64_t> out;
  for (const auto& d : docs) {
    if (is_validation_document(d, fraction) != val) continue;
    for (int32_t id : tok.encode(d)) out.push_back(id);
    out.push_back(tok.eos_id());
  }
  return out;
}

std::vector<std::string> split_docs(const std::string& text) {
  std::vector<std::string> docs;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find("\n\n", i);
    if (j == std::string::npos) j = text.size();
    std::string d = text.substr(i, j - i);
    while (!d.empty() && d.back() == '\n') d.pop_back();
    if (!d.empty()) docs.push_back(d);
    i = j + 2;
  }
  return docs;
}

std::string data_prepare_error_of(const PrepareOptions& o) {
  try {
    data_prepare(o);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(DataPrepare, ShardsHoldEachDocumentEncodedThenEos) {
  test::ScratchDir dir("prep");
  const std::string a = test::synthetic_corpus(300, 2), b = test::synthetic_corpus(150, 3);
  test::write_text(dir / "a.txt", a);
  test::write_text(dir / "b.txt.gz", b);
  PrepareOptions o = options({dir / "a.txt", dir / "b.txt.gz"}, dir / "out");
  o.shard_tokens = 3000;  // several shards per split
  const PrepareSummary s = data_prepare(o);
  EXPECT_TRUE(s.word_cache);

  std::vector<std::string> docs = split_docs(a);
  for (auto& d : split_docs(b)) docs.push_back(d);
  EXPECT_EQ(split_tokens(dir / "out", "train"), expected_tokens(docs, false, 0.1));
  EXPECT_EQ(split_tokens(dir / "out", "val"), expected_tokens(docs, true, 0.1));
  EXPECT_GT(s.documents[1], 0u);
  EXPECT_EQ(s.documents[0] + s.documents[1], docs.size());

  const ShardIndex idx = shard_index_read(dir / "out");
  EXPECT_GT(idx.splits.at("train").shards.size(), 2u);
  EXPECT_EQ(idx.token_bytes, 2u);
  EXPECT_EQ(idx.vocab_size, 400u);
  EXPECT_EQ(idx.tokenizer_crc32, Tokenizer(test::test_tokenizer_path()).checksum());
}

TEST(DataPrepare, WordCacheChangesNothing) {
  test::ScratchDir dir("prep");
  test::write_text(dir / "a.txt", test::synthetic_corpus(300, 4));
  data_prepare(options({dir / "a.txt"}, dir / "cached"));
  PrepareOptions o = options({dir / "a.txt"}, dir / "whole");
  o.word_cache = false;
  EXPECT_FALSE(data_prepare(o).word_cache);
  for (const char* f : {"train-00000.bin", "val-00000.bin"})
    EXPECT_EQ(read_file(dir / (std::string("cached/") + f)),
              read_file(dir / (std::string("whole/") + f)))
        << f;
}

TEST(DataPrepare, OutputIsByteIdenticalForAnyThreadCount) {
  test::ScratchDir dir("prep");
  // > 1 MB so that several chunks are in flight.
  std::string big;
  for (int i = 0; i < 12; ++i) big += test::synthetic_corpus(400, 10 + i) + "\n";
  test::write_text(dir / "big.txt", big);
  for (int t : {1, 2, 3, 5})
    data_prepare(options({dir / "big.txt"}, dir / ("t" + std::to_string(t)), t));
  for (const auto& e : fs::directory_iterator(dir / "t1")) {
    for (int t : {2, 3, 5}) {
      EXPECT_EQ(read_file(e.path().string()),
                read_file(dir / ("t" + std::to_string(t) + "/" + e.path().filename().string())))
          << e.path().filename() << " with " << t << " threads";
    }
  }
}

TEST(DataPrepare, ReadsJsonlWithAConfigurableField) {
  test::ScratchDir dir("prep");
  test::write_text(
      dir / "d.jsonl.gz",
      "{\"body\": \"first document\\nwith two lines\", \"id\": 1}\n\n{\"body\": \"second ünï\"}\n");
  PrepareOptions o = options({dir / "*.jsonl.gz"}, dir / "out");
  o.text_field = "body";
  o.val_fraction = 0.0;
  data_prepare(o);
  EXPECT_EQ(split_tokens(dir / "out", "train"),
            expected_tokens({"first document\nwith two lines", "second ünï"}, false, 0.0));
}

TEST(DataPrepare, BadInputsFailClearlyAndLeaveNoShards) {
  test::ScratchDir dir("prep");
  test::write_text(dir / "good.txt", test::synthetic_corpus(50, 5));
  test::write_text(dir / "empty.txt", "\n\n   \n");
  test::write_text(dir / "bad_utf8.txt", "fine text\n\nsecond doc \xff\xfe here\n");
  test::write_text(dir / "bad.jsonl", "{\"text\": \"ok\"}\n{not json}\n");
  test::write_text(dir / "nofield.jsonl", "{\"body\": \"x\"}\n");
  test::write_text(dir / "corrupt.txt.gz", "this is not gzip data but ends in .gz");
  fs::create_directories(dir / "full");
  test::write_text(dir / "full/keep.txt", "x");
  struct Case {
    std::vector<std::string> inputs;
    std::string out;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{dir / "missing.txt"}, "o1", "missing.txt: no such file"},
      {{dir / "*.none"}, "o2", "*.none: the pattern matches no file"},
      {{dir / "empty.txt"}, "o3", "the inputs hold no document"},
      {{dir / "good.txt", dir / "bad_utf8.txt"}, "o4", "bad_utf8.txt:3: invalid UTF-8"},
      {{dir / "bad.jsonl"}, "o5", "bad.jsonl:2: invalid JSON"},
      {{dir / "nofield.jsonl"}, "o6", "nofield.jsonl:1: no string field 'text'"},
      {{dir / "good.txt"}, "full", "full: exists and is not empty (pass --overwrite"},
      {{dir / "full"}, "o8", ": not a regular file"},
      {{dir.path.string()}, "o9", "/o9: lies inside the input (--input "},  // the output contract
  };
  for (const Case& c : cases) {
    const std::string err = data_prepare_error_of(options(c.inputs, dir / c.out));
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.out << ": got '" << err << "'";
    if (c.out != "full") {
      EXPECT_FALSE(fs::exists(dir / c.out)) << c.out;
    }
  }
  EXPECT_TRUE(fs::exists(dir / "full/keep.txt"));
  for (const auto& e : fs::directory_iterator(dir.path))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

TEST(DataPrepare, OverwriteReplacesAnEarlierOutput) {
  test::ScratchDir dir("prep");
  test::write_text(dir / "a.txt", test::synthetic_corpus(40, 6));
  test::write_text(dir / "b.txt", test::synthetic_corpus(60, 7));
  data_prepare(options({dir / "a.txt"}, dir / "out"));
  PrepareOptions o = options({dir / "b.txt"}, dir / "out");
  o.overwrite = true;
  data_prepare(o);
  EXPECT_EQ(shard_index_read(dir / "out").inputs, std::vector<std::string>{dir / "b.txt"});
}

TEST(Shards, CorruptionIsDetected) {
  test::ScratchDir dir("shard");
  test::write_text(dir / "a.txt", test::synthetic_corpus(100, 8));
  data_prepare(options({dir / "a.txt"}, dir / "out"));
  const std::string shard = dir / "out/train-00000.bin";
  const std::string good = read_file(shard);
  auto expect_error = [&](const std::string& bytes, const std::string& what) {
    write_file_atomic(shard, [&](FileWriter& w) { w.write(bytes); });
    try {
      TokenDataset(dir / "out", "train", 16);
      ADD_FAILURE() << "no error for " << what;
    } catch (const ShardError& e) {
      EXPECT_NE(std::string(e.what()).find("train-00000.bin"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  std::string flipped = good;
  flipped[kShardHeaderBytes + 10] ^= 0x04;
  expect_error(flipped, "checksum mismatch");
  expect_error(good.substr(0, good.size() - 6), "truncated or corrupted");
  std::string magic = good;
  magic[0] = 'X';
  expect_error(magic, "wrong magic");
  std::string version = good;
  version[8] = 9;
  expect_error(version, "shard format version 9");
  expect_error(good.substr(0, 20), "shorter than the header");
  // A consistent shard that is not the one the index names.
  std::string other = good;
  other[kShardHeaderBytes] ^= 0x01;
  const uint32_t crc = crc32_of(other.data() + kShardHeaderBytes, other.size() - kShardHeaderBytes);
  std::memcpy(&other[24], &crc, 4);
  expect_error(other, "does not match index.json");
}

TEST(Shards, VocabularyMustFitTheModelAndTheTokenizerMatch) {
  test::ScratchDir dir("shard");
  test::write_text(dir / "a.txt", test::synthetic_corpus(30, 9));
  data_prepare(options({dir / "a.txt"}, dir / "out"));
  const ShardIndex idx = shard_index_read(dir / "out");
  EXPECT_NO_THROW(check_vocabulary(idx, dir / "out", 400, test::test_tokenizer_path()));
  try {
    check_vocabulary(idx, dir / "out", 256, "");
    FAIL();
  } catch (const ShardError& e) {
    EXPECT_NE(std::string(e.what()).find("400 pieces, more than model.vocab_size = 256"),
              std::string::npos)
        << e.what();
  }
  // Another tokenizer: same vocabulary size, different model.
  test::write_text(dir / "other.txt", test::synthetic_corpus(300, 11));
  TokenizerTrainOptions t;
  t.inputs = {dir / "other.txt"};
  t.vocab_size = 400;
  t.model = TokenizerModel::Unigram;
  t.out_dir = dir / "tok2";
  const std::string other = tokenizer_train(t);
  EXPECT_THROW(check_vocabulary(idx, dir / "out", 400, other), ShardError);
}
