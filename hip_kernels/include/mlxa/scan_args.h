// Argument struct of the scan family (hip_kernels/scan.hip), passed by value.
// Plain C with fixed-width fields and explicit padding so that a host compiler can
// check sizeof/offsetof against the packer in mlx_amd/runtime/ops/scan.py.
#pragma once

#include <stdint.h>

#define MLXA_SCAN_MAX_DIMS 8

// flags
#define MLXA_SCAN_REVERSE 1
#define MLXA_SCAN_INCLUSIVE 2
#define MLXA_SCAN_WAVE_ROWS 4   // row kernel: one wave per row (else one block per row chunk)
// row kernel: 16-byte groups per thread per tile, by elements per group V (registers:
// 16 elements of 4 bytes, 16 of 1-2 bytes widened, 4 of 8 bytes)
#define MLXA_SCAN_ROW_GROUPS(V) ((V) == 4 ? 4 : ((V) == 2 || (V) == 8) ? 2 : 1)

// modes of the row kernel
#define MLXA_SCAN_FULL 0        // scan and write
#define MLXA_SCAN_TOTALS 1      // write each chunk's total to `totals`
#define MLXA_SCAN_CARRIED 2     // scan and write, starting from the totals of earlier chunks
#define MLXA_SCAN_CLEAR 3       // zero the look-back status (1 + rows * nchunks words at totals)
#define MLXA_SCAN_LOOKBACK 4    // one tile per block, its prefix from the chunks before it
                                // (decoupled look-back over the status CLEAR zeroed)

// chunk states (TOTALS/CARRIED totals, look-back values): sizeof(State<A>) rounded up for
// every accumulator; the look-back status starts with the ticket, padded to this header
#define MLXA_SCAN_STATE_BYTES 16
#define MLXA_SCAN_STATUS_HEAD 16

extern "C" {

// Row kernel ("r"): rows of n elements along the scan axis, which is the output's
// innermost one; row r starts at r decomposed over shape/strides (the other dims of
// the input, innermost first), elements step by elem_stride; output row r at r * n.
// Long rows split into nchunks chunks of `chunk` elements (two launches: TOTALS, then
// CARRIED; or CLEAR, then LOOKBACK with chunk = one block's tile); otherwise chunk = n
// and nchunks = 1. Look-back status at totals: a ticket word (MLXA_SCAN_STATUS_HEAD bytes),
// then 16-byte aligned regions of rows * nchunks flags (uint32), aggregates and inclusive
// prefixes (MLXA_SCAN_STATE_BYTES each).
// Column kernel ("c"): `rows` columns (every position of the other dims), each scanned
// by one thread; column c starts at c decomposed over shape/strides, its output at
// (c / inner) * n * inner + c % inner with stride `inner` along the axis.
struct ScanArgs {
  const void* in;
  void* out;
  void* totals;                           // chunk states (TOTALS/CARRIED), status (LOOKBACK)
  int64_t rows;
  int64_t n;
  int64_t elem_stride;                    // input elements between axis positions
  int64_t chunk;
  int64_t inner;
  int64_t strides[MLXA_SCAN_MAX_DIMS];    // elements
  int32_t shape[MLXA_SCAN_MAX_DIMS];
  int32_t ndim;
  int32_t nchunks;
  int32_t flags;
  int32_t mode;
};

}  // extern "C"
