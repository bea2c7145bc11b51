// Argument struct of the rope family (hip_kernels/rope.hip), passed by value. Plain C
// with fixed-width fields and explicit padding, checked with a host compiler against
// the packer in mlx_amd/runtime/ops/rope.py.
#pragma once

#include <stdint.h>

extern "C" {

// x seen as (B, N, L, D) with any element strides (MLX's middle dimensions collapsed
// into N); out is the row-contiguous (B, N, L, D). Each work item is one rotated pair
// (the first `half` items of a row) or one passed-through tail element (dims..D-1), for
// head_chunk consecutive heads (the angle is computed once for all of them).
struct RopeArgs {
  const void* x;
  const void* offset;      // int32, one per batch (offset_stride 1) or one (stride 0)
  const void* freqs;       // float32 (half,), read when has_freqs
  void* out;
  int64_t stride_b, stride_n, stride_l, stride_d;   // elements
  int64_t total;           // B * ceil(N / head_chunk) * L * items
  int32_t n_heads;         // N
  int32_t seq;             // L
  int32_t d;               // D
  int32_t half;            // dims / 2
  int32_t items;           // half + (D - dims)
  int32_t offset_stride;   // elements
  int32_t freqs_stride;    // elements
  int32_t traditional;     // rotate (2i, 2i+1) instead of (i, i + half)
  int32_t has_freqs;
  float scale;
  float inv_freq_log;      // log(base) / half, as float32 (default frequencies)
  int32_t head_chunk;      // heads per work item, >= 1
};

}  // extern "C"
