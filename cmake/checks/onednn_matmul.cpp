// Configure-time check (cmake/NormlabTorch.cmake): does this LibTorch export the oneDNN matmul
// that src/kernels/cpu/onednn_linear.cpp declares? Compiled and linked, never run.
#include <ATen/ATen.h>

namespace at::native {
void mkldnn_matmul(const at::Tensor& mat1, const at::Tensor& mat2, const at::Tensor& result,
                   float beta, float alpha);
}

int main() {
  const at::Tensor a = at::ones({2, 2}), out = at::empty({2, 2});
  at::native::mkldnn_matmul(a, a, out, 0.f, 1.f);
  return 0;
}
