// Element types, the compute type each is widened to, and MLX's conversion rules.
#pragma once

#include <stdint.h>
#include <type_traits>

#include "platform.h"

namespace mlxa {

// Every op computes in Compute<T>::type: float for the 16-bit floats, T otherwise
// (double for float64, complex64 for complex64).
template <typename T> struct Compute { using type = T; };
template <> struct Compute<half> { using type = float; };
template <> struct Compute<bfloat16> { using type = float; };
template <typename T> using compute_t = typename Compute<T>::type;

template <typename T> inline constexpr bool is_complex_v = std::is_same_v<T, complex64>;
template <typename T> inline constexpr bool is_float_v = std::is_floating_point_v<T>;

template <typename T> MLXA_DEVICE compute_t<T> widen(T x) { return x; }
MLXA_DEVICE float widen(half x) { return to_float(x); }
MLXA_DEVICE float widen(bfloat16 x) { return to_float(x); }

// ---- float32 <-> float64 with x86's NaN encodings (GPU converters give a canonical
// NaN; x86 keeps the payload, truncated or shifted, and sets the quiet bit) ----------
MLXA_DEVICE double f32_to_f64(float x) {
  if (x != x) {
    const uint64_t u = float_as_uint(x);
    return __longlong_as_double((long long)(((u & 0x80000000ull) << 32) | 0x7ff8000000000000ull |
                                            ((u & 0x7fffffull) << 29)));
  }
  return (double)x;
}
MLXA_DEVICE float f64_to_f32(double x) {
  if (x != x) {
    const uint64_t u = (uint64_t)__double_as_longlong(x);
    return uint_as_float((unsigned)(((u >> 32) & 0x80000000u) | 0x7fc00000u | ((u >> 29) & 0x3fffffu)));
  }
  return (float)x;
}

// Float -> integer as MLX's x86 CPU build does it (C++ leaves NaN and out-of-range
// values undefined; these are the values that build produces, so we match it rather
// than the GPU's saturating converters): truncation toward zero; NaN/out of range give
// INT_MIN for int32/int64 ("integer indefinite"); 8- and 16-bit types keep the low bits
// of the int32 result; uint32 and uint64 split at 2^31 / 2^63 as the vectorised x86
// conversion does (float16 -> uint32 takes another path in MLX: see apply() in
// elementwise.h). F is float or double; the rules are the same for both.
template <typename I, typename F>
MLXA_DEVICE I float_to_int(F x) {
  if constexpr (sizeof(I) < 4) {
    return (I)float_to_int<int32_t>(x);
  } else if constexpr (std::is_same_v<I, uint32_t>) {
    return x >= F(2147483648.0) ? (uint32_t)float_to_int<int32_t>(x - F(2147483648.0)) ^ 0x80000000u
                                : (uint32_t)float_to_int<int32_t>(x);
  } else if constexpr (std::is_same_v<I, uint64_t>) {
    constexpr F lim = F(9223372036854775808.0);
    return x >= lim ? (uint64_t)float_to_int<int64_t>(x - lim) ^ 0x8000000000000000ull
                    : (uint64_t)float_to_int<int64_t>(x);
  } else {
    constexpr F lim = F(sizeof(I) == 8 ? 9223372036854775808.0 : 2147483648.0);
    // written so that NaN fails the test
    return (x >= -lim && x < lim) ? (I)x : (I)((uint64_t)1 << (8 * sizeof(I) - 1));
  }
}

// Narrow a compute value to the stored type Out. Complex -> real takes the real part
// (bool: either part nonzero); real -> complex has a zero imaginary part; float64 goes
// to the 16-bit floats through float32 (MLX's double rounding).
template <typename Out, typename C>
MLXA_DEVICE Out cast(C x) {
  if constexpr (std::is_same_v<Out, C>) {
    return x;
  } else if constexpr (is_complex_v<C>) {
    if constexpr (std::is_same_v<Out, bool>) return x.real != 0.0f || x.imag != 0.0f;
    else return cast<Out>(x.real);
  } else if constexpr (is_complex_v<Out>) {
    return complex64{cast<float>(x), 0.0f};
  } else if constexpr (std::is_same_v<Out, bool>) {
    return x != C(0);
  } else if constexpr (std::is_same_v<C, double> && !std::is_integral_v<Out>) {
    const float f = f64_to_f32(x);
    if constexpr (std::is_same_v<Out, float>) return f;
    else return cast<Out>(f);
  } else if constexpr (std::is_same_v<Out, double> && std::is_same_v<C, float>) {
    return f32_to_f64(x);
  } else if constexpr (std::is_same_v<Out, half>) {
    return to_half((float)x);
  } else if constexpr (std::is_same_v<Out, bfloat16>) {
    return to_bfloat16((float)x);
  } else if constexpr (std::is_floating_point_v<C> && std::is_integral_v<Out>) {
    return float_to_int<Out>(x);
  } else {
    return static_cast<Out>(x);
  }
}

// Integer arithmetic that wraps instead of being undefined on overflow (and stays in
// the type: 8/16-bit values are not left promoted to int).
template <typename T>
MLXA_DEVICE T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return (T)(U)((U)a + (U)b);
  } else {
    return a + b;
  }
}
template <typename T>
MLXA_DEVICE T wrap_sub(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return (T)(U)((U)a - (U)b);
  } else {
    return a - b;
  }
}
template <typename T>
MLXA_DEVICE T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // unsigned short * unsigned short promotes to (signed) int: multiply in 32+ bits
    using U = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;
    return (T)(U)((U)a * (U)b);
  } else {
    return a * b;
  }
}

template <typename T> MLXA_DEVICE bool is_nan(T x) {
  if constexpr (is_complex_v<T>) return x.real != x.real || x.imag != x.imag;
  else if constexpr (std::is_floating_point_v<T>) return x != x;
  else return false;
}

// ---- complex64 arithmetic (std::complex<float> semantics for finite values) -------
MLXA_DEVICE complex64 operator+(complex64 a, complex64 b) { return {a.real + b.real, a.imag + b.imag}; }
MLXA_DEVICE complex64 operator-(complex64 a, complex64 b) { return {a.real - b.real, a.imag - b.imag}; }
MLXA_DEVICE complex64 operator-(complex64 a) { return {-a.real, -a.imag}; }
MLXA_DEVICE complex64 operator*(complex64 a, complex64 b) {
  return {a.real * b.real - a.imag * b.imag, a.real * b.imag + a.imag * b.real};
}
// scaled by the larger component of b so |b|^2 cannot overflow
MLXA_DEVICE complex64 operator/(complex64 a, complex64 b) {
  const float s = fmaxf(fabsf(b.real), fabsf(b.imag));
  if (s == 0.0f) return {a.real / s, a.imag / s};
  const float br = b.real / s, bi = b.imag / s, d = br * br + bi * bi;
  return {(a.real * br + a.imag * bi) / d / s, (a.imag * br - a.real * bi) / d / s};
}
MLXA_DEVICE bool operator==(complex64 a, complex64 b) { return a.real == b.real && a.imag == b.imag; }
MLXA_DEVICE bool operator!=(complex64 a, complex64 b) { return !(a == b); }
// MLX orders complex numbers lexicographically (real part, then imaginary part)
MLXA_DEVICE bool operator<(complex64 a, complex64 b) { return a.real < b.real || (a.real == b.real && a.imag < b.imag); }
MLXA_DEVICE bool operator>(complex64 a, complex64 b) { return b < a; }
MLXA_DEVICE bool operator<=(complex64 a, complex64 b) { return !(b < a); }
MLXA_DEVICE bool operator>=(complex64 a, complex64 b) { return !(a < b); }
MLXA_DEVICE float cabs(complex64 z) { return hypotf(z.real, z.imag); }

// A 16-byte (or smaller) aligned group of N elements: one vector load/store.
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// V floating-point elements (float16/bfloat16/float32/float64; V * sizeof(T) a multiple
// of 4, at most 16 bytes) held in registers as 32-bit words, each element taken out by
// shifts where it is used. A Vec of 16-bit values gave every element a register of its
// own, so row kernels that keep a row in registers spilled; this keeps two per register.
template <typename T, int V>
struct Packed {
  static constexpr int NW = V * (int)sizeof(T) / 4;
  static_assert(NW >= 1 && NW <= 4 && NW * 4 == V * (int)sizeof(T), "Packed: 4..16 bytes");
  unsigned int w[NW];
  MLXA_DEVICE T get(int j) const {
    if constexpr (sizeof(T) == 2) return T{(unsigned short)(w[j >> 1] >> (16 * (j & 1)))};
    else if constexpr (sizeof(T) == 4) return uint_as_float(w[j]);
    else return __longlong_as_double((long long)(((uint64_t)w[2 * j + 1] << 32) | w[2 * j]));
  }
  MLXA_DEVICE void set(int j, T x) {
    if constexpr (sizeof(T) == 2) {
      const int sh = 16 * (j & 1);
      w[j >> 1] = (w[j >> 1] & ~(0xffffu << sh)) | ((unsigned int)x.bits << sh);
    } else if constexpr (sizeof(T) == 4) {
      w[j] = float_as_uint(x);
    } else {
      const uint64_t u = (uint64_t)__double_as_longlong(x);
      w[2 * j] = (unsigned int)u;
      w[2 * j + 1] = (unsigned int)(u >> 32);
    }
  }
  // the group at row[base..]: one vector load when whole and `vec` (dense and aligned),
  // else element by element at stride es; places past n keep what they held
  MLXA_DEVICE void load(const T* row, int base, int n, int64_t es, bool vec) {
    if (vec && base + V <= n) {
      const Vec<unsigned int, NW> q = *(const Vec<unsigned int, NW>*)(row + base);
#pragma unroll
      for (int i = 0; i < NW; ++i) w[i] = q.v[i];
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (base + j < n) set(j, row[(int64_t)(base + j) * es]);
    }
  }
  // every pass over held groups widens them again instead of keeping V floats alive
  MLXA_DEVICE void fence() {
#pragma unroll
    for (int i = 0; i < NW; ++i) reg_fence(w[i]);
  }
};
template <typename T, int V, int K> MLXA_DEVICE void fence_all(Packed<T, V> (&g)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k) g[k].fence();
}

// Elements per thread for contiguous kernels: 16-byte accesses on the wider side.
template <typename In, typename Out>
inline constexpr int vec_width = 16 / (sizeof(In) > sizeof(Out) ? sizeof(In) : sizeof(Out));

}  // namespace mlxa
