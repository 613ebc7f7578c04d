// DataFormat::Megatron: a Megatron-LM indexed dataset, PREFIX.idx (megatron_index.h) and
// PREFIX.bin, read whole.
#include <filesystem>
#include <memory>

#include "data/token_format.h"
#include "normlab/data/megatron_index.h"
#include "normlab/util/file_io.h"

namespace normlab {

std::string megatron_dtype_error(const std::string& dtype) {
  if (dtype.empty() || dtype == "uint16" || dtype == "int32" || dtype == "int64") return "";
  return "a Megatron dataset of token ids holds uint16, int32 or int64, got '" + dtype + "'";
}

OpenedTokens open_megatron(const DataSource& source, const std::string& /*split*/,
                           int64_t model_vocab_size) {
  OpenedTokens out = opened_with_model_vocab(source, model_vocab_size);
  std::string prefix = source.path;
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
  if (!source.dtype.empty() && source.dtype != dtype)
    throw DataError(idx_path + ": holds " + dtype + " ids, the source says dtype " + source.dtype);
  const TokenType type = idx.token_bytes == 2   ? TokenType::U16
                         : idx.token_bytes == 4 ? TokenType::I32
                                                : TokenType::I64;
  const char* data = bin->data();
  TokenArray a(bin, data, idx.tokens, type, bin_path, 0);
  if (source.verify) a.check(model_vocab_size);
  out.arrays.push_back(std::move(a));
  out.documents = static_cast<int64_t>(idx.documents);
  out.what = prefix;
  return out;
}

}  // namespace normlab
