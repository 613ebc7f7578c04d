#include "normlab/nn/kv_cache.h"

#include <torch/torch.h>

#include "normlab/nn/attention.h"
#include "normlab/nn/model.h"

namespace normlab {
namespace {

// The attention modules of the model's blocks, in block order.
std::vector<AttentionImpl*> attention_modules(const DecoderLMImpl& model) {
  std::vector<AttentionImpl*> out;
  for (const auto& block : model.scheme_blocks)
    for (const auto& m : block->modules(/*include_self=*/false))
      if (auto* a = dynamic_cast<AttentionImpl*>(m.get())) out.push_back(a);
  return out;
}

}  // namespace

KVCache::KVCache(const DecoderLMImpl& model, int64_t batch, int64_t max_len, torch::Device device,
                 torch::ScalarType dtype)
    : max_len_(max_len) {
  TORCH_CHECK(batch > 0 && max_len > 0, "KVCache: batch and max_len must be positive");
  for (const AttentionImpl* a : attention_modules(model)) {
    auto slot = std::make_shared<KVSlot>();
    const auto opts = torch::TensorOptions().device(device).dtype(dtype);
    slot->k = torch::zeros({batch, a->options.kv_heads(), max_len, a->options.head_dim()}, opts);
    slot->v = torch::zeros_like(slot->k);
    slots_.push_back(std::move(slot));
  }
}

double KVCache::bytes(const DecoderLMImpl& model, int64_t batch, double max_len,
                      torch::ScalarType dtype) {
  double per_position = 0;  // keys and values of every attention module
  for (const AttentionImpl* a : attention_modules(model))
    per_position += 2.0 * static_cast<double>(a->options.kv_heads() * a->options.head_dim());
  return per_position * static_cast<double>(batch) * max_len *
         static_cast<double>(c10::elementSize(dtype));
}

KVCacheScope::KVCacheScope(DecoderLMImpl& model, KVCache& cache) : model_(model) {
  const auto modules = attention_modules(model);
  TORCH_CHECK(modules.size() == cache.slots().size(),
              "KVCache built for another model: ", cache.slots().size(), " slots, ", modules.size(),
              " attention modules");
  for (size_t i = 0; i < modules.size(); ++i) modules[i]->cache = cache.slots()[i];
}

KVCacheScope::~KVCacheScope() {
  for (AttentionImpl* a : attention_modules(model_)) a->cache.reset();
}

}  // namespace normlab
