// Norm family: RMS norm and layer norm over the last axis (our mlx_amd::RMSNorm and
// mlx_amd::LayerNorm primitives, i.e. mx.fast.rms_norm / layer_norm while enabled).
//
// One block per row. Statistics accumulate in float32 (as MLX's fast ops do); the
// result is rounded the way MLX's decomposition rounds it: normalised value in float32,
// rounded to the output type, then times the weight (rounded), then plus the bias
// (rounded). Layer norm takes the centred variance, mean((x - mean)^2), like MLX.
//
// Layouts: "r" keeps a thread's K 16-byte groups of the row in registers (one read of
// x); "l" loops over the row and reads it again per pass (any length). A group is V
// elements; rows whose start is not 16-byte aligned, or a ragged last group, take the
// element-wise path for that group.
#include "mlxa/platform.h"
#include "mlxa/types.h"
#include "mlxa/wave.h"
#include "mlxa/norm_args.h"

namespace mlxa::norm {

template <typename T, int V>
MLXA_DEVICE void load_group(const T* p, int base, int n, bool vec, float (&f)[V]) {
  if (vec && base + V <= n) {
    const Vec<T, V> g = *reinterpret_cast<const Vec<T, V>*>(p + base);
#pragma unroll
    for (int j = 0; j < V; ++j) f[j] = (float)widen(g.v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) f[j] = base + j < n ? (float)widen(p[base + j]) : 0.0f;
  }
}

template <typename O, int V>
MLXA_DEVICE void store_group(O* p, int base, int n, bool vec, const float (&f)[V]) {
  if (vec && base + V <= n) {
    Vec<O, V> g;
#pragma unroll
    for (int j = 0; j < V; ++j) g.v[j] = cast<O>(f[j]);
    *reinterpret_cast<Vec<O, V>*>(p + base) = g;
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (base + j < n) p[base + j] = cast<O>(f[j]);
  }
}

// value rounded to O, kept as float for the next rounded step
template <typename O> MLXA_DEVICE float round_to(float v) { return (float)widen(cast<O>(v)); }

struct Sum {
  MLXA_DEVICE float operator()(float a, float b) const { return a + b; }
};

template <typename O, int V>
MLXA_DEVICE void finish(float (&f)[V], float scale, float shift, const O* w, const O* b,
                        int base, int n, bool vw, bool vb, int flags) {
  // shift: the mean for layer norm, 0 for rms norm
  float wv[V], bv[V];
  if (flags & 1) load_group<O, V>(w, base, n, vw, wv);
  if (flags & 2) load_group<O, V>(b, base, n, vb, bv);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    float y = round_to<O>(__fmul_rn(f[j] - shift, scale));
    if (flags & 1) y = round_to<O>(__fmul_rn(y, wv[j]));
    if (flags & 2) y = round_to<O>(y + bv[j]);
    f[j] = y;
  }
}

// K > 0: registers; K == 0: loop
template <typename X, typename O, int W, int K, bool LN>
MLXA_DEVICE void norm_row(const NormArgs& a) {
  constexpr int V = vec_width<X, O>;
  __shared__ float scratch[512 / W];
  const int n = a.n;
  const int64_t row = blockIdx.x;
  const X* x = (const X*)a.x + row * a.row_stride;
  O* out = (O*)a.out + row * (int64_t)n;
  const O* w = (const O*)a.w;
  const O* b = (const O*)a.b;
  const bool vx = ((uintptr_t)x & 15u) == 0, vo = ((uintptr_t)out & 15u) == 0;
  const bool vw = ((uintptr_t)w & 15u) == 0, vb = ((uintptr_t)b & 15u) == 0;
  const int step = blockDim.x * V;
  const int first = threadIdx.x * V;
  const float inv_n = 1.0f / (float)n;
  if constexpr (K > 0) {
    float f[K][V];
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      load_group<X, V>(x, first + k * step, n, vx, f[k]);
#pragma unroll
      for (int j = 0; j < V; ++j) s += LN ? f[k][j] : f[k][j] * f[k][j];
    }
    s = block_reduce<W>(s, Sum{}, scratch);
    float mean = 0.0f;
    if constexpr (LN) {
      mean = s * inv_n;
      float q = 0.0f;
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float d = first + k * step + j < n ? f[k][j] - mean : 0.0f;
          q += d * d;
        }
      s = block_reduce<W>(q, Sum{}, scratch);
    }
    const float scale = rsqrtf(s * inv_n + a.eps);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int base = first + k * step;
      if (base < n) {
        finish<O, V>(f[k], scale, mean, w, b, base, n, vw, vb, a.flags);
        store_group<O, V>(out, base, n, vo, f[k]);
      }
    }
  } else {
    float s = 0.0f, f[V];
    for (int base = first; base < n; base += step) {
      load_group<X, V>(x, base, n, vx, f);
#pragma unroll
      for (int j = 0; j < V; ++j) s += LN ? f[j] : f[j] * f[j];
    }
    s = block_reduce<W>(s, Sum{}, scratch);
    float mean = 0.0f;
    if constexpr (LN) {
      mean = s * inv_n;
      float q = 0.0f;
      for (int base = first; base < n; base += step) {
        load_group<X, V>(x, base, n, vx, f);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float d = base + j < n ? f[j] - mean : 0.0f;
          q += d * d;
        }
      }
      s = block_reduce<W>(q, Sum{}, scratch);
    }
    const float scale = rsqrtf(s * inv_n + a.eps);
    for (int base = first; base < n; base += step) {
      load_group<X, V>(x, base, n, vx, f);
      finish<O, V>(f, scale, mean, w, b, base, n, vw, vb, a.flags);
      store_group<O, V>(out, base, n, vo, f);
    }
  }
}

}  // namespace mlxa::norm

#define MLXA_NORM(name, X, O, W, K, LN)                                        \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(512) name(NormArgs a) {                  \
    MLXA_WAVE_KERNEL_BODY(W, (mlxa::norm::norm_row<X, O, W, K, LN>(a)))        \
  }

#include "norm.inc"
