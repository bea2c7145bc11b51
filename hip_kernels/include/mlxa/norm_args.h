// Argument struct of the norm family (hip_kernels/norm.hip), passed by value. Plain C
// with fixed-width fields and explicit padding, checked with a host compiler against
// the packer in mlx_amd/runtime/ops/norm.py.
#pragma once

#include <stdint.h>

extern "C" {

// rows of n elements; row r of x starts at r * row_stride elements, its items are
// contiguous. w and b (n elements each, contiguous) are read when flags say so (their
// pointers are otherwise some valid address, never dereferenced). out is row-contiguous.
//   row_stride   elements between row starts of x
//   n            row length (> 0)
//   flags        bit 0: weight, bit 1: bias
#define MLXA_NORM_SHAPE_FIELDS \
  int64_t rows;                \
  int64_t row_stride;          \
  int32_t n;                   \
  int32_t flags;               \
  float eps;                   \
  int32_t pad;

struct NormArgs {
  const void* x;
  const void* w;
  const void* b;
  void* out;
  MLXA_NORM_SHAPE_FIELDS
};

// Two norms in one launch (an attention's q and k norms): the second's pointers first, then
// the first's NormArgs, then the second's shape.
struct NormShape {
  MLXA_NORM_SHAPE_FIELDS
};

// A residual add and the RMS norm of its sum in one pass (the evaluator's Add -> RMSNorm pair
// of a transformer block): sum = x + r (rounded to T as the Add node rounds it) is written
// and normalised, out = rms_norm(sum) * w. Rows of n elements, all row-contiguous; w is read
// when flags bit 0 says so.
struct NormAddArgs {
  const void* x;
  const void* r;
  const void* w;
  void* sum;
  void* out;
  int64_t rows;
  int32_t n;
  int32_t flags;
  float eps;
  int32_t pad;
};

// A residual add and the RMS norm of its sum made by a matrix-vector kernel itself before
// its products (mlxa/norm_prologue.h: the evaluator's chain of an Add, its RMSNorm and the
// projections of the norm's output, one launch instead of two): the kernel's x is not read;
// each block computes sum = x + r (rounded to T as the Add node rounds it) and
// out = rms_norm(sum) * w over the k values of the one row into shared memory, block (0, 0)
// also writes sum and out. w is read when flags bit 0 says so. The kernels take RmsPro's
// pointers first and RmsProShape last.
struct RmsPro {
  const void* x;
  const void* r;
  const void* w;
  void* sum;
  void* out;
};
struct RmsProShape {
  float eps;
  int32_t flags;
};

}  // extern "C"
