// Documents from text files, the input of tokenizer training and data prepare:
//   *.jsonl (and *.jsonl.gz): one document per line, its text in a string field (`text`)
//   anything else (*.txt, *.txt.gz, ...): documents separated by one or more blank lines
// Files ending in .gz are decompressed. Every document must be valid UTF-8; errors name the
// file and line.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "normlab/util/error.h"

namespace normlab {

class InputError : public DataError {
 public:
  using DataError::DataError;
};

/// Expands files and glob patterns into a sorted list of regular files; a pattern that matches
/// nothing, or a missing or unreadable file, is an InputError naming it.
std::vector<std::string> expand_inputs(const std::vector<std::string>& patterns);

/// Calls `sink(document)` for each non-empty document of `path` in order; `bytes_read` (when
/// given) receives the number of input bytes consumed so far after each document.
void read_documents(const std::string& path, const std::string& text_field,
                    const std::function<void(std::string&& document)>& sink,
                    const std::function<void(uint64_t bytes_read)>& bytes_read = nullptr);

/// The offset of the first invalid UTF-8 byte of `s`, or std::string::npos.
size_t utf8_error_offset(std::string_view s);

}  // namespace normlab
