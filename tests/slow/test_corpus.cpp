// The built-in corpus end to end (slow label): tools/prepare_corpus.sh has prepared it into
// $NORMLAB_KJV_DIR (CTest fixture kjv_corpus). The word-cached, 2-thread shards must equal the
// whole-document encoding of every chapter, and a 1-thread run without the cache.
#include <cstdlib>

#include "normlab/data/data_prepare.h"
#include "normlab/data/loader.h"
#include "normlab/data/shard.h"
#include "normlab/data/text_input.h"
#include "normlab/data/tokenizer.h"
#include "normlab/util/file_io.h"
#include "support.h"

using namespace normlab;

namespace {

std::string kjv() {
  const char* d = std::getenv("NORMLAB_KJV_DIR");
  return d ? d : "";
}

}  // namespace

TEST(Corpus, KjvShardsEqualWholeDocumentEncoding) {
  if (kjv().empty()) GTEST_SKIP() << "NORMLAB_KJV_DIR not set (run through ctest)";
  const Tokenizer tok(kjv() + "/tokenizer.model");
  std::vector<int64_t> expected[2];
  uint64_t docs[2] = {0, 0};
  read_documents(kjv() + "/corpus.txt", "text", [&](std::string&& doc) {
    const int split = is_validation_document(doc, 0.02) ? 1 : 0;
    for (int32_t id : tok.encode(doc)) expected[split].push_back(id);
    expected[split].push_back(tok.eos_id());
    ++docs[split];
  });
  EXPECT_EQ(docs[0] + docs[1], 1189u) << "chapters of the King James Bible";
  const ShardIndex idx = shard_index_read(kjv() + "/shards");
  const char* names[2] = {"train", "val"};
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(idx.splits.at(names[s]).documents, docs[s]);
    std::vector<int64_t> got;
    for (const auto& e : idx.splits.at(names[s]).shards) {
      ShardFile f(kjv() + "/shards/" + e.file);
      const size_t at = got.size();
      got.resize(at + f.header().tokens);
      f.copy(0, f.header().tokens, got.data() + at);
    }
    EXPECT_EQ(got, expected[s]) << names[s];
  }
}

TEST(Corpus, KjvShardsAreTheSameWithOneThreadAndNoWordCache) {
  if (kjv().empty()) GTEST_SKIP() << "NORMLAB_KJV_DIR not set (run through ctest)";
  test::ScratchDir dir("kjv");
  PrepareOptions o;
  o.tokenizer = kjv() + "/tokenizer.model";
  o.inputs = {kjv() + "/corpus.txt"};
  o.out_dir = dir / "out";
  o.val_fraction = 0.02;
  o.threads = 1;
  o.word_cache = false;
  data_prepare(o);
  for (const char* f : {"train-00000.bin", "val-00000.bin"})
    EXPECT_EQ(read_file(dir / (std::string("out/") + f)), read_file(kjv() + "/shards/" + f)) << f;
}
