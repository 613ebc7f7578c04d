// TokenDataset over a source (source.h): a shard folder, flat token arrays, a Megatron dataset.
#include <filesystem>

#include "normlab/data/loader.h"
#include "normlab/data/megatron_index.h"
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

TokenDataset::TokenDataset(const DataSource& source, const std::string& split, int64_t seq_len,
                           int64_t model_vocab_size)
    : source_(source), seq_len_(seq_len) {
  if (seq_len < 1) throw DataError("data.seq_len must be positive, got " + std::to_string(seq_len));
  if (const std::string err = source_error(source); !err.empty())
    throw DataError(source.path + ": " + err);
  if (source.format == "shards") {
    open_shards(source.path, split, source.verify);
    if (model_vocab_size > 0) check_vocabulary(index_, source.path, model_vocab_size, "");
    return;
  }
  if (model_vocab_size < 1)
    throw DataError(source.path + ": a " + source.format +
                    " source needs the model's vocabulary size to check its ids");
  if (source.eos >= model_vocab_size)
    throw DataError(source.path + ": eos " + std::to_string(source.eos) +
                    " is outside the vocabulary of " + std::to_string(model_vocab_size) +
                    " (model.vocab_size)");
  vocab_ = model_vocab_size;
  index_.vocab_size = static_cast<uint64_t>(model_vocab_size);
  index_.eos_id = source.eos;
  if (source.format == "tokens")
    open_tokens(model_vocab_size);
  else
    open_megatron(model_vocab_size);
  index_.token_bytes = token_type_bytes(arrays_.front().type());
}

void TokenDataset::require_samples(const std::string& what) const {
  if (total_samples_ == 0)
    throw DataError(
        what + " holds " + std::to_string(num_tokens()) +
        " tokens, not enough for one sample of seq_len + 1 = " + std::to_string(seq_len_ + 1));
}

void TokenDataset::open_tokens(int64_t vocab) {
  uint64_t eos_count = 0;
  for (const std::string& path : expand_inputs({source_.path})) {
    auto file = std::make_shared<MappedFile>(path);
    TokenArray a = npy_has_magic(file->data(), file->size()) ? npy_array(file, path, source_)
                                                             : raw_array(file, path, source_);
    if (!arrays_.empty() && a.type() != arrays_.front().type())
      throw DataError(path + ": holds " + token_type_name(a.type()) + " ids, " +
                      arrays_.front().path() + " of the same source holds " +
                      token_type_name(arrays_.front().type()));
    if (source_.verify) eos_count += a.check(vocab, source_.eos);
    add(std::move(a));
  }
  if (source_.verify && source_.eos >= 0) documents_ = static_cast<int64_t>(eos_count);
  require_samples(source_.path);
}

void TokenDataset::open_megatron(int64_t vocab) {
  std::string prefix = source_.path;
  for (const char* ext : {".bin", ".idx"})
    if (prefix.size() > 4 && prefix.compare(prefix.size() - 4, 4, ext) == 0)
      prefix.resize(prefix.size() - 4);
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  for (const auto& p : {idx_path, bin_path})
    if (!std::filesystem::is_regular_file(p))
      throw DataError(p + ": not found (a Megatron dataset is PREFIX.idx and PREFIX.bin)");
  const MappedFile idx_file(idx_path);
  auto bin = std::make_shared<MappedFile>(bin_path);
  const MegatronIndex idx =
      megatron_index_parse(idx_file.data(), idx_file.size(), idx_path, bin->size(), bin_path);
  const std::string dtype = megatron_dtype_name(idx.dtype_code);
  if (!source_.dtype.empty() && source_.dtype != dtype)
    throw DataError(idx_path + ": holds " + dtype + " ids, the source says dtype " + source_.dtype);
  const TokenType type = idx.token_bytes == 2   ? TokenType::U16
                         : idx.token_bytes == 4 ? TokenType::I32
                                                : TokenType::I64;
  const char* data = bin->data();
  TokenArray a(bin, data, idx.tokens, type, bin_path, 0);
  if (source_.verify) a.check(vocab);
  add(std::move(a));
  documents_ = static_cast<int64_t>(idx.documents);
  require_samples(prefix);
}

}  // namespace normlab
