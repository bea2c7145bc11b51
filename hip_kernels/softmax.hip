// Softmax family: softmax and logsumexp along the last axis (MLX's Softmax and
// LogSumExp primitives). Every dtype computes in float (float64 in double) and rounds
// once on store. exp(x - max) is 2^y with y = (x - max) * log2(e) rounded exactly as
// MLX's CPU exp rounds it; 2^y is the hardware's exp2 (within 2 ulp; MLX's polynomial
// took ~16 instructions an element, twice, and made these kernels compute-bound at
// 0.2-0.6 of the copy bandwidth). float64 keeps MLX's own CPU polynomial (mlx_exp), so
// it matches MLX to the rounding of its sums.
//
// Layouts (the launcher picks by row length, see runtime/ops/softmax.py):
//   wave  one wave per row, K 16-byte groups per lane kept in registers (short rows);
//   block one block per row, K groups per thread in registers (rows up to 512*K groups);
//   loop  one block per row, any length: one online max+sum pass, then the write pass
//         (float64: a max pass and a sum pass, so each exp is MLX's exp(x - max)).
// Special values as MLX gives them: any NaN in a row makes its max NaN; a row whose max
// is not finite (all -inf, or a +inf) is NaN throughout for softmax; logsumexp returns
// an infinite max itself and NaN for a NaN row.
#include "mlxa/platform.h"
#include "mlxa/types.h"
#include "mlxa/wave.h"
#include "mlxa/softmax_args.h"

namespace mlxa::smx {

template <typename T> struct AccOf { using type = float; };
template <> struct AccOf<double> { using type = double; };
template <typename T> using acc_t = typename AccOf<T>::type;

template <typename A> MLXA_DEVICE A neg_inf() { return (A)uint_as_float(0xff800000u); }
template <typename A> MLXA_DEVICE A pos_inf() { return (A)uint_as_float(0x7f800000u); }
template <typename A> MLXA_DEVICE A quiet_nan() { return (A)uint_as_float(0x7fc00000u); }

// MLX's CPU exp: 2^(x log2 e) split into an integer part (exponent bits) and a
// polynomial in the fraction, in float for every dtype. The product is an fma with a
// +0 addend so that no compiler fuses it into the following adds (MLX rounds it).
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
  const int e = ((int)ip + 127) << 23;   // ip >= -127 here; 0 gives +0.0
  return uint_as_float((unsigned)e) * p;
}
template <typename A> MLXA_DEVICE A exp_acc(A d) { return (A)mlx_exp((float)d); }

// element -> accumulator: a 16-bit NaN's payload never reaches an output here (a NaN
// row is NaN throughout), so float16 takes the bare hardware conversion
template <typename A, typename T> MLXA_DEVICE A acc(T x) {
  if constexpr (sizeof(T) == 2) return to_float_any_nan(x);
  else return (A)x;
}

// exp(x - m), the one exp every kernel below takes (NaN in, NaN out; -inf gives 0), as
// 2^((x - m) log2(e)) with the difference taken first: an fma against a rounded m log2(e)
// is off by |m| 2^-24 in the exponent, which overflows exp2 for |m| near 1e30 (a row of
// 1e30s gave NaN).
MLXA_DEVICE float exp_diff(float x, float m) { return exp2f(__fmul_rn(x - m, 1.442695f)); }
MLXA_DEVICE double exp_diff(double x, double m) { return exp_acc<double>(x - m); }

MLXA_DEVICE float log_acc(float x) { return logf(x); }
MLXA_DEVICE double log_acc(double x) { return log(x); }

// max that keeps a NaN from either side (MLX's running maximum does)
struct MaxOp {
  template <typename A> MLXA_DEVICE A operator()(A a, A b) const {
    return a != a ? a : (b != b ? b : (a > b ? a : b));
  }
};
// Softmax's max may skip NaN (the hardware's max): a NaN makes the sum NaN, so its whole
// row NaN, as MLX gives. logsumexp needs MaxOp: there a +-inf max returns as it is.
struct FastMaxOp {
  MLXA_DEVICE float operator()(float a, float b) const { return fmaxf(a, b); }
  MLXA_DEVICE double operator()(double a, double b) const { return fmax(a, b); }
};
struct SumOp {
  template <typename A> MLXA_DEVICE A operator()(A a, A b) const { return a + b; }
};

template <typename A> MLXA_DEVICE A lse_value(A m, A s) {
  return (m == pos_inf<A>() || m == neg_inf<A>()) ? m : log_acc(s) + m;
}

enum Mode { kWave = 0, kBlock = 1, kLoop = 2 };

MLXA_DEVICE int64_t row_offset(const SoftmaxArgs& a, int64_t r) {
  int64_t off = 0;
#pragma unroll
  for (int d = 0; d < MLXA_SOFTMAX_MAX_DIMS; ++d) {
    if (d < a.ndim) {
      const int64_t s = a.row_shape[d];
      off += (r % s) * a.row_strides[d];
      r /= s;
    }
  }
  return off;
}

// Group g of V elements starting at element `base`: one 16-byte load when the row is
// dense, aligned and the group is whole, else element by element.
template <typename T, int V>
MLXA_DEVICE void load_group(const T* row, int base, int n, int64_t es, bool vec, Vec<T, V>& g) {
  if (vec && base + V <= n) {
    g = *(const Vec<T, V>*)(row + base);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (base + j < n) g.v[j] = row[(int64_t)(base + j) * es];
  }
}
template <typename T, int V>
MLXA_DEVICE void store_group(T* row, int base, int n, bool vec, const Vec<T, V>& g) {
  if (vec && base + V <= n) {
    *(Vec<T, V>*)(row + base) = g;
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (base + j < n) row[base + j] = g.v[j];
  }
}

template <int W, int MODE, typename A, typename Op>
MLXA_DEVICE A row_reduce(A v, Op op, A* scratch) {
  if constexpr (MODE == kWave) return wave_reduce<W>(v, op);
  else return block_reduce<W>(v, op, scratch);
}

// Rows held in registers: one read, exact two-pass arithmetic (max, then sum of exps).
template <typename T, int W, int MODE, int K, bool LSE>
MLXA_DEVICE void softmax_regs(const SoftmaxArgs& a) {
  using A = acc_t<T>;
  using Max = std::conditional_t<LSE, MaxOp, FastMaxOp>;
  constexpr int V = 16 / sizeof(T);
  __shared__ A scratch[32];
  const int tpr = MODE == kWave ? W : (int)blockDim.x;
  const int lane = MODE == kWave ? wave_lane<W>() : (int)threadIdx.x;
  const int64_t row = MODE == kWave ? (int64_t)blockIdx.x * waves_per_block<W>() + wave_index<W>()
                                    : (int64_t)blockIdx.x;
  if (row >= a.rows) return;   // a whole wave (wave mode) leaves; blocks always have a row
  const int n = a.n;
  const T* in = (const T*)a.in + row_offset(a, row);
  const bool vin = a.elem_stride == 1 && ((uintptr_t)in & 15u) == 0;
  // places past the row's end hold -inf: they change no max and add exp(-inf) = 0 (a row
  // whose max is -inf is NaN either way), so the passes below need no bounds tests
  const T pad = cast<T>(neg_inf<A>());
  Packed<T, V> g[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
#pragma unroll
    for (int j = 0; j < V; ++j) g[k].set(j, pad);
    g[k].load(in, (k * tpr + lane) * V, n, a.elem_stride, vin);
  }
  fence_all(g);
  A m = neg_inf<A>();
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int j = 0; j < V; ++j) m = Max{}(m, acc<A>(g[k].get(j)));
  m = row_reduce<W, MODE>(m, Max{}, scratch);
  fence_all(g);
  A s = A(0);
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int j = 0; j < V; ++j) s += exp_diff(acc<A>(g[k].get(j)), m);
  s = row_reduce<W, MODE>(s, SumOp{}, scratch);
  if constexpr (LSE) {
    if (lane == 0) ((T*)a.out)[row] = cast<T>(lse_value(m, s));
  } else {
    const A inv = A(1) / s;
    T* out = (T*)a.out + row * (int64_t)n;
    const bool vout = ((uintptr_t)out & 15u) == 0;
    fence_all(g);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int base = (k * tpr + lane) * V;
      if (base >= n) continue;
      Vec<T, V> o;
#pragma unroll
      for (int j = 0; j < V; ++j) o.v[j] = cast<T>(exp_diff(acc<A>(g[k].get(j)), m) * inv);
      store_group<T, V>(out, base, n, vout, o);
    }
  }
}

// Rows of any length, one block each.
template <typename T, int W, bool LSE>
MLXA_DEVICE void softmax_loop(const SoftmaxArgs& a) {
  using A = acc_t<T>;
  constexpr int V = 16 / sizeof(T);
  constexpr bool kExact = std::is_same_v<T, double>;
  using Max = std::conditional_t<LSE, MaxOp, FastMaxOp>;
  __shared__ A scratch[32];
  const int64_t row = (int64_t)blockIdx.x;
  const int lane = (int)threadIdx.x, step = (int)blockDim.x * V, n = a.n;
  const int64_t es = a.elem_stride;
  const T* in = (const T*)a.in + row_offset(a, row);
  const bool vin = es == 1 && ((uintptr_t)in & 15u) == 0;
  // online max and sum, rescaled once per group (not per element) when its max is new
  A m = neg_inf<A>(), s = A(0);
  for (int base = lane * V; base < n; base += step) {
    Vec<T, V> g = {};
    load_group<T, V>(in, base, n, es, vin, g);
    A x[V];
    A gm = neg_inf<A>();
#pragma unroll
    for (int j = 0; j < V; ++j) {
      x[j] = base + j < n ? acc<A>(g.v[j]) : neg_inf<A>();
      gm = Max{}(gm, x[j]);
    }
    if constexpr (kExact) {
      m = Max{}(m, gm);
    } else {
      const A nm = Max{}(m, gm);
      if (nm != m) s = m == neg_inf<A>() ? A(0) : s * exp_diff(m, nm);   // NaN nm: s is NaN
      m = nm;
      if (m != neg_inf<A>()) {
#pragma unroll
        for (int j = 0; j < V; ++j) s += exp_diff(x[j], m);
      } else {   // every value so far is -inf (adds nothing) or NaN (which FastMaxOp skipped)
#pragma unroll
        for (int j = 0; j < V; ++j) s += x[j] != x[j] ? x[j] : A(0);
      }
    }
  }
  const A M = block_reduce<W>(m, Max{}, scratch);
  A S;
  if constexpr (kExact) {
    s = A(0);
    for (int base = lane * V; base < n; base += step) {
      Vec<T, V> g = {};
      load_group<T, V>(in, base, n, es, vin, g);
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (base + j < n) s += exp_diff(acc<A>(g.v[j]), M);
    }
    S = block_reduce<W>(s, SumOp{}, scratch);
  } else {
    S = block_reduce<W>(m == neg_inf<A>() ? A(0) : s * exp_diff(m, M), SumOp{}, scratch);
  }
  if constexpr (LSE) {
    if (lane == 0) ((T*)a.out)[row] = cast<T>(lse_value(M, S));
  } else {
    const bool finite = M - M == A(0);   // false for +-inf and NaN: the row is NaN (as in MLX)
    const A inv = A(1) / S;
    T* out = (T*)a.out + row * (int64_t)n;
    const bool vout = ((uintptr_t)out & 15u) == 0;
    for (int base = lane * V; base < n; base += step) {
      Vec<T, V> g = {}, o;
      load_group<T, V>(in, base, n, es, vin, g);
#pragma unroll
      for (int j = 0; j < V; ++j)
        o.v[j] = cast<T>(finite ? exp_diff(acc<A>(g.v[j]), M) * inv : quiet_nan<A>());
      store_group<T, V>(out, base, n, vout, o);
    }
  }
}

}  // namespace mlxa::smx

// 64 registers at most: the 16-bit rows widened to float took ~96 (one block per SM)
#define MLXA_SOFTMAX_REGS(name, T, W, MODE, K, LSE)                                  \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS_MIN(512, 2) name(SoftmaxArgs a) {               \
    MLXA_WAVE_KERNEL_BODY(W, (mlxa::smx::softmax_regs<T, W, MODE, K, LSE>(a)))        \
  }
#define MLXA_SOFTMAX_LOOP(name, T, W, LSE)                                           \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(512) name(SoftmaxArgs a) {                      \
    MLXA_WAVE_KERNEL_BODY(W, (mlxa::smx::softmax_loop<T, W, LSE>(a)))                 \
  }

#include "softmax.inc"
