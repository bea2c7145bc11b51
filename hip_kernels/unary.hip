// Unary family: y = op(x), elementwise. Functors take and return the compute type
// (float for float16/bfloat16/float32, double for float64, complex64, the integer
// itself otherwise) and mirror MLX's CPU definitions; variants are instantiated by the
// generated unary.inc. Integer ops whose bits do not depend on signedness (negative,
// square, bitwise_invert) are instantiated once per storage size.
#include "mlxa/elementwise.h"

namespace mlxa::op {

// ---- complex64 helpers (std::complex<float> formulas) ---------------------------
MLXA_DEVICE complex64 cexp(complex64 z) {
  const float e = expf(z.real);
  return {e * cosf(z.imag), e * sinf(z.imag)};
}
MLXA_DEVICE complex64 clog(complex64 z) { return {logf(cabs(z)), atan2f(z.imag, z.real)}; }
MLXA_DEVICE complex64 csqrt(complex64 z) {
  if (z.real == 0.0f && z.imag == 0.0f) return {0.0f, z.imag};
  const float t = sqrtf((fabsf(z.real) + cabs(z)) * 0.5f);
  if (z.real >= 0.0f) return {t, z.imag / (2.0f * t)};
  return {fabsf(z.imag) / (2.0f * t), copysignf(t, z.imag)};
}
MLXA_DEVICE complex64 csin(complex64 z) { return {sinf(z.real) * coshf(z.imag), cosf(z.real) * sinhf(z.imag)}; }
MLXA_DEVICE complex64 ccos(complex64 z) { return {cosf(z.real) * coshf(z.imag), -sinf(z.real) * sinhf(z.imag)}; }
MLXA_DEVICE complex64 csinh(complex64 z) { return {sinhf(z.real) * cosf(z.imag), coshf(z.real) * sinf(z.imag)}; }
MLXA_DEVICE complex64 ccosh(complex64 z) { return {coshf(z.real) * cosf(z.imag), sinhf(z.real) * sinf(z.imag)}; }
MLXA_DEVICE complex64 cscale(complex64 z, float s) { return {z.real * s, z.imag * s}; }

// float, double and (where MLX has it) complex64 overloads of one math function
#define MLXA_MATH(Name, fexpr, dexpr)                                    \
  struct Name {                                                          \
    MLXA_DEVICE float operator()(float x) const { return fexpr; }        \
    MLXA_DEVICE double operator()(double x) const { return dexpr; }      \
  };
#define MLXA_MATH_C(Name, fexpr, dexpr, cexpr)                           \
  struct Name {                                                          \
    MLXA_DEVICE float operator()(float x) const { return fexpr; }        \
    MLXA_DEVICE double operator()(double x) const { return dexpr; }      \
    MLXA_DEVICE complex64 operator()(complex64 x) const { return cexpr; } \
  };

MLXA_MATH_C(Exp, expf(x), exp(x), cexp(x))
MLXA_MATH(Expm1, expm1f(x), expm1(x))
MLXA_MATH_C(Log, logf(x), log(x), clog(x))
MLXA_MATH_C(Log1p, log1pf(x), log1p(x), (clog(complex64{x.real + 1.0f, x.imag})))
MLXA_MATH_C(Log2, log2f(x), log2(x), cscale(clog(x), 1.4426950408889634f))
MLXA_MATH_C(Log10, log10f(x), log10(x), cscale(clog(x), 0.43429448190325176f))
MLXA_MATH_C(Sqrt, sqrtf(x), sqrt(x), csqrt(x))
// correctly rounded sqrt then divide, like MLX's CPU
MLXA_MATH_C(Rsqrt, 1.0f / sqrtf(x), 1.0 / sqrt(x), (complex64{1.0f, 0.0f} / csqrt(x)))
MLXA_MATH_C(Sin, sinf(x), sin(x), csin(x))
MLXA_MATH_C(Cos, cosf(x), cos(x), ccos(x))
MLXA_MATH_C(Tan, tanf(x), tan(x), csin(x) / ccos(x))
MLXA_MATH_C(Tanh, tanhf(x), tanh(x), csinh(x) / ccosh(x))
MLXA_MATH_C(Sinh, sinhf(x), sinh(x), csinh(x))
MLXA_MATH_C(Cosh, coshf(x), cosh(x), ccosh(x))
MLXA_MATH(ArcSin, asinf(x), asin(x))
MLXA_MATH(ArcCos, acosf(x), acos(x))
MLXA_MATH(ArcTan, atanf(x), atan(x))
MLXA_MATH(ArcSinh, asinhf(x), asinh(x))
MLXA_MATH(ArcCosh, acoshf(x), acosh(x))
MLXA_MATH(ArcTanh, atanhf(x), atanh(x))
MLXA_MATH(Erf, erff(x), erf(x))
MLXA_MATH(ErfInv, erfinvf(x), erfinv(x))
MLXA_MATH(Floor, floorf(x), floor(x))
MLXA_MATH(Ceil, ceilf(x), ceil(x))
// half to even, as MLX's Round (complex: each part)
MLXA_MATH_C(Round, rintf(x), rint(x), (complex64{rintf(x.real), rintf(x.imag)}))
#undef MLXA_MATH
#undef MLXA_MATH_C

// 1/(1+e^|x|) on the side that cannot overflow, as MLX computes it.
struct Sigmoid {
  template <typename T> MLXA_DEVICE T operator()(T x) const {
    const T y = T(1) / (T(1) + Exp{}(x < T(0) ? -x : x));
    return x < T(0) ? y : T(1) - y;
  }
};

// Integer-capable ops: integers wrap like two's complement hardware.
struct Abs {
  template <typename T> MLXA_DEVICE auto operator()(T x) const {
    if constexpr (is_complex_v<T>) return cabs(x);   // float32 result
    else if constexpr (std::is_same_v<T, double>) return fabs(x);
    else if constexpr (std::is_floating_point_v<T>) return fabsf(x);
    else return x < 0 ? wrap_sub(T(0), x) : x;
  }
};
struct Negative {
  template <typename T> MLXA_DEVICE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) return wrap_sub(T(0), x);
    else return -x;  // -0.0 for 0.0, not 0 - x
  }
};
struct Square {
  template <typename T> MLXA_DEVICE T operator()(T x) const {
    if constexpr (is_complex_v<T>) return x * x;
    else return wrap_mul(x, x);
  }
};
// -1, 0 or 1 (unsigned: 0 or 1); NaN gives 0 (both comparisons fail), -0.0 gives +0;
// complex: z / |z|, 0 for 0.
struct Sign {
  template <typename T> MLXA_DEVICE T operator()(T x) const {
    if constexpr (is_complex_v<T>) {
      const float m = cabs(x);
      return m == 0.0f ? complex64{0.0f, 0.0f} : complex64{x.real / m, x.imag / m};
    } else if constexpr (std::is_unsigned_v<T>) {
      return x > T(0) ? T(1) : T(0);
    } else {
      return x < T(0) ? T(-1) : (x > T(0) ? T(1) : T(0));
    }
  }
};
struct LogicalNot {
  MLXA_DEVICE bool operator()(bool x) const { return !x; }
};
struct BitwiseInvert {
  template <typename T> MLXA_DEVICE T operator()(T x) const { return (T)~x; }
};
struct Conjugate {
  MLXA_DEVICE complex64 operator()(complex64 x) const { return {x.real, -x.imag}; }
};
struct Real {
  MLXA_DEVICE float operator()(complex64 x) const { return x.real; }
};
struct Imag {
  MLXA_DEVICE float operator()(complex64 x) const { return x.imag; }
};

}  // namespace mlxa::op

#include "unary.inc"
