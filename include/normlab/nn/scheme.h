// The normalization schemes: the enum, its name table and the schemes' properties, all made
// from one table (scheme_table.h); the one factory is build_scheme (src/nn/scheme.cpp), and
// each scheme lives in its own file under src/nn/schemes/.
#pragma once

#include "normlab/util/name_table.h"

namespace normlab {

enum class Scheme {
#define NORMLAB_SCHEME(name, Enum, two_stream, qkv_norm, Base) Enum,
#include "normlab/nn/scheme_table.h"
#undef NORMLAB_SCHEME
};

template <>
struct EnumNames<Scheme> {
  static constexpr NameRow<Scheme> rows[] = {
#define NORMLAB_SCHEME(name, Enum, two_stream, qkv_norm, Base) {Scheme::Enum, #name},
#include "normlab/nn/scheme_table.h"
#undef NORMLAB_SCHEME
  };
};

/// True for the schemes that carry a second residual stream Y.
inline bool scheme_is_two_stream(Scheme s) {
  switch (s) {
#define NORMLAB_SCHEME(name, Enum, two_stream, qkv_norm, Base) \
  case Scheme::Enum:                                           \
    return two_stream;
#include "normlab/nn/scheme_table.h"
#undef NORMLAB_SCHEME
  }
  return false;
}

/// True for the schemes whose attention always normalises q, k and v per head.
inline bool scheme_forces_qkv_norm(Scheme s) {
  switch (s) {
#define NORMLAB_SCHEME(name, Enum, two_stream, qkv_norm, Base) \
  case Scheme::Enum:                                           \
    return qkv_norm;
#include "normlab/nn/scheme_table.h"
#undef NORMLAB_SCHEME
  }
  return false;
}

/// The single-stream scheme a scheme's parameter overhead is counted against (itself for the
/// single-stream schemes).
inline Scheme scheme_base(Scheme s) {
  switch (s) {
#define NORMLAB_SCHEME(name, Enum, two_stream, qkv_norm, Base) \
  case Scheme::Enum:                                           \
    return Scheme::Base;
#include "normlab/nn/scheme_table.h"
#undef NORMLAB_SCHEME
  }
  return s;
}

}  // namespace normlab
