"""Every unary, binary and copy kernel on the GPU, against MLX's CPU result for the
same op on the same view: contiguous, misaligned, transposed, strided, reversed,
broadcast (row and scalar), 0-d and empty inputs, plus large-index cases.

Kernels are launched directly (driver + Modules + the family launchers) on device
memory, so these tests need neither the bridge nor the evaluator. Integer, bool and
copy results must be bit-exact; floats within a dtype tolerance, with NaN and inf in
the same places.
"""

from types import SimpleNamespace

import mlx.core as mx
import numpy as np
import pytest

from mlx_amd.runtime import kernel_table as kt
from mlx_amd.runtime.launch import run
from mlx_amd.runtime.ops import binary, copy, unary
from mlx_amd.runtime.ops.elementwise import ITEMSIZE, Layout

pytestmark = pytest.mark.gpu

MX = {"bool": mx.bool_, "uint8": mx.uint8, "uint32": mx.uint32, "int32": mx.int32,
      "int64": mx.int64, "float16": mx.float16, "bfloat16": mx.bfloat16, "float32": mx.float32}
FLOAT = ("float32", "float16", "bfloat16")
TOL = {"float32": (2e-6, 1e-6), "float16": (2e-3, 1e-3), "bfloat16": (1.6e-2, 1e-2)}
ROWS, COLS = 37, 65   # odd sizes: vector tails and unaligned rows

# name -> (input shape, base buffer length, strides, offset), over the output (ROWS, COLS)
N = ROWS * COLS
VIEWS = {
    "contiguous": ((ROWS, COLS), N, (COLS, 1), 0),
    "misaligned": ((ROWS, COLS), N + 1, (COLS, 1), 1),
    "transposed": ((ROWS, COLS), N, (1, ROWS), 0),
    "strided": ((ROWS, COLS), 4 * N, (4 * COLS, 2), 3),
    "reversed": ((ROWS, COLS), N, (-COLS, 1), (ROWS - 1) * COLS),
    "row_bcast": ((ROWS, COLS), COLS, (0, 1), 0),
    "scalar": ((ROWS, COLS), 1, (0, 0), 0),
    "0d": ((), 3, (), 2),
    "empty": ((0, COLS), 1, (COLS, 1), 0),
}
BINARY_PAIRS = [("contiguous", "contiguous"), ("scalar", "contiguous"), ("contiguous", "scalar"),
                ("scalar", "scalar"), ("misaligned", "contiguous"), ("transposed", "row_bcast"),
                ("strided", "reversed"), ("row_bcast", "scalar"), ("0d", "0d"), ("empty", "empty")]


@pytest.fixture(scope="module")
def gpu():
    from mlx_amd.runtime.driver import get_driver
    from mlx_amd.runtime.modules import Modules

    drv = get_driver()
    if drv.platform == "host":
        pytest.fail("kernel tests need a GPU driver (MLX_AMD_DRIVER=cuda|hip), got the host driver")
    props = drv.properties(drv.current_device())
    return SimpleNamespace(drv=drv, props=props, mods=Modules(drv, props), live=[])


# ---------------------------------------------------------------- host <-> device
def host_bytes(a: mx.array) -> np.ndarray:
    a = mx.contiguous(a)
    if a.dtype in (mx.float16, mx.bfloat16):
        a = a.view(mx.uint16)
    return np.ascontiguousarray(np.array(a)).view(np.uint8).reshape(-1)


def from_bytes(raw: np.ndarray, dtype: str, shape) -> mx.array:
    if dtype in ("float16", "bfloat16"):
        return mx.array(raw.view(np.uint16).reshape(shape)).view(MX[dtype])
    np_dt = {"bool": np.bool_, "uint8": np.uint8, "uint32": np.uint32, "int32": np.int32,
             "int64": np.int64, "float32": np.float32}[dtype]
    return mx.array(raw.view(np_dt).reshape(shape))   # MLX dims are 32-bit: shape first


def upload(gpu, a: mx.array) -> int:
    raw = host_bytes(a)
    ptr = gpu.drv.malloc(max(raw.nbytes, 16))
    gpu.live.append(ptr)
    if raw.nbytes:
        gpu.drv.memcpy_htod(ptr, raw.ctypes.data, raw.nbytes)
    return ptr


def download(gpu, ptr, dtype, shape) -> mx.array:
    n = int(np.prod(shape)) * ITEMSIZE[dtype]
    raw = np.empty(n, np.uint8)
    if n:
        gpu.drv.memcpy_dtoh(raw.ctypes.data, ptr, n)
    return from_bytes(raw, dtype, shape)


@pytest.fixture(autouse=True)
def _free(gpu):
    yield
    gpu.drv.synchronize()
    while gpu.live:
        gpu.drv.free(gpu.live.pop())


def operand(gpu, base: mx.array, view: str):
    """(MLX view for the reference, Layout, device pointer of its element 0)."""
    shape, _, strides, offset = VIEWS[view]
    ref = mx.as_strided(base, shape, strides, offset)
    lay = Layout.strided(shape, strides, str(base.dtype).split(".")[-1])
    return ref, lay, upload(gpu, base) + offset * ITEMSIZE[lay.dtype]


def launch(gpu, plan, ptrs, out_dtype, shape):
    assert plan is not None
    assert kt.has_kernel(plan.family, plan.kernel)
    out = gpu.drv.malloc(max(int(np.prod(shape)) * ITEMSIZE[out_dtype], 16))
    gpu.live.append(out)
    run(plan, gpu.mods, gpu.drv, tuple(ptrs) + (out,))
    gpu.drv.synchronize()
    return download(gpu, out, out_dtype, shape)


def assert_same(ours: mx.array, ref: mx.array, what: str):
    assert ours.shape == ref.shape and ours.dtype == ref.dtype, what
    dt = str(ref.dtype).split(".")[-1]
    if dt in FLOAT:
        a, b = np.array(ours.astype(mx.float32)), np.array(ref.astype(mx.float32))
        rtol, atol = TOL[dt]
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=f"NaN positions: {what}")
        np.testing.assert_array_equal(np.isinf(a) * np.sign(a), np.isinf(b) * np.sign(b),
                                      err_msg=f"inf positions: {what}")
        fin = np.isfinite(b)
        np.testing.assert_allclose(a[fin], b[fin], rtol=rtol, atol=atol, err_msg=what)
    else:
        np.testing.assert_array_equal(np.array(ours), np.array(ref), err_msg=what)


# ---------------------------------------------------------------- inputs
SPECIALS = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0]
DOMAIN = {"log": (0.05, 4), "log2": (0.05, 4), "log10": (0.05, 4), "sqrt": (0, 4), "rsqrt": (0.05, 4),
          "log1p": (-0.9, 3), "arcsin": (-0.95, 0.95), "arccos": (-0.95, 0.95),
          "arctanh": (-0.95, 0.95), "erfinv": (-0.95, 0.95), "arccosh": (1.05, 4),
          "tan": (-1.4, 1.4), "exp": (-8, 8), "expm1": (-4, 4), "sinh": (-6, 6), "cosh": (-6, 6),
          "power": (0.2, 3), "logaddexp": (-20, 20)}


def values(dtype, size, seed, op=None, specials=True, lo_hi=None):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return mx.array(rng.random(size) < 0.5)
    if dtype in FLOAT:
        lo, hi = lo_hi or DOMAIN.get(op, (-3, 3))
        x = rng.uniform(lo, hi, size).astype(np.float32)
        if op in ("round",):
            x = np.round(x * 2) / 2   # exact .5 ties: half to even must match
        if specials and size >= 8:
            x[1:1 + len(SPECIALS)] = SPECIALS
        return mx.array(x).astype(MX[dtype])
    info = np.iinfo(dtype)
    lo, hi = lo_hi or (max(info.min, -1000), min(info.max, 1000))
    return mx.array(rng.integers(lo, hi, size, endpoint=True).astype(dtype))


def mx_unary(op):
    return {"negative": mx.negative, "logical_not": mx.logical_not}.get(op) or getattr(mx, op)


# ---------------------------------------------------------------- unary
# the dtypes this file's helpers cover; the other dtypes: tests/ops/test_elementwise_dtypes_gpu.py
OLD = ("bool", "uint8", "uint32", "int32", "int64", "float16", "bfloat16", "float32")
UNARY_CASES = [(op, dt) for op, (_, dts, _) in kt.UNARY.items() for dt in dts if dt in OLD]


@pytest.mark.parametrize("op,dtype", UNARY_CASES, ids=[f"{o}-{d}" for o, d in UNARY_CASES])
def test_unary(gpu, op, dtype):
    for i, view in enumerate(VIEWS):
        shape, base_len = VIEWS[view][:2]
        base = values(dtype, base_len, seed=i, op=op)
        ref_in, lay, ptr = operand(gpu, base, view)
        out = Layout.row_major(shape, dtype)
        plan = unary.plan(op, (lay,), out, gpu.props)
        ours = launch(gpu, plan, (ptr,), dtype, shape)
        ref = mx_unary(op)(ref_in)
        mx.eval(ref)
        assert_same(ours, ref, f"{op} {dtype} {view} ({plan.kernel})")


# ---------------------------------------------------------------- binary
BINARY_CASES = [(op, dt) for op, (_, dts, _) in kt.BINARY.items() for dt in dts
                if dt in OLD and op not in ("floor_divide_r",) and not op.startswith(("bitwise", "left", "right"))]


def binary_inputs(op, dtype, n, seed):
    if dtype == "bool":
        return values("bool", n, seed), values("bool", n, seed + 100)
    if dtype in FLOAT:
        a = values(dtype, n, seed, op)
        b = values(dtype, n, seed + 100, op, specials=False)
        if op in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
                  "maximum", "minimum"):
            b = mx.where(mx.arange(n) % 3 == 0, a, b)   # ties and NaN against NaN
        if op in ("remainder", "floor_divide", "divide"):
            b = mx.where(mx.abs(b) < 0.1, mx.array(0.75, dtype=b.dtype), b)
        return a, b
    if op == "power":
        return values(dtype, n, seed, lo_hi=(-6, 6)), values(dtype, n, seed + 100, lo_hi=(-2, 11))
    a = values(dtype, n, seed)
    b = values(dtype, n, seed + 100, lo_hi=(-40, 40))
    if op in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
              "maximum", "minimum"):
        b = mx.where(mx.arange(n) % 3 == 0, a, b)
    return a, b   # zero divisors included: MLX defines x // 0 = 0 and x % 0 = x


@pytest.mark.parametrize("op,dtype", BINARY_CASES, ids=[f"{o}-{d}" for o, d in BINARY_CASES])
def test_binary(gpu, op, dtype):
    out_dtype = kt.BINARY[op][2] or dtype
    for i, (va, vb) in enumerate(BINARY_PAIRS):
        shape = VIEWS[va][0]
        a_base, _ = binary_inputs(op, dtype, VIEWS[va][1], seed=i)
        _, b_base = binary_inputs(op, dtype, VIEWS[vb][1], seed=i)
        ra, la, pa = operand(gpu, a_base, va)
        rb, lb, pb = operand(gpu, b_base, vb)
        plan = binary.plan(op, (la, lb), Layout.row_major(shape, out_dtype), gpu.props)
        ours = launch(gpu, plan, (pa, pb), out_dtype, shape)
        ref = getattr(mx, op)(ra, rb)
        mx.eval(ref)
        assert_same(ours, ref, f"{op} {dtype} {va}/{vb} ({plan.kernel})")


# ---------------------------------------------------------------- copy
COPY_CASES = [(s, d) for s in OLD for d in OLD]
EDGES = [float("nan"), float("inf"), -float("inf"), 3e9, -3e9, 1e20, -1e20, -0.0, 2.5, -2.5,
         -1.5, 255.5, 256.0, 70000.0, 1e-8]
# float -> uint32 of NaN, inf and values below -2^31: MLX's own result differs between its
# contiguous and strided code paths (C++ leaves it undefined), so only the others are compared
EDGES_U32 = [3e9, 4e9, -0.0, 2.5, -2.5, -1.5, 255.5, 256.0, 70000.0, 1e-8, 2.0**31, -1.0,
             -2.0**31, 1.0, 0.5]


def copy_source(src, dst, n, seed):
    if src in FLOAT:
        x = values("float32", n, seed, lo_hi=(-300, 300), specials=False)
        edges = EDGES_U32 if dst == "uint32" and src != "float16" else EDGES
        if n >= len(edges) + 1:   # NaN/out-of-range casts follow MLX's CPU build (copy.py)
            x = mx.concatenate([x[:1], mx.array(edges), x[1 + len(edges):]])
        return x.astype(MX[src])
    if src == "bool":
        return values("bool", n, seed)
    info = np.iinfo(src)
    rng = np.random.default_rng(seed)
    x = rng.integers(max(info.min, -(2**40)), min(info.max, 2**40), n, endpoint=True, dtype=np.int64)
    x[: n // 2] %= 70000
    return mx.array(x.astype(src))


@pytest.mark.parametrize("src,dst", COPY_CASES, ids=[f"{s}-{d}" for s, d in COPY_CASES])
def test_copy(gpu, src, dst):
    for i, view in enumerate(("contiguous", "misaligned", "transposed", "reversed", "scalar", "0d",
                              "empty")):
        shape, base_len = VIEWS[view][:2]
        ref_in, lay, ptr = operand(gpu, copy_source(src, dst, base_len, i), view)
        plan = copy.plan("AsType", (lay,), Layout.row_major(shape, dst), gpu.props)
        ours = launch(gpu, plan, (ptr,), dst, shape)
        ref = ref_in.astype(MX[dst])
        mx.eval(ref)
        # bit-exact, including NaN payloads and signed zeros
        np.testing.assert_array_equal(host_bytes(ours), host_bytes(ref),
                                      err_msg=f"{src}->{dst} {view} ({plan.kernel})")


def test_reshape_of_transposed_view(gpu):
    base = values("int32", N, 7)
    ref_in, lay, ptr = operand(gpu, base, "transposed")
    plan = copy.plan("Reshape", (lay,), Layout.row_major((COLS, ROWS), "int32"), gpu.props)
    ours = launch(gpu, plan, (ptr,), "int32", (COLS, ROWS))
    assert_same(ours, ref_in.reshape(COLS, ROWS), "reshape")


def test_donated_output_aliases_input(gpu):
    """out == in (the evaluator donates a dead input): every kernel reads before it writes."""
    x = values("float32", 4099, 3)
    ptr = upload(gpu, x)
    lay = Layout.row_major((4099,), "float32")
    run(unary.plan("exp", (lay,), lay, gpu.props), gpu.mods, gpu.drv, (ptr, ptr))
    run(binary.plan("add", (lay, lay), lay, gpu.props), gpu.mods, gpu.drv, (ptr, ptr, ptr))
    cast = copy.plan("astype", (lay,), Layout.row_major((4099,), "int32"), gpu.props)
    run(cast, gpu.mods, gpu.drv, (ptr, ptr))
    gpu.drv.synchronize()
    ref = (mx.exp(x) + mx.exp(x)).astype(mx.int32)
    np.testing.assert_array_equal(np.array(download(gpu, ptr, "int32", (4099,))), np.array(ref))


# ---------------------------------------------------------------- 64-bit indices
def run_steps(gpu, steps, temps, ins, outs):
    """Run a multi-step plan (refs resolved like the evaluator does)."""
    tptr = [gpu.drv.malloc(max(t, 16)) for t in temps]
    gpu.live.extend(tptr)
    table = {"i": ins, "o": outs, "t": tptr}
    for st in steps:
        run(st, gpu.mods, gpu.drv, tuple(table[r.kind][r.index] + r.offset for r in st.refs))
    gpu.drv.synchronize()


def test_large_offsets_use_64_bit_index(gpu):
    """A view whose element offsets pass 2^31: the _i64 same-size copy into a temporary,
    then the contiguous kernel (binary and copy)."""
    half = 2**30 + 2048             # MLX shapes are 32-bit: hold 2^31 + 4096 bytes as 2 rows
    big = 2 * half
    rng = np.random.default_rng(0)
    host = np.zeros(big, np.bool_)
    host[:1000] = rng.random(1000) < 0.5
    host[big - 1000:] = rng.random(1000) < 0.5
    base = mx.array(host.reshape(2, half))
    shape, strides = (2, 1000), (big - 1000, 1)
    lay = Layout.strided(shape, strides, "bool")
    ptr = upload(gpu, base)
    b = values("bool", 2000, 1).reshape(shape)
    pb = upload(gpu, b)
    ref_a = mx.stack([base[0, :1000], base[1, -1000:]])   # the same elements as the view
    out = Layout.row_major(shape, "bool")
    assert binary.plan("logical_and", (lay, out), out, gpu.props) is None
    steps, temps = binary.plan_steps("logical_and", (lay, out), out, gpu.props)
    assert steps[0].kernel == "copy_g_uint8_uint8_i64"
    o = gpu.drv.malloc(2000)
    gpu.live.append(o)
    run_steps(gpu, steps, temps, (ptr, pb), (o,))
    assert_same(download(gpu, o, "bool", shape), mx.logical_and(ref_a, b), "logical_and i64")
    steps, temps = copy.plan_steps("astype", (lay,), Layout.row_major(shape, "float16"), gpu.props)
    assert [st.kernel for st in steps] == ["copy_g_uint8_uint8_i64", "copy_v_bool_float16"]
    o = gpu.drv.malloc(4000)
    gpu.live.append(o)
    run_steps(gpu, steps, temps, (ptr,), (o,))
    assert_same(download(gpu, o, "float16", shape), ref_a.astype(mx.float16), "astype i64")


@pytest.mark.large
def test_more_than_2_31_elements(gpu):
    """Contiguous kernels index with 64 bits: 2^31 + 6 uint8 -> bool (2 GiB each way)."""
    shape = (2, 2**30 + 3)
    n = shape[0] * shape[1]
    host = np.zeros(n, np.uint8)
    host[-4096:] = np.arange(4096) % 3      # the far end is where a 32-bit index would fail
    host[:4096] = np.arange(4096) % 2
    x = mx.array(host.reshape(shape))
    ptr = upload(gpu, x)
    plan = copy.plan("astype", (Layout.row_major(shape, "uint8"),), Layout.row_major(shape, "bool"),
                     gpu.props)
    ours = launch(gpu, plan, (ptr,), "bool", shape)
    ref = x.astype(mx.bool_)
    np.testing.assert_array_equal(np.array(ours[1, -4096:]), np.array(ref[1, -4096:]))
    assert mx.array_equal(ours, ref).item()


# ---------------------------------------------------------------- strided vector path
# Output (12, 64): the innermost extent splits into 16-byte groups for every dtype, so
# the strided kernels take their vector path whenever each operand walks (stride 1,
# outer strides multiples of the group) or broadcasts (stride 0) along it; the last two
# views must fall back to the scalar path (outer stride 65, base off by one element).
VR, VC = 12, 64
VEC_VIEWS = {
    "padded_rows": ((VR, VC), VR * 72, (72, 1), 0),
    "row_bcast": ((VR, VC), VC, (0, 1), 0),
    "col_bcast": ((VR, VC), VR, (1, 0), 0),
    "odd_rows": ((VR, VC), VR * 65, (65, 1), 0),
    "misaligned": ((VR, VC), VR * VC + 1, (VC, 1), 1),
}


def vec_operand(gpu, base, view):
    shape, _, strides, offset = VEC_VIEWS[view]
    ref = mx.as_strided(base, shape, strides, offset)
    lay = Layout.strided(shape, strides, str(base.dtype).split(".")[-1])
    return ref, lay, upload(gpu, base) + offset * ITEMSIZE[lay.dtype]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int32"])
@pytest.mark.parametrize("op", ["add", "multiply"])
def test_binary_strided_vector_path(gpu, op, dtype):
    views = list(VEC_VIEWS)
    for i, va in enumerate(views):
        vb = views[(i + 1) % len(views)]
        a = values(dtype, VEC_VIEWS[va][1], seed=i, specials=False)
        b = values(dtype, VEC_VIEWS[vb][1], seed=i + 50, specials=False)
        ra, la, pa = vec_operand(gpu, a, va)
        rb, lb, pb = vec_operand(gpu, b, vb)
        plan = binary.plan(op, (la, lb), Layout.row_major((VR, VC), dtype), gpu.props)
        assert plan.kernel.startswith("binary_g_"), plan.kernel
        ours = launch(gpu, plan, (pa, pb), dtype, (VR, VC))
        ref = getattr(mx, op)(ra, rb)
        mx.eval(ref)
        assert_same(ours, ref, f"{op} {dtype} {va} x {vb}")


@pytest.mark.parametrize("src,dst", [("float32", "bfloat16"), ("bfloat16", "float32"), ("int32", "float16")])
def test_copy_strided_vector_path(gpu, src, dst):
    for i, view in enumerate(VEC_VIEWS):
        base = values(src, VEC_VIEWS[view][1], seed=i, specials=False)
        ref_in, lay, ptr = vec_operand(gpu, base, view)
        plan = copy.plan("astype", (lay,), Layout.row_major((VR, VC), dst), gpu.props)
        ours = launch(gpu, plan, (ptr,), dst, (VR, VC))
        ref = ref_in.astype(MX[dst])
        mx.eval(ref)
        assert_same(ours, ref, f"{src}->{dst} {view} ({plan.kernel})")


# ---------------------------------------------------------------- tiled transpose
@pytest.mark.parametrize("src,dst", [("float32", "float32"), ("float32", "bfloat16"),
                                     ("bfloat16", "float16"), ("uint8", "int64"), ("bool", "bool")])
@pytest.mark.parametrize("batch,rows,cols", [(1, 67, 45), (3, 32, 96), (2, 17, 130)])
def test_copy_transpose_tiles(gpu, src, dst, batch, rows, cols):
    """(batch, rows, cols) read from a row-major (batch, cols, rows) array: partial tiles
    at both edges, several batches, conversions; plus a reversed-column variant."""
    base = values(src, batch * rows * cols, seed=rows, specials=False)
    for name, strides, offset in (("transpose", (rows * cols, 1, rows), 0),
                                  ("reversed cols", (rows * cols, 1, -rows), (cols - 1) * rows)):
        ref_in = mx.as_strided(base, (batch, rows, cols), strides, offset)
        lay = Layout.strided((batch, rows, cols), strides, src)
        ptr = upload(gpu, base) + offset * ITEMSIZE[src]
        plan = copy.plan("astype", (lay,), Layout.row_major((batch, rows, cols), dst), gpu.props)
        assert plan.kernel == "copy_t_%s_%s" % kt.copy_kernel_dtypes(src, dst), plan.kernel
        ours = launch(gpu, plan, (ptr,), dst, (batch, rows, cols))
        ref = ref_in.astype(MX[dst])
        mx.eval(ref)
        assert_same(ours, ref, f"{name} {src}->{dst} {batch}x{rows}x{cols}")
