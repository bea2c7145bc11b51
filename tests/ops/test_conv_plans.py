"""Convolution plans without a GPU: the ConvArgs struct against conv_args.h, the kernel
table, and every plan executed by a NumPy model (im2col decoded from the argument tail,
the matmul family's own steps run by test_matmul_plans' machine, copies as the planner
asked for them) against a direct definition of the primitive and MLX's CPU result, over
1-D/2-D/3-D, strides, asymmetric padding, kernel and input dilation, groups, flip and
strided inputs and weights."""

import dataclasses
import math
import struct

import mlx.core as mx
import numpy as np
import pytest

from mlx_amd.runtime import kernel_table as kt
from mlx_amd.runtime.launch import Launch
from mlx_amd.runtime.ops import conv
from mlx_amd.runtime.plan import HostCall, Layout, Memset, Node
from cprobe import probe_output
from test_matmul_plans import Machine as _MatmulMachine

DIMS = conv.DIMS


class Dev:
    wave_size = 32
    compute_units = 132
    arch = "sm_90"


_PROBE = r"""
#include <cstddef>
#include <cstdio>
#include "mlxa/conv_args.h"
#define F(f) std::printf(#f " %zu\n", offsetof(ConvArgs, f));
#define W(f) std::printf(#f " %zu\n", offsetof(ConvArgs, win.f));
int main() {
  std::printf("sizeof %zu\n", sizeof(ConvArgs));
  std::printf("dims %d\n", MLXA_CONV_DIMS);
  F(in) F(patches) F(p0) F(positions) F(n_work) F(in_strides) W(in_spatial) W(out_spatial) W(kernel)
  W(stride) W(pad_lo) W(kdil) W(idil) F(groups) F(cg) F(ktot) F(vec) F(flip)
}
"""
FIELDS = [("p0", "q"), ("positions", "q"), ("n_work", "q"), ("in_strides", f"{2 + DIMS}q"),
          ("in_spatial", f"{DIMS}i"), ("out_spatial", f"{DIMS}i"), ("kernel", f"{DIMS}i"), ("stride", f"{DIMS}i"),
          ("pad_lo", f"{DIMS}i"), ("kdil", f"{DIMS}i"), ("idil", f"{DIMS}i"), ("groups", "i"), ("cg", "i"),
          ("ktot", "i"), ("vec", "i"), ("flip", "i")]


_MMA_PROBE = r"""
#include <cstddef>
#include <cstdio>
#include "mlxa/conv_args.h"
#define F(f) std::printf(#f " %zu\n", offsetof(ConvMmaArgs, f));
#define W(f) std::printf(#f " %zu\n", offsetof(ConvMmaArgs, win.f));
int main() {
  std::printf("sizeof %zu\n", sizeof(ConvMmaArgs));
  F(in) F(w) F(out) F(positions) F(in_strides) W(in_spatial) W(out_spatial) W(kernel) W(stride) W(pad_lo)
  W(kdil) W(idil) F(cg) F(cog) F(c_out) F(kd) F(flip) F(dilated) F(out_vec)
}
"""
MMA_FIELDS = [("positions", "q"), ("in_strides", f"{1 + DIMS}q"), ("in_spatial", f"{DIMS}i"),
              ("out_spatial", f"{DIMS}i"), ("kernel", f"{DIMS}i"), ("stride", f"{DIMS}i"), ("pad_lo", f"{DIMS}i"),
              ("kdil", f"{DIMS}i"), ("idil", f"{DIMS}i"), ("cg", "i"), ("cog", "i"), ("c_out", "i"), ("kd", "i"),
              ("flip", "i"), ("dilated", "i"), ("out_vec", "i")]


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    out = probe_output(_PROBE, tmp_path_factory.mktemp("convargs"))
    return {line.split()[0]: int(line.split()[1]) for line in out.splitlines()}


def test_mma_struct_matches_c(tmp_path):
    c = {line.split()[0]: int(line.split()[1]) for line in probe_output(_MMA_PROBE, tmp_path).splitlines()}
    nptr, size = conv.ARG_STRUCTS["ConvMmaArgs"]
    assert c["sizeof"] == size and (c["w"], c["out"]) == (8, 16)
    off = 8 * nptr
    for f, fmt in MMA_FIELDS:
        assert c[f] == off, f
        off += struct.calcsize("<" + fmt)
    assert off == size


def test_struct_matches_c(c_layout):
    c = c_layout
    nptr, size = conv.ARG_STRUCTS["ConvArgs"]
    assert c["dims"] == DIMS and c["sizeof"] == size and c["patches"] == 8
    off = 8 * nptr
    for f, fmt in FIELDS:
        assert c[f] == off, f
        off += struct.calcsize("<" + fmt)
    assert off == size


def test_kernel_table_is_lean():
    names = kt.kernel_names("conv")
    assert names == ["conv_im2col_uint16_uint16", "conv_im2col_uint32_uint32", "conv_im2col_uint64_uint64",
                     "conv_mma_float16_m128", "conv_mma_float16_m64", "conv_mma_bfloat16_m128", "conv_mma_bfloat16_m64"]


def decode(tail, fields=FIELDS, lead=16):
    blob = b"\0" * lead + tail
    a, off = {}, lead
    for f, fmt in fields:
        v = struct.unpack_from("<" + fmt, blob, off)
        off += struct.calcsize("<" + fmt)
        a[f] = v if len(v) > 1 else v[0]
    return a


def tap_source(a, position, k, base):
    """(input offset, inside) of tap k of output position ``position`` (both row-major over
    the window fields of an argument struct ``a``); ``base`` adds the channel offset."""
    pos, kr, o, kk = position, k, [0] * DIMS, [0] * DIMS
    for d in reversed(range(DIMS)):
        pos, o[d] = divmod(pos, a["out_spatial"][d])
        kr, kk[d] = divmod(kr, a["kernel"][d])
    off, inside = pos * a["in_strides"][0] + base, True
    for d in range(DIMS):
        tap = a["kernel"][d] - 1 - kk[d] if a["flip"] else kk[d]
        q = o[d] * a["stride"][d] + tap * a["kdil"][d] - a["pad_lo"][d]
        inside = inside and q >= 0 and q % a["idil"][d] == 0 and q // a["idil"][d] < a["in_spatial"][d]
        off += (q // a["idil"][d]) * a["in_strides"][1 + d]
    return off, inside


class Machine(_MatmulMachine):
    """Flat float64 buffers; adds our im2col and the copies the conv planner asked for."""

    copies: dict = {}

    def run(self, plan, node):
        for st in plan.steps:
            if isinstance(st, Launch) and st.kernel.startswith("conv_mma"):
                self.conv_mma(st)
            elif isinstance(st, Launch) and st.family == "conv":
                self.im2col(st)
            elif isinstance(st, Launch) and st.family == "copytest":
                src, dst = Machine.copies[st.kernel]
                sb, so = self.ptr(st.refs[0])
                db, do = self.ptr(st.refs[1])
                idx = so + sum(np.arange(d).reshape([-1 if j == i else 1 for j in range(len(src.shape))]) * s
                               for i, (d, s) in enumerate(zip(src.shape, src.strides)))
                assert dst.row_contiguous
                db[do:do + src.size] = sb[idx].ravel()
            else:
                super().run(dataclasses.replace(plan, steps=(st,)), node)

    def im2col(self, st):
        a = decode(st.tail)
        (ib, io), (pb, po) = self.ptr(st.refs[0]), self.ptr(st.refs[1])
        vec, cg, ktot, P = a["vec"], a["cg"], a["ktot"], a["positions"]
        assert st.grid[0] * st.block[0] > 0 and a["n_work"] == P * a["groups"] * (cg // vec)
        cs = a["in_strides"][-1]
        for w in range(a["n_work"] * ktot):
            t, c = divmod(w, cg // vec)
            c *= vec
            t, k = divmod(t, ktot)
            g, p = divmod(t, P)
            off, inside = tap_source(a, a["p0"] + p, k, (g * cg + c) * cs)
            for j in range(vec):
                pb[po + w * vec + j] = ib[io + off + j * cs] if inside else 0.0


    def conv_mma(self, st):
        """The contract of conv_args.h's ConvMmaArgs, position by position."""
        a = decode(st.tail, MMA_FIELDS, 24)
        (ib, io), (wb, wo), (ob, oo) = (self.ptr(r) for r in st.refs)
        P, cg, cog, kd, c_out = a["positions"], a["cg"], a["cog"], a["kd"], a["c_out"]
        bm = int(st.kernel.rsplit("_m", 1)[1])
        G = st.grid[2]
        assert st.grid == (-(-P // bm), -(-cog // conv.kt.table("conv").MMA_BN), G) and G * cog == c_out
        assert st.block == (conv.kt.table("conv").MMA_WAVES * 32, 1, 1)
        assert a["dilated"] == any(d > 1 for d in a["idil"]) and cg % 8 == 0
        assert all(s % 8 == 0 for s in a["in_strides"])
        ktot = kd // cg
        for p in range(P):
            for g in range(G):
                patch = np.zeros(kd)
                for k in range(ktot):
                    off, inside = tap_source(a, p, k, g * cg)
                    if inside:
                        patch[k * cg:(k + 1) * cg] = ib[io + off:io + off + cg]
                rows = (g * cog + np.arange(cog))[:, None] * kd + np.arange(kd)
                ob[oo + p * c_out + g * cog:oo + p * c_out + (g + 1) * cog] = wb[wo + rows] @ patch


@pytest.fixture
def traced_copies(monkeypatch):
    """conv's copies become marker launches the machine executes from their layouts."""
    Machine.copies = {}

    def fake(src, dst, src_ref, dst_ref, device):
        key = f"copy{len(Machine.copies)}"
        Machine.copies[key] = (src, dst)
        return Launch("copytest", key, (1, 1, 1), (1, 1, 1), 0, 2, b"", (src_ref, dst_ref))

    monkeypatch.setattr(conv, "_copy_launch", fake)


def operand(rng, shape, kind):
    """(flat buffer, element-0 offset, Layout, value): row | transposed (reversed memory
    order) | sliced (every other element of the last dim)."""
    shape = tuple(shape)
    if kind == "row":
        v = rng.integers(-3, 4, size=shape).astype(np.float64)
        buf, strides = v.ravel(), v.strides
    elif kind == "transposed":
        store = rng.integers(-3, 4, size=shape[::-1]).astype(np.float64)
        v = store.transpose()
        buf, strides = store.ravel(), v.strides
    else:
        big = rng.integers(-3, 4, size=shape[:-1] + (2 * shape[-1],)).astype(np.float64)
        v = big[..., ::2]
        buf, strides = big.ravel(), v.strides
    buf = np.concatenate([np.full(5, np.nan), buf])
    lay = Layout.strided(shape, tuple(s // 8 for s in strides), "float32")
    return buf, 5, lay, np.array(v)


def run(x_op, w_op, params, dtype="float32", monkeypatch=None):
    strides, lo, hi, kdil, idil, groups, flip = params
    ref = conv.reference(x_op[3], w_op[3], strides, lo, hi, kdil, idil, groups, flip)
    xl, wl = (dataclasses.replace(op[2], dtype=dtype) for op in (x_op, w_op))
    o = Layout.row_major(ref.shape, dtype)
    node = Node("Convolution", params, (xl, wl), (o,))
    plan = conv.plan_node(node, Dev())
    assert plan is not None, (xl, wl, params)
    m = Machine([(x_op[0], x_op[1]), (w_op[0], w_op[1])], o.size, plan.temps, dtype)
    m.run(plan, node)
    np.testing.assert_allclose(m.out.reshape(ref.shape), ref, rtol=1e-12, atol=1e-9)
    return plan, ref


def mlx_conv(x, w, params):
    strides, lo, hi, kdil, idil, groups, flip = params
    return mx.conv_general(mx.array(x.astype(np.float32)), mx.array(w.astype(np.float32)), stride=strides,
                           padding=(list(lo), list(hi)), kernel_dilation=kdil, input_dilation=idil,
                           groups=groups, flip=flip)


CASES = [
    # (x shape, w shape, strides, lo, hi, kdil, idil, groups, flip)
    ((2, 9, 4), (5, 3, 4), (1,), (0,), (0,), (1,), (1,), 1, False),
    ((2, 9, 4), (6, 3, 2), (2,), (1,), (2,), (2,), (1,), 2, True),
    ((1, 7, 6, 3), (4, 3, 2, 3), (1, 2), (1, 0), (0, 2), (1, 1), (1, 1), 1, False),
    ((2, 6, 5, 4), (8, 3, 3, 1), (2, 1), (2, 1), (1, 1), (2, 1), (1, 1), 4, False),   # depthwise x2
    ((1, 4, 5, 6), (3, 3, 3, 6), (1, 1), (2, 1), (2, 1), (1, 1), (2, 3), 1, True),    # conv_transpose-like
    ((1, 4, 3, 5, 2), (3, 2, 3, 2, 2), (1, 2, 1), (1, 0, 1), (0, 1, 1), (2, 1, 1), (1, 2, 1), 1, False),
    ((3, 5, 5, 8), (16, 1, 1, 8), (1, 1), (0, 0), (0, 0), (1, 1), (1, 1), 1, False),  # pointwise: GEMM only
    ((3, 5, 5, 8), (6, 1, 1, 4), (1, 1), (0, 0), (0, 0), (1, 1), (1, 1), 2, False),   # grouped 1x1
    ((2, 6, 6, 8), (8, 3, 3, 8), (1, 1), (1, 1), (1, 1), (1, 1), (1, 1), 1, False),   # vector im2col
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{len(c[0]) - 2}d_g{c[7]}_{'f' if c[8] else 'c'}")
@pytest.mark.parametrize("kind", ["row", "transposed", "sliced"])
@pytest.mark.parametrize("mode", ["auto", "kernel"])
def test_plans_compute_the_convolution(monkeypatch, traced_copies, case, kind, mode):
    monkeypatch.setenv("MLX_AMD_GEMM", mode)
    xs, ws, *params = case
    rng = np.random.default_rng(len(xs) * 7 + params[5])
    x, w = operand(rng, xs, kind), operand(rng, ws, "row" if kind == "sliced" else kind)
    plan, ref = run(x, w, tuple(params))
    kinds = [type(s).__name__ if not isinstance(s, Launch) else s.family for s in plan.steps]
    pointwise = all(k == 1 for k in ws[1:-1]) and params[0] == (1,) * len(params[0]) and kind == "row" \
        and params[5] == 1
    assert ("conv" in kinds) != pointwise, kinds
    # the primitive's own CPU result agrees with the direct definition
    np.testing.assert_allclose(np.array(mlx_conv(x[3], w[3], tuple(params))), ref, rtol=1e-5, atol=1e-4)


def test_vector_im2col_only_when_proven():
    g = conv.geometry(Node("Convolution", ((1, 1), (1, 1), (1, 1), (1, 1), (1, 1), 1, False),
                           (Layout.row_major((2, 6, 6, 8), "float16"), Layout.row_major((8, 3, 3, 8), "float16")),
                           (Layout.row_major((2, 6, 6, 8), "float16"),)))
    assert conv._vec(Layout.row_major((2, 6, 6, 8), "float16"), g) == 8
    assert conv._vec(Layout.row_major((2, 6, 6, 8), "float32"), g) == 4
    assert conv._vec(Layout.strided((2, 6, 6, 8), (288, 48, 8, 1), "float16"), g) == 8
    assert conv._vec(Layout.strided((2, 6, 6, 8), (1, 2, 12, 72), "float16"), g) == 1


def test_chunks_bound_the_patches(monkeypatch, traced_copies):
    monkeypatch.setattr(conv, "CHUNK_BYTES", 7 * 3 * 18 * 4)     # 7 positions per chunk
    rng = np.random.default_rng(3)
    x, w = operand(rng, (2, 6, 5, 6), "row"), operand(rng, (6, 3, 3, 2), "row")
    params = ((1, 1), (1, 1), (1, 1), (1, 1), (1, 1), 3, False)
    plan, _ = run(x, w, params)
    assert plan.temps[0] == 7 * 3 * 18 * 4
    assert sum(isinstance(s, Launch) and s.family == "conv" for s in plan.steps) == math.ceil(60 / 7)


@pytest.mark.parametrize("dtype", conv.DTYPES)
def test_every_float_dtype_plans_with_the_real_gemm(dtype):
    for xs, ws, *params in CASES:
        node = Node("Convolution", tuple(params), (Layout.row_major(xs, dtype), Layout.row_major(ws, dtype)),
                    (Layout.row_major(conv.reference(np.zeros(xs), np.zeros(ws), *params).shape, dtype),))
        plan = conv.plan_node(node, Dev())
        assert plan is not None
        for st in plan.steps:
            refs = st.refs if not isinstance(st, Memset) else (st.ref,)
            assert all(r.kind in "iot" and (r.kind != "t" or r.index < len(plan.temps)) for r in refs)
            assert all(r.kind != "i" or r.index in (0, 1) for r in refs)
        mma = [s for s in plan.steps if isinstance(s, Launch) and s.kernel.startswith("conv_mma")]
        assert any(isinstance(s, HostCall) for s in plan.steps) or mma
        assert bool(mma) == (dtype in ("float16", "bfloat16") and xs[-1] // params[5] % 8 == 0
                             and ws[0] // params[5] <= conv.MMA_MAX_COG
                             and any(k > 1 for k in ws[1:-1]) | any(s > 1 for s in params[0]) | any(params[1]))
        if dtype != "float32":
            continue
        # the vjp of a conv is convolutions too: input dilation, flip, swapped roles
        f = lambda x, w: mx.sum(mx.conv_general(x, w, stride=params[0], padding=(list(params[1]), list(params[2])),
                                                kernel_dilation=params[3], input_dilation=params[4],
                                                groups=params[5], flip=params[6]) ** 2)
        gx, gw = mx.grad(f, argnums=(0, 1))(mx.ones(xs), mx.ones(ws))
        mx.eval(gx, gw)


def test_declines_and_empty():
    f32 = "float32"
    R = Layout.row_major
    p2 = ((1, 1), (0, 0), (0, 0), (1, 1), (1, 1), 1, False)
    ok = Node("Convolution", p2, (R((1, 4, 4, 2), f32), R((3, 3, 3, 2), f32)), (R((1, 2, 2, 3), f32),))
    assert conv.plan_node(ok, Dev()) is not None
    bad = [
        Node("Convolution", p2, (R((1, 4, 4, 2), "int32"), R((3, 3, 3, 2), "int32")), (R((1, 2, 2, 3), "int32"),)),
        Node("Convolution", p2, (R((1, 4, 4, 2), f32), R((3, 3, 3, 2), f32)), (R((1, 3, 3, 3), f32),)),   # shape
        Node("Convolution", p2[:5] + (2, False), (R((1, 4, 4, 2), f32), R((3, 3, 3, 1), f32)), (R((1, 2, 2, 3), f32),)),
        Node("Convolution", ((1,) * 4,) * 5 + (1, False), (R((1, 2, 2, 2, 2, 2), f32), R((1, 1, 1, 1, 1, 2), f32)),
             (R((1, 2, 2, 2, 2, 1), f32),)),
    ]
    for node in bad:
        assert conv.plan_node(node, Dev()) is None
    empty = Node("Convolution", p2, (R((0, 4, 4, 2), f32), R((3, 3, 3, 2), f32)), (R((0, 2, 2, 3), f32),))
    assert conv.plan_node(empty, Dev()).steps == ()
    zero_c = Node("Convolution", p2, (R((1, 4, 4, 0), f32), R((3, 3, 3, 0), f32)), (R((1, 2, 2, 3), f32),))
    (st,) = conv.plan_node(zero_c, Dev()).steps
    assert isinstance(st, Memset) and st.nbytes == 12 * 4


def test_real_node_params():
    from mlx_amd import _bridge
    y = mx.conv_transpose2d(mx.ones((1, 4, 4, 3)), mx.ones((5, 3, 3, 3)), stride=2, padding=1)
    (node,) = [n for n in _bridge.Graph([y]).nodes if n[0] == "Convolution"]
    assert node[1] == ((1, 1), (1, 1), (1, 1), (1, 1), (2, 2), 1, True)


# ---- the implicit GEMM on the matrix unit --------------------------------------------------------
MMA_CASES = [
    # (x shape, w shape, strides, lo, hi, kdil, idil, groups, flip)
    ((2, 9, 8), (5, 3, 8), (2,), (1,), (2,), (2,), (1,), 1, True),
    ((1, 7, 6, 16), (24, 3, 2, 8), (1, 2), (1, 0), (0, 2), (1, 1), (1, 1), 2, False),
    ((2, 6, 5, 8), (16, 3, 3, 8), (2, 1), (2, 1), (1, 1), (2, 1), (1, 1), 1, False),
    ((1, 4, 5, 24), (3, 3, 3, 24), (1, 1), (2, 1), (2, 1), (1, 1), (2, 3), 1, True),    # conv_transpose-like
    ((1, 4, 3, 5, 8), (3, 2, 3, 2, 8), (1, 2, 1), (1, 0, 1), (0, 1, 1), (2, 1, 1), (1, 2, 1), 1, False),
    ((2, 5, 5, 8), (8, 1, 1, 8), (2, 2), (0, 0), (0, 0), (1, 1), (1, 1), 1, False),     # strided 1x1
]


def spatial_slice(rng, shape):
    """An input sliced along its first spatial axis (every other row): strides stay 8-multiples."""
    big = rng.integers(-3, 4, size=(shape[0], 2 * shape[1]) + shape[2:]).astype(np.float64)
    v = big[:, ::2]
    buf = np.concatenate([np.full(8, np.nan), big.ravel()])
    return buf, 8, Layout.strided(shape, tuple(s // 8 for s in v.strides), "float32"), np.array(v)


@pytest.mark.parametrize("case", MMA_CASES, ids=lambda c: f"{len(c[0]) - 2}d_g{c[7]}_{'f' if c[8] else 'c'}")
@pytest.mark.parametrize("kind", ["row", "spatial", "weight_t"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_mma_plans_compute_the_convolution(monkeypatch, traced_copies, case, kind, dtype):
    xs, ws, *params = case
    rng = np.random.default_rng(len(xs) * 5 + params[5])
    x = spatial_slice(rng, xs) if kind == "spatial" else operand(rng, xs, "row")
    w = operand(rng, ws, "transposed" if kind == "weight_t" else "row")
    plan, ref = run(x, w, tuple(params), dtype)
    kinds = [s.kernel if isinstance(s, Launch) else type(s).__name__ for s in plan.steps]
    assert kinds[-1].startswith(f"conv_mma_{dtype}_m"), kinds
    assert kinds[:-1] == (["copy0"] if kind == "weight_t" else []), kinds


def test_mma_declines_what_it_cannot_read(monkeypatch):
    R = Layout.row_major
    p = ((1, 1), (1, 1), (1, 1), (1, 1), (1, 1), 1, False)

    def kernels(xl, wl):
        o = R((xl.shape[0], xl.shape[1], xl.shape[2], wl.shape[0]), xl.dtype)
        plan = conv.plan_node(Node("Convolution", p, (xl, wl), (o,)), Dev())
        return [s.kernel for s in plan.steps if isinstance(s, Launch)]

    w8 = R((16, 3, 3, 8), "bfloat16")
    assert kernels(R((2, 6, 6, 8), "bfloat16"), w8)[-1] == "conv_mma_bfloat16_m64"
    # channels not in 8-runs, a channel stride, a batch stride off the 8-grid, float32
    assert kernels(R((2, 6, 6, 4), "bfloat16"), R((16, 3, 3, 4), "bfloat16"))[0].startswith("conv_im2col")
    assert kernels(Layout.strided((2, 6, 6, 8), (1, 96, 16, 2), "bfloat16"), w8)[0].startswith("conv_im2col")
    assert kernels(Layout.strided((2, 6, 6, 8), (292, 48, 8, 1), "bfloat16"), w8)[0].startswith("conv_im2col")
    assert kernels(R((2, 6, 6, 8), "float32"), R((16, 3, 3, 8), "float32"))[0].startswith("conv_im2col")
    # wider GEMMs: im2col + the vendor GEMM, unless the bound moves
    wide = R((conv.MMA_MAX_COG + 8, 3, 3, 8), "bfloat16")
    assert kernels(R((2, 6, 6, 8), "bfloat16"), wide)[0].startswith("conv_im2col")
    monkeypatch.setattr(conv, "MMA_MAX_COG", conv.MMA_MAX_COG + 8)
    assert kernels(R((2, 6, 6, 8), "bfloat16"), wide)[0].startswith("conv_mma")
    monkeypatch.setenv(conv.ENV, "im2col")
    assert kernels(R((2, 6, 6, 8), "bfloat16"), w8)[0].startswith("conv_im2col")
    monkeypatch.setenv(conv.ENV, "mma")
    with pytest.raises(ValueError, match="MLX_AMD_CONV"):
        kernels(R((2, 6, 6, 8), "bfloat16"), w8)
    monkeypatch.delenv(conv.ENV)
    monkeypatch.setenv("MLX_AMD_MATRIX_UNITS", "0")
    assert kernels(R((2, 6, 6, 8), "bfloat16"), w8)[0].startswith("conv_im2col")


def test_mma_position_tile_follows_the_units():
    """BM = 128 once its blocks fill MMA_M128_BLOCKS_PER_CU per unit; 64 below (more blocks)."""
    R = Layout.row_major
    p = ((1, 1), (1, 1), (1, 1), (1, 1), (1, 1), 1, False)
    for (n, h, c), bm in (((32, 56, 64), 128), ((32, 7, 64), 64), ((1, 8, 64), 64)):
        xl, wl = R((n, h, h, c), "float16"), R((c, 3, 3, c), "float16")
        plan = conv.plan_node(Node("Convolution", p, (xl, wl), (R((n, h, h, c), "float16"),)), Dev())
        (st,) = plan.steps
        assert st.kernel == f"conv_mma_float16_m{bm}"
        tiles = -(-n * h * h // 128) * -(-c // 64)
        assert (tiles >= conv.MMA_M128_BLOCKS_PER_CU * Dev.compute_units) == (bm == 128)
