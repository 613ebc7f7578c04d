// Hugging Face tokenizer.json files through Tokenizer: a hand-made byte-level BPE whose ids are
// derived by hand from its merges, and the errors for files normlab does not read. The
// comparison with the `tokenizers` library on trained files is tests/cli/hf_tokenizer.sh.
#include <gmock/gmock.h>

#include <functional>
#include <nlohmann/json.hpp>

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
    const std::string& decoder =
        R"({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true})") {
  return R"({"version": "1.0", "added_tokens": [{"id": 7, "content": "<|endoftext|>",
    "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
    "normalizer": )" +
         normalizer + R"(, "pre_tokenizer": )" + pre_tokenizer +
         R"(, "post_processor": null, "decoder": )" + decoder + R"(, "model": {"type": ")" +
         model_type + R"(", "dropout": null, "unk_token": null, "vocab": {"a": 0, "b": 1, "c": 2,
    "\u0120": 3, "ab": 4, "\u0120ab": 5, "abc": 6, "<|endoftext|>": 7, "\u00c3": 8, "\u00a9": 9, "\u00c3\u00a9": 10},
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
      "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]})";
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
  EXPECT_THAT(e, HasSubstr("nopre.json: pre_tokenizer: missing"));
  e = refused("dec.json",
              tokenizer_json("null", kByteLevel, "BPE", "[]", R"({"type": "WordPiece"})"));
  EXPECT_THAT(e, HasSubstr("dec.json: decoder.type WordPiece is not supported"));
  e = refused("merge.json", tokenizer_json("null", kByteLevel, "BPE", R"(["a x"])"));
  EXPECT_THAT(e, HasSubstr("merge.json: model.merges[0]: \"x\" is not in model.vocab"));
  e = refused("array.json", "[1, 2]");
  EXPECT_THAT(e, HasSubstr("array.json: not a tokenizer.json"));

  // No end-of-text token: loading works (encode, decode), asking for EOS does not.
  std::string no_eos = tokenizer_json("null", kByteLevel);
  for (size_t at; (at = no_eos.find("<|endoftext|>")) != std::string::npos;)
    no_eos.replace(at, 13, "<|x|>");
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

namespace {

// The error of the fixture's tokenizer.json after `edit`, "(no error)" when it loads.
std::string error_after(const std::function<void(nlohmann::json&)>& edit,
                        const std::string& pre_tokenizer = kByteLevel) {
  test::ScratchDir dir("hftok");
  nlohmann::json j = nlohmann::json::parse(tokenizer_json("null", pre_tokenizer));
  edit(j);
  test::write_text(dir / "tok.json", j.dump());
  return error_of(dir / "tok.json");
}

const std::string kSplit = R"({"type": "Sequence", "pretokenizers": [{"type": "Split",
    "pattern": {"Regex": " ?\\p{L}+"}, "behavior": "Isolated", "invert": false}, {"type":
    "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]})";

}  // namespace

// What the `tokenizers` library refuses on load, for the parts normlab reads (each case checked
// against tokenizers 0.23's Tokenizer.from_str), is refused in one line naming the key.
TEST(HfTokenizer, RefusesWhatTheTokenizersLibraryRefuses) {
  using J = nlohmann::json;
  const std::vector<std::pair<std::function<void(J&)>, std::string>> cases = {
      {[](J& j) { j["model"].erase("merges"); },
       "tok.json: model.merges: missing (a BPE model lists its merges"},
      {[](J& j) { j["model"]["merges"] = nullptr; },
       "tok.json: model.merges: null is not an array"},
      {[](J& j) { j["model"].erase("vocab"); }, "tok.json: model.vocab: missing"},
      {[](J& j) { j["model"]["vocab"] = J::array(); }, "model.vocab: an array is not an object"},
      {[](J& j) { j["model"]["vocab"]["c"] = "2"; },
       "model.vocab[\"c\"]: \"2\" is not a token id (an integer from 0)"},
      {[](J& j) { j["model"]["vocab"]["c"] = -1; }, "model.vocab[\"c\"]: -1 is not a token id"},
      {[](J& j) { j["model"]["vocab"]["c"] = 2.0; }, "model.vocab[\"c\"]: 2.0 is not a token id"},
      {[](J& j) { j["model"]["merges"] = {"a b c"}; },
       "model.merges[0]: \"a b c\" is not two tokens separated by one space"},
      {[](J& j) { j["model"]["merges"] = {"ab"}; }, "model.merges[0]: \"ab\" is not two tokens"},
      {[](J& j) { j["model"]["merges"] = {"b a"}; },
       "model.merges[0]: the result \"ba\" is not in model.vocab"},
      {[](J& j) { j["model"]["merges"] = {" a"}; }, "model.merges[0]: \"\" is not in model.vocab"},
      {[](J& j) { j["model"]["merges"] = J::parse(R"(["a b", ["ab", "c"]])"); },
       "model.merges[1]: an array is not of the form of model.merges[0]"},
      {[](J& j) { j["model"]["merges"] = J::parse(R"([["a", "b", "c"]])"); },
       "model.merges[0]: an array is neither \"A B\" nor [\"A\", \"B\"]"},
      {[](J& j) { j["model"]["merges"] = {1}; }, "model.merges[0]: 1 is neither"},
      {[](J& j) { j["model"] = nullptr; }, "tok.json: model: null is not an object"},
      {[](J& j) { j.erase("model"); }, "tok.json: model: missing"},
      {[](J& j) { j["model"]["type"] = 3; }, "model.type: 3 is not a string"},
      {[](J& j) { j["model"]["dropout"] = 1.5; }, "model.dropout: 1.5 is not from 0 to 1"},
      {[](J& j) { j["model"]["dropout"] = "x"; }, "model.dropout: \"x\" is not a number"},
      {[](J& j) { j["model"]["unk_token"] = 3; }, "model.unk_token: 3 is not a string"},
      {[](J& j) { j["model"]["fuse_unk"] = "x"; }, "model.fuse_unk: \"x\" is not true or false"},
      {[](J& j) { j["model"]["byte_fallback"] = 1; }, "model.byte_fallback: 1 is not true or"},
      {[](J& j) { j["model"]["continuing_subword_prefix"] = 1; },
       "model.continuing_subword_prefix: 1 is not a string"},
      {[](J& j) { j["version"] = "2.0"; }, "tok.json: version: \"2.0\" is not a version"},
      {[](J& j) { j["version"] = 1; }, "tok.json: version: 1 is not a string"},
      {[](J& j) { j["foo"] = 1; }, "tok.json: \"foo\": not a key of a tokenizer.json"},
      {[](J& j) { j["added_tokens"] = nullptr; }, "tok.json: added_tokens: null is not an array"},
      {[](J& j) { j["added_tokens"][0] = "x"; }, "added_tokens[0]: \"x\" is not an object"},
      {[](J& j) { j["added_tokens"][0].erase("special"); }, "added_tokens[0].special: missing"},
      {[](J& j) { j["added_tokens"][0].erase("normalized"); },
       "added_tokens[0].normalized: missing"},
      {[](J& j) { j["added_tokens"][0].erase("id"); }, "added_tokens[0].id: missing"},
      {[](J& j) { j["added_tokens"][0]["lstrip"] = nullptr; },
       "added_tokens[0].lstrip: null is not true or false"},
      {[](J& j) { j["added_tokens"][0]["special"] = "yes"; },
       "added_tokens[0].special: \"yes\" is not true or false"},
      {[](J& j) { j["added_tokens"][0]["content"] = 5; },
       "added_tokens[0].content: 5 is not a string"},
      {[](J& j) { j["added_tokens"][0]["id"] = -1; }, "added_tokens[0].id: -1 is not a token id"},
      {[](J& j) { j["pre_tokenizer"].erase("trim_offsets"); },
       "tok.json: pre_tokenizer.trim_offsets: missing"},
      {[](J& j) { j["pre_tokenizer"]["use_regex"] = nullptr; },
       "pre_tokenizer.use_regex: null is not true or false"},
      {[](J& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"}};
       },
       "pre_tokenizer.pretokenizers: missing"},
      {[](J& j) {
         j["decoder"] = {{"type", "ByteLevel"}};
       },
       "decoder.add_prefix_space: missing"},
      {[](J& j) {
         j["normalizer"] = {{"type", "Sequence"}};
       },
       "normalizer.normalizers: missing"},
      {[](J& j) { j["normalizer"] = J::array(); }, "normalizer: an array is not an object"},
      {[](J& j) {
         j["normalizer"] = {{"type", "Lower\ncase"}};
       },
       "tok.json: normalizer.type \"Lower\\ncase\" is not supported"},
  };
  for (const auto& [edit, want] : cases) {
    const std::string e = error_after(edit);
    EXPECT_THAT(e, HasSubstr(want));
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;  // one line
  }

  const std::vector<std::pair<std::function<void(J&)>, std::string>> splits = {
      {[](J& j) { j["pre_tokenizer"]["pretokenizers"][0].erase("invert"); },
       "pre_tokenizer.pretokenizers[0].invert: missing"},
      {[](J& j) { j["pre_tokenizer"]["pretokenizers"][0].erase("behavior"); },
       "pre_tokenizer.pretokenizers[0].behavior: missing"},
      {[](J& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Foo"; },
       "pre_tokenizer.pretokenizers[0].behavior: \"Foo\" is not a behavior of Split"},
      {[](J& j) {
         j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", 5}};
       },
       "pre_tokenizer.pretokenizers[0].pattern.Regex: 5 is not a string"},
      {[](J& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = "a"; },
       "pre_tokenizer.pretokenizers[0].pattern: \"a\" is not {\"Regex\": ...} or"},
      {[](J& j) {
         j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "a"}, {"String", "b"}};
       },
       "pre_tokenizer.pretokenizers[0].pattern: not {\"Regex\": ...} or {\"String\": ...}"},
      {[](J& j) { j["pre_tokenizer"]["pretokenizers"][1].erase("add_prefix_space"); },
       "pre_tokenizer.pretokenizers[1].add_prefix_space: missing"},
  };
  for (const auto& [edit, want] : splits) {
    const std::string e = error_after(edit, kSplit);
    EXPECT_THAT(e, HasSubstr(want));
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  // Accepted as the library accepts them: no model.type (files of old versions), null options.
  EXPECT_EQ(error_after([](J& j) { j["model"].erase("type"); }), "(no error)");
  EXPECT_EQ(error_after([](J& j) {
              for (const char* k : {"dropout", "unk_token", "fuse_unk", "byte_fallback",
                                    "ignore_merges", "continuing_subword_prefix"})
                j["model"][k] = nullptr;
              j["model"]["merges"] = J::parse(R"([["a", "b"], ["\u0120", "ab"]])");
              j["pre_tokenizer"].erase("use_regex");
            }),
            "(no error)");
}

// Duplicate ids, and the ids of added tokens: the `tokenizers` library gives an added token the
// id of its content in model.vocab, else the next id after the model's tokens, in the file's
// order, whatever the file says (and only warns); normlab refuses a file whose ids are not the
// ones the library gives, and a vocabulary where two tokens share an id.
TEST(HfTokenizer, AddedTokenIdsAreTheLibrarys) {
  using J = nlohmann::json;
  auto add = [](J& j, const std::string& content, int64_t id) {
    j["added_tokens"].push_back({{"id", id},
                                 {"content", content},
                                 {"single_word", false},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"special", true}});
  };
  EXPECT_THAT(error_after([](J& j) { j["model"]["vocab"]["c"] = 0; }),
              HasSubstr("tok.json: model.vocab[\"c\"]: id 0 is also the id of \"a\""));
  EXPECT_THAT(error_after([](J& j) { j["added_tokens"][0]["id"] = 8; }),
              HasSubstr("added_tokens[0].id: 8, but the tokenizers library gives "
                        "\"<|endoftext|>\" id 7 (its id in model.vocab)"));
  EXPECT_THAT(error_after([&](J& j) { add(j, "<x>", 12); }),
              HasSubstr("added_tokens[1].id: 12, but the tokenizers library gives \"<x>\" id 11 "
                        "(new added tokens follow the model's 11 tokens, in the file's order)"));
  EXPECT_EQ(error_after([&](J& j) {
              add(j, "<x>", 11);
              add(j, "<y>", 12);
              add(j, "<x>", 11);  // a repeat keeps its id
              add(j, "", 99);     // skipped, as the library skips it
            }),
            "(no error)");
  // Without "<|endoftext|>" in the vocabulary (a gap at 7), the library gives it 10, the id of
  // the model's "\u00c3\u00a9".
  auto gap = [](J& j) { j["model"]["vocab"].erase("<|endoftext|>"); };
  EXPECT_THAT(error_after(gap), HasSubstr("added_tokens[0].id: 7, but the tokenizers library "
                                          "gives \"<|endoftext|>\" id 10"));
  EXPECT_THAT(error_after([&](J& j) {
                gap(j);
                j["added_tokens"][0]["id"] = 10;
              }),
              HasSubstr("added_tokens[0].id: 10 is also the id of model.vocab[\"\u00c3\u00a9\"]"));
}

// Ids are bounded before anything is sized by them: a huge one is one line naming the key and
// the value, never an allocation failure.
TEST(HfTokenizer, HugeIdsAreRefusedBeforeAllocating) {
  using J = nlohmann::json;
  for (const uint64_t id : {uint64_t{16777216}, uint64_t{2000000000}, uint64_t{4000000000},
                            uint64_t{1000000000000000000}, ~uint64_t{0}}) {
    const std::string value = std::to_string(id);
    EXPECT_THAT(error_after([&](J& j) { j["model"]["vocab"]["c"] = id; }),
                HasSubstr("tok.json: model.vocab[\"c\"]: id " + value +
                          " is too large: normlab reads token ids up to 16777215"));
    EXPECT_THAT(error_after([&](J& j) { j["added_tokens"][0]["id"] = id; }),
                HasSubstr("tok.json: added_tokens[0].id: id " + value + " is too large"));
  }
  test::ScratchDir dir("hftok");
  std::string text = tokenizer_json("null", kByteLevel);
  text.replace(text.find("\"c\": 2"), 6, "\"c\": 1e30");
  test::write_text(dir / "float.json", text);
  EXPECT_THAT(error_of(dir / "float.json"),
              HasSubstr("model.vocab[\"c\"]: 1e+30 is not a token id"));
  // The largest id loads, sized by the ids the file has.
  const std::string largest = error_after([](J& j) {
    j["model"]["vocab"]["zz"] = 16777215;
    j["model"]["vocab"]["zzz"] = 16777214;
  });
  EXPECT_EQ(largest, "(no error)");
  // Deep nesting is described, never printed.
  text = tokenizer_json("null", kByteLevel);
  text.replace(text.find("\"added_tokens\": ["), 17,
               "\"added_tokens\": [" + std::string(100000, '[') + std::string(100000, ']') + ", ");
  test::write_text(dir / "deep.json", text);
  EXPECT_THAT(error_of(dir / "deep.json"),
              HasSubstr("deep.json: added_tokens[0]: an array is not an object"));
}

// A pre-tokenizer's regex that does not compile, or that PCRE2 gives up matching, is named by
// its key in the file.
TEST(HfTokenizer, RegexErrorsNameTheKey) {
  using J = nlohmann::json;
  EXPECT_THAT(
      error_after([](J& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a"; },
                  kSplit),
      HasSubstr("tok.json: pre_tokenizer.pretokenizers[0].pattern.Regex: \"(a\": missing closing "
                "parenthesis (at offset 2)"));
  EXPECT_THAT(error_after(
                  [](J& j) {  // a second Split stage, its pattern on two lines
                    J& stages = j["pre_tokenizer"]["pretokenizers"];
                    J split = stages[0];
                    split["pattern"]["Regex"] = "a\n[";
                    stages.insert(stages.begin() + 1, split);
                  },
                  kSplit),
              HasSubstr("pre_tokenizer.pretokenizers[1].pattern.Regex: \"a\\n[\": missing "
                        "terminating ] for character class (at offset 3)"));
  test::ScratchDir dir("hftok");
  J j = J::parse(tokenizer_json("null", kSplit));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a+)+$";
  test::write_text(dir / "slow.json", j.dump());
  const Tokenizer tok(dir / "slow.json");
  try {
    tok.encode(std::string(40, 'a') + "!");
    FAIL() << "a catastrophic regex matched";
  } catch (const TokenizerError& e) {
    EXPECT_THAT(e.what(), HasSubstr("slow.json: pre_tokenizer.pretokenizers[0].pattern.Regex: "
                                    "regex match: "));
  }
}
