// Argument structs of the sdpa family (hip_kernels/sdpa.hip), passed by value.
// Plain C with fixed-width fields and explicit padding so that a host compiler can
// check sizeof/offsetof against the packers in mlx_amd/runtime/ops/sdpa.py.
#pragma once

#include <stdint.h>

// mask_kind: how the optional mask input is read
#define MLXA_SDPA_MASK_NONE 0
#define MLXA_SDPA_MASK_BOOL 1     // false -> the lowest finite logit (MLX's where(mask, s, min))
#define MLXA_SDPA_MASK_ADD_T 2    // additive, the kernel's element type
#define MLXA_SDPA_MASK_ADD_F32 3  // additive, float32
// sink_kind: the optional per-query-head extra logit
#define MLXA_SDPA_SINK_NONE 0
#define MLXA_SDPA_SINK_T 1
#define MLXA_SDPA_SINK_F32 2

extern "C" {

// Decode: grid (splits x row chunks, Hkv, B), row chunks fastest. q (B, Hq, Lq, D)
// and out (B, Hq, Lq, D) rows are (head, query) pairs; k, v (B, Hkv, Lk, D) are read
// through their strides (unit last stride). With n_splits > 1 each block writes its
// unnormalised partial (acc, max, sum) and the last of a row chunk's splits to arrive
// combines them into out; else each block writes out.
struct SdpaDecodeArgs {
  const void* q;
  const void* k;
  const void* v;
  const void* mask;      // any valid address when mask_kind == NONE
  const void* sinks;     // any valid address when sink_kind == NONE
  void* out;
  float* part_o;         // (n_splits, B*Hq*Lq, D) float32, when n_splits > 1
  float* part_ml;        // (n_splits, B*Hq*Lq, 2) float32: running max (log2 domain), sum
  unsigned int* counters;  // (B, Hkv, row chunks) arrivals, zero before and after a launch
  int64_t q_strides[4];  // b, h, l, d (elements)
  int64_t k_strides[3];  // b, h, s
  int64_t v_strides[3];  // b, h, s
  int64_t mask_strides[4];  // b, h, l, j (0 where broadcast)
  int64_t sink_stride;
  int32_t B, Hq, Hkv, Lq;
  int32_t Lk;
  int32_t keys_per_split;
  int32_t n_splits;
  int32_t mask_kind;
  int32_t sink_kind;
  int32_t causal;
  float scale_log2;      // scale * log2(e): folded into q
  int32_t pad0;
};

// Prefill softmax over one chunk of scores, in place: S holds rows (b, kv head, query
// row li of the chunk, group member g) in that order, n scores each with row pitch ld,
// already scaled; writes the probabilities in the same type over them.
struct SdpaRowsArgs {
  void* s;
  const void* mask;
  const void* sinks;
  int64_t ld;
  int64_t mask_strides[4];  // b, h, l, j
  int64_t sink_stride;
  int64_t rows;          // B * Hkv * c * G
  int32_t n;             // scores per row (keys of this chunk)
  int32_t G;             // query heads per kv head
  int32_t c;             // query rows of the chunk
  int32_t Hkv;
  int32_t l0;            // first query row of the chunk
  int32_t Lq;
  int32_t Lk;
  int32_t mask_kind;
  int32_t sink_kind;
  int32_t causal;
};

// Scatter a chunk's output (B*Hkv, c, G, Dv) row-major into out (B, Hq, Lq, Dv) at
// query rows l0 .. l0 + c - 1.
struct SdpaScatterArgs {
  const void* src;
  void* dst;
  int64_t total;         // B * Hkv * c * G * Dv / V  (vectors to move)
  int32_t c;
  int32_t G;
  int32_t Dv;            // in vectors of the kernel's width
  int32_t Lq;
  int32_t l0;
  int32_t pad0;
};

// Flash prefill: grid (query tiles, Hq, B); one block computes a tile of query rows of
// one head against every key tile it can see, with the softmax online (no score matrix
// in memory). q, k, v are read through their strides (unit last stride); out is
// (B, Hq, Lq, D) row-contiguous. D == Dv.
struct SdpaFlashArgs {
  const void* q;
  const void* k;
  const void* v;
  const void* mask;      // any valid address when mask_kind == NONE
  const void* sinks;     // any valid address when sink_kind == NONE
  void* out;
  int64_t q_strides[3];  // b, h, l (elements)
  int64_t k_strides[3];  // b, h, s
  int64_t v_strides[3];  // b, h, s
  int64_t mask_strides[4];  // b, h, l, j (0 where broadcast)
  int64_t sink_stride;
  int32_t B, Hq, Hkv, Lq;
  int32_t Lk;
  int32_t q_tiles;       // ceil(Lq / the kernel's query tile)
  int32_t mask_kind;
  int32_t sink_kind;
  int32_t causal;
  float scale_log2;      // scale * log2(e), applied to the scores
};

}  // extern "C"
