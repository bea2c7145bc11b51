// Argument structs of the sort family (hip_kernels/sort.hip), passed by value. Plain C,
// fixed-width fields, padding written out; tests/ops/test_sort_plans.py checks
// sizeof/offsetof against the packers in mlx_amd/runtime/ops/sort.py.
//
// Rows: a sort along `axis` sees rows r = outer * inner_size + inner (the dims before
// and after the axis). The input is read through the collapsed remaining dims
// (row_shape/row_strides, innermost first) plus in_axis_stride; the output is MLX's
// row-contiguous array, so element j of row r is at
// (r / out_inner) * n * out_inner + r % out_inner + j * out_inner.
//
// Keys: every value becomes an unsigned integer of its own size whose order is MLX's
// (kind 0 unsigned/bool: the bits; 1 signed: sign bit flipped; 2 IEEE float: NaNs
// above +inf and all equal, -0.0 equal to +0.0; abs_inf is +inf's bit pattern).
#pragma once

#include <stdint.h>

#define MLXA_SORT_MAX_DIMS 8
#define MLXA_KEY_UNSIGNED 0
#define MLXA_KEY_SIGNED 1
#define MLXA_KEY_FLOAT 2
#define MLXA_RADIX_IOTA 1
#define MLXA_RADIX_FINAL 2
#define MLXA_RADIX_WRITE_KEYS 4
#define MLXA_RADIX_WRITE_VALS 8

extern "C" {

struct SortRows {
  int64_t rows;
  int64_t in_axis_stride;
  int64_t out_inner;
  int64_t row_strides[MLXA_SORT_MAX_DIMS];
  int32_t row_shape[MLXA_SORT_MAX_DIMS];
  int32_t row_ndim;
  int32_t n;                 // axis size
  int32_t kind;
  int32_t pad_;
  uint64_t abs_inf;
};

// Whole rows sorted in shared memory: a block holds TILE / seg rows, seg = the power of
// two at or above n.
struct SortBlockArgs {
  const void* in;
  void* out;
  SortRows r;
  int32_t seg;
  int32_t pad_[3];
};

// Long rows, LSD radix sort over temporaries, 8 bits a pass.
// Prologue: keys[r * n + j] = key(in(r, j)); raw[r * n + j] = in(r, j) when write_raw is 1,
// the position j as uint32 when it is 2 (ArgSort through the helper library).
// Grid: (blocks, rows).
struct RadixKeysArgs {
  const void* in;
  void* keys;
  void* raw;
  int32_t write_raw;
  int32_t pad_;
  SortRows r;
};

// Per tile histogram of the pass's digit: counts[(row * 256 + digit) * tiles + tile].
struct RadixCountArgs {
  const void* keys;
  uint32_t* counts;
  int64_t n;
  int32_t tiles;
  int32_t shift;
  int32_t tile_size;          // elements per tile: the scatter's sub-tile times subtiles
  int32_t pad_;
};

// In place exclusive scan of counts[(row * 256 + digit) * tiles + 0 .. tiles) per (digit,
// row) block; totals[row * 256 + digit] = that digit's count in the row.
struct RadixScanArgs {
  uint32_t* counts;
  uint32_t* totals;
  int32_t tiles;
  int32_t pad_;
};

// Stable scatter of one pass; flags say what it reads and writes (MLXA_RADIX_*): with
// IOTA the payload read is the element's index (vals_in unused); with FINAL the
// written array is the output (element j of row r placed as above, keys XORed with
// key_xor), otherwise [rows][n] temporaries. Unused pointers may be anything.
struct RadixScatterArgs {
  const void* keys_in;
  const void* vals_in;       // null with iota: the payload is the element's index
  void* keys_out;
  void* vals_out;
  const uint32_t* counts;
  const uint32_t* totals;
  int64_t n;
  int64_t out_inner;
  uint64_t key_xor;
  int32_t tiles;
  int32_t shift;
  int32_t flags;
  int32_t subtiles;           // sub-tiles per block (radix_tile elements each)
};

// SearchSorted: out[i] = insertion point of v(i) in the 1-D sorted a (uint32).
struct SearchSortedArgs {
  const void* a;
  const void* v;
  uint32_t* out;
  int64_t count;             // values
  int64_t a_stride;
  int64_t v_strides[MLXA_SORT_MAX_DIMS];
  int32_t v_shape[MLXA_SORT_MAX_DIMS];
  int32_t v_ndim;
  uint32_t a_size;
  int32_t kind;
  int32_t right;
  uint64_t abs_inf;
};

}  // extern "C"
