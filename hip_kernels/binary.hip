// Binary family: z = op(a, b), elementwise with broadcasting (zero strides) in the
// general layout. Both inputs share one dtype (MLX promotes before the primitive);
// functors take compute-type values and mirror MLX's CPU definitions. Ops whose bits do
// not depend on signedness (add, subtract, multiply, equality, bitwise and/or/xor, left
// shift) are instantiated once per storage size. DivMod writes two outputs.
#include "mlxa/elementwise.h"

namespace mlxa::op {

template <typename T> inline constexpr bool is_bool_v = std::is_same_v<T, bool>;

// bool arithmetic as C++ does it on promoted ints, then stored as != 0
struct Add {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const {
    if constexpr (is_bool_v<T>) return a || b;
    else if constexpr (is_complex_v<T>) return a + b;
    else return wrap_add(a, b);
  }
};
struct Subtract {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const {
    if constexpr (is_bool_v<T>) return a != b;
    else if constexpr (is_complex_v<T>) return a - b;
    else return wrap_sub(a, b);
  }
};
struct Multiply {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const {
    if constexpr (is_bool_v<T>) return a && b;
    else if constexpr (is_complex_v<T>) return a * b;
    else return wrap_mul(a, b);
  }
};
// Integers (reached through FloorDivide only; MLX's divide promotes them to float):
// x / 0 is 0 as in MLX, and INT_MIN / -1 wraps instead of trapping.
struct Divide {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const {
    if constexpr (is_bool_v<T>) return a && b;
    else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>)
      return b == 0 ? T(0) : (b == T(-1) ? wrap_sub(T(0), a) : T(a / b));
    else if constexpr (std::is_integral_v<T>) return b == 0 ? T(0) : T(a / b);
    else return a / b;
  }
};
MLXA_DEVICE float floor_of(float x) { return floorf(x); }
MLXA_DEVICE double floor_of(double x) { return floor(x); }
struct FloorDivide {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const {
    if constexpr (is_bool_v<T>) {
      return a && b;
    } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      const T q = Divide{}(a, b);
      return (b != 0 && b != T(-1) && a % b != 0 && ((a < 0) != (b < 0))) ? T(q - 1) : q;
    } else if constexpr (std::is_integral_v<T>) {
      return Divide{}(a, b);
    } else {
      return floor_of(a / b);
    }
  }
};
// float16/bfloat16: MLX floors the quotient already rounded to the 16-bit type.
template <typename S>
struct FloorDivideR {
  MLXA_DEVICE float operator()(float a, float b) const { return floorf(widen(cast<S>(a / b))); }
};
// NaN in the first operand wins (MLX's CPU: a > b ? a : b after a NaN check on a).
struct Maximum {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const {
    if constexpr (is_bool_v<T>) return a || b;
    if constexpr (std::is_floating_point_v<T>) {
      if (is_nan(a)) return a;
    }
    return a > b ? a : b;
  }
};
struct Minimum {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const {
    if constexpr (is_bool_v<T>) return a && b;
    if constexpr (std::is_floating_point_v<T>) {
      if (is_nan(a)) return a;
    }
    return a < b ? a : b;
  }
};
MLXA_DEVICE float pow_of(float a, float b) { return powf(a, b); }
MLXA_DEVICE double pow_of(double a, double b) { return pow(a, b); }
// Integers: exact by squaring (negative exponents give 0, as in MLX).
struct Power {
  template <typename T> MLXA_DEVICE T operator()(T base, T e) const {
    if constexpr (is_bool_v<T>) {
      return base || !e;
    } else if constexpr (std::is_floating_point_v<T>) {
      return pow_of(base, e);
    } else {
      if constexpr (std::is_signed_v<T>) {
        if (e < 0) return T(0);
      }
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
MLXA_DEVICE float rem_of(float a, float b) { return remainderf(a, b); }
MLXA_DEVICE double rem_of(double a, double b) { return remainder(a, b); }
// Result takes the divisor's sign (Python's %); integer x % 0 is x, as in MLX.
struct Remainder {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const {
    if constexpr (is_bool_v<T>) {
      return a && !b;
    } else if constexpr (std::is_unsigned_v<T>) {
      return b == 0 ? a : T(a % b);
    } else {
      T r;
      if constexpr (std::is_floating_point_v<T>) {
        r = rem_of(a, b);
      } else {
        if (b == 0) return a;
        if (b == T(-1)) return T(0);  // INT_MIN % -1 would trap on the CPU
        r = T(a % b);
      }
      if (r != T(0) && ((r < T(0)) != (b < T(0)))) r = T(r + b);
      return r;
    }
  }
};
struct ArcTan2 {
  MLXA_DEVICE float operator()(float a, float b) const { return atan2f(a, b); }
  MLXA_DEVICE double operator()(double a, double b) const { return atan2(a, b); }
};
MLXA_DEVICE float log1p_of(float x) { return log1pf(x); }
MLXA_DEVICE double log1p_of(double x) { return log1p(x); }
MLXA_DEVICE float exp_of(float x) { return expf(x); }
MLXA_DEVICE double exp_of(double x) { return exp(x); }
// log(e^a + e^b) without overflow; infinities pass through as MLX does.
struct LogAddExp {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const {
    const T hi = Maximum{}(a, b), lo = Minimum{}(a, b);
    if (lo == -T(INFINITY) || hi == T(INFINITY)) return hi;
    return hi + log1p_of(exp_of(lo - hi));
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

struct BitwiseAnd {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const { return T(a & b); }
};
struct BitwiseOr {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const { return T(a | b); }
};
struct BitwiseXor {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const { return T(a ^ b); }
};
// Shifts as MLX's x86 build computes them on its contiguous path: 8/16-bit operands are
// promoted to int, and the count is taken modulo the promoted width (32, or 64 for
// 64-bit types), as x86's shift instructions do; negative counts wrap the same way.
template <typename T> using promoted_t = std::conditional_t<(sizeof(T) < 4), int32_t, T>;
struct LeftShift {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const {
    using P = std::make_unsigned_t<promoted_t<T>>;
    return T((P)a << ((unsigned)b & (8 * sizeof(P) - 1)));
  }
};
struct RightShift {
  template <typename T> MLXA_DEVICE T operator()(T a, T b) const {
    using P = promoted_t<T>;
    return T((P)a >> ((unsigned)b & (8 * sizeof(P) - 1)));
  }
};

}  // namespace mlxa::op

namespace mlxa {

// DivMod: floor_divide and remainder of the same operands, two row-contiguous outputs.
template <typename T>
MLXA_DEVICE void divmod_one(T a, T b, T* q, T* r, int64_t i) {
  const auto x = widen(a), y = widen(b);
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>)
    q[i] = cast<T>(op::FloorDivideR<T>{}(x, y));
  else
    q[i] = cast<T>(op::FloorDivide{}(x, y));
  r[i] = cast<T>(op::Remainder{}(x, y));
}

template <typename T>
MLXA_DEVICE void divmod_v(const DivModVArgs& p) {
  const T* a = (const T*)p.a;
  const T* b = (const T*)p.b;
  for (int64_t i = global_thread<int64_t>(); i < p.n; i += grid_threads<int64_t>())
    divmod_one<T>(a[i], b[i], (T*)p.q, (T*)p.r, i);
}

template <typename T>
MLXA_DEVICE void divmod_g(const DivModGArgs& p) {
  const T* a = (const T*)p.a;
  const T* b = (const T*)p.b;
  const int64_t* const strides[2] = {p.a_strides, p.b_strides};
  strided_for_each<int32_t, 2>((int32_t)p.n, p.ndim, p.shape, strides, [&](int32_t i, const int32_t (&off)[2]) {
    divmod_one<T>(a[off[0]], b[off[1]], (T*)p.q, (T*)p.r, i);
  });
}

}  // namespace mlxa

#define MLXA_DIVMOD_V(name, T) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_BLOCK_MAX) name(DivModVArgs a) { mlxa::divmod_v<T>(a); }
#define MLXA_DIVMOD_G(name, T) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_BLOCK_MAX) name(DivModGArgs a) { mlxa::divmod_g<T>(a); }

#include "binary.inc"
