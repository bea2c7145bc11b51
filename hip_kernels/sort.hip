// Sort family: Sort, ArgSort, Partition, ArgPartition (a full stable sort is a valid
// partition) and SearchSorted, ordered as MLX's CPU build orders them: stable, NaNs last
// (among themselves in input order), -0.0 equal to +0.0.
//
// Every value is first mapped to an unsigned key of its size (mlxa/sort_args.h), so the
// kernels below only see unsigned integers:
//   block    rows of up to 4096 elements sorted whole by one block: a bitonic network
//            over (key, index) pairs, the index breaking ties (stable), its short stages
//            in registers and wave exchanges, the long ones in shared memory.
//   radix    longer rows: LSD radix sort, 8 bits a pass, over [rows][n] temporaries
//            the launcher orchestrates: keys (prologue), then per pass count (histograms
//            of ranges of sub-tiles), scan (per digit over ranges), scatter (one block per
//            range, sub-tile by sub-tile: stable ranking through wave ballots, reordered in
//            shared memory for coalesced writes).
//   search   SearchSorted: a binary search per value over keys.
#include "mlxa/wave.h"
#include "mlxa/sort_args.h"

#include <type_traits>

namespace mlxa::srt {

template <typename U> constexpr U kTop = U(U(1) << (8 * sizeof(U) - 1));

// MLX's order as an unsigned key (see sort_args.h).
template <typename U>
MLXA_DEVICE U to_key(U b, int kind, U abs_inf) {
  constexpr U top = kTop<U>;
  if (kind == MLXA_KEY_UNSIGNED) return b;
  if (kind == MLXA_KEY_SIGNED) return U(b ^ top);
  const U mag = U(b & U(~top));
  if (mag > abs_inf) return U(~U(0));   // any NaN: above +inf, all equal
  if (mag == 0) return top;             // -0.0 sorts as +0.0
  return (b & top) ? U(~b) : U(b | top);
}

MLXA_DEVICE int64_t row_offset(const SortRows& r, int64_t row) {
  int64_t off = 0;
  for (int d = 0; d < r.row_ndim; ++d) {
    const int64_t s = r.row_shape[d];
    off += (row % s) * r.row_strides[d];
    row /= s;
  }
  return off;
}

MLXA_DEVICE int64_t out_offset(int64_t row, int64_t j, int64_t n, int64_t inner) {
  if (inner == 1) return row * n + j;
  return (row / inner) * n * inner + row % inner + j * inner;
}

struct Plus {
  MLXA_DEVICE uint32_t operator()(uint32_t a, uint32_t b) const { return a + b; }
};

// Exclusive prefix of v over the block in thread order; `total` gets the block's sum.
// wsum holds one value per wave. Synchronises the block twice.
template <int W>
MLXA_DEVICE uint32_t block_exclusive_scan(uint32_t v, uint32_t* wsum, uint32_t& total) {
  const uint32_t inc = wave_inclusive_scan<W>(v, Plus{});
  const int w = wave_index<W>(), nw = waves_per_block<W>();
  if (wave_lane<W>() == W - 1) wsum[w] = inc;
  sync_block();
  uint32_t pre = 0, tot = 0;
  for (int i = 0; i < nw; ++i) {
    const uint32_t s = wsum[i];
    pre += i < w ? s : 0u;
    tot += s;
  }
  sync_block();
  total = tot;
  return pre + inc - v;
}

// ---------------------------------------------------------------- block sort
// (key, index) pairs: the index breaks ties, so the order is total and the sort stable.
template <typename U>
MLXA_DEVICE bool pair_gt(U ka, uint32_t ia, U kb, uint32_t ib) {
  return ka > kb || (ka == kb && ia > ib);
}

// The pair of lane `lane ^ mask`, through 32-bit exchanges only (one buffer type on the
// emulated wave; keys of up to 2 bytes travel with their index in one word).
template <int W, typename U>
MLXA_DEVICE void exchange_pair(U& k, uint32_t& id, int mask) {
  if constexpr (sizeof(U) <= 2) {
    const uint32_t p = wave_shfl_xor<W>((uint32_t(k) << 16) | id, mask);
    k = U(p >> 16);
    id = p & 0xFFFFu;
  } else if constexpr (sizeof(U) == 4) {
    k = wave_shfl_xor<W>(uint32_t(k), mask);
    id = wave_shfl_xor<W>(id, mask);
  } else {
    constexpr int kWord = 8 * sizeof(uint32_t);
    const uint32_t lo = wave_shfl_xor<W>(uint32_t(k), mask);
    const uint32_t hi = wave_shfl_xor<W>(uint32_t(k >> kWord), mask);
    k = (U(hi) << kWord) | U(lo);
    id = wave_shfl_xor<W>(id, mask);
  }
}

// A bitonic network within each segment of `seg` elements (the last merge of a segment
// ascending, earlier ones alternating by position). Thread t holds the E consecutive
// pairs from t * E in registers: a stage of distance j < E runs in registers, E <= j <
// E * W across the lanes of a wave, and only the longer ones through shared memory.
template <typename U, int TILE, int THREADS, bool ARG, int W>
MLXA_DEVICE void block_sort(const SortBlockArgs& a) {
  constexpr int E = TILE / THREADS;
  static_assert(E >= 2 && (E & (E - 1)) == 0, "block sort: a power-of-two run per thread");
  __shared__ U keys[TILE];
  __shared__ uint16_t idx[TILE];
  const SortRows& r = a.r;
  const U* in = static_cast<const U*>(a.in);
  const int seg = a.seg, n = r.n;
  const int lg = 31 - __clz(seg);
  const int64_t row0 = (int64_t)blockIdx.x * (TILE >> lg);
  const U abs_inf = (U)r.abs_inf;
  for (int i = threadIdx.x; i < TILE; i += THREADS) {
    const int s = i >> lg, j = i & (seg - 1);
    const int64_t row = row0 + s;
    U k = U(~U(0));
    uint16_t id = 0xFFFFu;   // pads sort after every element (indices are < 4096)
    if (row < r.rows && j < n) {
      k = to_key(in[row_offset(r, row) + j * r.in_axis_stride], r.kind, abs_inf);
      id = (uint16_t)j;
    }
    keys[i] = k;
    idx[i] = id;
  }
  sync_block();
  const int i0 = (int)threadIdx.x * E;
  U rk[E];
  uint32_t ri[E];
#pragma unroll
  for (int q = 0; q < E; ++q) {
    rk[q] = keys[i0 + q];
    ri[q] = idx[i0 + q];
  }
  for (int k = 2; k <= seg; k <<= 1) {
    int j = k >> 1;
    if (j >= E * W) {
#pragma unroll
      for (int q = 0; q < E; ++q) {
        keys[i0 + q] = rk[q];
        idx[i0 + q] = (uint16_t)ri[q];
      }
      for (; j >= E * W; j >>= 1) {
        sync_block();
        for (int p = threadIdx.x; p < TILE / 2; p += THREADS) {
          const int i = 2 * p - (p & (j - 1));
          const int l = i + j;
          const bool asc = (k == seg) || ((i & k) == 0);
          const U ki = keys[i], kl = keys[l];
          const uint16_t ii = idx[i], il = idx[l];
          if (pair_gt<U>(ki, ii, kl, il) == asc) {
            keys[i] = kl; keys[l] = ki;
            idx[i] = il; idx[l] = ii;
          }
        }
      }
      sync_block();
#pragma unroll
      for (int q = 0; q < E; ++q) {
        rk[q] = keys[i0 + q];
        ri[q] = idx[i0 + q];
      }
      sync_block();                      // read before the next k writes
    }
    for (; j >= E; j >>= 1) {
      const bool lower = (i0 & j) == 0;  // the same for all E pairs of this thread
#pragma unroll
      for (int q = 0; q < E; ++q) {
        U ok = rk[q];
        uint32_t oi = ri[q];
        exchange_pair<W>(ok, oi, j / E);
        const bool asc = (k == seg) || (((i0 + q) & k) == 0);
        // the lower position of an ascending pair keeps the smaller one
        if (pair_gt<U>(rk[q], ri[q], ok, oi) == (lower == asc)) {
          rk[q] = ok;
          ri[q] = oi;
        }
      }
    }
#pragma unroll
    for (int jj = E / 2; jj >= 1; jj >>= 1) {
      if (jj > j) continue;
#pragma unroll
      for (int q = 0; q < E; ++q) {
        if (q & jj) continue;
        const int l = q + jj;
        const bool asc = (k == seg) || (((i0 + q) & k) == 0);
        if (pair_gt<U>(rk[q], ri[q], rk[l], ri[l]) == asc) {
          const U tk = rk[q]; rk[q] = rk[l]; rk[l] = tk;
          const uint32_t ti = ri[q]; ri[q] = ri[l]; ri[l] = ti;
        }
      }
    }
  }
#pragma unroll
  for (int q = 0; q < E; ++q) {
    keys[i0 + q] = rk[q];
    idx[i0 + q] = (uint16_t)ri[q];
  }
  sync_block();
  const U flip = r.kind == MLXA_KEY_SIGNED ? kTop<U> : U(0);
  for (int i = threadIdx.x; i < TILE; i += THREADS) {
    const int s = i >> lg, j = i & (seg - 1);
    const int64_t row = row0 + s;
    if (row >= r.rows || j >= n) continue;
    const int64_t o = out_offset(row, j, n, r.out_inner);
    if constexpr (ARG) {
      static_cast<uint32_t*>(a.out)[o] = idx[i];
    } else if (r.kind == MLXA_KEY_FLOAT) {
      // keys of floats lose -0.0's sign and NaN payloads: take the value itself
      static_cast<U*>(a.out)[o] = in[row_offset(r, row) + (int64_t)idx[i] * r.in_axis_stride];
    } else {
      static_cast<U*>(a.out)[o] = U(keys[i] ^ flip);
    }
  }
}

// ---------------------------------------------------------------- radix sort
struct NoPayload {};
template <typename V> constexpr int payload_size = std::is_same_v<V, NoPayload> ? 0 : (int)sizeof(V);
// Elements per radix sub-tile: a block ranks and reorders one sub-tile at a time in
// shared memory, keys and payload of it in registers (8 per thread at most: 16 kept the
// block at one per multiprocessor). The emulated wide wave needs room for its exchange
// slots, so it takes half.
template <typename U, typename V, int W>
constexpr int radix_tile = ((int)sizeof(U) + payload_size<V> <= 8 ? 2048 : 1024) / (W == 64 ? 2 : 1);
constexpr int kRadixThreads = 256;   // one thread per digit

template <typename U>
MLXA_DEVICE void radix_keys(const RadixKeysArgs& a) {
  const SortRows& r = a.r;
  const int64_t row = blockIdx.y;
  const int64_t n = r.n;
  const U* in = static_cast<const U*>(a.in) + row_offset(r, row);
  U* keys = static_cast<U*>(a.keys) + row * n;
  U* raw = a.write_raw ? static_cast<U*>(a.raw) + row * n : nullptr;
  const U abs_inf = (U)r.abs_inf;
  for (int64_t j = global_thread(); j < n; j += grid_threads()) {
    const U b = in[j * r.in_axis_stride];
    keys[j] = to_key(b, r.kind, abs_inf);
    if (raw) raw[j] = b;
  }
}

template <typename U>
MLXA_DEVICE void radix_count(const RadixCountArgs& a) {
  __shared__ uint32_t hist[256];
  for (int d = threadIdx.x; d < 256; d += blockDim.x) hist[d] = 0;
  sync_block();
  const int64_t row = blockIdx.y;
  const int t = blockIdx.x;
  const U* keys = static_cast<const U*>(a.keys) + row * a.n;
  const int64_t lo = (int64_t)t * a.tile_size;
  const int64_t hi = lo + a.tile_size < a.n ? lo + a.tile_size : a.n;
  for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x)
    atomicAdd(&hist[(uint32_t)(keys[e] >> a.shift) & 255u], 1u);
  sync_block();
  for (int d = threadIdx.x; d < 256; d += blockDim.x)
    a.counts[(row * 256 + d) * a.tiles + t] = hist[d];
}

template <int W>
MLXA_DEVICE void radix_scan(const RadixScanArgs& a) {
  __shared__ uint32_t wsum[kRadixThreads / 32];
  const int64_t slot = (int64_t)blockIdx.y * 256 + blockIdx.x;
  uint32_t* c = a.counts + slot * a.tiles;
  uint32_t carry = 0;
  for (int base = 0; base < a.tiles; base += kRadixThreads) {
    const int i = base + (int)threadIdx.x;
    const uint32_t v = i < a.tiles ? c[i] : 0u;
    uint32_t tot;
    const uint32_t ex = block_exclusive_scan<W>(v, wsum, tot);
    if (i < a.tiles) c[i] = carry + ex;
    carry += tot;
  }
  if (threadIdx.x == 0) a.totals[slot] = carry;
}

// One block per range of `subtiles` sub-tiles (the count kernel's tile), walked in order:
// elements of a digit keep their order within a sub-tile (ranked by wave ballots, waves
// in order) and across sub-tiles (each digit's running output position), so the pass
// is stable.
template <int W, typename U, typename V>
MLXA_DEVICE void radix_scatter(const RadixScatterArgs& a) {
  constexpr bool HAS_V = payload_size<V> > 0;
  using VT = std::conditional_t<HAS_V, V, U>;    // a type to declare registers with
  constexpr int TILE = radix_tile<U, V, W>;
  constexpr int ITEMS = TILE / kRadixThreads;
  constexpr int NW = kRadixThreads / W;
  constexpr int CHUNK = TILE / NW;               // W * ITEMS consecutive elements per wave
  __shared__ U kbuf[TILE];
  __shared__ VT vbuf[HAS_V ? TILE : 1];
  __shared__ uint32_t wcnt[NW][256];
  __shared__ uint32_t tile_pre[256];
  __shared__ uint32_t gofs[256];
  __shared__ uint32_t wsum[kRadixThreads / 32];

  const int64_t row = blockIdx.y;
  const int t = blockIdx.x;
  const int64_t n = a.n;
  const bool iota = (a.flags & MLXA_RADIX_IOTA) != 0;
  const bool final_pass = (a.flags & MLXA_RADIX_FINAL) != 0;
  const bool wk = (a.flags & MLXA_RADIX_WRITE_KEYS) != 0;
  const bool wv = HAS_V && (a.flags & MLXA_RADIX_WRITE_VALS) != 0;
  const int w = wave_index<W>(), lane = wave_lane<W>();
  const int shift = a.shift;
  const int d_own = threadIdx.x;                 // the digit this thread keeps totals for
  const unsigned long long lt = (1ull << lane) - 1ull;

  // where this block's first element of digit d_own goes in the row
  uint32_t running;
  {
    uint32_t all;
    const uint32_t start = block_exclusive_scan<W>(a.totals[row * 256 + d_own], wsum, all);
    running = start + a.counts[(row * 256 + d_own) * a.tiles + t];
  }

  const int64_t range0 = (int64_t)t * a.subtiles * TILE;
  for (int sub = 0; sub < a.subtiles; ++sub) {
    const int64_t tile0 = range0 + (int64_t)sub * TILE;
    if (tile0 >= n) break;                       // uniform over the block
    const int valid = (int)(n - tile0 < TILE ? n - tile0 : TILE);
    const U* kin = static_cast<const U*>(a.keys_in) + row * n + tile0;
    const VT* vin = HAS_V && !iota ? static_cast<const VT*>(a.vals_in) + row * n + tile0 : nullptr;

    for (int i = threadIdx.x; i < NW * 256; i += kRadixThreads) (&wcnt[0][0])[i] = 0u;
    U k[ITEMS];
    VT v[ITEMS];
    uint16_t loc[ITEMS];
    // all loads of the sub-tile first, so they are in flight together
#pragma unroll
    for (int q = 0; q < ITEMS; ++q) {
      const int e = w * CHUNK + q * W + lane;
      const bool ok = e < valid;
      k[q] = ok ? kin[e] : U(0);
      if constexpr (HAS_V) v[q] = ok ? (vin ? vin[e] : (VT)(tile0 + e)) : VT(0);
    }
    sync_block();                                // wcnt cleared
#pragma unroll
    for (int q = 0; q < ITEMS; ++q) {
      const int e = w * CHUNK + q * W + lane;
      const bool ok = e < valid;
      const uint32_t d = (uint32_t)(k[q] >> shift) & 255u;
      // lanes of this round holding the same digit: 8 ballots
      unsigned long long m = wave_ballot<W>(ok);
#pragma unroll
      for (int b = 0; b < 8; ++b) {
        const bool bit = (d >> b) & 1u;
        const unsigned long long bb = wave_ballot<W>(bit);
        m &= bit ? bb : ~bb;
      }
      const uint32_t before = (uint32_t)__popcll(m & lt);
      const uint32_t cnt = (uint32_t)__popcll(m);
      uint32_t base = 0;
      if (ok) base = wcnt[w][d];
      wave_barrier<W>();
      if (ok && before == 0) wcnt[w][d] = base + cnt;   // the lowest lane of each digit
      wave_barrier<W>();
      loc[q] = (uint16_t)(base + before);
    }
    sync_block();

    {
      uint32_t run = 0;
      for (int i = 0; i < NW; ++i) {
        const uint32_t c = wcnt[i][d_own];
        wcnt[i][d_own] = run;
        run += c;
      }
      uint32_t unused;
      const uint32_t pre = block_exclusive_scan<W>(run, wsum, unused);
      tile_pre[d_own] = pre;
      // element at reordered position i of digit d goes to row position gofs[d] + i
      gofs[d_own] = running - pre;
      running += run;
    }
    sync_block();

    // reorder the sub-tile in shared memory, then write runs of equal digits contiguously
#pragma unroll
    for (int q = 0; q < ITEMS; ++q) {
      const int e = w * CHUNK + q * W + lane;
      if (e < valid) {
        const uint32_t d = (uint32_t)(k[q] >> shift) & 255u;
        const uint32_t p = tile_pre[d] + wcnt[w][d] + loc[q];
        kbuf[p] = k[q];
        if constexpr (HAS_V) vbuf[p] = v[q];
      }
    }
    sync_block();
#pragma unroll
    for (int s = 0; s < ITEMS; ++s) {
      const int i = s * kRadixThreads + (int)threadIdx.x;
      if (i >= valid) continue;
      const U ks = kbuf[i];
      const uint32_t g = gofs[(uint32_t)(ks >> shift) & 255u] + (uint32_t)i;
      const int64_t o = final_pass ? out_offset(row, g, n, a.out_inner) : row * n + g;
      if (wk) static_cast<U*>(a.keys_out)[o] = final_pass ? U(ks ^ (U)a.key_xor) : ks;
      if constexpr (HAS_V) {
        if (wv) static_cast<VT*>(a.vals_out)[o] = vbuf[i];
      }
    }
    sync_block();                                // kbuf, wcnt and gofs are reused
  }
}

// ---------------------------------------------------------------- searchsorted
template <typename U>
MLXA_DEVICE void search_sorted(const SearchSortedArgs& a) {
  const U* seq = static_cast<const U*>(a.a);
  const U* val = static_cast<const U*>(a.v);
  const U abs_inf = (U)a.abs_inf;
  for (int64_t i = global_thread(); i < a.count; i += grid_threads()) {
    int64_t rest = i, off = 0;
    for (int d = 0; d < a.v_ndim; ++d) {
      const int64_t s = a.v_shape[d];
      off += (rest % s) * a.v_strides[d];
      rest /= s;
    }
    const U x = to_key(val[off], a.kind, abs_inf);
    uint32_t lo = 0, hi = a.a_size;
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo) / 2;
      const U m = to_key(seq[(int64_t)mid * a.a_stride], a.kind, abs_inf);
      const bool below = a.right ? !(x < m) : (m < x);
      if (below) lo = mid + 1;
      else hi = mid;
    }
    a.out[i] = lo;
  }
}

}  // namespace mlxa::srt

#define MLXA_SORT_BLOCK(name, U, TILE, THREADS, ARG, W)                                    \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(THREADS) name(SortBlockArgs a) {                    \
    MLXA_WAVE_KERNEL_BODY(W, (mlxa::srt::block_sort<U, TILE, THREADS, ARG, W>(a)))        \
  }
#define MLXA_SORT_KEYS(name, U) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(256) name(RadixKeysArgs a) { mlxa::srt::radix_keys<U>(a); }
#define MLXA_SORT_COUNT(name, U) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(256) name(RadixCountArgs a) { mlxa::srt::radix_count<U>(a); }
#define MLXA_SORT_SCAN(name, W)                                        \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(256) name(RadixScanArgs a) {     \
    MLXA_WAVE_KERNEL_BODY(W, mlxa::srt::radix_scan<W>(a))              \
  }
#define MLXA_SORT_SCATTER(name, W, U, V)                                   \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(256) name(RadixScatterArgs a) {      \
    MLXA_WAVE_KERNEL_BODY(W, (mlxa::srt::radix_scatter<W, U, V>(a)))       \
  }
#define MLXA_SORT_SEARCH(name, U) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(256) name(SearchSortedArgs a) { mlxa::srt::search_sorted<U>(a); }

#include "sort.inc"
