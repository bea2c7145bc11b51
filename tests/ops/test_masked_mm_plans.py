"""BlockMaskedMM and SegmentedMM plans without a GPU: the BlockMaskArgs struct against the
kernel file, the kernel table, BlockMaskedMM plans executed by a NumPy model (the bmask
kernel decoded from its argument tail, the matmul family's steps run by test_matmul_plans'
machine) against MLX's CPU result and a direct definition, and SegmentedMM's host step run
on real host memory with a NumPy stand-in for the GEMM library, against MLX's CPU."""

import ctypes
import dataclasses
import os
import re

import mlx.core as mx
import numpy as np
import pytest

from cprobe import probe_output
from mlx_amd.runtime import kernel_table as kt
from mlx_amd.runtime.ops import masked_mm as mk
from mlx_amd.runtime.plan import HostCall, Layout, Memset, Node
from test_matmul_plans import Machine as _MatmulMachine

HIP = os.path.join(os.path.dirname(__file__), "..", "..", "hip_kernels", "masked_mm.hip")


class Dev:
    wave_size, compute_units, arch = 32, 132, "sm_90"


def test_args_struct_matches_the_packer(tmp_path):
    src = open(HIP).read()
    body = re.search(r'extern "C" \{\s*// packed.*?\n(struct BlockMaskArgs \{.*?\};)', src, re.S).group(1)
    probe = ("#include <cstddef>\n#include <cstdint>\n#include <cstdio>\n#define MLXA_MMASK_BATCH 4\n" + body + "\n"
             "#define F(f) std::printf(#f \" %zu\\n\", offsetof(BlockMaskArgs, f));\n"
             "int main() { std::printf(\"sizeof %zu\\n\", sizeof(BlockMaskArgs)); F(x) F(y) F(rows) F(m_cs) F(nb)"
             " F(bool_mask) F(shape) F(m_bs) }\n")
    got = dict((k, int(v)) for k, v in (line.split() for line in probe_output(probe, tmp_path).splitlines()))
    assert got == {"sizeof": mk.ARG_STRUCTS["BlockMaskArgs"][1], "x": 0, "y": 16, "rows": 24, "m_cs": 72,
                   "nb": 80, "bool_mask": 84, "shape": 88, "m_bs": 88 + 2 * 8 * mk.BATCH}
    assert f"#define MLXA_MMASK_BATCH {mk.BATCH}" in src


def test_kernel_table():
    assert kt.kernel_names("masked_mm") == [f"masked_mm_bmask_{d}_{d}" for d in mk.DTYPES]
    assert "MLXA_BMASK(masked_mm_bmask_float64_float64, double)" in kt.instantiation_source("masked_mm")


# ------------------------------------------------------------------- BlockMaskedMM plans
class Machine(_MatmulMachine):
    def run(self, plan, node):
        for st in plan.steps:
            if getattr(st, "family", None) == mk.FAMILY:
                self.bmask(st)
            else:
                super().run(dataclasses.replace(plan, steps=(st,)), node)

    def bmask(self, st):
        f = mk._ARGS.unpack(st.tail)
        rows, cols, block, xrs, xcs, mrs, mcs, nb, is_bool = f[:9]
        shape, xbs, mbs = (f[9 + i * mk.BATCH: 9 + i * mk.BATCH + nb] for i in range(3))
        (xb, xo), (mb, mo), (yb, yo) = (self.ptr(r) for r in st.refs)
        r, c = np.arange(rows)[:, None], np.arange(cols)[None, :]
        for e, idx in enumerate(np.ndindex(*shape) if nb else [()]):
            xoff = xo + sum(i * s for i, s in zip(idx, xbs))
            moff = mo + sum(i * s for i, s in zip(idx, mbs))
            x = xb[xoff + r * xrs + c * xcs]
            m = mb[moff + (r // block) * mrs + (c // block) * mcs]
            y = np.where(m != 0, x, 0.0) if is_bool else x * m
            yb[yo + e * rows * cols + (r * cols + c)] = y
        assert st.grid[0] * st.block[0] >= 1


def _flat(v):
    v = np.asarray(v, np.float64)
    return np.concatenate([np.full(2, np.nan), v.ravel()]), 2


def _plan(ins, out_shape, block, dtype="float32"):
    lays = tuple(Layout.row_major(np.shape(v), d) for v, d in ins)
    node = Node("BlockMaskedMM", (block,), lays, (Layout.row_major(out_shape, dtype),))
    return node, mk.plan_node(node, Dev())


def _run(node, plan, values):
    m = Machine([_flat(v) for v in values], int(np.prod(node.outs[0].shape)), plan.temps, node.outs[0].dtype)
    m.run(plan, node)
    return m.out.reshape(node.outs[0].shape)


def _expand(mask, block, rows, cols):
    e = np.repeat(np.repeat(mask, block, axis=-2), block, axis=-1)
    return e[..., :rows, :cols]


@pytest.mark.parametrize("which", ["all", "out", "operands"])
@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("shape", [(64, 96, 128), (60, 70, 33)])
def test_block_masked_plans_are_mlx(which, kind, shape):
    M, K, N = shape
    bs = 32
    rng = np.random.default_rng(7)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    tm, tk, tn = (-(-d // bs) for d in (M, K, N))

    def mask(r, c):
        if kind == "bool":
            return rng.random((r, c)) > 0.35
        return rng.choice(np.array([0.0, 0.5, 1.0, 2.0], np.float32), size=(r, c))

    mo, ml, mr = mask(tm, tn), mask(tm, tk), mask(tk, tn)
    masks = {"all": (mo, ml, mr), "out": (mo,), "operands": (ml, mr)}[which]
    mdt = "bool" if kind == "bool" else "float32"
    node, plan = _plan([(a, "float32"), (b, "float32")] + [(m, mdt) for m in masks], (M, N), bs)
    assert plan is not None
    kinds = [type(s).__name__ + ":" + getattr(s, "family", "") for s in plan.steps]
    assert kinds.count("Launch:masked_mm") == {"all": 3, "out": 1, "operands": 2}[which]
    got = _run(node, plan, [a, b] + list(masks))
    mx_masks = [mx.array(m) for m in masks]
    args = {"all": mx_masks, "out": mx_masks + [None, None], "operands": [None] + mx_masks}[which]
    ref = np.array(mx.block_masked_mm(mx.array(a), mx.array(b), bs, *args, stream=mx.cpu))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3)
    # the definition: masked operands, the product, the masked output
    ea = a * _expand(ml, bs, M, K) if which != "out" else a
    eb = b * _expand(mr, bs, K, N) if which != "out" else b
    want = ea.astype(np.float64) @ eb
    if which != "operands":
        want = want * _expand(mo, bs, M, N)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_a_zeroed_block_drops_nan_and_inf():
    a = np.ones((64, 64), np.float32)
    a[:32, :32] = np.nan
    a[32:, 32:] = np.inf
    b = np.ones((64, 32), np.float32)
    ml = np.array([[False, True], [True, False]])
    mr = np.ones((2, 1), bool)
    node, plan = _plan([(a, "float32"), (b, "float32"), (ml, "bool"), (mr, "bool")], (64, 32), 32)
    got = _run(node, plan, [a, b, ml, mr])
    ref = np.array(mx.block_masked_mm(mx.array(a), mx.array(b), 32, None, mx.array(ml), mx.array(mr), stream=mx.cpu))
    assert np.isfinite(got).all() and np.array_equal(got, ref)


def test_batched_with_broadcast_masks_and_a_transposed_operand():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 64, 40)).astype(np.float32)
    bt = rng.standard_normal((3, 64, 40)).astype(np.float32)          # b = bt^T per batch
    mo = rng.random((1, 2, 2)) > 0.3
    lays = (Layout.row_major(a.shape, "float32"),
            Layout.strided((3, 40, 64), (64 * 40, 1, 40), "float32"),
            Layout.strided((3, 2, 2), (0, 2, 1), "bool"))
    node = Node("BlockMaskedMM", (32,), lays, (Layout.row_major((3, 64, 64), "float32"),))
    plan = mk.plan_node(node, Dev())
    m = Machine([_flat(a), _flat(bt), _flat(mo)], 3 * 64 * 64, plan.temps, "float32")
    m.run(plan, node)
    got = m.out.reshape(3, 64, 64)
    b = np.swapaxes(bt, -1, -2)
    want = (a.astype(np.float64) @ b) * _expand(np.broadcast_to(mo, (3, 2, 2)), 32, 64, 64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_block_masked_declines_what_it_does_not_cover():
    a, b = Layout.row_major((64, 64), "float32"), Layout.row_major((64, 64), "float32")
    o = Layout.row_major((64, 64), "float32")
    bad_mask = Layout.row_major((3, 2), "bool")               # wrong tile count
    int_mask = Layout.row_major((2, 2), "int32")
    for ins, params in (((a, b, bad_mask), (32,)), ((a, b, int_mask), (32,)), ((a, b, bad_mask), (0,)),
                        ((a, b), (32,))):
        assert mk.plan_node(Node("BlockMaskedMM", params, ins, (o,)), Dev()) is None
    i32 = Layout.row_major((64, 64), "int32")
    assert mk.plan_node(Node("BlockMaskedMM", (32,), (i32, i32, Layout.row_major((2, 2), "bool")),
                             (Layout.row_major((64, 64), "int32"),)), Dev()) is None
    empty = Layout.row_major((0, 64), "float32")
    p = mk.plan_node(Node("BlockMaskedMM", (32,), (empty, b, Layout.row_major((0, 2), "bool")),
                          (Layout.row_major((0, 64), "float32"),)), Dev())
    assert p is not None and p.steps == ()


# ------------------------------------------------------------------------ SegmentedMM
class _HostDriver:
    """Device memory is host memory here: copies and memsets on addresses."""

    def memcpy_dtoh(self, dst, src, n, stream=None):
        ctypes.memmove(dst, src, n)

    def stream_synchronize(self, stream):
        pass

    def memset(self, ptr, value, n, stream=None):
        ctypes.memset(ptr, value, n)


class _Ctx:
    driver = _HostDriver()


def _colmajor(addr, rows, cols, ld, dtype):
    n = (cols - 1) * ld + rows if rows and cols else 0
    flat = np.ctypeslib.as_array((ctypes.c_char * (n * np.dtype(dtype).itemsize)).from_address(addr))
    flat = flat.view(dtype)
    return np.lib.stride_tricks.as_strided(flat, (rows, cols), (flat.itemsize, ld * flat.itemsize))


def _numpy_blas(calls):
    def run(ctx, g, a, b, c, d, stream):
        calls.append(g)
        ar, ac = (g.k, g.m) if g.trans_a else (g.m, g.k)
        br, bc = (g.n, g.k) if g.trans_b else (g.k, g.n)
        A = _colmajor(a, ar, ac, g.lda, np.float32)
        B = _colmajor(b, br, bc, g.ldb, np.float32)
        D = _colmajor(d, g.m, g.n, g.ldc, np.float32)
        D[...] = (A.T if g.trans_a else A).astype(np.float64) @ (B.T if g.trans_b else B)
        return True
    return run


@pytest.mark.parametrize("layout", ["row", "col"])
def test_segmented_host_step_is_mlx(monkeypatch, layout):
    from mlx_amd.runtime import blas

    rng = np.random.default_rng(11)
    M, K, N = 5, 12, 7
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    segs = np.array([[[0, 4], [4, 12]], [[3, 3], [9, 2]], [[2, 11], [0, 12]]], np.uint32)
    ab = np.ascontiguousarray(a) if layout == "row" else np.asfortranarray(a)
    bb = np.ascontiguousarray(b) if layout == "row" else np.asfortranarray(b)
    st = lambda x: tuple(s // 4 for s in x.strides)  # noqa: E731
    lays = (Layout.strided(a.shape, st(ab), "float32"), Layout.strided(b.shape, st(bb), "float32"),
            Layout.row_major(segs.shape, "uint32"))
    node = Node("SegmentedMM", (), lays, (Layout.row_major((3, 2, M, N), "float32"),))
    plan = mk.plan_node(node, Dev())
    (step,) = plan.steps
    assert isinstance(step, HostCall) and isinstance(step.fn, mk.SegmentCall) and plan.temps == ()
    calls = []
    monkeypatch.setattr(blas, "run", _numpy_blas(calls))
    d = np.full((3, 2, M, N), np.nan, np.float32)
    step.fn(tuple(x.ctypes.data for x in (ab, bb, segs, d)), None, _Ctx())
    ref = np.array(mx.segmented_mm(mx.array(a), mx.array(b), mx.array(segs), stream=mx.cpu))
    np.testing.assert_allclose(d, ref, rtol=1e-5, atol=1e-5)
    assert [g.k for g in calls] == [4, 8, 9, 12]      # the empty ones are memsets


def test_a_segment_past_k_raises_instead_of_aborting():
    call = mk.SegmentCall("float32", 2, 2, 8, ("row", 8), ("row", 2), 2)
    segs = np.array([[0, 8], [2, 30]], np.uint32)
    with pytest.raises(ValueError, match=r"segment 1 is \[2, 30\) but the inner dimension of the matmul is 8"):
        call.read((0, 0, segs.ctypes.data, 0), None, _Ctx())
    one = mk.SegmentCall("float32", 2, 2, 8, ("row", 8), ("row", 2), 1)
    # empty segments are zeros wherever they point, as in MLX
    for lo, hi in ((30, 9), (5, 3), (8, 8)):
        seg = np.array([[lo, hi]], np.uint32)
        assert one.read((0, 0, seg.ctypes.data, 0), None, _Ctx()) == [(lo, hi)]


def test_segmented_plans_copy_what_the_library_cannot_read():
    a = Layout.strided((5, 12), (24, 2), "float32")          # every other column: a copy first
    b = Layout.row_major((12, 7), "float32")
    s = Layout.strided((3, 2), (1, 3), "uint32")            # column-major segments: copied too
    node = Node("SegmentedMM", (), (a, b, s), (Layout.row_major((3, 5, 7), "float32"),))
    plan = mk.plan_node(node, Dev())
    kinds = [type(st).__name__ for st in plan.steps]
    assert kinds == ["Launch", "Launch", "HostCall"] and len(plan.temps) == 2
    assert plan.steps[-1].fn.a_lay == ("row", 12)
    zero_k = Node("SegmentedMM", (), (Layout.row_major((5, 0), "float32"), Layout.row_major((0, 7), "float32"),
                                      Layout.row_major((2, 2), "uint32")), (Layout.row_major((2, 5, 7), "float32"),))
    (ms,) = mk.plan_node(zero_k, Dev()).steps
    assert isinstance(ms, Memset) and ms.nbytes == 2 * 5 * 7 * 4
    batched = Node("SegmentedMM", (), (Layout.row_major((2, 5, 12), "float32"), b, Layout.row_major((1, 2), "uint32")),
                   (Layout.row_major((1, 5, 7), "float32"),))
    assert mk.plan_node(batched, Dev()) is None               # MLX refuses batched operands too
