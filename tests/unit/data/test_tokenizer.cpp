// Tokenizer training, encoding and the exactness of the word cache used by data prepare.
#include "normlab/data/text_input.h"
#include "normlab/data/tokenizer.h"
#include "support.h"

using namespace normlab;

namespace {

// One tokenizer per model type, trained once for the suite on a synthetic corpus.
class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::ScratchDir("tok");
    test::write_text(*dir_ / "corpus.txt", test::synthetic_corpus(400, 1));
    for (auto model : {TokenizerModel::Bpe, TokenizerModel::Unigram}) {
      TokenizerTrainOptions o;
      o.inputs = {*dir_ / "corpus.txt"};
      o.vocab_size = 400;
      o.model = model;
      o.out_dir = *dir_ / (model == TokenizerModel::Bpe ? "bpe" : "unigram");
      tokenizer_train(o);
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static Tokenizer bpe() { return Tokenizer(*dir_ / "bpe/tokenizer.model"); }
  static Tokenizer unigram() { return Tokenizer(*dir_ / "unigram/tokenizer.model"); }
  static test::ScratchDir* dir_;
};
test::ScratchDir* TokenizerTest::dir_ = nullptr;

// Encoding word by word, as data prepare's cache does.
std::vector<int32_t> by_words(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    if (j > i) {
      const auto ids = tok.encode(text.substr(i, j - i));
      out.insert(out.end(), ids.begin(), ids.end());
    }
    i = j;
  }
  return out;
}

TEST_F(TokenizerTest, SpecialTokensAndVocabulary) {
  EXPECT_EQ(bpe().vocab_size(), 400);
  EXPECT_LE(unigram().vocab_size(), 400);  // unigram may stop short on a small corpus
  for (const Tokenizer& tok : {bpe(), unigram()}) {
    EXPECT_EQ(tok.piece(0), "<unk>");
    EXPECT_EQ(tok.bos_id(), 1);
    EXPECT_EQ(tok.eos_id(), 2);
    EXPECT_EQ(tok.piece(3), "<0x00>");  // byte fallback pieces follow the specials
    EXPECT_TRUE(tok.splits_at_whitespace());
  }
}

TEST_F(TokenizerTest, RoundTripsTextIncludingUnseenCharactersThroughByteFallback) {
  const Tokenizer tok = bpe();
  const std::string text = "In the beginning: 漢字 ✓ Ω and naïve café";
  const auto ids = tok.encode(text);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 0), 0) << "no <unk> with byte fallback";
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_THROW(tok.decode({5000}), TokenizerError);
}

// Bytes that are not UTF-8 are refused by both models, naming the first bad byte's offset: a
// SentencePiece model encoded each as U+FFFD (the unknown piece) silently, while `data prepare`
// refused them in a document.
TEST_F(TokenizerTest, TextThatIsNotUtf8IsRefusedNamingTheByte) {
  for (const Tokenizer& tok : {bpe(), unigram()}) {
    for (const auto& [text, at] : {std::pair<std::string, int>{"ab\xff cd", 2},
                                   {"In the \xc3", 7},                  // a sequence cut short
                                   {"caf\xc3\xa9 \xed\xa0\x80", 6}}) {  // a surrogate
      const std::string e = test::error_message([&] { tok.encode(text); });
      EXPECT_NE(e.find("not valid UTF-8 (byte " + std::to_string(at) + ")"), std::string::npos)
          << e;
    }
    EXPECT_FALSE(tok.encode("caf\xc3\xa9").empty());
  }
}

// The property data prepare's word cache relies on: for models that split at whitespace, a
// document's encoding is the concatenation of its words' encodings, here on text with doubled
// spaces, tabs, newlines, NFKC-normalised characters (ﬁ, ², full-width and no-break spaces).
TEST_F(TokenizerTest, DocumentEncodingIsTheConcatenationOfWordEncodings) {
  const std::string tricky =
      "  leading spaces\tand\ttabs\nnew lines  double  spaces ﬁne x² ＡＢＣ　ideographic\u00a0nbsp "
      "zero\u200bwidth 🙂🙂 trailing   \n";
  for (const Tokenizer& tok : {bpe(), unigram()}) {
    EXPECT_EQ(tok.encode(tricky), by_words(tok, tricky));
    const std::string corpus = test::synthetic_corpus(200, 7);
    EXPECT_EQ(tok.encode(corpus), by_words(tok, corpus));
  }
}

TEST_F(TokenizerTest, TrainingRejectsBadRequests) {
  TokenizerTrainOptions o;
  o.inputs = {*dir_ / "corpus.txt"};
  o.out_dir = *dir_ / "x";
  o.vocab_size = 100;
  EXPECT_THROW(tokenizer_train(o), TokenizerError);  // below 256 bytes + specials
  o.vocab_size = 400;
  o.inputs = {*dir_ / "missing.txt"};
  try {
    tokenizer_train(o);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.txt: no such file"), std::string::npos);
  }
  EXPECT_THROW(Tokenizer(*dir_ / "corpus.txt"), TokenizerError);  // not a model
}

}  // namespace
