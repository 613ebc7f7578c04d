// Precompiled header for normlab's own targets: the heavy LibTorch headers every source uses.
#pragma once

#include <torch/torch.h>
