// Indexing family: Gather, GatherAxis (take_along_axis), Scatter, ScatterAxis
// (put_along_axis), SliceUpdate, DynamicSlice, DynamicSliceUpdate.
//
// Index semantics follow MLX's CPU build: a negative index of a signed index dtype is
// wrapped once by adding the axis extent; unsigned indices are taken as they are. MLX
// does not check bounds (its CPU reads or writes out of bounds); here an index still out
// of range after wrapping is clamped into range for reads (gathers, dynamic starts) and
// its update is skipped for writes (scatters), so a kernel never touches memory outside
// its buffers.
//
// Copies (gather, scatter without reduction, slices) move bits: kernels are instantiated
// per element size, not per dtype. Reductions (sum/prod/max/min) compute in the dtype's
// compute type like MLX's `*y += x`; scatters apply them atomically (native atomics
// where the hardware has them, else a compare-and-swap loop on the containing 32- or
// 64-bit word), so duplicate indices accumulate.
#include "mlxa/elementwise.h"
#include "mlxa/indexing_args.h"

namespace mlxa {
namespace idx {

// ---- index loads ---------------------------------------------------------------------
MLXA_DEVICE int64_t load_index(const void* p, int64_t off, int kind) {
  switch (kind) {
    case MLXA_IDX_U8: return ((const uint8_t*)p)[off];
    case MLXA_IDX_U16: return ((const uint16_t*)p)[off];
    case MLXA_IDX_U32: return ((const uint32_t*)p)[off];
    case MLXA_IDX_U64: {
      const uint64_t v = ((const uint64_t*)p)[off];
      return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;  // huge: out of range, not negative
    }
    case MLXA_IDX_I8: return ((const int8_t*)p)[off];
    case MLXA_IDX_I16: return ((const int16_t*)p)[off];
    case MLXA_IDX_I32: return ((const int32_t*)p)[off];
    default: return ((const int64_t*)p)[off];
  }
}

// MLX's wrap: negative -> + extent (unsigned values are never negative here).
MLXA_DEVICE int64_t wrap(int64_t v, int64_t size) { return v < 0 ? v + size : v; }
MLXA_DEVICE int64_t clamp_index(int64_t v, int64_t hi) { return v < 0 ? 0 : (v > hi ? hi : v); }

// ---- reductions (MLX's `*y op= x` with y the current value, x the update) -------------
struct None {};
struct Sum {
  template <typename T> MLXA_DEVICE T operator()(T y, T x) const {
    if constexpr (std::is_same_v<T, bool>) return y || x;
    else if constexpr (std::is_same_v<T, complex64>) return complex64{y.real + x.real, y.imag + x.imag};
    else return cast<T>(wrap_add(widen(y), widen(x)));
  }
};
struct Prod {
  template <typename T> MLXA_DEVICE T operator()(T y, T x) const {
    if constexpr (std::is_same_v<T, bool>) return y && x;
    else return cast<T>(wrap_mul(widen(y), widen(x)));
  }
};
struct Max {
  template <typename T> MLXA_DEVICE T operator()(T y, T x) const { return widen(y) > widen(x) ? y : x; }
};
struct Min {
  template <typename T> MLXA_DEVICE T operator()(T y, T x) const { return widen(y) < widen(x) ? y : x; }
};

template <typename To, typename From>
MLXA_DEVICE To bits_as(From f) {
  static_assert(sizeof(To) == sizeof(From), "bit cast between different sizes");
  To t;
  __builtin_memcpy(&t, &f, sizeof(To));
  return t;
}

// y = op(y, x) atomically by compare-and-swap on the word holding y.
template <typename Op, typename T>
MLXA_DEVICE void cas_update(T* p, T x) {
  if constexpr (sizeof(T) == 8) {
    unsigned long long* w = (unsigned long long*)p;
    unsigned long long old = *(volatile unsigned long long*)w, seen;
    do {
      seen = old;
      old = atomic_cas(w, seen, bits_as<unsigned long long>(Op{}(bits_as<T>(seen), x)));
    } while (old != seen);
  } else if constexpr (sizeof(T) == 4) {
    unsigned int* w = (unsigned int*)p;
    unsigned int old = *(volatile unsigned int*)w, seen;
    do {
      seen = old;
      old = atomic_cas(w, seen, bits_as<unsigned int>(Op{}(bits_as<T>(seen), x)));
    } while (old != seen);
  } else {
    // 8- and 16-bit values: the aligned 32-bit word around them (buffers are 4-byte
    // aligned multiples, so the word never leaves the allocation)
    using U = std::conditional_t<sizeof(T) == 1, uint8_t, uint16_t>;
    const uintptr_t addr = (uintptr_t)p;
    unsigned int* w = (unsigned int*)(addr & ~(uintptr_t)3);
    const unsigned shift = (unsigned)(addr & 3) * 8;
    const unsigned int mask = (unsigned int)((1u << (8 * sizeof(T))) - 1u) << shift;
    unsigned int old = *(volatile unsigned int*)w, seen;
    do {
      seen = old;
      const T y = bits_as<T>((U)((seen & mask) >> shift));
      const unsigned int v = (unsigned int)bits_as<U>(Op{}(y, x)) << shift;
      old = atomic_cas(w, seen, (seen & ~mask) | v);
    } while (old != seen);
  }
}

template <typename Op, typename T>
MLXA_DEVICE void atomic_update(T* p, T x) {
  if constexpr (std::is_same_v<Op, None>) {
    *p = x;
  } else if constexpr (std::is_same_v<Op, Sum> && (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                                    std::is_same_v<T, int32_t> || std::is_same_v<T, uint32_t>)) {
    atomic_add(p, x);
  } else if constexpr (std::is_same_v<Op, Sum> && (std::is_same_v<T, int64_t> || std::is_same_v<T, uint64_t>)) {
    atomic_add((unsigned long long*)p, (unsigned long long)x);  // two's complement: wraps like MLX
  } else if constexpr (std::is_same_v<Op, Sum> && std::is_same_v<T, complex64>) {
    atomic_add(&p->real, x.real);
    atomic_add(&p->imag, x.imag);
  } else if constexpr ((std::is_same_v<Op, Max> || std::is_same_v<Op, Min>) &&
                       (std::is_same_v<T, int32_t> || std::is_same_v<T, uint32_t>)) {
    if constexpr (std::is_same_v<Op, Max>) atomic_max(p, x);
    else atomic_min(p, x);
  } else {
    cas_update<Op>(p, x);
  }
}

// Plain read-modify-write (slice updates: every output element is touched once).
template <typename Op, typename T>
MLXA_DEVICE T combine(T y, T x) {
  if constexpr (std::is_same_v<Op, None>) return x;
  else return Op{}(y, x);
}

// ---- Gather / Scatter ---------------------------------------------------------------
// Offset contributed by the index arrays at index position i (over the index shape);
// `pos` receives the updates' offset along the index dimensions (scatter). False when an
// index is out of range (after wrapping) and Clamp is off.
template <bool Clamp, typename IdxT>
MLXA_DEVICE bool index_offset(const GatherScatterArgs& a, IdxT i, IdxT& off, IdxT& pos) {
  IdxT ioff[MLXA_IDX_MAX_ARRAYS];
#pragma unroll
  for (int k = 0; k < MLXA_IDX_MAX_ARRAYS; ++k) ioff[k] = 0;
  pos = 0;
  IdxT rest = i;
#pragma unroll
  for (int d = 0; d < MLXA_MAX_DIMS; ++d) {
    if (d < a.idx_ndim) {
      // the outermost coordinate is what is left: no division (1-D index arrays have none)
      IdxT c = rest;
      if (d + 1 < a.idx_ndim) {
        const IdxT s = (IdxT)a.idx_shape[d];
        c = rest % s;
        rest /= s;
      }
      pos += c * (IdxT)a.pos_strides[d];
#pragma unroll
      for (int k = 0; k < MLXA_IDX_MAX_ARRAYS; ++k) ioff[k] += c * (IdxT)a.idx_strides[k][d];
    }
  }
  off = 0;
  bool ok = true;
#pragma unroll
  for (int k = 0; k < MLXA_IDX_MAX_ARRAYS; ++k) {
    if (k < a.n_idx) {
      int64_t v = wrap(load_index(a.idx[k], (int64_t)ioff[k], a.idx_kind), a.axis_size[k]);
      if constexpr (Clamp) {
        v = clamp_index(v, a.axis_hi[k]);
      } else {
        ok = ok && v >= 0 && v <= a.axis_hi[k];
        v = ok ? v : 0;
      }
      off += (IdxT)v * (IdxT)a.axis_strides[k];
    }
  }
  return ok;
}

// Offsets of slice element s over the slice shape for NS stride vectors.
template <typename IdxT, int NS>
MLXA_DEVICE void slice_offsets(IdxT s, int ndim, const int32_t* shape, const int64_t* const (&st)[NS],
                               IdxT (&off)[NS]) {
#pragma unroll
  for (int k = 0; k < NS; ++k) off[k] = 0;
#pragma unroll
  for (int d = 0; d < MLXA_MAX_DIMS; ++d) {
    if (d < ndim) {
      IdxT c = s;
      if (d + 1 < ndim) {
        const IdxT e = (IdxT)shape[d];
        c = s % e;
        s /= e;
      }
#pragma unroll
      for (int k = 0; k < NS; ++k) off[k] += c * (IdxT)st[k][d];
    }
  }
}

// Grid-stride walk over work items g = i * groups + s / V (i: index position, s: first
// slice element of the item). (i, s) advance by the grid's step with one compare instead
// of a division per item: integer division costs ~20 instructions, more than the 16-byte
// copy of a row gather itself.
template <int V, typename IdxT, typename F>
MLXA_DEVICE void for_each_item(const GatherScatterArgs& a, F&& f) {
  const IdxT groups = (IdxT)(a.slice_n / V), total = (IdxT)(a.n / V);
  const IdxT step = grid_threads<IdxT>();
  const IdxT di = step / groups, dj = step - di * groups;
  IdxT g = global_thread<IdxT>();
  if (g >= total) return;
  IdxT i = g / groups, j = g - i * groups;
  for (; g < total; g += step) {
    f(g, i, j * V);
    i += di;
    j += dj;
    if (j >= groups) {
      j -= groups;
      ++i;
    }
  }
}

// One work item per V consecutive slice elements (V > 1: the planner proved that the
// innermost slice dimension is unit-stride, V-divisible, and every other stride a
// multiple of V; the kernel checked the base alignment).
template <typename T, int V, typename IdxT>
MLXA_DEVICE void gather_run(const GatherScatterArgs& a) {
  const T* src = (const T*)a.data;
  T* out = (T*)a.out;
  const int64_t* const st[1] = {a.slice_strides};
  for_each_item<V, IdxT>(a, [&](IdxT g, IdxT i, IdxT s) {
    IdxT off, pos, so[1];
    index_offset<true>(a, i, off, pos);
    slice_offsets<IdxT, 1>(s, a.slice_ndim, a.slice_shape, st, so);
    if constexpr (V == 1) out[g] = src[off + so[0]];
    else ((Vec<T, V>*)out)[g] = *(const Vec<T, V>*)(src + off + so[0]);
  });
}

template <typename T, typename IdxT>
MLXA_DEVICE void gather(const GatherScatterArgs& a) {
  constexpr int V = 16 / sizeof(T);
  if (a.vec > 1 && (((uintptr_t)a.data | (uintptr_t)a.out) & 15u) == 0) gather_run<T, V, IdxT>(a);
  else gather_run<T, 1, IdxT>(a);
}

template <typename T, typename Op, int V, typename IdxT>
MLXA_DEVICE void scatter_run(const GatherScatterArgs& a) {
  const T* upd = (const T*)a.data;
  T* out = (T*)a.out;
  const int64_t* const st[2] = {a.slice_strides, a.slice_data_strides};
  const bool unit = a.slice_data_strides[0] == 1;
  for_each_item<V, IdxT>(a, [&](IdxT, IdxT i, IdxT s) {
    IdxT off, pos, so[2];
    if (!index_offset<false>(a, i, off, pos)) return;
    slice_offsets<IdxT, 2>(s, a.slice_ndim, a.slice_shape, st, so);
    if constexpr (V == 1) atomic_update<Op>(out + off + so[0], upd[pos + so[1]]);
    else *(Vec<T, V>*)(out + off + so[0]) = load_group<T, V>(upd + pos + so[1], unit);
  });
}

template <typename T, typename Op, typename IdxT>
MLXA_DEVICE void scatter(const GatherScatterArgs& a) {
  constexpr int V = 16 / sizeof(T);
  if constexpr (std::is_same_v<Op, None>) {
    if (a.vec > 1 && (((uintptr_t)a.data | (uintptr_t)a.out) & 15u) == 0) {
      scatter_run<T, Op, V, IdxT>(a);
      return;
    }
  }
  scatter_run<T, Op, 1, IdxT>(a);
}

// ---- GatherAxis / ScatterAxis ---------------------------------------------------------
template <typename T, typename IdxT>
MLXA_DEVICE void gather_axis(const AxisArgs& a) {
  const T* src = (const T*)a.data;
  T* out = (T*)a.out;
  const int64_t* const st[2] = {a.strides[0], a.strides[1]};
  const int64_t hi = a.axis_size - 1;
  strided_for_each<IdxT, 2>((IdxT)a.n, a.ndim, a.shape, st, [&](IdxT i, const IdxT (&off)[2]) {
    const int64_t v = clamp_index(wrap(load_index(a.idx, (int64_t)off[1], a.idx_kind), a.axis_size), hi);
    out[i] = src[off[0] + (IdxT)v * (IdxT)a.axis_stride];
  });
}

template <typename T, typename Op, typename IdxT>
MLXA_DEVICE void scatter_axis(const AxisArgs& a) {
  const T* upd = (const T*)a.data;
  T* out = (T*)a.out;
  const int64_t* const st[3] = {a.strides[0], a.strides[1], a.strides[2]};
  strided_for_each<IdxT, 3>((IdxT)a.n, a.ndim, a.shape, st, [&](IdxT, const IdxT (&off)[3]) {
    const int64_t v = wrap(load_index(a.idx, (int64_t)off[1], a.idx_kind), a.axis_size);
    if (v >= 0 && v < a.axis_size) atomic_update<Op>(out + off[2] + (IdxT)v * (IdxT)a.axis_stride, upd[off[0]]);
  });
}

// ---- slices ----------------------------------------------------------------------------
// Grp: the 16-byte group path compiled in (the twin kernel leaves it out: two of its
// local index tables went to scratch on gfx908/gfx90a; cache writes are small)
template <typename T, typename Op, typename IdxT, bool Grp = true, class S>
MLXA_DEVICE void slice(const void* a_data, const void* a_start, void* a_out, const S& a) {
  constexpr int V = 16 / sizeof(T);
  int64_t dyn = 0;
#pragma unroll
  for (int k = 0; k < MLXA_DYN_MAX_AXES; ++k)
    if (k < a.n_dyn)
      dyn += clamp_index(load_index(a_start, k * a.start_stride, a.start_kind), a.dyn_hi[k]) * a.dyn_strides[k];
  const T* data = (const T*)a_data + (a.dyn_side == 0 ? dyn : 0);
  T* out = (T*)a_out + (a.dyn_side == 1 ? dyn : 0);
  const int64_t* const st[2] = {a.strides[0], a.strides[1]};
  const uintptr_t bases[2] = {(uintptr_t)data, (uintptr_t)out}, align[2] = {16, 16};
  if (Grp && a.vec > 1 && a.strides[1][0] == 1 && vector_groups<V, 2>(a.ndim, a.shape, st, bases, align, 0, 1)) {
    const Grouped<V, 2> g(a.shape, st);
    const int64_t* const gst[2] = {g.st[0], g.st[1]};
    const bool unit = a.strides[0][0] == 1;
    strided_for_each<IdxT, 2>((IdxT)a.n / V, a.ndim, g.shape, gst, [&](IdxT, const IdxT (&off)[2]) {
      const Vec<T, V> x = load_group<T, V>(data + off[0], unit);
      Vec<T, V>* o = (Vec<T, V>*)(out + off[1]);
      if constexpr (std::is_same_v<Op, None>) {
        *o = x;
      } else {
        Vec<T, V> y = *o;
#pragma unroll
        for (int k = 0; k < V; ++k) y.v[k] = combine<Op>(y.v[k], x.v[k]);
        *o = y;
      }
    });
    return;
  }
  strided_for_each<IdxT, 2>((IdxT)a.n, a.ndim, a.shape, st, [&](IdxT, const IdxT (&off)[2]) {
    T* o = out + off[1];
    if constexpr (std::is_same_v<Op, None>) *o = data[off[0]];
    else *o = combine<Op>(*o, data[off[0]]);
  });
}

// ---- MaskedScatter: count, scan, scatter ----------------------------------------------
// Block b.x of batch b.y owns mask elements [b.x * TILE, (b.x + 1) * TILE) of that batch;
// thread t the MLXA_MASKED_ITEMS consecutive ones at t * ITEMS, so ranks follow the
// row-major order: tile prefix (scan) + thread prefix (block scan) + running count.
#define MLXA_MASKED_THREADS 256
#define MLXA_MASKED_ITEMS (MLXA_MASKED_TILE / MLXA_MASKED_THREADS)

// Offset of inner element e through collapsed dims (innermost first).
MLXA_DEVICE int64_t inner_offset(int64_t e, int ndim, const int32_t* shape, const int64_t* strides) {
  if (ndim == 1) return e * strides[0];
  int64_t off = 0;
  for (int d = 0; d < ndim; ++d) {
    const int64_t q = e / shape[d];
    off += (e - q * shape[d]) * strides[d];
    e = q;
  }
  return off;
}

// The thread's true elements and their positions' base (all in this batch's frame).
MLXA_DEVICE int masked_thread_bits(const MaskedArgs& a, int64_t batch, int64_t first, unsigned* bits) {
  const uint8_t* m = (const uint8_t*)a.mask + batch * a.mask_bstride;
  int c = 0;
  unsigned b = 0;
#pragma unroll
  for (int i = 0; i < MLXA_MASKED_ITEMS; ++i) {
    const int64_t e = first + i;
    if (e < a.inner && m[inner_offset(e, a.mask_ndim, a.mask_shape, a.mask_strides)] != 0) {
      b |= 1u << i;
      ++c;
    }
  }
  *bits = b;
  return c;
}

// Exclusive prefix of one value per thread over the block (shared-memory Hillis-Steele;
// no wave intrinsics, so one kernel serves every wave width). Returns the block total.
template <typename T>
MLXA_DEVICE T block_exclusive_scan(T v, T* smem, T* excl) {
  const int t = thread_x();
  smem[t] = v;
  sync_block();
  for (int d = 1; d < MLXA_MASKED_THREADS; d <<= 1) {
    const T add = t >= d ? smem[t - d] : T(0);
    sync_block();
    smem[t] += add;
    sync_block();
  }
  const T total = smem[MLXA_MASKED_THREADS - 1];
  *excl = smem[t] - v;
  sync_block();
  return total;
}

MLXA_DEVICE void masked_count(const MaskedArgs& a) {
  __shared__ int32_t smem[MLXA_MASKED_THREADS];
  const int64_t batch = blockIdx.y, chunk = blockIdx.x;
  unsigned bits;
  const int c = masked_thread_bits(a, batch, chunk * MLXA_MASKED_TILE + thread_x() * MLXA_MASKED_ITEMS, &bits);
  int32_t excl;
  const int32_t total = block_exclusive_scan<int32_t>(c, smem, &excl);
  if (thread_x() == 0) ((int64_t*)a.counts)[batch * a.chunks + chunk] = total;
}

// One block per batch: exclusive prefix of its tile counts, in place.
MLXA_DEVICE void masked_scan(const MaskedArgs& a) {
  __shared__ int64_t smem[MLXA_MASKED_THREADS];
  const int64_t batch = blockIdx.x;
  int64_t* cnt = (int64_t*)a.counts + batch * a.chunks;
  int64_t carry = 0;
  for (int64_t j0 = 0; j0 < a.chunks; j0 += MLXA_MASKED_THREADS) {
    const int64_t j = j0 + thread_x();
    const int64_t v = j < a.chunks ? cnt[j] : 0;
    int64_t excl;
    const int64_t total = block_exclusive_scan<int64_t>(v, smem, &excl);
    if (j < a.chunks) cnt[j] = carry + excl;
    carry += total;
  }
  // more true elements than the source has: the planner's check raises on the host
  if (thread_x() == 0 && carry > a.src_inner) *(int32_t*)((int64_t*)a.counts + a.batch * a.chunks) = 1;
}

template <typename T>
MLXA_DEVICE void masked_scatter(const MaskedArgs& a) {
  __shared__ int32_t smem[MLXA_MASKED_THREADS];
  const int64_t batch = blockIdx.y, chunk = blockIdx.x;
  const int64_t first = chunk * MLXA_MASKED_TILE + thread_x() * MLXA_MASKED_ITEMS;
  unsigned bits;
  const int c = masked_thread_bits(a, batch, first, &bits);
  int32_t excl;
  block_exclusive_scan<int32_t>(c, smem, &excl);
  if (bits == 0) return;
  int64_t k = ((const int64_t*)a.counts)[batch * a.chunks + chunk] + excl;
  const T* src = (const T*)a.src + batch * a.src_bstride;
  T* out = (T*)a.out + batch * a.inner + first;
#pragma unroll
  for (int i = 0; i < MLXA_MASKED_ITEMS; ++i) {
    if (bits & (1u << i)) {
      if (k < a.src_inner) out[i] = src[inner_offset(k, a.src_ndim, a.src_shape, a.src_strides)];
      ++k;
    }
  }
}

}  // namespace idx
}  // namespace mlxa

#define MLXA_IDX_BLOCK 256   // kernel_tables/indexing.py BLOCK
#define MLXA_GATHER(name, T, IdxT) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_IDX_BLOCK) name(GatherScatterArgs a) { mlxa::idx::gather<T, IdxT>(a); }
#define MLXA_SCATTER(name, T, Op, IdxT)                                               \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_IDX_BLOCK) name(GatherScatterArgs a) {      \
    mlxa::idx::scatter<T, mlxa::idx::Op, IdxT>(a);                                     \
  }
#define MLXA_GATHER_AXIS(name, T, IdxT) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_IDX_BLOCK) name(AxisArgs a) { mlxa::idx::gather_axis<T, IdxT>(a); }
#define MLXA_SCATTER_AXIS(name, T, Op, IdxT)                                          \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_IDX_BLOCK) name(AxisArgs a) {               \
    mlxa::idx::scatter_axis<T, mlxa::idx::Op, IdxT>(a);                                \
  }
#define MLXA_SLICE(name, T, Op, IdxT)                                                  \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_IDX_BLOCK) name(SliceArgs a) {               \
    mlxa::idx::slice<T, mlxa::idx::Op, IdxT>(a.data, a.start, a.out, a);                \
  }
// Two slice copies (blockIdx.y 0: the first, 1: the second), each over the grid's x extent.
// The parameters lay out as a SliceArgs for the first after the second's pointers, then
// the second's shape.
#define MLXA_SLICE_TWIN(name, T, IdxT)                                                            \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_IDX_BLOCK) name(const void* data1, const void* start1, \
                                                           void* out1, SliceArgs a, SliceShape b) { \
    if (blockIdx.y == 0) mlxa::idx::slice<T, mlxa::idx::None, IdxT, false>(a.data, a.start, a.out, a); \
    else mlxa::idx::slice<T, mlxa::idx::None, IdxT, false>(data1, start1, out1, b);                \
  }

#define MLXA_MASKED_COUNT(name) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_MASKED_THREADS) name(MaskedArgs a) { mlxa::idx::masked_count(a); }
#define MLXA_MASKED_SCAN(name) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_MASKED_THREADS) name(MaskedArgs a) { mlxa::idx::masked_scan(a); }
#define MLXA_MASKED_SCATTER(name, T) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_MASKED_THREADS) name(MaskedArgs a) { mlxa::idx::masked_scatter<T>(a); }

#include "indexing.inc"
