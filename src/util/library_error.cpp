#include "normlab/util/library_error.h"

#include <c10/util/Exception.h>

#include <exception>
#include <sstream>

namespace normlab {

LibraryError::LibraryError(std::string doing, std::string message, std::string backtrace,
                           bool from_torch)
    : Error(doing.empty() ? message : (doing[0] == '.' ? doing.substr(1) : doing) + ": " + message),
      doing_(std::move(doing)),
      message_(std::move(message)),
      backtrace_(std::move(backtrace)),
      from_torch_(from_torch) {}

std::string one_line(const std::string& text) {
  std::istringstream in(text);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    const size_t last = line.find_last_not_of(" \t\r");
    out += (out.empty() ? "" : "; ") + line.substr(first, last - first + 1);
  }
  return out;
}

void rethrow_with_context(const std::string& doing) {
  try {
    throw;
  } catch (const LibraryError& e) {
    // A sub-module's context (".attn") continues its parent's name: "forward of blocks.0.attn".
    const std::string& inner = e.doing();
    throw LibraryError(inner.empty()     ? doing
                       : inner[0] == '.' ? doing + inner
                                         : doing + ", " + inner,
                       e.message(), e.backtrace(), e.from_torch());
  } catch (const c10::Error& e) {
    throw LibraryError(doing, one_line(e.what_without_backtrace()), e.what());
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw LibraryError(doing, one_line(e.what()), e.what(), /*from_torch=*/false);
  }
}

}  // namespace normlab
