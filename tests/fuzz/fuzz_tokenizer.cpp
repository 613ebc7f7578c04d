// Fuzz target: the tokenizer.json reader (src/data/hf_tokenizer_json.h) and the byte-level BPE
// it builds (src/data/hf_tokenizer.h), as `tokenizer encode`, `data prepare` and training load
// a Hugging Face tokenizer.json. A file is either refused with TokenizerError or loads; a
// loaded tokenizer encodes each of a few fixed texts the same twice (the second time from its
// cache), to ids below vocab_size() that decode without error to valid UTF-8, refuses text that
// is not UTF-8 with TokenizerError, and, when nothing in it changes text (no normalizer, no
// removed Split matches, no prefix space, every byte in the vocabulary, added tokens of plain
// ASCII without lstrip or rstrip), decodes each encoding back to the
// text. Anything else (another exception, a crash, a sanitizer report, an allocation over the
// fuzzer's -malloc_limit_mb, an input over -timeout) is a finding.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "data/hf_bpe.h"
#include "data/hf_pretokenizer.h"
#include "data/hf_tokenizer.h"
#include "data/hf_tokenizer_json.h"
#include "normlab/data/tokenizer.h"

namespace {

using namespace normlab;

// No tokenizer_config.json can lie beside this path (eos and bos come from known names only).
constexpr const char* kPath = "/dev/null/tokenizer.json";

const char* const kTexts[] = {
    "",
    "a",
    "hello world",
    "ab abc<|endoftext|>ab <|endoftext|>",
    "  two spaces\tand a tab\n\nnewlines  ",
    "caf\xc3\xa9 e\xcc\x81 \xe6\xbc\xa2\xe5\xad\x97 \xf0\x9f\x98\x80 'll 's 123 4567",
    "\x01\x7f\xc2\x85 \xe2\x80\xa8",
};

// True when decode(encode(text)) must be the text itself (see the top of the file).
bool round_trips(const hf::TokenizerSpec& spec) {
  if (!spec.normalizers.empty() || spec.add_prefix_space) return false;
  for (const hf::SplitStage& s : spec.splits)
    if (s.behavior == hf::SplitBehavior::Removed) return false;
  for (int b = 0; b < 256; ++b)
    if (!spec.vocab.count(hf::byte_char(static_cast<uint8_t>(b)))) return false;
  for (const hf::AddedTokenSpec& a : spec.added) {
    if (a.lstrip || a.rstrip) return false;
    for (const char c : a.content)
      if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  bool lossless = false;
  try {
    lossless = round_trips(hf::read_tokenizer_json(kPath, text));
  } catch (const TokenizerError&) {
    return 0;
  }
  const hf::HfTokenizer tok(kPath, text);  // accepted above: must load
  if (tok.vocab_size() < 0 || tok.vocab_size() > hf::kMaxTokenId + 1) std::abort();
  for (const char* t : kTexts) {
    std::vector<int32_t> ids;
    try {
      ids = tok.encode(t);
    } catch (const TokenizerError&) {
      continue;  // a Split regex past PCRE2's match limits
    }
    if (tok.encode(t) != ids) std::abort();
    for (const int32_t id : ids)
      if (id < 0 || id >= tok.vocab_size()) std::abort();
    const std::string back = tok.decode(ids);
    if (hf::utf8_invalid_at(back) != std::string::npos) std::abort();
    if (lossless && back != t) std::abort();
  }
  try {
    tok.encode("a\xff");
    std::abort();  // text that is not UTF-8 is refused
  } catch (const TokenizerError&) {
  }
  return 0;
}
