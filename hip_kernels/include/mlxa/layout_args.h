// Argument structs of the layout family (hip_kernels/layout.hip), passed by value.
// Plain C with fixed-width fields and explicit padding: tests/ops/test_layout_plans.py
// checks sizeof/offsetof against the packers in mlx_amd/runtime/ops/layout.py.
// Shapes and strides are stored innermost dimension first, like args.h.
#pragma once

#include <stdint.h>

#include "args.h"   // MLXA_MAX_DIMS

extern "C" {

// Select: out[i] = cond[i] ? a[i] : b[i] over broadcast/strided operands; out row-contiguous
struct LayoutSelectArgs {
  const void* cond;
  const void* a;
  const void* b;
  void* out;
  int64_t n;
  int64_t cond_strides[MLXA_MAX_DIMS];   // elements
  int64_t a_strides[MLXA_MAX_DIMS];
  int64_t b_strides[MLXA_MAX_DIMS];
  int32_t shape[MLXA_MAX_DIMS];
  int32_t ndim;
  int32_t pad_;
};

// strided input -> strided output view (a slab of Concatenate, the interior of Pad)
struct LayoutCopyArgs {
  const void* in;
  void* out;
  int64_t n;
  int64_t in_strides[MLXA_MAX_DIMS];
  int64_t out_strides[MLXA_MAX_DIMS];
  int32_t shape[MLXA_MAX_DIMS];
  int32_t ndim;
  int32_t pad_;
};

// out[0..n) = *value (Pad's border)
struct LayoutFillArgs {
  const void* value;
  void* out;
  int64_t n;
};

// Arange: out[i] = start + i * step, in uint64 (wrapping, low bits kept) for integer
// outputs and in double for float outputs (only planned when every value is exact)
struct LayoutArangeArgs {
  void* out;
  int64_t n;
  int64_t istart;
  int64_t istep;
  double fstart;
  double fstep;
};

}  // extern "C"
