#include "data/hf_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "data/hf_bpe.h"
#include "data/hf_pretokenizer.h"
#include "data/hf_tokenizer_json.h"
#include "normlab/data/tokenizer.h"
#include "normlab/util/file_io.h"

namespace normlab::hf {

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

}  // namespace

struct HfTokenizer::Impl {
  std::string path;
  std::vector<AddedTokenSpec> added;
  std::unordered_map<int32_t, size_t> added_by_id;
  Matcher raw, normalized;  // tokens matched before / after normalization
  std::vector<Normalization> normalizers;
  std::unique_ptr<PreTokenizer> pre;
  std::unique_ptr<BpeModel> bpe;
  std::unordered_map<int32_t, std::string> vocab_r;  // id -> model token
  int64_t size = 0;
  int32_t eos = -1, bos = -1;

  [[noreturn]] void fail(const std::string& what) const {
    throw TokenizerError(path + ": " + what);
  }
  std::string normalize_all(std::string_view s) const {
    std::string out(s);
    for (const Normalization n : normalizers) out = normalize(out, n);
    return out;
  }

  void load(TokenizerSpec spec);
  void special_ids();
  // tokenizers' AddedVocabulary::find_matches: pieces with the added token's index, or -1.
  void split_added(std::string_view s, const Matcher& m,
                   std::vector<std::pair<int64_t, std::string_view>>& out) const;
};

// `spec` is checked (hf_tokenizer_json.h): every merge and the unk_token are in the vocabulary.
void HfTokenizer::Impl::load(TokenizerSpec spec) {
  size = spec.size;
  for (const auto& [token, id] : spec.vocab) vocab_r.emplace(id, token);
  try {
    bpe = std::make_unique<BpeModel>(std::move(spec.vocab), spec.merges, spec.options);
  } catch (const std::invalid_argument& e) {
    fail(std::string("model: ") + e.what());
  }
  normalizers = std::move(spec.normalizers);
  pre =
      std::make_unique<PreTokenizer>(std::move(spec.splits), spec.add_prefix_space, spec.use_regex);
  // The post-processor only adds tokens when asked to (add_special_tokens): normlab ends
  // documents with EOS itself, so it is not applied.
  added = std::move(spec.added);
  for (size_t i = 0; i < added.size(); ++i) {
    added_by_id[added[i].id] = i;
    if (added[i].normalized)
      normalized.add(normalize_all(added[i].content), i);
    else
      raw.add(added[i].content, i);
  }
}

void HfTokenizer::Impl::special_ids() {
  auto id_of = [&](const std::string& content) -> int32_t {
    for (const AddedTokenSpec& a : added)
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
    const AddedTokenSpec& a = added[index];
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
  impl_->load(read_tokenizer_json(path, text));
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
        try {
          m.pre->run(piece2, [&](std::string_view word) { m.bpe->encode(word, ids); });
        } catch (const std::runtime_error& e) {  // a Split regex past PCRE2's match limits
          m.fail(e.what());
        }
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
  const auto token = impl_->vocab_r.find(id);
  return token == impl_->vocab_r.end() ? "" : token->second;
}

int64_t HfTokenizer::vocab_size() const { return impl_->size; }
int32_t HfTokenizer::eos_id() const {
  if (impl_->eos < 0)
    impl_->fail(
        "no end-of-text token: none of <|endoftext|>, <|end_of_text|>, </s>, <eos> is a token, "
        "and no tokenizer_config.json beside it names an eos_token that is");
  return impl_->eos;
}
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
