#include "data/hf_bpe.h"

#include <cstdio>
#include <functional>
#include <queue>
#include <stdexcept>

namespace normlab::hf {
namespace {

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {  // below U+0800: every character of the mapping
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the other 68 for U+0100
// onwards, in byte order.
std::array<std::string, 256> make_byte_chars() {
  std::array<std::string, 256> chars;
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    chars[b] = utf8(printable ? b : next++);
  }
  return chars;
}

const std::array<std::string, 256>& byte_chars() {
  static const std::array<std::string, 256> chars = make_byte_chars();
  return chars;
}

const std::unordered_map<std::string, uint8_t>& char_bytes() {
  static const std::unordered_map<std::string, uint8_t> map = [] {
    std::unordered_map<std::string, uint8_t> m;
    for (int b = 0; b < 256; ++b) m.emplace(byte_chars()[static_cast<size_t>(b)], b);
    return m;
  }();
  return map;
}

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// A symbol of a word being merged (tokenizers' Word): its id, its neighbours, its byte
// length (0: merged into its left neighbour).
struct Symbol {
  int32_t id;
  int64_t prev, next;
  size_t len;
};

struct Merge {
  size_t pos;
  uint32_t rank;
  int32_t new_id;
};

// Lowest rank first, then leftmost.
struct Later {
  bool operator()(const Merge& a, const Merge& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

}  // namespace

const std::string& byte_char(uint8_t b) { return byte_chars()[b]; }

std::string byte_level_decode(std::string_view token) {
  std::string out;
  const auto& map = char_bytes();
  for (size_t i = 0; i < token.size();) {
    const size_t len = (static_cast<unsigned char>(token[i]) & 0x80) == 0 ? 1 : 2;
    const auto it =
        i + len <= token.size() ? map.find(std::string(token.substr(i, len))) : map.end();
    if (it == map.end()) return std::string(token);
    out += static_cast<char>(it->second);
    i += len;
  }
  return out;
}

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  for (int b = 0; b < 256; ++b) byte_ids_[static_cast<size_t>(b)] = id(byte_char(uint8_t(b)));
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const int32_t ia = id(a), ib = id(b), merged = id(a + b);
    const std::string which = "merge " + std::to_string(rank) + " (\"" + a + " " + b + "\")";
    if (ia < 0 || ib < 0) throw std::invalid_argument(which + ": a part is not in the vocabulary");
    if (merged < 0) throw std::invalid_argument(which + ": its result is not in the vocabulary");
    merges_[pair_key(ia, ib)] = {static_cast<uint32_t>(rank), merged};  // a repeat wins
  }
  if (options_.unk_token && id(*options_.unk_token) < 0)
    throw std::invalid_argument("unk_token \"" + *options_.unk_token +
                                "\" is not in the vocabulary");
}

int32_t BpeModel::id(const std::string& token) const {
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::encode(std::string_view bytes, std::vector<int32_t>& out) const {
  if (bytes.empty()) return;
  std::string word(bytes);
  if (options_.ignore_merges) {
    std::string mapped;
    for (const char c : word) mapped += byte_char(static_cast<uint8_t>(c));
    if (const int32_t whole = id(mapped); whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  if (word.size() > kCachedBytes) {
    merge_word(word, out);
    return;
  }
  CacheShard& shard = cache_[std::hash<std::string>{}(word) % kShards];
  {
    const std::lock_guard<std::mutex> lock(shard.mutex);
    const auto it = shard.map.find(word);
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t from = out.size();
  merge_word(word, out);
  const std::lock_guard<std::mutex> lock(shard.mutex);
  if (shard.map.size() < kShardEntries)
    shard.map.emplace(std::move(word), std::vector<int32_t>(out.begin() + long(from), out.end()));
}

// tokenizers' BPE::merge_word and Word::merge_all, for byte-level words (one character per
// byte, no subword prefix or suffix).
void BpeModel::merge_word(const std::string& word, std::vector<int32_t>& out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id, size_t len) {
    const int64_t n = static_cast<int64_t>(symbols.size());
    if (n > 0) symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, len});
  };
  int32_t unk = -1;  // a pending unknown token and its length
  size_t unk_len = 0;
  for (const char c : word) {
    const uint8_t b = static_cast<uint8_t>(c);
    const std::string& ch = byte_char(b);
    if (byte_ids_[b] >= 0) {
      if (unk >= 0) {
        add(unk, unk_len);
        unk = -1;
      }
      add(byte_ids_[b], ch.size());
      continue;
    }
    if (options_.byte_fallback) {
      std::vector<int32_t> ids;
      for (const char x : ch) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned char>(x));
        ids.push_back(id(name));
      }
      bool all = true;
      for (const int32_t i : ids) all = all && i >= 0;
      if (all) {
        for (const int32_t i : ids) add(i, 1);
        continue;
      }
    }
    if (options_.unk_token) {
      const int32_t unk_id = id(*options_.unk_token);
      if (unk >= 0 && options_.fuse_unk) {
        unk_len += ch.size();
      } else {
        if (unk >= 0) add(unk, unk_len);
        unk = unk_id;
        unk_len = ch.size();
      }
    }  // else the character is dropped, as tokenizers does
  }
  if (unk >= 0) add(unk, unk_len);

  std::priority_queue<Merge, std::vector<Merge>, Later> queue;
  auto rank_of = [&](int32_t a, int32_t b) -> const std::pair<uint32_t, int32_t>* {
    const auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i)
    if (const auto* m = rank_of(symbols[i].id, symbols[i + 1].id))
      queue.push({i, m->first, m->second});
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    const size_t next_pos = static_cast<size_t>(left.next);
    const Symbol right = symbols[next_pos];
    const auto* now = rank_of(left.id, right.id);
    if (!now || now->second != top.new_id) continue;  // an expired entry
    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    symbols[next_pos].len = 0;
    if (right.next >= 0 && static_cast<size_t>(right.next) < symbols.size())
      symbols[static_cast<size_t>(right.next)].prev = static_cast<int64_t>(top.pos);
    if (left.prev >= 0)
      if (const auto* m = rank_of(symbols[static_cast<size_t>(left.prev)].id, left.id))
        queue.push({static_cast<size_t>(left.prev), m->first, m->second});
    if (left.next >= 0 && static_cast<size_t>(left.next) < symbols.size())
      if (const auto* m = rank_of(left.id, symbols[static_cast<size_t>(left.next)].id))
        queue.push({top.pos, m->first, m->second});
  }
  for (const Symbol& s : symbols)
    if (s.len != 0) out.push_back(s.id);
}

}  // namespace normlab::hf
