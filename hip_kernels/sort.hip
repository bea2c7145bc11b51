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
#include "mlxa/types.h"
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
// A (key, index) item; the index breaks ties, so the order is total and the sort stable.
// Keys of up to 4 bytes pack with their index into one unsigned integer (the key above
// 16 or 32 index bits): a compare-exchange is then one min and one max.
template <typename U, bool PACKED = (sizeof(U) <= 4)>
struct Item;

template <typename U>
struct Item<U, true> {
  using P = std::conditional_t<sizeof(U) <= 2, uint32_t, uint64_t>;
  static constexpr int kIndexBits = sizeof(U) <= 2 ? 16 : 32;
  P v;
  static MLXA_DEVICE Item make(U k, uint32_t i) { return {P(P(k) << kIndexBits) | P(i)}; }
  MLXA_DEVICE U key() const { return U(v >> kIndexBits); }
  MLXA_DEVICE uint32_t index() const { return uint32_t(v) & 0xFFFFu; }
  MLXA_DEVICE bool gt(const Item& o) const { return v > o.v; }
  // c ? x : y member by member: a ?: over two struct lvalues selects their addresses, which
  // the AMD compiler did not split into registers (24 bytes of scratch per work-item)
  static MLXA_DEVICE Item pick(bool c, const Item& x, const Item& y) { return {c ? x.v : y.v}; }
};

template <typename U>
struct Item<U, false> {
  U k;
  uint32_t i;
  static MLXA_DEVICE Item make(U k, uint32_t i) { return {k, i}; }
  MLXA_DEVICE U key() const { return k; }
  MLXA_DEVICE uint32_t index() const { return i; }
  MLXA_DEVICE bool gt(const Item& o) const { return k > o.k || (k == o.k && i > o.i); }
  static MLXA_DEVICE Item pick(bool c, const Item& x, const Item& y) {
    return {c ? x.k : y.k, c ? x.i : y.i};
  }
};


// The items of a tile in shared memory: packed ones as they are, others as a key array
// and a 16-bit index array (no padding).
template <typename U, int TILE, bool PACKED = (sizeof(U) <= 4)>
struct TileItems {
  typename Item<U>::P v[TILE];
  MLXA_DEVICE Item<U> get(int i) const { return {v[i]}; }
  MLXA_DEVICE void put(int i, const Item<U>& x) { v[i] = x.v; }
};
template <typename U, int TILE>
struct TileItems<U, TILE, false> {
  U k[TILE];
  uint16_t i[TILE];
  MLXA_DEVICE Item<U> get(int j) const { return {k[j], i[j]}; }
  MLXA_DEVICE void put(int j, const Item<U>& x) { k[j] = x.k; i[j] = (uint16_t)x.i; }
};

// The item of lane `lane ^ mask`, through 32-bit exchanges only (one buffer type on the
// emulated wave).
template <int W>
MLXA_DEVICE uint64_t shfl_xor_u64(uint64_t x, int mask) {
  constexpr int kWord = 8 * sizeof(uint32_t);
  const uint32_t lo = wave_shfl_xor<W>(uint32_t(x), mask);
  const uint32_t hi = wave_shfl_xor<W>(uint32_t(x >> kWord), mask);
  return (uint64_t(hi) << kWord) | lo;
}
template <int W, typename U>
MLXA_DEVICE Item<U> exchange_item(const Item<U>& x, int mask) {
  if constexpr (sizeof(U) > 4) {
    return {shfl_xor_u64<W>(x.k, mask), wave_shfl_xor<W>(x.i, mask)};
  } else if constexpr (sizeof(typename Item<U>::P) == 4) {
    return {wave_shfl_xor<W>(x.v, mask)};
  } else {
    return {shfl_xor_u64<W>(x.v, mask)};
  }
}

// A bitonic network within each segment of `seg` elements (the last merge of a segment
// ascending, earlier ones alternating by position). Thread t holds the E consecutive
// items from t * E in registers: a stage of distance j < E runs in registers, E <= j <
// E * W across the lanes of a wave, and only the longer ones through shared memory.
template <typename U, int TILE, int THREADS, bool ARG, int W>
MLXA_DEVICE void block_sort(const SortBlockArgs& a) {
  using I = Item<U>;
  constexpr int E = TILE / THREADS;
  static_assert(E >= 2 && (E & (E - 1)) == 0, "block sort: a power-of-two run per thread");
  __shared__ TileItems<U, TILE> tile;
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
    uint32_t id = 0xFFFFu;   // pads sort after every element (indices are < 4096)
    if (row < r.rows && j < n) {
      k = to_key(in[row_offset(r, row) + j * r.in_axis_stride], r.kind, abs_inf);
      id = (uint32_t)j;
    }
    tile.put(i, I::make(k, id));
  }
  sync_block();
  const int i0 = (int)threadIdx.x * E;
  I it[E];
#pragma unroll
  for (int q = 0; q < E; ++q) it[q] = tile.get(i0 + q);
  for (int k = 2; k <= seg; k <<= 1) {
    int j = k >> 1;
    if (j >= E * W) {
#pragma unroll
      for (int q = 0; q < E; ++q) tile.put(i0 + q, it[q]);
      for (; j >= E * W; j >>= 1) {
        sync_block();
        for (int p = threadIdx.x; p < TILE / 2; p += THREADS) {
          const int i = 2 * p - (p & (j - 1));
          const int l = i + j;
          const bool asc = (k == seg) || ((i & k) == 0);
          const I x = tile.get(i), y = tile.get(l);
          if (x.gt(y) == asc) {
            tile.put(i, y);
            tile.put(l, x);
          }
        }
      }
      sync_block();
#pragma unroll
      for (int q = 0; q < E; ++q) it[q] = tile.get(i0 + q);
      sync_block();                      // read before the next k writes
    }
    for (; j >= E; j >>= 1) {
      const bool lower = (i0 & j) == 0;  // the same for all E items of this thread
#pragma unroll
      for (int q = 0; q < E; ++q) {
        const I o = exchange_item<W, U>(it[q], j / E);
        const bool asc = (k == seg) || (((i0 + q) & k) == 0);
        // the lower position of an ascending pair keeps the smaller one
        const bool g = it[q].gt(o);
        it[q] = I::pick(g == (lower == asc), o, it[q]);
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
        const bool swap = it[q].gt(it[l]) == asc;
        const I x = it[q];
        it[q] = I::pick(swap, it[l], x);
        it[l] = I::pick(swap, x, it[l]);
      }
    }
  }
#pragma unroll
  for (int q = 0; q < E; ++q) tile.put(i0 + q, it[q]);
  sync_block();
  const U flip = r.kind == MLXA_KEY_SIGNED ? kTop<U> : U(0);
  for (int i = threadIdx.x; i < TILE; i += THREADS) {
    const int s = i >> lg, j = i & (seg - 1);
    const int64_t row = row0 + s;
    if (row >= r.rows || j >= n) continue;
    const int64_t o = out_offset(row, j, n, r.out_inner);
    const I x = tile.get(i);
    if constexpr (ARG) {
      static_cast<uint32_t*>(a.out)[o] = x.index();
    } else if (r.kind == MLXA_KEY_FLOAT) {
      // keys of floats lose -0.0's sign and NaN payloads: take the value itself
      static_cast<U*>(a.out)[o] = in[row_offset(r, row) + (int64_t)x.index() * r.in_axis_stride];
    } else {
      static_cast<U*>(a.out)[o] = U(x.key() ^ flip);
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
  U* raw = a.write_raw == 1 ? static_cast<U*>(a.raw) + row * n : nullptr;
  uint32_t* pos = a.write_raw == 2 ? static_cast<uint32_t*>(a.raw) + row * n : nullptr;
  const U abs_inf = (U)r.abs_inf;
  for (int64_t j = global_thread(); j < n; j += grid_threads()) {
    const U b = in[j * r.in_axis_stride];
    keys[j] = to_key(b, r.kind, abs_inf);
    if (raw) raw[j] = b;
    if (pos) pos[j] = (uint32_t)j;
  }
}

// Copies of the histogram that neighbouring threads spread their counts over: a pass over
// few distinct digits (the top byte of similar values) otherwise serialises every
// thread on one shared-memory counter.
constexpr int kCountCopies = 8;

template <typename U>
MLXA_DEVICE void radix_count(const RadixCountArgs& a) {
  __shared__ uint32_t hist[kCountCopies][256];
  for (int i = threadIdx.x; i < kCountCopies * 256; i += blockDim.x) (&hist[0][0])[i] = 0;
  sync_block();
  const int64_t row = blockIdx.y;
  const int t = blockIdx.x;
  const U* keys = static_cast<const U*>(a.keys) + row * a.n;
  const int64_t lo = (int64_t)t * a.tile_size;
  const int64_t hi = lo + a.tile_size < a.n ? lo + a.tile_size : a.n;
  uint32_t* h = hist[threadIdx.x % kCountCopies];
  const uint32_t shift = (uint32_t)a.shift;
  constexpr int V = 16 / (int)sizeof(U);
  int64_t e = lo;
  if (((uintptr_t)(keys + lo) & 15u) == 0) {
    // 16 bytes a load: several keys in flight per thread
    for (; e + (int64_t)V * blockDim.x <= hi; e += (int64_t)V * blockDim.x) {
      const Vec<U, V> q = *(const Vec<U, V>*)(keys + e + (int64_t)V * threadIdx.x);
#pragma unroll
      for (int j = 0; j < V; ++j) atomicAdd(&h[(uint32_t)(q.v[j] >> shift) & 255u], 1u);
    }
  }
  for (e += threadIdx.x; e < hi; e += blockDim.x) atomicAdd(&h[(uint32_t)(keys[e] >> shift) & 255u], 1u);
  sync_block();
  for (int d = threadIdx.x; d < 256; d += blockDim.x) {
    uint32_t c = 0;
#pragma unroll
    for (int i = 0; i < kCountCopies; ++i) c += hist[i][d];
    a.counts[(row * 256 + d) * a.tiles + t] = c;
  }
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
