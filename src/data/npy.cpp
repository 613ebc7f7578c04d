#include "normlab/data/npy.h"

#include <cctype>
#include <cstring>
#include <map>

#include "normlab/util/error.h"

namespace normlab {
namespace {

constexpr char kNpyMagic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

// A reader of the header's Python dict literal: quoted strings, True/False and tuples of
// non-negative integers (Python 2's `10L` included), as NumPy writes them.
class NpyDictReader {
 public:
  NpyDictReader(const std::string& text, const std::string& path) : s_(text), path_(path) {}

  // key -> value text (strings unquoted; tuples as "(1,2)"); `tuples` gets the tuples' numbers.
  std::map<std::string, std::string> read(std::map<std::string, std::vector<uint64_t>>& tuples) {
    std::map<std::string, std::string> out;
    expect('{');
    while (peek() != '}') {
      const std::string key = quoted();
      expect(':');
      if (out.count(key)) throw fail("the key '" + key + "' appears twice");
      if (peek() == '(') {
        tuples[key] = tuple();
        out[key] = "(tuple)";
      } else if (peek() == '\'' || peek() == '"') {
        out[key] = quoted();
      } else {
        out[key] = word();
      }
      if (peek() == ',')
        ++i_;
      else if (peek() != '}')
        throw fail("expected ',' or '}' at byte " + std::to_string(i_));
    }
    ++i_;
    skip_space();
    if (i_ != s_.size()) throw fail("text after the header's dict at byte " + std::to_string(i_));
    return out;
  }

 private:
  DataError fail(const std::string& msg) const {
    return DataError(path_ + ": bad .npy header: " + msg);
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n')) ++i_;
  }
  char peek() {
    skip_space();
    if (i_ >= s_.size()) throw fail("the dict is not closed");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) throw fail(std::string("expected '") + c + "' at byte " + std::to_string(i_));
    ++i_;
  }
  std::string quoted() {
    const char q = peek();
    if (q != '\'' && q != '"') throw fail("expected a quoted key at byte " + std::to_string(i_));
    const size_t end = s_.find(q, ++i_);
    if (end == std::string::npos) throw fail("a string is not closed");
    std::string v = s_.substr(i_, end - i_);
    i_ = end + 1;
    return v;
  }
  std::string word() {
    const size_t start = i_;
    while (i_ < s_.size() && std::isalnum(static_cast<unsigned char>(s_[i_]))) ++i_;
    if (i_ == start) throw fail("expected a value at byte " + std::to_string(start));
    return s_.substr(start, i_ - start);
  }
  std::vector<uint64_t> tuple() {
    std::vector<uint64_t> v;
    expect('(');
    while (peek() != ')') {
      const size_t start = i_;
      uint64_t n = 0;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
        const uint64_t d = static_cast<uint64_t>(s_[i_++] - '0');
        if (n > (UINT64_MAX - d) / 10) throw fail("a dimension does not fit 64 bits");
        n = n * 10 + d;
      }
      if (i_ == start)
        throw fail("expected a non-negative dimension at byte " + std::to_string(i_));
      if (i_ < s_.size() && s_[i_] == 'L') ++i_;
      v.push_back(n);
      if (peek() == ',')
        ++i_;
      else if (peek() != ')')
        throw fail("expected ',' or ')' in shape at byte " + std::to_string(i_));
    }
    ++i_;
    return v;
  }

  const std::string& s_;
  const std::string& path_;
  size_t i_ = 0;
};

bool npy_token_type(const std::string& descr, TokenType& type) {
  static const std::map<std::string, TokenType> types = {{"<u2", TokenType::U16},
                                                         {"<u4", TokenType::U32},
                                                         {"<i4", TokenType::I32},
                                                         {"<i8", TokenType::I64}};
  const auto it = types.find(descr);
  if (it == types.end()) return false;
  type = it->second;
  return true;
}

}  // namespace

bool npy_has_magic(const char* data, size_t size) {
  return size >= sizeof kNpyMagic && std::memcmp(data, kNpyMagic, sizeof kNpyMagic) == 0;
}

NpyHeader npy_parse_header(const char* data, size_t size, const std::string& path) {
  auto fail = [&](const std::string& msg) { return DataError(path + ": " + msg); };
  if (!npy_has_magic(data, size)) throw fail("not a .npy file (no \\x93NUMPY magic)");
  if (size < 10)
    throw fail("a .npy file cut inside its header (" + std::to_string(size) + " bytes)");
  NpyHeader h;
  h.major = static_cast<unsigned char>(data[6]);
  h.minor = static_cast<unsigned char>(data[7]);
  if (h.minor != 0 || h.major < 1 || h.major > 3)
    throw fail(".npy version " + std::to_string(h.major) + "." + std::to_string(h.minor) +
               ", normlab reads 1.0, 2.0 and 3.0");
  const size_t len_bytes = h.major == 1 ? 2 : 4;
  if (size < 8 + len_bytes) throw fail("a .npy file cut inside its header");
  uint64_t header_len = 0;
  for (size_t b = 0; b < len_bytes; ++b)
    header_len |= uint64_t{static_cast<unsigned char>(data[8 + b])} << (8 * b);
  h.data_offset = 8 + len_bytes + header_len;
  if (h.data_offset > size)
    throw fail("the .npy header announces " + std::to_string(header_len) + " bytes, the file has " +
               std::to_string(size - 8 - len_bytes) + " after the length");
  const std::string text(data + 8 + len_bytes, header_len);
  std::map<std::string, std::vector<uint64_t>> tuples;
  const auto dict = NpyDictReader(text, path).read(tuples);
  for (const char* key : {"descr", "fortran_order", "shape"})
    if (!dict.count(key)) throw fail("bad .npy header: no '" + std::string(key) + "'");
  if (dict.size() != 3) throw fail("bad .npy header: keys other than descr, fortran_order, shape");
  if (!tuples.count("shape")) throw fail("bad .npy header: 'shape' is not a tuple");
  h.descr = dict.at("descr");
  h.shape = tuples.at("shape");
  const std::string order = dict.at("fortran_order");
  if (order != "True" && order != "False")
    throw fail("bad .npy header: 'fortran_order' is " + order + ", not True or False");
  h.fortran_order = order == "True";
  if (!npy_token_type(h.descr, h.type))
    throw fail(
        "dtype '" + h.descr + "'" +
        (h.descr.size() > 1 && h.descr[0] == '>' ? " is big-endian; "
                                                 : " does not hold token ids; ") +
        "normlab reads little-endian uint16, uint32, int32 and int64 ('<u2', '<u4', '<i4', '<i8')");
  if (h.fortran_order && h.shape.size() > 1)
    throw fail("a " + std::to_string(h.shape.size()) +
               "-d array in Fortran order: its ids are not in stream order (save "
               "numpy.ascontiguousarray(a))");
  const uint64_t width = token_type_bytes(h.type);
  h.elements = 1;
  for (const uint64_t d : h.shape) {
    if (d != 0 && h.elements > UINT64_MAX / width / d) throw fail("shape too large for any file");
    h.elements *= d;
  }
  if (h.data_offset % width != 0)
    throw fail("the array starts at byte " + std::to_string(h.data_offset) +
               ", not aligned to its " + std::to_string(width) + "-byte ids");
  const uint64_t have = size - h.data_offset, need = h.elements * width;
  if (have != need)
    throw fail("the .npy header's shape needs " + std::to_string(need) + " bytes of " +
               token_type_name(h.type) + " ids, the file holds " + std::to_string(have) +
               (have < need ? " (truncated)" : " (bytes after the array)"));
  return h;
}

}  // namespace normlab
