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
//   stride_b, stride_n, stride_l, stride_d   elements
//   total          B * ceil(N / head_chunk) * L * items
//   n_heads, seq, d, half   N, L, D, dims / 2
//   items          half + (D - dims)
//   offset_stride  elements (0: one offset for every batch)
//   freqs_stride   elements
//   traditional    rotate (2i, 2i+1) instead of (i, i + half)
//   scale, inv_freq_log   log(base) / half as float32 (default frequencies)
//   head_chunk     heads per work item, >= 1
#define MLXA_ROPE_SHAPE_FIELDS                                              \
  int64_t stride_b, stride_n, stride_l, stride_d;                           \
  int64_t total;                                                            \
  int32_t n_heads, seq, d, half, items, offset_stride, freqs_stride;        \
  int32_t traditional, has_freqs;                                           \
  float scale, inv_freq_log;                                                \
  int32_t head_chunk;

struct RopeArgs {
  const void* x;
  const void* offset;      // int32, one per batch (offset_stride 1) or one (stride 0)
  const void* freqs;       // float32 (half,), read when has_freqs
  void* out;
  MLXA_ROPE_SHAPE_FIELDS
};

// Two rotations in one launch (an attention's q and k): the second's pointers first, then
// the first's RopeArgs, then the second's shape (a launch's pointers come first).
struct RopeShape {
  MLXA_ROPE_SHAPE_FIELDS
};

// The cache writes of q's and k's rotation launch (rope_kv, an attention's decode step):
// the second rotation's (B, H, L, D) output also goes to the k cache's slot, and v (the same
// shape, read through its strides) to the v cache's slot. Both caches have one shape and
// one slice (twin SliceUpdates), so one set of slot strides serves both; element (b, h, l,
// i) of a slot is at b * slot_b + h * slot_h + l * slot_l + i (the slot pointers carry
// its start).
struct RopeKvShape {
  int64_t slot_b, slot_h, slot_l;     // elements
  int64_t v_b, v_h, v_l, v_d;         // v's element strides
  int64_t v_total;                    // B * H * L * D
  int32_t h, l, d, pad;               // v's H, L, D
};

}  // extern "C"
