// Argument struct of hip_kernels/gather_mm.hip (packed by mlx_amd/runtime/ops/gather_mm.py).
// Plain C, fixed-width fields, explicit padding; checked against the packer by
// tests/ops/test_gather_mm_plans.py.
#pragma once

#include <stdint.h>

#define MLXA_GMM_MAX_DIMS 8

extern "C" {

// out[i] = a[lhs[i]] @ b[rhs[i]] for every output matrix i (row-major over the output's
// batch shape). a[m][k] sits at m * a_rs + k * a_cs from its matrix; b[k][n] at
// k * b_rs + n * b_cs. Matrix number j of a (b) starts at elem_to_loc(j, a_shape,
// a_strides); the indices of output i at elem_to_loc(i, idx_shape, lhs/rhs_strides).
// Shapes and strides innermost first.
struct GatherMMArgs {
  const void* a;
  const void* b;
  const uint32_t* lhs;
  const uint32_t* rhs;
  void* out;
  int64_t M;
  int64_t N;
  int64_t K;
  int64_t a_rs;
  int64_t a_cs;
  int64_t b_rs;
  int64_t b_cs;
  int64_t batch;      // output matrices
  int64_t a_mats;     // matrices of a and b (indices beyond are clamped)
  int64_t b_mats;
  int64_t tiles_n;    // blocks along N per output matrix
  int64_t tiles_m;    // blocks along M per output matrix
  int64_t a_shape[MLXA_GMM_MAX_DIMS];
  int64_t a_strides[MLXA_GMM_MAX_DIMS];
  int64_t b_shape[MLXA_GMM_MAX_DIMS];
  int64_t b_strides[MLXA_GMM_MAX_DIMS];
  int64_t idx_shape[MLXA_GMM_MAX_DIMS];
  int64_t lhs_strides[MLXA_GMM_MAX_DIMS];
  int64_t rhs_strides[MLXA_GMM_MAX_DIMS];
  int32_t nd_a;
  int32_t nd_b;
  int32_t nd_idx;
  int32_t pad;
};

}  // extern "C"
