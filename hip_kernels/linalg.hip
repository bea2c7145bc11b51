// linalg family: the elementwise parts of the factorizations that hipSOLVER / cuSOLVER
// compute (mlx_amd/runtime/ops/linalg.py): clearing the triangle a factorization leaves
// untouched, identity right-hand sides for the inverse, and the zero-diagonal check of a
// triangular inverse. Row-major n x n matrices,
// `batch` of them back to back. (The argument struct lives here, not in include/mlxa:
// two kernels of this file only read it.)
#include "mlxa/platform.h"
#include "mlxa/types.h"

extern "C" {
// packed by mlx_amd/runtime/ops/linalg.py (three pointers, then struct "<qqii")
struct LinalgArgs {
  void* a;
  void* out;            // diag: the int32 codes; lupiv: the uint32 pivots (tri, eye: unused)
  void* out2;           // lupiv: the uint32 row permutation
  int64_t n;            // rows
  int64_t batch;
  int32_t keep_upper;   // tri: 1 keeps j >= i (zeroes below the diagonal), 0 keeps j <= i
  int32_t k;            // tri: columns; lupiv: pivots per matrix (min(rows, columns))
};
}

namespace mlxa::linalg {

constexpr int kThreads = 256;

// one thread per element, grid-stride; n x k matrices (rows x columns)
template <typename T>
MLXA_DEVICE void tri(const LinalgArgs& p) {
  T* a = (T*)p.a;
  const long long nk = p.n * p.k, total = nk * p.batch;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (long long)gridDim.x * blockDim.x) {
    const long long r = e % nk, i = r / p.k, j = r - i * p.k;
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

// one thread per (matrix, row r): the library's 1-based row swaps (k int32 per matrix at
// p.a) as MLX's 0-based pivots (rows r < k write them), and MLX's row permutation: where
// row r of A ends up, following r through the swaps in order (the type parameter is unused:
// one kernel serves both float types' plans)
template <typename T>
MLXA_DEVICE void lupiv(const LinalgArgs& p) {
  const int32_t* ipiv = (const int32_t*)p.a;
  uint32_t* piv = (uint32_t*)p.out;
  uint32_t* perm = (uint32_t*)p.out2;
  const long long total = p.n * p.batch;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (long long)gridDim.x * blockDim.x) {
    const long long b = e / p.n, r = e - b * p.n;
    const int32_t* sw = ipiv + b * p.k;
    long long pos = r;
    for (int j = 0; j < p.k; ++j) {
      const long long t = sw[j] - 1;
      pos = pos == j ? t : pos == t ? j : pos;
    }
    perm[e] = (uint32_t)pos;
    if (r < p.k) piv[b * p.k + r] = (uint32_t)(sw[r] - 1);
  }
}

}  // namespace mlxa::linalg

#define MLXA_LINALG(name, fn, T)                                                        \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::linalg::kThreads) name(LinalgArgs a) {      \
    mlxa::linalg::fn<T>(a);                                                             \
  }

#include "linalg.inc"
