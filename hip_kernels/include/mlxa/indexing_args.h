// Argument structs of the indexing family (hip_kernels/indexing.hip), passed by value.
// Plain C with fixed-width fields and explicit padding so the Python packers in
// mlx_amd/runtime/ops/indexing.py can be checked field by field with a host compiler.
// Shapes and strides are stored innermost dimension first; strides are in elements.
#pragma once

#include <stdint.h>

#include "args.h"

#define MLXA_IDX_MAX_ARRAYS 6   // index arrays of one Gather/Scatter (more: CPU fallback)
#define MLXA_DYN_MAX_AXES 8     // axes of a DynamicSlice/DynamicSliceUpdate start vector

// Index dtype codes (idx_kind): how kernels read an index array element.
#define MLXA_IDX_U8 0
#define MLXA_IDX_U16 1
#define MLXA_IDX_U32 2
#define MLXA_IDX_U64 3
#define MLXA_IDX_I8 4
#define MLXA_IDX_I16 5
#define MLXA_IDX_I32 6
#define MLXA_IDX_I64 7

extern "C" {

// Gather (out row-contiguous, shape = index shape + slice shape) and Scatter (out row-
// contiguous, updates of shape index shape + slice shape, strided). `data` is the
// source (gather) or the updates (scatter). Element e of the work: index position
// i = e / slice_n, slice element s = e % slice_n.
struct GatherScatterArgs {
  const void* data;
  const void* idx[MLXA_IDX_MAX_ARRAYS];   // unused slots repeat a valid pointer
  void* out;
  int64_t n;                              // work elements (index positions * slice_n)
  int64_t slice_n;                        // elements of one slice
  int64_t idx_strides[MLXA_IDX_MAX_ARRAYS][MLXA_MAX_DIMS];   // each index array over the index shape
  int64_t pos_strides[MLXA_MAX_DIMS];     // scatter: updates' strides over the index shape
  int64_t axis_strides[MLXA_IDX_MAX_ARRAYS];  // stride of each indexed axis (source / output)
  int64_t axis_size[MLXA_IDX_MAX_ARRAYS];     // its extent: negative indices wrap by it
  int64_t axis_hi[MLXA_IDX_MAX_ARRAYS];       // largest in-bounds start: extent - slice extent
  int64_t slice_strides[MLXA_MAX_DIMS];   // gather: source; scatter: output
  int64_t slice_data_strides[MLXA_MAX_DIMS];  // scatter: updates over the slice shape
  int32_t idx_shape[MLXA_MAX_DIMS];
  int32_t slice_shape[MLXA_MAX_DIMS];
  int32_t idx_ndim;
  int32_t slice_ndim;
  int32_t n_idx;
  int32_t idx_kind;
  int32_t vec;                            // 16-byte groups proven by the planner (0/1: none)
  int32_t pad_;
};

// GatherAxis (take_along_axis) and ScatterAxis (put_along_axis) over the index shape.
// strides[0]: the data operand (gather: source with the axis stride zeroed; scatter: the
// updates), strides[1]: the index array, strides[2]: scatter output (axis zeroed).
struct AxisArgs {
  const void* data;
  const void* idx;
  void* out;
  int64_t n;                // elements of the index shape
  int64_t axis_stride;      // gather: source stride along the axis; scatter: output's
  int64_t axis_size;
  int64_t strides[3][MLXA_MAX_DIMS];
  int32_t shape[MLXA_MAX_DIMS];
  int32_t ndim;
  int32_t idx_kind;
};

// SliceUpdate, DynamicSlice, DynamicSliceUpdate: out[o_off + dyn] op= data[d_off (+ dyn)]
// over the slice shape. `start` holds the dynamic start indices (DynamicSlice*); each is
// clamped to [0, dyn_hi] and scaled by dyn_strides, and the sum is added to the data
// side (dyn_side 0: DynamicSlice reads) or the output side (1: DynamicSliceUpdate).
//   n              slice elements
//   strides        [0] data, [1] out
//   start_stride   element stride of the start vector
//   vec            16-byte groups allowed by the planner (0/1: none)
#define MLXA_SLICE_SHAPE_FIELDS                    \
  int64_t n;                                       \
  int64_t strides[2][MLXA_MAX_DIMS];               \
  int64_t start_stride;                            \
  int64_t dyn_strides[MLXA_DYN_MAX_AXES];          \
  int64_t dyn_hi[MLXA_DYN_MAX_AXES];               \
  int32_t shape[MLXA_MAX_DIMS];                    \
  int32_t ndim, n_dyn, dyn_side, start_kind, vec, pad_;

struct SliceArgs {
  const void* data;
  const void* start;        // unused (a valid pointer) when n_dyn == 0
  void* out;
  MLXA_SLICE_SHAPE_FIELDS
};

// Two static slice updates in one launch (an attention's k and v cache writes): the
// second's pointers first, then the first's SliceArgs, then the second's shape.
struct SliceShape {
  MLXA_SLICE_SHAPE_FIELDS
};

// MaskedScatter over (batch, inner): per batch b the k-th true mask element (row-major
// over the mask's inner dims) takes element k of src[b] (row-major over src's inner
// dims). Three kernels share it: count (true elements per tile of MLXA_MASKED_TILE),
// scan (exclusive prefix of the tile counts per batch, in place; sets `flag` when a
// batch has more true elements than src holds) and scatter.
#define MLXA_MASKED_TILE 4096   // mask elements per block: 256 threads x 16

struct MaskedArgs {
  const void* mask;         // bool
  const void* src;
  void* out;                // row-contiguous, dst's shape (already holding dst)
  void* counts;             // int64 [batch][chunks], then an int32 flag
  int64_t batch;
  int64_t inner;            // mask/out elements per batch
  int64_t chunks;           // tiles per batch: ceil(inner / MLXA_MASKED_TILE)
  int64_t src_inner;        // src elements per batch
  int64_t mask_bstride;     // batch strides, elements
  int64_t src_bstride;
  int64_t mask_strides[MLXA_MAX_DIMS];   // over the collapsed inner dims
  int64_t src_strides[MLXA_MAX_DIMS];
  int32_t mask_shape[MLXA_MAX_DIMS];
  int32_t src_shape[MLXA_MAX_DIMS];
  int32_t mask_ndim;
  int32_t src_ndim;
};

}  // extern "C"
