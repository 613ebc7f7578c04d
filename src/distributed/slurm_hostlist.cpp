#include "normlab/distributed/slurm_hostlist.h"

#include <cctype>

#include "normlab/util/error.h"

namespace normlab {

namespace {

[[noreturn]] void bad_hostlist(const std::string& list, const std::string& why) {
  throw DistributedError("Slurm host list '" + list + "': " + why);
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (const char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

}  // namespace

std::string slurm_first_host(const std::string& list) {
  std::string host;
  size_t i = 0;
  for (; i < list.size() && list[i] != ','; ++i) {
    const char c = list[i];
    if (c == ']') bad_hostlist(list, "']' without '['");
    if (c != '[') {
      if (std::isspace(static_cast<unsigned char>(c))) bad_hostlist(list, "a space in a host name");
      host += c;
      continue;
    }
    const size_t close = list.find(']', i);
    if (close == std::string::npos) bad_hostlist(list, "'[' without ']'");
    const std::string inside = list.substr(i + 1, close - i - 1);  // "003-007,010"
    if (inside.find('[') != std::string::npos) bad_hostlist(list, "nested '['");
    const std::string range = inside.substr(0, inside.find(','));
    const size_t dash = range.find('-');
    const std::string first = range.substr(0, dash);
    if (!all_digits(first) || (dash != std::string::npos && !all_digits(range.substr(dash + 1))))
      bad_hostlist(list,
                   "'[" + inside + "]' is not a list of numbers and ranges (e.g. [003-007,010])");
    host += first;
    i = close;
  }
  if (host.empty()) bad_hostlist(list, "no host in its first entry");
  return host;
}

}  // namespace normlab
