"""Launch planning for the elementwise families, without a GPU: layout choice, dimension
collapse, index width, unsupported combinations, and the argument blobs checked
byte for byte against the C structs of hip_kernels/include/mlxa/args.h."""

import itertools
import os
import struct

import numpy as np
import pytest

from mlx_amd.runtime import kernel_table as kt
from mlx_amd.runtime.driver.base import DeviceProperties
from mlx_amd.runtime.launch import Launch, run
from mlx_amd.runtime.ops import binary, copy, unary
from mlx_amd.runtime.ops import elementwise as ew
from mlx_amd.runtime.ops.elementwise import Layout
from mlx_amd.runtime import plan as plan_mod
from cprobe import probe_output

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def props(wave=32, cus=100):
    return DeviceProperties(0, "test", "gfx1100", "gfx1100", {}, wave, cus, 1 << 34, False,
                            0, 0, 0, 0, 1024, 65536, True, "0")


DEV = props()
R = Layout.row_major


def transposed(shape, dtype, perm):
    base = R(shape, dtype)
    return Layout.strided(tuple(shape[p] for p in perm), tuple(base.strides[p] for p in perm), dtype)


def broadcast(shape, dtype, src_shape):
    """src_shape (right-aligned, 1 where broadcast) expanded to shape with zero strides."""
    src = R(src_shape, dtype)
    pad = len(shape) - len(src_shape)
    st = (0,) * pad + tuple(0 if d == 1 and D != 1 else s for d, D, s in
                            zip(src_shape, shape[pad:], src.strides))
    n = int(np.prod(shape))
    return Layout(tuple(shape), st, dtype, src.size, n <= 1, src.size == n)


def tail_fields(launch, n_strides):
    """Decode a strided launch's tail: (n, [strides...], shape, ndim), innermost first."""
    t = launch.tail
    n = struct.unpack_from("<q", t, 0)[0]
    strides = [struct.unpack_from("<8q", t, 8 + 64 * k) for k in range(n_strides)]
    dims = struct.unpack_from("<8i i i", t, 8 + 64 * n_strides)
    return n, strides, dims[:8], dims[8]


# ---------------------------------------------------------------- dimension collapse
def offsets(shape, strides):
    idx = np.indices(shape).reshape(len(shape), -1) if shape else np.zeros((0, 1), int)
    return (np.asarray(strides, dtype=np.int64)[:, None] * idx).sum(0) if shape else np.zeros(1, int)


@pytest.mark.parametrize("seed", range(40))
def test_collapse_keeps_element_order(seed):
    rng = np.random.default_rng(seed)
    nd = int(rng.integers(0, 6))
    shape = tuple(int(d) for d in rng.integers(1, 4, size=nd))
    base = R(shape, "float32").strides
    # a second operand: permuted, broadcast or sliced view of something
    choice = seed % 3
    if choice == 0 and nd:
        perm = rng.permutation(nd)
        other = tuple(R(tuple(shape[p] for p in perm), "float32").strides[list(perm).index(i)]
                      for i in range(nd))
    elif choice == 1:
        other = tuple(0 if rng.random() < 0.5 else s for s in base)
    else:
        other = tuple(2 * s for s in base)
    cshape, (cb, co) = ew.collapse_dims(shape, base, other)
    assert len(cshape) <= max(nd, 1) and all(d > 1 for d in cshape) or cshape == (1,)
    np.testing.assert_array_equal(offsets(shape, base), offsets(cshape, cb))
    np.testing.assert_array_equal(offsets(shape, other), offsets(cshape, co))


def test_collapse_examples():
    assert ew.collapse_dims((4, 5, 6), (30, 6, 1)) == ((120,), [(1,)])
    assert ew.collapse_dims((), ()) == ((1,), [(0,)])
    assert ew.collapse_dims((3, 1, 4), (4, 99, 1)) == ((12,), [(1,)])
    # transposed: nothing merges
    assert ew.collapse_dims((6, 5), (1, 6)) == ((6, 5), [(1, 6)])
    # row broadcast along the inner dims of a 3-d array
    assert ew.collapse_dims((2, 3, 4), (12, 4, 1), (1, 0, 0)) == ((2, 12), [(12, 1), (1, 0)])


def test_layout_flags():
    assert R((3, 4), "float32").row_contiguous
    t = transposed((3, 4), "float32", (1, 0))
    assert not t.row_contiguous and t.contiguous and t.data_size == 12
    s = Layout.strided((3, 2), (4, 2), "float32")
    assert not s.contiguous and s.data_size == 1 + 2 * 4 + 2


# ---------------------------------------------------------------- unary
def test_unary_contiguous_and_general():
    out = R((64, 33), "float32")
    p = unary.plan("exp", (out,), out, DEV)
    assert p.kernel == "unary_v_exp_float32_float32" and p.family == "unary"
    assert p.tail == struct.pack("<q", 64 * 33) and p.n_ptrs == 2
    assert p.block == (kt.ELEMENTWISE_BLOCK, 1, 1)
    # 4 floats per thread
    assert p.grid[0] == -(-(64 * 33 // 4) // kt.ELEMENTWISE_BLOCK)

    t = transposed((33, 64), "float32", (1, 0))
    p = unary.plan("exp", (t,), out, DEV)
    assert p.kernel == "unary_g_exp_float32_float32"
    n, (st,), shape, ndim = tail_fields(p, 1)
    assert (n, ndim, shape[:2], st[:2]) == (64 * 33, 2, (33, 64), (64, 1))

    b = broadcast((64, 33), "float16", ())
    p = unary.plan("sin", (b,), R((64, 33), "float16"), DEV)
    n, (st,), shape, ndim = tail_fields(p, 1)
    assert p.kernel == "unary_g_sin_float16_float16" and ndim == 1 and shape[0] == 64 * 33 and st[0] == 0


def test_unary_op_for_parameters():
    assert unary.op_for("Log", (2,)) == "log" and unary.op_for("Log", (0,)) == "log2"
    assert unary.op_for("Log", ("ten",)) == "log10"
    assert unary.op_for("Sqrt", (True,)) == "rsqrt" and unary.op_for("Sqrt", (False,)) == "sqrt"
    assert unary.op_for("Exp", ()) == "exp" and unary.op_for("Cholesky", ()) is None
    x = R((5,), "float32")
    assert unary.plan("Log", (x,), x, DEV, params=(1,)).kernel == "unary_v_log10_float32_float32"


def test_unary_unsupported_is_none():
    i = R((5,), "int32")
    f = R((5,), "float32")
    assert unary.plan("exp", (i,), i, DEV) is None             # no integer exp kernel (MLX promotes)
    assert unary.plan("exp", (f,), R((5,), "float16"), DEV) is None   # dtype change
    assert unary.plan("nope", (f,), f, DEV) is None
    assert unary.plan("exp", (f, f), f, DEV) is None
    # 9 dimensions that cannot collapse (strides 3^k over extents 2)
    shape = (2,) * 9
    st = tuple(3 ** k for k in range(8, -1, -1))
    assert unary.plan("exp", (Layout.strided(shape, st, "float32"),), R(shape, "float32"), DEV) is None
    # abs on int64 exists, logical_not only on bool
    assert unary.plan("abs", (R((3,), "int64"),), R((3,), "int64"), DEV) is not None
    assert unary.plan("logical_not", (f,), f, DEV) is None


def test_index_width():
    small = Layout.strided((1000, 1000), (1, 1000), "float32")
    assert not unary.plan("exp", (small,), R((1000, 1000), "float32"), DEV).kernel.endswith("_i64")
    # fewer than 2^31 elements, but offsets beyond 32 bits: no single unary kernel; a
    # same-size 64-bit copy into a temporary, then the contiguous kernel on it
    wide = Layout.strided((2, 1000), (2**31, 1), "float32")
    out = R((2, 1000), "float32")
    assert unary.plan("exp", (wide,), out, DEV) is None
    steps, temps = unary.plan_steps("exp", (wide,), out, DEV)
    assert [s.kernel for s in steps] == ["copy_g_uint32_uint32_i64", "unary_v_exp_float32_float32"]
    assert steps[0].refs == (plan_mod.inp(0), plan_mod.tmp(0)) and steps[1].refs == (plan_mod.tmp(0), plan_mod.out(0))
    assert temps == (2000 * 4,)
    big = (2**16, 2**15 + 1)
    t = transposed(big[::-1], "bfloat16", (1, 0))
    steps, temps = unary.plan_steps("exp", (t,), R(big, "bfloat16"), DEV)
    assert steps[0].kernel == "copy_g_uint16_uint16_i64" and temps == (big[0] * big[1] * 2,)
    # binary: only the strided operand is copied; the dense one is read in place
    steps, temps = binary.plan_steps("add", (wide, out), out, DEV)
    assert [s.kernel for s in steps] == ["copy_g_uint32_uint32_i64", "binary_vv_add_float32_float32"]
    assert steps[1].refs == (plan_mod.tmp(0), plan_mod.inp(1), plan_mod.out(0))
    node = plan_mod.Node("Add", (), (wide, out), (out,))
    p = binary.plan_node(node, DEV)
    assert p.temps == (8000,) and p.donate == ((0, 0), (0, 1))


def test_new_dtypes_and_size_grouping():
    # int32 add and float32/int32 copies share kernels by element size
    i = R((6,), "int32")
    assert binary.plan("add", (i, i), i, DEV).kernel == "binary_vv_add_uint32_uint32"
    assert binary.plan("less", (i, i), R((6,), "bool"), DEV).kernel == "binary_vv_less_int32_bool"
    assert binary.plan("equal", (R((6,), "bool"),) * 2, R((6,), "bool"), DEV).kernel == "binary_vv_equal_uint8_bool"
    assert copy.plan("copy", (transposed((4, 6), "float32", (1, 0)),), R((6, 4), "float32"), DEV).kernel == \
        "copy_g_uint32_uint32"
    assert copy.plan("astype", (R((5,), "int32"),), R((5,), "int32"), DEV).kernel == "copy_v_uint32_uint32"
    # new dtypes
    c = R((5,), "complex64")
    assert unary.plan("Abs", (c,), R((5,), "complex64"), DEV).kernel == "unary_v_abs_c_complex64_complex64"
    assert unary.plan("Real", (c,), R((5,), "float32"), DEV).kernel == "unary_v_real_complex64_float32"
    assert unary.plan("Exp", (c,), c, DEV).kernel == "unary_v_exp_complex64_complex64"
    assert binary.plan("Multiply", (c, c), c, DEV).kernel == "binary_vv_multiply_complex64_complex64"
    d = R((5,), "float64")
    assert binary.plan("Add", (d, d), d, DEV).kernel == "binary_vv_add_float64_float64"
    # abs of unsigned / floor of integers are the identity: a copy
    u = R((5,), "uint16")
    assert unary.plan("Abs", (u,), u, DEV).kernel == "copy_v_uint16_uint16"
    assert unary.plan("Floor", (R((5,), "int8"),), R((5,), "int8"), DEV).family == "copy"
    # bitwise: op from the enum, shared by size; right shift keeps signedness
    i8 = R((5,), "int8")
    assert binary.plan("BitwiseBinary", (i8, i8), i8, DEV, params=(0,)).kernel == "binary_vv_bitwise_and_uint8_uint8"
    assert binary.plan("BitwiseBinary", (i8, i8), i8, DEV, params=(3,)).kernel == "binary_vv_left_shift_uint8_uint8"
    assert binary.plan("BitwiseBinary", (i8, i8), i8, DEV, params=(4,)).kernel == "binary_vv_right_shift_int8_int8"
    assert binary.plan("BitwiseBinary", (d, d), d, DEV, params=(0,)) is None
    assert unary.plan("BitwiseInvert", (R((5,), "int64"),), R((5,), "int64"), DEV).kernel == \
        "unary_v_bitwise_invert_uint64_uint64"
    # float16 floor_divide floors the 16-bit quotient
    h = R((5,), "float16")
    assert binary.plan("FloorDivide", (h, h), h, DEV).kernel == "binary_vv_floor_divide_r_float16_float16"
    # scalar layouts for rare dtypes go through the strided kernel
    s8 = broadcast((5,), "int8", ())
    assert binary.plan("maximum", (s8, i8), i8, DEV).kernel == "binary_g_maximum_int8_int8"
    # strided conversions outside the common dtypes: copy then convert
    t = transposed((4, 6), "float64", (1, 0))
    assert copy.plan("astype", (t,), R((6, 4), "int16"), DEV) is None
    steps, temps = copy.plan_steps("astype", (t,), R((6, 4), "int16"), DEV)
    assert [s.kernel for s in steps] == ["copy_g_uint64_uint64", "copy_v_float64_int16"] and temps == (192,)


def test_divmod_plan(c_layout):
    a = R((4, 6), "int32")
    b = broadcast((4, 6), "int32", (1, 6))
    node = plan_mod.Node("DivMod", (), (a, a), (a, a))
    p = binary.plan_node(node, DEV)
    (l,) = p.steps
    assert l.kernel == "binary_vv_divmod_int32_int32" and l.n_ptrs == 4
    assert l.refs == (plan_mod.inp(0), plan_mod.inp(1), plan_mod.out(0), plan_mod.out(1)) and p.donate == ()
    blob = l.args((1, 2, 3, 4))
    assert len(blob) == c_layout[("DivModVArgs", "sizeof")]
    assert _field(blob, c_layout, "DivModVArgs", "n", "q") == (24,)
    p = binary.plan_node(plan_mod.Node("DivMod", (), (a, b), (a, a)), DEV)
    (l,) = p.steps
    assert l.kernel == "binary_g_divmod_int32_int32"
    blob = l.args((1, 2, 3, 4))
    assert len(blob) == c_layout[("DivModGArgs", "sizeof")]
    assert _field(blob, c_layout, "DivModGArgs", "ndim", "i") == (2,)
    assert _field(blob, c_layout, "DivModGArgs", "b_strides", "2q") == (1, 0)
    assert binary.plan_node(plan_mod.Node("DivMod", (), (a, a), (a,)), DEV) is None


# ---------------------------------------------------------------- binary
@pytest.mark.parametrize("a_kind,b_kind", list(itertools.product("svt", repeat=2)))
def test_binary_layout_choice(a_kind, b_kind):
    shape = (16, 24)
    out = R(shape, "float32")
    mk = {"s": broadcast(shape, "float32", ()), "v": out,
          "t": transposed(shape[::-1], "float32", (1, 0))}
    p = binary.plan("add", (mk[a_kind], mk[b_kind]), out, DEV)
    if "t" in (a_kind, b_kind) or (a_kind, b_kind) == ("s", "s"):   # ss: zero strides
        assert p.kernel == "binary_g_add_float32_float32"
        n, (sa, sb), dims, ndim = tail_fields(p, 2)
        assert n == 16 * 24 and ndim == (1 if a_kind == b_kind == "s" else 2)
    else:
        assert p.kernel == f"binary_{a_kind}{b_kind}_add_float32_float32"
        assert p.tail == struct.pack("<q", 16 * 24) and p.n_ptrs == 3


def test_binary_broadcast_row_and_dtypes():
    out = R((8, 5), "bool")
    a = R((8, 5), "float16")
    b = broadcast((8, 5), "float16", (1, 5))
    p = binary.plan("less", (a, b), out, DEV)
    assert p.kernel == "binary_g_less_float16_bool"
    n, (sa, sb), dims, ndim = tail_fields(p, 2)
    assert ndim == 2 and dims[:2] == (5, 8) and sa[:2] == (1, 5) and sb[:2] == (1, 0)
    assert binary.plan("less", (a, b), R((8, 5), "float16"), DEV) is None   # wrong out dtype
    assert binary.plan("add", (a, R((8, 5), "float32")), R((8, 5), "float32"), DEV) is None
    assert binary.plan("arctan2", (R((2,), "int32"),) * 2, R((2,), "int32"), DEV) is None
    assert binary.plan("Add", (R((2,), "int64"),) * 2, R((2,), "int64"), DEV) is not None
    assert binary.op_for("Equal", (True,)) is None and binary.op_for("Equal", (False,)) == "equal"
    assert binary.plan("add", (R((3,), "float32"), R((4,), "float32")), R((4,), "float32"), DEV) is None


# ---------------------------------------------------------------- copy
def test_copy_plans():
    src = transposed((6, 4), "float32", (1, 0))
    p = copy.plan("AsType", (src,), R((4, 6), "bfloat16"), DEV)
    assert p.kernel == "copy_g_float32_bfloat16"
    p = copy.plan("astype", (R((4, 6), "uint8"),), R((4, 6), "float32"), DEV)
    assert p.kernel == "copy_v_uint8_float32"
    # 16 // max(1, 4) = 4 elements per thread
    assert p.grid[0] == -(-(24 // 4) // kt.ELEMENTWISE_BLOCK)
    # reshape of a transposed view reads in the input's row-major order
    p = copy.plan("Reshape", (src,), R((24,), "float32"), DEV)
    n, (st,), dims, ndim = tail_fields(p, 1)
    assert p.kernel == "copy_g_uint32_uint32" and dims[:2] == (6, 4) and st[:2] == (4, 1)
    assert copy.plan("Reshape", (R((4, 6), "int32"),), R((24,), "int32"), DEV).kernel == "copy_v_uint32_uint32"
    assert copy.plan("copy", (R((4, 6), "int32"),), R((4, 6), "float32"), DEV) is None
    assert copy.plan("astype", (R((4,), "float64"),), R((4,), "float32"), DEV).kernel == "copy_v_float64_float32"
    assert copy.plan("Reshape", (R((4, 6), "int32"),), R((25,), "int32"), DEV) is None


def test_every_planned_kernel_is_in_the_table():
    shapes = [(), (1,), (7,), (3, 5), (2, 3, 4)]
    families = {"unary": unary, "binary": binary, "copy": copy}

    def ok(p):
        return p is not None and kt.has_kernel(p.family, p.kernel)

    for shape in shapes:
        for prim, op in unary.PRIMITIVES.items():
            for dt in kt.CTYPES:
                want = "float32" if op in ("real", "imag") else dt
                for x in (R(shape, dt), broadcast(shape, dt, ()), transposed(shape[::-1], dt, tuple(range(len(shape)))[::-1])):
                    p = unary.plan(op, (x,), R(shape, want), DEV)
                    served = kt.unary_kernel_dtype("abs_c" if (op == "abs" and dt == "complex64") else op, dt) \
                        or dt in kt.UNARY_IDENTITY.get(op, ())
                    assert (p is not None) == bool(served), (op, dt)
                    assert p is None or ok(p), (op, dt, shape, p.kernel)
        for op, (_, dtypes, o) in kt.BINARY.items():
            for dt in kt.CTYPES:
                if kt.binary_kernel_dtype(op, dt) is None:
                    continue
                for a, b in itertools.product((R(shape, dt), broadcast(shape, dt, ())), repeat=2):
                    p = binary.plan(op, (a, b), R(shape, o or dt), DEV)
                    assert ok(p), (op, dt, shape)
        for s, d in itertools.product(kt.CTYPES, repeat=2):
            for x in (broadcast(shape, s, ()), R(shape, s)):
                steps, _ = copy.plan_steps("astype", (x,), R(shape, d), DEV)
                assert all(kt.has_kernel(st.family, st.kernel) for st in steps), (s, d, shape)
        for dt in kt.DIVMOD_DTYPES:
            for a in (R(shape, dt), broadcast(shape, dt, ())):
                p = binary.plan_node(plan_mod.Node("DivMod", (), (a, R(shape, dt)), (R(shape, dt),) * 2), DEV)
                assert all(kt.has_kernel(st.family, st.kernel) for st in p.steps)


# ---------------------------------------------------------------- geometry and run
def test_grid_geometry():
    for wave in (32, 64):
        d = props(wave, cus=10)
        p = unary.plan("exp", (R((1 << 24,), "float32"),), R((1 << 24,), "float32"), d)
        assert p.block[0] % wave == 0
        assert p.grid[0] == 10 * ew._BLOCKS_PER_CU   # capped: the kernel strides over the rest
    with pytest.raises(ValueError, match="wave size"):
        unary.plan("exp", (R((4,), "float32"),), R((4,), "float32"), props(wave=48))


class _Recorder:
    def __init__(self):
        self.calls = []

    def function(self, family, name):
        self.calls.append(("function", family, name))
        return ("fn", name)

    def launch(self, fn, grid, block, args, shared_mem=0, stream=None):
        self.calls.append(("launch", fn, grid, block, args, shared_mem, stream))


def test_run_packs_pointers_and_skips_empty():
    x = R((10,), "float32")
    p = binary.plan("add", (x, x), x, DEV)
    rec = _Recorder()
    run(p, rec, rec, (0x1000, 0x2000, 0x3000), stream="s")
    assert rec.calls[0] == ("function", "binary", "binary_vv_add_float32_float32")
    _, fn, grid, block, blob, smem, stream = rec.calls[1]
    assert struct.unpack("<4q", blob) == (0x1000, 0x2000, 0x3000, 10) and stream == "s"
    with pytest.raises(ValueError, match="3 pointers"):
        p.args((1, 2))
    with pytest.raises(ValueError, match="pointers"):
        p.args((1, 2, -3))
    empty = R((0, 4), "float32")
    e = unary.plan("exp", (empty,), empty, DEV)
    assert e.empty
    rec = _Recorder()
    run(e, rec, rec, (1, 2))
    assert rec.calls == []


def test_plans_are_hashable_and_deterministic():
    x = transposed((5, 7), "float32", (1, 0))
    a = unary.plan("exp", (x,), R((7, 5), "float32"), DEV)
    b = unary.plan("exp", (x,), R((7, 5), "float32"), DEV)
    assert a == b and hash(a) == hash(b) and isinstance(a, Launch)
    assert hash((("exp",), (x,), R((7, 5), "float32")))  # the evaluator's cache key


# ---------------------------------------------------------------- args.h, byte for byte
_PROBE = r"""
#include <cstddef>
#include <cstdio>
#include "mlxa/args.h"
#define F(S, f) std::printf(#S " " #f " %zu\n", offsetof(S, f));
#define Z(S) std::printf(#S " sizeof %zu\n", sizeof(S));
int main() {
  Z(SmokeArgs) F(SmokeArgs, alpha) F(SmokeArgs, x) F(SmokeArgs, y) F(SmokeArgs, n)
  Z(UnaryVArgs) F(UnaryVArgs, in) F(UnaryVArgs, out) F(UnaryVArgs, n)
  Z(UnaryGArgs) F(UnaryGArgs, in) F(UnaryGArgs, out) F(UnaryGArgs, n) F(UnaryGArgs, strides)
  F(UnaryGArgs, shape) F(UnaryGArgs, ndim)
  Z(BinaryVArgs) F(BinaryVArgs, a) F(BinaryVArgs, b) F(BinaryVArgs, out) F(BinaryVArgs, n)
  Z(BinaryGArgs) F(BinaryGArgs, a) F(BinaryGArgs, b) F(BinaryGArgs, out) F(BinaryGArgs, n)
  F(BinaryGArgs, a_strides) F(BinaryGArgs, b_strides) F(BinaryGArgs, shape) F(BinaryGArgs, ndim)
  Z(DivModVArgs) F(DivModVArgs, a) F(DivModVArgs, b) F(DivModVArgs, q) F(DivModVArgs, r) F(DivModVArgs, n)
  Z(DivModGArgs) F(DivModGArgs, q) F(DivModGArgs, r) F(DivModGArgs, n) F(DivModGArgs, a_strides)
  F(DivModGArgs, b_strides) F(DivModGArgs, shape) F(DivModGArgs, ndim)
  Z(CopyTArgs) F(CopyTArgs, in) F(CopyTArgs, out) F(CopyTArgs, rows) F(CopyTArgs, cols)
  F(CopyTArgs, batch) F(CopyTArgs, in_row_stride) F(CopyTArgs, in_col_stride) F(CopyTArgs, in_batch_stride)
  std::printf("MLXA_MAX_DIMS value %d\n", MLXA_MAX_DIMS);
}
"""


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    d = tmp_path_factory.mktemp("args")
    out = probe_output(_PROBE, d)
    table = {}
    for line in out.splitlines():
        s, f, v = line.split()
        table[(s, f)] = int(v)
    return table


def test_struct_sizes_match_c(c_layout):
    assert c_layout[("MLXA_MAX_DIMS", "value")] == kt.MAX_DIMS
    for name, (nptr, size) in ew.ARG_STRUCTS.items():
        assert c_layout[(name, "sizeof")] == size, name


def _field(blob, c, struct_name, field, fmt):
    return struct.unpack_from("<" + fmt, blob, c[(struct_name, field)])


def test_unary_blobs_match_c(c_layout):
    c = c_layout
    x = R((9, 11), "float32")
    v = unary.plan("exp", (x,), x, DEV).args((111, 222))
    assert len(v) == c[("UnaryVArgs", "sizeof")]
    assert _field(v, c, "UnaryVArgs", "in", "Q") == (111,)
    assert _field(v, c, "UnaryVArgs", "out", "Q") == (222,)
    assert _field(v, c, "UnaryVArgs", "n", "q") == (99,)
    t = Layout.strided((3, 4, 5), (-40, 2, 8), "float32")
    g = unary.plan("exp", (t,), R((3, 4, 5), "float32"), DEV).args((5, 6))
    assert len(g) == c[("UnaryGArgs", "sizeof")]
    assert _field(g, c, "UnaryGArgs", "n", "q") == (60,)
    assert _field(g, c, "UnaryGArgs", "ndim", "i") == (3,)
    assert _field(g, c, "UnaryGArgs", "shape", "3i") == (5, 4, 3)          # innermost first
    assert _field(g, c, "UnaryGArgs", "strides", "3q") == (8, 2, -40)


def test_binary_blobs_match_c(c_layout):
    c = c_layout
    x = R((4, 6), "int32")
    v = binary.plan("add", (broadcast((4, 6), "int32", ()), x), x, DEV).args((1, 2, 3))
    assert len(v) == c[("BinaryVArgs", "sizeof")]
    assert [_field(v, c, "BinaryVArgs", f, "Q")[0] for f in ("a", "b", "out")] == [1, 2, 3]
    assert _field(v, c, "BinaryVArgs", "n", "q") == (24,)
    b = broadcast((4, 6), "int32", (4, 1))
    g = binary.plan("add", (transposed((6, 4), "int32", (1, 0)), b), x, DEV).args((7, 8, 9))
    assert len(g) == c[("BinaryGArgs", "sizeof")]
    assert [_field(g, c, "BinaryGArgs", f, "Q")[0] for f in ("a", "b", "out")] == [7, 8, 9]
    assert _field(g, c, "BinaryGArgs", "ndim", "i") == (2,)
    assert _field(g, c, "BinaryGArgs", "shape", "2i") == (6, 4)
    assert _field(g, c, "BinaryGArgs", "a_strides", "2q") == (4, 1)
    assert _field(g, c, "BinaryGArgs", "b_strides", "2q") == (0, 1)


def test_transposes_take_the_tiled_copy(c_layout):
    c = c_layout
    # (40, 24) read from a (24, 40) row-major array: contiguous along the output's rows
    t = transposed((24, 40), "float32", (1, 0))
    p = copy.plan("astype", (t,), R((40, 24), "bfloat16"), DEV)
    assert p.kernel == "copy_t_float32_bfloat16"
    blob = p.args((11, 22))
    assert len(blob) == c[("CopyTArgs", "sizeof")]
    got = [_field(blob, c, "CopyTArgs", f, "q")[0] for f in
           ("rows", "cols", "batch", "in_row_stride", "in_col_stride", "in_batch_stride")]
    assert got == [40, 24, 1, 1, 40, 0]
    # batched: (3, 40, 24) from (3, 24, 40)
    b = Layout.strided((3, 40, 24), (960, 1, 40), "int32")
    p = copy.plan("copy", (b,), R((3, 40, 24), "int32"), DEV)
    assert p.kernel == "copy_t_uint32_uint32"
    assert _field(p.args((1, 2)), c, "CopyTArgs", "batch", "q") == (3,)
    # small edges and reshapes keep the strided kernel
    assert copy.plan("copy", (transposed((8, 40), "int32", (1, 0)),), R((40, 8), "int32"),
                     DEV).kernel.startswith("copy_g_")
    assert copy.plan("Reshape", (t,), R((960,), "float32"), DEV).kernel.startswith("copy_g_")


# ------------------------------------------------- VERIFIED gating (runtime/ops/__init__.py)
UNVERIFIED = set()     # families written where no GPU could run them yet (none at present)


def test_which_families_are_unverified():
    from mlx_amd.runtime.ops import family_modules

    assert {m.FAMILY for m in family_modules() if getattr(m, "VERIFIED", True) is False} == UNVERIFIED


def _families():
    from mlx_amd.runtime.ops import family_modules

    return family_modules()


@pytest.mark.parametrize("mod", _families(), ids=lambda m: m.FAMILY)
def test_unverified_families_are_left_out_unless_asked(mod, monkeypatch):
    from mlx_amd.runtime import ops

    prims = set(mod.PRIMITIVES)
    monkeypatch.delenv("MLX_AMD_UNVERIFIED", raising=False)
    on = ops.dispatch_table()
    if mod.FAMILY in UNVERIFIED:
        assert not prims & set(on)
    else:
        assert all(on[p] is mod for p in prims)
    monkeypatch.setattr(mod, "VERIFIED", False, raising=False)
    assert not prims & set(ops.dispatch_table())
    monkeypatch.setenv("MLX_AMD_UNVERIFIED", "1")
    assert all(ops.dispatch_table()[p] is mod for p in prims)
