// SDPA family: scaled dot-product attention (the mlx_amd::SDPA primitive).
//
// decode   (few query rows, the LLM token step; memory-bound): one block per (split of
//          the keys x chunk of 4 query rows, kv head, batch). Every query head of a GQA/MQA
//          group is computed from one read of K and V. Lanes form groups of LG <= 32
//          lanes, one key per group at a time: a lane holds NV 16-byte vectors of q (R
//          rows, pre-scaled by scale*log2 e), of the key and of the value, so the value
//          accumulators need no reduction across lanes until the end; a key's score is
//          reduce-scattered so that each lane runs the online softmax (float32, exp2) of
//          one row. Partials (acc, max, sum) per split go to a float32 temporary and the
//          last block of a row chunk to finish (a counter in memory the runtime keeps
//          zeroed) combines them; a single split writes the output itself.
// flash    (prefill, D == Dv): one block per tile of BQ query rows of one head; key tiles
//          of BK rows go through shared memory, S = Q K^T and O += P V stay in registers
//          with the softmax online, so no score matrix exists. A 16 x 16 thread grid: a
//          thread holds RQ query rows x KQ keys of S (keys tc, tc + 16, ...) and RQ rows x
//          D/16 columns of O; P reaches the O columns by shuffles within a 16-lane group
//          (no shared memory, no wave-width dependence). With a causal mask a tile stops
//          at its last visible key. Portable float32 FMA: the twin the matrix-unit
//          variant is checked against.
// flash_mma (prefill, 16-bit dtypes, D <= 128): the same algorithm on the matrix unit
//          (mlxa/mma.h: mma.sync, MFMA or WMMA), four waves of 16 query rows per block.
// rows     (prefill fallback, D != Dv or no flash config): the softmax of a chunk of
//          scores computed by the vendor GEMM, in place, one block per row, with the
//          causal cut, the mask and the sinks.
// scatter  (prefill fallback): a chunk's (.., c, G, Dv) output into (B, Hq, Lq, Dv).
//
// Semantics follow MLX's decomposition (mlx/fast.cpp): a false boolean mask (and the
// causal cut) sets the score to the lowest finite value (so a row with nothing visible
// averages every value uniformly), an additive mask is added, a sink is one more logit
// of the softmax whose probability is dropped; a row of -inf scores gives NaN.
//
// Lane groups are at most 32 lanes wide and shuffle with an explicit width (LG or 32),
// which divides both hardware wave widths: the decode kernels do not depend on the
// wave width. The rows kernel reduces over the block and takes W (mlxa/wave.h).
#include "mlxa/platform.h"
#include "mlxa/types.h"
#include "mlxa/wave.h"
#include "mlxa/mma.h"
#include "mlxa/sdpa_args.h"

namespace mlxa::sdpa {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kMaskedLogit = -3.402823466e38f;   // -FLT_MAX: "masked", still finite
using vec16 = Vec<uint32_t, 4>;                     // the scatter's 16-byte element

MLXA_DEVICE float neg_inf() { return uint_as_float(0xff800000u); }

template <typename T>
MLXA_DEVICE float load_f(const void* p, int64_t i) { return (float)widen(((const T*)p)[i]); }

// The log2-domain logit after the mask: s2 is score * log2(e).
template <typename T>
MLXA_DEVICE float masked_logit(float s2, int kind, const void* mask, int64_t off) {
  if (kind == MLXA_SDPA_MASK_BOOL) return ((const uint8_t*)mask)[off] ? s2 : kMaskedLogit;
  if (kind == MLXA_SDPA_MASK_ADD_T) return s2 + load_f<T>(mask, off) * kLog2e;
  if (kind == MLXA_SDPA_MASK_ADD_F32) return s2 + ((const float*)mask)[off] * kLog2e;
  return s2;
}

template <typename T>
MLXA_DEVICE float sink_logit(int kind, const void* sinks, int64_t off) {
  if (kind == MLXA_SDPA_SINK_T) return load_f<T>(sinks, off) * kLog2e;
  return ((const float*)sinks)[off] * kLog2e;
}

// exp2(a - b) for a rescale from max a to max b >= a: 1 when equal (also -inf == -inf).
MLXA_DEVICE float rescale(float a, float b) { return a == b ? 1.0f : exp2f(a - b); }

template <typename T, int N>
MLXA_DEVICE void load_vec(const T* p, bool aligned, Vec<T, N>& out) {
  if (aligned) {
    out = *(const Vec<T, N>*)p;
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out.v[i] = p[i];
  }
}

constexpr int next_pow2(int x) { return x <= 1 ? 1 : 2 * next_pow2((x + 1) / 2); }

// The R partial sums of each lane, summed over a group of LG lanes (LG >= R, powers of
// two) so that each lane ends with one whole sum: that of row lane / (LG / R). Halving
// the rows held at each of the first log2(R) butterfly steps costs R - 1 + log2(LG / R)
// shuffles instead of R * log2(LG) for a full reduction of every row on every lane.
template <int R, int LG>
MLXA_DEVICE float reduce_scatter(float (&s)[R], int lane) {
  static_assert(LG >= R && (R & (R - 1)) == 0, "reduce_scatter: R a power of two <= LG");
  float t[R];
#pragma unroll
  for (int r = 0; r < R; ++r) t[r] = s[r];
#pragma unroll
  for (int h = R / 2, o = LG / 2; o > 0; o >>= 1) {
    if (h >= 1) {
      // lanes with bit o set keep the upper half of their rows and send the lower half
      const bool up = (lane & o) != 0;
#pragma unroll
      for (int i = 0; i < h; ++i) {
        const float send = up ? t[i] : t[i + h];
        const float keep = up ? t[i + h] : t[i];
        t[i] = keep + shfl_xor(send, o, LG);
      }
      h /= 2;
    } else {
      t[0] += shfl_xor(t[0], o, LG);
    }
  }
  return t[0];
}

// Compile-time shape of the decode kernel for element type T, head dim D, R rows.
template <typename T, int D, int R>
struct Cfg {
  static constexpr int VEC = 16 / (int)sizeof(T);            // elements per 16-byte vector
  static constexpr int NVEC = D / VEC;                        // vectors per key row
  static constexpr int EPL = 8;                               // elements per lane (target)
  static constexpr int NV = EPL / VEC > 0 ? EPL / VEC : 1;    // vectors per lane
  static constexpr int LG = next_pow2((NVEC + NV - 1) / NV);  // lanes per key
  static constexpr bool kFull = LG * NV == NVEC;              // every lane vector is real
  static_assert(D % VEC == 0, "head dim must fill 16-byte vectors");
  static_assert(LG <= 32, "a key's lane group must fit in 32 lanes");
  static_assert(LG >= R, "the score's reduce-scatter gives each lane one row");
};

// ---- split-K: the last block of a row chunk to finish combines every split's partials (no
// second launch: its latency was most of a short-context decode). `counter` (the chunk's, in
// memory the runtime keeps zeroed; the last block sets it back to 0), `ml` (2 floats a row)
// and `last` are the caller's. After the arrival count, one trip to memory where there were
// 2 + splits / 8: the rows' (max, sum) pairs (a 32-lane subgroup a row, merged online) and
// the first CAP splits of every partial row are loaded together, the partial rows by
// tpi neighbouring lanes an output quad, summed by shuffles.
MLXA_DEVICE void merge_ml(float& M, float& L, float m, float l) {
  const float mn = fmaxf(M, m);
  L = L * rescale(M, mn) + l * rescale(m, mn);
  M = mn;
}
// CAP: partial rows a lane has in flight.
template <typename T, int D, int NT, int CAP, class OutRow>
MLXA_DEVICE void combine_splits(const SdpaDecodeArgs& a, int rows_here, const OutRow& out_row,
                                unsigned int* counter, float* ml, unsigned int* last) {
  constexpr int Q = D / 4;
  static_assert(D % 4 == 0, "partial rows in 16-byte vectors");
  const int tid = (int)threadIdx.x, sub = tid / 32, sl = tid % 32;
  const int rows_total = a.B * a.Hq * a.Lq;
  __threadfence();                 // this block's partials before its arrival is counted
  sync_block();
  if (tid == 0) *last = atomicAdd(counter, 1u) == (unsigned int)a.n_splits - 1u;
  sync_block();
  if (!*last) return;
  __threadfence();                 // the other blocks' partials, counted before, are visible
  const int n = a.n_splits;
  // output quads (row, 4 columns): tpi lanes each (a power of two, within a subgroup) over
  // every tpi-th split; every lane takes every round and shuffle (a wave's shuffles need all
  // of its lanes: CDNA's wave holds two subgroups)
  const int items = rows_here * Q;
  int tpi = 1;
  while (tpi < 16 && items * tpi * 2 <= NT) tpi *= 2;
  const int part = tid % tpi;
  Vec<float, 4> x[CAP];
  float m[CAP];
  auto load = [&](int gi, int s0) {
    const int item = gi < items * tpi ? gi / tpi : 0;
    const int64_t orow = out_row(item / Q);
#pragma unroll
    for (int i = 0; i < CAP; ++i) {
      const int sp = s0 + part + i * tpi;
      if (sp < n) {
        const int64_t pr = (int64_t)sp * rows_total + orow;
        x[i] = *(const Vec<float, 4>*)(a.part_o + pr * D + (item % Q) * 4);
        m[i] = a.part_ml[pr * 2];
      } else {
        x[i] = Vec<float, 4>{{0.0f, 0.0f, 0.0f, 0.0f}};
        m[i] = neg_inf();
      }
    }
  };
  load(tid, 0);   // in flight with the maxima's loads below
  for (int r0 = 0; r0 < rows_here; r0 += NT / 32) {
    const int r = r0 + sub < rows_here ? r0 + sub : rows_here - 1;
    const int64_t orow = out_row(r);
    const int h = (int)((orow / a.Lq) % a.Hq);
    // the sink's (logit, 1) enters once: in lane 0's pair, before the splits' (each lane's
    // start is merged into every other by the shuffles)
    const bool sink = a.sink_kind != MLXA_SDPA_SINK_NONE && sl == 0;
    float M = sink ? sink_logit<T>(a.sink_kind, a.sinks, h * a.sink_stride) : neg_inf();
    float L = sink ? 1.0f : 0.0f;
    for (int sp = sl; sp < n; sp += 32) {
      const Vec<float, 2> v = *(const Vec<float, 2>*)(a.part_ml + ((int64_t)sp * rows_total + orow) * 2);
      merge_ml(M, L, v.v[0], v.v[1]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float mo = shfl_xor(M, o, 32), lo = shfl_xor(L, o, 32);
      merge_ml(M, L, mo, lo);
    }
    if (sl == 0 && r0 + sub < rows_here) {
      ml[2 * r] = M;
      ml[2 * r + 1] = L;
    }
  }
  sync_block();
  for (int base = 0; base < items * tpi; base += NT) {
    const int gi = base + tid;
    const int item = gi < items * tpi ? gi / tpi : 0;
    const int r = item / Q, e = (item % Q) * 4;
    const float M = ml[2 * r];
    float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int s0 = 0; s0 < n; s0 += CAP * tpi) {
      if (base > 0 || s0 > 0) load(gi, s0);
#pragma unroll
      for (int i = 0; i < CAP; ++i) {
        const float f = rescale(m[i], M);
#pragma unroll
        for (int j = 0; j < 4; ++j) o[j] = fmaf(x[i].v[j], f, o[j]);
      }
    }
    for (int off = 1; off < tpi; off <<= 1)
#pragma unroll
      for (int j = 0; j < 4; ++j) o[j] += shfl_xor(o[j], off, 32);
    if (gi < items * tpi && part == 0) {
      const float inv = 1.0f / ml[2 * r + 1];
      const int64_t orow = out_row(r);
#pragma unroll
      for (int j = 0; j < 4; ++j) ((T*)a.out)[orow * D + e + j] = cast<T>(o[j] * inv);
    }
  }
  if (tid == 0) *counter = 0u;     // ready for the next launch, queued after this one
}

// A row's finished (max, sum, output column) of a decode block: the partials of its split, or
// with a single split the output itself (the sinks folded in here).
template <typename T, int D>
MLXA_DEVICE void decode_emit(const SdpaDecodeArgs& a, int split, int64_t orow, int e, float M, float L, float o) {
  if (a.n_splits > 1) {
    const int64_t pr = (int64_t)split * (a.B * a.Hq * a.Lq) + orow;
    a.part_o[pr * D + e] = o;
    if (e == 0) {
      a.part_ml[pr * 2] = M;
      a.part_ml[pr * 2 + 1] = L;
    }
    return;
  }
  if (a.sink_kind != MLXA_SDPA_SINK_NONE) {
    const int h = (int)((orow / a.Lq) % a.Hq);
    const float sk = sink_logit<T>(a.sink_kind, a.sinks, h * a.sink_stride);
    const float mn = fmaxf(M, sk);
    const float fo = rescale(M, mn);
    o *= fo;
    L = L * fo + rescale(sk, mn);
  }
  ((T*)a.out)[orow * D + e] = cast<T>(o / L);
}

constexpr int kDecodeBlock = 256;

template <typename T, int D, int R>
MLXA_DEVICE void decode(const SdpaDecodeArgs& a) {
  using C = Cfg<T, D, R>;
  constexpr int VEC = C::VEC, NV = C::NV, LG = C::LG;
  constexpr int NG = kDecodeBlock / LG;        // lane groups per block
  constexpr int NSUB = kDecodeBlock / 32;      // 32-lane subgroups per block
  static_assert(R <= NSUB && NG >= 2, "the split combine gives each row a 32-lane subgroup");
  __shared__ float sm_m[R][NG];
  __shared__ float sm_buf[R][NSUB][D];
  __shared__ float sm_l[R][NSUB];

  const int tid = (int)threadIdx.x;
  const int group = tid / LG, lane = tid % LG;
  const int G = a.Hq / a.Hkv;
  const int n_rows = G * a.Lq;                 // query rows of this kv head
  // row chunks of one split are neighbours in launch order: they share K/V through L2
  const int chunks = (n_rows + R - 1) / R;
  const int split = (int)blockIdx.x / chunks;
  const int row0 = ((int)blockIdx.x % chunks) * R;
  const int kvh = (int)blockIdx.y;
  const int b = (int)blockIdx.z;
  const int rows_here = n_rows - row0 < R ? n_rows - row0 : R;

  // After the score's reduce-scatter (reduce_scatter) a lane holds the whole score of one
  // query row, myr: its mask offset, causal limit and softmax state are the lane's own.
  constexpr int LPR = LG / R;                  // lanes per row after the reduce-scatter
  const int myr = lane / LPR;
  // q rows, pre-scaled into the log2 domain
  float q[R][NV][VEC];
  int64_t my_mrow = 0;
  int my_limit = 0;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int idx = row0 + (r < rows_here ? r : 0);
    const int g = idx / a.Lq, l = idx % a.Lq, h = kvh * G + g;
    const int64_t qoff = b * a.q_strides[0] + h * a.q_strides[1] + l * a.q_strides[2];
    if (r == myr) {
      my_mrow = b * a.mask_strides[0] + h * a.mask_strides[1] + l * a.mask_strides[2];
      my_limit = a.causal ? l + a.Lk - a.Lq : a.Lk;
    }
#pragma unroll
    for (int v = 0; v < NV; ++v)
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const int e = (lane + v * LG) * VEC + i;
        q[r][v][i] = e < D ? load_f<T>(a.q, qoff + e * a.q_strides[3]) * a.scale_log2 : 0.0f;
      }
  }

  const T* kbase = (const T*)a.k + b * a.k_strides[0] + kvh * a.k_strides[1];
  const T* vbase = (const T*)a.v + b * a.v_strides[0] + kvh * a.v_strides[1];
  const bool aligned = (((uintptr_t)kbase | (uintptr_t)vbase) & 15u) == 0;
  const int64_t ks = a.k_strides[2], vs = a.v_strides[2];
  const int k0 = split * a.keys_per_split;
  const int k1 = k0 + a.keys_per_split < a.Lk ? k0 + a.keys_per_split : a.Lk;

  float my_m = neg_inf(), my_l = 0.0f, acc[R][NV][VEC];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int v = 0; v < NV; ++v)
#pragma unroll
      for (int i = 0; i < VEC; ++i) acc[r][v][i] = 0.0f;
  }

  auto load_kv = [&](int j, Vec<T, VEC>* kv, Vec<T, VEC>* vv) {
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      const int vi = lane + v * LG;
      if (j < k1 && (C::kFull || vi < C::NVEC)) {
        load_vec<T, VEC>(kbase + j * ks + vi * VEC, aligned, kv[v]);
        load_vec<T, VEC>(vbase + j * vs + vi * VEC, aligned, vv[v]);
      } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i) kv[v].v[i] = vv[v].v[i] = cast<T>(0.0f);
      }
    }
  };

  Vec<T, VEC> kc[NV], vc[NV];
  load_kv(k0 + group, kc, vc);
  // every lane runs the same number of iterations: the shuffles below need the whole wave
  for (int base = k0; base < k1; base += NG) {
    const int j = base + group;
    Vec<T, VEC> kn[NV], vn[NV];
    load_kv(j + NG, kn, vn);                 // the next key, in flight during this one
    float kf[NV][VEC], vf[NV][VEC];
#pragma unroll
    for (int v = 0; v < NV; ++v)
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        kf[v][i] = (float)widen(kc[v].v[i]);
        vf[v][i] = (float)widen(vc[v].v[i]);
      }
    float s[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float d = 0.0f;
#pragma unroll
      for (int v = 0; v < NV; ++v)
#pragma unroll
        for (int i = 0; i < VEC; ++i) d = fmaf(q[r][v][i], kf[v][i], d);
      s[r] = d;
    }
    // the lane's row: its logit, the new running max, the rescale and the probability
    float x = neg_inf();
    const float sc = reduce_scatter<R, LG>(s, lane);
    if (j < k1) {
      x = masked_logit<T>(sc, a.mask_kind, a.mask, my_mrow + j * a.mask_strides[3]);
      if (j > my_limit) x = kMaskedLogit;
    }
    const float mn = fmaxf(my_m, x);
    const float my_al = rescale(my_m, mn);
    const float my_p = x == neg_inf() ? 0.0f : exp2f(x - mn);
    my_m = mn;
    my_l = my_l * my_al + my_p;
    // every lane accumulates its value columns for every row: the rows' factors by shuffle;
    // the running max rarely moves, so the rescale is mostly skipped
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float al = shfl(my_al, r * LPR, LG);
      const float p = shfl(my_p, r * LPR, LG);
      if (al != 1.0f) {
#pragma unroll
        for (int v = 0; v < NV; ++v)
#pragma unroll
          for (int i = 0; i < VEC; ++i) acc[r][v][i] *= al;
      }
#pragma unroll
      for (int v = 0; v < NV; ++v)
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc[r][v][i] = fmaf(p, vf[v][i], acc[r][v][i]);
    }
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      kc[v] = kn[v];
      vc[v] = vn[v];
    }
  }

  // ---- combine the lane groups of the block, every row at once (two barriers in all)
  float m[R], lsum[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = shfl(my_m, r * LPR, LG);
    lsum[r] = shfl(my_l, r * LPR, LG);
  }
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) sm_m[r][group] = m[r];
  }
  sync_block();
  const int sub = tid / 32, sl = tid % 32;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float M = neg_inf();
    for (int gi = 0; gi < NG; ++gi) M = fmaxf(M, sm_m[r][gi]);
    const float f = rescale(m[r], M);
    float ls = lsum[r] * f;
    float x[NV][VEC];
#pragma unroll
    for (int v = 0; v < NV; ++v)
#pragma unroll
      for (int i = 0; i < VEC; ++i) x[v][i] = acc[r][v][i] * f;
    // the groups of one 32-lane subgroup, then the subgroups through shared memory
#pragma unroll
    for (int o = LG; o < 32; o <<= 1) {
      ls += shfl_xor(ls, o, 32);
#pragma unroll
      for (int v = 0; v < NV; ++v)
#pragma unroll
        for (int i = 0; i < VEC; ++i) x[v][i] += shfl_xor(x[v][i], o, 32);
    }
    if (sl < LG) {
#pragma unroll
      for (int v = 0; v < NV; ++v)
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const int e = (sl + v * LG) * VEC + i;
          if (e < D) sm_buf[r][sub][e] = x[v][i];
        }
      if (sl == 0) sm_l[r][sub] = ls;
    }
  }
  sync_block();
  auto out_row = [&](int r) {
    const int idx = row0 + r;
    const int g = idx / a.Lq, l = idx % a.Lq;
    return ((int64_t)b * a.Hq + kvh * G + g) * a.Lq + l;
  };
  for (int t = tid; t < rows_here * D; t += kDecodeBlock) {
    const int r = t / D, e = t % D;
    float M = neg_inf(), L = 0.0f, o = 0.0f;
    for (int gi = 0; gi < NG; ++gi) M = fmaxf(M, sm_m[r][gi]);
#pragma unroll
    for (int si = 0; si < NSUB; ++si) {
      L += sm_l[r][si];
      o += sm_buf[r][si][e];
    }
    decode_emit<T, D>(a, split, out_row(r), e, M, L, o);
  }
  if (a.n_splits == 1) return;
  __shared__ unsigned int sm_last;
  combine_splits<T, D, kDecodeBlock, 8>(a, rows_here, out_row,
                                     a.counters + ((int64_t)b * a.Hkv + kvh) * chunks + (int)blockIdx.x % chunks,
                                     &sm_m[0][0], &sm_last);
}

struct MaxOp {
  MLXA_DEVICE float operator()(float x, float y) const { return fmaxf(x, y); }
};
struct SumOp {
  MLXA_DEVICE float operator()(float x, float y) const { return x + y; }
};

// ---- flash prefill ----------------------------------------------------------------------

constexpr int kFlashBlock = 256;   // 16 x 16 threads

// Rows of `n` elements (row pitch `pitch` in shared memory, `gs` in global memory) from
// `src` into `dst`; rows at or past `valid` are zeros (padding must not be NaN: P V adds
// 0 * V). Vector loads when every row start is 16-byte aligned.
template <typename T, int ROWS, int N, int PITCH, int NT = kFlashBlock>
MLXA_DEVICE void tile_load(T* dst, const T* src, int64_t gs, int valid, bool aligned) {
  constexpr int VE = 16 / (int)sizeof(T);
  constexpr int NV = N / VE;
  for (int i = (int)threadIdx.x; i < ROWS * NV; i += NT) {
    const int r = i / NV, c = (i % NV) * VE;
    Vec<T, VE> x;
    if (r < valid) {
      load_vec<T, VE>(src + r * gs + c, aligned, x);
    } else {
#pragma unroll
      for (int e = 0; e < VE; ++e) x.v[e] = cast<T>(0.0f);
    }
    *(Vec<T, VE>*)(dst + r * PITCH + c) = x;
  }
}

template <typename T, int D, int RQ, int KQ>
MLXA_DEVICE void flash(const SdpaFlashArgs& a) {
  constexpr int VE = 16 / (int)sizeof(T);
  constexpr int BQ = 16 * RQ, BK = 16 * KQ;
  constexpr int DP = D + VE;          // padded pitch: the 16 keys of a lane group hit other banks
  constexpr int CPT = D / 16;         // O columns per thread
  static_assert(D % VE == 0 && D % 16 == 0, "head dim must fill 16-byte vectors and 16 lanes");
  __shared__ Vec<T, VE> sq_v[BQ * DP / VE];
  __shared__ Vec<T, VE> sk_v[BK * DP / VE];
  __shared__ Vec<T, VE> sv_v[BK * D / VE];
  T* sq = (T*)sq_v;
  T* sk = (T*)sk_v;
  T* sv = (T*)sv_v;

  const int tid = (int)threadIdx.x;
  const int tr = tid / 16, tc = tid % 16;
  // heavy (late, causal) tiles first
  const int qt = a.q_tiles - 1 - (int)blockIdx.x;
  const int h = (int)blockIdx.y, b = (int)blockIdx.z;
  const int kvh = h / (a.Hq / a.Hkv);
  const int q0 = qt * BQ;
  const int q_valid = a.Lq - q0 < BQ ? a.Lq - q0 : BQ;

  const T* qbase = (const T*)a.q + b * a.q_strides[0] + h * a.q_strides[1] + q0 * a.q_strides[2];
  const T* kbase = (const T*)a.k + b * a.k_strides[0] + kvh * a.k_strides[1];
  const T* vbase = (const T*)a.v + b * a.v_strides[0] + kvh * a.v_strides[1];
  constexpr int64_t kVecMask = 16 / sizeof(T) - 1;
  const bool q_al = ((uintptr_t)qbase & 15u) == 0 && (a.q_strides[2] & kVecMask) == 0;
  const bool kv_al = (((uintptr_t)kbase | (uintptr_t)vbase) & 15u) == 0 &&
                     ((a.k_strides[2] | a.v_strides[2]) & kVecMask) == 0;
  tile_load<T, BQ, D, DP>(sq, qbase, a.q_strides[2], q_valid, q_al);

  // per row: its query index, causal limit, mask row offset
  int lrow[RQ], limit[RQ];
  int64_t mrow[RQ];
#pragma unroll
  for (int i = 0; i < RQ; ++i) {
    lrow[i] = q0 + tr * RQ + i;
    limit[i] = a.causal ? lrow[i] + a.Lk - a.Lq : a.Lk;
    // padding rows (past Lq) read the last row's mask: never past the mask's end
    mrow[i] = b * a.mask_strides[0] + h * a.mask_strides[1] +
              (lrow[i] < a.Lq ? lrow[i] : a.Lq - 1) * a.mask_strides[2];
  }
  // keys this tile can see: with only the causal cut, up to the last row's limit (a row
  // that sees nothing needs every key: its softmax is uniform over them)
  int k_end = a.Lk;
  if (a.causal && a.mask_kind == MLXA_SDPA_MASK_NONE && q0 + a.Lk - a.Lq >= 0) {
    const int last = q0 + q_valid - 1 + a.Lk - a.Lq + 1;
    k_end = last < a.Lk ? last : a.Lk;
  }

  float m[RQ], l[RQ], acc[RQ][CPT];
#pragma unroll
  for (int i = 0; i < RQ; ++i) {
    m[i] = neg_inf();
    l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < CPT; ++c) acc[i][c] = 0.0f;
  }

  for (int k0 = 0; k0 < k_end; k0 += BK) {
    const int k_valid = a.Lk - k0 < BK ? a.Lk - k0 : BK;
    sync_block();   // the previous tile's readers are done
    tile_load<T, BK, D, DP>(sk, kbase + k0 * a.k_strides[2], a.k_strides[2], k_valid, kv_al);
    tile_load<T, BK, D, D>(sv, vbase + k0 * a.v_strides[2], a.v_strides[2], k_valid, kv_al);
    sync_block();

    float s[RQ][KQ];
#pragma unroll
    for (int i = 0; i < RQ; ++i)
#pragma unroll
      for (int j = 0; j < KQ; ++j) s[i][j] = 0.0f;
#pragma unroll 2
    for (int d = 0; d < D; d += VE) {
      float kf[KQ][VE];
#pragma unroll
      for (int j = 0; j < KQ; ++j) {
        const Vec<T, VE> kv = *(const Vec<T, VE>*)(sk + (tc + 16 * j) * DP + d);
#pragma unroll
        for (int e = 0; e < VE; ++e) kf[j][e] = (float)widen(kv.v[e]);
      }
#pragma unroll
      for (int i = 0; i < RQ; ++i) {
        const Vec<T, VE> qv = *(const Vec<T, VE>*)(sq + (tr * RQ + i) * DP + d);
#pragma unroll
        for (int e = 0; e < VE; ++e) {
          const float qf = (float)widen(qv.v[e]);
#pragma unroll
          for (int j = 0; j < KQ; ++j) s[i][j] = fmaf(qf, kf[j][e], s[i][j]);
        }
      }
    }

    // online softmax, log2 domain; padding keys (past Lk) take no part
#pragma unroll
    for (int i = 0; i < RQ; ++i) {
      float tmax = neg_inf();
#pragma unroll
      for (int j = 0; j < KQ; ++j) {
        const int key = k0 + tc + 16 * j;
        float x = neg_inf();
        if (key < a.Lk) {
          x = masked_logit<T>(s[i][j] * a.scale_log2, a.mask_kind, a.mask, mrow[i] + key * a.mask_strides[3]);
          if (key > limit[i]) x = kMaskedLogit;
        }
        s[i][j] = x;
        tmax = fmaxf(tmax, x);
      }
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) tmax = fmaxf(tmax, shfl_xor(tmax, o, 16));
      const float mn = fmaxf(m[i], tmax);
      const float al = rescale(m[i], mn);
      m[i] = mn;
      float ps = 0.0f;
#pragma unroll
      for (int j = 0; j < KQ; ++j) {
        const float p = s[i][j] == neg_inf() ? 0.0f : exp2f(s[i][j] - mn);
        s[i][j] = p;
        ps += p;
      }
      l[i] = l[i] * al + ps;     // this lane's share; the 16 lanes add up at the end
#pragma unroll
      for (int c = 0; c < CPT; ++c) acc[i][c] *= al;
    }

    // O += P V: key 16 j + src's probabilities come from lane src of the group
#pragma unroll
    for (int j = 0; j < KQ; ++j) {
#pragma unroll 4
      for (int src = 0; src < 16; ++src) {
        const int kk = 16 * j + src;
        float vf[CPT];
        const T* vrow = sv + kk * D + tc * CPT;
        if constexpr (CPT % VE == 0) {
#pragma unroll
          for (int c = 0; c < CPT; c += VE) {
            const Vec<T, VE> vv = *(const Vec<T, VE>*)(vrow + c);
#pragma unroll
            for (int e = 0; e < VE; ++e) vf[c + e] = (float)widen(vv.v[e]);
          }
        } else {
#pragma unroll
          for (int c = 0; c < CPT; ++c) vf[c] = (float)widen(vrow[c]);
        }
#pragma unroll
        for (int i = 0; i < RQ; ++i) {
          const float p = shfl(s[i][j], src, 16);
#pragma unroll
          for (int c = 0; c < CPT; ++c) acc[i][c] = fmaf(p, vf[c], acc[i][c]);
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < RQ; ++i) {
    float L = l[i];
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) L += shfl_xor(L, o, 16);
    if (lrow[i] >= a.Lq) continue;
    float f = 1.0f;
    if (a.sink_kind != MLXA_SDPA_SINK_NONE) {
      const float sk_ = sink_logit<T>(a.sink_kind, a.sinks, h * a.sink_stride);
      const float mn = fmaxf(m[i], sk_);
      f = rescale(m[i], mn);
      L = L * f + rescale(sk_, mn);
    }
    // a row of -inf logits: L = 0 -> NaN, as MLX's softmax gives
    const float inv = f / L;
    T* orow = (T*)a.out + (((int64_t)b * a.Hq + h) * a.Lq + lrow[i]) * D + tc * CPT;
#pragma unroll
    for (int c = 0; c < CPT; ++c) orow[c] = cast<T>(acc[i][c] * inv);
  }
}

// ---- flash prefill on the matrix unit (mlxa/mma.h) ------------------------------------------
// Same contract and grid as flash; kMmaWaves waves per block, each owning 16 query rows whose
// Q operands stay in registers (so Q's shared memory is reused for the K and V tiles). Per key
// tile of BK keys: S = Q K^T on the matrix unit, the online softmax on its accumulators
// (row statistics through mma::Tiles::reduce), P packed to T as the next operand, O += P V.
// P is rounded to T before P V (MLX's decomposition rounds it too); the twin keeps float32.
constexpr int kMmaWaves = 4;

// K and V tiles of BK rows for the pipeline: asynchronous 16-byte copies where every row
// start is 16-byte aligned (padding rows zero-filled), else element loads through registers.
// A thread's copies are the same tile positions at every key tile, so their stage and source
// offsets are made once (the per-copy index arithmetic was a quarter of the loop's
// instructions): copy s of the thread is copy tid + s * NT of the tile's ROWS x N elements.
// Source offsets are 32-bit: the launcher checks ROWS rows of K's and V's strides fit.
template <typename T, int ROWS, int N, int PITCH, int NT>
struct TileCopies {
  static constexpr int VE = 16 / (int)sizeof(T), NV = N / VE, NS = (ROWS * NV + NT - 1) / NT;
  uint32_t soff[NS], gk[NS], gv[NS];
  MLXA_DEVICE TileCopies(int64_t ks, int64_t vs) {
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      const int i = (int)threadIdx.x + s * NT, r = i / NV, c = (i % NV) * VE;
      soff[s] = (uint32_t)(r * PITCH + c);
      gk[s] = (uint32_t)(r * ks + c);
      gv[s] = (uint32_t)(r * vs + c);
    }
  }
  MLXA_DEVICE static int row(int s) { return ((int)threadIdx.x + s * NT) / NV; }
  // the tile at k (V: v) of which the first `valid` rows exist, into dk (dv)
  MLXA_DEVICE void issue(T* dk, T* dv, const T* k, const T* v, int valid) const {
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      if ((ROWS * NV) % NT == 0 || (int)threadIdx.x + s * NT < ROWS * NV) {
        const bool z = row(s) >= valid;
        copy16_async(dk + soff[s], z ? k : k + gk[s], z);
        copy16_async(dv + soff[s], z ? v : v + gv[s], z);
      }
    }
  }
};

// The same for one tile from any code (the decode kernel's pipeline): the copy index arithmetic
// at every call.
template <typename T, int ROWS, int N, int PITCH, int NT>
MLXA_DEVICE void tile_issue(T* dst, const T* src, int64_t gs, int valid, bool aligned) {
  if (!aligned) {
    tile_load<T, ROWS, N, PITCH, NT>(dst, src, gs, valid, false);
    return;
  }
  constexpr int VE = 16 / (int)sizeof(T);
  constexpr int NV = N / VE;
  for (int i = (int)threadIdx.x; i < ROWS * NV; i += NT) {
    const int r = i / NV, c = (i % NV) * VE;
    copy16_async(dst + r * PITCH + c, r < valid ? src + r * gs + c : src, r >= valid);
  }
}

// The key tile: the backend's bound, and two stages of K and V within FLASH_SHARED bytes.
template <typename T, int D, int KEYS>
constexpr int mma_keys() {
  constexpr int pitch = D + 16 / (int)sizeof(T);
  int bk = KEYS;
  while (bk > 16 && 4 * bk * pitch * (int)sizeof(T) > 48 * 1024) bk /= 2;
  return bk;
}

template <typename T, int D>
MLXA_DEVICE void flash_mma(const SdpaFlashArgs& a) {
  using M = mma::Tiles<T>;
  if constexpr (!M::kAvailable) {
    trap();   // the launcher takes this kernel only where the target has the unit
  } else {
    constexpr int BK = mma_keys<T, D, M::kKeys>();
    constexpr int W = M::kWave, NT = kMmaWaves * W, BQ = 16 * kMmaWaves;
    constexpr int VE = 16 / (int)sizeof(T);
    constexpr int PITCH = D + VE;   // 16-byte rows; the 8 rows an ldmatrix reads hit distinct banks
    constexpr int DC = D / 16, KC = BK / 16, S = M::kSlots;
    constexpr int STAGE = 2 * BK * PITCH;                 // K then V of one key tile
    constexpr int ROWS = BQ * PITCH > 2 * STAGE ? BQ * PITCH : 2 * STAGE;
    static_assert(D % 16 == 0 && BK % 16 == 0, "tiles are 16 x 16");
    __shared__ Vec<T, VE> smem_v[ROWS / VE];
    T* const sm = (T*)smem_v;

    if ((int)blockDim.x != NT) trap();     // the launcher's block: kMmaWaves waves
    const int tid = (int)threadIdx.x, wave = tid / W, lane = tid % W;
    const int qt = a.q_tiles - 1 - (int)blockIdx.x;   // heavy (late, causal) tiles first
    const int h = (int)blockIdx.y, b = (int)blockIdx.z;
    const int kvh = h / (a.Hq / a.Hkv);
    const int q0 = qt * BQ;
    const int q_valid = a.Lq - q0 < BQ ? a.Lq - q0 : BQ;
    const T* qbase = (const T*)a.q + b * a.q_strides[0] + h * a.q_strides[1] + q0 * a.q_strides[2];
    const T* kbase = (const T*)a.k + b * a.k_strides[0] + kvh * a.k_strides[1];
    const T* vbase = (const T*)a.v + b * a.v_strides[0] + kvh * a.v_strides[1];
    constexpr int64_t kVecMask = 16 / sizeof(T) - 1;
    const bool q_al = ((uintptr_t)qbase & 15u) == 0 && (a.q_strides[2] & kVecMask) == 0;
    const bool kv_al = (((uintptr_t)kbase | (uintptr_t)vbase) & 15u) == 0 &&
                       ((a.k_strides[2] | a.v_strides[2]) & kVecMask) == 0;

    tile_load<T, BQ, D, PITCH, NT>(sm, qbase, a.q_strides[2], q_valid, q_al);
    sync_block();
    typename M::Q qf[DC];
#pragma unroll
    for (int dc = 0; dc < DC; ++dc) M::load_q(qf[dc], sm + wave * 16 * PITCH + dc * 16, PITCH, lane);

    int lrow[S], limit[S];
    int64_t mrow[S];
    float m[S], l[S];
#pragma unroll
    for (int sl = 0; sl < S; ++sl) {
      lrow[sl] = q0 + wave * 16 + M::query(sl, lane);
      limit[sl] = a.causal ? lrow[sl] + a.Lk - a.Lq : a.Lk;
      mrow[sl] = b * a.mask_strides[0] + h * a.mask_strides[1] +
                 (lrow[sl] < a.Lq ? lrow[sl] : a.Lq - 1) * a.mask_strides[2];
      m[sl] = neg_inf();
      l[sl] = 0.0f;
    }
    // this wave's smallest causal limit: key tiles at or below it need no per-key checks
    const int wave_limit = a.causal ? q0 + wave * 16 + a.Lk - a.Lq : a.Lk;
    int k_end = a.Lk;
    if (a.causal && a.mask_kind == MLXA_SDPA_MASK_NONE && q0 + a.Lk - a.Lq >= 0) {
      const int last = q0 + q_valid - 1 + a.Lk - a.Lq + 1;
      k_end = last < a.Lk ? last : a.Lk;
    }
    const int n_tiles = (k_end + BK - 1) / BK;

    typename M::Acc o[DC];
#pragma unroll
    for (int dc = 0; dc < DC; ++dc)
#pragma unroll
      for (int e = 0; e < M::kNS; ++e) o[dc].v[e] = 0.0f;

    // two stages: tile t + 1 is in flight while tile t is computed
    const TileCopies<T, BK, D, PITCH, NT> copies(a.k_strides[2], a.v_strides[2]);
    auto issue = [&](int t) {
      T* st = sm + (t & 1) * STAGE;
      const int k0 = t * BK;
      const int valid = a.Lk - k0 < BK ? a.Lk - k0 : BK;
      if (kv_al) {
        copies.issue(st, st + BK * PITCH, kbase + k0 * a.k_strides[2], vbase + k0 * a.v_strides[2], valid);
      } else {
        tile_load<T, BK, D, PITCH, NT>(st, kbase + k0 * a.k_strides[2], a.k_strides[2], valid, false);
        tile_load<T, BK, D, PITCH, NT>(st + BK * PITCH, vbase + k0 * a.v_strides[2], a.v_strides[2], valid, false);
      }
      copy_async_commit();
    };
    sync_block();   // every wave holds its Q operands: the shared memory becomes the stages
    if (n_tiles > 0) issue(0);
    for (int t = 0; t < n_tiles; ++t) {
      const int k0 = t * BK;
      // tile t is here once every thread's copies landed; past this barrier every wave is done
      // with tile t - 1, so tile t + 1 may fill its stage (one barrier a tile, not two)
      copy_async_wait<0>();
      sync_block();
      if (t + 1 < n_tiles) issue(t + 1);
      const T* sk = sm + (t & 1) * STAGE;
      const T* sv = sk + BK * PITCH;

      typename M::Acc s[KC];
#pragma unroll
      for (int j = 0; j < KC; ++j)
#pragma unroll
        for (int e = 0; e < M::kNS; ++e) s[j].v[e] = 0.0f;
#pragma unroll
      for (int dc = 0; dc < DC; ++dc)
#pragma unroll
        for (int j = 0; j < KC; ++j) M::qk(s[j], qf[dc], sk + 16 * j * PITCH + dc * 16, PITCH, lane);

      // online softmax, log2 domain; padding keys (past Lk) take no part
      float tmax[S], al[S];
#pragma unroll
      for (int sl = 0; sl < S; ++sl) tmax[sl] = neg_inf();
      // a tile every key of which every row sees takes no per-key checks (one branch a tile,
      // not one a logit: the checks' code sat between every two logits)
      // (there the logits stay unscaled: the row maximum of the scaled ones is the scaled
      // maximum for a positive scale, and each probability takes one FFMA, exp2(s c - m))
      const bool plain = a.mask_kind == MLXA_SDPA_MASK_NONE && k0 + BK <= a.Lk && k0 + BK - 1 <= wave_limit &&
                         a.scale_log2 > 0.0f;
      if (plain) {
#pragma unroll
        for (int j = 0; j < KC; ++j)
#pragma unroll
          for (int e = 0; e < M::kNS; ++e) tmax[M::slot(e)] = fmaxf(tmax[M::slot(e)], s[j].v[e]);
#pragma unroll
        for (int sl = 0; sl < S; ++sl) tmax[sl] *= a.scale_log2;
      } else {
#pragma unroll
        for (int j = 0; j < KC; ++j)
#pragma unroll
          for (int e = 0; e < M::kNS; ++e) {
            const int sl = M::slot(e);
            float x = s[j].v[e] * a.scale_log2;
            const int key = k0 + 16 * j + M::col(e, lane);
            if (key >= a.Lk) {
              x = neg_inf();
            } else {
              x = masked_logit<T>(x, a.mask_kind, a.mask, mrow[sl] + key * a.mask_strides[3]);
              if (key > limit[sl]) x = kMaskedLogit;
            }
            s[j].v[e] = x;
            tmax[sl] = fmaxf(tmax[sl], x);
          }
      }
#pragma unroll
      for (int sl = 0; sl < S; ++sl) {
        const float mn = fmaxf(m[sl], M::reduce(tmax[sl], MaxOp{}));
        al[sl] = rescale(m[sl], mn);
        m[sl] = mn;
        l[sl] *= al[sl];   // this lane's share; the lanes of a row add up at the end
      }
      if (plain) {
#pragma unroll
        for (int j = 0; j < KC; ++j)
#pragma unroll
          for (int e = 0; e < M::kNS; ++e) {
            const int sl = M::slot(e);
            const float p = exp2f(fmaf(s[j].v[e], a.scale_log2, -m[sl]));
            s[j].v[e] = p;
            l[sl] += p;
          }
      } else {
#pragma unroll
        for (int j = 0; j < KC; ++j)
#pragma unroll
          for (int e = 0; e < M::kNS; ++e) {
            const int sl = M::slot(e);
            const float p = s[j].v[e] == neg_inf() ? 0.0f : exp2f(s[j].v[e] - m[sl]);
            s[j].v[e] = p;
            l[sl] += p;
          }
      }
      // the running maxima rarely move after the first tiles: O's rescale only when one did
      bool moved = false;
#pragma unroll
      for (int sl = 0; sl < S; ++sl) moved |= al[sl] != 1.0f;
      if (ballot(moved)) {
#pragma unroll
        for (int dc = 0; dc < DC; ++dc)
#pragma unroll
          for (int e = 0; e < M::kNS; ++e) o[dc].v[e] *= al[M::slot(e)];
      }
#pragma unroll
      for (int j = 0; j < KC; ++j) {
        const typename M::P p = M::pack(s[j], lane);
#pragma unroll
        for (int dc = 0; dc < DC; ++dc) M::pv(o[dc], p, sv + 16 * j * PITCH + dc * 16, PITCH, lane);
      }
    }
    float inv[S];
#pragma unroll
    for (int sl = 0; sl < S; ++sl) {
      float L = M::reduce(l[sl], SumOp{});
      float f = 1.0f;
      if (a.sink_kind != MLXA_SDPA_SINK_NONE) {
        const float sk_ = sink_logit<T>(a.sink_kind, a.sinks, h * a.sink_stride);
        const float mn = fmaxf(m[sl], sk_);
        f = rescale(m[sl], mn);
        L = L * f + rescale(sk_, mn);
      }
      inv[sl] = f / L;   // a row of -inf logits: L = 0 -> NaN, as MLX's softmax gives
    }
    T* const obase = (T*)a.out + ((int64_t)b * a.Hq + h) * a.Lq * D;
#pragma unroll
    for (int dc = 0; dc < DC; ++dc)
#pragma unroll
      for (int e = 0; e < M::kNS; ++e) {
        const int sl = M::slot(e);
        if (lrow[sl] < a.Lq) obase[(int64_t)lrow[sl] * D + dc * 16 + M::col(e, lane)] = cast<T>(o[dc].v[e] * inv[sl]);
      }
  }
}

// ---- decode on the matrix unit (mlxa/mma.h) ----------------------------------------------------
// The decode contract and split-K (partials, last-block combine) with S = Q K^T and O += P V on
// the matrix unit: the query rows of one kv head (its GQA group's heads x Lq, up to 16: a row
// chunk) form one 16-row tile whose operands every wave holds; each wave takes 16 keys of a
// stage of kDecodeMmaWaves * 16, staged through shared memory in two stages (asynchronous
// copies on NVIDIA). The FMA kernel spent ~140 instructions a lane per key on the products,
// shuffles and conversions and was bound by issue at a quarter occupancy (sdpa_decode_ring-
// h100.txt); here 16 keys cost two matrix products per 16 head-dim columns for Q K^T and as
// many for P V. Rows past the chunk's are zero queries whose results are dropped. The waves'
// states combine through shared memory.
constexpr int kDecodeMmaWaves = 2;

template <typename T, int D>
MLXA_DEVICE void decode_mma(const SdpaDecodeArgs& a) {
  using M = mma::Tiles<T>;
  if constexpr (!M::kAvailable) {
    trap();   // the launcher takes this kernel only where the target has the unit
  } else {
    constexpr int NW = kDecodeMmaWaves, W = M::kWave, NT = NW * W, BK = 16 * NW;
    constexpr int VE = 16 / (int)sizeof(T);
    constexpr int PITCH = D + VE;
    constexpr int DC = D / 16, S = M::kSlots;
    constexpr int STAGE = 2 * BK * PITCH;                  // K then V of one stage
    constexpr int ELEMS = 2 * STAGE;                       // two stages; also Q and the combine
    constexpr int OFF_L = NW * 16 * D, OFF_M = OFF_L + NW * 16;   // combine: floats
    static_assert(D % 16 == 0, "tiles are 16 x 16");
    static_assert(16 * PITCH <= ELEMS && (OFF_M + NW * 16) * 4 <= ELEMS * (int)sizeof(T),
                  "Q and the waves' combine fit in the stages' shared memory");
    __shared__ Vec<T, VE> smem_v[ELEMS / VE];
    __shared__ unsigned int sm_last;
    T* const sm = (T*)smem_v;
    float* const smf = (float*)smem_v;

    if ((int)blockDim.x != NT) trap();     // the launcher's block: NW waves
    const int tid = (int)threadIdx.x, wave = tid / W, lane = tid % W;
    const int G = a.Hq / a.Hkv, n_rows = G * a.Lq;
    const int chunks = (n_rows + 15) / 16;
    const int split = (int)blockIdx.x / chunks, row0 = ((int)blockIdx.x % chunks) * 16;
    const int kvh = (int)blockIdx.y, b = (int)blockIdx.z;
    const int rows_here = n_rows - row0 < 16 ? n_rows - row0 : 16;
    const T* kbase = (const T*)a.k + b * a.k_strides[0] + kvh * a.k_strides[1];
    const T* vbase = (const T*)a.v + b * a.v_strides[0] + kvh * a.v_strides[1];
    constexpr int64_t kVecMask = VE - 1;
    const bool kv_al = (((uintptr_t)kbase | (uintptr_t)vbase) & 15u) == 0 &&
                       ((a.k_strides[2] | a.v_strides[2]) & kVecMask) == 0;
    const int k0 = split * a.keys_per_split;
    const int k1 = k0 + a.keys_per_split < a.Lk ? k0 + a.keys_per_split : a.Lk;
    const int n_tiles = (k1 - k0 + BK - 1) / BK;

    // the chunk's query rows (row r: head kvh * G + r / Lq, position r % Lq), zeros past them;
    // 16-byte loads where q's rows are unit-stride 16-byte vectors (mlx-lm's q is transposed)
    const int64_t qs3 = a.q_strides[3];
    const bool q_vec = qs3 == 1 && ((uintptr_t)a.q & 15u) == 0 &&
                       ((a.q_strides[0] | a.q_strides[1] | a.q_strides[2]) & kVecMask) == 0;
    for (int i = tid; i < 16 * (D / VE); i += NT) {
      const int r = i / (D / VE), e = (i % (D / VE)) * VE, idx = row0 + r;
      Vec<T, VE> x;
      if (r < rows_here) {
        const int h = kvh * G + idx / a.Lq, l = idx % a.Lq;
        const T* src = (const T*)a.q + b * a.q_strides[0] + h * a.q_strides[1] + l * a.q_strides[2];
        if (q_vec) {
          x = *(const Vec<T, VE>*)(src + e);
        } else {
#pragma unroll
          for (int j = 0; j < VE; ++j) x.v[j] = src[(e + j) * qs3];
        }
      } else {
#pragma unroll
        for (int j = 0; j < VE; ++j) x.v[j] = cast<T>(0.0f);
      }
      *(Vec<T, VE>*)(sm + r * PITCH + e) = x;
    }
    sync_block();
    typename M::Q qf[DC];
#pragma unroll
    for (int dc = 0; dc < DC; ++dc) M::load_q(qf[dc], sm + dc * 16, PITCH, lane);

    int limit[S];
    int64_t mrow[S];
    float m[S], l[S];
#pragma unroll
    for (int sl = 0; sl < S; ++sl) {
      const int r = M::query(sl, lane), idx = row0 + (r < rows_here ? r : 0);
      const int h = kvh * G + idx / a.Lq, lq = idx % a.Lq;
      limit[sl] = a.causal ? lq + a.Lk - a.Lq : a.Lk;
      mrow[sl] = b * a.mask_strides[0] + h * a.mask_strides[1] + lq * a.mask_strides[2];
      m[sl] = neg_inf();
      l[sl] = 0.0f;
    }
    // a causal limit no row is below (position 0's): stages within it need no per-key checks
    const int min_limit = a.causal ? a.Lk - a.Lq : a.Lk;

    typename M::Acc o[DC];
#pragma unroll
    for (int dc = 0; dc < DC; ++dc)
#pragma unroll
      for (int e = 0; e < M::kNS; ++e) o[dc].v[e] = 0.0f;

    auto issue = [&](int t) {
      T* st = sm + (t & 1) * STAGE;
      const int ks = k0 + t * BK;
      const int valid = k1 - ks < BK ? k1 - ks : BK;
      tile_issue<T, BK, D, PITCH, NT>(st, kbase + ks * a.k_strides[2], a.k_strides[2], valid, kv_al);
      tile_issue<T, BK, D, PITCH, NT>(st + BK * PITCH, vbase + ks * a.v_strides[2], a.v_strides[2], valid, kv_al);
      copy_async_commit();
    };
    sync_block();   // every wave holds its Q operands: the shared memory becomes the stages
    if (n_tiles > 0) issue(0);
    for (int t = 0; t < n_tiles; ++t) {
      const int kw = k0 + t * BK + 16 * wave;      // this wave's first key
      if (t + 1 < n_tiles) {
        issue(t + 1);
        copy_async_wait<1>();
      } else {
        copy_async_wait<0>();
      }
      sync_block();
      const T* sk = sm + (t & 1) * STAGE + 16 * wave * PITCH;
      const T* sv = sk + BK * PITCH;
      typename M::Acc s;
#pragma unroll
      for (int e = 0; e < M::kNS; ++e) s.v[e] = 0.0f;
#pragma unroll
      for (int dc = 0; dc < DC; ++dc) M::qk(s, qf[dc], sk + dc * 16, PITCH, lane);

      float tmax[S], al[S];
#pragma unroll
      for (int sl = 0; sl < S; ++sl) tmax[sl] = neg_inf();
      const bool plain = a.mask_kind == MLXA_SDPA_MASK_NONE && kw + 16 <= k1 && kw + 15 <= min_limit;
#pragma unroll
      for (int e = 0; e < M::kNS; ++e) {
        const int sl = M::slot(e);
        float x = s.v[e] * a.scale_log2;
        if (!plain) {
          const int key = kw + M::col(e, lane);
          if (key >= k1) {
            x = neg_inf();
          } else {
            x = masked_logit<T>(x, a.mask_kind, a.mask, mrow[sl] + key * a.mask_strides[3]);
            if (key > limit[sl]) x = kMaskedLogit;
          }
        }
        s.v[e] = x;
        tmax[sl] = fmaxf(tmax[sl], x);
      }
#pragma unroll
      for (int sl = 0; sl < S; ++sl) {
        const float mn = fmaxf(m[sl], M::reduce(tmax[sl], MaxOp{}));
        al[sl] = rescale(m[sl], mn);
        m[sl] = mn;
        l[sl] *= al[sl];
      }
#pragma unroll
      for (int e = 0; e < M::kNS; ++e) {
        const int sl = M::slot(e);
        const float p = s.v[e] == neg_inf() ? 0.0f : exp2f(s.v[e] - m[sl]);
        s.v[e] = p;
        l[sl] += p;
      }
      // the running maxima rarely move after the first tiles: O's rescale only when one did
      bool moved = false;
#pragma unroll
      for (int sl = 0; sl < S; ++sl) moved |= al[sl] != 1.0f;
      if (ballot(moved)) {
#pragma unroll
        for (int dc = 0; dc < DC; ++dc)
#pragma unroll
          for (int e = 0; e < M::kNS; ++e) o[dc].v[e] *= al[M::slot(e)];
      }
      const typename M::P pp = M::pack(s, lane);
#pragma unroll
      for (int dc = 0; dc < DC; ++dc) M::pv(o[dc], pp, sv + dc * 16, PITCH, lane);
      sync_block();   // this stage's readers are done before stage t + 2 lands in it
    }

    // the waves' (max, sum, O) through shared memory (the stages are free: the loop's last
    // barrier, or the one after Q when there were no keys)
    float L[S];
#pragma unroll
    for (int sl = 0; sl < S; ++sl) L[sl] = M::reduce(l[sl], SumOp{});
#pragma unroll
    for (int dc = 0; dc < DC; ++dc)
#pragma unroll
      for (int e = 0; e < M::kNS; ++e) {
        const int sl = M::slot(e), r = M::query(sl, lane);
        smf[(wave * 16 + r) * D + dc * 16 + M::col(e, lane)] = o[dc].v[e];
        if (dc == 0 && e == 0) {
#pragma unroll
          for (int s2 = 0; s2 < S; ++s2) {
            const int r2 = M::query(s2, lane);
            smf[OFF_M + wave * 16 + r2] = m[s2];
            smf[OFF_L + wave * 16 + r2] = L[s2];
          }
        }
      }
    sync_block();
    auto out_row = [&](int r) {
      const int idx = row0 + r;
      const int g = idx / a.Lq, lq = idx % a.Lq;
      return ((int64_t)b * a.Hq + kvh * G + g) * a.Lq + lq;
    };
    for (int t = tid; t < rows_here * D; t += NT) {
      const int r = t / D, e = t % D;
      float Mx = neg_inf();
#pragma unroll
      for (int w = 0; w < NW; ++w) Mx = fmaxf(Mx, smf[OFF_M + w * 16 + r]);
      float Lx = 0.0f, ox = 0.0f;
#pragma unroll
      for (int w = 0; w < NW; ++w) {
        const float f = rescale(smf[OFF_M + w * 16 + r], Mx);
        Lx = fmaf(smf[OFF_L + w * 16 + r], f, Lx);
        ox = fmaf(smf[(w * 16 + r) * D + e], f, ox);
      }
      decode_emit<T, D>(a, split, out_row(r), e, Mx, Lx, ox);
    }
    if (a.n_splits == 1) return;
    sync_block();   // the combine reuses the shared memory read above
    combine_splits<T, D, NT, 8>(a, rows_here, out_row,
                             a.counters + ((int64_t)b * a.Hkv + kvh) * chunks + (int)blockIdx.x % chunks,
                             smf, &sm_last);
  }
}

template <typename T>
MLXA_DEVICE float row_logit(const SdpaRowsArgs& a, const T* s, int j, int64_t moff, int limit) {
  if (j > limit) return kMaskedLogit;
  const float x = (float)widen(s[j]) * kLog2e;
  return masked_logit<T>(x, a.mask_kind, a.mask, moff + j * a.mask_strides[3]);
}

template <typename T, int W>
MLXA_DEVICE void rows(const SdpaRowsArgs& a) {
  __shared__ float scratch[32];
  const int64_t r = (int64_t)blockIdx.x;
  const int g = (int)(r % a.G);
  const int64_t t = r / a.G;
  const int li = (int)(t % a.c);
  const int64_t bh = t / a.c;
  const int kvh = (int)(bh % a.Hkv);
  const int64_t b = bh / a.Hkv;
  const int l = a.l0 + li, h = kvh * a.G + g;
  T* s = (T*)a.s + r * a.ld;
  const int64_t moff = b * a.mask_strides[0] + h * a.mask_strides[1] + l * a.mask_strides[2];
  const int limit = a.causal ? l + a.Lk - a.Lq : a.n;
  const int n = a.n;
  float m = neg_inf(), sum = 0.0f;
  for (int j = (int)threadIdx.x; j < n; j += (int)blockDim.x) {
    const float x = row_logit<T>(a, s, j, moff, limit);
    const float mn = fmaxf(m, x);
    sum = sum * rescale(m, mn) + (x == neg_inf() ? 0.0f : exp2f(x - mn));
    m = mn;
  }
  float M = block_reduce<W>(m, MaxOp{}, scratch);
  if (a.sink_kind != MLXA_SDPA_SINK_NONE) {
    const float sk = sink_logit<T>(a.sink_kind, a.sinks, h * a.sink_stride);
    const float mn = fmaxf(M, sk);
    float S = block_reduce<W>(sum * rescale(m, mn), SumOp{}, scratch);
    S += rescale(sk, mn);
    M = mn;
    const float inv = 1.0f / S;
    for (int j = (int)threadIdx.x; j < n; j += (int)blockDim.x) {
      const float x = row_logit<T>(a, s, j, moff, limit);
      s[j] = cast<T>((x == neg_inf() ? 0.0f : exp2f(x - M)) * inv);
    }
    return;
  }
  const float S = block_reduce<W>(sum * rescale(m, M), SumOp{}, scratch);
  const float inv = 1.0f / S;
  for (int j = (int)threadIdx.x; j < n; j += (int)blockDim.x) {
    const float x = row_logit<T>(a, s, j, moff, limit);
    // a row of -inf: M = -inf, S = 0 -> NaN, as MLX's softmax gives
    s[j] = cast<T>(exp2f(x - M) * inv);
  }
}

// Element (row (bh, li, g), d) of the chunk goes to out row (bh*G + g)*Lq + l0 + li.
template <typename U>
MLXA_DEVICE void scatter(const SdpaScatterArgs& a) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.total; i += stride) {
    const int d = (int)(i % a.Dv);
    const int64_t rr = i / a.Dv;
    const int g = (int)(rr % a.G);
    const int64_t t = rr / a.G;
    const int li = (int)(t % a.c);
    const int64_t bh = t / a.c;
    const int64_t orow = (bh * a.G + g) * a.Lq + a.l0 + li;
    ((U*)a.dst)[orow * a.Dv + d] = ((const U*)a.src)[i];
  }
}

}  // namespace mlxa::sdpa

// (two blocks a multiprocessor on NVIDIA, DECODE_BLOCKS_PER_CU: the split combine's loads in
// flight would otherwise take the kernel past 128 registers)
#define MLXA_SDPA_DECODE(name, T, D, R)                                                   \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS_MIN(256, 2) name(SdpaDecodeArgs a) {                \
    mlxa::sdpa::decode<T, D, R>(a);                                                        \
  }
#define MLXA_SDPA_DECODE_MMA(name, T, D)                                                 \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(128) name(SdpaDecodeArgs a) {                        \
    mlxa::sdpa::decode_mma<T, D>(a);                                                       \
  }
#define MLXA_SDPA_FLASH(name, T, D, RQ, KQ)                                              \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(256) name(SdpaFlashArgs a) {                        \
    mlxa::sdpa::flash<T, D, RQ, KQ>(a);                                                    \
  }
// NVIDIA: four warps, three blocks a multiprocessor (registers capped at 168: at two blocks the
// eight warps left the schedulers idle 62 % of the time, ncu); AMD: up to four CDNA waves.
#if MLXA_PLATFORM_NVIDIA
#define MLXA_SDPA_FLASH_MMA_BOUNDS MLXA_LAUNCH_BOUNDS_MIN(128, 3)
#else
#define MLXA_SDPA_FLASH_MMA_BOUNDS MLXA_LAUNCH_BOUNDS(256)
#endif
#define MLXA_SDPA_FLASH_MMA(name, T, D)                                                 \
  MLXA_GLOBAL void MLXA_SDPA_FLASH_MMA_BOUNDS name(SdpaFlashArgs a) {                     \
    mlxa::sdpa::flash_mma<T, D>(a);                                                        \
  }
#define MLXA_SDPA_ROWS(name, T, W)                                                        \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(512) name(SdpaRowsArgs a) {                          \
    MLXA_WAVE_KERNEL_BODY(W, (mlxa::sdpa::rows<T, W>(a)))                                  \
  }
#define MLXA_SDPA_SCATTER(name, U)                                                        \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(256) name(SdpaScatterArgs a) { mlxa::sdpa::scatter<U>(a); }

#include "sdpa.inc"
