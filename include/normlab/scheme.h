// The normalization schemes: one enum, one name table, one factory (make_scheme in model.h's
// sources). Each scheme lives in its own file under src/schemes/.
#pragma once

#include "normlab/name_table.h"

namespace normlab {

enum class Scheme {
  PreNorm,         // X = X + F(N(X))
  PostNorm,        // X = N(X + F(X))
  DeepNorm,        // X = N(alpha X + F(X)), beta-scaled init
  HybridNorm,      // qkv-norm attention, post-norm MLP
  HybridNormStar,  // HybridNorm with a Pre-Norm block 0
  PeriNorm,        // X = X + N_out(F(N_in(X)))
  MixLn,           // Post-Norm for the first layers, Pre-Norm after
  ResiDual,        // two streams: post-norm X feeds F, Y accumulates
  Siamese,         // SiameseNorm, post-pre variant
  SiameseHybrid,   // SiameseNorm, hybrid-pre variant (the paper's LM variant)
};

// clang-format off
template <>
struct EnumNames<Scheme> {
  static constexpr NameRow<Scheme> rows[] = {
    {Scheme::PreNorm,        "pre_norm"},
    {Scheme::PostNorm,       "post_norm"},
    {Scheme::DeepNorm,       "deep_norm"},
    {Scheme::HybridNorm,     "hybrid_norm"},
    {Scheme::HybridNormStar, "hybrid_norm_star"},
    {Scheme::PeriNorm,       "peri_norm"},
    {Scheme::MixLn,          "mix_ln"},
    {Scheme::ResiDual,       "resi_dual"},
    {Scheme::Siamese,        "siamese"},
    {Scheme::SiameseHybrid,  "siamese_hybrid"},
  };
};
// clang-format on

/// True for the schemes that carry a second residual stream Y.
inline bool scheme_is_two_stream(Scheme s) {
  return s == Scheme::ResiDual || s == Scheme::Siamese || s == Scheme::SiameseHybrid;
}

/// True for the schemes whose attention always normalises q, k and v per head.
inline bool scheme_forces_qkv_norm(Scheme s) {
  return s == Scheme::HybridNorm || s == Scheme::HybridNormStar || s == Scheme::SiameseHybrid;
}

/// The single-stream scheme a scheme's parameter overhead is counted against
/// (itself for the single-stream schemes).
inline Scheme scheme_base(Scheme s) {
  switch (s) {
    case Scheme::ResiDual:      return Scheme::PostNorm;
    case Scheme::Siamese:       return Scheme::PreNorm;
    case Scheme::SiameseHybrid: return Scheme::HybridNorm;
    default:                    return s;
  }
}

}  // namespace normlab
