// The grid of a sweep: learning-rate lists and ranges, their labels, and the points (scheme x
// lr x seed) with their overrides. Torch-free: the config loader (config_io.cpp) uses it, and
// so does the config fuzz target (tests/fuzz/).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <stdexcept>

#include "normlab/config/config_io.h"
#include "normlab/config/sweep_grid.h"

namespace normlab {
namespace {

// The shortest decimal text that reads back as exactly `v` (the child's --set value).
std::string exact_text(double v) {
  char buf[40];
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

double round_significant(double v, int digits) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.*e", digits - 1, v);
  return std::strtod(buf, nullptr);
}

double parse_lr(const std::string& s, const std::string& whole) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || v <= 0)
    throw std::invalid_argument("learning rates '" + whole + "': '" + s +
                                "' is not a positive number");
  return v;
}

}  // namespace

std::vector<double> parse_lr_list(const std::string& text) {
  std::vector<double> out;
  if (text.find(':') != std::string::npos) {
    std::vector<std::string> parts;
    std::stringstream ss(text);
    for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
    if (parts.size() != 3)
      throw std::invalid_argument("learning rates '" + text +
                                  "': a range is FIRST:LAST:COUNT, e.g. 1e-4:1e-2:5");
    const double a = parse_lr(parts[0], text), b = parse_lr(parts[1], text);
    int n = 0;
    try {
      size_t used = 0;
      n = std::stoi(parts[2], &used);
      if (used != parts[2].size()) n = 0;
    } catch (const std::exception&) {
      n = 0;
    }
    if (n < 2 || n > 100)
      throw std::invalid_argument("learning rates '" + text +
                                  "': COUNT must be an integer from 2 to 100");
    if (!(b > a))
      throw std::invalid_argument("learning rates '" + text + "': LAST must be above FIRST");
    for (int i = 0; i < n; ++i)
      out.push_back(round_significant(a * std::pow(b / a, double(i) / double(n - 1)), 3));
  } else {
    std::stringstream ss(text);
    for (std::string p; std::getline(ss, p, ',');) out.push_back(parse_lr(p, text));
    if (out.empty()) throw std::invalid_argument("learning rates: empty list");
  }
  std::set<std::string> labels;
  for (double lr : out)
    if (!labels.insert(lr_label(lr)).second)
      throw std::invalid_argument("learning rates '" + text + "': " + lr_label(lr) +
                                  " appears twice (at 3 significant digits)");
  return out;
}

std::string lr_label(double lr) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.2e", lr);  // "3.16e-03"
  std::string mant = buf, exp;
  const auto e = mant.find('e');
  exp = mant.substr(e + 1);
  mant = mant.substr(0, e);
  while (mant.find('.') != std::string::npos && (mant.back() == '0' || mant.back() == '.')) {
    const bool dot = mant.back() == '.';
    mant.pop_back();
    if (dot) break;
  }
  const bool neg = exp[0] == '-';
  std::string digits = exp.substr(1);
  while (digits.size() > 1 && digits[0] == '0') digits.erase(0, 1);
  return mant + "e" + (neg ? "-" : "") + digits;
}

std::vector<SweepPoint> sweep_points(const SweepSpec& spec) {
  if (spec.config.empty()) throw std::invalid_argument("sweep: no base config (--config)");
  const RunConfig base = config_load(spec.config, spec.overrides);
  const std::vector<Scheme> schemes =
      spec.schemes.empty() ? std::vector<Scheme>{base.model.scheme} : spec.schemes;
  const std::vector<double> lrs =
      spec.lrs.empty() ? std::vector<double>{base.optimizer.lr} : spec.lrs;
  const std::vector<uint64_t> seeds =
      spec.seeds.empty() ? std::vector<uint64_t>{base.train.seed} : spec.seeds;
  auto no_repeats = [](const auto& v, const std::string& what, auto show) {
    for (size_t i = 0; i < v.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (v[i] == v[j])
          throw std::invalid_argument("sweep: " + what + " " + show(v[i]) + " listed twice");
  };
  no_repeats(schemes, "scheme", [](Scheme s) { return std::string(enum_name(s)); });
  no_repeats(seeds, "seed", [](uint64_t s) { return std::to_string(s); });
  if (spec.jobs < 0) throw std::invalid_argument("sweep: --jobs must be 0 (automatic) or more");
  if (spec.gpus_per_run < 0) throw std::invalid_argument("sweep: --gpus-per-run must be 0 or more");

  std::vector<SweepPoint> points;
  for (Scheme s : schemes)
    for (double lr : lrs)
      for (uint64_t seed : seeds) {
        SweepPoint p{s, lr, seed,
                     std::string(enum_name(s)) + "-lr" + lr_label(lr) + "-s" + std::to_string(seed),
                     spec.overrides};
        p.overrides.push_back("model.scheme=" + std::string(enum_name(s)));
        p.overrides.push_back("optimizer.lr=" + exact_text(lr));
        p.overrides.push_back("train.seed=" + std::to_string(seed));
        try {
          config_load(spec.config, p.overrides);
        } catch (const std::exception& e) {
          throw std::invalid_argument("sweep point " + p.name + ": " + e.what());
        }
        points.push_back(std::move(p));
      }
  return points;
}

}  // namespace normlab
