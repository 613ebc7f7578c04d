#include "normlab/data/text_input.h"

#include <glob.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace normlab {
namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_glob(const std::string& p) { return p.find_first_of("*?[") != std::string::npos; }

// Reads a plain or gzip file line by line (zlib reads uncompressed files transparently).
class LineReader {
 public:
  explicit LineReader(const std::string& path) : path_(path) {
    file_ = gzopen(path.c_str(), "rb");
    if (!file_) throw InputError(path + ": cannot open for reading");
    gzbuffer(file_, 1 << 18);
  }
  ~LineReader() {
    if (file_) gzclose(file_);
  }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Next line without its '\n' (and '\r'); false at the end of the file.
  bool next(std::string& line) {
    line.clear();
    for (;;) {
      if (pos_ == len_) {
        if (!fill()) return !line.empty();
      }
      const char* start = buf_.data() + pos_;
      const char* nl = static_cast<const char*>(std::memchr(start, '\n', len_ - pos_));
      if (nl) {
        line.append(start, nl);
        pos_ += static_cast<size_t>(nl - start) + 1;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return true;
      }
      line.append(start, len_ - pos_);
      pos_ = len_;
    }
  }

  uint64_t bytes_read() const { return static_cast<uint64_t>(gzoffset(file_)); }

 private:
  bool fill() {
    buf_.resize(1 << 18);
    const int n = gzread(file_, buf_.data(), static_cast<unsigned>(buf_.size()));
    if (n < 0) {
      int err = 0;
      const char* msg = gzerror(file_, &err);
      throw InputError(path_ + ": read error: " + (msg ? msg : "unknown") +
                       (err == Z_DATA_ERROR ? " (corrupt or truncated gzip data)" : ""));
    }
    pos_ = 0;
    len_ = static_cast<size_t>(n);
    return n > 0;
  }

  std::string path_;
  gzFile file_ = nullptr;
  std::string buf_;
  size_t pos_ = 0, len_ = 0;
};

}  // namespace

std::vector<std::string> expand_inputs(const std::vector<std::string>& patterns) {
  std::vector<std::string> files;
  for (const std::string& p : patterns) {
    std::vector<std::string> matched;
    if (is_glob(p)) {
      glob_t g{};
      const int rc = ::glob(p.c_str(), 0, nullptr, &g);
      if (rc == 0)
        for (size_t i = 0; i < g.gl_pathc; ++i) matched.emplace_back(g.gl_pathv[i]);
      globfree(&g);
      if (matched.empty()) throw InputError(p + ": the pattern matches no file");
    } else {
      matched.push_back(p);
    }
    std::sort(matched.begin(), matched.end());
    for (const std::string& f : matched) {
      std::error_code ec;
      if (!fs::exists(f, ec)) throw InputError(f + ": no such file");
      if (!fs::is_regular_file(f, ec)) throw InputError(f + ": not a regular file");
      if (::access(f.c_str(), R_OK) != 0) throw InputError(f + ": not readable");
      files.push_back(f);
    }
  }
  return files;
}

size_t utf8_error_offset(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0)
      len = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0)
      len = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0)
      len = 4, cp = c & 0x07;
    else
      return i;
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are invalid.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
      return i;
    i += len;
  }
  return std::string::npos;
}

void read_documents(const std::string& path, const std::string& text_field,
                    const std::function<void(std::string&& document)>& sink,
                    const std::function<void(uint64_t bytes_read)>& bytes_read) {
  const std::string base = ends_with(path, ".gz") ? path.substr(0, path.size() - 3) : path;
  const bool jsonl = ends_with(base, ".jsonl");
  if (ends_with(base, ".parquet"))
    throw InputError(path +
                     ": Parquet is read through tools/parquet_to_jsonl.py, which streams it into "
                     ".jsonl.gz files for --input (docs/data.md)");
  LineReader reader(path);
  std::string line, doc;
  uint64_t line_no = 0, doc_line = 0;

  auto emit = [&](std::string&& text, uint64_t at_line) {
    if (text.empty()) return;
    const size_t bad = utf8_error_offset(text);
    if (bad != std::string::npos)
      throw InputError(path + ":" + std::to_string(at_line) + ": invalid UTF-8 (byte " +
                       std::to_string(bad) + " of the document)");
    sink(std::move(text));
    if (bytes_read) bytes_read(reader.bytes_read());
  };

  while (reader.next(line)) {
    ++line_no;
    if (jsonl) {
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw InputError(path + ":" + std::to_string(line_no) + ": invalid JSON: " + e.what());
      }
      if (!j.is_object() || !j.contains(text_field) || !j[text_field].is_string())
        throw InputError(path + ":" + std::to_string(line_no) + ": no string field '" + text_field +
                         "'");
      emit(j[text_field].get<std::string>(), line_no);
    } else if (line.find_first_not_of(" \t") == std::string::npos) {
      emit(std::move(doc), doc_line);
      doc.clear();
    } else {
      if (doc.empty())
        doc_line = line_no;
      else
        doc += '\n';
      doc += line;
    }
  }
  if (!jsonl) emit(std::move(doc), doc_line);
}

}  // namespace normlab
