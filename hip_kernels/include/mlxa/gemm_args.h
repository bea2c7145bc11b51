// Argument struct of hip_kernels/gemm.hip, the portable tiled GEMM (packed by
// mlx_amd/runtime/ops/matmul.py; layout checked by tests/ops/test_matmul_plans.py).
#pragma once

#include <stdint.h>

extern "C" {

// Row-major D[b] (m x n, row stride ldd) = alpha * A[b] (m x k) @ B[b] (k x n)
// (+ beta * C[b] when beta != 0; C is not read otherwise). A, B and C take any element
// strides (transposed, broadcast, sliced): this kernel never needs a copy.
struct GemmArgs {
  const void* a;
  const void* b;
  const void* c;
  void* d;
  int64_t m;
  int64_t n;
  int64_t k;
  int64_t a_rs;     // elements between rows of A
  int64_t a_cs;     // ... between columns of A
  int64_t b_rs;
  int64_t b_cs;
  int64_t a_bs;     // elements between batches (grid.z)
  int64_t b_bs;
  int64_t d_bs;
  int64_t c_rs;
  int64_t c_cs;
  int64_t c_bs;
  int64_t ldd;
  double alpha;
  double beta;
};

}  // extern "C"
