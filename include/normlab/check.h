// NORMLAB_CHECK: the one precondition macro. It throws c10::Error (a std::exception) with file
// and line, like TORCH_CHECK, whose message is the concatenation of the remaining arguments:
//   NORMLAB_CHECK(d_model % n_heads == 0, "model.d_model (", d_model, ") must be divisible by ...");
#pragma once

#include <c10/util/Exception.h>

#define NORMLAB_CHECK(cond, ...) TORCH_CHECK(cond, __VA_ARGS__)
