"""Hadamard family plans without a GPU: the argument blob against mlxa/hadamard_args.h,
MLX's m-matrices and size rules, pass splitting within the kernel's shared memory, and a
numpy model of the kernel (the same float32 butterflies, m stage and scale, indexed
from the packed launch tails) against mx.hadamard_transform: float32 bit for bit."""

import math
import struct

import mlx.core as mx
import numpy as np
import pytest

from mlx_amd.runtime import kernel_table as kt
from mlx_amd.runtime.ops import hadamard as hd
from mlx_amd.runtime.plan import Layout, Node, Plan
from cprobe import probe_output

R = Layout.row_major
_ARGS = struct.Struct(f"<qqqqq{hd.MAX_DIMS}q{hd.MAX_DIMS}qiiif{hd.MAX_M}I")


def node(x, scale):
    return Node("Hadamard", (scale,), (x,), (R(x.shape, x.dtype),))


# ---------------------------------------------------------------- hadamard_args.h, byte for byte
_PROBE = r"""
#include <cstddef>
#include <cstdio>
#include "mlxa/hadamard_args.h"
#define F(f) std::printf(#f " %zu\n", offsetof(HadamardArgs, f));
int main() {
  std::printf("sizeof %zu\n", sizeof(HadamardArgs));
  F(in) F(out) F(lines) F(S) F(gpr) F(n) F(in_elem) F(in_shape) F(in_strides) F(nd) F(P) F(C)
  F(scale) F(hm)
  std::printf("MAX_DIMS %d\nMAX_M %d\n", MLXA_HADAMARD_MAX_DIMS, MLXA_HADAMARD_MAX_M);
}
"""


def test_args_match_c(tmp_path):
    c = {k: int(v) for k, v in (line.split() for line in probe_output(_PROBE, tmp_path).splitlines())}
    assert c["sizeof"] == hd.ARG_SIZE
    assert c["MAX_DIMS"] == hd.MAX_DIMS and c["MAX_M"] == hd.MAX_M
    for f, off in hd.ARG_FIELDS.items():
        assert c[f] == off, f
    blob = struct.pack("<QQ", 1, 2) + hd.pack_args(9, 4, 3, 96, 2, (5, 7), (700, 100), 8, 16, 0.5, 12)
    assert len(blob) == c["sizeof"]
    assert struct.unpack_from("<5q", blob, c["lines"]) == (9, 4, 3, 96, 2)
    assert struct.unpack_from("<2q", blob, c["in_shape"]) == (7, 5)        # innermost first
    assert struct.unpack_from("<2q", blob, c["in_strides"]) == (100, 700)
    assert struct.unpack_from("<iii", blob, c["nd"]) == (2, 8, 16)
    assert struct.unpack_from("<f", blob, c["scale"])[0] == 0.5
    assert struct.unpack_from("<I", blob, c["hm"])[0] == hd.row_masks(12)[0]


# ---------------------------------------------------------------- MLX's definition
@pytest.mark.parametrize("m", [12, 20, 28])
def test_matrices_are_mlx(m):
    # an m-element row is the m stage alone: the columns of the output are H_m's columns
    got = np.array(mx.hadamard_transform(mx.eye(m), scale=1.0)).T
    np.testing.assert_array_equal(got, np.array(hd.matrix(m), dtype=np.float32))
    h = np.array(hd.matrix(m))
    np.testing.assert_array_equal(h @ h.T, m * np.eye(m))   # a Hadamard matrix


def test_decompose():
    assert hd.decompose(1) == (1, 0) and hd.decompose(1 << 15) == (1, 15)
    assert hd.decompose(12) == (12, 0) and hd.decompose(28 << 9) == (28, 9) and hd.decompose(40) == (20, 1)
    assert hd.decompose(36) is None      # MLX computes a non-transform: fallback
    assert hd.decompose(24 * 3) is None
    assert hd.decompose(7) is None and hd.decompose(0) is None
    assert hd.decompose(1 << 27) is None


@pytest.mark.parametrize("n", [1, 2, 8, 4096, 8192, 1 << 15, 1 << 20, 1 << 26, 12, 12 << 8, 12 << 9,
                               20 << 7, 20 << 12, 28 << 7, 28 << 8, 28 << 15, 28 << 26])
def test_passes_cover_every_bit_within_shared_memory(n):
    m, k = hd.decompose(n)
    ps = hd.passes(m, k)
    lo = 0
    for i, (pm, bits, low) in enumerate(ps):
        assert low == lo
        lo += bits
        assert (pm == m) == (i == len(ps) - 1) or m == 1
        R = pm << bits
        C = max(1, hd.ONE_PASS // R) if low == 0 else hd.STRIDED_LINES
        assert C * (R + 1) <= hd.SMEM
        if low:
            assert R <= hd.MAX_LINE
    assert lo == k


# ---------------------------------------------------------------- the kernel, modelled in numpy
def unpack(tail):
    v = _ARGS.unpack(tail)
    D = hd.MAX_DIMS
    f = dict(zip(("lines", "S", "gpr", "n", "in_elem"), v[:5]))
    f["in_shape"], f["in_strides"] = v[5:5 + D], v[5 + D:5 + 2 * D]
    f["nd"], f["P"], f["C"], f["scale"] = v[5 + 2 * D:9 + 2 * D]
    f["hm"] = v[9 + 2 * D:]
    return f


def model_pass(f, m, src, src_off, dst, dst_dt):
    """One launch: every line gathered through the tail's indexing, transformed in
    float32 with the kernel's butterfly order, scaled, stored."""
    P, S, gpr, n = f["P"], f["S"], f["gpr"], f["n"]
    R = m * P
    lines = np.arange(f["lines"])
    g, s = lines // S, lines % S
    row = g // gpr
    j = ((g % gpr) * R * S + s)[:, None] + np.arange(R)[None, :] * S      # (lines, R)
    off, rem = np.zeros_like(row), row.copy()
    for d in range(f["nd"]):
        off += (rem % f["in_shape"][d]) * f["in_strides"][d]
        rem //= f["in_shape"][d]
    io = src_off + off[:, None] + j * f["in_elem"]
    oo = row[:, None] * n + j
    buf = src[io].astype(np.float32).reshape(len(lines), m, P)
    h = 1
    while h < P:
        i = np.arange(P // 2)
        lo = i & (h - 1)
        jj = ((i - lo) << 1) + lo
        x, y = buf[:, :, jj].copy(), buf[:, :, jj + h].copy()
        buf[:, :, jj], buf[:, :, jj + h] = x + y, x - y
        h <<= 1
    if m > 1:
        v = buf.copy()
        for jr in range(m):
            acc = np.zeros((len(lines), P), np.float32)
            for k in range(m):
                acc = acc + v[:, k] if (f["hm"][jr] >> k) & 1 else acc - v[:, k]
            buf[:, jr] = acc
    res = (buf.reshape(len(lines), R) * np.float32(f["scale"])).astype(dst_dt)
    dst[oo] = res


def run_model(pl: Plan, base: np.ndarray, offset: int, shape, dtype):
    rows_n = math.prod(shape)
    outbuf = np.zeros(rows_n, np.float32 if dtype == np.float32 else dtype)
    work = outbuf if dtype == np.float32 else np.zeros(rows_n, np.float32)
    for st in pl.steps:
        m = int(st.kernel.split("_")[1][1:])
        f = unpack(st.tail)
        src, src_off = (base, offset) if st.refs[0].kind == "i" else (work, 0)
        dst = outbuf if (st.refs[1].kind == "o" and dtype != np.float32) else work
        model_pass(f, m, src, src_off, dst, dst.dtype)
    return outbuf.reshape(shape)


CASES = [((3, 16), "row"), ((2, 3, 1), "row"), ((5, 12), "row"), ((4, 40), "T"), ((2, 28 * 4), "row"),
         ((2, 1 << 13), "row"), ((1, 1 << 15), "row"), ((2, 12 << 9), "row"), ((3, 20 << 8), "T"),
         ((1, 28 << 10), "row"), ((2, 3, 64), "bcast"), ((6, 256), "slice"), ((4, 128), "neg")]


def make_view(shape, kind, rng):
    """(numpy view, flat base, element offset of the view's element 0)"""
    if kind == "row":
        base = rng.standard_normal(math.prod(shape)).astype(np.float32)
        v = base.reshape(shape)
    elif kind == "T":
        base = rng.standard_normal(math.prod(shape)).astype(np.float32)
        v = base.reshape(shape[::-1]).T
    elif kind == "bcast":
        base = rng.standard_normal(shape[-1]).astype(np.float32)
        v = np.broadcast_to(base, shape)
    elif kind == "slice":
        base = rng.standard_normal(shape[0] * 2 * (shape[1] + 4)).astype(np.float32)
        v = base.reshape(shape[0] * 2, shape[1] + 4)[1::2, 3:3 + shape[1]]
    else:   # negative strides
        base = rng.standard_normal(math.prod(shape)).astype(np.float32)
        v = base.reshape(shape)[::-1, ::-1]
    off = (v.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // 4
    return v, base, off


@pytest.mark.parametrize("shape,kind", CASES)
@pytest.mark.parametrize("scale", [None, 0.25])
def test_model_matches_mlx_float32(shape, kind, scale):
    rng = np.random.default_rng(hash((shape, kind)) % 2**32)
    v, base, off = make_view(shape, kind, rng)
    n = shape[-1]
    sc = 1.0 / math.sqrt(n) if scale is None else scale
    x = Layout.strided(shape, tuple(s // 4 for s in v.strides), "float32")
    pl = hd.plan_node(node(x, float(np.float32(sc))), None)
    assert pl is not None and all(kt.has_kernel("hadamard", s.kernel) for s in pl.steps)
    got = run_model(pl, base, off, shape, np.float32)
    want = np.array(mx.hadamard_transform(mx.array(np.ascontiguousarray(v)), scale=scale))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("n", [64, 28 * 8, 1 << 14, 20 << 9])
def test_16bit_plans(dtype, n):
    pl = hd.plan_node(node(R((3, n), dtype), 0.5), None)
    names = [s.kernel for s in pl.steps]
    assert all(kt.has_kernel("hadamard", k) for k in names)
    if len(names) == 1:
        assert names[0].endswith(f"{dtype}_{dtype}") and pl.temps == ()
    else:
        assert names[0].endswith(f"{dtype}_float32") and names[-1].endswith(f"float32_{dtype}")
        assert pl.temps == (3 * n * 4,)
        assert pl.steps[0].refs[0].kind == "i" and pl.steps[-1].refs[1].kind == "o"
        assert all(s.refs[1].kind == "t" for s in pl.steps[:-1])


def test_model_16bit_close_to_float32():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 20 << 9)).astype(np.float32)
    want = np.array(mx.hadamard_transform(mx.array(x)))
    xh = x.astype(np.float16)
    pl = hd.plan_node(node(R(x.shape, "float16"), float(np.float32(1 / math.sqrt(x.shape[1])))), None)
    got = run_model(pl, xh.ravel(), 0, x.shape, np.float16)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=2e-2)


def test_one_element_rows_are_scaled():
    pl = hd.plan_node(node(R((4, 1), "float32"), 0.5), None)
    assert unpack(pl.steps[0].tail)["scale"] == 0.5
    x = np.arange(4, dtype=np.float32).reshape(4, 1)
    np.testing.assert_array_equal(np.array(mx.hadamard_transform(mx.array(x), scale=0.5)), x * 0.5)


def test_declines():
    assert hd.plan_node(node(R((2, 36), "float32"), 1.0), None) is None
    assert hd.plan_node(node(R((2, 24), "float64"), 1.0), None) is None
    assert hd.plan_node(node(R((2, 24), "int32"), 1.0), None) is None
    assert hd.plan_node(node(R((), "float32"), 1.0), None) is None
    assert hd.plan_node(node(R((0, 16), "float32"), 1.0), None).steps == ()
    # bare float params (the bridge may pass a one-value state unwrapped)
    assert hd.plan_node(Node("Hadamard", 0.5, (R((2, 8), "float32"),), (R((2, 8), "float32"),)), None)
