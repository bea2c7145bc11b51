// Kernel argument structs, passed BY VALUE as each kernel's single parameter.
// Plain C++ with fixed-width fields and no device code, so a host compiler can check
// sizeof/offsetof against the Python packers (mlx_amd/runtime/launch.py); padding is
// written out so both sides agree without relying on the compiler's choices.
#pragma once

#include <stdint.h>

#define MLXA_MAX_DIMS 8   // after dimension collapse; more -> the planner declines

extern "C" {

struct SmokeArgs {
  float alpha;
  const float* x;
  float* y;
  long long n;
};

// smoke_spin: busy-wait about this many GPU clock ticks
struct SpinArgs {
  int64_t cycles;
};

// unary and copy, contiguous input
struct UnaryVArgs {
  const void* in;
  void* out;
  int64_t n;
};

// unary and copy, strided input -> row-contiguous output
struct UnaryGArgs {
  const void* in;
  void* out;
  int64_t n;
  int64_t strides[MLXA_MAX_DIMS];   // elements
  int32_t shape[MLXA_MAX_DIMS];
  int32_t ndim;
  int32_t pad_;
};

// binary, both inputs scalar or contiguous (ss, sv, vs, vv)
struct BinaryVArgs {
  const void* a;
  const void* b;
  void* out;
  int64_t n;
};

// binary, strided/broadcast inputs (zero strides) -> row-contiguous output
struct BinaryGArgs {
  const void* a;
  const void* b;
  void* out;
  int64_t n;
  int64_t a_strides[MLXA_MAX_DIMS];
  int64_t b_strides[MLXA_MAX_DIMS];
  int32_t shape[MLXA_MAX_DIMS];
  int32_t ndim;
  int32_t pad_;
};

// DivMod, both inputs contiguous: q = floor_divide(a, b), r = remainder(a, b)
struct DivModVArgs {
  const void* a;
  const void* b;
  void* q;
  void* r;
  int64_t n;
};

// DivMod, strided/broadcast inputs (32-bit indices; larger goes through copies)
struct DivModGArgs {
  const void* a;
  const void* b;
  void* q;
  void* r;
  int64_t n;
  int64_t a_strides[MLXA_MAX_DIMS];
  int64_t b_strides[MLXA_MAX_DIMS];
  int32_t shape[MLXA_MAX_DIMS];
  int32_t ndim;
  int32_t pad_;
};

// copy of a (batched) transpose: out[b][r][c] = in[b*in_batch_stride + r*in_row_stride +
// c*in_col_stride] with in_row_stride == 1 (the input walks along the output's columns)
struct CopyTArgs {
  const void* in;
  void* out;
  int64_t rows;
  int64_t cols;
  int64_t batch;
  int64_t in_row_stride;
  int64_t in_col_stride;
  int64_t in_batch_stride;
};

}  // extern "C"
