// Scan family: MLX's Scan primitive (cumsum, cumprod, cummax, cummin, logcumsumexp),
// inclusive or exclusive, forward or reverse, along any axis.
//
// Each op combines States (a wrapped value, room for ops that need more) with an ordered, associative
// combine and a true identity, so any grouping reproduces MLX's sequential CPU loop:
// NaN propagates from its position on for max, min, sum, prod and logaddexp; logaddexp
// is MLX's formula (max + log1p(exp(min - max)), infinities passed through) with MLX's
// CPU exp.
// Integers wrap (sums and products accumulate in 32/64-bit unsigned and truncate);
// float16/bfloat16 accumulate in float (MLX 0.32.4's CPU accumulates in the 16-bit type
// and stalls on long scans, e.g. a float16 cumsum of ones at 2048; see ops/scan.py).
//
// Row kernel: rows along the output's innermost axis; a wave per row (short rows) or a
// block per row chunk. A tile gives each wave K x W consecutive 16-byte groups (group k
// of lane l at k*W + l, so each load instruction is coalesced); a thread scans its V
// elements per group, the wave scans group totals with shuffles (a running wave carry
// over k), the block combines wave totals in shared memory once per tile, and a carry
// runs across tiles. K groups in flight per thread and one block barrier per K groups
// (wave totals double-buffered): with one group per tile the kernel waited on each load
// and each barrier. Direction and wave/block rows are template arguments, a tile's
// addresses a lane pointer plus constant offsets and its bound a 32-bit count: as runtime
// flags and 64-bit positions they cost registers (64 a thread with spills on sm_90). Long
// rows with few rows split into chunks of one tile, scanned in a single pass: each block
// takes the next chunk (an atomic ticket), publishes its total and looks back over the
// row's earlier chunks for its prefix (decoupled look-back; a launch before it clears the
// status; 4-byte states publish flag and value as one 64-bit word). Reading each element
// once and writing it once, where the two-pass variant (chunk totals, then each chunk
// after folding the totals before it) read it twice.
// Column kernel: one thread per position of the other axes walks the scan axis
// (coalesced along the output's inner dimensions).
#include <limits>

#include "mlxa/platform.h"
#include "mlxa/types.h"
#include "mlxa/wave.h"
#include "mlxa/scan_args.h"

namespace mlxa::scan {

template <typename A>
struct State {
  A v;
};

template <typename A> MLXA_DEVICE A neg_inf() { return (A)uint_as_float(0xff800000u); }
template <typename A> MLXA_DEVICE A pos_inf() { return (A)uint_as_float(0x7f800000u); }

// MLX's CPU exp (see softmax.hip): float polynomial, product not fused into the adds.
MLXA_DEVICE float mlx_exp(float x) {
  if (x != x) return x;
  if (x > 88.0f) return pos_inf<float>();
  if (x < -88.0f) return 0.0f;
  const float y = __fmaf_rn(x, 1.442695f, 0.0f);
  const float ip = floorf(y + 0.5f);
  const float f = y - ip;
  float p = 1.535336188319500e-4f;
  p = __fmaf_rn(p, f, 1.339887440266574e-3f);
  p = __fmaf_rn(p, f, 9.618437357674640e-3f);
  p = __fmaf_rn(p, f, 5.550332471162809e-2f);
  p = __fmaf_rn(p, f, 2.402264791363012e-1f);
  p = __fmaf_rn(p, f, 6.931472028550421e-1f);
  p = __fmaf_rn(p, f, 1.0f);
  const int e = ((int)ip + 127) << 23;
  return uint_as_float((unsigned)e) * p;
}
MLXA_DEVICE float log1p_acc(float x) { return log1pf(x); }
MLXA_DEVICE double log1p_acc(double x) { return log1p(x); }

// ---- ops: T is the stored dtype (for integer limits), A the accumulator --------------
template <typename T, typename A>
struct Sum {
  using Acc = A;
  static MLXA_DEVICE State<A> identity() { return {A(0)}; }
  static MLXA_DEVICE State<A> make(A x) { return {x}; }
  static MLXA_DEVICE State<A> combine(State<A> a, State<A> b) { return {a.v + b.v}; }
};
template <typename T, typename A>
struct Prod {
  using Acc = A;
  static MLXA_DEVICE State<A> identity() { return {A(1)}; }
  static MLXA_DEVICE State<A> make(A x) { return {x}; }
  static MLXA_DEVICE State<A> combine(State<A> a, State<A> b) { return {a.v * b.v}; }
};
template <typename T, typename A>
struct IMax {
  using Acc = A;
  static MLXA_DEVICE State<A> identity() { return {(A)std::numeric_limits<T>::min()}; }
  static MLXA_DEVICE State<A> make(A x) { return {x}; }
  static MLXA_DEVICE State<A> combine(State<A> a, State<A> b) { return {b.v < a.v ? a.v : b.v}; }
};
template <typename T, typename A>
struct IMin {
  using Acc = A;
  static MLXA_DEVICE State<A> identity() { return {(A)std::numeric_limits<T>::max()}; }
  static MLXA_DEVICE State<A> make(A x) { return {x}; }
  static MLXA_DEVICE State<A> combine(State<A> a, State<A> b) { return {b.v < a.v ? b.v : a.v}; }
};
// NaN sticks from its position on (MLX's running max/min propagate it); ties keep the
// later element for max and the earlier for min, as MLX's comparisons do.
// Max/min select values, not States: a nested ?: over State lvalues is a select of their
// addresses, which SROA cannot split, so a, b and the result went to scratch.
template <typename T, typename A>
struct FMax {
  using Acc = A;
  static MLXA_DEVICE State<A> identity() { return {neg_inf<A>()}; }
  static MLXA_DEVICE State<A> make(A x) { return {x}; }
  static MLXA_DEVICE State<A> combine(State<A> a, State<A> b) {
    const A x = a.v, y = b.v;
    return {x != x ? x : (y != y ? y : (y < x ? x : y))};
  }
};
template <typename T, typename A>
struct FMin {
  using Acc = A;
  static MLXA_DEVICE State<A> identity() { return {pos_inf<A>()}; }
  static MLXA_DEVICE State<A> make(A x) { return {x}; }
  static MLXA_DEVICE State<A> combine(State<A> a, State<A> b) {
    const A x = a.v, y = b.v;
    return {x != x ? x : (y != y ? y : (y < x ? y : x))};
  }
};
template <typename T, typename A>
struct LogAddExp {
  using Acc = A;
  static MLXA_DEVICE State<A> identity() { return {neg_inf<A>()}; }
  static MLXA_DEVICE State<A> make(A x) { return {x}; }
  static MLXA_DEVICE State<A> combine(State<A> a, State<A> b) {
    const A x = a.v, y = b.v;
    const A hi = x != x ? x : (x > y ? x : y);
    const A lo = x != x ? x : (x < y ? x : y);
    if (lo == neg_inf<A>() || hi == pos_inf<A>()) return {hi};
    return {hi + log1p_acc((A)mlx_exp((float)(lo - hi)))};
  }
};

// ---- helpers -------------------------------------------------------------------------
// Element offset of row r of the input (r decomposed over shape/strides, innermost first).
// The outermost dim needs no remainder (r is below the product of the shape), so dense rows,
// collapsed to one dim, cost a multiply; divisions are 32-bit where r fits.
template <typename I>
MLXA_DEVICE int64_t offset_in(const ScanArgs& a, I r) {
  int64_t off = 0;
#pragma unroll
  for (int d = 0; d < MLXA_SCAN_MAX_DIMS - 1; ++d) {
    if (d < a.ndim - 1) {
      const I s = (I)a.shape[d];
      off += (int64_t)(r % s) * a.strides[d];
      r /= s;
    }
  }
  return a.ndim > 0 ? off + (int64_t)r * a.strides[a.ndim - 1] : 0;
}
MLXA_DEVICE int64_t offset_of(const ScanArgs& a, int64_t r) {
  if ((uint64_t)r >> 32 == 0u) return offset_in<uint32_t>(a, (uint32_t)r);
  return offset_in<int64_t>(a, r);
}

// Inclusive scan over the lanes of a wave, lane order.
template <typename Op, int W, typename S>
MLXA_DEVICE S wave_scan(S s) {
  const int l = wave_lane<W>();
#pragma unroll
  for (int d = 1; d < W; d <<= 1) {
    S u;
    u.v = wave_shfl_up<W>(s.v, d);
    if (l >= d) s = Op::combine(u, s);
  }
  return s;
}

// Exclusive prefix of v over the threads of a row group (a wave, or the whole block),
// and the group's total. Block groups synchronise twice; every thread must call.
template <typename Op, int W, typename S>
MLXA_DEVICE S group_exclusive(S v, bool wave_rows, S* wtot, S& total) {
  const S inc = wave_scan<Op, W>(v);
  S exc;
  exc.v = wave_shfl_up<W>(inc.v, 1);
  if (wave_lane<W>() == 0) exc = Op::identity();
  if (wave_rows) {
    total.v = wave_shfl<W>(inc.v, W - 1);
    return exc;
  }
  const int wi = wave_index<W>(), nw = waves_per_block<W>();
  if (wave_lane<W>() == W - 1) wtot[wi] = inc;
  sync_block();
  S before = Op::identity();
  for (int i = 0; i < wi; ++i) before = Op::combine(before, wtot[i]);
  S all = before;
  for (int i = wi; i < nw; ++i) all = Op::combine(all, wtot[i]);
  sync_block();
  total = all;
  return Op::combine(before, exc);
}

// ---- decoupled look-back ----------------------------------------------------------------
// Look-back status of the row chunks: flag 0 nothing yet, 1 aggregate (the chunk's own
// total) published, 2 inclusive prefix (everything up to and including the chunk). Two
// layouts with one interface: publish(slot, value, flag) and wait(slot, &flag) -> value.
// Flags, then an aggregate and an inclusive slot per chunk, for any state:
template <typename Op, typename S>
struct Status {
  uint32_t* flag;
  S* agg;
  S* inc;
  MLXA_DEVICE Status(void* base, int64_t count) {
    char* b = static_cast<char*>(base);
    static_assert(sizeof(S) <= MLXA_SCAN_STATE_BYTES, "scan: a state outgrew its slot");
    flag = reinterpret_cast<uint32_t*>(b + MLXA_SCAN_STATUS_HEAD);
    agg = reinterpret_cast<S*>(b + MLXA_SCAN_STATUS_HEAD + ((count * 4 + 15) & ~int64_t(15)));
    inc = reinterpret_cast<S*>(reinterpret_cast<char*>(agg) + count * MLXA_SCAN_STATE_BYTES);
  }
  MLXA_DEVICE void publish(int64_t slot, S v, uint32_t f) const {
    (f == 2u ? inc : agg)[slot] = v;
    __threadfence();                // the value before the flag that announces it (device scope)
    atomic_exch(&flag[slot], f);
  }
  MLXA_DEVICE S wait(int64_t slot, uint32_t* f) const {
    const volatile uint32_t* fp = &flag[slot];
    do {
      *f = *fp;
    } while (*f == 0u);
    __threadfence();                // the flag before the value it announces
    const S* src = *f == 2u ? &inc[slot] : &agg[slot];
    S v = Op::identity();
    v.v = *reinterpret_cast<const volatile typename Op::Acc*>(&src->v);
    return v;
  }
};

// States of 4 bytes (float, 32-bit integer sums and limits): flag and value as one 64-bit
// word (flag << 32 | value bits) at HEAD + 8 * slot: one store, one load, no fences
// between them, and a reader never sees a flag without its value.
template <typename Op, typename S>
struct PackedStatus {
  static constexpr bool fits = sizeof(S) == 4;
  unsigned long long* word;
  MLXA_DEVICE explicit PackedStatus(void* base)
      : word(reinterpret_cast<unsigned long long*>(static_cast<char*>(base) + MLXA_SCAN_STATUS_HEAD)) {}
  MLXA_DEVICE void publish(int64_t slot, S v, uint32_t f) const {
    uint32_t bits;
    __builtin_memcpy(&bits, &v, 4);
    atomic_exch(&word[slot], (unsigned long long)f << 32 | bits);
  }
  MLXA_DEVICE S wait(int64_t slot, uint32_t* f) const {
    const volatile unsigned long long* wp = &word[slot];
    unsigned long long w;
    do {
      w = *wp;
    } while ((w >> 32) == 0u);
    *f = (uint32_t)(w >> 32);
    const uint32_t bits = (uint32_t)w;
    S v;
    __builtin_memcpy(&v, &bits, 4);
    return v;
  }
};

// Exclusive prefix of chunk `c` of its row (slot: its status index), given its total:
// the first wave publishes the total, then walks back over the row's earlier chunks a
// wave at a time (lane order = position order), waiting for each to publish, combining
// aggregates back to the nearest inclusive prefix. Every thread gets the result.
template <typename Op, int W, typename S, typename St>
MLXA_DEVICE S lookback_prefix(const St& st, int slot, int c, S total, S* bcast) {
  if (wave_index<W>() == 0) {
    const int l = wave_lane<W>();
    S excl = Op::identity();
    if (c == 0) {
      if (l == 0) st.publish(slot, total, 2u);
    } else {
      if (l == 0) st.publish(slot, total, 1u);
      for (int last = c - 1;; last -= W) {
        const int p = last - (W - 1) + l;         // lane W-1: the nearest chunk
        uint32_t f = 2u;                          // before the row: identity, complete
        S v = Op::identity();
        if (p >= 0) v = st.wait(slot - c + p, &f);
        const unsigned long long m = wave_ballot<W>(f == 2u);
        const int stop = m ? 63 - __clzll(m) : -1;   // the nearest complete one
        if (l < stop) v = Op::identity();         // inside that prefix already
        const S in_order = wave_scan<Op, W>(v);
        S window;
        window.v = wave_shfl<W>(in_order.v, W - 1);
        excl = Op::combine(window, excl);
        if (m != 0ull) break;
      }
      if (l == 0) st.publish(slot, Op::combine(excl, total), 2u);
    }
    if (l == 0) *bcast = excl;
  }
  sync_block();
  return *bcast;
}

// ---- row kernel ------------------------------------------------------------------------
// One tile of a row, from one lane's view: its K groups of V elements at logical
// positions w0 + k*W*V + j (j < V), w0 = the tile's start + its wave's part + lane * V
// (so each load instruction of the wave is coalesced). Rev (a template argument, so the
// index arithmetic and the order of a group's elements are fixed at compile time) reads
// and writes the row from its end. Addresses are a lane pointer and small offsets, the
// bound a 32-bit count of the positions left from w0: the 64-bit row arithmetic is done
// once a tile, and none of it stays live across the look-back wait.
template <typename Op, typename In, typename Out, int W, bool Rev>
struct TileIO {
  static constexpr int V = 16 / (sizeof(In) > sizeof(Out) ? sizeof(In) : sizeof(Out));
  static constexpr int K = MLXA_SCAN_ROW_GROUPS(V);
  static constexpr int WG = W * K * V;   // elements of one wave's part of a tile
  using S = State<typename Op::Acc>;
  const In* src;   // element w0 (physical)
  Out* dst;
  int64_t es;
  int rem;         // positions left from w0, clamped to [0, WG]
  bool whole;      // all K groups of every lane of the wave inside the row, dense and aligned
  bool dense;      // unit stride, 16-byte groups aligned in input and output
  MLXA_DEVICE TileIO(const In* in, Out* out, int64_t n, int64_t es_, bool dense_, int64_t w0, int64_t hi,
                     int lane)
      : es(es_), dense(dense_) {
    const int64_t q = Rev ? n - 1 - w0 : w0;
    src = in + q * es;
    dst = out + q;
    const int64_t r = hi - w0;
    rem = r < 0 ? 0 : (r > WG ? WG : (int)r);
    whole = dense && r + lane * V >= WG;   // the wave's first lane: its whole part
  }
  // group k's lowest physical element, relative to the lane pointer (dense rows)
  static constexpr int group_at(int k) { return Rev ? -(k * W * V + V - 1) : k * W * V; }
  template <typename T> static MLXA_DEVICE T in_order(const Vec<T, V>& g, int j) { return g.v[Rev ? V - 1 - j : j]; }

  MLXA_DEVICE void load(S (&loc)[K][V]) const {
    using A = typename Op::Acc;
    if (whole) {   // every load issued before any is used
      Vec<In, V> g[K];
#pragma unroll
      for (int k = 0; k < K; ++k) g[k] = *(const Vec<In, V>*)(src + group_at(k));
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int j = 0; j < V; ++j) loc[k][j] = Op::make((A)widen(in_order(g[k], j)));
      return;
    }
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int d0 = k * W * V;
      if (dense && d0 + V <= rem) {
        const Vec<In, V> g = *(const Vec<In, V>*)(src + group_at(k));
#pragma unroll
        for (int j = 0; j < V; ++j) loc[k][j] = Op::make((A)widen(in_order(g, j)));
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j)
          loc[k][j] = d0 + j < rem ? Op::make((A)widen(src[(Rev ? -(int64_t)(d0 + j) : d0 + j) * es]))
                                   : Op::identity();
      }
    }
  }
  MLXA_DEVICE void store(int k, const Out (&o)[V]) const {
    const int d0 = k * W * V;
    if (whole || (dense && d0 + V <= rem)) {
      Vec<Out, V> g;
#pragma unroll
      for (int j = 0; j < V; ++j) g.v[Rev ? V - 1 - j : j] = o[j];
      *(Vec<Out, V>*)(dst + group_at(k)) = g;
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (d0 + j < rem) dst[Rev ? -(d0 + j) : d0 + j] = o[j];
    }
  }
};

// Scans one tile: each group's elements, the group totals across the wave (a running
// wave carry over k), the wave totals across the block through shared memory (wtot,
// 16 slots, one barrier; callers alternate two buffers so the next tile's writes need no
// second barrier). Leaves in loc each element's prefix within the tile (inclusive, or
// exclusive: the identity for the tile's first element) and returns the tile's total.
template <typename Op, int W, bool WaveRows, int K, int V, typename S>
MLXA_DEVICE S scan_tile(S (&loc)[K][V], bool inclusive, S* wt) {
  const int wl = wave_lane<W>();
  S pre[K];
  S wcarry = Op::identity();
#pragma unroll
  for (int k = 0; k < K; ++k) {
#pragma unroll
    for (int j = 1; j < V; ++j) loc[k][j] = Op::combine(loc[k][j - 1], loc[k][j]);
    const S inc = wave_scan<Op, W>(loc[k][V - 1]);
    S exc, tot;
    exc.v = wave_shfl_up<W>(inc.v, 1);
    if (wl == 0) exc = Op::identity();
    tot.v = wave_shfl<W>(inc.v, W - 1);
    pre[k] = Op::combine(wcarry, exc);
    wcarry = Op::combine(wcarry, tot);
  }
  S before = Op::identity(), total = wcarry;
  if constexpr (!WaveRows) {
    const int wi = wave_index<W>(), nw = waves_per_block<W>();
    if (wl == W - 1) wt[wi] = wcarry;
    sync_block();
    for (int i = 0; i < wi; ++i) before = Op::combine(before, wt[i]);
    total = before;
    for (int i = wi; i < nw; ++i) total = Op::combine(total, wt[i]);
  }
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const S b = Op::combine(before, pre[k]);
    if (inclusive) {
#pragma unroll
      for (int j = 0; j < V; ++j) loc[k][j] = Op::combine(b, loc[k][j]);
    } else {
#pragma unroll
      for (int j = V - 1; j > 0; --j) loc[k][j] = Op::combine(b, loc[k][j - 1]);
      loc[k][0] = b;
    }
  }
  return total;
}

// Writes a tile's elements, each combined after `carry` (skipped when carry is the
// identity: the row's first tile without look-back).
template <typename Op, typename In, typename Out, int W, bool Rev, int K, int V, typename S>
MLXA_DEVICE void write_tile(const TileIO<Op, In, Out, W, Rev>& io, const S (&loc)[K][V], S carry, bool first) {
#pragma unroll
  for (int k = 0; k < K; ++k) {
    Out o[V];
#pragma unroll
    for (int j = 0; j < V; ++j) o[j] = cast<Out>((first ? loc[k][j] : Op::combine(carry, loc[k][j])).v);
    io.store(k, o);
  }
}

// Tiles of one row's positions [lo, hi) in order, by a wave (WaveRows) or the block, with
// a running carry (`first`: none yet); returns it.
template <typename Op, typename In, typename Out, int W, bool Rev, bool WaveRows>
MLXA_DEVICE State<typename Op::Acc> row_tiles(const ScanArgs& a, const In* in, Out* out, int64_t lo, int64_t hi,
                                              State<typename Op::Acc> carry, bool first, bool dense,
                                              State<typename Op::Acc>* wtot) {
  using S = State<typename Op::Acc>;
  using IO = TileIO<Op, In, Out, W, Rev>;
  S loc[IO::K][IO::V];
  const bool inclusive = (a.flags & MLXA_SCAN_INCLUSIVE) != 0;
  const int wl = wave_lane<W>(), wi = WaveRows ? 0 : wave_index<W>();
  const int nw = WaveRows ? 1 : waves_per_block<W>();
  int parity = 0;
  for (int64_t t0 = lo; t0 < hi; t0 += (int64_t)nw * IO::WG, parity ^= 16) {
    const IO io(in, out, a.n, a.elem_stride, dense, t0 + (int64_t)wi * IO::WG + wl * IO::V, hi, wl);
    io.load(loc);
    const S total = scan_tile<Op, W, WaveRows>(loc, inclusive, wtot + parity);
    if (a.mode != MLXA_SCAN_TOTALS) write_tile(io, loc, carry, first);
    carry = first ? total : Op::combine(carry, total);
    first = false;
  }
  return carry;
}

// Unit stride, and the 16-byte groups aligned in input and output (reversed, the group at
// logical p0 starts at n - p0 - V: aligned with the row's end).
template <bool Rev, typename In, typename Out>
MLXA_DEVICE bool dense_row(const In* in, Out* out, int64_t n, int64_t es) {
  return es == 1 && ((uintptr_t)(Rev ? in + n : in) & 15) == 0 && ((uintptr_t)(Rev ? out + n : out) & 15) == 0;
}

// A row per wave (short rows).
template <typename Op, typename In, typename Out, int W, bool Rev>
MLXA_DEVICE void scan_wave_row(const ScanArgs& a) {
  const int64_t row = (int64_t)blockIdx.x * waves_per_block<W>() + wave_index<W>();
  if (row >= a.rows) return;   // the whole wave: wave rows never synchronise the block
  const In* in = (const In*)a.in + offset_of(a, row);
  Out* out = (Out*)a.out + row * a.n;
  (void)row_tiles<Op, In, Out, W, Rev, true>(a, in, out, 0, a.n, Op::identity(), true,
                                             dense_row<Rev>(in, out, a.n, a.elem_stride), nullptr);
}

// A block per row chunk: the whole row (FULL), the chunk's total (TOTALS), the chunk after
// the totals before it (CARRIED), or one tile after the look-back over the row's earlier
// chunks (LOOKBACK).
template <typename Op, typename In, typename Out, int W, bool Rev>
MLXA_DEVICE void scan_block_row(const ScanArgs& a, State<typename Op::Acc>* wtot, State<typename Op::Acc>* prefix_s,
                                uint32_t* ticket_s) {
  using S = State<typename Op::Acc>;
  using IO = TileIO<Op, In, Out, W, Rev>;
  // look-back: chunks in the order blocks start, not blockIdx: every chunk a block waits
  // for belongs to a block that started earlier, whatever order the hardware runs them in
  uint32_t id = blockIdx.x;
  if (a.mode == MLXA_SCAN_LOOKBACK) {
    if (threadIdx.x == 0) *ticket_s = atomic_add(static_cast<uint32_t*>(a.totals), 1u);
    sync_block();
    id = *ticket_s;
  }
  const uint32_t nc = (uint32_t)a.nchunks;   // rows * nchunks blocks: below 2^31
  const uint32_t row = id / nc;
  const int chunk_id = (int)(id - row * nc), slot_id = (int)id;
  const int64_t n = a.n;
  const int64_t lo = (int64_t)chunk_id * a.chunk;
  const int64_t hi = lo + a.chunk < n ? lo + a.chunk : n;
  const In* in = (const In*)a.in + offset_of(a, row);
  Out* out = (Out*)a.out + (int64_t)row * n;
  const bool dense = dense_row<Rev>(in, out, n, a.elem_stride);
  if (a.mode == MLXA_SCAN_LOOKBACK) {   // a chunk is one tile: its total is known before anything is written
    S loc[IO::K][IO::V];
    const int wl = wave_lane<W>();
    const IO io(in, out, n, a.elem_stride, dense, lo + (int64_t)wave_index<W>() * IO::WG + wl * IO::V, hi, wl);
    io.load(loc);
    const S total = scan_tile<Op, W, false>(loc, (a.flags & MLXA_SCAN_INCLUSIVE) != 0, wtot);
    S prefix;
    if constexpr (PackedStatus<Op, S>::fits)
      prefix = lookback_prefix<Op, W>(PackedStatus<Op, S>(a.totals), slot_id, chunk_id, total, prefix_s);
    else
      prefix = lookback_prefix<Op, W>(Status<Op, S>(a.totals, a.rows * a.nchunks), slot_id, chunk_id, total,
                                      prefix_s);
    write_tile(io, loc, prefix, false);
    return;
  }
  S carry = Op::identity();
  if (a.mode == MLXA_SCAN_CARRIED && chunk_id > 0) {
    // fold the totals of the chunks before this one, in order
    const S* totals = (const S*)a.totals + (int64_t)row * nc;
    const int tpr = (int)blockDim.x, lane = (int)threadIdx.x;
    for (int b = 0; b < chunk_id; b += tpr) {
      const S v = b + lane < chunk_id ? totals[b + lane] : Op::identity();
      S tot;
      (void)group_exclusive<Op, W>(v, false, wtot, tot);
      carry = Op::combine(carry, tot);
    }
  }
  carry = row_tiles<Op, In, Out, W, Rev, false>(a, in, out, lo, hi, carry, a.mode != MLXA_SCAN_CARRIED || chunk_id == 0,
                                                dense, wtot);
  if (a.mode == MLXA_SCAN_TOTALS && threadIdx.x == 0) ((S*)a.totals)[slot_id] = carry;
}

template <typename Op, typename In, typename Out, int W>
MLXA_DEVICE void scan_rows(const ScanArgs& a) {
  using S = State<typename Op::Acc>;
  __shared__ S wtot[2 * 16];   // two buffers, one slot per wave of a block of at most 512 threads
  __shared__ S prefix_s;
  __shared__ uint32_t ticket_s;
  if (a.mode == MLXA_SCAN_CLEAR) {
    // the ticket, then the flags (or the packed words: two 32-bit words a slot)
    const int64_t words = MLXA_SCAN_STATUS_HEAD / 4 + 2 * a.rows * a.nchunks;
    for (int64_t i = global_thread<int64_t>(); i < words; i += grid_threads<int64_t>())
      static_cast<uint32_t*>(a.totals)[i] = 0u;
    return;
  }
  // direction and wave/block rows as template arguments: as runtime flags they kept both
  // variants' values in registers
  const bool reverse = (a.flags & MLXA_SCAN_REVERSE) != 0;
  if (a.flags & MLXA_SCAN_WAVE_ROWS) {
    if (reverse) scan_wave_row<Op, In, Out, W, true>(a);
    else scan_wave_row<Op, In, Out, W, false>(a);
  } else {
    if (reverse) scan_block_row<Op, In, Out, W, true>(a, wtot, &prefix_s, &ticket_s);
    else scan_block_row<Op, In, Out, W, false>(a, wtot, &prefix_s, &ticket_s);
  }
}

// ---- column kernel -------------------------------------------------------------------
template <typename Op, typename In, typename Out>
MLXA_DEVICE void scan_cols(const ScanArgs& a) {
  using A = typename Op::Acc;
  using S = State<A>;
  const bool reverse = (a.flags & MLXA_SCAN_REVERSE) != 0;
  const bool inclusive = (a.flags & MLXA_SCAN_INCLUSIVE) != 0;
  const int64_t n = a.n, es = a.elem_stride, inner = a.inner;
  for (int64_t c = global_thread<int64_t>(); c < a.rows; c += grid_threads<int64_t>()) {
    const In* in = (const In*)a.in + offset_of(a, c);
    Out* out = (Out*)a.out + (c / inner) * n * inner + c % inner;
    S acc = Op::identity();
    for (int64_t p = 0; p < n; ++p) {
      const int64_t q = reverse ? n - 1 - p : p;
      const S s = Op::make((A)widen(in[q * es]));
      A v;
      if (inclusive) {
        acc = Op::combine(acc, s);
        v = acc.v;
      } else {
        v = acc.v;
        acc = Op::combine(acc, s);
      }
      out[q * inner] = cast<Out>(v);
    }
  }
}

}  // namespace mlxa::scan

// Op is the op template's name, T the stored dtype it takes limits from, A its accumulator.
#define MLXA_SCAN_ROWS(name, Op, T, A, In, Out, W)                                           \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(512) name(ScanArgs a) {                                \
    MLXA_WAVE_KERNEL_BODY(W, (mlxa::scan::scan_rows<mlxa::scan::Op<T, A>, In, Out, W>(a)))   \
  }
#define MLXA_SCAN_COLS(name, Op, T, A, In, Out)                             \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(256) name(ScanArgs a) {               \
    mlxa::scan::scan_cols<mlxa::scan::Op<T, A>, In, Out>(a);                \
  }

#include "scan.inc"
