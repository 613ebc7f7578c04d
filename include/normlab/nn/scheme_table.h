// The scheme table: one row per normalization scheme, the only place a scheme is listed. Read
// with NORMLAB_SCHEME defined (no include guard): scheme.h makes the enum, its name table and
// the scheme properties from it; src/nn/scheme.cpp makes the factory's dispatch and
// src/nn/schemes/schemes.h the builders' declarations.
//
//   NORMLAB_SCHEME(name, Enum, two_stream, forces_qkv_norm, Base)
//     name             the config spelling (model.scheme = name); the scheme's code is
//                      build_<name>() in src/nn/schemes/<name>.cpp
//     two_stream       it carries a second residual stream Y
//     forces_qkv_norm  its attention always normalises q, k and v per head
//     Base             the single-stream scheme its parameter overhead is counted against
//
// Adding a scheme: a row here and src/nn/schemes/<name>.cpp (docs/schemes.md, "Adding a
// scheme", lists the tests, goldens and configs that go with it).

// X = X + F(N(X))
NORMLAB_SCHEME(pre_norm, PreNorm, false, false, PreNorm)
// X = N(X + F(X))
NORMLAB_SCHEME(post_norm, PostNorm, false, false, PostNorm)
// X = N(alpha X + F(X)), beta-scaled init
NORMLAB_SCHEME(deep_norm, DeepNorm, false, false, DeepNorm)
// qkv-norm attention, post-norm MLP
NORMLAB_SCHEME(hybrid_norm, HybridNorm, false, true, HybridNorm)
// HybridNorm with a Pre-Norm block 0
NORMLAB_SCHEME(hybrid_norm_star, HybridNormStar, false, true, HybridNormStar)
// X = X + N_out(F(N_in(X)))
NORMLAB_SCHEME(peri_norm, PeriNorm, false, false, PeriNorm)
// Post-Norm for the first layers, Pre-Norm after
NORMLAB_SCHEME(mix_ln, MixLn, false, false, MixLn)
// two streams: post-norm X feeds F, Y accumulates
NORMLAB_SCHEME(resi_dual, ResiDual, true, false, PostNorm)
// SiameseNorm, post-pre variant
NORMLAB_SCHEME(siamese, Siamese, true, false, PreNorm)
// SiameseNorm, hybrid-pre variant (the paper's LM variant)
NORMLAB_SCHEME(siamese_hybrid, SiameseHybrid, true, true, HybridNorm)
// Hyper-Connections: n residual streams mixed by learned width and depth connections
NORMLAB_SCHEME(hyper, Hyper, false, false, PreNorm)
// X = X + N_out(F(X)): OLMo 2's reordered norm (Peri-LN without the input norm)
NORMLAB_SCHEME(reordered_norm, ReorderedNorm, false, false, ReorderedNorm)
