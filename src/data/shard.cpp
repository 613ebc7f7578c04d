#include "normlab/data/shard.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

namespace normlab {
namespace {

constexpr char kMagic[8] = {'N', 'L', 'S', 'H', 'A', 'R', 'D', '\0'};

template <class T>
void put(char* p, T v) {
  std::memcpy(p, &v, sizeof v);  // little-endian hosts only (x86-64, aarch64)
}
template <class T>
T get(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::string encode_header(const ShardHeader& h) {
  std::string out(kShardHeaderBytes, '\0');
  std::memcpy(out.data(), kMagic, 8);
  put<uint32_t>(&out[8], h.version);
  put<uint32_t>(&out[12], h.token_bytes);
  put<uint64_t>(&out[16], h.tokens);
  put<uint32_t>(&out[24], h.crc32);
  put<uint64_t>(&out[32], h.vocab_size);
  return out;
}

void write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw ShardError(path + ": write failed: " + std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

ShardHeader shard_header_parse(const char* data, size_t size, const std::string& path) {
  if (size < kShardHeaderBytes)
    throw ShardError(path + ": not a token shard (" + std::to_string(size) +
                     " bytes, shorter than the header)");
  if (std::memcmp(data, kMagic, 8) != 0)
    throw ShardError(path + ": not a token shard (wrong magic)");
  ShardHeader h;
  h.version = get<uint32_t>(data + 8);
  h.token_bytes = get<uint32_t>(data + 12);
  h.tokens = get<uint64_t>(data + 16);
  h.crc32 = get<uint32_t>(data + 24);
  h.vocab_size = get<uint64_t>(data + 32);
  if (h.version != kShardVersion)
    throw ShardError(path + ": shard format version " + std::to_string(h.version) +
                     ", this normlab reads version " + std::to_string(kShardVersion));
  if (h.token_bytes != 2 && h.token_bytes != 4)
    throw ShardError(path + ": invalid token width " + std::to_string(h.token_bytes) +
                     " bytes (2 or 4)");
  if (h.tokens > (size - kShardHeaderBytes) / h.token_bytes ||
      size != kShardHeaderBytes + h.tokens * h.token_bytes)
    throw ShardError(path + ": the header announces " + std::to_string(h.tokens) +
                     " tokens but the file holds " +
                     std::to_string((size - kShardHeaderBytes) / h.token_bytes) +
                     " (truncated or corrupted)");
  return h;
}

ShardWriter::ShardWriter(const std::string& path, uint32_t token_bytes, uint64_t vocab_size)
    : path_(path) {
  header_.token_bytes = token_bytes;
  header_.vocab_size = vocab_size;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw ShardError(path + ": cannot create: " + std::strerror(errno));
  const std::string placeholder = encode_header(header_);
  write_all(fd_, placeholder.data(), placeholder.size(), path_);
}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void ShardWriter::append(const int32_t* ids, size_t n) {
  buffer_.resize(n * header_.token_bytes);
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    if (id < 0 || static_cast<uint64_t>(id) >= header_.vocab_size)
      throw ShardError(path_ + ": token id " + std::to_string(id) + " outside the vocabulary of " +
                       std::to_string(header_.vocab_size));
    if (header_.token_bytes == 2)
      put<uint16_t>(&buffer_[2 * i], static_cast<uint16_t>(id));
    else
      put<uint32_t>(&buffer_[4 * i], static_cast<uint32_t>(id));
  }
  header_.crc32 = crc32_of(buffer_.data(), buffer_.size(), header_.crc32);
  header_.tokens += n;
  write_all(fd_, buffer_.data(), buffer_.size(), path_);
}

ShardHeader ShardWriter::finish() {
  const std::string h = encode_header(header_);
  if (::pwrite(fd_, h.data(), h.size(), 0) != static_cast<ssize_t>(h.size()))
    throw ShardError(path_ + ": cannot write the header: " + std::strerror(errno));
  if (::fsync(fd_) != 0) throw ShardError(path_ + ": fsync failed: " + std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw ShardError(path_ + ": close failed: " + std::strerror(errno));
  return header_;
}

ShardFile::ShardFile(const std::string& path) : file_(path) {
  header_ = shard_header_parse(file_.data(), file_.size(), path);
  payload_ = file_.data() + kShardHeaderBytes;
}

void ShardFile::copy(uint64_t begin, uint64_t n, int64_t* out) const {
  if (header_.token_bytes == 2) {
    const auto* p = reinterpret_cast<const uint16_t*>(payload_) + begin;
    for (uint64_t i = 0; i < n; ++i) out[i] = p[i];
  } else {
    const auto* p = reinterpret_cast<const uint32_t*>(payload_) + begin;
    for (uint64_t i = 0; i < n; ++i) out[i] = p[i];
  }
}

void ShardFile::verify() const {
  const uint32_t crc = crc32_of(payload_, header_.tokens * header_.token_bytes);
  if (crc != header_.crc32)
    throw ShardError(path() + ": checksum mismatch (the tokens are corrupted: CRC-32 " +
                     std::to_string(crc) + ", header says " + std::to_string(header_.crc32) + ")");
}

void shard_index_write(const std::string& dir, const ShardIndex& idx) {
  nlohmann::json j;
  j["format"] = "normlab-token-shards";
  j["version"] = kShardVersion;
  j["dtype"] = idx.token_bytes == 2 ? "uint16" : "uint32";
  j["tokenizer"] = {{"file", idx.tokenizer_file},
                    {"crc32", idx.tokenizer_crc32},
                    {"vocab_size", idx.vocab_size},
                    {"eos_id", idx.eos_id}};
  j["inputs"] = idx.inputs;
  j["val_fraction"] = idx.val_fraction;
  for (const auto& [name, s] : idx.splits) {
    nlohmann::json shards = nlohmann::json::array();
    for (const auto& e : s.shards)
      shards.push_back({{"file", e.file}, {"tokens", e.tokens}, {"crc32", e.crc32}});
    j["splits"][name] = {{"documents", s.documents}, {"tokens", s.tokens}, {"shards", shards}};
  }
  const std::string text = j.dump(2) + "\n";
  write_file_atomic((std::filesystem::path(dir) / "index.json").string(),
                    [&](FileWriter& w) { w.write(text); });
}

ShardIndex shard_index_read(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "index.json").string();
  if (!std::filesystem::exists(path))
    throw ShardError(path + ": not found (is " + dir +
                     " a folder written by `normlab data prepare`?)");
  return shard_index_parse(read_file(path), path);
}

ShardIndex shard_index_parse(const std::string& text, const std::string& path) {
  using nlohmann::json;
  // Integers are read only from JSON integers: nlohmann's get<> would convert 1e30 or -1 with
  // undefined behaviour (found by tests/fuzz/fuzz_shard.cpp).
  auto count = [&](const json& j, const char* key, const std::string& where, uint64_t max) {
    const json& v = j.at(key);
    if (!v.is_number_unsigned() || v.get<uint64_t>() > max)
      throw ShardError(path + ": " + where + key + " must be an integer from 0 to " +
                       std::to_string(max));
    return v.get<uint64_t>();
  };
  constexpr uint64_t kU64 = std::numeric_limits<uint64_t>::max(),
                     kU32 = std::numeric_limits<uint32_t>::max();
  try {
    const json j = json::parse(text);
    if (!j.is_object() || !j.contains("format") || j["format"] != "normlab-token-shards")
      throw ShardError(path + ": not a normlab shard index");
    if (!j.contains("version") || j["version"] != kShardVersion)
      throw ShardError(path + ": index version " +
                       (j.contains("version") ? j["version"].dump() : "(none)") +
                       ", this normlab reads " + std::to_string(kShardVersion));
    ShardIndex idx;
    const std::string dtype = j.at("dtype").get<std::string>();
    if (dtype != "uint16" && dtype != "uint32")
      throw ShardError(path + ": unknown dtype '" + dtype + "'");
    idx.token_bytes = dtype == "uint16" ? 2 : 4;
    const json& t = j.at("tokenizer");
    idx.tokenizer_file = t.at("file").get<std::string>();
    idx.tokenizer_crc32 = static_cast<uint32_t>(count(t, "crc32", "tokenizer.", kU32));
    idx.vocab_size = count(t, "vocab_size", "tokenizer.", kU64);
    const json& eos = t.at("eos_id");
    if (!eos.is_number_integer()) throw ShardError(path + ": tokenizer.eos_id must be an integer");
    idx.eos_id = eos.get<int64_t>();
    idx.inputs = j.value("inputs", std::vector<std::string>{});
    idx.val_fraction = j.value("val_fraction", 0.0);
    for (const auto& [name, s] : j.at("splits").items()) {
      const std::string where = "splits." + name + ".";
      SplitIndex split;
      split.documents = count(s, "documents", where, kU64);
      split.tokens = count(s, "tokens", where, kU64);
      uint64_t sum = 0;
      for (const auto& e : s.at("shards")) {
        ShardEntry entry{e.at("file").get<std::string>(),
                         count(e, "tokens", where + "shards[].", kU64),
                         static_cast<uint32_t>(count(e, "crc32", where + "shards[].", kU32))};
        // Shards live in the index's own folder: a hostile index must not point elsewhere.
        const std::filesystem::path file(entry.file);
        if (entry.file.empty() || file.is_absolute() || file.has_parent_path() ||
            entry.file == "." || entry.file == "..")
          throw ShardError(path + ": split '" + name + "' names shard file '" + entry.file +
                           "', which is not a file name in the index's folder");
        if (entry.tokens > kU64 - sum)
          throw ShardError(path + ": split '" + name + "': token counts overflow");
        sum += entry.tokens;
        split.shards.push_back(std::move(entry));
      }
      if (sum != split.tokens)
        throw ShardError(path + ": split '" + name + "' says " + std::to_string(split.tokens) +
                         " tokens but its shards hold " + std::to_string(sum));
      idx.splits[name] = std::move(split);
    }
    return idx;
  } catch (const json::exception& e) {
    throw ShardError(path + ": malformed index: " + e.what());
  }
}

}  // namespace normlab
