// Keys and values of the positions already seen, for incremental decoding (normlab generate).
//
// A KVCache holds one slot per attention module of a model, in the model's block order. Every
// scheme calls each block's attention once per forward pass: in the two-stream schemes the
// shared attention reads the fused input of both streams, so one slot per block serves both
// streams. While a KVCacheScope is alive, the model's attention modules read their slot
// (the keys and values of earlier positions), rotate the new queries and keys at their true
// positions, and append the new keys and values.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace normlab {

class DecoderLMImpl;

/// One attention module's cached keys and values, (B, Hk, max_len, D) buffers filled up to
/// `length` positions.
struct KVSlot {
  torch::Tensor k, v;
  int64_t length = 0;
};

class KVCache {
 public:
  /// Buffers for `batch` sequences of up to `max_len` positions of `model`.
  KVCache(const DecoderLMImpl& model, int64_t batch, int64_t max_len, torch::Device device,
          torch::ScalarType dtype = torch::kFloat);

  /// The bytes the buffers of `batch` sequences of `max_len` positions of `model` take, in
  /// `dtype` (computed in double: no overflow for any count), before anything is allocated.
  static double bytes(const DecoderLMImpl& model, int64_t batch, double max_len,
                      torch::ScalarType dtype = torch::kFloat);

  /// Positions cached so far (the position of the next token fed).
  int64_t length() const { return slots_.empty() ? 0 : slots_.front()->length; }
  int64_t max_len() const { return max_len_; }
  std::vector<std::shared_ptr<KVSlot>>& slots() { return slots_; }

 private:
  std::vector<std::shared_ptr<KVSlot>> slots_;
  int64_t max_len_;
};

/// Attaches `cache` to `model`'s attention modules for the scope's lifetime.
class KVCacheScope {
 public:
  KVCacheScope(DecoderLMImpl& model, KVCache& cache);
  ~KVCacheScope();
  KVCacheScope(const KVCacheScope&) = delete;
  KVCacheScope& operator=(const KVCacheScope&) = delete;

 private:
  DecoderLMImpl& model_;
};

}  // namespace normlab
