// DataFormat::Tokens: flat arrays of token ids, every file a glob matches in sorted order. A
// .npy file's header gives its dtype; a raw file (nanoGPT's .bin, OLMo's memmaps) needs the
// source's.
#include <memory>

#include "data/token_format.h"
#include "normlab/data/npy.h"
#include "normlab/data/text_input.h"
#include "normlab/util/file_io.h"

namespace normlab {
namespace {

// A uint16 file whose every second id is 0 is, nearly always, uint32 ids (below 65536) read
// as uint16: their high halves. Checked on the first 4096 ids of files of at least 64.
bool looks_like_uint32(const TokenArray& a) {
  if (a.type() != TokenType::U16 || a.size() < 64) return false;
  const uint64_t n = std::min<uint64_t>(a.size(), 4096) & ~uint64_t{1};
  for (uint64_t i = 1; i < n; i += 2)
    if (a.at(i) != 0) return false;
  for (uint64_t i = 0; i < n; i += 2)
    if (a.at(i) != 0) return true;
  return false;
}

// A NumPy .npy file: its header says the dtype and where the ids start.
TokenArray npy_array(const std::shared_ptr<MappedFile>& file, const std::string& path,
                     const DataSource& source) {
  const NpyHeader h = npy_parse_header(file->data(), file->size(), path);
  if (!source.dtype.empty() && source.dtype != token_type_name(h.type))
    throw DataError(path + ": a .npy array of " + token_type_name(h.type) +
                    " ids, the source says dtype " + source.dtype + " (leave dtype out for .npy)");
  return TokenArray(file, file->data() + h.data_offset, h.elements, h.type, path, h.data_offset);
}

// A raw array (nanoGPT's .bin, OLMo's memmaps): the source's dtype says how to read it.
TokenArray raw_array(const std::shared_ptr<MappedFile>& file, const std::string& path,
                     const DataSource& source) {
  TokenType type = TokenType::U16;
  if (!token_type_from_name(source.dtype, type))
    throw DataError(path +
                    ": a raw token array (no .npy header) needs the source's dtype: "
                    "uint16, uint32, int32 or int64");
  const uint32_t width = token_type_bytes(type);
  if (file->size() % width != 0)
    throw DataError(path + ": " + std::to_string(file->size()) +
                    " bytes is not a whole number of " + source.dtype +
                    " ids (truncated, or another dtype)");
  TokenArray a(file, file->data(), file->size() / width, type, path, 0);
  if (looks_like_uint32(a))
    throw DataError(path +
                    ": every second uint16 id is 0, as when uint32 ids are read as "
                    "uint16: is its dtype uint32?");
  return a;
}

}  // namespace

std::string tokens_dtype_error(const std::string& dtype) {
  TokenType type = TokenType::U16;
  if (dtype.empty() || token_type_from_name(dtype, type)) return "";
  return "token arrays hold uint16, uint32, int32 or int64, got '" + dtype + "'";
}

OpenedTokens open_token_arrays(const DataSource& source, const std::string& /*split*/,
                               int64_t model_vocab_size) {
  OpenedTokens out = opened_with_model_vocab(source, model_vocab_size);
  uint64_t eos_count = 0;
  for (const std::string& path : expand_inputs({source.path})) {
    auto file = std::make_shared<MappedFile>(path);
    TokenArray a = npy_has_magic(file->data(), file->size()) ? npy_array(file, path, source)
                                                             : raw_array(file, path, source);
    if (!out.arrays.empty() && a.type() != out.arrays.front().type())
      throw DataError(path + ": holds " + token_type_name(a.type()) + " ids, " +
                      out.arrays.front().path() + " of the same source holds " +
                      token_type_name(out.arrays.front().type()));
    if (source.verify) eos_count += a.check(model_vocab_size, source.eos);
    out.arrays.push_back(std::move(a));
  }
  if (source.verify && source.eos >= 0) out.documents = static_cast<int64_t>(eos_count);
  out.what = source.path;
  return out;
}

}  // namespace normlab
