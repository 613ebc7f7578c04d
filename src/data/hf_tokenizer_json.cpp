#include "data/hf_tokenizer_json.h"

#include <algorithm>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "normlab/data/tokenizer.h"

namespace normlab::hf {
namespace {

using nlohmann::json;

// A JSON value for a message, on one line and short: a string quoted and escaped (at most 60
// bytes of it), a number or literal as it is, a container by its kind (never dumped: its
// nesting may be deep).
std::string describe(const json& v) {
  if (v.is_object()) return "an object";
  if (v.is_array()) return "an array";
  if (!v.is_string()) return v.dump();
  std::string s = v.get<std::string>();
  if (s.size() > 60) {
    size_t cut = 57;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    s = s.substr(0, cut) + "...";
  }
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}
std::string in_quotes(const std::string& s) { return describe(json(s)); }

std::string type_of(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : std::string("(untyped)");
}
// A type name as it is when it is a short plain word, else quoted (the message stays one line).
std::string type_name(const json& j) {
  const std::string t = type_of(j);
  bool plain = t.size() <= 60;
  for (const char c : t) plain = plain && c > ' ' && c <= '~';
  return plain ? t : in_quotes(t);
}

const char* const kTopKeys[] = {"version",        "truncation", "padding",
                                "added_tokens",   "normalizer", "pre_tokenizer",
                                "post_processor", "decoder",    "model"};

// How a key may be given: present and not null (Required), absent but not null (Optional), or
// absent or null (Nullable), as the `tokenizers` library's structs declare them.
enum class Need { Required, Optional, Nullable };

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw TokenizerError(path_ + ": " + key + ": " + what);
  }
  void unsupported(const std::string& key, const json& j) const {
    throw TokenizerError(
        path_ + ": " + key + ".type " + type_name(j) +
        " is not supported (normlab reads byte-level BPE tokenizer.json files: model BPE, "
        "normalizer NFC/NFD/NFKC/NFKD or none, pre_tokenizer ByteLevel or Split stages "
        "followed by ByteLevel, decoder ByteLevel)");
  }

  // The member `name` of the object `obj` at `key`, checked by `is`; nullptr when absent (or
  // null where allowed).
  template <class Is>
  const json* get(const json& obj, const std::string& key, const char* name, Need need, Is is,
                  const char* kind) const {
    const std::string at = key.empty() ? std::string(name) : key + "." + name;
    const auto it = obj.find(name);
    if (it == obj.end()) {
      if (need == Need::Required) fail(at, "missing (the tokenizers library requires it)");
      return nullptr;
    }
    if (it->is_null() && need == Need::Nullable) return nullptr;
    if (!is(*it)) fail(at, describe(*it) + " is not " + kind);
    return &*it;
  }
  std::optional<bool> boolean(const json& obj, const std::string& key, const char* name,
                              Need need) const {
    const json* v = get(obj, key, name, need, std::mem_fn(&json::is_boolean), "true or false");
    return v ? std::optional<bool>(v->get<bool>()) : std::nullopt;
  }
  std::optional<std::string> string(const json& obj, const std::string& key, const char* name,
                                    Need need) const {
    const json* v = get(obj, key, name, need, std::mem_fn(&json::is_string), "a string");
    return v ? std::optional<std::string>(v->get<std::string>()) : std::nullopt;
  }
  const json* array(const json& obj, const std::string& key, const char* name, Need need) const {
    return get(obj, key, name, need, std::mem_fn(&json::is_array), "an array");
  }
  const json* object(const json& obj, const std::string& key, const char* name, Need need) const {
    return get(obj, key, name, need, std::mem_fn(&json::is_object), "an object");
  }

  // A token id: an integer from 0 to kMaxTokenId (the `tokenizers` library reads any u32;
  // normlab sizes its tables by the largest id).
  int32_t token_id(const json& v, const std::string& key) const {
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
      fail(key, describe(v) + " is not a token id (an integer from 0)");
    const uint64_t id = v.get<uint64_t>();
    if (id > static_cast<uint64_t>(kMaxTokenId))
      fail(key, "id " + std::to_string(id) + " is too large: normlab reads token ids up to " +
                    std::to_string(kMaxTokenId));
    return static_cast<int32_t>(id);
  }

  void model(const json& root, TokenizerSpec& spec) const;
  void vocab_and_merges(const json& model, TokenizerSpec& spec) const;
  void normalizer(const json& root, TokenizerSpec& spec) const;
  void pre_tokenizer(const json& root, TokenizerSpec& spec) const;
  void split_stage(const json& p, const std::string& key, TokenizerSpec& spec) const;
  void byte_level(const json& p, const std::string& key) const;
  void decoder(const json& root) const;
  void added_tokens(const json& root, TokenizerSpec& spec) const;

 private:
  std::string path_;
};

void Reader::model(const json& root, TokenizerSpec& spec) const {
  const json& model = *object(root, "", "model", Need::Required);
  // Files of old versions leave the BPE model untyped.
  const std::optional<std::string> type = string(model, "model", "type", Need::Optional);
  if (type ? *type != "BPE" : !model.contains("merges")) unsupported("model", model);
  if (const json* d = get(model, "model", "dropout", Need::Nullable, std::mem_fn(&json::is_number),
                          "a number")) {
    const double p = d->get<double>();
    if (!(p >= 0.0 && p <= 1.0)) fail("model.dropout", describe(*d) + " is not from 0 to 1");
    if (p != 0.0) fail("model.dropout", describe(*d) + ": dropout is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!string(model, "model", key, Need::Nullable).value_or("").empty())
      fail(std::string("model.") + key, "not supported (a byte-level BPE has none)");
  spec.options.unk_token = string(model, "model", "unk_token", Need::Nullable);
  spec.options.fuse_unk = boolean(model, "model", "fuse_unk", Need::Nullable).value_or(false);
  spec.options.byte_fallback =
      boolean(model, "model", "byte_fallback", Need::Nullable).value_or(false);
  spec.options.ignore_merges =
      boolean(model, "model", "ignore_merges", Need::Nullable).value_or(false);
  vocab_and_merges(model, spec);
  if (spec.options.unk_token && !spec.vocab.count(*spec.options.unk_token))
    fail("model.unk_token", in_quotes(*spec.options.unk_token) + " is not in model.vocab");
}

void Reader::vocab_and_merges(const json& model, TokenizerSpec& spec) const {
  const json& vocab = *object(model, "model", "vocab", Need::Required);
  std::unordered_map<int32_t, const std::string*> by_id;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const std::string key = "model.vocab[" + in_quotes(it.key()) + "]";
    const int32_t id = token_id(it.value(), key);
    const auto [at, fresh] = by_id.emplace(id, &it.key());
    if (!fresh)
      fail(key, "id " + std::to_string(id) + " is also the id of " + in_quotes(*at->second));
    spec.vocab.emplace(it.key(), id);
    spec.size = std::max<int64_t>(spec.size, int64_t(id) + 1);
  }
  if (!model.contains("merges"))
    fail("model.merges",
         "missing (a BPE model lists its merges, [] for none; the tokenizers "
         "library refuses a file without them)");
  const json& merges = *array(model, "model", "merges", Need::Required);
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    const std::string key = "model.merges[" + std::to_string(i) + "]";
    // One form for all: "A B" strings or ["A", "B"] pairs (the library's MergeType).
    if (i > 0 && m.is_string() != merges[0].is_string())
      fail(key, describe(m) +
                    " is not of the form of model.merges[0] (all \"A B\" or all "
                    "[\"A\", \"B\"])");
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        fail(key, describe(m) + " is not two tokens separated by one space");
      spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      fail(key, describe(m) + " is neither \"A B\" nor [\"A\", \"B\"]");
    }
    const auto& [a, b] = spec.merges.back();
    if (!spec.vocab.count(a)) fail(key, in_quotes(a) + " is not in model.vocab");
    if (!spec.vocab.count(b)) fail(key, in_quotes(b) + " is not in model.vocab");
    if (!spec.vocab.count(a + b))
      fail(key, "the result " + in_quotes(a + b) + " is not in model.vocab");
  }
}

void Reader::normalizer(const json& root, TokenizerSpec& spec) const {
  const json* n =
      get(root, "", "normalizer", Need::Nullable, std::mem_fn(&json::is_object), "an object");
  if (!n) return;
  static const std::map<std::string, Normalization> forms = {{"NFC", Normalization::Nfc},
                                                             {"NFD", Normalization::Nfd},
                                                             {"NFKC", Normalization::Nfkc},
                                                             {"NFKD", Normalization::Nfkd}};
  auto add = [&](const json& j, const std::string& key) {
    const auto it = forms.find(type_of(j));
    if (it == forms.end()) unsupported(key, j);
    spec.normalizers.push_back(it->second);
  };
  if (type_of(*n) != "Sequence") return add(*n, "normalizer");
  const json& list = *array(*n, "normalizer", "normalizers", Need::Required);
  for (size_t i = 0; i < list.size(); ++i)
    add(list[i], "normalizer.normalizers[" + std::to_string(i) + "]");
}

void Reader::byte_level(const json& p, const std::string& key) const {
  boolean(p, key, "add_prefix_space", Need::Required);
  boolean(p, key, "trim_offsets", Need::Required);
  boolean(p, key, "use_regex", Need::Optional);
}

void Reader::split_stage(const json& p, const std::string& key, TokenizerSpec& spec) const {
  const json& pattern = *get(p, key, "pattern", Need::Required, std::mem_fn(&json::is_object),
                             "{\"Regex\": ...} or {\"String\": ...}");
  const bool literal = pattern.contains("String");
  if (pattern.size() != 1 || !(literal || pattern.contains("Regex")))
    fail(key + ".pattern", "not {\"Regex\": ...} or {\"String\": ...}");
  const char* kind = literal ? "String" : "Regex";
  const std::string text = *string(pattern, key + ".pattern", kind, Need::Required);
  const std::string behavior = *string(p, key, "behavior", Need::Required);
  if (behavior == "MergedWithPrevious" || behavior == "MergedWithNext" || behavior == "Contiguous")
    fail(key + ".behavior", behavior + " is not supported (Isolated, Removed)");
  if (behavior != "Isolated" && behavior != "Removed")
    fail(key + ".behavior", in_quotes(behavior) + " is not a behavior of Split");
  if (*boolean(p, key, "invert", Need::Required)) fail(key + ".invert", "true is not supported");
  try {
    spec.splits.push_back(
        {Regex(text, literal),
         behavior == "Isolated" ? SplitBehavior::Isolated : SplitBehavior::Removed,
         key + ".pattern." + kind});
  } catch (const std::invalid_argument& e) {
    fail(key + ".pattern." + kind, in_quotes(text) + ": " + e.what());
  }
}

void Reader::pre_tokenizer(const json& root, TokenizerSpec& spec) const {
  const json* j =
      get(root, "", "pre_tokenizer", Need::Nullable, std::mem_fn(&json::is_object), "an object");
  if (!j) fail("pre_tokenizer", "missing: a byte-level BPE needs ByteLevel");
  const bool sequence = type_of(*j) == "Sequence";
  const json* list = sequence ? array(*j, "pre_tokenizer", "pretokenizers", Need::Required) : j;
  const size_t n = sequence ? list->size() : 1;
  for (size_t i = 0; i < n; ++i) {
    const json& p = sequence ? (*list)[i] : *j;
    const std::string key =
        sequence ? "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]" : "pre_tokenizer";
    const std::string type = type_of(p);
    if (type == "ByteLevel" && i + 1 == n) {
      byte_level(p, key);
      spec.add_prefix_space = *boolean(p, key, "add_prefix_space", Need::Required);
      spec.use_regex = boolean(p, key, "use_regex", Need::Optional).value_or(true);
      return;
    }
    if (type == "ByteLevel") fail(key, "ByteLevel must be the last stage");
    if (type != "Split") unsupported(key, p);
    split_stage(p, key, spec);
  }
  fail("pre_tokenizer", "the last stage is not ByteLevel, which a byte-level BPE needs");
}

void Reader::decoder(const json& root) const {
  const json* d =
      get(root, "", "decoder", Need::Nullable, std::mem_fn(&json::is_object), "an object");
  if (!d) fail("decoder", "missing: a byte-level BPE needs one (ByteLevel)");
  if (type_of(*d) != "ByteLevel") unsupported("decoder", *d);
  byte_level(*d, "decoder");
}

// The ids as tokenizers' AddedVocabulary gives them on load, in the file's order: a content
// of the model's vocabulary keeps its id, one added before keeps that one, a new one takes the
// model's size (its number of tokens) or, past it, the largest added id + 1. The file's id must
// be that id and must not be another token's.
void Reader::added_tokens(const json& root, TokenizerSpec& spec) const {
  const json* list = array(root, "", "added_tokens", Need::Optional);
  if (!list) return;
  const int64_t model_size = static_cast<int64_t>(spec.vocab.size());
  std::unordered_map<int32_t, const std::string*> model_ids;
  for (const auto& [token, id] : spec.vocab) model_ids.emplace(id, &token);
  std::unordered_map<std::string, int32_t> added_ids;
  int64_t max_added = -1;
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string key = "added_tokens[" + std::to_string(i) + "]";
    const json& t = (*list)[i];
    if (!t.is_object()) fail(key, describe(t) + " is not an object");
    AddedTokenSpec a;
    a.id = token_id(*get(
                        t, key, "id", Need::Required, [](const json&) { return true; }, ""),
                    key + ".id");
    a.content = *string(t, key, "content", Need::Required);
    a.single_word = *boolean(t, key, "single_word", Need::Required);
    a.lstrip = *boolean(t, key, "lstrip", Need::Required);
    a.rstrip = *boolean(t, key, "rstrip", Need::Required);
    a.normalized = *boolean(t, key, "normalized", Need::Required);
    a.special = *boolean(t, key, "special", Need::Required);
    if (a.content.empty()) continue;  // the library skips it
    const auto in_model = spec.vocab.find(a.content);
    const auto before = added_ids.find(a.content);
    int64_t id = model_size;
    if (in_model != spec.vocab.end())
      id = in_model->second;
    else if (before != added_ids.end())
      id = before->second;
    else if (max_added >= 0 && (max_added >= model_size || model_size == 0))
      id = max_added + 1;
    const std::string what = in_quotes(a.content);
    if (a.id != id)
      fail(key + ".id",
           std::to_string(a.id) + ", but the tokenizers library gives " + what + " id " +
               std::to_string(id) +
               (in_model != spec.vocab.end() ? " (its id in model.vocab)"
                : before != added_ids.end()
                    ? " (an earlier entry's)"
                    : " (new added tokens follow the model's " + std::to_string(model_size) +
                          " tokens, in the file's order)"));
    const auto taken = model_ids.find(a.id);
    if (in_model == spec.vocab.end() && taken != model_ids.end())
      fail(key + ".id", std::to_string(a.id) + " is also the id of model.vocab[" +
                            in_quotes(*taken->second) + "]");
    max_added = std::max<int64_t>(max_added, a.id);
    spec.size = std::max<int64_t>(spec.size, int64_t(a.id) + 1);
    if (before == added_ids.end()) {
      added_ids.emplace(a.content, a.id);
      spec.added.push_back(std::move(a));
    }
  }
}

}  // namespace

TokenizerSpec read_tokenizer_json(const std::string& path, const std::string& text) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw TokenizerError(path + ": not valid JSON: " + e.what());
  }
  if (!root.is_object())
    throw TokenizerError(path + ": not a tokenizer.json (the top level is not an object)");
  const Reader r(path);
  for (auto it = root.begin(); it != root.end(); ++it)
    if (std::find(std::begin(kTopKeys), std::end(kTopKeys), it.key()) == std::end(kTopKeys))
      r.fail(in_quotes(it.key()),
             "not a key of a tokenizer.json (version, truncation, padding, added_tokens, "
             "normalizer, pre_tokenizer, post_processor, decoder, model)");
  if (const auto version = r.string(root, "", "version", Need::Optional);
      version && *version != "1.0")
    r.fail("version", in_quotes(*version) + " is not a version the tokenizers library reads (1.0)");
  TokenizerSpec spec;
  r.model(root, spec);
  r.normalizer(root, spec);
  r.pre_tokenizer(root, spec);
  r.decoder(root);
  r.added_tokens(root, spec);
  return spec;
}

}  // namespace normlab::hf
