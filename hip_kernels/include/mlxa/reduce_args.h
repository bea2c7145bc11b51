// Argument structs of the reduce family (hip_kernels/reduce.hip), passed by value.
// Plain C with fixed-width fields and explicit padding so the host packers in
// mlx_amd/runtime/ops/reduce.py and a host compiler agree on every offset
// (tests/ops/test_reduce_plans.py checks them). Dimension arrays are outermost first.
#pragma once

#include <stdint.h>

#define MLXA_REDUCE_DIMS 8

extern "C" {

// Row layout: each output reduces `outer` rows of `row_len` elements (stride row_stride)
// found at kept_offset(o) + red_offset(j), j < outer. With splits > 1, split s (blockIdx.y)
// takes the chunk s of the outer index (split_outer) or of the row, and writes a partial
// to out[o * splits + s]. Also the sequential (one thread per output) kernel's arguments.
struct ReduceRowArgs {
  const void* in;
  void* out;
  int64_t n_out;
  int64_t row_len;
  int64_t row_stride;
  int64_t outer;
  int64_t chunk;
  uint64_t mask;                              // and/or: bits that make an element nonzero
  int64_t kept_strides[MLXA_REDUCE_DIMS];
  int64_t red_strides[MLXA_REDUCE_DIMS];      // outer reduced dims (the row excluded)
  int32_t kept_shape[MLXA_REDUCE_DIMS];
  int32_t red_shape[MLXA_REDUCE_DIMS];
  int32_t kept_ndim;
  int32_t red_ndim;
  int32_t group;                              // threads per output: power of two <= W, or blockDim.x
  int32_t splits;
  int32_t split_outer;
  int32_t flat;                               // threads walk the flattened (outer x row) index
  int32_t partial;                            // write partials (accumulator type)
  int32_t pad_;
};

// Column layout: the innermost kept dim (n_cols, stride col_stride) is walked by threads
// (bx of them, V columns each); by threads walk the reduced index space n_red (dims
// red_shape/red_strides); blockIdx.x = batch * col_blocks + col_block; blockIdx.y = split.
struct ReduceColArgs {
  const void* in;
  void* out;
  int64_t n_cols;
  int64_t col_stride;
  int64_t n_batch;
  int64_t n_red;
  int64_t chunk;
  uint64_t mask;
  int64_t batch_strides[MLXA_REDUCE_DIMS];
  int64_t red_strides[MLXA_REDUCE_DIMS];
  int32_t batch_shape[MLXA_REDUCE_DIMS];
  int32_t red_shape[MLXA_REDUCE_DIMS];
  int32_t batch_ndim;
  int32_t red_ndim;
  int32_t bx;
  int32_t by;
  int32_t col_blocks;
  int32_t splits;
  int32_t partial;
  int32_t pad_;
};

// ArgReduce over one axis: output o's elements sit at kept_offset(o) + k * axis_stride.
// Row kernel: `group` threads per output; column/sequential kernels: one thread per output.
struct ArgReduceArgs {
  const void* in;
  void* out;
  int64_t n_out;
  int64_t axis_len;
  int64_t axis_stride;
  int64_t kept_strides[MLXA_REDUCE_DIMS];
  int32_t kept_shape[MLXA_REDUCE_DIMS];
  int32_t kept_ndim;
  int32_t group;
};

}  // extern "C"
