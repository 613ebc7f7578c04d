// How fast this machine runs a model in bf16 against fp32, measured once and cached, for
// train.precision = auto (and the warning of an explicit bf16) on a CPU that computes bf16
// natively (train/precision.h). A CPU class does not decide it: an AVX512-BF16 CPU without AMX
// runs bf16 GEMMs 2.3x faster than fp32 on one machine, while a Xeon whose oneDNN is capped to
// that class runs them more slowly than MKL's fp32 ones.
//
// The measurement: one block's linear layers and the LM head of the run's model (qkv, the
// attention's output, SwiGLU up and down, the head), forward and backward, on up to 1024 rows
// of the run's micro-batch (fewer for a wide model, so that a pass stays near 20 GFLOP), through
// the model's own Linear modules in fp32 and under bf16 autocast (its casts included),
// alternating, the best of three after a warm-up each: about one second at d_model 512.
//
// The cache: one JSON file, precision.json in $NORMLAB_CACHE_DIR, else $XDG_CACHE_HOME/normlab,
// else ~/.cache/normlab, an entry per key (precision_probe_key: the CPU's model name and class,
// the thread count, LibTorch's version, oneDNN's limit and the model's shape). A corrupt file or
// an entry that does not read is ignored with one warning and measured again.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "normlab/nn/model_config.h"
#include "normlab/util/cpu_class.h"

namespace normlab {

struct PrecisionTiming {
  double fp32_seconds = 0.0;  // one pass of the measured GEMMs in fp32 (the best of the reps)
  double bf16_seconds = 0.0;  // the same under bf16 autocast
  int64_t rows = 0;           // the rows they were measured on
  std::string source;         // "measured" or "cached"
  std::string key;            // precision_probe_key

  bool bf16_faster() const { return bf16_seconds < fp32_seconds; }
};

/// The rows the measurement takes for `model` at `tokens` rows a micro-batch (see above).
int64_t precision_probe_rows(const ModelConfig& model, int64_t tokens);

/// The cache key of `model` measured on `rows` rows on this CPU (`cpu`, at `threads` threads).
std::string precision_probe_key(const ModelConfig& model, int64_t rows, const CpuClass& cpu,
                                int threads);

/// The cache file: precision.json in $NORMLAB_CACHE_DIR, $XDG_CACHE_HOME/normlab or
/// ~/.cache/normlab; "" when none of these is set.
std::string precision_cache_path();

/// Called with one line for a cache that cannot be read or written (never an error).
using PrecisionWarn = std::function<void(const std::string&)>;

/// The cached timing of `key` in the file at `path`, or nullopt (no file, no entry, or one that
/// does not read: `warn` is told which, once).
std::optional<PrecisionTiming> precision_cache_read(const std::string& path, const std::string& key,
                                                    const PrecisionWarn& warn);

/// Adds (or replaces) `t` under t.key in the file at `path`, written atomically; the file's other
/// entries are kept (a corrupt file is replaced). A failure to write goes to `warn`.
void precision_cache_write(const std::string& path, const PrecisionTiming& t,
                           const PrecisionWarn& warn);

/// Measures `model`'s GEMMs on `rows` rows of the CPU in fp32 and under bf16 autocast.
PrecisionTiming measure_precision_speed(const ModelConfig& model, int64_t rows);

/// The timing of `model` at `tokens` rows a micro-batch on this CPU: from the cache, else
/// measured and cached.
PrecisionTiming precision_timing(const ModelConfig& model, int64_t tokens, const CpuClass& cpu,
                                 const PrecisionWarn& warn);

}  // namespace normlab
