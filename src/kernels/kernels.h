// normlab's own CUDA kernels (compiled by nvcc for sm_90 when NORMLAB_CUDA is on). Private to
// the library: callers go through the public ops that dispatch to them.
#pragma once

namespace normlab::kernels {

/// True: the kernels library was compiled and linked into this build.
bool compiled();

}  // namespace normlab::kernels
