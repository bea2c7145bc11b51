// Unary family: y = op(x), elementwise. Functors take and return the compute type
// (float for every float dtype, the integer itself otherwise) and mirror MLX's CPU
// definitions; variants are instantiated by the generated unary.inc.
#include "mlxa/elementwise.h"

namespace mlxa::op {

#define MLXA_FLOAT_UNARY(Name, expr)                            \
  struct Name {                                                 \
    MLXA_DEVICE float operator()(float x) const { return expr; } \
  };

MLXA_FLOAT_UNARY(Exp, expf(x))
MLXA_FLOAT_UNARY(Expm1, expm1f(x))
MLXA_FLOAT_UNARY(Log, logf(x))
MLXA_FLOAT_UNARY(Log1p, log1pf(x))
MLXA_FLOAT_UNARY(Log2, log2f(x))
MLXA_FLOAT_UNARY(Log10, log10f(x))
MLXA_FLOAT_UNARY(Sqrt, sqrtf(x))
MLXA_FLOAT_UNARY(Rsqrt, 1.0f / sqrtf(x))  // correctly rounded sqrt then divide, like MLX's CPU
MLXA_FLOAT_UNARY(Sin, sinf(x))
MLXA_FLOAT_UNARY(Cos, cosf(x))
MLXA_FLOAT_UNARY(Tan, tanf(x))
MLXA_FLOAT_UNARY(Tanh, tanhf(x))
MLXA_FLOAT_UNARY(Sinh, sinhf(x))
MLXA_FLOAT_UNARY(Cosh, coshf(x))
MLXA_FLOAT_UNARY(ArcSin, asinf(x))
MLXA_FLOAT_UNARY(ArcCos, acosf(x))
MLXA_FLOAT_UNARY(ArcTan, atanf(x))
MLXA_FLOAT_UNARY(ArcSinh, asinhf(x))
MLXA_FLOAT_UNARY(ArcCosh, acoshf(x))
MLXA_FLOAT_UNARY(ArcTanh, atanhf(x))
MLXA_FLOAT_UNARY(Erf, erff(x))
MLXA_FLOAT_UNARY(ErfInv, erfinvf(x))
MLXA_FLOAT_UNARY(Floor, floorf(x))
MLXA_FLOAT_UNARY(Ceil, ceilf(x))
MLXA_FLOAT_UNARY(Round, rintf(x))  // half to even, as MLX's Round
#undef MLXA_FLOAT_UNARY

// 1/(1+e^|x|) on the side that cannot overflow, as MLX computes it.
struct Sigmoid {
  MLXA_DEVICE float operator()(float x) const {
    const float y = 1.0f / (1.0f + expf(fabsf(x)));
    return x < 0.0f ? y : 1.0f - y;
  }
};

// Integer-capable ops: integers wrap like two's complement hardware.
struct Abs {
  template <typename T> MLXA_DEVICE T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return fabsf(x);
    else return x < 0 ? wrap_sub(T(0), x) : x;
  }
};
struct Negative {
  template <typename T> MLXA_DEVICE T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return -x;  // -0.0 for 0.0, not 0 - x
    else return wrap_sub(T(0), x);
  }
};
struct Square {
  template <typename T> MLXA_DEVICE T operator()(T x) const { return wrap_mul(x, x); }
};
// -1, 0 or 1; NaN gives 0 (both comparisons fail), -0.0 gives +0.
struct Sign {
  template <typename T> MLXA_DEVICE T operator()(T x) const {
    return x < T(0) ? T(-1) : (x > T(0) ? T(1) : T(0));
  }
};
struct LogicalNot {
  MLXA_DEVICE bool operator()(bool x) const { return !x; }
};

}  // namespace mlxa::op

#include "unary.inc"
