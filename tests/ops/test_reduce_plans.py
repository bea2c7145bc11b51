"""Reduce/ArgReduce planning without a GPU: dtype routing, layout choice, splits and their
second pass, kernel names, the argument structs against reduce_args.h (host compiler),
and an interpreter that executes each planned launch the way the kernels index memory
(per output, per split, per element) and compares with numpy: this checks dimension
collapse, reordering, offsets, strides and split ranges for every layout class."""

import itertools
import os

import numpy as np
import pytest

from mlx_amd.runtime import kernel_table as kt
from mlx_amd.runtime.driver.base import DeviceProperties
from mlx_amd.runtime.ops import reduce as rd
from mlx_amd.runtime.plan import ITEMSIZE, Layout, Node, Plan
from cprobe import probe_output

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
R = Layout.row_major


def props(wave=32, cus=100):
    return DeviceProperties(0, "test", "gfx1100", "gfx1100", {}, wave, cus, 1 << 34, False,
                            0, 0, 0, 0, 1024, 65536, True, "0")


DEV = props()
SMALL = props(cus=1)      # few CUs: small problems already split
SMALL64 = props(wave=64, cus=1)
OPS = {"and": 0, "or": 1, "sum": 2, "prod": 3, "min": 4, "max": 5}


def reduce_node(x, axes, op="sum", out_dtype=None):
    nd = x.ndim
    axes = tuple(sorted({a % nd for a in axes})) if nd else ()
    oshape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    odt = out_dtype or rd.out_dtype(op, x.dtype)
    return Node("Reduce", (OPS[op], axes), (x,), (R(oshape, odt),))


def arg_node(x, axis, op="argmax"):
    oshape = tuple(1 if i == axis % x.ndim else d for i, d in enumerate(x.shape))
    return Node("ArgReduce", ({"argmin": 0, "argmax": 1}[op], axis), (x,), (R(oshape, "uint32"),))


# ------------------------------------------------------------------ layouts to test
def view(base_shape, dtype, perm=None, step=None, bcast=None, flip=None):
    """A view of a row-major array: transposed (perm), sliced with steps, broadcast
    (insert zero-stride dims of size bcast[1] at bcast[0]) or flipped (negative stride)."""
    shape = list(base_shape)
    strides = list(R(base_shape, dtype).strides)
    if step:
        ax, k = step
        shape[ax] = -(-shape[ax] // k)
        strides[ax] *= k
    if flip is not None:
        strides[flip] = -strides[flip]
    if perm:
        shape = [shape[p] for p in perm]
        strides = [strides[p] for p in perm]
    if bcast:
        ax, n = bcast
        shape.insert(ax, n)
        strides.insert(ax, 0)
    return Layout.strided(shape, strides, dtype)


# ------------------------------------------------------------------ the interpreter
def storage_for(x: Layout, rng):
    """Random integer data for every address the view can touch; returns (storage, base)
    with element 0 of the view at storage[base]."""
    lo = sum((d - 1) * s for d, s in zip(x.shape, x.strides) if s < 0)
    hi = sum((d - 1) * s for d, s in zip(x.shape, x.strides) if s > 0)
    return rng.integers(-50, 50, size=hi - lo + 1).astype(np.int64), -lo


def logical(x: Layout, store, base):
    idx = np.zeros(x.shape, dtype=np.int64) + base
    for ax, (d, s) in enumerate(zip(x.shape, x.strides)):
        sh = [1] * x.ndim
        sh[ax] = d
        idx = idx + (np.arange(d) * s).reshape(sh)
    return store[idx]


def dims_offset(o, nd, shape, strides):
    off = 0
    for d in range(nd - 1, -1, -1):
        off += (o % shape[d]) * strides[d]
        o //= shape[d]
    return off


COMB = {"sum": lambda a, b: a + b, "max": max, "min": min, "prod": lambda a, b: a * b,
        "and": lambda a, b: a and b, "or": lambda a, b: a or b}
IDENT = {"sum": 0, "max": -(1 << 62), "min": 1 << 62, "prod": 1, "and": True, "or": False}


def _kop(name):
    parts = name.split("_")
    return parts[1], parts[2]   # layout, op


def _arg_pick(op, best, cand):
    """The preferred of two (value, index) pairs (None: an empty part): NaN first, then the
    larger (smaller) value, then the lower index, as the kernels' arg_better."""
    if cand is None:
        return best
    if best is None:
        return cand
    (bv, bi), (cv, ci) = best, cand
    bn, cn = bv != bv, cv != cv
    if bn or cn:
        return cand if cn and (not bn or ci < bi) else best
    if (cv > bv) if op == "argmax" else (cv < bv):
        return cand
    return cand if cv == bv and ci < bi else best


def execute(plan: Plan, store, base, n_out, wave=32):
    """Run the plan's launches on Python ints the way the kernels walk memory."""
    out = {}
    temps = [dict() for _ in plan.temps]

    def read(ref, off):
        kind, i, _ = ref
        if kind == "i":
            return int(store[base + off])
        return temps[i][off]

    def write(ref, idx, v):
        kind, i, _ = ref
        if kind == "o":
            out[idx] = v
        else:
            temps[i][idx] = v

    for st in plan.steps:
        layout, op = _kop(st.kernel)
        src, dst = st.refs
        if layout in ("row", "seq"):
            a = rd.unpack_row(st.tail)
            G, block = a["group"], st.block[0]
            assert block % wave == 0 and block <= 512 and block % G == 0
            assert G == block or (G <= wave and G & (G - 1) == 0)
            assert st.grid[0] * (block // G) >= a["n_out"] and st.grid[1] == a["splits"]
            kept = (a["kept_shape"], a["kept_strides"])
            for o in range(a["n_out"]):
                b0 = dims_offset(o, a["kept_ndim"], *kept)
                for s in range(a["splits"]):
                    j0, j1, i0, i1 = 0, a["outer"], 0, a["row_len"]
                    if a["splits"] > 1:
                        if a["split_outer"]:
                            j0, j1 = s * a["chunk"], min(j1, (s + 1) * a["chunk"])
                        else:
                            i0, i1 = s * a["chunk"], min(i1, (s + 1) * a["chunk"])
                    acc = IDENT[op]
                    for j in range(j0, j1):
                        rj = dims_offset(j, a["red_ndim"], a["red_shape"], a["red_strides"])
                        for i in range(i0, i1):
                            acc = COMB[op](acc, read(src, b0 + rj + i * a["row_stride"]))
                    write(dst, o * a["splits"] + s if a["partial"] else o, acc)
        elif layout == "col":
            a = rd.unpack_col(st.tail)
            V = 16 // ITEMSIZE[st.kernel.split("_")[3]]
            assert a["bx"] * a["by"] == st.block[0] == 256
            assert a["col_blocks"] * a["bx"] * V >= a["n_cols"]
            assert st.grid[0] == a["n_batch"] * a["col_blocks"] and st.grid[1] == a["splits"]
            for b in range(a["n_batch"]):
                b0 = dims_offset(b, a["batch_ndim"], a["batch_shape"], a["batch_strides"])
                for c in range(a["n_cols"]):
                    for s in range(a["splits"]):
                        acc = IDENT[op]
                        for j in range(s * a["chunk"], min(a["n_red"], (s + 1) * a["chunk"])):
                            rj = dims_offset(j, a["red_ndim"], a["red_shape"], a["red_strides"])
                            acc = COMB[op](acc, read(src, b0 + c * a["col_stride"] + rj))
                        o = b * a["n_cols"] + c
                        write(dst, o * a["splits"] + s if a["partial"] else o, acc)
        elif layout == "argsplit":   # (value, index) of the best in each of grid.y parts
            a = rd.unpack_arg(st.tail)
            S = st.grid[1]
            assert st.grid[0] == a["n_out"] and S >= 2
            part = -(-a["axis_len"] // S)
            for o in range(a["n_out"]):
                b0 = dims_offset(o, a["kept_ndim"], a["kept_shape"], a["kept_strides"])
                for k in range(S):
                    best = None
                    for i in range(k * part, min(a["axis_len"], (k + 1) * part)):
                        best = _arg_pick(op, best, (read(src, b0 + i * a["axis_stride"]), i))
                    write(dst, o * S + k, best)
        elif layout == "argpairs":   # the best of each row's parts
            a = rd.unpack_arg(st.tail)
            for o in range(a["n_out"]):
                best = None
                for k in range(a["axis_len"]):
                    best = _arg_pick(op, best, read(src, o * a["axis_len"] + k))
                write(dst, o, 0 if best is None else best[1])
        else:  # argrow / argcol / argseq
            a = rd.unpack_arg(st.tail)
            for o in range(a["n_out"]):
                b0 = dims_offset(o, a["kept_ndim"], a["kept_shape"], a["kept_strides"])
                vals = [read(src, b0 + k * a["axis_stride"]) for k in range(a["axis_len"])]
                write(dst, o, int(np.argmax(vals) if op == "argmax" else np.argmin(vals)))
    return np.array([out[i] for i in range(n_out)], dtype=object)


def check_reduce(x, axes, op="sum", dev=SMALL, seed=0, wave=32):
    rng = np.random.default_rng(seed)
    store, base = storage_for(x, rng)
    node = reduce_node(x, axes, op)
    plan = rd.plan_node(node, dev)
    assert plan is not None
    for st in plan.steps:
        assert kt.has_kernel("reduce", st.kernel), st.kernel
    got = execute(plan, store, base, node.out.size, wave)
    ref = logical(x, store, base)
    fn = {"sum": np.sum, "max": np.max, "min": np.min}[op]
    nd = x.ndim
    want = fn(ref, axis=tuple(a % nd for a in axes), keepdims=True) if nd else ref
    np.testing.assert_array_equal(got.astype(np.int64), np.asarray(want).reshape(-1))
    return plan


LAYOUTS = [
    ("contig", lambda dt: R((6, 7, 8), dt)),
    ("transposed", lambda dt: view((6, 7, 8), dt, perm=(2, 0, 1))),
    ("transposed2", lambda dt: view((5, 9), dt, perm=(1, 0))),
    ("sliced", lambda dt: view((6, 14, 8), dt, step=(1, 2))),
    ("sliced_inner", lambda dt: view((6, 7, 16), dt, step=(2, 2))),
    ("broadcast", lambda dt: view((7, 8), dt, bcast=(1, 5))),
    ("broadcast_inner", lambda dt: view((7, 8), dt, bcast=(2, 3))),
    ("flipped", lambda dt: view((6, 7, 8), dt, flip=1)),
    ("flipped_inner", lambda dt: view((6, 7, 8), dt, flip=2)),
    ("4d", lambda dt: view((3, 4, 5, 6), dt, perm=(1, 3, 0, 2))),
]
AXES = [(0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2), (-1,)]


@pytest.mark.parametrize("layout", [l for l, _ in LAYOUTS])
@pytest.mark.parametrize("axes", AXES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_reduce_layouts_execute(layout, axes, dtype):
    x = dict(LAYOUTS)[layout](dtype)
    axes = tuple(a for a in axes if a < x.ndim)
    if not axes:
        return
    check_reduce(x, axes, "sum")
    check_reduce(x, axes, "max", seed=1)


@pytest.mark.parametrize("dev", [SMALL, SMALL64, DEV], ids=["w32_1cu", "w64_1cu", "w32_100cu"])
@pytest.mark.parametrize("case", [
    ("all", (1 << 14,), (0,)),
    ("rows_few", (3, 12000), (1,)),
    ("col_few", (4000, 12), (0,)),
    ("col_batch", (4, 3000, 9), (1,)),
    ("short_rows_outer", (3000, 2, 5), (0, 2)),
    ("outer_split", (600, 3, 40), (0, 2)),
])
def test_splits_execute(dev, case, monkeypatch):
    # one block on a 1-CU device fills it by the default rule (COL_SPLIT_BELOW): the split
    # path is what this test runs, so split whenever the device is not full
    monkeypatch.setattr(rd, "COL_SPLIT_BELOW", 1.0)
    _, shape, axes = case
    plan = check_reduce(R(shape, "float32"), axes, "sum", dev=dev, wave=dev.wave_size)
    check_reduce(R(shape, "int16"), axes, "max", dev=dev, seed=2, wave=dev.wave_size)
    if dev is not DEV:
        assert len(plan.steps) == 2 and len(plan.temps) == 1, f"{case}: expected a split"


def test_column_splits_only_below_one_block_per_cu():
    """A second pass costs more than it gains once the column blocks give each CU one
    (tools/reduce_variants.py on an H100: (256,256,256) axis 1 f32 0.71 -> 0.87 of the copy
    roofline without the split); 32 blocks on 132 CUs still split."""
    d = props(cus=132)
    p = rd.plan_node(reduce_node(R((256, 256, 256), "float32"), (1,)), d)
    assert len(p.steps) == 1 and p.steps[0].kernel == "reduce_col_sum_float32_float32" and p.steps[0].grid[0] >= 132
    p = rd.plan_node(reduce_node(R((32768, 4096), "float32"), (0,)), d)
    assert len(p.steps) == 2 and p.steps[0].grid[0] < 132 and p.steps[0].grid[1] > 1


def test_all_reduce_is_two_pass_and_fills_the_device():
    plan = rd.plan_node(reduce_node(R((1 << 28,), "float32"), (0,)), props(cus=132))
    first, second = plan.steps
    assert first.kernel == "reduce_row_sum_float32_float32_w32"
    # twice the resident 256-thread blocks (capped at 1024 splits): fewer, longer splits (512
    # threads, 528 of them) left the H100 at 0.95 of torch.sum, this at 1.0
    assert first.grid[1] == 1024 and first.block == (rd.FEW_ROWS_BLOCK, 1, 1) == (256, 1, 1)
    # many long rows keep 512-thread blocks (64 rows of 2^20 were 3 % slower with 256)
    many = rd.plan_node(reduce_node(R((64, 1 << 20), "float32"), (1,)), props(cus=132))
    assert many.steps[0].block == (512, 1, 1)
    assert rd.unpack_row(first.tail)["partial"] == 1
    assert second.refs[0] == ("t", 0, 0) and second.refs[1] == ("o", 0, 0)
    assert plan.temps == (first.grid[1] * 4,)


def test_benchmark_shapes_pick_the_fast_layouts():
    d = props(cus=132)
    p = rd.plan_node(reduce_node(R((4096, 32768), "bfloat16"), (1,)), d)
    assert len(p.steps) == 1 and p.steps[0].kernel.startswith("reduce_row_sum_bfloat16_bfloat16")
    assert rd.unpack_row(p.steps[0].tail)["group"] == p.steps[0].block[0]  # block per row
    p = rd.plan_node(reduce_node(R((32768, 4096), "float32"), (0,), "max"), d)
    assert p.steps[0].kernel == "reduce_col_max_float32_float32" and p.steps[0].grid[1] > 1
    assert p.steps[1].kernel == "reduce_row_max_float32_float32_w32"
    p = rd.plan_node(reduce_node(R((256, 256, 256), "float32"), (1,)), d)
    assert p.steps[0].kernel.startswith("reduce_col_sum_float32")
    c = rd.unpack_col(p.steps[0].tail)
    assert c["n_cols"] == 256 and c["col_stride"] == 1 and c["n_batch"] == 256
    p = rd.plan_node(arg_node(R((4096, 32768), "float32"), 1), d)
    assert p.steps[0].kernel == "reduce_argrow_argmax_float32_uint32_w32"


def test_transposed_all_reduce_collapses_to_one_row():
    x = view((64, 48), "float32", perm=(1, 0))
    p = rd.plan_node(reduce_node(x, (0, 1)), DEV)
    a = rd.unpack_row(p.steps[0].tail)
    assert a["row_len"] == 64 * 48 and a["row_stride"] == 1 and a["outer"] == 1


# ------------------------------------------------------------------ ArgReduce
@pytest.mark.parametrize("layout", [l for l, _ in LAYOUTS])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_arg_layouts_execute(layout, axis):
    x = dict(LAYOUTS)[layout]("float32")
    if axis >= x.ndim:
        return
    rng = np.random.default_rng(3)
    store, base = storage_for(x, rng)
    for op, dev in itertools.product(("argmax", "argmin"), (DEV, props(cus=1))):
        node = arg_node(x, axis, op)
        plan = rd.plan_node(node, dev)
        got = execute(plan, store, base, node.out.size)
        ref = logical(x, store, base)
        want = (np.argmax if op == "argmax" else np.argmin)(ref, axis=axis)
        np.testing.assert_array_equal(got.astype(np.int64), want.reshape(-1))


def test_arg_col_for_many_outputs_with_strided_axis():
    p = rd.plan_node(arg_node(R((64, 1 << 16), "float32"), 0), props(cus=8))
    assert p.steps[0].kernel == "reduce_argcol_argmax_float32_uint32"
    p = rd.plan_node(arg_node(R((64, 1 << 16), "float32"), 1), props(cus=8))
    assert p.steps[0].kernel.startswith("reduce_argrow_argmax_float32_uint32")


def test_arg_few_long_rows_split_in_two_passes():
    rng = np.random.default_rng(5)
    for shape, axis, perm in [((1, 50000), 1, None), ((3, 20000), 1, None), ((20000, 2), 0, None)]:
        x = R(shape, "float32")
        store, base = storage_for(x, rng)
        store[base + 7] = store[base + 19999] = 1e9          # ties: the first index wins
        for op in ("argmax", "argmin"):
            node = arg_node(x, axis, op)
            plan = rd.plan_node(node, DEV)
            assert [st.kernel.split("_")[1] for st in plan.steps] == ["argsplit", "argpairs"]
            assert plan.temps == (node.out.size * plan.steps[0].grid[1] * 8,)
            got = execute(plan, store, base, node.out.size)
            want = (np.argmax if op == "argmax" else np.argmin)(logical(x, store, base), axis=axis)
            np.testing.assert_array_equal(got.astype(np.int64), want.reshape(-1))
    # integer rows, many rows or a short row: one pass
    for shape, dt in [((1, 50000), "int32"), ((64, 50000), "float32"), ((1, 3000), "float32")]:
        assert rd.plan_node(arg_node(R(shape, dt), 1), DEV).steps[0].kernel.split("_")[1] == "argrow"


def test_arg_dtypes_route():
    for dt in ITEMSIZE:
        p = rd.plan_node(arg_node(R((3, 4), dt), 1), DEV)
        assert p is not None and kt.has_kernel("reduce", p.steps[0].kernel), dt
    assert "argseq" in rd.plan_node(arg_node(R((3, 4), "complex64"), 1), DEV).steps[0].kernel
    assert "uint8" in rd.plan_node(arg_node(R((3, 4), "bool"), 1), DEV).steps[0].kernel


# ------------------------------------------------------------------ dtype routing
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", list(ITEMSIZE))
@pytest.mark.parametrize("shape,axes", [((1 << 15,), (0,)), ((50, 300), (0,)), ((300, 50), (1,))])
def test_every_dtype_has_kernels(op, dtype, shape, axes):
    for dev in (SMALL, SMALL64):
        p = rd.plan_node(reduce_node(R(shape, dtype), axes, op), dev)
        assert p is not None, (op, dtype)
        for st in p.steps:
            assert kt.has_kernel("reduce", st.kernel), st.kernel
            if "_row_" in st.kernel or "_argrow_" in st.kernel:
                assert st.kernel.endswith(f"_w{dev.wave_size}")


def test_out_dtypes_follow_mlx():
    assert rd.out_dtype("sum", "bool") == "int32" and rd.out_dtype("sum", "uint8") == "uint32"
    assert rd.out_dtype("prod", "int16") == "int32" and rd.out_dtype("sum", "uint64") == "uint64"
    assert rd.out_dtype("max", "int8") == "int8" and rd.out_dtype("and", "float32") == "bool"
    # a node whose output dtype differs from MLX's rule is declined
    assert rd.plan_node(reduce_node(R((4, 4), "int8"), (0,), "sum", out_dtype="int8"), DEV) is None


def test_masks_ignore_the_sign_bit_of_floats():
    assert rd.route("or", "float32")[1:] == ("uint32", "bool", 0x7FFFFFFF)
    assert rd.route("and", "complex64")[1:] == ("uint64", "bool", 0x7FFFFFFF7FFFFFFF)
    assert rd.route("and", "int16")[1:] == ("uint16", "bool", 0xFFFF)
    assert rd.route("max", "bool")[0] == "or" and rd.route("min", "bool")[0] == "and"
    assert rd.route("sum", "uint32")[1:3] == ("int32", "int32")
    assert rd.route("min", "complex64")[0] == "seq_min"


def test_split_partials_keep_accumulator_type():
    # f16 sums split into float partials and finish with the float->f16 kernel
    p = rd.plan_node(reduce_node(R((1 << 16,), "float16"), (0,)), SMALL)
    assert p.steps[1].kernel == "reduce_row_sum_float32_float16_w32"
    assert p.temps == (p.steps[0].grid[1] * 4,)
    # int8 sums: int32 partials, int32 finish (the bits uint32 outputs need too)
    p = rd.plan_node(reduce_node(R((1 << 16,), "uint8"), (0,)), SMALL)
    assert p.steps[1].kernel == "reduce_row_sum_int32_int32_w32"
    p = rd.plan_node(reduce_node(R((1 << 16,), "float32"), (0,), "and"), SMALL)
    assert p.steps[1].kernel == "reduce_row_and_uint8_bool_w32"


# ------------------------------------------------------------------ edges
def test_empty_output_and_empty_reduction():
    assert rd.plan_node(reduce_node(R((0, 5), "float32"), (1,)), DEV).steps == ()
    p = rd.plan_node(reduce_node(R((0, 5), "float32"), (0,), "prod"), DEV)
    a = rd.unpack_row(p.steps[0].tail)
    assert a["n_out"] == 5 and a["row_len"] == 0      # identity per output
    assert rd.plan_node(arg_node(R((3, 0), "float32"), 0), DEV).steps == ()


def test_zero_dim_and_no_axes():
    x = R((), "float32")
    p = rd.plan_node(Node("Reduce", (2, ()), (x,), (R((), "float32"),)), DEV)
    a = rd.unpack_row(p.steps[0].tail)
    assert a["n_out"] == 1 and a["row_len"] == 1
    check_reduce(R((4, 1, 3), "float32"), (1,), "sum")


def test_too_many_dims_declines():
    x = view((2,) * 10, "float32", perm=tuple(reversed(range(10))))
    x = Layout.strided(x.shape, tuple(s * 3 if i % 2 else s for i, s in enumerate(x.strides)), "float32")
    assert rd.plan_node(reduce_node(x, (0,)), DEV) is None


def test_seq_keeps_logical_order_for_complex():
    x = view((4, 5, 6), "complex64", perm=(2, 1, 0))
    p = rd.plan_node(reduce_node(x, (0, 2), "max"), DEV)
    a = rd.unpack_row(p.steps[0].tail)
    assert p.steps[0].kernel == "reduce_seq_max_complex64_complex64"
    # logical order: dim 0 (stride 1) outer, dim 2 (stride 30) the row
    assert a["row_stride"] == 30 and a["red_strides"][0] == 1


def test_plans_are_hashable():
    n = reduce_node(view((6, 7, 8), "float32", perm=(2, 0, 1)), (0, 2))
    assert rd.plan_node(n, DEV) == rd.plan_node(n, DEV)
    hash(rd.plan_node(n, DEV))


def test_table_size_is_lean():
    names = kt.kernel_names("reduce")
    assert len(names) == len(set(names)) and len(names) < 300


# ------------------------------------------------------------------ reduce_args.h, byte for byte
_PROBE = r"""
#include <cstddef>
#include <cstdio>
#include "mlxa/reduce_args.h"
#define F(S, f) std::printf(#S " " #f " %zu\n", offsetof(S, f));
#define Z(S) std::printf(#S " sizeof %zu\n", sizeof(S));
int main() {
  Z(ReduceRowArgs) F(ReduceRowArgs, n_out) F(ReduceRowArgs, mask) F(ReduceRowArgs, kept_strides)
  F(ReduceRowArgs, red_strides) F(ReduceRowArgs, kept_shape) F(ReduceRowArgs, red_shape)
  F(ReduceRowArgs, kept_ndim) F(ReduceRowArgs, group) F(ReduceRowArgs, partial)
  Z(ReduceColArgs) F(ReduceColArgs, n_cols) F(ReduceColArgs, mask) F(ReduceColArgs, batch_strides)
  F(ReduceColArgs, red_shape) F(ReduceColArgs, batch_ndim) F(ReduceColArgs, col_blocks) F(ReduceColArgs, partial)
  Z(ArgReduceArgs) F(ArgReduceArgs, n_out) F(ArgReduceArgs, kept_strides) F(ArgReduceArgs, kept_shape)
  F(ArgReduceArgs, kept_ndim) F(ArgReduceArgs, group)
  std::printf("MLXA_REDUCE_DIMS value %d\n", MLXA_REDUCE_DIMS);
}
"""


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    d = tmp_path_factory.mktemp("rargs")
    out = probe_output(_PROBE, d)
    return {(s, f): int(v) for s, f, v in (line.split() for line in out.splitlines())}


def test_structs_match_c(c_layout):
    assert c_layout[("MLXA_REDUCE_DIMS", "value")] == rd.DIMS
    for name, (nptr, size) in rd.ARG_STRUCTS.items():
        assert c_layout[(name, "sizeof")] == size, name
    D = rd.DIMS
    # pointer fields first, then the packed tail in declaration order
    assert c_layout[("ReduceRowArgs", "n_out")] == 16 and c_layout[("ReduceRowArgs", "mask")] == 56
    assert c_layout[("ReduceRowArgs", "kept_strides")] == 64
    assert c_layout[("ReduceRowArgs", "red_strides")] == 64 + 8 * D
    assert c_layout[("ReduceRowArgs", "kept_shape")] == 64 + 16 * D
    assert c_layout[("ReduceRowArgs", "red_shape")] == 64 + 20 * D
    assert c_layout[("ReduceRowArgs", "kept_ndim")] == 64 + 24 * D
    assert c_layout[("ReduceRowArgs", "group")] == 64 + 24 * D + 8
    assert c_layout[("ReduceRowArgs", "partial")] == 64 + 24 * D + 24
    assert c_layout[("ReduceColArgs", "batch_strides")] == 64
    assert c_layout[("ReduceColArgs", "red_shape")] == 64 + 20 * D
    assert c_layout[("ReduceColArgs", "col_blocks")] == 64 + 24 * D + 16
    assert c_layout[("ReduceColArgs", "partial")] == 64 + 24 * D + 24
    assert c_layout[("ArgReduceArgs", "kept_strides")] == 40
    assert c_layout[("ArgReduceArgs", "kept_shape")] == 40 + 8 * D
    assert c_layout[("ArgReduceArgs", "group")] == 40 + 12 * D + 4


def test_tail_round_trip():
    t = rd.row_tail(5, 7, -3, 11, 13, 0xFF, ([2, 3], [30, 1]), ([4], [100]), 16, 2, True, False, True)
    a = rd.unpack_row(t)
    assert (a["n_out"], a["row_len"], a["row_stride"], a["outer"], a["chunk"], a["mask"]) == (5, 7, -3, 11, 13, 0xFF)
    assert a["kept_shape"][:3] == (2, 3, 1) and a["kept_strides"][:2] == (30, 1) and a["red_shape"][0] == 4
    assert (a["kept_ndim"], a["red_ndim"], a["group"], a["splits"], a["split_outer"], a["flat"], a["partial"]) == \
        (2, 1, 16, 2, 1, 0, 1)
    assert len(t) + 16 == rd.ARG_STRUCTS["ReduceRowArgs"][1]
