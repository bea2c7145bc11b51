// Binary family: z = op(a, b), elementwise with broadcasting (zero strides) in the
// general layout. Both inputs share one dtype (MLX promotes before the primitive);
// functors take compute-type values and mirror MLX's CPU definitions.
#include "mlxa/elementwise.h"

namespace mlxa::op {

struct Add {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const { return wrap_add(a, b); }
};
struct Subtract {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const { return wrap_sub(a, b); }
};
struct Multiply {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const { return wrap_mul(a, b); }
};
// Integers (reached through FloorDivide only; MLX's divide promotes them to float):
// x / 0 is 0 as in MLX, and INT_MIN / -1 wraps instead of trapping.
struct Divide {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return b == 0 ? T(0) : (b == T(-1) ? wrap_sub(T(0), a) : a / b);
    else return a / b;
  }
};
struct FloorDivide {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      const T q = Divide{}(a, b);
      return (b != 0 && b != T(-1) && a % b != 0 && ((a < 0) != (b < 0))) ? T(q - 1) : q;
    } else {
      return floorf(a / b);
    }
  }
};
// NaN in either operand wins.
struct Maximum {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (is_nan(a)) return a;
    }
    return a > b ? a : b;
  }
};
struct Minimum {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (is_nan(a)) return a;
    }
    return a < b ? a : b;
  }
};
// Integers: exact by squaring (negative exponents give 0, as in MLX).
struct Power {
  template <typename T> MLXA_DEVICE T operator()(T base, T e) const {
    if constexpr (std::is_floating_point_v<T>) {
      return powf(base, e);
    } else {
      if (e < 0) return T(0);
      T r = 1;
      while (e) {
        if (e & 1) r = wrap_mul(r, base);
        e >>= 1;
        base = wrap_mul(base, base);
      }
      return r;
    }
  }
};
// Result takes the divisor's sign (Python's %); integer x % 0 is x, as in MLX.
struct Remainder {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const {
    T r;
    if constexpr (std::is_floating_point_v<T>) {
      r = remainderf(a, b);
    } else {
      if (b == 0) return a;
      if (b == T(-1)) return T(0);  // INT_MIN % -1 would trap on the CPU
      r = a % b;
    }
    if (r != T(0) && ((r < T(0)) != (b < T(0)))) r += b;
    return r;
  }
};
struct ArcTan2 {
  MLXA_DEVICE float operator()(float a, float b) const { return atan2f(a, b); }
};
// log(e^a + e^b) without overflow; infinities pass through as MLX does.
struct LogAddExp {
  MLXA_DEVICE float operator()(float a, float b) const {
    const float hi = Maximum{}(a, b), lo = Minimum{}(a, b);
    if (lo == -INFINITY || hi == INFINITY) return hi;
    return hi + log1pf(expf(lo - hi));
  }
};

#define MLXA_COMPARE(Name, cmp) \
  struct Name {                 \
    template <typename T> MLXA_DEVICE bool operator()(T a, T b) const { return a cmp b; } \
  };
MLXA_COMPARE(Equal, ==)
MLXA_COMPARE(NotEqual, !=)
MLXA_COMPARE(Less, <)
MLXA_COMPARE(LessEqual, <=)
MLXA_COMPARE(Greater, >)
MLXA_COMPARE(GreaterEqual, >=)
#undef MLXA_COMPARE

struct LogicalAnd {
  MLXA_DEVICE bool operator()(bool a, bool b) const { return a && b; }
};
struct LogicalOr {
  MLXA_DEVICE bool operator()(bool a, bool b) const { return a || b; }
};

}  // namespace mlxa::op

#include "binary.inc"
