// linalg family: the elementwise parts of the factorizations that hipSOLVER / cuSOLVER
// compute (mlx_amd/runtime/ops/linalg.py): clearing the triangle a factorization leaves
// untouched, identity right-hand sides for the inverse, and the zero-diagonal check of a
// triangular inverse. Row-major n x n matrices,
// `batch` of them back to back. (The argument struct lives here, not in include/mlxa:
// two kernels of this file only read it.)
#include "mlxa/platform.h"
#include "mlxa/types.h"

extern "C" {
// packed by mlx_amd/runtime/ops/linalg.py (two pointers, then struct "<qqii")
struct LinalgArgs {
  void* a;
  void* out;            // diag: the int32 codes (tri, eye: unused)
  int64_t n;
  int64_t batch;
  int32_t keep_upper;   // tri: 1 keeps j >= i (zeroes below the diagonal), 0 keeps j <= i
  int32_t pad;
};
}

namespace mlxa::linalg {

constexpr int kThreads = 256;

// one thread per element, grid-stride
template <typename T>
MLXA_DEVICE void tri(const LinalgArgs& p) {
  T* a = (T*)p.a;
  const long long nn = p.n * p.n, total = nn * p.batch;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (long long)gridDim.x * blockDim.x) {
    const long long r = e % nn, i = r / p.n, j = r - i * p.n;
    if (p.keep_upper ? j < i : j > i) a[e] = T(0);
  }
}

template <typename T>
MLXA_DEVICE void eye(const LinalgArgs& p) {
  T* a = (T*)p.a;
  const long long nn = p.n * p.n, total = nn * p.batch;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (long long)gridDim.x * blockDim.x) {
    const long long r = e % nn;
    a[e] = (r / p.n == r % p.n) ? T(1) : T(0);
  }
}

// per matrix: the 1-based index of its first zero diagonal entry, or 0 (MLX's error code
// for a singular triangular matrix), as an int32 at p.out; one thread per matrix
template <typename T>
MLXA_DEVICE void diag(const LinalgArgs& p) {
  const T* a = (const T*)p.a;
  int32_t* info = (int32_t*)p.out;
  for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b < p.batch;
       b += (long long)gridDim.x * blockDim.x) {
    int32_t k = 0;
    for (long long i = 0; i < p.n && !k; ++i)
      if (a[b * p.n * p.n + i * p.n + i] == T(0)) k = (int32_t)(i + 1);
    info[b] = k;
  }
}

}  // namespace mlxa::linalg

#define MLXA_LINALG(name, fn, T)                                                        \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::linalg::kThreads) name(LinalgArgs a) {      \
    mlxa::linalg::fn<T>(a);                                                             \
  }

#include "linalg.inc"
