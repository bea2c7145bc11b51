// Reduce family: MLX's Reduce (sum, prod, min, max, and, or over any axes) and
// ArgReduce (argmin, argmax over one axis), for every dtype MLX accepts.
//
// Layouts (chosen by mlx_amd/runtime/ops/reduce.py after collapsing dimensions):
//   row   the innermost reduced dim is walked by a group of threads per output (a part of
//         a wave, a wave or the whole block), 16-byte loads when it is contiguous; other
//         reduced dims are an outer loop; splits write partials that a second row pass
//         over the [output][split] temporary finishes (deterministic, no atomics).
//   col   the innermost kept dim is walked by threads (V columns each, coalesced), the
//         reduced dims by the block's other threads, combined through shared memory.
//   seq   one thread per output, in MLX's element order: complex min/max/arg*, whose
//         NaN rules depend on the order in which elements are met.
// Accumulation follows MLX's CPU: integers of <= 4 bytes in (wrapping) int32, 64-bit
// integers in their own type, 16-bit floats in float, the rest in their own type.
#include <limits>
#include <type_traits>

#include "mlxa/reduce_args.h"
#include "mlxa/types.h"
#include "mlxa/wave.h"

namespace mlxa::red {

// ---- complex arithmetic (named: independent of operators types.h may declare) --------
MLXA_DEVICE complex64 cadd(complex64 a, complex64 b) { return {a.real + b.real, a.imag + b.imag}; }
MLXA_DEVICE complex64 cmul(complex64 a, complex64 b) {
  return {a.real * b.real - a.imag * b.imag, a.real * b.imag + a.imag * b.real};
}

template <typename T> MLXA_DEVICE bool nan_of(T x) {
  if constexpr (std::is_floating_point_v<T>) return x != x;
  else return false;
}
MLXA_DEVICE bool nan_of(complex64 x) { return x.real != x.real || x.imag != x.imag; }

// MLX returns the canonical quiet NaN from min/max whenever a NaN was met.
template <typename T> MLXA_DEVICE T canonical_nan() {
  if constexpr (std::is_same_v<T, double>) return __longlong_as_double(0x7ff8000000000000ll);
  else return uint_as_float(0x7fc00000u);
}

template <typename T> MLXA_DEVICE T lowest() {
  if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::lowest();
}
template <typename T> MLXA_DEVICE T highest() {
  if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::max();
}

// ---- reduction ops: identity, element load (In -> Acc), combine, finish (Acc -> Out) --
struct Sum {
  template <typename A> static MLXA_DEVICE A identity() {
    if constexpr (std::is_same_v<A, complex64>) return complex64{0.0f, 0.0f};
    else return A(0);
  }
  template <typename A, typename In> static MLXA_DEVICE A load(In x, uint64_t) {
    if constexpr (std::is_same_v<A, complex64>) return x;
    else return (A)widen(x);
  }
  template <typename A> static MLXA_DEVICE A combine(A a, A b) {
    if constexpr (std::is_integral_v<A>) return wrap_add(a, b);
    else if constexpr (std::is_same_v<A, complex64>) return cadd(a, b);
    else return a + b;
  }
  template <typename Out, typename A> static MLXA_DEVICE Out finish(A a) {
    if constexpr (std::is_same_v<A, complex64>) return a;
    else return cast<Out>(a);
  }
};

struct Prod {
  template <typename A> static MLXA_DEVICE A identity() {
    if constexpr (std::is_same_v<A, complex64>) return complex64{1.0f, 0.0f};
    else return A(1);
  }
  template <typename A, typename In> static MLXA_DEVICE A load(In x, uint64_t m) { return Sum::load<A>(x, m); }
  template <typename A> static MLXA_DEVICE A combine(A a, A b) {
    if constexpr (std::is_integral_v<A>) return wrap_mul(a, b);
    else if constexpr (std::is_same_v<A, complex64>) return cmul(a, b);
    else return a * b;
  }
  template <typename Out, typename A> static MLXA_DEVICE Out finish(A a) { return Sum::finish<Out>(a); }
};

// NaN wins (either side), as in MLX; otherwise the larger / smaller.
struct Max {
  template <typename A> static MLXA_DEVICE A identity() { return lowest<A>(); }
  template <typename A, typename In> static MLXA_DEVICE A load(In x, uint64_t) { return (A)widen(x); }
  template <typename A> static MLXA_DEVICE A combine(A a, A b) { return (nan_of(a) || a > b) ? a : b; }
  template <typename Out, typename A> static MLXA_DEVICE Out finish(A a) {
    if constexpr (std::is_floating_point_v<A>) {
      if (a != a) return cast<Out>(canonical_nan<A>());
    }
    return cast<Out>(a);
  }
};
struct Min {
  template <typename A> static MLXA_DEVICE A identity() { return highest<A>(); }
  template <typename A, typename In> static MLXA_DEVICE A load(In x, uint64_t) { return (A)widen(x); }
  template <typename A> static MLXA_DEVICE A combine(A a, A b) { return (nan_of(a) || a < b) ? a : b; }
  template <typename Out, typename A> static MLXA_DEVICE Out finish(A a) { return Max::finish<Out>(a); }
};

// and/or read every dtype as unsigned bits of its size: an element is nonzero when any
// bit of `mask` is set (the sign bit is left out for floats: -0.0 is zero, NaN is not).
struct And {
  template <typename A> static MLXA_DEVICE A identity() { return true; }
  template <typename A, typename In> static MLXA_DEVICE A load(In x, uint64_t m) { return (x & (In)m) != 0; }
  template <typename A> static MLXA_DEVICE A combine(A a, A b) { return a && b; }
  template <typename Out, typename A> static MLXA_DEVICE Out finish(A a) { return a; }
};
struct Or {
  template <typename A> static MLXA_DEVICE A identity() { return false; }
  template <typename A, typename In> static MLXA_DEVICE A load(In x, uint64_t m) { return (x & (In)m) != 0; }
  template <typename A> static MLXA_DEVICE A combine(A a, A b) { return a || b; }
  template <typename Out, typename A> static MLXA_DEVICE Out finish(A a) { return a; }
};

// ---- shuffles for every accumulator type ---------------------------------------------
template <int W, typename T>
MLXA_DEVICE T xor_shuffle(T v, int m) {
  if constexpr (std::is_same_v<T, complex64>) {
    return complex64{wave_shfl_xor<W>(v.real, m), wave_shfl_xor<W>(v.imag, m)};
  } else if constexpr (std::is_same_v<T, bool>) {
    return wave_shfl_xor<W>((int)v, m) != 0;
  } else if constexpr (std::is_integral_v<T> && sizeof(T) == 8) {
    return (T)wave_shfl_xor<W>((long long)v, m);
  } else if constexpr (std::is_integral_v<T> && sizeof(T) < 4) {
    return (T)wave_shfl_xor<W>((int)v, m);
  } else if constexpr (std::is_same_v<T, int32_t> || std::is_same_v<T, uint32_t>) {
    return (T)wave_shfl_xor<W>((int)v, m);
  } else {
    return wave_shfl_xor<W>(v, m);   // float, double
  }
}

// Combine over a group of G threads (G a power of two <= W, or G == blockDim.x, a
// multiple of W). Every thread of the block calls it; lane 0 of the group gets the result.
template <int W, typename T, typename C>
MLXA_DEVICE T group_reduce(T v, int G, T* scratch, C combine) {
  const int width = G < W ? G : W;
  for (int m = width / 2; m > 0; m >>= 1) v = combine(v, xor_shuffle<W>(v, m));
  if (G > W) {
    const int nw = G / W;
    if (wave_lane<W>() == 0) scratch[wave_index<W>()] = v;
    sync_block();
    if (threadIdx.x == 0) {
      for (int i = 1; i < nw; ++i) v = combine(v, scratch[i]);
    }
    sync_block();
  }
  return v;
}

// Offset of output o from its kept dims (outermost first).
MLXA_DEVICE int64_t dims_offset(int64_t o, int nd, const int32_t* shape, const int64_t* strides, bool small) {
  int64_t off = 0;
  if (small) {
    uint32_t r = (uint32_t)o;
    for (int d = nd - 1; d >= 0; --d) {
      const uint32_t s = (uint32_t)shape[d];
      const uint32_t q = r / s;
      off += (int64_t)(r - q * s) * strides[d];
      r = q;
    }
  } else {
    for (int d = nd - 1; d >= 0; --d) {
      const int64_t s = shape[d];
      const int64_t q = o / s;
      off += (o - q * s) * strides[d];
      o = q;
    }
  }
  return off;
}

// Calls f(i, x) for the elements i in [i0, i1) of the row at p (stride rs) that lane
// `lane` of a group of G owns, in increasing i for each lane. Contiguous rows go through
// 16-byte loads after a scalar head that reaches alignment.
template <typename In, typename F>
MLXA_DEVICE void walk_row(const In* p, int64_t i0, int64_t i1, int64_t rs, int lane, int G, F&& f) {
  constexpr int V = 16 / sizeof(In);
  if (rs != 1 || V == 1) {
    for (int64_t i = i0 + lane; i < i1; i += G) f(i, p[i * rs]);
    return;
  }
  const int64_t n = i1 - i0;
  if (n <= 0) return;
  const In* q = p + i0;
  int64_t head = (int64_t)(((16u - ((uintptr_t)q & 15u)) & 15u) / sizeof(In));
  if (head > n) head = n;
  for (int64_t t = lane; t < head; t += G) f(i0 + t, q[t]);
  const int64_t nv = (n - head) / V;
  const Vec<In, V>* vp = (const Vec<In, V>*)(q + head);
  const int64_t vbase = i0 + head;
  int64_t k = lane;
  for (; k + 3 * G < nv; k += 4 * G) {
    const Vec<In, V> x0 = vp[k], x1 = vp[k + G], x2 = vp[k + 2 * G], x3 = vp[k + 3 * G];
#pragma unroll
    for (int e = 0; e < V; ++e) f(vbase + k * V + e, x0.v[e]);
#pragma unroll
    for (int e = 0; e < V; ++e) f(vbase + (k + G) * V + e, x1.v[e]);
#pragma unroll
    for (int e = 0; e < V; ++e) f(vbase + (k + 2 * G) * V + e, x2.v[e]);
#pragma unroll
    for (int e = 0; e < V; ++e) f(vbase + (k + 3 * G) * V + e, x3.v[e]);
  }
  for (; k < nv; k += G) {
    const Vec<In, V> x = vp[k];
#pragma unroll
    for (int e = 0; e < V; ++e) f(vbase + k * V + e, x.v[e]);
  }
  for (int64_t t = head + nv * V + lane; t < n; t += G) f(i0 + t, q[t]);
}

// ---- row kernel -------------------------------------------------------------------------
template <typename Op, typename In, typename Acc, typename Out, int W>
MLXA_DEVICE void reduce_row(const ReduceRowArgs& a) {
  __shared__ Acc scratch[32];
  const int G = a.group;
  const int lane = (int)threadIdx.x % G;
  const int64_t o = (int64_t)blockIdx.x * (int64_t)(blockDim.x / G) + (int64_t)threadIdx.x / G;
  const int s = (int)blockIdx.y;
  const In* in = (const In*)a.in;
  const uint64_t mask = a.mask;
  Acc acc = Op::template identity<Acc>();
  if (o < a.n_out) {
    const bool small = a.n_out <= 0x7fffffffll;
    const int64_t base = dims_offset(o, a.kept_ndim, a.kept_shape, a.kept_strides, small);
    int64_t j0 = 0, j1 = a.outer, i0 = 0, i1 = a.row_len;
    if (a.splits > 1) {
      if (a.split_outer) {
        j0 = (int64_t)s * a.chunk;
        j1 = j0 + a.chunk < j1 ? j0 + a.chunk : j1;
      } else {
        i0 = (int64_t)s * a.chunk;
        i1 = i0 + a.chunk < i1 ? i0 + a.chunk : i1;
      }
    }
    const bool rsmall = a.outer * a.row_len <= 0x7fffffffll;
    if (a.flat) {
      // short rows: threads walk the flattened (outer, row) index so all of them work
      const int64_t L = a.row_len;
      for (int64_t k = j0 * L + lane; k < j1 * L; k += G) {
        const int64_t j = k / L, i = k - j * L;
        const int64_t off = base + dims_offset(j, a.red_ndim, a.red_shape, a.red_strides, rsmall) + i * a.row_stride;
        acc = Op::combine(acc, Op::template load<Acc>(in[off], mask));
      }
    } else {
      for (int64_t j = j0; j < j1; ++j) {
        const In* p = in + base + dims_offset(j, a.red_ndim, a.red_shape, a.red_strides, rsmall);
        walk_row(p, i0, i1, a.row_stride, lane, G,
                 [&](int64_t, In x) { acc = Op::combine(acc, Op::template load<Acc>(x, mask)); });
      }
    }
  }
  acc = group_reduce<W>(acc, G, scratch, [](Acc x, Acc y) { return Op::combine(x, y); });
  if (o < a.n_out && lane == 0) {
    if (a.partial) ((Acc*)a.out)[o * a.splits + s] = acc;
    else ((Out*)a.out)[o] = Op::template finish<Out>(acc);
  }
}

// ---- column kernel (no wave operations) ----------------------------------------------
#define MLXA_REDUCE_COL_THREADS 256

template <typename Op, typename In, typename Acc, typename Out>
MLXA_DEVICE void reduce_col(const ReduceColArgs& a) {
  constexpr int V = 16 / sizeof(In);
  __shared__ Acc sm[MLXA_REDUCE_COL_THREADS * V];
  const int bx = a.bx, by = a.by;
  const int tx = (int)threadIdx.x % bx, ty = (int)threadIdx.x / bx;
  const int64_t b = (int64_t)blockIdx.x / a.col_blocks;
  const int64_t c0 = ((int64_t)(blockIdx.x % a.col_blocks) * bx + tx) * V;
  const int s = (int)blockIdx.y;
  const In* in = (const In*)a.in;
  const uint64_t mask = a.mask;
  const int64_t cs = a.col_stride;

  // 16-byte loads when every row of columns this block reads starts aligned
  bool vec = V > 1 && cs == 1 && ((uintptr_t)in & 15u) == 0;
  for (int d = 0; d < MLXA_REDUCE_DIMS; ++d) {
    if (d < a.batch_ndim && a.batch_strides[d] % V != 0) vec = false;
    if (d < a.red_ndim && a.red_strides[d] % V != 0) vec = false;
  }
  const int cn = c0 >= a.n_cols ? 0 : (a.n_cols - c0 < V ? (int)(a.n_cols - c0) : V);
  vec = vec && cn == V;

  Acc acc[V];
#pragma unroll
  for (int e = 0; e < V; ++e) acc[e] = Op::template identity<Acc>();
  if (cn > 0 && b < a.n_batch) {
    const bool small = a.n_batch <= 0x7fffffffll && a.n_red <= 0x7fffffffll;
    const In* p = in + dims_offset(b, a.batch_ndim, a.batch_shape, a.batch_strides, small) + c0 * cs;
    int64_t j0 = (int64_t)s * a.chunk, j1 = j0 + a.chunk < a.n_red ? j0 + a.chunk : a.n_red;
    const bool one = a.red_ndim == 1;
    const int64_t rs0 = a.red_strides[0];
    auto row_at = [&](int64_t j) {
      return p + (one ? j * rs0 : dims_offset(j, a.red_ndim, a.red_shape, a.red_strides, small));
    };
    if (vec && one) {
      // several independent 16-byte loads in flight per thread
#pragma unroll 4
      for (int64_t j = j0 + ty; j < j1; j += by) {
        const Vec<In, V> x = *(const Vec<In, V>*)(p + j * rs0);
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = Op::combine(acc[e], Op::template load<Acc>(x.v[e], mask));
      }
    } else if (vec) {
      // not unrolled: four inlined copies of dims_offset's divisions raise the register
      // pressure of the 1-byte kernels (16 accumulators) until gfx90a keeps a stack frame
      for (int64_t j = j0 + ty; j < j1; j += by) {
        const Vec<In, V> x = *(const Vec<In, V>*)row_at(j);
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = Op::combine(acc[e], Op::template load<Acc>(x.v[e], mask));
      }
    } else {
      for (int64_t j = j0 + ty; j < j1; j += by) {
        const In* q = row_at(j);
#pragma unroll
        for (int e = 0; e < V; ++e)
          if (e < cn) acc[e] = Op::combine(acc[e], Op::template load<Acc>(q[e * cs], mask));
      }
    }
  }
  if (by > 1) {
#pragma unroll
    for (int e = 0; e < V; ++e) sm[threadIdx.x * V + e] = acc[e];
    sync_block();
    if (ty == 0) {
      for (int t = 1; t < by; ++t) {
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = Op::combine(acc[e], sm[(t * bx + tx) * V + e]);
      }
    }
  }
  if (ty == 0 && b < a.n_batch) {
    // unrolled with a guard, not `e < cn`: a runtime index into acc would put it in scratch
#pragma unroll
    for (int e = 0; e < V; ++e) {
      if (e < cn) {
        const int64_t o = b * a.n_cols + c0 + e;
        if (a.partial) ((Acc*)a.out)[o * a.splits + s] = acc[e];
        else ((Out*)a.out)[o] = Op::template finish<Out>(acc[e]);
      }
    }
  }
}

// ---- sequential kernel: complex min/max in MLX's order -----------------------------------
MLXA_DEVICE bool cgreater(complex64 a, complex64 b) { return a.real > b.real || (a.real == b.real && a.imag > b.imag); }
MLXA_DEVICE bool cless(complex64 a, complex64 b) { return a.real < b.real || (a.real == b.real && a.imag < b.imag); }

template <bool IsMax>
MLXA_DEVICE void reduce_seq_complex(const ReduceRowArgs& a) {
  const int64_t o = global_thread<int64_t>();
  if (o >= a.n_out) return;
  const complex64* in = (const complex64*)a.in;
  const complex64* p = in + dims_offset(o, a.kept_ndim, a.kept_shape, a.kept_strides, false);
  // MLX starts from (-inf, 0) / (inf, 0); a NaN element always replaces the running value,
  // anything else replaces it when lexicographically beyond it; a NaN left at the end
  // comes out as (nan, 0).
  complex64 acc{IsMax ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity(), 0.0f};
  for (int64_t j = 0; j < a.outer; ++j) {
    const complex64* q = p + dims_offset(j, a.red_ndim, a.red_shape, a.red_strides, false);
    for (int64_t i = 0; i < a.row_len; ++i) {
      const complex64 x = q[i * a.row_stride];
      if (nan_of(x) || (IsMax ? cgreater(x, acc) : cless(x, acc))) acc = x;
    }
  }
  if (nan_of(acc)) acc = complex64{canonical_nan<float>(), 0.0f};
  ((complex64*)a.out)[o] = acc;
}

// ---- ArgReduce ------------------------------------------------------------------------
template <typename T>
struct ArgPair {
  T v;
  uint32_t i;
};

// a strictly preferable to b: NaN beats numbers (first NaN wins), then the larger
// (smaller) value, then the lower index: MLX's first-index rule.
template <bool IsMax, typename T>
MLXA_DEVICE bool arg_better(T av, uint32_t ai, T bv, uint32_t bi) {
  if constexpr (std::is_floating_point_v<T>) {
    const bool an = av != av, bn = bv != bv;
    if (an || bn) return an && (!bn || ai < bi);
  }
  if (IsMax ? av > bv : av < bv) return true;
  return av == bv && ai < bi;
}

template <bool IsMax, typename T>
MLXA_DEVICE ArgPair<T> arg_combine(ArgPair<T> a, ArgPair<T> b) {
  return arg_better<IsMax>(a.v, a.i, b.v, b.i) ? a : b;
}

template <int W, typename T>
MLXA_DEVICE ArgPair<T> xor_shuffle(ArgPair<T> p, int m) {
  return ArgPair<T>{xor_shuffle<W>(p.v, m), (uint32_t)wave_shfl_xor<W>((int)p.i, m)};
}

// No element yet: any element is preferable (arg_better's index rule beats 0xffffffff).
template <bool IsMax, typename A>
MLXA_DEVICE ArgPair<A> arg_none() {
  return ArgPair<A>{IsMax ? lowest<A>() : highest<A>(), 0xffffffffu};
}

template <bool IsMax, typename In, int W>
MLXA_DEVICE ArgPair<compute_t<In>> arg_combine_group(ArgPair<compute_t<In>> acc, int G, ArgPair<compute_t<In>>* scratch) {
  return group_reduce<W>(acc, G, scratch, [](ArgPair<compute_t<In>> x, ArgPair<compute_t<In>> y) {
    return arg_combine<IsMax>(x, y);
  });
}

// The best (value, index) of output o's row over [i0, i1), found by the G threads of a
// group (this one is `lane`) and combined over the group (arg_row, arg_split).
template <bool IsMax, typename In, int W>
MLXA_DEVICE ArgPair<compute_t<In>> arg_best(const ArgReduceArgs& a, int64_t o, int64_t i0, int64_t i1, int lane,
                                            int G, ArgPair<compute_t<In>>* scratch) {
  using A = compute_t<In>;
  using P = ArgPair<A>;
  P acc = arg_none<IsMax, A>();
  if (o < a.n_out) {
    const In* p = (const In*)a.in + dims_offset(o, a.kept_ndim, a.kept_shape, a.kept_strides, a.n_out <= 0x7fffffffll);
    walk_row(p, i0, i1, a.axis_stride, lane, G, [&](int64_t i, In x) {
      const A v = widen(x);
      if (arg_better<IsMax>(v, (uint32_t)i, acc.v, acc.i)) acc = P{v, (uint32_t)i};
    });
  }
  return arg_combine_group<IsMax, In, W>(acc, G, scratch);
}

template <bool IsMax, typename In, int W>
MLXA_DEVICE void arg_row(const ArgReduceArgs& a) {
  __shared__ ArgPair<compute_t<In>> scratch[32];
  const int G = a.group;
  const int lane = (int)threadIdx.x % G;
  const int64_t o = (int64_t)blockIdx.x * (int64_t)(blockDim.x / G) + (int64_t)threadIdx.x / G;
  const auto acc = arg_best<IsMax, In, W>(a, o, 0, a.axis_len, lane, G, scratch);
  if (o < a.n_out && lane == 0) ((uint32_t*)a.out)[o] = acc.i == 0xffffffffu ? 0u : acc.i;
}

// Few long rows (an LLM's one row of logits): arg_row's one block a row read 128k values
// through one SM (54 us on the H100). Pass 1, a block per (row, split y of gridDim.y):
// the best (value, index) of its part of the row into out[row * gridDim.y + y]; pass 2
// (arg_pairs) takes the best of each row's pairs. Same rule, so the same index as arg_row.
template <bool IsMax, typename In, int W>
MLXA_DEVICE void arg_split(const ArgReduceArgs& a) {
  __shared__ ArgPair<compute_t<In>> scratch[32];
  const int64_t o = blockIdx.x, S = gridDim.y, k = blockIdx.y;
  const int64_t part = (a.axis_len + S - 1) / S;
  const int64_t i0 = k * part < a.axis_len ? k * part : a.axis_len;
  const int64_t i1 = i0 + part < a.axis_len ? i0 + part : a.axis_len;
  const auto acc = arg_best<IsMax, In, W>(a, o, i0, i1, (int)threadIdx.x, (int)blockDim.x, scratch);
  if (o < a.n_out && threadIdx.x == 0) ((ArgPair<compute_t<In>>*)a.out)[o * S + k] = acc;
}

// pass 2: a.in holds n_out rows of axis_len pairs; a group of a.group threads a row
template <bool IsMax, typename In, int W>
MLXA_DEVICE void arg_pairs(const ArgReduceArgs& a) {
  using P = ArgPair<compute_t<In>>;
  __shared__ P scratch[32];
  const int G = a.group;
  const int lane = (int)threadIdx.x % G;
  const int64_t o = (int64_t)blockIdx.x * (int64_t)(blockDim.x / G) + (int64_t)threadIdx.x / G;
  P acc = arg_none<IsMax, compute_t<In>>();
  if (o < a.n_out) {
    const P* p = (const P*)a.in + o * a.axis_len;
    for (int64_t j = lane; j < a.axis_len; j += G) acc = arg_combine<IsMax>(acc, p[j]);
  }
  acc = arg_combine_group<IsMax, In, W>(acc, G, scratch);
  if (o < a.n_out && lane == 0) ((uint32_t*)a.out)[o] = acc.i == 0xffffffffu ? 0u : acc.i;
}

template <bool IsMax, typename In>
MLXA_DEVICE void arg_col(const ArgReduceArgs& a) {
  using A = compute_t<In>;
  const int64_t o = global_thread<int64_t>();
  if (o >= a.n_out) return;
  const In* p = (const In*)a.in + dims_offset(o, a.kept_ndim, a.kept_shape, a.kept_strides, a.n_out <= 0x7fffffffll);
  A best = IsMax ? lowest<A>() : highest<A>();
  uint32_t bi = 0xffffffffu;
  for (int64_t k = 0; k < a.axis_len; ++k) {
    const A v = widen(p[k * a.axis_stride]);
    if (arg_better<IsMax>(v, (uint32_t)k, best, bi)) {
      best = v;
      bi = (uint32_t)k;
    }
  }
  ((uint32_t*)a.out)[o] = bi == 0xffffffffu ? 0u : bi;
}

// complex: MLX's sequential rule, started from element 0: move to an element that is
// lexicographically beyond the current one, or that is NaN while the current one is not.
template <bool IsMax>
MLXA_DEVICE void arg_seq_complex(const ArgReduceArgs& a) {
  const int64_t o = global_thread<int64_t>();
  if (o >= a.n_out) return;
  const complex64* p = (const complex64*)a.in + dims_offset(o, a.kept_ndim, a.kept_shape, a.kept_strides, false);
  uint32_t bi = 0;
  if (a.axis_len > 0) {
    complex64 best = p[0];
    for (int64_t k = 1; k < a.axis_len; ++k) {
      const complex64 x = p[k * a.axis_stride];
      if ((IsMax ? cgreater(x, best) : cless(x, best)) || (nan_of(x) && !nan_of(best))) {
        best = x;
        bi = (uint32_t)k;
      }
    }
  }
  ((uint32_t*)a.out)[o] = bi;
}

}  // namespace mlxa::red

// Row and arg-row blocks have at most 512 threads; column blocks exactly 256; sequential
// kernels 256.
#define MLXA_REDUCE_ROW(name, W, Op, In, Acc, Out)                                      \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(512) name(ReduceRowArgs a) {                     \
    MLXA_WAVE_KERNEL_BODY(W, (mlxa::red::reduce_row<mlxa::red::Op, In, Acc, Out, W>(a))); \
  }
#define MLXA_REDUCE_COL(name, Op, In, Acc, Out)                                        \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_REDUCE_COL_THREADS) name(ReduceColArgs a) { \
    mlxa::red::reduce_col<mlxa::red::Op, In, Acc, Out>(a);                             \
  }
#define MLXA_REDUCE_SEQ_COMPLEX(name, IsMax) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(256) name(ReduceRowArgs a) { mlxa::red::reduce_seq_complex<IsMax>(a); }
#define MLXA_ARG_ROW(name, W, IsMax, In)                                     \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(512) name(ArgReduceArgs a) {          \
    MLXA_WAVE_KERNEL_BODY(W, (mlxa::red::arg_row<IsMax, In, W>(a)));        \
  }
#define MLXA_ARG_SPLIT(name, W, IsMax, In)                                   \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(512) name(ArgReduceArgs a) {          \
    MLXA_WAVE_KERNEL_BODY(W, (mlxa::red::arg_split<IsMax, In, W>(a)));      \
  }
#define MLXA_ARG_PAIRS(name, W, IsMax, In)                                   \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(512) name(ArgReduceArgs a) {          \
    MLXA_WAVE_KERNEL_BODY(W, (mlxa::red::arg_pairs<IsMax, In, W>(a)));      \
  }
#define MLXA_ARG_COL(name, IsMax, In) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(256) name(ArgReduceArgs a) { mlxa::red::arg_col<IsMax, In>(a); }
#define MLXA_ARG_SEQ_COMPLEX(name, IsMax) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(256) name(ArgReduceArgs a) { mlxa::red::arg_seq_complex<IsMax>(a); }

#include "reduce.inc"
