// Configure-time check (cmake/NormlabTorch.cmake): does this LibTorch export the Fortran BLAS
// GEMMs (sgemm_, dgemm_) that src/kernels/cpu/blas.cpp declares? Compiled and linked, never run.
extern "C" {
void sgemm_(char* transa, char* transb, int* m, int* n, int* k, float* alpha, const float* a,
            int* lda, const float* b, int* ldb, float* beta, float* c, int* ldc);
void dgemm_(char* transa, char* transb, int* m, int* n, int* k, double* alpha, const double* a,
            int* lda, const double* b, int* ldb, double* beta, double* c, int* ldc);
}

int main() {
  char t = 'N';
  int one = 1;
  float fa = 1, fb = 0, fx = 2, fc = 0;
  double da = 1, db = 0, dx = 2, dc = 0;
  sgemm_(&t, &t, &one, &one, &one, &fa, &fx, &one, &fx, &one, &fb, &fc, &one);
  dgemm_(&t, &t, &one, &one, &one, &da, &dx, &one, &dx, &one, &db, &dc, &one);
  return 0;
}
