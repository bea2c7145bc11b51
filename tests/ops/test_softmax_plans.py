"""Softmax family plans without a GPU: kernel choice by row length and wave width,
declined inputs, the argument blob against the C struct of mlxa/softmax_args.h, and
the float exp the kernels use (MLX's CPU polynomial) against MLX's own float64 result."""

import os
import struct

import mlx.core as mx
import numpy as np
import pytest

from mlx_amd.runtime import kernel_table as kt
from mlx_amd.runtime.driver.base import DeviceProperties
from mlx_amd.runtime.ops import softmax as sm
from mlx_amd.runtime.plan import Layout, Node
from cprobe import probe_output

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def props(wave=32, cus=100):
    return DeviceProperties(0, "test", "gfx1100", "gfx1100", {}, wave, cus, 1 << 34, False,
                            0, 0, 0, 0, 1024, 65536, True, "0")


R = Layout.row_major


def node(prim, x, out=None, precise=False):
    if out is None:
        out = R(x.shape, x.dtype) if prim == "Softmax" else R(x.shape[:-1] + (1,), x.dtype)
    return Node(prim, (precise,) if prim == "Softmax" else (), (x,), (out,))


@pytest.mark.parametrize("wave", [32, 64])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("prim", ["Softmax", "LogSumExp"])
@pytest.mark.parametrize("n", [1, 7, 64, 255, 1024, 5000, 32768, 100003, 1 << 20])
def test_every_plan_names_a_kernel(wave, dtype, prim, n, monkeypatch):
    monkeypatch.delenv("MLX_AMD_WAVE", raising=False)
    p = sm.plan_node(node(prim, R((3, n), dtype)), props(wave))
    (l,) = p.steps
    assert kt.has_kernel("softmax", l.kernel), l.kernel
    assert l.kernel.endswith(f"_w{wave}")
    assert l.block[0] % wave == 0 and l.block[0] <= 512
    assert l.n_ptrs == 2 and len(l.tail) + 16 == sm.ARG_SIZE
    layout = l.kernel.split("_")[1]
    groups = -(-n // (16 // np.dtype(np.float64 if dtype == "float64" else np.float32 if dtype == "float32" else np.float16).itemsize))
    if layout.startswith("w"):
        assert groups <= int(layout[1]) * wave
        assert l.grid[0] == -(-3 // (256 // wave))
    else:
        assert l.grid[0] == 3
        if layout.startswith("b"):
            assert groups <= int(layout[1]) * l.block[0]
    if prim == "LogSumExp":
        assert layout in ("w2", "w8", "l") and p.donate == ()
    else:
        assert p.donate == ((0, 0),)


def test_bench_shapes_take_register_kernels():
    d = props(32)
    assert sm.plan_node(node("Softmax", R((4096, 32768), "bfloat16")), d).steps[0].kernel.startswith("softmax_b8_")
    assert sm.plan_node(node("Softmax", R((32768, 1024), "float32")), d).steps[0].kernel.startswith("softmax_w8_")


def test_declined_and_empty():
    d = props()
    assert sm.plan_node(node("Softmax", R((4, 5), "int32")), d) is None
    assert sm.plan_node(node("Softmax", R((4, 5), "complex64")), d) is None
    assert sm.plan_node(node("Softmax", R((), "float32"), R((), "float32")), d) is None
    assert sm.plan_node(node("LogSumExp", R((4, 0), "float32")), d) is None     # MLX raises
    assert sm.plan_node(node("Softmax", R((4, 0), "float32")), d).steps == ()
    assert sm.plan_node(node("Softmax", R((0, 5), "float32")), d).steps == ()
    # output dtype or shape that is not MLX's
    assert sm.plan_node(node("Softmax", R((4, 5), "float32"), R((4, 5), "float16")), d) is None
    assert sm.plan_node(node("LogSumExp", R((4, 5), "float32"), R((5,), "float32")), d) is None


def test_strided_rows_and_elements():
    d = props()
    base = R((6, 8, 10), "float32")
    # transposed: rows along a strided axis, read element by element
    x = Layout.strided((10, 8, 6), (1, 10, 80), "float32")
    (l,) = sm.plan_node(node("Softmax", x), d).steps
    f = struct.unpack_from("<qq8q8iii", l.tail)
    rows, es, strides, shape, ndim, n = f[0], f[1], f[2:10], f[10:18], f[18], f[19]
    assert (rows, es, n) == (80, 80, 6)
    assert ndim == 2 and shape[:2] == (8, 10) and strides[:2] == (10, 1)
    # a sliced view with a row pitch larger than n collapses nothing
    y = Layout.strided((6, 4), (10, 1), "float32")
    (l,) = sm.plan_node(node("Softmax", y), d).steps
    f = struct.unpack_from("<qq8q8iii", l.tail)
    assert f[0] == 6 and f[1] == 1 and f[2] == 10 and f[10] == 6 and f[18] == 1 and f[19] == 4
    assert base.row_contiguous


# ---------------------------------------------------------------- softmax_args.h, byte for byte
_PROBE = r"""
#include <cstddef>
#include <cstdio>
#include "mlxa/softmax_args.h"
#define F(f) std::printf(#f " %zu\n", offsetof(SoftmaxArgs, f));
int main() {
  std::printf("sizeof %zu\n", sizeof(SoftmaxArgs));
  F(in) F(out) F(rows) F(elem_stride) F(row_strides) F(row_shape) F(ndim) F(n)
  std::printf("MAX_DIMS %d\n", MLXA_SOFTMAX_MAX_DIMS);
}
"""


def test_args_match_c(tmp_path):
    out = probe_output(_PROBE, tmp_path)
    c = {k: int(v) for k, v in (line.split() for line in out.splitlines())}
    assert c["sizeof"] == sm.ARG_SIZE
    assert c["MAX_DIMS"] == sm.MAX_DIMS
    for f, off in sm.ARG_FIELDS.items():
        assert c[f] == off, f
    blob = struct.pack("<QQ", 1, 2) + sm.pack_args(7, 3, (2, 5), (50, 10), 9)
    assert len(blob) == c["sizeof"]
    assert struct.unpack_from("<q", blob, c["rows"])[0] == 7
    assert struct.unpack_from("<q", blob, c["elem_stride"])[0] == 3
    assert struct.unpack_from("<2q", blob, c["row_strides"]) == (10, 50)   # innermost first
    assert struct.unpack_from("<2i", blob, c["row_shape"]) == (5, 2)
    assert struct.unpack_from("<i", blob, c["ndim"])[0] == 2
    assert struct.unpack_from("<i", blob, c["n"])[0] == 9


# ---------------------------------------------------------------- the exp the kernels use
def _mlx_exp(d):
    """softmax.hip's mlx_exp in numpy float32 (fma through float64: exact here)."""
    f32 = np.float32
    x = d.astype(f32)
    y = (x.astype(np.float64) * np.float64(f32(1.442695))).astype(f32)
    ip = np.floor(y + f32(0.5)).astype(f32)
    fr = (y - ip).astype(f32)
    p = np.full_like(fr, f32(1.535336188319500e-4))
    for c in (1.339887440266574e-3, 9.618437357674640e-3, 5.550332471162809e-2,
              2.402264791363012e-1, 6.931472028550421e-1, 1.0):
        p = (p.astype(np.float64) * fr + np.float64(f32(c))).astype(f32)
    e = np.clip(ip.astype(np.int64) + 127, 0, 255).astype(np.uint32) << np.uint32(23)
    r = (e.view(f32) * p).astype(f32)
    r = np.where(x > 88, np.inf, np.where(x < -88, 0, r))
    return np.where(np.isnan(x), x, r).astype(f32)


def test_float64_softmax_follows_mlx_float_exp():
    """MLX's float64 softmax uses its float exp: the kernels' formula reproduces it to
    the rounding of the sum, where the true exp is off by ~1e-7 (why float64 uses it)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 300)) * 8
    got = np.array(mx.softmax(mx.array(x, dtype=mx.float64), axis=-1))
    m = x.max(-1, keepdims=True)
    e = _mlx_exp(x - m).astype(np.float64)
    ours = e * (1.0 / e.sum(-1, keepdims=True))
    np.testing.assert_allclose(ours, got, rtol=1e-13, atol=0)
    lse = np.array(mx.logsumexp(mx.array(x, dtype=mx.float64), axis=-1))
    np.testing.assert_allclose(np.log(e.sum(-1)) + m[:, 0], lse, rtol=1e-14)


def test_special_rows_as_mlx():
    """The rules the kernels implement, checked on MLX's CPU."""
    inf, nan = np.inf, np.nan
    x = mx.array([[1.0, 2.0, 3.0], [-inf, -inf, -inf], [1.0, inf, 2.0], [1.0, nan, 2.0], [-inf, 0.0, 1.0]])
    s = np.array(mx.softmax(x, axis=-1))
    assert np.isnan(s[1]).all() and np.isnan(s[2]).all() and np.isnan(s[3]).all()
    assert s[4][0] == 0 and np.isfinite(s[4]).all()
    l = np.array(mx.logsumexp(x, axis=-1))
    assert l[1] == -inf and l[2] == inf and np.isnan(l[3]) and np.isfinite(l[4])
