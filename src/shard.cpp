#include "normlab/shard.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
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

uint32_t crc32_of(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {  // zlib takes uInt lengths
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = static_cast<uint32_t>(::crc32(crc, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return crc;
}

ShardHeader shard_header_parse(const char* data, size_t size, const std::string& path) {
  if (size < kShardHeaderBytes)
    throw ShardError(path + ": not a token shard (" + std::to_string(size) + " bytes, shorter than the header)");
  if (std::memcmp(data, kMagic, 8) != 0) throw ShardError(path + ": not a token shard (wrong magic)");
  ShardHeader h;
  h.version = get<uint32_t>(data + 8);
  h.token_bytes = get<uint32_t>(data + 12);
  h.tokens = get<uint64_t>(data + 16);
  h.crc32 = get<uint32_t>(data + 24);
  h.vocab_size = get<uint64_t>(data + 32);
  if (h.version != kShardVersion)
    throw ShardError(path + ": shard format version " + std::to_string(h.version) + ", this normlab reads version " +
                     std::to_string(kShardVersion));
  if (h.token_bytes != 2 && h.token_bytes != 4)
    throw ShardError(path + ": invalid token width " + std::to_string(h.token_bytes) + " bytes (2 or 4)");
  if (h.tokens > (size - kShardHeaderBytes) / h.token_bytes || size != kShardHeaderBytes + h.tokens * h.token_bytes)
    throw ShardError(path + ": the header announces " + std::to_string(h.tokens) + " tokens but the file holds " +
                     std::to_string((size - kShardHeaderBytes) / h.token_bytes) + " (truncated or corrupted)");
  return h;
}

ShardWriter::ShardWriter(const std::string& path, uint32_t token_bytes, uint64_t vocab_size) : path_(path) {
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
    if (header_.token_bytes == 2) put<uint16_t>(&buffer_[2 * i], static_cast<uint16_t>(id));
    else put<uint32_t>(&buffer_[4 * i], static_cast<uint32_t>(id));
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
    throw ShardError(path() + ": checksum mismatch (the tokens are corrupted: CRC-32 " + std::to_string(crc) +
                     ", header says " + std::to_string(header_.crc32) + ")");
}

void shard_index_write(const std::string& dir, const ShardIndex& idx) {
  nlohmann::json j;
  j["format"] = "normlab-token-shards";
  j["version"] = kShardVersion;
  j["dtype"] = idx.token_bytes == 2 ? "uint16" : "uint32";
  j["tokenizer"] = {{"file", idx.tokenizer_file}, {"crc32", idx.tokenizer_crc32}, {"vocab_size", idx.vocab_size},
                    {"eos_id", idx.eos_id}};
  j["inputs"] = idx.inputs;
  j["val_fraction"] = idx.val_fraction;
  for (const auto& [name, s] : idx.splits) {
    nlohmann::json shards = nlohmann::json::array();
    for (const auto& e : s.shards) shards.push_back({{"file", e.file}, {"tokens", e.tokens}, {"crc32", e.crc32}});
    j["splits"][name] = {{"documents", s.documents}, {"tokens", s.tokens}, {"shards", shards}};
  }
  const std::string text = j.dump(2) + "\n";
  write_file_atomic((std::filesystem::path(dir) / "index.json").string(), [&](FileWriter& w) { w.write(text); });
}

ShardIndex shard_index_read(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "index.json").string();
  if (!std::filesystem::exists(path))
    throw ShardError(path + ": not found (is " + dir + " a folder written by `normlab data prepare`?)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
    if (j.value("format", "") != "normlab-token-shards") throw ShardError(path + ": not a normlab shard index");
    if (j.value("version", 0u) != kShardVersion)
      throw ShardError(path + ": index version " + std::to_string(j.value("version", 0u)) + ", this normlab reads " +
                       std::to_string(kShardVersion));
    ShardIndex idx;
    const std::string dtype = j.at("dtype").get<std::string>();
    if (dtype != "uint16" && dtype != "uint32") throw ShardError(path + ": unknown dtype '" + dtype + "'");
    idx.token_bytes = dtype == "uint16" ? 2 : 4;
    const auto& t = j.at("tokenizer");
    idx.tokenizer_file = t.at("file").get<std::string>();
    idx.tokenizer_crc32 = t.at("crc32").get<uint32_t>();
    idx.vocab_size = t.at("vocab_size").get<uint64_t>();
    idx.eos_id = t.at("eos_id").get<int64_t>();
    idx.inputs = j.value("inputs", std::vector<std::string>{});
    idx.val_fraction = j.value("val_fraction", 0.0);
    for (const auto& [name, s] : j.at("splits").items()) {
      SplitIndex split;
      split.documents = s.at("documents").get<uint64_t>();
      split.tokens = s.at("tokens").get<uint64_t>();
      for (const auto& e : s.at("shards"))
        split.shards.push_back({e.at("file").get<std::string>(), e.at("tokens").get<uint64_t>(),
                                e.at("crc32").get<uint32_t>()});
      idx.splits[name] = std::move(split);
    }
    return idx;
  } catch (const nlohmann::json::exception& e) {
    throw ShardError(path + ": malformed index: " + e.what());
  }
}

}  // namespace normlab
