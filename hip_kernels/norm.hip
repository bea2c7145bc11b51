// Norm family: RMS norm and layer norm over the last axis (our mlx_amd::RMSNorm and
// mlx_amd::LayerNorm primitives, i.e. mx.fast.rms_norm / layer_norm while enabled).
//
// One block per row. Statistics accumulate in float32 (as MLX's fast ops do); the
// result is rounded the way MLX's decomposition rounds it: normalised value in float32,
// rounded to the output type, then times the weight (rounded), then plus the bias
// (rounded). Layer norm takes the centred variance, mean((x - mean)^2), like MLX.
//
// Layouts: "r" keeps a thread's K 16-byte groups of the row in registers, packed two
// 16-bit values to a register (one read of x); "l" loops over the row and reads it
// again per pass (any length). A group is V
// elements; rows whose start is not 16-byte aligned, or a ragged last group, take the
// element-wise path for that group.
#include "mlxa/platform.h"
#include "mlxa/types.h"
#include "mlxa/wave.h"
#include "mlxa/norm_args.h"

namespace mlxa::norm {

template <typename O, int V>
MLXA_DEVICE void store_group(O* p, int base, int n, bool vec, const Vec<O, V>& g) {
  if (vec && base + V <= n) {
    *reinterpret_cast<Vec<O, V>*>(p + base) = g;
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (base + j < n) p[base + j] = g.v[j];
  }
}

struct Sum {
  MLXA_DEVICE float operator()(float a, float b) const { return a + b; }
};

// Each step rounded to O as MLX's decomposition rounds it; the last rounding is the
// stored value. shift: the mean for layer norm, 0 for rms norm.
template <typename X, typename O, int V>
MLXA_DEVICE Vec<O, V> finish(const Packed<X, V>& x, const Packed<O, V>& w, const Packed<O, V>& b,
                             float scale, float shift, int flags) {
  Vec<O, V> y;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    O v = cast<O>(__fmul_rn((float)widen(x.get(j)) - shift, scale));
    if (flags & 1) v = cast<O>(__fmul_rn((float)widen(v), (float)widen(w.get(j))));
    if (flags & 2) v = cast<O>((float)widen(v) + (float)widen(b.get(j)));
    y.v[j] = v;
  }
  return y;
}

// x's (and weight's, bias's) group at `base`: zeros past the row's end
template <typename T, int V>
MLXA_DEVICE Packed<T, V> load_zero(const T* p, int base, int n, bool vec) {
  Packed<T, V> g{};
  g.load(p, base, n, 1, vec);
  return g;
}

// K > 0: the row in registers (packed); K == 0: loop, reading x again per pass.
template <typename X, typename O, int W, int K, bool LN, class S>
MLXA_DEVICE void norm_row(const void* xp, const void* wp, const void* bp, void* outp, const S& a) {
  constexpr int V = vec_width<X, O>;
  __shared__ float scratch[512 / W];
  const int n = a.n, flags = a.flags;
  const int64_t row = blockIdx.x;
  if (row >= a.rows) return;   // the twin's grid covers the longer of its two (block-uniform)
  const X* x = (const X*)xp + row * a.row_stride;
  O* out = (O*)outp + row * (int64_t)n;
  const O* w = (const O*)wp;
  const O* b = (const O*)bp;
  const bool vx = ((uintptr_t)x & 15u) == 0, vo = ((uintptr_t)out & 15u) == 0;
  const bool vw = ((uintptr_t)w & 15u) == 0, vb = ((uintptr_t)b & 15u) == 0;
  const int step = blockDim.x * V;
  const int first = threadIdx.x * V;
  const float inv_n = 1.0f / (float)n;
  const Packed<O, V> none{};   // weight/bias groups when there is none (unused then)
  if constexpr (K > 0) {
    Packed<X, V> xg[K];
#pragma unroll
    for (int k = 0; k < K; ++k) xg[k] = load_zero<X, V>(x, first + k * step, n, vx);
    // the first group's weight and bias in flight with x: with a group a thread (few rows,
    // wide blocks) nothing is left to load after the reduction
    const bool has0 = first < n;
    const Packed<O, V> w0 = (flags & 1) && has0 ? load_zero<O, V>(w, first, n, vw) : none;
    const Packed<O, V> b0 = (flags & 2) && has0 ? load_zero<O, V>(b, first, n, vb) : none;
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float f = (float)widen(xg[k].get(j));
        s += LN ? f : f * f;
      }
    s = block_reduce<W>(s, Sum{}, scratch);
    fence_all(xg);
    float mean = 0.0f;
    if constexpr (LN) {
      mean = s * inv_n;
      float q = 0.0f;
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float d = first + k * step + j < n ? (float)widen(xg[k].get(j)) - mean : 0.0f;
          q += d * d;
        }
      s = block_reduce<W>(q, Sum{}, scratch);
      fence_all(xg);
    }
    const float scale = rsqrtf(s * inv_n + a.eps);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int base = first + k * step;
      if (base >= n) continue;
      const Packed<O, V> wv = k == 0 ? w0 : flags & 1 ? load_zero<O, V>(w, base, n, vw) : none;
      const Packed<O, V> bv = k == 0 ? b0 : flags & 2 ? load_zero<O, V>(b, base, n, vb) : none;
      store_group<O, V>(out, base, n, vo, finish<X, O, V>(xg[k], wv, bv, scale, mean, flags));
    }
  } else {
    float s = 0.0f;
    for (int base = first; base < n; base += step) {
      const Packed<X, V> g = load_zero<X, V>(x, base, n, vx);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float f = (float)widen(g.get(j));
        s += LN ? f : f * f;
      }
    }
    s = block_reduce<W>(s, Sum{}, scratch);
    float mean = 0.0f;
    if constexpr (LN) {
      mean = s * inv_n;
      float q = 0.0f;
      for (int base = first; base < n; base += step) {
        const Packed<X, V> g = load_zero<X, V>(x, base, n, vx);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float d = base + j < n ? (float)widen(g.get(j)) - mean : 0.0f;
          q += d * d;
        }
      }
      s = block_reduce<W>(q, Sum{}, scratch);
    }
    const float scale = rsqrtf(s * inv_n + a.eps);
    for (int base = first; base < n; base += step) {
      const Packed<X, V> g = load_zero<X, V>(x, base, n, vx);
      const Packed<O, V> wv = flags & 1 ? load_zero<O, V>(w, base, n, vw) : none;
      const Packed<O, V> bv = flags & 2 ? load_zero<O, V>(b, base, n, vb) : none;
      store_group<O, V>(out, base, n, vo, finish<X, O, V>(g, wv, bv, scale, mean, flags));
    }
  }
}

// The residual add feeding an RMS norm, one block per row with the row in registers (K
// groups a thread): sum = x + r as the Add node computes it (in float, rounded to T), stored,
// then normalised like norm_row's RMS path.
template <typename T, int W, int K>
MLXA_DEVICE void norm_add_row(const NormAddArgs& a) {
  constexpr int V = vec_width<T, T>;
  __shared__ float scratch[512 / W];
  const int n = a.n;
  const int64_t row = blockIdx.x;
  const T* x = (const T*)a.x + row * n;
  const T* r = (const T*)a.r + row * n;
  T* sum = (T*)a.sum + row * n;
  T* out = (T*)a.out + row * n;
  const T* w = (const T*)a.w;
  const bool vx = (((uintptr_t)x | (uintptr_t)r | (uintptr_t)sum | (uintptr_t)out) & 15u) == 0;
  const bool vw = ((uintptr_t)w & 15u) == 0;
  const int step = blockDim.x * V;
  const int first = threadIdx.x * V;
  const Packed<T, V> none{};
  Packed<T, V> hg[K];
  // the first group's weight in flight with x and r (see norm_row)
  const Packed<T, V> w0 = (a.flags & 1) && first < n ? load_zero<T, V>(w, first, n, vw) : none;
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int base = first + k * step;
    const Packed<T, V> xg = load_zero<T, V>(x, base, n, vx), rg = load_zero<T, V>(r, base, n, vx);
    Vec<T, V> h;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      h.v[j] = cast<T>((float)widen(xg.get(j)) + (float)widen(rg.get(j)));
      hg[k].set(j, h.v[j]);
      const float f = (float)widen(h.v[j]);
      s += f * f;   // zeros past the row's end add nothing
    }
    if (base < n) store_group<T, V>(sum, base, n, vx, h);
  }
  s = block_reduce<W>(s, Sum{}, scratch);
  fence_all(hg);
  const float scale = rsqrtf(s * (1.0f / (float)n) + a.eps);   // as norm_row (and MLX: mean = sum * 1/n)
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int base = first + k * step;
    if (base >= n) continue;
    const Packed<T, V> wv = k == 0 ? w0 : a.flags & 1 ? load_zero<T, V>(w, base, n, vw) : none;
    store_group<T, V>(out, base, n, vx, finish<T, T, V>(hg[k], wv, none, scale, 0.0f, a.flags & 1));
  }
}

}  // namespace mlxa::norm

#define MLXA_NORM_ADD(name, T, W, K)                                           \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS_MIN(512, 2) name(NormAddArgs a) {        \
    MLXA_WAVE_KERNEL_BODY(W, (mlxa::norm::norm_add_row<T, W, K>(a)))           \
  }

#define MLXA_NORM(name, X, O, W, K, LN)                                                   \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS_MIN(512, 2) name(NormArgs a) {                      \
    MLXA_WAVE_KERNEL_BODY(W, (mlxa::norm::norm_row<X, O, W, K, LN>(a.x, a.w, a.b, a.out, a))) \
  }

// Two norms (blockIdx.y 0: the first, 1: the second), a block per row of each. The
// parameters lay out as a NormArgs for the first after the second's pointers, then the
// second's shape.
#define MLXA_NORM_TWIN(name, X, O, W, K, LN)                                                    \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS_MIN(512, 2) name(const void* x1, const void* w1, const void* b1, \
                                                       void* out1, NormArgs a, NormShape b) {   \
    if (blockIdx.y == 0) {                                                                      \
      MLXA_WAVE_KERNEL_BODY(W, (mlxa::norm::norm_row<X, O, W, K, LN>(a.x, a.w, a.b, a.out, a))) \
    } else {                                                                                    \
      MLXA_WAVE_KERNEL_BODY(W, (mlxa::norm::norm_row<X, O, W, K, LN>(x1, w1, b1, out1, b)))     \
    }                                                                                           \
  }

#include "norm.inc"
