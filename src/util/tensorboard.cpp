#include "normlab/util/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "normlab/util/error.h"
#include "normlab/util/file_io.h"

namespace normlab {
namespace fs = std::filesystem;

namespace {

constexpr char kPrefix[] = "events.out.tfevents.";

std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    t[i] = c;
  }
  return t;
}

uint32_t mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

void put_fixed32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_fixed64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_fixed(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// A protobuf field key: field number and wire type (0 varint, 1 fixed64, 2 bytes, 5 fixed32).
void put_key(std::string& out, uint32_t field, uint32_t wire) {
  put_varint(out, field << 3 | wire);
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_double(std::string& out, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, 1);
  put_fixed64(out, bits);
}

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_double(e, 1, wall_time);
  if (step != 0) {
    put_key(e, 2, 0);
    put_varint(e, static_cast<uint64_t>(step));
  }
  return e;
}

uint64_t get_varint(const std::string& s, size_t& pos) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos >= s.size()) throw std::invalid_argument("event: truncated varint");
    const auto b = static_cast<uint8_t>(s[pos++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  throw std::invalid_argument("event: varint longer than 10 bytes");
}

[[noreturn]] void tensorboard_fail(const std::string& path, const std::string& what, int err) {
  throw FileError(path + ": " + what + ": " + std::strerror(err));
}

// The events files of `folder` rewritten to hold only the events of steps <= keep.
void keep_events(const std::string& folder, int64_t keep) {
  for (const auto& entry : fs::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name.rfind(kPrefix, 0) != 0) continue;
    const std::string path = entry.path().string();
    if (keep <= 0) {
      fs::remove(path);
      continue;
    }
    const std::string bytes = read_file(path);
    size_t valid = 0;
    std::string kept;
    bool dropped = false;
    size_t records = 0;
    for (const std::string& r : tfrecord_records(bytes, &valid)) {
      int64_t step = 0;
      try {
        step = event_step(r);
      } catch (const std::invalid_argument&) {
        step = 0;  // not ours to judge: keep it
      }
      if (step > keep) {
        dropped = true;
        continue;
      }
      ++records;
      kept += tfrecord_frame(r);
    }
    if (records <= 1)  // the file_version event alone
      fs::remove(path);
    else if (dropped || valid != bytes.size())
      write_file_atomic(path, [&](FileWriter& w) { w.write(kept); });
  }
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  std::string h(buf);
  std::replace(h.begin(), h.end(), '/', '_');
  return h;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_crc32c_table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return ~c;
}

uint32_t masked_crc32c(const void* data, size_t n) { return mask(crc32c(data, n)); }

std::string tfrecord_frame(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_fixed64(out, data.size());
  put_fixed32(out, masked_crc32c(out.data(), 8));
  out += data;
  put_fixed32(out, masked_crc32c(data.data(), data.size()));
  return out;
}

std::vector<std::string> tfrecord_records(const std::string& bytes, size_t* valid_bytes) {
  std::vector<std::string> records;
  size_t pos = 0;
  while (bytes.size() - pos >= 12) {
    const char* p = bytes.data() + pos;
    if (static_cast<uint32_t>(get_fixed(p + 8, 4)) != masked_crc32c(p, 8)) break;
    const uint64_t n = get_fixed(p, 8);
    if (n > bytes.size() - pos - 16) break;
    if (static_cast<uint32_t>(get_fixed(p + 12 + n, 4)) != masked_crc32c(p + 12, n)) break;
    records.emplace_back(p + 12, n);
    pos += 16 + n;
  }
  if (valid_bytes) *valid_bytes = pos;
  return records;
}

std::string event_file_version(double wall_time) {
  std::string e = event_header(wall_time, 0);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string event_scalars(double wall_time, int64_t step, const std::vector<Scalar>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);
    const auto f = static_cast<float>(value);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    put_key(v, 2, 5);
    put_fixed32(v, bits);
    put_bytes(summary, 1, v);
  }
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

int64_t event_step(const std::string& event) {
  int64_t step = 0;
  size_t pos = 0;
  while (pos < event.size()) {
    const uint64_t key = get_varint(event, pos);
    const uint64_t field = key >> 3;
    switch (key & 7) {
      case 0: {
        const uint64_t v = get_varint(event, pos);
        if (field == 2) step = static_cast<int64_t>(v);
        break;
      }
      case 1:
      case 5: {
        const size_t n = (key & 7) == 1 ? 8 : 4;
        if (event.size() - pos < n) throw std::invalid_argument("event: truncated fixed field");
        pos += n;
        break;
      }
      case 2: {
        const uint64_t n = get_varint(event, pos);
        if (n > event.size() - pos) throw std::invalid_argument("event: truncated bytes field");
        pos += n;
        break;
      }
      default: throw std::invalid_argument("event: unknown wire type " + std::to_string(key & 7));
    }
  }
  return step;
}

void events_keep_up_to(const std::string& folder, int64_t keep_up_to_step) {
  try {
    keep_events(folder, keep_up_to_step);
  } catch (const fs::filesystem_error& e) {
    throw FileError(folder + ": cannot rewrite its events files: " + e.what());
  }
}

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

EventWriter::EventWriter(const std::string& folder, int64_t keep_up_to_step) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw FileError(folder + ": cannot create the folder: " + ec.message());
  events_keep_up_to(folder, keep_up_to_step);
  const double now = wall_time_now();
  const std::string base = (fs::path(folder) / kPrefix).string() +
                           std::to_string(static_cast<int64_t>(now)) + "." + host_name() + "." +
                           std::to_string(::getpid());
  for (int i = 0; fd_ < 0; ++i) {
    path_ = i == 0 ? base : base + "." + std::to_string(i);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0 && (errno != EEXIST || i > 100)) tensorboard_fail(path_, "cannot create", errno);
  }
  if (!append(tfrecord_frame(event_file_version(now))))
    tensorboard_fail(path_, "cannot write", errno);
}

EventWriter::~EventWriter() {
  if (fd_ >= 0) ::close(fd_);
}

// A failed write is cut back to the last whole record, so that later records stay readable.
bool EventWriter::append(const std::string& record) {
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (done > 0) {
        const int rc = ::ftruncate(fd_, static_cast<off_t>(size_));
        (void)rc;  // the write's failure is what the caller hears of
      }
      return false;
    }
    done += static_cast<size_t>(n);
  }
  size_ += record.size();
  return true;
}

bool EventWriter::scalars(int64_t step, const std::vector<Scalar>& values) {
  std::vector<Scalar> finite;
  for (const Scalar& s : values)
    if (std::isfinite(s.second)) finite.push_back(s);
  if (finite.empty()) return true;
  return append(tfrecord_frame(event_scalars(wall_time_now(), step, finite)));
}

}  // namespace normlab
