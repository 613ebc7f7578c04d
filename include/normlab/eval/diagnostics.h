// The paper's diagnostics (docs/paper.md, Diagnostics) on a fixed batch: what the streams look
// like through depth, where the gradient flows, how the shared branches weigh their two inputs,
// what each stream predicts on its own, where massive activations sit, and which blocks matter.
//
// `normlab train` runs them every `diagnostics.every` steps (off by default; when off nothing
// here is called) and appends one JSON line per run to RUN_DIR/diagnostics.jsonl;
// `normlab analyze` runs them once on a checkpoint. tools/plot_diagnostics.py draws the plots.
// Layers are numbered like the Probe's: -1 is the entry (the embedding), 0..L-1 the blocks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "normlab/nn/model.h"

namespace normlab {

struct DiagnosticsOptions {
  bool gradients = true;  // a backward pass on the batch: per-block branch and per-stream gradients
  bool lens = true;       // logit lens per stream
  int64_t top_k = 4;      // massive activations kept per layer and stream; 0 = skip
  bool pruning = false;   // the loss with each block skipped (L more forward passes)
};

/// One value per stream (x, then y for two-stream schemes) and layer (-1..L-1: index l + 1).
struct PerStream {
  std::string stream;          // "x" or "y"
  std::vector<double> values;  // n_layers + 1
};

struct TopActivation {
  double value;  // h (signed)
  int64_t batch, token, channel;
};

struct MassiveActivations {
  std::string stream;
  int64_t layer;
  std::vector<TopActivation> top;  // by |h|, largest first
  double max_over_median;          // max |h| / median |h|
};

/// The learned gains that weigh each stream's contribution to one shared branch's input
/// (two-stream schemes), as means over channels.
struct GainRatio {
  int64_t layer;          // -1 for the end-of-network fusion norms
  std::string branch;     // "attn", "mlp", "final"
  double x_gain, y_gain;  // mean of the X-side and the Y-side gain vectors
  double ratio;           // x_gain / y_gain
};

/// One MoE layer's routing of the batch (MoE models).
struct RoutedShare {
  int64_t layer;              // the block
  std::vector<double> share;  // per expert: its share of the batch's N * top_k assignments
  double entropy;             // mean router entropy over the tokens, nats
  int64_t idle;               // experts that got no token
};

/// One Hyper-Connections sub-layer's connection (hyper; docs/diagnostics.md), from its
/// parameters, not the batch: the static part of the connection. variant "hc" (static alpha,
/// beta; for DHC the dynamic term s tanh(LN(H) W) is left out): a_r_spectral = ||A_r||_2,
/// beta_abs = mean |beta|, alpha_dist = ||alpha - alpha_init||_F, beta_dist = ||beta - 1||_2.
/// variant "mhc" (the coefficients at xt phi = 0, i.e. from the biases b_res, b_pre, b_post):
/// h_res_spectral, h_res_dist = ||H_res - 1/n||_F, h_pre_abs, h_pre_dist = ||H_pre - 1/2||_2,
/// h_post_abs, h_post_dist = ||H_post - 1||_2.
struct HyperConnectionStats {
  int64_t layer;
  std::string branch;                                  // "attn", "mlp"
  std::string variant;                                 // "hc", "mhc"
  std::vector<std::pair<std::string, double>> values;  // in the order above
};

struct DiagnosticsReport {
  int64_t step = 0;
  double loss = 0.0;                        // mean cross-entropy of the batch
  std::vector<PerStream> rms;               // sqrt(mean h^2) over the batch
  std::vector<PerStream> l2;                // mean over tokens of ||h_t||_2
  std::vector<PerStream> stream_grad;       // ||dL/dh|| of each stream after each layer (gradients)
  std::vector<double> attn_grad, mlp_grad;  // per block: ||grad|| of the attention / MLP weights
  std::vector<GainRatio> gains;             // two-stream schemes
  std::vector<PerStream> lens;  // top-1 agreement of fuse(that stream alone) with the model
  std::vector<MassiveActivations> massive;  // per stream and layer
  std::optional<double> pruning_base;       // loss of the whole model (pruning)
  std::vector<double> pruning;              // loss with block l skipped, per block
  std::vector<RoutedShare> routing;         // MoE layers, in order
  std::vector<HyperConnectionStats> hyper;  // hyper: per block, attn then mlp
};

/// Runs the diagnostics on one batch of (inputs, targets) (B, T), in fp32 and eval mode; the
/// model's training mode is restored and its gradients are left cleared (set to none).
DiagnosticsReport run_diagnostics(DecoderLMImpl& model, const torch::Tensor& inputs,
                                  const torch::Tensor& targets, const DiagnosticsOptions& options);

/// The report as one JSON line (no newline).
std::string diagnostics_json(const DiagnosticsReport& report);

/// The plots tools/plot_diagnostics.py may write next to a diagnostics.jsonl (which of them
/// depends on the model), for the commands' output checks (util/output_contract.h).
std::vector<std::string> diagnostics_plot_files();

}  // namespace normlab
