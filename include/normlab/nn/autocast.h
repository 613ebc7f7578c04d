// bf16 autocast for a scope on one device type, the C++ equivalent of
// `with torch.autocast(device_type, torch.bfloat16)` (AutocastGuard), and the way out of it for
// what the precision policy keeps in fp32 whatever the device (NoAutocast). The policy, the
// same on CPU and CUDA: fp32 master weights; matmuls, attention and the MLP in bf16; norms,
// softmax, the loss, residual streams, SiameseNorm's scalars, Hyper-Connections' connections
// and the MoE router in fp32.
#pragma once

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

namespace normlab {

class AutocastGuard {
 public:
  /// bf16 autocast on `device` (at::kCPU or at::kCUDA) until the guard leaves scope; a no-op
  /// when `enabled` is false. The previous state is restored on exit, and the weight-cast cache
  /// is cleared when the outermost autocast scope ends.
  AutocastGuard(c10::DeviceType device, bool enabled) : device_(device), enabled_(enabled) {
    if (!enabled_) return;
    prev_enabled_ = at::autocast::is_autocast_enabled(device_);
    prev_dtype_ = at::autocast::get_autocast_dtype(device_);
    at::autocast::set_autocast_dtype(device_, at::kBFloat16);
    at::autocast::set_autocast_enabled(device_, true);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device_, prev_enabled_);
    at::autocast::set_autocast_dtype(device_, prev_dtype_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_;
  bool enabled_;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kBFloat16;
};

/// Ops in its scope run in their inputs' dtypes on every device, as if autocast were off: what
/// the policy keeps in fp32 (a connection's mixing matmuls, the router's logits) stays fp32
/// under CPU and CUDA autocast alike.
class NoAutocast {
 public:
  NoAutocast() : guard_(c10::autocast_dispatch_keyset) {}

 private:
  c10::impl::ExcludeDispatchKeyGuard guard_;
};

/// Whether bf16 autocast is on now for tensors on the CPU and on CUDA (thread-local state), so
/// that a recomputation (activation checkpointing) runs under the autocast of its forward.
struct AutocastState {
  bool cpu = false;
  bool cuda = false;
  static AutocastState current() {
    return {at::autocast::is_autocast_enabled(at::kCPU),
            at::autocast::is_autocast_enabled(at::kCUDA)};
  }
};

}  // namespace normlab
