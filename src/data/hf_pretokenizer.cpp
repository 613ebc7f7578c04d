#include "data/hf_pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <cstdlib>
#include <stdexcept>

namespace normlab::hf {
namespace {

// Oniguruma's Unicode \s: the White_Space property (tab to carriage return, NEL, and the
// separators Zs, Zl, Zp).
constexpr const char* kWhiteSpace = "\\t\\n\\x0B\\f\\r\\x{85}\\p{Z}";

// The pattern with \s and \S spelled out as kWhiteSpace (inside a class, \s only).
std::string oniguruma_spaces(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char d = p[++i];
      if (d == 's')
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      else if (d == 'S' && !in_class)
        out += "[^" + std::string(kWhiteSpace) + "]";
      else
        out += {c, d};
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ] is literal
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

std::string normalize(std::string_view text, Normalization form) {
  if (form == Normalization::None) return std::string(text);
  bool ascii = true;  // every form leaves ASCII as it is
  for (const char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);
  int options = UTF8PROC_STABLE;
  if (form == Normalization::Nfc || form == Normalization::Nfkc) options |= UTF8PROC_COMPOSE;
  if (form == Normalization::Nfd || form == Normalization::Nfkd) options |= UTF8PROC_DECOMPOSE;
  if (form == Normalization::Nfkc || form == Normalization::Nfkd) options |= UTF8PROC_COMPAT;
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  if (n < 0) throw std::invalid_argument(std::string("normalization: ") + utf8proc_errmsg(n));
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

size_t utf8_invalid_at(std::string_view s) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = b[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // beyond U+10FFFF
    } else {
      return i;
    }
    if (i + len > n || b[i + 1] < lo || b[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (b[i + k] < 0x80 || b[i + k] > 0xBF) return i;
    i += len;
  }
  return std::string_view::npos;
}

// Rust's String::from_utf8_lossy: each maximal invalid subsequence becomes one U+FFFD.
std::string utf8_lossy(const std::string& bytes) {
  std::string out;
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  for (size_t i = 0; i < n;) {
    const size_t bad = utf8_invalid_at(std::string_view(bytes).substr(i));
    if (bad == std::string_view::npos) {
      out.append(bytes, i, n - i);
      break;
    }
    out.append(bytes, i, bad);
    i += bad;
    // The longest prefix of a valid sequence that starts at i (at least one byte).
    size_t len = 1;
    const unsigned char c = b[i];
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    if (c >= 0xC2 && c <= 0xF4)
      while (len < need && i + len < n && b[i + len] >= lo && b[i + len] <= hi) {
        ++len;
        lo = 0x80;
        hi = 0xBF;
      }
    out += "\xEF\xBF\xBD";
    i += len;
  }
  return out;
}

struct Regex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern, bool literal) : impl_(new Impl) {
  const std::string p = literal ? pattern : oniguruma_spaces(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), options, &error,
                              &offset, nullptr);
  if (!impl_->code)
    throw std::invalid_argument(pcre2_message(error) + " (at offset " + std::to_string(offset) +
                                ")");
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);  // without JIT, the interpreter matches
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

void Regex::split(std::string_view text,
                  const std::function<void(std::string_view, bool)>& on_piece) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create(1, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t pos = 0, prev = 0;
  while (pos <= n) {
    int rc = pcre2_match(impl_->code, subject, n, pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter keeps its backtracking on the heap
      rc = pcre2_match(impl_->code, subject, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md.get(),
                       nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw std::runtime_error("regex match: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t start = ov[0], end = ov[1];
    if (end == start) {  // an empty match splits nothing: go on after the next character
      if (start >= n) break;
      pos = start + 1;
      while (pos < n && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (start > prev) on_piece(text.substr(prev, start - prev), false);
    on_piece(text.substr(start, end - start), true);
    prev = pos = end;
  }
  if (prev < n) on_piece(text.substr(prev), false);
}

PreTokenizer::PreTokenizer(std::vector<SplitStage> splits, bool add_prefix_space, bool use_regex)
    : splits_(std::move(splits)), add_prefix_space_(add_prefix_space) {
  // GPT-2's pattern, as the ByteLevel pre-tokenizer of `tokenizers` uses it.
  if (use_regex)
    byte_level_ = std::make_unique<Regex>(
        R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", false);
}

void PreTokenizer::run(std::string_view text,
                       const std::function<void(std::string_view)>& emit) const {
  std::vector<std::string_view> pieces{text}, next;
  for (const SplitStage& stage : splits_) {
    next.clear();
    try {
      for (const std::string_view p : pieces)
        stage.regex.split(p, [&](std::string_view q, bool matched) {
          if (!(matched && stage.behavior == SplitBehavior::Removed)) next.push_back(q);
        });
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(stage.key + ": " + e.what());
    }
    pieces.swap(next);
  }
  std::string prefixed;
  for (const std::string_view p : pieces) {
    if (p.empty()) continue;
    std::string_view q = p;
    if (add_prefix_space_ && p.front() != ' ') {
      prefixed.assign(1, ' ');
      prefixed += p;
      q = prefixed;
    }
    if (byte_level_)
      byte_level_->split(q, [&](std::string_view r, bool) { emit(r); });
    else
      emit(q);
  }
}

}  // namespace normlab::hf
