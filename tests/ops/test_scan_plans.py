"""Scan family plans without a GPU: kernel choice (row / wave rows / split rows / column),
dtype mapping, declined inputs, the argument blob against mlxa/scan_args.h, and a Python
model of the kernels' State ops (scan.hip), evaluated in a blocked order unlike MLX's
sequential loop, checked against MLX's CPU on NaN/inf-laden data."""

import math
import os
import struct

import mlx.core as mx
import numpy as np
import pytest

from mlx_amd.runtime import kernel_table as kt
from mlx_amd.runtime.driver.base import DeviceProperties
from mlx_amd.runtime.ops import scan as sc
from mlx_amd.runtime.plan import ITEMSIZE, Layout, Node
from cprobe import probe_output

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
R = Layout.row_major
RT = {"max": 0, "min": 1, "sum": 2, "prod": 3, "logaddexp": 4}


def props(wave=32, cus=100):
    return DeviceProperties(0, "test", "gfx1100", "gfx1100", {}, wave, cus, 1 << 34, False,
                            0, 0, 0, 0, 1024, 65536, True, "0")


def scan_node(op, x, axis, reverse=False, inclusive=True, out_dtype=None):
    return Node("Scan", (RT[op], axis, reverse, inclusive), (x,), (R(x.shape, out_dtype or x.dtype),))


def fields(launch):
    f = struct.unpack_from("<5q8q8i4i", launch.tail)
    return dict(rows=f[0], n=f[1], es=f[2], chunk=f[3], inner=f[4], strides=f[5:13],
                shape=f[13:21], ndim=f[21], nchunks=f[22], flags=f[23], mode=f[24])


@pytest.mark.parametrize("wave", [32, 64])
@pytest.mark.parametrize("op,dtype,out", [
    ("sum", "bool", "int32"), ("sum", "int8", "int8"), ("sum", "uint64", "uint64"), ("sum", "float16", "float16"),
    ("prod", "bool", "bool"), ("prod", "int32", "int32"), ("prod", "float64", "float64"),
    ("max", "bool", "bool"), ("max", "int16", "int16"), ("max", "bfloat16", "bfloat16"),
    ("min", "bool", "bool"), ("min", "uint32", "uint32"), ("min", "float32", "float32"),
    ("logaddexp", "float32", "float32"), ("logaddexp", "float16", "float16")])
@pytest.mark.parametrize("shape,axis", [((5, 7), 1), ((5, 7), 0), ((3, 4, 5), 1), ((2, 100000), 1), ((1 << 22,), 0)])
@pytest.mark.parametrize("single_pass", [True, False])
def test_every_plan_names_a_kernel(wave, op, dtype, out, shape, axis, single_pass, monkeypatch):
    monkeypatch.delenv("MLX_AMD_WAVE", raising=False)
    monkeypatch.setattr(sc, "SINGLE_PASS", single_pass)
    p = sc.plan_node(scan_node(op, R(shape, dtype), axis, out_dtype=out), props(wave))
    assert p is not None
    for l in p.steps:
        assert kt.has_kernel("scan", l.kernel), l.kernel
        assert len(l.tail) + 24 == sc.ARG_SIZE and l.n_ptrs == 3
        f = fields(l)
        assert f["n"] == shape[axis]
        if l.kernel.startswith("scan_r_"):
            assert l.kernel.endswith(f"_w{wave}") and l.block[0] % wave == 0 and l.block[0] <= 512
            assert f["rows"] * f["n"] == math.prod(shape)
        else:
            assert f["inner"] == math.prod(shape[axis + 1:]) and f["inner"] > 1
    if len(p.steps) == 2 and fields(p.steps[0])["mode"] == sc.CLEAR:
        a, b = (fields(l) for l in p.steps)
        assert b["mode"] == sc.LOOKBACK and a["nchunks"] == b["nchunks"] > 1
        v = 16 // max(ITEMSIZE[dtype], ITEMSIZE[out])
        assert b["chunk"] == sc.LOOKBACK_BLOCK * v * sc.ROW_GROUPS[v]   # one block's tile
        assert b["chunk"] * b["nchunks"] >= b["n"] > b["chunk"] * (b["nchunks"] - 1)
        slots = b["rows"] * b["nchunks"]
        assert p.steps[1].grid[0] == slots and p.steps[1].block[0] == sc.LOOKBACK_BLOCK
        assert p.temps == (16 + -(-slots * 4 // 16) * 16 + 2 * slots * sc.STATE_BYTES,)
        assert all(l.refs[2].kind == "t" for l in p.steps)
    elif len(p.steps) == 2:
        a, b = (fields(l) for l in p.steps)
        assert (a["mode"], b["mode"]) == (sc.TOTALS, sc.CARRIED)
        assert a["nchunks"] > 1 and a["chunk"] * a["nchunks"] >= a["n"] > a["chunk"] * (a["nchunks"] - 1)
        assert p.temps == (a["rows"] * a["nchunks"] * sc.STATE_BYTES,)
        assert p.steps[0].grid[0] == a["rows"] * a["nchunks"]
        assert p.steps[0].refs[2].kind == "t"


def test_dtype_mapping_and_declines():
    d = props()
    k = lambda *a, **kw: sc.plan_node(scan_node(*a, **kw), d)  # noqa: E731
    assert "_sum_uint8_uint8_" in k("sum", R((4, 5), "int8"), 1).steps[0].kernel
    assert "_prod_uint8_uint8_" in k("prod", R((4, 5), "bool"), 1).steps[0].kernel
    assert "_max_uint8_uint8_" in k("max", R((4, 5), "bool"), 1).steps[0].kernel
    assert "_min_bool_bool_" in k("min", R((4, 5), "bool"), 1).steps[0].kernel
    assert "_max_int8_int8_" in k("max", R((4, 5), "int8"), 1).steps[0].kernel
    assert "_sum_bool_int32_" in k("sum", R((4, 5), "bool"), 1, out_dtype="int32").steps[0].kernel
    assert k("sum", R((4, 5), "complex64"), 1) is None
    assert k("logaddexp", R((4, 5), "int32"), 1) is None           # MLX casts to float first
    assert k("sum", R((4, 5), "float32"), 1, out_dtype="float16") is None
    assert k("sum", R((), "float32"), 0) is None
    assert k("sum", R((4, 5), "float32"), 2) is None
    assert k("sum", R((4, 0), "float32"), 1).steps == ()
    assert sc.op_name("LogAddExp") == "logaddexp" and sc.op_name(2) == "sum"


def test_layouts_reach_the_kernels(monkeypatch):
    d = props()
    # transposed input scanned along its last axis: row kernel, strided elements
    x = Layout.strided((6, 5), (1, 6), "float32")
    (l,) = sc.plan_node(scan_node("sum", x, 1, reverse=True, inclusive=False), d).steps
    f = fields(l)
    assert l.kernel.startswith("scan_r_") and f["es"] == 6 and f["strides"][0] == 1 and f["shape"][0] == 6
    assert f["flags"] == sc.REVERSE | sc.WAVE_ROWS
    # axis 0 of a (64, 8) array: one thread per column, output stride 8
    (l,) = sc.plan_node(scan_node("max", R((64, 8), "float32"), 0, inclusive=True), d).steps
    f = fields(l)
    assert l.kernel == "scan_c_max_float32_float32" and f["rows"] == 8 and f["inner"] == 8 and f["es"] == 8
    assert f["flags"] == sc.INCLUSIVE
    tile = sc.LOOKBACK_BLOCK * 16                      # float32: 4 elements a group, 4 groups
    # long rows, many of them: a block per tile with look-back, or one block per row
    for many in (True, False):
        monkeypatch.setattr(sc, "LOOKBACK_MANY_ROWS", many)
        p = sc.plan_node(scan_node("sum", R((4096, 32768), "float32"), 1), d)
        if many:
            assert [fields(l)["mode"] for l in p.steps] == [sc.CLEAR, sc.LOOKBACK]
            assert p.steps[1].grid[0] == 4096 * 32768 // tile
        else:
            assert len(p.steps) == 1 and p.steps[0].grid[0] == 4096 and p.steps[0].block[0] == 512
    # rows of one tile: a block per row either way
    p = sc.plan_node(scan_node("sum", R((4096, tile), "float32"), 1), d)
    assert len(p.steps) == 1 and p.steps[0].grid[0] == 4096
    # one long row: a block per tile, look-back
    p = sc.plan_node(scan_node("sum", R((1 << 22,), "float32"), 0), d)
    assert [fields(l)["mode"] for l in p.steps] == [sc.CLEAR, sc.LOOKBACK]
    assert p.steps[1].grid[0] == (1 << 22) // tile and p.steps[1].block[0] == sc.LOOKBACK_BLOCK


_PROBE = r"""
#include <cstddef>
#include <cstdio>
#include "mlxa/scan_args.h"
#define F(f) std::printf(#f " %zu\n", offsetof(ScanArgs, f));
int main() {
  std::printf("sizeof %zu\n", sizeof(ScanArgs));
  F(in) F(out) F(totals) F(rows) F(n) F(elem_stride) F(chunk) F(inner) F(strides) F(shape)
  F(ndim) F(nchunks) F(flags) F(mode)
  std::printf("MAX_DIMS %d\nREVERSE %d\nINCLUSIVE %d\nWAVE_ROWS %d\nFULL %d\nTOTALS %d\nCARRIED %d\n"
              "CLEAR %d\nLOOKBACK %d\nSTATE_BYTES %d\nSTATUS_HEAD %d\n",
              MLXA_SCAN_MAX_DIMS, MLXA_SCAN_REVERSE, MLXA_SCAN_INCLUSIVE, MLXA_SCAN_WAVE_ROWS,
              MLXA_SCAN_FULL, MLXA_SCAN_TOTALS, MLXA_SCAN_CARRIED, MLXA_SCAN_CLEAR, MLXA_SCAN_LOOKBACK,
              MLXA_SCAN_STATE_BYTES, MLXA_SCAN_STATUS_HEAD);
}
"""


def test_args_match_c(tmp_path):
    out = probe_output(_PROBE, tmp_path)
    c = {k: int(v) for k, v in (line.split() for line in out.splitlines())}
    assert c["sizeof"] == sc.ARG_SIZE
    for f, off in sc.ARG_FIELDS.items():
        assert c[f] == off, f
    assert (c["MAX_DIMS"], c["REVERSE"], c["INCLUSIVE"], c["WAVE_ROWS"]) == (sc.MAX_DIMS, sc.REVERSE, sc.INCLUSIVE, sc.WAVE_ROWS)
    assert (c["FULL"], c["TOTALS"], c["CARRIED"]) == (sc.FULL, sc.TOTALS, sc.CARRIED)
    assert (c["CLEAR"], c["LOOKBACK"]) == (sc.CLEAR, sc.LOOKBACK)
    assert (c["STATE_BYTES"], c["STATUS_HEAD"]) == (sc.STATE_BYTES, sc.STATUS_HEAD)
    blob = struct.pack("<QQQ", 1, 2, 3) + sc.pack_args(7, 9, 2, 4, 1, (3, 5), (40, 8), 2, 3, 1)
    assert len(blob) == c["sizeof"]
    assert struct.unpack_from("<q", blob, c["rows"])[0] == 7
    assert struct.unpack_from("<q", blob, c["n"])[0] == 9
    assert struct.unpack_from("<q", blob, c["chunk"])[0] == 4
    assert struct.unpack_from("<2q", blob, c["strides"]) == (8, 40)
    assert struct.unpack_from("<2i", blob, c["shape"]) == (5, 3)
    assert struct.unpack_from("<4i", blob, c["ndim"]) == (2, 2, 3, 1)


# ---------------------------------------------------------------- model of scan.hip's ops
INF, NAN = float("inf"), float("nan")


def _ops(op):
    """(identity, make(x, first_inclusive), combine) as in scan.hip."""
    if op == "max":
        return ((-INF, 0), lambda x, first: (x, 0),
                lambda a, b: a if a[0] != a[0] else (b if b[0] != b[0] else (a if b[0] < a[0] else b)))
    if op == "min":
        return ((INF, 0), lambda x, first: (x, 0),
                lambda a, b: a if a[0] != a[0] else (b if b[0] != b[0] else (b if b[0] < a[0] else a)))

    def lae(a, b):
        x, y = a[0], b[0]
        hi = x if x != x else (x if x > y else y)
        lo = x if x != x else (x if x < y else y)
        if lo == -INF or hi == INF:
            return (hi, 0)
        return (hi + math.log1p(math.exp(lo - hi)), 0)
    return (-INF, 0), lambda x, first: (x, 0), lae


def model_scan(xs, op, reverse, inclusive, block=3):
    """The row kernel's order: blocks of `block` elements scanned locally, block totals
    scanned (as by the wave/block levels), then combined with the carry."""
    ident, make, comb = _ops(op)
    seq = list(reversed(xs)) if reverse else list(xs)
    n = len(seq)
    states = [make(x, inclusive and i == 0) for i, x in enumerate(seq)]
    out, carry = [], ident
    for b0 in range(0, n, block):
        loc = []
        for s in states[b0:b0 + block]:
            loc.append(s if not loc else comb(loc[-1], s))
        for j, s in enumerate(loc):
            st = comb(carry, s) if inclusive else (carry if j == 0 else comb(carry, loc[j - 1]))
            out.append(st[0])
        carry = comb(carry, loc[-1])
    return list(reversed(out)) if reverse else out


@pytest.mark.parametrize("op", ["max", "min", "logaddexp"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("inclusive", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_state_ops_match_mlx_sequential_loop(op, reverse, inclusive, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 14))
    pool = np.array([NAN, INF, -INF, 0.0, -0.0, 1.0, -2.0, 3.5, 0.25])
    xs = rng.choice(pool, n) if seed % 2 else rng.standard_normal(n)
    if seed % 3 == 0:
        xs[0] = NAN
    fn = {"max": mx.cummax, "min": mx.cummin, "logaddexp": mx.logcumsumexp}[op]
    ref = np.array(fn(mx.array(xs.astype(np.float32)), reverse=reverse, inclusive=inclusive)).astype(np.float64)
    for block in (1, 2, 3, 5):
        got = np.array(model_scan([float(np.float32(x)) for x in xs], op, reverse, inclusive, block))
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6, equal_nan=True,
                                   err_msg=f"{op} rev={reverse} incl={inclusive} block={block} x={xs}")


def test_mlx_cpu_accumulates_16_bit_scans_in_16_bits():
    """Why 16-bit scans are compared with a float32 reference on long rows."""
    assert mx.cumsum(mx.ones((4096,), mx.float16))[-1].item() == 2048
    assert mx.cumsum(mx.ones((4096,), mx.bfloat16))[-1].item() == 256
