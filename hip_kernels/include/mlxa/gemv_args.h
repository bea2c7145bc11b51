// Argument struct of hip_kernels/gemv.hip (packed by mlx_amd/runtime/ops/matmul.py).
// Plain C with fixed-width fields and explicit padding; checked against the packer by
// tests/ops/test_matmul_plans.py.
#pragma once

#include <stdint.h>

extern "C" {

// y[b][r] = alpha * sum_k w[b][r][k] * x[b][k] (+ beta * y[b][r] when beta != 0).
// w's rows are contiguous along k (element (r, k) at r * ldw + k); x has stride incx.
struct GemvArgs {
  const void* w;
  const void* x;
  void* y;
  int64_t rows;
  int64_t k;
  int64_t ldw;       // elements between rows of w
  int64_t incx;      // elements between x's entries
  int64_t batch_w;   // elements between batches (grid.y)
  int64_t batch_x;
  int64_t batch_y;
  float alpha;
  float beta;
  int32_t ksplit;    // waves of a block sharing one row group, each over a slice of k (1, 2 or 4)
  int32_t pad;
};

// Siblings: up to two more matrices times the same x (an attention's k and v beside q) whose
// rows follow GemvArgs' rows in one launch (one launch instead of three; decode matvecs are
// small enough that each launch's fixed cost matters). The kernel takes (GemvSibs, GemvArgs,
// GemvSibRows) so that every pointer comes first. Siblings share k, ldw, incx, alpha and
// beta = 0, one batch; rows[i] = 0: no sibling i.
#define MLXA_GEMV_SIBS 2
struct GemvSibs {
  const void* w[MLXA_GEMV_SIBS];
  void* y[MLXA_GEMV_SIBS];
};
struct GemvSibRows {
  int64_t rows[MLXA_GEMV_SIBS];
};

}  // extern "C"
