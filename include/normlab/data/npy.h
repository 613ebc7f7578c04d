// A NumPy .npy file of token ids (numpy.save), read through its header.
//
// Layout, as NumPy's format module writes it: the magic "\x93NUMPY", a major and a minor
// version byte (1.0, 2.0 or 3.0), the header's length (little-endian uint16 in version 1,
// uint32 in versions 2 and 3), then the header: a Python dict literal such as
// `{'descr': '<u2', 'fortran_order': False, 'shape': (1000,), }`, padded with spaces to a
// '\n' so that the array starts aligned. The array's bytes follow, nothing after them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "normlab/data/token_array.h"

namespace normlab {

struct NpyHeader {
  int major = 0, minor = 0;
  std::string descr;  // as written: "<u2", "<i8", ...
  TokenType type = TokenType::U16;
  bool fortran_order = false;
  std::vector<uint64_t> shape;  // () is one element
  uint64_t elements = 0;        // the product of shape
  uint64_t data_offset = 0;     // where the array starts in the file
};

/// True when the bytes start with NumPy's magic "\x93NUMPY".
bool npy_has_magic(const char* data, size_t size);

/// Parses and checks the header of a .npy file of `size` bytes: the version (1.0, 2.0, 3.0), a
/// dict with exactly descr, fortran_order and shape, a little-endian (or native) dtype that holds
/// token ids (uint16, uint32, int32, int64), C order (or at most one dimension), an array start
/// aligned to the dtype, and exactly elements x width bytes after the header. Throws DataError
/// naming `path` and the defect.
NpyHeader npy_parse_header(const char* data, size_t size, const std::string& path);

}  // namespace normlab
