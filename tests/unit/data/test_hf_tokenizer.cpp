// Hugging Face tokenizer.json files through Tokenizer: a hand-made byte-level BPE whose ids are
// derived by hand from its merges, and the errors for files normlab does not read. The
// comparison with the `tokenizers` library on trained files is tests/cli/hf_tokenizer.sh.
#include <gmock/gmock.h>

#include "data/hf_pretokenizer.h"
#include "normlab/data/tokenizer.h"
#include "support.h"

using namespace normlab;
using ::testing::HasSubstr;

namespace {

// Byte-level strings: Ġ (U+0120) stands for the space byte, Ã (U+00C3) and © (U+00A9) for the
// bytes C3 and A9 of "é" (U+00E9).
std::string tokenizer_json(
    const std::string& normalizer, const std::string& pre_tokenizer,
    const std::string& model_type = "BPE",
    const std::string& merges = R"(["a b", "\u0120 ab", "ab c", "\u00c3 \u00a9"])",
    const std::string& decoder = R"({"type": "ByteLevel"})") {
  return R"({"version": "1.0", "added_tokens": [{"id": 7, "content": "<|endoftext|>",
    "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
    "normalizer": )" +
         normalizer + R"(, "pre_tokenizer": )" + pre_tokenizer +
         R"(, "post_processor": null, "decoder": )" + decoder + R"(, "model": {"type": ")" +
         model_type + R"(", "dropout": null, "unk_token": null, "vocab": {"a": 0, "b": 1, "c": 2,
    "\u0120": 3, "ab": 4, "\u0120ab": 5, "abc": 6, "\u00c3": 8, "\u00a9": 9, "\u00c3\u00a9": 10},
    "merges": )" +
         merges + "}}";
}

const std::string kByteLevel =
    R"({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true})";

std::string error_of(const std::string& path) {
  try {
    Tokenizer tok(path);
    return "(no error)";
  } catch (const Error& e) {
    return e.what();
  }
}

}  // namespace

TEST(HfTokenizer, MergesByRankAndMatchesSpecialTokensFirst) {
  test::ScratchDir dir("hftok");
  test::write_text(dir / "tokenizer.json", tokenizer_json("null", kByteLevel));
  const Tokenizer tok(dir / "tokenizer.json");
  EXPECT_EQ(tok.vocab_size(), 11);
  EXPECT_EQ(tok.eos_id(), 7);  // <|endoftext|>
  EXPECT_EQ(tok.bos_id(), -1);
  EXPECT_FALSE(tok.splits_at_whitespace());
  // GPT-2's regex: "ab", " abc". "a b" (rank 0) first, then "Ġ ab" (rank 1) before "ab c"
  // (rank 2): Ġab, c. Merging by another order would give Ġ, abc (3, 6).
  EXPECT_EQ(tok.encode("ab abc"), (std::vector<int32_t>{4, 5, 2}));
  // The special token is found before pre-tokenization, also inside a word.
  EXPECT_EQ(tok.encode("ab<|endoftext|>ab"), (std::vector<int32_t>{4, 7, 4}));
  // A character outside the vocabulary with no unk_token is dropped, as tokenizers does.
  EXPECT_EQ(tok.encode("abd"), (std::vector<int32_t>{4}));
  EXPECT_EQ(tok.decode({4, 5, 2, 7, 3}), "ab abc<|endoftext|> ");
  EXPECT_EQ(tok.piece(5), "\u0120ab");
  EXPECT_EQ(tok.token_byte_lengths(),
            (std::vector<int32_t>{1, 1, 1, 1, 2, 3, 3, 0, 1, 1, 2}));  // special: 0
  try {
    tok.decode({11});
    FAIL() << "an id beyond the vocabulary decoded";
  } catch (const TokenizerError& e) {
    EXPECT_THAT(e.what(), HasSubstr("token id 11 is outside the vocabulary of 11"));
  }
}

TEST(HfTokenizer, NormalizesAndSplitsByRegex) {
  test::ScratchDir dir("hftok");
  // Llama 3's layout: Split by a regex, then ByteLevel without its own regex.
  const std::string split =
      R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex":
      " ?\\p{L}+"}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel",
      "add_prefix_space": false, "use_regex": false}]})";
  test::write_text(dir / "nfc.json", tokenizer_json(R"({"type": "NFC"})", split));
  test::write_text(dir / "none.json", tokenizer_json("null", split));
  // "e" + U+0301 is "é" (C3 A9) under NFC: Ã, © merge into 10. Unnormalized its bytes are 65
  // CC 81, none of them in the vocabulary.
  EXPECT_EQ(Tokenizer(dir / "nfc.json").encode("e\u0301"), (std::vector<int32_t>{10}));
  EXPECT_EQ(Tokenizer(dir / "none.json").encode("e\u0301"), (std::vector<int32_t>{}));
  // " abc" is one piece of the Split regex: Ġab, c as with GPT-2's regex.
  EXPECT_EQ(Tokenizer(dir / "none.json").encode("ab abc"), (std::vector<int32_t>{4, 5, 2}));
  EXPECT_EQ(Tokenizer(dir / "none.json").decode({10}), "\u00e9");
  EXPECT_EQ(Tokenizer(dir / "none.json").decode({8}), "\ufffd");  // a lone C3 byte
}

// \s in a pre-tokenizer regex is Unicode's White_Space, as in Oniguruma, the engine of the
// `tokenizers` library: U+00A0 and U+2028 are spaces, U+180E (a format character since Unicode
// 6.3) is not, though PCRE2 10.42's own \s matches it.
TEST(HfTokenizer, RegexSpacesAreWhiteSpace) {
  using Pieces = std::vector<std::pair<std::string, bool>>;
  auto split = [](const std::string& pattern, const std::string& text) {
    Pieces out;
    hf::Regex(pattern, false).split(text, [&](std::string_view p, bool matched) {
      out.emplace_back(std::string(p), matched);
    });
    return out;
  };
  EXPECT_EQ(split(R"(\s+)", "a\u180e\u00a0\u2028b"),
            (Pieces{{"a\u180e", false}, {"\u00a0\u2028", true}, {"b", false}}));
  EXPECT_EQ(split(R"([^\s]+)", "\u180e \u3000x"),
            (Pieces{{"\u180e", true}, {" \u3000", false}, {"x", true}}));
  EXPECT_EQ(split(R"(\S+)", "\u180e\u0085"), (Pieces{{"\u180e", true}, {"\u0085", false}}));
}

TEST(HfTokenizer, EndOfTextFromTokenizerConfig) {
  test::ScratchDir dir("hftok");
  test::write_text(dir / "tokenizer.json", tokenizer_json("null", kByteLevel));
  test::write_text(dir / "tokenizer_config.json", R"({"eos_token": {"content": "abc"},
                                                      "bos_token": "ab"})");
  const Tokenizer tok(dir / "tokenizer.json");
  EXPECT_EQ(tok.eos_id(), 6);
  EXPECT_EQ(tok.bos_id(), 4);
}

TEST(HfTokenizer, ErrorsNameTheFileAndTheComponent) {
  test::ScratchDir dir("hftok");
  auto refused = [&](const std::string& name, const std::string& text) {
    test::write_text(dir / name, text);
    return error_of(dir / name);
  };
  EXPECT_THAT(error_of(dir / "missing.json"), HasSubstr(dir / "missing.json"));
  std::string e = refused("broken.json", R"({"model": {"type": "BPE", "vocab": )");
  EXPECT_THAT(e, HasSubstr(dir / "broken.json" + ": not valid JSON"));
  e = refused("wordpiece.json", tokenizer_json("null", kByteLevel, "WordPiece"));
  EXPECT_THAT(e, HasSubstr(dir / "wordpiece.json" + ": model.type WordPiece is not supported"));
  e = refused("unigram.json", tokenizer_json("null", kByteLevel, "Unigram"));
  EXPECT_THAT(e, HasSubstr(dir / "unigram.json" + ": model.type Unigram is not supported"));
  e = refused("lower.json", tokenizer_json(R"({"type": "Lowercase"})", kByteLevel));
  EXPECT_THAT(e, HasSubstr("lower.json: normalizer.type Lowercase is not supported"));
  e = refused("meta.json", tokenizer_json("null", R"({"type": "Metaspace"})"));
  EXPECT_THAT(e, HasSubstr("meta.json: pre_tokenizer.type Metaspace is not supported"));
  e = refused("nopre.json", tokenizer_json("null", "null"));
  EXPECT_THAT(e, HasSubstr("nopre.json: no pre_tokenizer"));
  e = refused("dec.json",
              tokenizer_json("null", kByteLevel, "BPE", "[]", R"({"type": "WordPiece"})"));
  EXPECT_THAT(e, HasSubstr("dec.json: decoder.type WordPiece is not supported"));
  e = refused("merge.json", tokenizer_json("null", kByteLevel, "BPE", R"(["a x"])"));
  EXPECT_THAT(e,
              HasSubstr("merge.json: model: merge 0 (\"a x\"): a part is not in the vocabulary"));
  e = refused("regex.json", tokenizer_json("null", R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated"},
      {"type": "ByteLevel"}]})"));
  EXPECT_THAT(e, HasSubstr("regex.json: pre_tokenizer Split: regex \"(a\": missing closing"));
  e = refused("array.json", "[1, 2]");
  EXPECT_THAT(e, HasSubstr("array.json: not a tokenizer.json"));

  // No end-of-text token: loading works (encode, decode), asking for EOS does not.
  std::string no_eos = tokenizer_json("null", kByteLevel);
  no_eos.replace(no_eos.find("<|endoftext|>"), 13, "<|x|>");
  test::write_text(dir / "noeos.json", no_eos);
  const Tokenizer tok(dir / "noeos.json");
  EXPECT_EQ(tok.encode("ab"), (std::vector<int32_t>{4}));
  try {
    (void)tok.eos_id();
    FAIL() << "no error without an end-of-text token";
  } catch (const TokenizerError& err) {
    EXPECT_THAT(err.what(), HasSubstr("noeos.json: no end-of-text token"));
  }
}
