"""The elementwise families on the dtypes added after the first eight (uint16, uint64,
int8, int16, float64, complex64) and the primitives added with them (BitwiseBinary,
BitwiseInvert, Conjugate, Real, Imag, DivMod, 14x14 AsType), end to end through the
evaluator against plain MLX, on contiguous, transposed and broadcast inputs."""

import mlx.core as mx
import numpy as np
import pytest

import oracle

pytestmark = pytest.mark.gpu

DT = {n: getattr(mx, n if n != "bool" else "bool_") for n in
      ("bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
       "float16", "bfloat16", "float32", "float64", "complex64")}
INTS = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64")
NEW_INTS = ("uint16", "uint64", "int8", "int16")
SHAPE = (33, 65)


def make(dtype, seed, lo=-50, hi=50, shape=SHAPE, specials=False):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dtype == "bool":
        return mx.array((rng.random(n) < 0.5).reshape(shape))
    if dtype in INTS:
        info = np.iinfo(dtype)
        x = rng.integers(max(info.min, lo), min(info.max, hi), n, endpoint=True)
        if n > 8:
            x[:2] = [max(info.min, -2**62), min(info.max, 2**62)]   # wrap-around edges
        return mx.array(x.astype(dtype).reshape(shape))
    x = rng.uniform(lo, hi, n)
    if specials and n > 8:
        x[1:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    if dtype == "complex64":
        y = rng.uniform(lo, hi, n)
        return mx.array((x + 1j * y).astype(np.complex64).reshape(shape))
    return mx.array(x.reshape(shape), dtype=mx.float32 if dtype != "float64" else mx.float64).astype(DT[dtype])


def layouts(x):
    """contiguous, transposed view (read as the same shape), row broadcast."""
    return {"contiguous": lambda a: a,
            "transposed": lambda a: mx.swapaxes(a, 0, 1),
            "broadcast": lambda a: mx.broadcast_to(a[:1], a.shape)}


def tol(dtype, op=""):
    if dtype == "float64":
        if op in ("erf", "erfinv"):
            return 2e-5, 1e-6
        # MLX's CPU computes float64 sin/cos/exp with float32-accurate approximations
        # (max abs error ~1.5e-7 against numpy): compare at that precision
        return (1e-6, 3e-7) if op in ("sin", "cos", "exp", "expm1") else (1e-6, 1e-9)
    return None, None


UNARY_F = ["abs", "negative", "square", "sign", "exp", "expm1", "log", "log1p", "log2", "log10",
           "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "sinh", "cosh", "arcsin", "arccos",
           "arctan", "arcsinh", "arccosh", "arctanh", "sigmoid", "erf", "erfinv", "floor", "ceil", "round"]
UNARY_C = ["abs", "negative", "square", "sign", "exp", "log", "log1p", "log2", "log10", "sqrt", "rsqrt",
           "sin", "cos", "tan", "tanh", "sinh", "cosh", "round", "conjugate", "real", "imag"]
UNARY_I = ["abs", "negative", "square", "sign", "floor", "bitwise_invert"]
DOMAIN = {"log": (0.05, 4), "log2": (0.05, 4), "log10": (0.05, 4), "sqrt": (0, 4), "rsqrt": (0.05, 4),
          "log1p": (-0.9, 3), "arcsin": (-0.95, 0.95), "arccos": (-0.95, 0.95), "arctanh": (-0.95, 0.95),
          "erfinv": (-0.95, 0.95), "arccosh": (1.05, 4), "tan": (-1.4, 1.4)}
PRIM = {"negative": "Negative", "conjugate": "Conjugate", "real": "Real", "imag": "Imag",
        "bitwise_invert": "BitwiseInvert", "sigmoid": "Sigmoid", "log2": "Log", "log10": "Log",
        "rsqrt": "Sqrt", "arcsin": "ArcSin", "arccos": "ArcCos", "arctan": "ArcTan",
        "arcsinh": "ArcSinh", "arccosh": "ArcCosh", "arctanh": "ArcTanh", "erfinv": "ErfInv",
        "expm1": "Expm1", "log1p": "Log1p"}
UNARY_CASES = ([(op, "float64") for op in UNARY_F] + [(op, "complex64") for op in UNARY_C]
               + [(op, dt) for op in UNARY_I for dt in NEW_INTS])


@pytest.mark.parametrize("op,dtype", UNARY_CASES, ids=[f"{o}-{d}" for o, d in UNARY_CASES])
def test_unary_new_dtypes(gpu_runtime, op, dtype):
    lo, hi = DOMAIN.get(op, (-3, 3))
    if dtype == "complex64":
        lo, hi = (0.1, 2) if op in DOMAIN else (-2, 2)
    x = make(dtype, 1, lo, hi, specials=dtype == "float64" and op not in ("round",))
    prim = PRIM.get(op, op.capitalize())
    rt, at = tol(dtype, op)
    for name, view in layouts(x).items():
        oracle.check_gpu(lambda a: getattr(mx, op)(view(a)), x, prims=(prim,), rtol=rt, atol=at,
                         what=f"{op} {dtype} {name}")


BINARY_ALL = ["add", "subtract", "multiply", "maximum", "minimum", "power", "remainder", "floor_divide",
              "equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]
BPRIM = {"floor_divide": "FloorDivide", "not_equal": "NotEqual", "less_equal": "LessEqual",
         "greater_equal": "GreaterEqual", "logaddexp": "LogAddExp", "arctan2": "ArcTan2"}
BINARY_CASES = ([(op, dt) for op in BINARY_ALL for dt in NEW_INTS + ("float64", "bool")
                 if not (dt == "bool" and op in ("subtract",))]
                + [(op, "float64") for op in ("divide", "arctan2", "logaddexp")]
                + [(op, "complex64") for op in ("add", "subtract", "multiply", "divide", "equal",
                                                "not_equal")]
                + [("floor_divide", "float16"), ("floor_divide", "bfloat16")])


@pytest.mark.parametrize("op,dtype", BINARY_CASES, ids=[f"{o}-{d}" for o, d in BINARY_CASES])
def test_binary_new_dtypes(gpu_runtime, op, dtype):
    a = make(dtype, 2, specials=dtype == "float64")
    b = make(dtype, 3, -8, 9) if op == "power" else make(dtype, 3)
    if op in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "maximum", "minimum"):
        b = mx.where(mx.arange(a.size).reshape(a.shape) % 3 == 0, a, b)   # ties
    if dtype in ("float16", "bfloat16"):
        a = make(dtype, 2, -300, 300)
        b = mx.where(mx.abs(make(dtype, 3, -3, 3)) < 0.1, mx.array(0.7, dtype=DT[dtype]), make(dtype, 3, -3, 3))
    prim = BPRIM.get(op, "".join(w.capitalize() for w in op.split("_")))
    rt, at = tol(dtype)
    lay = layouts(a)
    for na, nb in (("contiguous", "contiguous"), ("transposed", "contiguous"), ("contiguous", "broadcast")):
        fa, fb = lay[na], lay[nb]
        if na == "transposed":   # both operands read as (65, 33) views
            f = lambda x, y: getattr(mx, op)(x.T, y.T)
        else:
            f = lambda x, y, fa=fa, fb=fb: getattr(mx, op)(fa(x), fb(y))
        oracle.check_gpu(f, a, b, prims=(prim,), rtol=rt, atol=at, what=f"{op} {dtype} {na}/{nb}")
    # a scalar operand (the strided kernel with zero strides for the rarer dtypes)
    oracle.check_gpu(lambda x: getattr(mx, op)(x, b[3, 4]), a, prims=(prim,), rtol=rt, atol=at,
                     what=f"{op} {dtype} scalar")


BITWISE = [("bitwise_and", 0), ("bitwise_or", 1), ("bitwise_xor", 2), ("left_shift", 3), ("right_shift", 4)]


# MLX promotes bool shifts to uint8, which the uint8 cases cover
BITWISE_CASES = [(op, code, d) for op, code in BITWISE for d in INTS + ("bool",)
                 if not (d == "bool" and "shift" in op)]


@pytest.mark.parametrize("op,code,dtype", BITWISE_CASES, ids=[f"{o}-{d}" for o, _, d in BITWISE_CASES])
def test_bitwise(gpu_runtime, op, code, dtype):
    a = make(dtype, 4, -1000, 1000)
    bits = 8 * np.dtype(dtype if dtype != "bool" else "uint8").itemsize
    # counts in range for every layout; counts past the width only where both operands
    # are contiguous (MLX's own results for those depend on its code path)
    b = make(dtype, 5, 0, bits - 1) if "shift" in op else make(dtype, 5, -1000, 1000)
    oracle.check_gpu(lambda x, y: getattr(mx, op)(x, y), a, b, prims=("BitwiseBinary",), what=f"{op} {dtype}")
    oracle.check_gpu(lambda x, y: getattr(mx, op)(x.T, y.T), a, b, prims=("BitwiseBinary",),
                     what=f"{op} {dtype} transposed")
    oracle.check_gpu(lambda x, y: getattr(mx, op)(x, y[:1]), a, b, prims=("BitwiseBinary",),
                     what=f"{op} {dtype} broadcast")
    if "shift" in op and dtype != "bool":
        wide = make(dtype, 6, -70, 70)
        oracle.check_gpu(lambda x, y: getattr(mx, op)(x, y), a, wide, prims=("BitwiseBinary",),
                         what=f"{op} {dtype} counts past the width")


@pytest.mark.parametrize("dtype", ("bool",) + INTS + ("float16", "bfloat16", "float32", "float64"))
def test_divmod(gpu_runtime, dtype):
    a = make(dtype, 7, -100, 100)
    b = make(dtype, 8, -9, 9)
    if dtype in ("float16", "bfloat16", "float32", "float64"):
        b = mx.where(mx.abs(b) < 0.5, mx.array(1.5, dtype=DT[dtype]), b)
    elif dtype != "bool":
        # no zero divisors: MLX's own CPU DivMod traps (SIGFPE) on integer x / 0
        b = mx.where(b == 0, mx.array(3, dtype=DT[dtype]), b)
    else:
        b = mx.ones_like(b)
    oracle.check_gpu(lambda x, y: list(mx.divmod(x, y)), a, b, prims=("DivMod",), what=f"divmod {dtype}")
    oracle.check_gpu(lambda x, y: list(mx.divmod(x.T, y[:1].T)), a, b, prims=("DivMod",),
                     what=f"divmod {dtype} strided")


EDGES = [np.nan, np.inf, -np.inf, 3e9, -3e9, 1e20, -1e20, -0.0, 2.5, -2.5, -1.5, 255.5, 256.0, 70000.0,
         -70000.0, 40000.0, 2.0**63, 2.0**64, -1.0, 2.0**31, 1.5e19, -129.0, 1e-8, 0.5]


def cast_source(src, seed, dst):
    if src in ("float16", "bfloat16", "float32", "float64", "complex64"):
        x = np.random.default_rng(seed).uniform(-300, 300, SHAPE[0] * SHAPE[1])
        x[1:1 + len(EDGES)] = EDGES
        if dst in ("uint32", "uint64"):
            # NaN, inf and large negatives to unsigned: MLX's result depends on its code path
            x[1:1 + len(EDGES)] = np.where(np.isfinite(x[1:1 + len(EDGES)]) & (x[1:1 + len(EDGES)] > -2**31),
                                           x[1:1 + len(EDGES)], 7.0)
        if src == "complex64":
            return mx.array((x + 0.5j).astype(np.complex64).reshape(SHAPE))
        return mx.array(x.reshape(SHAPE), dtype=mx.float64).astype(DT[src])
    if src == "bool":
        return make("bool", seed)
    info = np.iinfo(src)
    x = np.random.default_rng(seed).integers(info.min, info.max, SHAPE[0] * SHAPE[1], endpoint=True,
                                             dtype=np.int64 if src != "uint64" else np.uint64)
    return mx.array(x.astype(src).reshape(SHAPE))


CAST_CASES = [(s, d) for s in DT for d in DT]


@pytest.mark.parametrize("src,dst", CAST_CASES, ids=[f"{s}-{d}" for s, d in CAST_CASES])
def test_astype_every_pair(gpu_runtime, src, dst):
    x = cast_source(src, 9, dst)
    for name, view in (("contiguous", lambda a: a), ("transposed", lambda a: a.T)):
        got = oracle.check_gpu(lambda a: view(a).astype(DT[dst]), x, prims=("AsType",) if src != dst else (),
                               rtol=0, atol=0, what=f"{src}->{dst} {name}")
        with oracle.plain_mlx():
            ref = view(x).astype(DT[dst])
            # bit-exact, NaN payloads and signed zeros included
            g = np.array(got.view(mx.uint8) if dst not in ("bool",) else got)
            r = np.array(ref.view(mx.uint8) if dst not in ("bool",) else ref)
        np.testing.assert_array_equal(g, r, err_msg=f"{src}->{dst} {name} bits")
