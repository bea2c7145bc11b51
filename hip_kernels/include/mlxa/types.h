// Element types, the compute type each is widened to, and MLX's conversion rules.
#pragma once

#include <stdint.h>
#include <type_traits>

#include "platform.h"

namespace mlxa {

// Every op computes in Compute<T>::type: float for the 16-bit floats, T otherwise.
template <typename T> struct Compute { using type = T; };
template <> struct Compute<half> { using type = float; };
template <> struct Compute<bfloat16> { using type = float; };
template <typename T> using compute_t = typename Compute<T>::type;

template <typename T> MLXA_DEVICE compute_t<T> widen(T x) { return x; }
MLXA_DEVICE float widen(half x) { return to_float(x); }
MLXA_DEVICE float widen(bfloat16 x) { return to_float(x); }

// Float -> integer as MLX's x86 CPU build does it (C++ leaves NaN and out-of-range
// values undefined; these are the values that build produces, so we match it rather
// than the GPU's saturating converters): truncation toward zero; NaN/out of range give
// INT_MIN for int32/int64 ("integer indefinite"); uint8 wraps from the int32 result;
// uint32 splits at 2^31 as a vectorised x86 conversion does (float16 sources take
// another path in MLX: see apply() in elementwise.h).
template <typename I>
MLXA_DEVICE I float_to_int(float x) {
  if constexpr (std::is_same_v<I, uint8_t>) {
    return (uint8_t)float_to_int<int32_t>(x);
  } else if constexpr (std::is_same_v<I, uint32_t>) {
    return x >= 2147483648.0f ? (uint32_t)float_to_int<int32_t>(x - 2147483648.0f) ^ 0x80000000u
                              : (uint32_t)float_to_int<int32_t>(x);
  } else {
    constexpr float lim = (float)(sizeof(I) == 8 ? 9223372036854775808.0 : 2147483648.0);
    // written so that NaN fails the test
    return (x >= -lim && x < lim) ? (I)x : (I)((uint64_t)1 << (8 * sizeof(I) - 1));
  }
}

// Narrow a compute value to the stored type Out.
template <typename Out, typename C>
MLXA_DEVICE Out cast(C x) {
  if constexpr (std::is_same_v<Out, C>) {
    return x;
  } else if constexpr (std::is_same_v<Out, bool>) {
    return x != C(0);
  } else if constexpr (std::is_same_v<Out, half>) {
    return to_half((float)x);
  } else if constexpr (std::is_same_v<Out, bfloat16>) {
    return to_bfloat16((float)x);
  } else if constexpr (std::is_floating_point_v<C> && std::is_integral_v<Out>) {
    return float_to_int<Out>((float)x);
  } else {
    return static_cast<Out>(x);
  }
}

// Integer arithmetic that wraps instead of being undefined on overflow.
template <typename T>
MLXA_DEVICE T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    return (T)((U)a + (U)b);
  } else {
    return a + b;
  }
}
template <typename T>
MLXA_DEVICE T wrap_sub(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    return (T)((U)a - (U)b);
  } else {
    return a - b;
  }
}
template <typename T>
MLXA_DEVICE T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    return (T)((U)a * (U)b);
  } else {
    return a * b;
  }
}

MLXA_DEVICE bool is_nan(float x) { return x != x; }

// A 16-byte (or smaller) aligned group of N elements: one vector load/store.
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// Elements per thread for contiguous kernels: 16-byte accesses on the wider side.
template <typename In, typename Out>
inline constexpr int vec_width = 16 / (sizeof(In) > sizeof(Out) ? sizeof(In) : sizeof(Out));

}  // namespace mlxa
