#include "normlab/data/source.h"

#include <cmath>
#include <sstream>

#include "data/token_format.h"

namespace normlab {

std::string source_error(const DataSource& s) {
  if (s.path.empty()) return "path: empty (a folder, file or prefix is needed)";
  if (const std::string err = token_format(s.format).dtype_error(s.dtype); !err.empty())
    return "dtype: " + err;
  if (s.eos < -1) return "eos: expected an id >= 0, got " + std::to_string(s.eos);
  if (!std::isfinite(s.weight) || s.weight <= 0) {
    std::ostringstream os;
    os.precision(17);
    os << s.weight;
    return "weight: expected a positive number, got " + os.str();
  }
  return "";
}

bool is_plain_folder(const DataSource& s) {
  const DataSource plain{s.path};
  return s.format == plain.format && s.dtype == plain.dtype && s.eos == plain.eos &&
         s.weight == plain.weight && s.verify == plain.verify;
}

}  // namespace normlab
