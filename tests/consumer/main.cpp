#include <normlab/util/device.h>
#include <normlab/version.h>
#include <torch/torch.h>

#include <iostream>

int main() {
  const auto t = torch::ones({2, 2});
  std::cout << "consumer: normlab " << NORMLAB_VERSION_STRING << " with LibTorch "
            << normlab::torch_version() << ", sum " << t.sum().item<float>() << "\n";
  return 0;
}
