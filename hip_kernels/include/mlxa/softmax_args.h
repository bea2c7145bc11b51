// Argument struct of the softmax family (hip_kernels/softmax.hip), passed by value.
// Plain C with fixed-width fields and explicit padding so that a host compiler can
// check sizeof/offsetof against the packer in mlx_amd/runtime/ops/softmax.py.
#pragma once

#include <stdint.h>

#define MLXA_SOFTMAX_MAX_DIMS 8   // outer (row) dimensions after collapse

extern "C" {

// Rows of n elements along the last axis; row r starts at the offset of r decomposed
// over row_shape/row_strides (innermost first), elements step by elem_stride. The
// output is row-contiguous: softmax writes rows * n values, logsumexp one per row.
struct SoftmaxArgs {
  const void* in;
  void* out;
  int64_t rows;
  int64_t elem_stride;                            // elements between row items (1: dense)
  int64_t row_strides[MLXA_SOFTMAX_MAX_DIMS];     // elements
  int32_t row_shape[MLXA_SOFTMAX_MAX_DIMS];
  int32_t ndim;                                   // row dimensions in use
  int32_t n;                                      // row length (> 0)
};

}  // extern "C"
