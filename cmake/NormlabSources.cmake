# The library's sources, listed explicitly for review; tests/check_source_list.cmake fails
# when this list and the files under src/ disagree. Paths are relative to src/.
set(NORMLAB_SOURCES
  attention.cpp
  device.cpp
  file_io.cpp
  init.cpp
  linear.cpp
  mlp.cpp
  model.cpp
  model_config.cpp
  norm.cpp
  rope.cpp
  safetensors.cpp
  scheme.cpp
  schemes/common.cpp
  schemes/deep_norm.cpp
  schemes/hybrid_norm.cpp
  schemes/hybrid_norm_star.cpp
  schemes/mix_ln.cpp
  schemes/peri_norm.cpp
  schemes/post_norm.cpp
  schemes/pre_norm.cpp
  schemes/resi_dual.cpp
  schemes/siamese.cpp
  schemes/siamese_hybrid.cpp
  weights.cpp
)
