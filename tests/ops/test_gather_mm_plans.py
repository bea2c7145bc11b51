"""GatherMM family plans without a GPU: the argument blob against mlxa/gather_mm_args.h,
kernel choice, declined inputs, and a numpy model of the kernels' indexing (index lookup
through the packed shapes/strides, clamping, matrix strides) run on the real launch
tails against mx.gather_mm in float32."""

import math
import struct

import mlx.core as mx
import numpy as np
import pytest

from mlx_amd.runtime import kernel_table as kt
from mlx_amd.runtime.driver.base import DeviceProperties
from mlx_amd.runtime.ops import gather_mm as gm
from mlx_amd.runtime.plan import Layout, Memset, Node
from cprobe import probe_output

R = Layout.row_major


def props(wave=32):
    return DeviceProperties(0, "test", "gfx1100", "gfx1100", {}, wave, 100, 1 << 34, False,
                            0, 0, 0, 0, 1024, 65536, True, "0")


_PROBE = r"""
#include <cstddef>
#include <cstdio>
#include "mlxa/gather_mm_args.h"
#define F(f) std::printf(#f " %zu\n", offsetof(GatherMMArgs, f));
int main() {
  std::printf("sizeof %zu\n", sizeof(GatherMMArgs));
  F(a) F(b) F(lhs) F(rhs) F(out) F(M) F(N) F(K) F(a_rs) F(a_cs) F(b_rs) F(b_cs) F(batch)
  F(a_mats) F(b_mats) F(tiles_n) F(tiles_m) F(a_shape) F(a_strides) F(b_shape) F(b_strides)
  F(idx_shape) F(lhs_strides) F(rhs_strides) F(nd_a) F(nd_b) F(nd_idx) F(pad)
  std::printf("MAX_DIMS %d\n", MLXA_GMM_MAX_DIMS);
}
"""


def test_args_match_c(tmp_path):
    c = {k: int(v) for k, v in (line.split() for line in probe_output(_PROBE, tmp_path).splitlines())}
    assert c["sizeof"] == gm.ARG_SIZE and c["MAX_DIMS"] == gm.MAX_DIMS
    for f, off in gm.ARG_FIELDS.items():
        assert c[f] == off, f
    tail = gm.pack_args(3, 5, 7, 70, 1, 1, 7, 6, 4, 2, 2, 1, ((2, 2), (100, 35)), ((2,), (35,)),
                        ((3, 2), (2, 1), (0, 1)))
    blob = struct.pack("<5Q", *range(5)) + tail
    assert len(blob) == c["sizeof"]
    assert struct.unpack_from("<12q", blob, c["M"]) == (3, 5, 7, 70, 1, 1, 7, 6, 4, 2, 2, 1)
    assert struct.unpack_from("<2q", blob, c["a_strides"]) == (35, 100)     # innermost first
    assert struct.unpack_from("<2q", blob, c["idx_shape"]) == (2, 3)
    assert struct.unpack_from("<2q", blob, c["rhs_strides"]) == (1, 0)
    assert struct.unpack_from("<3i", blob, c["nd_a"]) == (2, 1, 2)
    d = gm.unpack_args(tail)
    assert d["K"] == 7 and d["b_strides"][0] == 35 and d["nd_idx"] == 2


# ---------------------------------------------------------------- the kernels' indexing in numpy
def loc(i, shape, strides, nd):
    off = 0
    for d in range(nd):
        off += (i % shape[d]) * strides[d]
        i //= shape[d]
    return off


def model(launch, abuf, aoff, bbuf, boff, lbuf, loff, rbuf, roff):
    f = gm.unpack_args(launch.tail)
    M, N, K = f["M"], f["N"], f["K"]
    out = np.zeros((f["batch"], M, N), np.float64)
    mm, kk, nn = np.arange(M)[:, None], np.arange(K)[None, :], np.arange(N)[None, :]
    for i in range(f["batch"]):
        ia = int(lbuf[loff + loc(i, f["idx_shape"], f["lhs_strides"], f["nd_idx"])])
        ib = int(rbuf[roff + loc(i, f["idx_shape"], f["rhs_strides"], f["nd_idx"])])
        ia, ib = min(ia, f["a_mats"] - 1), min(ib, f["b_mats"] - 1)
        ao = aoff + loc(ia, f["a_shape"], f["a_strides"], f["nd_a"])
        bo = boff + loc(ib, f["b_shape"], f["b_strides"], f["nd_b"])
        A = abuf[ao + mm * f["a_rs"] + kk * f["a_cs"]].astype(np.float64)
        B = bbuf[bo + kk.T * f["b_rs"] + nn * f["b_cs"]].astype(np.float64)
        out[i] = A @ B
    return out


def view(v, base):
    """Layout of a numpy view and the element offset of its element 0 in base."""
    it = v.itemsize
    off = (v.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // it
    dt = {np.float32: "float32", np.uint32: "uint32"}[v.dtype.type]
    return Layout.strided(v.shape, tuple(s // it for s in v.strides), dt), off


def rand(shape, rng):
    return rng.standard_normal(math.prod(shape)).astype(np.float32)


# (a view, b view, lhs, rhs) builders: each returns numpy views with their base buffers
def case(name, rng):
    E = 5
    if name == "switch_decode":             # SwitchGLU: x (B, L, 1, 1, D), w (E, O, D).T
        xb, wb = rand((2, 3, 1, 1, 32), rng), rand((E, 24, 32), rng)
        a = xb.reshape(2, 3, 1, 1, 32)
        b = np.swapaxes(wb.reshape(E, 24, 32), -1, -2)
        # lhs: the token's own row, broadcast over the k chosen experts (stride 0)
        lib = np.arange(6, dtype=np.uint32)
        li = np.broadcast_to(lib.reshape(2, 3, 1), (2, 3, 2))
        ri = rng.integers(0, E, (2, 3, 2)).astype(np.uint32)
        return a, xb, b, wb, li, lib, ri, ri
    if name == "rows_M4":
        ab, bb = rand((3, 4, 48), rng), rand((E, 20, 48), rng)
        a, b = ab.reshape(3, 4, 48), np.swapaxes(bb.reshape(E, 20, 48), -1, -2)
        li = np.array([2, 0, 1, 1], np.uint32)
        ri = np.array([4, 0, 2, 9], np.uint32)          # 9: clamped
        return a, ab, b, bb, li, li, ri, ri
    if name == "tiled_rowmajor_b":
        ab, bb = rand((2, 70, 19), rng), rand((E, 19, 66), rng)
        a, b = ab.reshape(2, 70, 19), bb.reshape(E, 19, 66)
        li = np.array([1, 0, 1], np.uint32)
        ri = np.array([3, 3, 0], np.uint32)
        return a, ab, b, bb, li, li, ri, ri
    if name == "tiled_transposed_a":
        ab, bb = rand((2, 17, 9), rng), rand((E, 17, 33), rng)
        a = np.swapaxes(ab.reshape(2, 17, 9), -1, -2)     # (2, 9, 17), column-major
        b = bb.reshape(E, 17, 33)
        li = np.array([[0, 1], [1, 0]], np.uint32)
        ri = np.array([[4, 2], [0, 1]], np.uint32)
        return a, ab, b, bb, li, li, ri, ri
    if name == "broadcast_batch":           # a broadcast over experts, sliced b
        ab, bb = rand((1, 2, 8), rng), rand((3, 2 * E, 8, 6), rng)
        a = np.broadcast_to(ab.reshape(1, 1, 2, 8), (3, 2, 2, 8))
        b = bb.reshape(3, 2 * E, 8, 6)[:, 1::2, :, 1:5]       # (3, E, 8, 4)
        li = np.array([[5, 0], [3, 1]], np.uint32)
        ri = np.array([[14, 2], [7, 0]], np.uint32)
        return a, ab, b, bb, li, li, ri, ri
    raise KeyError(name)


CASES = ["switch_decode", "rows_M4", "tiled_rowmajor_b", "tiled_transposed_a", "broadcast_batch"]


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("wave", [32, 64])
def test_model_matches_mlx(name, wave, monkeypatch):
    monkeypatch.delenv("MLX_AMD_WAVE", raising=False)
    rng = np.random.default_rng(CASES.index(name))
    a, ab, b, bb, li, lb, ri, rb = case(name, rng)
    ab, bb, lb, rb = (x.reshape(-1) for x in (ab, bb, lb, rb))   # flat views of the buffers
    lay_a, ao = view(a, ab)
    lay_b, bo = view(b, bb)
    lay_l, lo = view(li, lb)
    lay_r, ro = view(ri, rb)
    # MLX's own result (indices clamped as ours: MLX reads out of bounds past the end)
    a_mats, b_mats = math.prod(a.shape[:-2]), math.prod(b.shape[:-2])
    want = mx.gather_mm(mx.array(np.ascontiguousarray(a)), mx.array(np.ascontiguousarray(b)),
                        mx.array(np.minimum(li, a_mats - 1)), mx.array(np.minimum(ri, b_mats - 1)))
    want = np.array(want)
    out = R(want.shape, "float32")
    pl = gm.plan_node(Node("GatherMM", (False, False), (lay_a, lay_b, lay_l, lay_r), (out,)), props(wave))
    assert pl is not None and len(pl.steps) == 1
    st = pl.steps[0]
    assert kt.has_kernel("gather_mm", st.kernel)
    M, N = want.shape[-2:]
    kind = gm.choose(M, N, lay_b.strides[-2])
    assert ("rows" in st.kernel) == (kind == "rows")
    if kind == "rows":
        assert st.kernel.endswith(f"_w{wave}") and st.block[0] == gm.ROWS_WAVES * wave
        assert st.grid[0] == math.prod(want.shape[:-2]) * -(-N // gm.ROWS_WAVES)
    else:
        assert st.grid[0] == math.prod(want.shape[:-2]) * -(-N // 64) * -(-M // 64)
    got = model(st, ab, ao, bb, bo, lb, lo, rb, ro).reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_switch_glu_is_rows_kernel():
    # SwitchLinear's weight (E, out, in) used transposed: K contiguous -> the decode kernel
    assert gm.choose(1, 1024, 1) == "rows" and gm.choose(8, 64, 1) == "rows"
    assert gm.choose(9, 64, 1) == "tiled" and gm.choose(1, 64, 64) == "tiled"
    assert gm.choose(3, 1, 64) == "rows"


def node(a, b, bshape, dt="float32", idt="uint32"):
    M, N = a[-2], b[-1]
    return Node("GatherMM", (False, True), (R(a, dt), R(b, dt), R(bshape, idt), R(bshape, idt)),
                (R(bshape + (M, N), dt),))


@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
def test_dtypes_name_kernels(dt):
    pl = gm.plan_node(node((4, 1, 64), (8, 64, 32), (4,), dt), props())
    assert pl.steps[0].kernel == f"gather_mm_tiled_{dt}_{dt}"
    n = Node("GatherMM", (False, False), (R((4, 2, 64), dt), Layout.strided((8, 64, 32), (2048, 1, 64), dt),
                                          R((4,), "uint32"), R((4,), "uint32")), (R((4, 2, 32), dt),))
    assert gm.plan_node(n, props(64)).steps[0].kernel == f"gather_mm_rows_{dt}_{dt}_w64"


def test_declines_and_trivial():
    p = props()
    assert gm.plan_node(node((4, 1, 8), (8, 8, 4), (4,), "float64"), p) is None
    assert gm.plan_node(node((4, 1, 8), (8, 8, 4), (4,), "int32"), p) is None
    assert gm.plan_node(node((4, 1, 8), (8, 8, 4), (4,), idt="int32"), p) is None
    assert gm.plan_node(node((4, 1, 8), (8, 8, 4), (0,)), p).steps == ()
    z = gm.plan_node(node((4, 2, 0), (8, 0, 4), (3,)), p)
    assert isinstance(z.steps[0], Memset) and z.steps[0].nbytes == 3 * 2 * 4 * 4
    deep = (2,) * 10
    n = Node("GatherMM", (False, False),
             (Layout.strided(deep + (1, 4), tuple(4 * 5 ** (10 - i) for i in range(10)) + (4, 1), "float32"),
              R((8, 4, 4), "float32"), R((2,), "uint32"), R((2,), "uint32")), (R((2, 1, 4), "float32"),))
    assert gm.plan_node(n, p) is None       # 10 non-mergeable batch dims of a
