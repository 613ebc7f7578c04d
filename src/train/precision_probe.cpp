#include "normlab/train/precision_probe.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "normlab/nn/autocast.h"
#include "normlab/nn/linear.h"
#include "normlab/util/device.h"
#include "normlab/util/file_io.h"

namespace normlab {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kCacheFormat = "normlab precision cache 1";
constexpr double kPassFlops = 2e10;  // the FLOPs one measured pass aims at
constexpr int64_t kMaxRows = 1024, kMinRows = 64;
constexpr int kReps = 3;  // timed passes of each precision, after one warm-up each

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "unknown" : line.substr(start);
  }
  return "unknown";
}

// (in, out) of one block's linear layers and the LM head.
std::vector<std::pair<int64_t, int64_t>> gemm_shapes(const ModelConfig& m) {
  const int64_t hd = m.head_dim(), d = m.d_model;
  return {{d, (m.n_heads + 2 * m.kv_heads()) * hd},
          {m.n_heads * hd, d},
          {d, 2 * m.d_ff},
          {m.d_ff, d},
          {d, m.vocab_size}};
}

double weights_per_row(const ModelConfig& m) {
  double n = 0;
  for (const auto& [in, out] : gemm_shapes(m)) n += static_cast<double>(in) * out;
  return n;
}

// A forward of every layer (under bf16 autocast or not), then their backward, as a training
// step orders them; seconds. The gradients are dropped first, as the optimizer step would.
double one_pass(std::vector<Linear>& layers, const std::vector<torch::Tensor>& xs,
                const std::vector<torch::Tensor>& grads, bool bf16) {
  for (auto& l : layers) l->weight.mutable_grad().reset();
  for (const auto& x : xs) x.mutable_grad().reset();
  const auto t0 = Clock::now();
  std::vector<torch::Tensor> ys;
  {
    AutocastGuard guard(c10::DeviceType::CPU, bf16);
    for (size_t i = 0; i < layers.size(); ++i) ys.push_back(layers[i]->forward(xs[i]));
  }
  torch::autograd::backward(ys, grads);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

bool positive_finite(const nlohmann::json& v) {
  return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0;
}

}  // namespace

int64_t precision_probe_rows(const ModelConfig& model, int64_t tokens) {
  const double per_row = 6.0 * weights_per_row(model);
  const int64_t cap = std::max<int64_t>(
      kMinRows, static_cast<int64_t>(kPassFlops / std::max(per_row, 1.0)) / kMinRows * kMinRows);
  return std::max<int64_t>(1, std::min({tokens, kMaxRows, cap}));
}

std::string precision_probe_key(const ModelConfig& model, int64_t rows, const CpuClass& cpu,
                                int threads) {
  std::string key = "cpu " + cpu_model_name() + "; " + cpu.describe() + "; onednn limit " +
                    (cpu.onednn_limit.empty() ? "none" : cpu.onednn_limit) + "; threads " +
                    std::to_string(threads) + "; torch " + torch_version() + "; gemms";
  for (const auto& [in, out] : gemm_shapes(model))
    key += " " + std::to_string(in) + "x" + std::to_string(out);
  return key + " on " + std::to_string(rows) + " rows";
}

std::string precision_cache_path() {
  const auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v && *v ? std::string(v) : std::string();
  };
  std::string dir = env("NORMLAB_CACHE_DIR");
  if (dir.empty() && !env("XDG_CACHE_HOME").empty()) dir = env("XDG_CACHE_HOME") + "/normlab";
  if (dir.empty() && !env("HOME").empty()) dir = env("HOME") + "/.cache/normlab";
  return dir.empty() ? "" : (fs::path(dir) / "precision.json").string();
}

std::optional<PrecisionTiming> precision_cache_read(const std::string& path, const std::string& key,
                                                    const PrecisionWarn& warn) {
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return std::nullopt;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const std::exception& e) {
    warn("precision cache " + path + " does not read (" + std::string(e.what()) +
         "): ignored, measuring again");
    return std::nullopt;
  }
  if (!j.is_object() || j.value("format", "") != kCacheFormat || !j.contains("entries") ||
      !j["entries"].is_object()) {
    warn("precision cache " + path + " is not a normlab precision cache (format \"" +
         std::string(kCacheFormat) + "\"): ignored, measuring again");
    return std::nullopt;
  }
  const auto it = j["entries"].find(key);
  if (it == j["entries"].end()) return std::nullopt;
  const nlohmann::json& e = *it;
  if (!e.is_object() || !positive_finite(e.value("fp32_seconds", nlohmann::json())) ||
      !positive_finite(e.value("bf16_seconds", nlohmann::json())) ||
      !e.value("rows", nlohmann::json()).is_number_integer()) {
    warn("precision cache " + path +
         ": the entry for this machine and model does not read (fp32_seconds and bf16_seconds "
         "must be positive numbers, rows an integer): ignored, measuring again");
    return std::nullopt;
  }
  PrecisionTiming t;
  t.fp32_seconds = e["fp32_seconds"].get<double>();
  t.bf16_seconds = e["bf16_seconds"].get<double>();
  t.rows = e["rows"].get<int64_t>();
  t.source = "cached";
  t.key = key;
  return t;
}

void precision_cache_write(const std::string& path, const PrecisionTiming& t,
                           const PrecisionWarn& warn) {
  if (path.empty()) return;
  nlohmann::json j;
  std::error_code ec;
  if (fs::exists(path, ec)) {
    try {
      j = nlohmann::json::parse(read_file(path));
    } catch (const std::exception&) {
      j = nlohmann::json();  // corrupt: replaced (precision_cache_read warned)
    }
  }
  if (!j.is_object() || j.value("format", "") != kCacheFormat || !j.contains("entries") ||
      !j["entries"].is_object())
    j = {{"format", kCacheFormat}, {"entries", nlohmann::json::object()}};
  j["entries"][t.key] = {
      {"fp32_seconds", t.fp32_seconds}, {"bf16_seconds", t.bf16_seconds}, {"rows", t.rows}};
  try {
    fs::create_directories(fs::path(path).parent_path());
    const std::string text = j.dump(2) + "\n";
    write_file_atomic(path, [&](FileWriter& w) { w.write(text); });
  } catch (const std::exception& e) {
    warn("precision cache " + path + " not written (" + std::string(e.what()) +
         "): the next run measures again");
  }
}

PrecisionTiming measure_precision_speed(const ModelConfig& model, int64_t rows) {
  torch::NoGradGuard no_grad_setup;
  std::vector<Linear> layers;
  std::vector<torch::Tensor> xs, g32, g16;
  for (const auto& [in, out] : gemm_shapes(model)) {
    Linear l(in, out);
    l->weight.normal_(0.0, 0.02);
    layers.push_back(l);
    xs.push_back(torch::randn({rows, in}).requires_grad_(true));
    g32.push_back(torch::randn({rows, out}));
    g16.push_back(g32.back().to(torch::kBFloat16));
  }
  torch::AutoGradMode grad(true);
  PrecisionTiming t;
  t.rows = rows;
  t.source = "measured";
  one_pass(layers, xs, g32, false);  // warm-up: oneDNN builds its kernels, memory is touched
  one_pass(layers, xs, g16, true);
  t.fp32_seconds = t.bf16_seconds = std::numeric_limits<double>::infinity();
  for (int r = 0; r < kReps; ++r) {  // alternating, so that both see the same state of the host
    t.fp32_seconds = std::min(t.fp32_seconds, one_pass(layers, xs, g32, false));
    t.bf16_seconds = std::min(t.bf16_seconds, one_pass(layers, xs, g16, true));
  }
  return t;
}

PrecisionTiming precision_timing(const ModelConfig& model, int64_t tokens, const CpuClass& cpu,
                                 const PrecisionWarn& warn) {
  const int64_t rows = precision_probe_rows(model, tokens);
  const std::string key = precision_probe_key(model, rows, cpu, at::get_num_threads());
  const std::string path = precision_cache_path();
  if (auto cached = precision_cache_read(path, key, warn)) return *cached;
  PrecisionTiming t = measure_precision_speed(model, rows);
  t.key = key;
  precision_cache_write(path, t, warn);
  return t;
}

}  // namespace normlab
