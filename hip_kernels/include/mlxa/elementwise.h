// Elementwise kernel bodies shared by the unary, copy and binary families.
// Output is always row-contiguous. Each element is read and written by the same
// thread, so out may alias an input of the same element size (buffer donation).
//
// Strided ("g") variants decompose the flat output index over the collapsed shape,
// stored innermost dimension first (see args.h) so the unrolled loop indexes the
// by-value argument arrays with constants only.
#pragma once

#include "args.h"
#include "platform.h"
#include "types.h"

namespace mlxa {

namespace op {
struct Identity {
  template <typename T> MLXA_DEVICE T operator()(T x) const { return x; }
};
}  // namespace op

// One element through Op: same-type copies move bits untouched (NaN payloads kept);
// float16 -> uint32 wraps from int64, as MLX's CPU build converts that pair.
template <typename Op, typename Out, typename In>
MLXA_DEVICE Out apply(In x) {
  constexpr bool copy = std::is_same_v<Op, op::Identity>;
  if constexpr (copy && std::is_same_v<In, Out>) return x;
  else if constexpr (copy && std::is_same_v<In, half> && std::is_same_v<Out, uint32_t>)
    return (uint32_t)float_to_int<int64_t>(widen(x));
  else return cast<Out>(Op{}(widen(x)));
}

template <typename Op, typename In, typename Out>
MLXA_DEVICE void unary_v(const UnaryVArgs& a) {
  constexpr int N = vec_width<In, Out>;
  const In* in = (const In*)a.in;
  Out* out = (Out*)a.out;
  const int64_t step = grid_threads<int64_t>();
  int64_t start = 0;
  if ((((uintptr_t)in | (uintptr_t)out) & 15u) == 0) {
    const int64_t nvec = a.n / N;
    for (int64_t i = global_thread<int64_t>(); i < nvec; i += step) {
      Vec<In, N> x = ((const Vec<In, N>*)in)[i];
      Vec<Out, N> y;
#pragma unroll
      for (int k = 0; k < N; ++k) y.v[k] = apply<Op, Out>(x.v[k]);
      ((Vec<Out, N>*)out)[i] = y;
    }
    start = nvec * N;
  }
  for (int64_t i = start + global_thread<int64_t>(); i < a.n; i += step)
    out[i] = apply<Op, Out>(in[i]);
}

// Strided kernels walk tiles of ITEMS * blockDim consecutive output elements: a
// thread decomposes its first index over the collapsed shape once, then steps by
// blockDim along the innermost dimension and decomposes again only when it wraps
// (rare once that dimension is at least blockDim long). Per-element div/mod was the
// cost that held the first version to half the memory roofline on broadcasts.
constexpr int kStridedItems = 4;

// Offsets of NS strided operands for flat output index i; returns i's coordinate
// along the innermost dimension.
template <typename IdxT, int NS>
MLXA_DEVICE IdxT locate(IdxT i, int ndim, const int32_t* shape,
                        const int64_t* const (&strides)[NS], IdxT (&off)[NS]) {
  IdxT rest = i, c0 = 0;
#pragma unroll
  for (int k = 0; k < NS; ++k) off[k] = 0;
#pragma unroll
  for (int d = 0; d < MLXA_MAX_DIMS; ++d) {
    if (d < ndim) {
      const IdxT s = (IdxT)shape[d];
      const IdxT c = rest % s;
      if (d == 0) c0 = c;
#pragma unroll
      for (int k = 0; k < NS; ++k) off[k] += c * (IdxT)strides[k][d];
      rest /= s;
    }
  }
  return c0;
}

// Calls f(out_index, offsets) for every output element, tile by tile.
template <typename IdxT, int NS, typename F>
MLXA_DEVICE void strided_for_each(IdxT n, int ndim, const int32_t* shape,
                                  const int64_t* const (&strides)[NS], F f) {
  const IdxT bd = (IdxT)blockDim.x;
  const IdxT tile = bd * kStridedItems;
  const IdxT inner = ndim > 0 ? (IdxT)shape[0] : 1;
  IdxT step[NS];
#pragma unroll
  for (int k = 0; k < NS; ++k) step[k] = ndim > 0 ? bd * (IdxT)strides[k][0] : 0;
  for (IdxT base = (IdxT)blockIdx.x * tile; base < n; base += (IdxT)gridDim.x * tile) {
    IdxT i = base + (IdxT)threadIdx.x, c0 = inner;
    IdxT off[NS];
    // one inlined decomposition site per traversal keeps code size (and the AMD
    // compile time of ~900 instantiations) down
    for (int it = 0; it < kStridedItems && i < n; ++it, i += bd, c0 += bd) {
      if (c0 >= inner) {
        c0 = locate<IdxT, NS>(i, ndim, shape, strides, off);
      } else {
#pragma unroll
        for (int k = 0; k < NS; ++k) off[k] += step[k];
      }
      f(i, off);
    }
  }
}

// Vector path of the strided kernels: when the innermost dimension splits into groups
// of V and every operand either walks it contiguously (stride 1, with V-aligned outer
// strides and base) or broadcasts along it (stride 0), the same traversal runs over
// groups with V-wide loads and stores. Decided once per launch from the arguments.
template <int V, int NS>
MLXA_DEVICE bool vector_groups(int ndim, const int32_t* shape, const int64_t* const (&strides)[NS],
                               const uintptr_t (&bases)[NS], const uintptr_t (&align)[NS],
                               uintptr_t out, uintptr_t out_align) {
  if (V == 1 || ndim == 0 || shape[0] % V != 0 || (out & (out_align - 1)) != 0) return false;
#pragma unroll
  for (int k = 0; k < NS; ++k) {
    const int64_t s0 = strides[k][0];
    if (s0 == 0) continue;
    if (s0 != 1 || (bases[k] & (align[k] - 1)) != 0) return false;
#pragma unroll
    for (int d = 1; d < MLXA_MAX_DIMS; ++d)
      if (d < ndim && strides[k][d] % V != 0) return false;
  }
  return true;
}

// The group view of a layout: innermost extent / V, innermost strides * V.
template <int V, int NS>
struct Grouped {
  int32_t shape[MLXA_MAX_DIMS];
  int64_t st[NS][MLXA_MAX_DIMS];
  MLXA_DEVICE Grouped(const int32_t* sh, const int64_t* const (&strides)[NS]) {
#pragma unroll
    for (int d = 0; d < MLXA_MAX_DIMS; ++d) {
      shape[d] = d == 0 ? sh[0] / V : sh[d];
#pragma unroll
      for (int k = 0; k < NS; ++k) st[k][d] = d == 0 ? strides[k][0] * V : strides[k][d];
    }
  }
};

// V elements starting at p: one vector load when the operand walks the group, else one
// element repeated (broadcast along the innermost dimension).
template <typename T, int V>
MLXA_DEVICE Vec<T, V> load_group(const T* p, bool unit) {
  if (unit) return *(const Vec<T, V>*)p;
  Vec<T, V> r;
  const T x = *p;
#pragma unroll
  for (int k = 0; k < V; ++k) r.v[k] = x;
  return r;
}

template <typename Op, typename In, typename Out, typename IdxT>
MLXA_DEVICE void unary_g(const UnaryGArgs& a) {
  constexpr int V = vec_width<In, Out>;
  const In* in = (const In*)a.in;
  Out* out = (Out*)a.out;
  const int64_t* const strides[1] = {a.strides};
  const uintptr_t bases[1] = {(uintptr_t)in}, align[1] = {sizeof(In) * V};
  if (vector_groups<V, 1>(a.ndim, a.shape, strides, bases, align, (uintptr_t)out, sizeof(Out) * V)) {
    const Grouped<V, 1> g(a.shape, strides);
    const int64_t* const gst[1] = {g.st[0]};
    const bool unit = a.strides[0] == 1;
    strided_for_each<IdxT, 1>((IdxT)a.n / V, a.ndim, g.shape, gst, [&](IdxT gi, const IdxT (&off)[1]) {
      const Vec<In, V> x = load_group<In, V>(in + off[0], unit);
      Vec<Out, V> y;
#pragma unroll
      for (int k = 0; k < V; ++k) y.v[k] = apply<Op, Out>(x.v[k]);
      ((Vec<Out, V>*)out)[gi] = y;
    });
    return;
  }
  strided_for_each<IdxT, 1>((IdxT)a.n, a.ndim, a.shape, strides,
                            [&](IdxT i, const IdxT (&off)[1]) { out[i] = apply<Op, Out>(in[off[0]]); });
}

// Binary contiguous: each side is either a single element (scalar) or n elements.
template <typename Op, typename In, typename Out, bool AScalar, bool BScalar>
MLXA_DEVICE void binary_v(const BinaryVArgs& p) {
  constexpr int N = vec_width<In, Out>;
  const In* a = (const In*)p.a;
  const In* b = (const In*)p.b;
  Out* out = (Out*)p.out;
  const int64_t step = grid_threads<int64_t>();
  int64_t start = 0;
  const uintptr_t addr = (AScalar ? 0 : (uintptr_t)a) | (BScalar ? 0 : (uintptr_t)b) | (uintptr_t)out;
  if ((addr & 15u) == 0) {
    const int64_t nvec = p.n / N;
    Vec<In, N> x, y;
    if constexpr (AScalar) {
#pragma unroll
      for (int k = 0; k < N; ++k) x.v[k] = a[0];
    }
    if constexpr (BScalar) {
#pragma unroll
      for (int k = 0; k < N; ++k) y.v[k] = b[0];
    }
    for (int64_t i = global_thread<int64_t>(); i < nvec; i += step) {
      if constexpr (!AScalar) x = ((const Vec<In, N>*)a)[i];
      if constexpr (!BScalar) y = ((const Vec<In, N>*)b)[i];
      Vec<Out, N> z;
#pragma unroll
      for (int k = 0; k < N; ++k) z.v[k] = cast<Out>(Op{}(widen(x.v[k]), widen(y.v[k])));
      ((Vec<Out, N>*)out)[i] = z;
    }
    start = nvec * N;
  }
  for (int64_t i = start + global_thread<int64_t>(); i < p.n; i += step)
    out[i] = cast<Out>(Op{}(widen(a[AScalar ? 0 : i]), widen(b[BScalar ? 0 : i])));
}

template <typename Op, typename In, typename Out, typename IdxT>
MLXA_DEVICE void binary_g(const BinaryGArgs& p) {
  constexpr int V = vec_width<In, Out>;
  const In* a = (const In*)p.a;
  const In* b = (const In*)p.b;
  Out* out = (Out*)p.out;
  const int64_t* const strides[2] = {p.a_strides, p.b_strides};
  const uintptr_t bases[2] = {(uintptr_t)a, (uintptr_t)b}, align[2] = {sizeof(In) * V, sizeof(In) * V};
  if (vector_groups<V, 2>(p.ndim, p.shape, strides, bases, align, (uintptr_t)out, sizeof(Out) * V)) {
    const Grouped<V, 2> g(p.shape, strides);
    const int64_t* const gst[2] = {g.st[0], g.st[1]};
    const bool au = p.a_strides[0] == 1, bu = p.b_strides[0] == 1;
    strided_for_each<IdxT, 2>((IdxT)p.n / V, p.ndim, g.shape, gst, [&](IdxT gi, const IdxT (&off)[2]) {
      const Vec<In, V> x = load_group<In, V>(a + off[0], au);
      const Vec<In, V> y = load_group<In, V>(b + off[1], bu);
      Vec<Out, V> z;
#pragma unroll
      for (int k = 0; k < V; ++k) z.v[k] = cast<Out>(Op{}(widen(x.v[k]), widen(y.v[k])));
      ((Vec<Out, V>*)out)[gi] = z;
    });
    return;
  }
  strided_for_each<IdxT, 2>((IdxT)p.n, p.ndim, p.shape, strides, [&](IdxT i, const IdxT (&off)[2]) {
    out[i] = cast<Out>(Op{}(widen(a[off[0]]), widen(b[off[1]])));
  });
}

}  // namespace mlxa

// Kernel definitions used by the generated <family>.inc files: one extern "C" symbol
// per table entry, each a thin wrapper over the templates above.
// Launchers use exactly this block size (kernel_table.ELEMENTWISE_BLOCK): 8 waves of 32
// or 4 of 64; the bound lets the compiler budget registers for it.
#define MLXA_BLOCK_MAX 256
#define MLXA_UNARY_V(name, Op, In, Out) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_BLOCK_MAX) name(UnaryVArgs a) { mlxa::unary_v<Op, In, Out>(a); }
#define MLXA_UNARY_G(name, Op, In, Out, IdxT) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_BLOCK_MAX) name(UnaryGArgs a) { mlxa::unary_g<Op, In, Out, IdxT>(a); }
#define MLXA_BINARY_V(name, Op, In, Out, AScalar, BScalar)                               \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_BLOCK_MAX) name(BinaryVArgs a) {              \
    mlxa::binary_v<Op, In, Out, AScalar, BScalar>(a);                                    \
  }
#define MLXA_BINARY_G(name, Op, In, Out, IdxT) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_BLOCK_MAX) name(BinaryGArgs a) { mlxa::binary_g<Op, In, Out, IdxT>(a); }
