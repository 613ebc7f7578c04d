#include "data/hf_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "data/hf_bpe.h"
#include "data/hf_pretokenizer.h"
#include "normlab/data/tokenizer.h"
#include "normlab/util/file_io.h"

namespace normlab::hf {

// An entry of added_tokens (the id: the model's when the vocabulary has the content).
struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

// Added tokens by their text, matched leftmost-longest (as tokenizers' Aho-Corasick automaton).
class Matcher {
 public:
  Matcher() : nodes_(1) {}
  void add(const std::string& text, size_t token) {
    if (text.empty()) return;
    int32_t at = 0;
    for (const char c : text) {
      const auto [it, fresh] = nodes_[size_t(at)].next.emplace(c, int32_t(nodes_.size()));
      if (fresh) nodes_.emplace_back();
      at = it->second;
    }
    nodes_[size_t(at)].token = static_cast<int64_t>(token);
    first_[static_cast<unsigned char>(text[0])] = true;
  }
  // The first match at or after `from`: its start, end and token; false when none.
  bool find(std::string_view s, size_t from, size_t& start, size_t& end, size_t& token) const {
    for (size_t i = from; i < s.size(); ++i) {
      if (!first_[static_cast<unsigned char>(s[i])]) continue;
      int64_t found = -1;
      size_t at = 0;
      for (size_t j = i; j < s.size(); ++j) {
        const auto it = nodes_[at].next.find(s[j]);
        if (it == nodes_[at].next.end()) break;
        at = size_t(it->second);
        if (nodes_[at].token >= 0) {
          found = nodes_[at].token;
          end = j + 1;
        }
      }
      if (found >= 0) {
        start = i;
        token = size_t(found);
        return true;
      }
    }
    return false;
  }

 private:
  struct Node {
    std::map<char, int32_t> next;
    int64_t token = -1;
  };
  std::vector<Node> nodes_;
  bool first_[256] = {};
};

namespace {

using nlohmann::json;

// The code point that ends (or starts) `s`, or -1 for an empty string.
int32_t last_char(std::string_view s) {
  if (s.empty()) return -1;
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  utf8proc_int32_t cp = -1;
  utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                   static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
  return cp;
}
int32_t first_char(std::string_view s, size_t* len = nullptr) {
  if (s.empty()) return -1;
  utf8proc_int32_t cp = -1;
  const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                  static_cast<utf8proc_ssize_t>(s.size()), &cp);
  if (len) *len = n > 0 ? static_cast<size_t>(n) : 1;
  return cp;
}
// Unicode White_Space and regex \w (letters, marks, digits, connector punctuation).
bool is_space(int32_t c) {
  return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}
bool is_word(int32_t c) {
  if (c < 0) return false;
  const int cat = utf8proc_category(c);  // letters, marks and decimal digits are 1..9
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_ND) ||
         cat == UTF8PROC_CATEGORY_PC;
}

std::string type_of(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : std::string("(untyped)");
}

// Value of an optional key, its default when missing or null.
template <class T>
T value_or(const json& j, const char* key, T fallback) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : it->get<T>();
}

}  // namespace

struct HfTokenizer::Impl {
  std::string path;
  std::vector<AddedToken> added;
  std::unordered_map<int32_t, size_t> added_by_id;
  Matcher raw, normalized;  // tokens matched before / after normalization
  std::vector<Normalization> normalizers;
  std::unique_ptr<PreTokenizer> pre;
  std::unique_ptr<BpeModel> bpe;
  std::vector<std::string> vocab_r;  // id -> model token ("" for none)
  int64_t size = 0;
  int32_t eos = -1, bos = -1;

  [[noreturn]] void fail(const std::string& what) const {
    throw TokenizerError(path + ": " + what);
  }
  void unsupported(const std::string& where, const json& j) const {
    if (j.is_null()) fail("no " + where + ": a byte-level BPE needs one (ByteLevel)");
    fail(where + ".type " + type_of(j) +
         " is not supported (normlab reads byte-level BPE tokenizer.json files: model BPE, "
         "normalizer NFC/NFD/NFKC/NFKD or none, pre_tokenizer ByteLevel or Split stages "
         "followed by ByteLevel, decoder ByteLevel)");
  }
  std::string normalize_all(std::string_view s) const {
    std::string out(s);
    for (const Normalization n : normalizers) out = normalize(out, n);
    return out;
  }

  void load(const json& root);
  void load_pre_tokenizer(const json& j);
  void special_ids();
  // tokenizers' AddedVocabulary::find_matches: pieces with the added token's index, or -1.
  void split_added(std::string_view s, const Matcher& m,
                   std::vector<std::pair<int64_t, std::string_view>>& out) const;
};

void HfTokenizer::Impl::load(const json& root) {
  if (!root.is_object()) fail("not a tokenizer.json (the top level is not an object)");
  if (!root.contains("model") || !root["model"].is_object()) fail("no \"model\" object");
  const json& model = root["model"];
  // Files of old versions leave the BPE model untyped.
  if (type_of(model) != "BPE" && !(type_of(model) == "(untyped)" && model.contains("merges")))
    unsupported("model", model);
  if (value_or<double>(model, "dropout", 0.0) != 0.0) fail("model.dropout is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!value_or<std::string>(model, key, "").empty())
      fail(std::string("model.") + key + " is not supported (a byte-level BPE has none)");
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail("model.vocab is missing");
  std::unordered_map<std::string, int32_t> vocab;
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      fail("model.vocab[\"" + token + "\"] is not a token id");
    vocab.emplace(token, id.get<int32_t>());
    size = std::max<int64_t>(size, id.get<int64_t>() + 1);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  for (const json& m : value_or<json>(model, "merges", json::array())) {
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos) fail("model.merges: \"" + s + "\" is not two tokens");
      merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      fail("model.merges: " + m.dump() + " is not a pair of tokens");
    }
  }
  BpeOptions options;
  if (model.contains("unk_token") && model["unk_token"].is_string())
    options.unk_token = model["unk_token"].get<std::string>();
  options.fuse_unk = value_or<bool>(model, "fuse_unk", false);
  options.byte_fallback = value_or<bool>(model, "byte_fallback", false);
  options.ignore_merges = value_or<bool>(model, "ignore_merges", false);
  vocab_r.assign(static_cast<size_t>(size), "");
  for (const auto& [token, id] : vocab) vocab_r[static_cast<size_t>(id)] = token;
  try {
    bpe = std::make_unique<BpeModel>(std::move(vocab), merges, options);
  } catch (const std::invalid_argument& e) {
    fail(std::string("model: ") + e.what());
  }

  const json normalizer = value_or<json>(root, "normalizer", json());
  if (!normalizer.is_null()) {
    const bool sequence = type_of(normalizer) == "Sequence";
    const json list = sequence ? value_or<json>(normalizer, "normalizers", json::array())
                               : json::array({normalizer});
    const std::map<std::string, Normalization> forms = {{"NFC", Normalization::Nfc},
                                                        {"NFD", Normalization::Nfd},
                                                        {"NFKC", Normalization::Nfkc},
                                                        {"NFKD", Normalization::Nfkd}};
    for (const json& n : list) {
      const auto it = forms.find(type_of(n));
      if (it == forms.end()) unsupported("normalizer", n);
      normalizers.push_back(it->second);
    }
  }
  load_pre_tokenizer(value_or<json>(root, "pre_tokenizer", json()));
  const json decoder = value_or<json>(root, "decoder", json());
  if (type_of(decoder) != "ByteLevel") unsupported("decoder", decoder);
  // The post-processor only adds tokens when asked to (add_special_tokens): normlab ends
  // documents with EOS itself, so it is not applied.

  for (const json& t : value_or<json>(root, "added_tokens", json::array())) {
    AddedToken a;
    if (!t.is_object() || !t.contains("content") || !t["content"].is_string() ||
        !t.contains("id") || !t["id"].is_number_integer() || t["id"].get<int64_t>() < 0 ||
        t["id"].get<int64_t>() > INT32_MAX)
      fail("added_tokens: " + t.dump() + " is not an added token with content and id");
    a.content = t["content"].get<std::string>();
    a.special = value_or<bool>(t, "special", false);
    a.single_word = value_or<bool>(t, "single_word", false);
    a.lstrip = value_or<bool>(t, "lstrip", false);
    a.rstrip = value_or<bool>(t, "rstrip", false);
    a.normalized = value_or<bool>(t, "normalized", !a.special);
    // As tokenizers does on load: a token of the model's vocabulary keeps the model's id.
    const int32_t in_model = bpe->id(a.content);
    a.id = in_model >= 0 ? in_model : t["id"].get<int32_t>();
    if (a.content.empty()) continue;
    size = std::max<int64_t>(size, int64_t(a.id) + 1);
    added_by_id[a.id] = added.size();
    added.push_back(std::move(a));
  }
  for (size_t i = 0; i < added.size(); ++i) {
    if (added[i].normalized)
      normalized.add(normalize_all(added[i].content), i);
    else
      raw.add(added[i].content, i);
  }
}

void HfTokenizer::Impl::load_pre_tokenizer(const json& j) {
  const json list = type_of(j) == "Sequence" ? value_or<json>(j, "pretokenizers", json::array())
                                             : json::array({j});
  std::vector<SplitStage> splits;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& p = list[i];
    const std::string type = type_of(p);
    if (type == "ByteLevel" && i + 1 == list.size()) {
      pre = std::make_unique<PreTokenizer>(std::move(splits),
                                           value_or<bool>(p, "add_prefix_space", true),
                                           value_or<bool>(p, "use_regex", true));
      return;
    }
    if (type != "Split") {
      if (type == "ByteLevel") fail("pre_tokenizer: ByteLevel must be the last stage");
      unsupported("pre_tokenizer", p);
    }
    const json pattern = value_or<json>(p, "pattern", json());
    const bool literal = pattern.is_object() && pattern.contains("String");
    if (!pattern.is_object() || !(literal || pattern.contains("Regex")))
      fail("pre_tokenizer Split: the pattern is neither {\"Regex\": ...} nor {\"String\": ...}");
    const std::string text = pattern[literal ? "String" : "Regex"].get<std::string>();
    const std::string behavior = value_or<std::string>(p, "behavior", "Isolated");
    if (behavior != "Isolated" && behavior != "Removed")
      fail("pre_tokenizer Split: behavior " + behavior + " is not supported (Isolated, Removed)");
    if (value_or<bool>(p, "invert", false)) fail("pre_tokenizer Split: invert is not supported");
    try {
      splits.push_back({Regex(text, literal),
                        behavior == "Isolated" ? SplitBehavior::Isolated : SplitBehavior::Removed});
    } catch (const std::invalid_argument& e) {
      fail(std::string("pre_tokenizer Split: ") + e.what());
    }
  }
  if (j.is_null()) fail("no pre_tokenizer: a byte-level BPE needs ByteLevel");
  fail("pre_tokenizer: the last stage is not ByteLevel, which a byte-level BPE needs");
}

void HfTokenizer::Impl::special_ids() {
  auto id_of = [&](const std::string& content) -> int32_t {
    for (const AddedToken& a : added)
      if (a.content == content) return a.id;
    return bpe->id(content);
  };
  const std::filesystem::path config =
      std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::is_regular_file(config)) {
    json c;
    try {
      c = json::parse(read_file(config.string()));
    } catch (const json::exception& e) {
      throw TokenizerError(config.string() + ": not valid JSON: " + e.what());
    }
    auto named = [&](const char* key) -> std::optional<std::string> {
      if (!c.is_object() || !c.contains(key)) return std::nullopt;
      const json& v = c[key];
      if (v.is_string()) return v.get<std::string>();
      if (v.is_object() && v.contains("content") && v["content"].is_string())
        return v["content"].get<std::string>();
      return std::nullopt;
    };
    if (const auto e = named("eos_token")) eos = id_of(*e);
    if (const auto b = named("bos_token")) bos = id_of(*b);
  }
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"})
    if (eos < 0) eos = id_of(name);
  for (const char* name : {"<|begin_of_text|>", "<s>", "<bos>"})
    if (bos < 0) bos = id_of(name);
}

void HfTokenizer::Impl::split_added(std::string_view s, const Matcher& m,
                                    std::vector<std::pair<int64_t, std::string_view>>& out) const {
  size_t start_offset = 0, from = 0, start = 0, stop = 0, index = 0;
  while (m.find(s, from, start, stop, index)) {
    from = stop;
    const AddedToken& a = added[index];
    if (a.single_word && ((start > 0 && is_word(last_char(s.substr(0, start)))) ||
                          (stop < s.size() && is_word(first_char(s.substr(stop))))))
      continue;
    if (a.lstrip) {
      size_t at = start;
      while (at > 0 && is_space(last_char(s.substr(0, at)))) {
        --at;
        while (at > 0 && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) --at;
      }
      start = std::max(at, start_offset);
    }
    if (a.rstrip) {
      size_t len = 0;
      while (stop < s.size() && is_space(first_char(s.substr(stop), &len))) stop += len;
    }
    if (start_offset < start) out.emplace_back(-1, s.substr(start_offset, start - start_offset));
    out.emplace_back(static_cast<int64_t>(index), s.substr(start, stop - start));
    start_offset = stop;
  }
  if (start_offset < s.size()) out.emplace_back(-1, s.substr(start_offset));
}

HfTokenizer::HfTokenizer(const std::string& path, const std::string& text) : impl_(new Impl) {
  impl_->path = path;
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    impl_->fail(std::string("not valid JSON: ") + e.what());
  }
  try {
    impl_->load(root);
  } catch (const json::exception& e) {  // a value of the wrong JSON type
    impl_->fail(std::string("unexpected contents: ") + e.what());
  }
  impl_->special_ids();
}

HfTokenizer::~HfTokenizer() = default;

std::vector<int32_t> HfTokenizer::encode(std::string_view text) const {
  const Impl& m = *impl_;
  if (const size_t bad = utf8_invalid_at(text); bad != std::string_view::npos)
    m.fail("cannot encode text that is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  std::vector<int32_t> ids;
  std::vector<std::pair<int64_t, std::string_view>> outer, inner;
  m.split_added(text, m.raw, outer);
  for (const auto& [index, piece] : outer) {
    if (index >= 0) {
      ids.push_back(m.added[size_t(index)].id);
      continue;
    }
    const std::string norm = m.normalize_all(piece);
    inner.clear();
    m.split_added(norm, m.normalized, inner);
    for (const auto& [index2, piece2] : inner) {
      if (index2 >= 0)
        ids.push_back(m.added[size_t(index2)].id);
      else
        m.pre->run(piece2, [&](std::string_view word) { m.bpe->encode(word, ids); });
    }
  }
  return ids;
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string bytes;
  for (const int32_t id : ids) {
    if (id < 0 || id >= impl_->size)
      impl_->fail("token id " + std::to_string(id) + " is outside the vocabulary of " +
                  std::to_string(impl_->size));
    bytes += byte_level_decode(piece(id));
  }
  return utf8_lossy(bytes);
}

std::string HfTokenizer::piece(int32_t id) const {
  const auto it = impl_->added_by_id.find(id);
  if (it != impl_->added_by_id.end()) return impl_->added[it->second].content;
  return id >= 0 && size_t(id) < impl_->vocab_r.size() ? impl_->vocab_r[size_t(id)] : "";
}

int64_t HfTokenizer::vocab_size() const { return impl_->size; }
int32_t HfTokenizer::eos_id() const { return impl_->eos; }
int32_t HfTokenizer::bos_id() const { return impl_->bos; }

std::vector<int32_t> HfTokenizer::token_byte_lengths() const {
  std::vector<int32_t> out(static_cast<size_t>(impl_->size));
  for (int32_t id = 0; id < impl_->size; ++id) {
    const auto it = impl_->added_by_id.find(id);
    if (it != impl_->added_by_id.end() && impl_->added[it->second].special) continue;
    out[size_t(id)] = static_cast<int32_t>(byte_level_decode(piece(id)).size());
  }
  return out;
}

}  // namespace normlab::hf
