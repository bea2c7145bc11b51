"""Layout plans without a GPU: the argument structs against
hip_kernels/include/mlxa/layout_args.h, and every plan run through a NumPy model of the
kernels it launches (tails decoded field by field, memory addressed in bytes from each
buffer's element 0 as the kernels do) and compared with NumPy/MLX: Select, Concatenate,
Pad over element sizes and strided/broadcast/negative-stride/offset layouts, Arange's
exactness rule against MLX's CPU arange, NumberOfElements."""

import math
import os
import struct

import mlx.core as mx
import numpy as np
import pytest

from mlx_amd.runtime import kernel_table as kt
from mlx_amd.runtime.driver.base import DeviceProperties
from mlx_amd.runtime.launch import Launch
from mlx_amd.runtime.ops import layout as lo
from mlx_amd.runtime.plan import ITEMSIZE, Layout, Node, Plan
from cprobe import probe_output

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MD = lo.MAX_DIMS


def props(wave=32, cus=100):
    return DeviceProperties(0, "test", "gfx1100", "gfx1100", {}, wave, cus, 1 << 34, False,
                            0, 0, 0, 0, 1024, 65536, True, "0")


DEV = props()
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

# ------------------------------------------------------------------ the C structs
_PROBE = r"""
#include <cstddef>
#include <cstdio>
#include "mlxa/layout_args.h"
#define F(S, f) std::printf(#S " " #f " %zu\n", offsetof(S, f));
#define Z(S) std::printf(#S " sizeof %zu\n", sizeof(S));
int main() {
  Z(LayoutSelectArgs) F(LayoutSelectArgs, cond) F(LayoutSelectArgs, n) F(LayoutSelectArgs, cond_strides)
  F(LayoutSelectArgs, a_strides) F(LayoutSelectArgs, b_strides) F(LayoutSelectArgs, shape) F(LayoutSelectArgs, ndim)
  Z(LayoutCopyArgs) F(LayoutCopyArgs, in) F(LayoutCopyArgs, n) F(LayoutCopyArgs, in_strides)
  F(LayoutCopyArgs, out_strides) F(LayoutCopyArgs, shape) F(LayoutCopyArgs, ndim)
  Z(LayoutFillArgs) F(LayoutFillArgs, value) F(LayoutFillArgs, n)
  Z(LayoutArangeArgs) F(LayoutArangeArgs, out) F(LayoutArangeArgs, n) F(LayoutArangeArgs, istart)
  F(LayoutArangeArgs, istep) F(LayoutArangeArgs, fstart) F(LayoutArangeArgs, fstep)
  std::printf("MAX dims %d\n", MLXA_MAX_DIMS);
}
"""

SEL_FIELDS = [("n", "q"), ("cond_strides", f"{MD}q"), ("a_strides", f"{MD}q"), ("b_strides", f"{MD}q"),
              ("shape", f"{MD}i"), ("ndim", "i")]
CP_FIELDS = [("n", "q"), ("in_strides", f"{MD}q"), ("out_strides", f"{MD}q"), ("shape", f"{MD}i"), ("ndim", "i")]
FILL_FIELDS = [("n", "q")]
AR_FIELDS = [("n", "q"), ("istart", "q"), ("istep", "q"), ("fstart", "d"), ("fstep", "d")]
STRUCTS = {"LayoutSelectArgs": (4, SEL_FIELDS, 4), "LayoutCopyArgs": (2, CP_FIELDS, 4),
           "LayoutFillArgs": (2, FILL_FIELDS, 0), "LayoutArangeArgs": (1, AR_FIELDS, 0)}


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    d = tmp_path_factory.mktemp("layoutargs")
    out = probe_output(_PROBE, d)
    return {tuple(line.split()[:2]): int(line.split()[2]) for line in out.splitlines()}


def test_struct_sizes_match_c(c_layout):
    c = c_layout
    assert c[("MAX", "dims")] == MD
    for name, (nptr, size) in lo.ARG_STRUCTS.items():
        n2, fields, pad = STRUCTS[name]
        assert n2 == nptr
        assert c[(name, "sizeof")] == size, name
        off = 8 * nptr
        for f, fmt in fields:
            assert c[(name, f)] == off, (name, f)
            off += struct.calcsize("<" + fmt)
        assert off + pad == size, name


def test_table_is_lean_and_named():
    names = kt.kernel_names("layout")
    assert 20 <= len(names) <= 40 and len(set(names)) == len(names)
    assert all(n.startswith("layout_") for n in names)
    for sz in ("uint8", "uint16", "uint32", "uint64"):
        for op in ("select", "copy"):
            assert kt.has_kernel("layout", f"layout_g_{op}_{sz}_{sz}")
            assert kt.has_kernel("layout", f"layout_g_{op}_{sz}_{sz}_i64")


# ------------------------------------------------------------------ NumPy model of the kernels
def decode(name, tail):
    _, fields, _ = STRUCTS[name]
    out, off = {}, 0
    for f, fmt in fields:
        v = struct.unpack_from("<" + fmt, tail, off)
        off += struct.calcsize("<" + fmt)
        out[f] = v if len(v) > 1 else v[0]
    return out


def _offsets(n, shape, ndim, *strides):
    """Element offsets per operand for flat indices 0..n-1 (shape innermost first)."""
    shape = list(shape[:ndim])
    idx = np.arange(n, dtype=np.int64)
    offs = [np.zeros(n, np.int64) for _ in strides]
    for d in range(ndim):
        c = idx % shape[d]
        idx //= shape[d]
        for o, st in zip(offs, strides):
            o += c * st[d]
    return offs


class Mem:
    """Byte buffers; a pointer is (buffer key, byte offset of element 0)."""

    def __init__(self):
        self.bufs = {}

    def view(self, ptr, itemsize):
        key, off = ptr
        assert off % itemsize == 0
        return self.bufs[key].view(UINT[itemsize]), off // itemsize


def _elem(name):
    sz = name.split("_")[-1] if not name.endswith("_i64") else name.split("_")[-2]
    return {"uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "float16": 2, "bfloat16": 2,
            "float32": 4, "float64": 8}[sz]


def run_launch(mem, st: Launch, ptrs):
    k = st.kernel
    if st.empty:
        return
    if k.startswith("layout_g_select"):
        a = decode("LayoutSelectArgs", st.tail)
        isz = _elem(k)
        oc, oa, ob = _offsets(a["n"], a["shape"], a["ndim"], a["cond_strides"], a["a_strides"], a["b_strides"])
        cb, c0 = mem.view(ptrs[0], 1)
        ab, a0 = mem.view(ptrs[1], isz)
        bb, b0 = mem.view(ptrs[2], isz)
        ob_, o0 = mem.view(ptrs[3], isz)
        ob_[o0:o0 + a["n"]] = np.where(cb[c0 + oc] != 0, ab[a0 + oa], bb[b0 + ob])
    elif k.startswith("layout_g_copy") or k.startswith("copy_g_"):
        isz = _elem(k)
        if k.startswith("copy_g_"):
            n, = struct.unpack_from("<q", st.tail, 0)
            ist = struct.unpack_from(f"<{MD}q", st.tail, 8)
            shape = struct.unpack_from(f"<{MD}i", st.tail, 8 + 8 * MD)
            ndim, = struct.unpack_from("<i", st.tail, 8 + 12 * MD)
            ost = None
        else:
            a = decode("LayoutCopyArgs", st.tail)
            n, ist, ost, shape, ndim = a["n"], a["in_strides"], a["out_strides"], a["shape"], a["ndim"]
        if ost is None:
            (oi,) = _offsets(n, shape, ndim, ist)
            oo = np.arange(n)
        else:
            oi, oo = _offsets(n, shape, ndim, ist, ost)
        ib, i0 = mem.view(ptrs[0], isz)
        ob, o0 = mem.view(ptrs[1], isz)
        assert len(np.unique(oo)) == n   # the output view never overlaps itself
        ob[o0 + oo] = ib[i0 + oi]
    elif k.startswith("copy_v_"):
        isz = _elem(k)
        assert k.split("_")[2] == k.split("_")[3], k   # same-dtype copies only here
        n, = struct.unpack_from("<q", st.tail, 0)
        ib, i0 = mem.view(ptrs[0], isz)
        ob, o0 = mem.view(ptrs[1], isz)
        ob[o0:o0 + n] = ib[i0:i0 + n]
    elif k.startswith("copy_t_"):
        isz = _elem(k)
        R, C, B, rs, cs, bs = struct.unpack_from("<6q", st.tail, 0)
        ib, i0 = mem.view(ptrs[0], isz)
        ob, o0 = mem.view(ptrs[1], isz)
        b, r, c = np.meshgrid(np.arange(B), np.arange(R), np.arange(C), indexing="ij")
        ob[o0 + (b * R * C + r * C + c).ravel()] = ib[i0 + (b * bs + r * rs + c * cs).ravel()]
    elif k.startswith("layout_v_fill"):
        isz = _elem(k)
        n = decode("LayoutFillArgs", st.tail)["n"]
        vb, v0 = mem.view(ptrs[0], isz)
        ob, o0 = mem.view(ptrs[1], isz)
        ob[o0:o0 + n] = vb[v0]
    elif k.startswith("layout_v_arange"):
        a = decode("LayoutArangeArgs", st.tail)
        dt = k.split("_")[3]
        n = a["n"]
        i = np.arange(n, dtype=np.uint64)
        if dt.startswith("uint"):
            isz = ITEMSIZE[dt]
            v = (np.uint64(a["istart"] % 2**64) + i * np.uint64(a["istep"] % 2**64)).astype(UINT[isz])
            ob, o0 = mem.view(ptrs[0], isz)
            ob[o0:o0 + n] = v
        else:
            vals = a["fstart"] + np.arange(n, dtype=np.float64) * a["fstep"]
            mem.floats = (dt, vals)   # the values in double; exact by the planner's rule
    else:
        raise AssertionError(f"unmodelled kernel {k}")


def run_plan(mem, plan: Plan, n_ins):
    for t, nb in enumerate(plan.temps):
        mem.bufs[("t", t)] = np.zeros(nb, np.uint8)
    for st in plan.steps:
        assert isinstance(st, Launch)
        ptrs = tuple(((r.kind, r.index), r.offset) for r in st.refs)
        for (key, _), r in zip(ptrs, st.refs):
            assert key in mem.bufs, r
            if r.kind == "i":
                assert r.index < n_ins
        ptrs = tuple((key, off + mem.base.get(key, 0)) for key, off in ptrs)
        run_launch(mem, st, ptrs)


def strided_input(arr: np.ndarray, strides, seed=0):
    """(Layout, raw bytes, element-0 byte offset) of ``arr`` stored with element
    ``strides`` (any sign, zeros broadcast) in a buffer of random filler."""
    isz = arr.dtype.itemsize
    shape = arr.shape
    lo_ = sum((d - 1) * s for d, s in zip(shape, strides) if s < 0 and d > 0)
    hi_ = sum((d - 1) * s for d, s in zip(shape, strides) if s > 0 and d > 0)
    base = -lo_ + 3   # a nonzero array offset too
    n_el = base + hi_ + 5
    rng = np.random.default_rng(seed)
    buf = rng.integers(0, 255, size=n_el * isz, dtype=np.uint8)
    flat = buf.view(arr.dtype)
    if arr.size:
        idx = np.zeros(shape, np.int64) + base
        for d, s in enumerate(strides):
            sh = [1] * len(shape)
            sh[d] = shape[d]
            idx = idx + (np.arange(shape[d]) * s).reshape(sh)
        flat[idx.ravel()] = arr.ravel()
    dt = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}[isz] if arr.dtype != np.bool_ else "bool"
    return Layout.strided(shape, strides, dt), buf, base * isz


def setup(inputs, out_shape, out_isz):
    mem = Mem()
    mem.base = {}
    lays = []
    for i, (arr, strides) in enumerate(inputs):
        lay, buf, off = strided_input(arr, strides, seed=i)
        mem.bufs[("i", i)] = buf
        mem.base[("i", i)] = off
        lays.append(lay)
    n = math.prod(out_shape)
    mem.bufs[("o", 0)] = np.full(max(n, 1) * out_isz, 0xAB, np.uint8)
    return mem, lays


def output(mem, shape, dtype):
    n = math.prod(shape)
    return mem.bufs[("o", 0)].view(dtype)[:n].reshape(shape)


def _lay_as(lay, dtype):
    return Layout(lay.shape, lay.strides, dtype, lay.data_size, lay.row_contiguous, lay.contiguous)


def rows(shape):
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


# layouts of a logical array: (name, strides builder from shape)
def layouts_of(shape):
    r = rows(shape)
    yield "contiguous", r
    if len(shape) >= 2:
        t = list(r)
        perm = list(range(len(shape)))[::-1]
        tr = rows([shape[p] for p in perm])
        t = [0] * len(shape)
        for k, p in enumerate(perm):
            t[p] = tr[k]
        yield "transposed", tuple(t)
    yield "sliced", tuple(s * 2 for s in r)
    yield "negative", tuple(-s for s in r)
    if shape and shape[0] > 1:
        yield "broadcast", (0,) + r[1:]


DT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
MX_NAME = {1: "uint8", 2: "float16", 4: "float32", 8: "complex64"}


# ------------------------------------------------------------------ Select
@pytest.mark.parametrize("isz", [1, 2, 4, 8])
@pytest.mark.parametrize("shape", [(5, 7), (2, 3, 4), (1,), (0, 3), ()])
def test_select_model(isz, shape):
    rng = np.random.default_rng(isz)
    c = rng.integers(0, 2, size=shape).astype(np.bool_)
    a = rng.integers(0, 2**(8 * isz) - 1, size=shape, dtype=np.uint64).astype(DT[isz])
    b = rng.integers(0, 2**(8 * isz) - 1, size=shape, dtype=np.uint64).astype(DT[isz])
    for (cn, cs), (an, as_), (bn, bs) in zip(layouts_of(shape), list(layouts_of(shape))[::-1],
                                            list(layouts_of(shape))[1:] + list(layouts_of(shape))[:1]):
        ca = np.broadcast_to(c[:1] if cn == "broadcast" else c, shape) if shape else c
        aa = np.broadcast_to(a[:1] if an == "broadcast" else a, shape) if shape else a
        ba = np.broadcast_to(b[:1] if bn == "broadcast" else b, shape) if shape else b
        mem, (cl, al, bl) = setup([(ca, cs), (aa, as_), (ba, bs)], shape, isz)
        dt = MX_NAME[isz]
        node = Node("Select", (), (_lay_as(cl, "bool"), _lay_as(al, dt), _lay_as(bl, dt)),
                    (Layout.row_major(shape, dt),))
        plan = lo.plan_node(node, DEV)
        assert plan is not None
        run_plan(mem, plan, 3)
        np.testing.assert_array_equal(output(mem, shape, DT[isz]), np.where(ca, aa, ba), err_msg=f"{cn} {an} {bn}")


def test_select_declines_mismatch():
    R = Layout.row_major
    assert lo.plan_node(Node("Select", (), (R((3,), "int32"), R((3,), "int32"), R((3,), "int32")),
                             (R((3,), "int32"),)), DEV) is None
    assert lo.plan_node(Node("Select", (), (R((3,), "bool"), R((3,), "int32"), R((3,), "float32")),
                             (R((3,), "int32"),)), DEV) is None
    big = Layout.row_major((2**32 + 6,), "bool")   # split into two factors to fit int32 extents
    p = lo.plan_node(Node("Select", (), (big, Layout.strided(big.shape, (0,), "int8"),
                                         Layout.row_major(big.shape, "int8")),
                          (Layout.row_major(big.shape, "int8"),)), DEV)
    assert p.steps[0].kernel == "layout_g_select_uint8_uint8_i64"
    shape = struct.unpack_from(f"<{MD}i", p.steps[0].tail, 8 + 3 * 8 * MD)
    assert shape[0] * shape[1] == 2**32 + 6 and shape[2] == 1   # innermost first, both int32
    prime = Layout.row_major((2**31 + 11,), "bool")   # prime: cannot be split -> fallback
    assert lo.plan_node(Node("Select", (), (prime,) + (Layout.row_major(prime.shape, "int8"),) * 2,
                             (Layout.row_major(prime.shape, "int8"),)), DEV) is None


# ------------------------------------------------------------------ Concatenate
@pytest.mark.parametrize("isz", [1, 2, 4, 8])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_concatenate_model(isz, axis):
    rng = np.random.default_rng(axis + 10)
    base = (3, 4, 5)
    parts, inputs = [], []
    for k, (w, (ln, _)) in enumerate(zip((2, 0, 3, 1, 4), list(layouts_of(base)) * 2)):
        shape = list(base)
        shape[axis] = w
        shape = tuple(shape)
        arr = rng.integers(0, 2**(8 * isz) - 1, size=shape, dtype=np.uint64).astype(DT[isz])
        strides = dict(layouts_of(shape)).get(ln, rows(shape))
        if ln == "broadcast":
            arr = np.broadcast_to(arr[:1], shape)
        parts.append(arr)
        inputs.append((arr, strides))
    ref = np.concatenate(parts, axis=axis)
    mem, lays = setup(inputs, ref.shape, isz)
    dt = MX_NAME[isz]
    node = Node("Concatenate", (axis,), tuple(_lay_as(l, dt) for l in lays), (Layout.row_major(ref.shape, dt),))
    plan = lo.plan_node(node, DEV)
    assert plan is not None
    run_plan(mem, plan, len(lays))
    np.testing.assert_array_equal(output(mem, ref.shape, DT[isz]), ref)
    kinds = {s.kernel.split("_")[0] for s in plan.steps}
    assert kinds == ({"copy"} if axis == 0 else {"layout"}), kinds


def test_concatenate_leading_ones_use_copy_family():
    a = np.arange(12, dtype=np.uint32).reshape(1, 3, 4)
    b = np.arange(8, dtype=np.uint32).reshape(1, 2, 4) + 100
    b = np.broadcast_to(b[:, :1], b.shape)   # broadcast along the concatenated axis
    mem, lays = setup([(a, rows(a.shape)), (b, (8, 0, 1))], (1, 5, 4), 4)
    node = Node("Concatenate", (1,), tuple(_lay_as(l, "int32") for l in lays), (Layout.row_major((1, 5, 4), "int32"),))
    plan = lo.plan_node(node, DEV)
    assert all(s.kernel.startswith("copy_") for s in plan.steps)
    run_plan(mem, plan, 2)
    np.testing.assert_array_equal(output(mem, (1, 5, 4), np.uint32), np.concatenate([a, b], axis=1))


def test_concatenate_declines_bad():
    R = Layout.row_major
    assert lo.plan_node(Node("Concatenate", (1,), (R((2, 3), "int32"), R((2, 3), "float32")),
                             (R((2, 6), "int32"),)), DEV) is None
    assert lo.plan_node(Node("Concatenate", (1,), (R((2, 3), "int32"), R((3, 3), "int32")),
                             (R((2, 6), "int32"),)), DEV) is None
    assert lo.plan_node(Node("Concatenate", (5,), (R((2, 3), "int32"),), (R((2, 3), "int32"),)), DEV) is None


# ------------------------------------------------------------------ Pad
@pytest.mark.parametrize("isz", [1, 2, 4, 8])
@pytest.mark.parametrize("case", [((0, 1), (1, 2), (2, 0)), ((1,), (0,), (3,)), ((0, 1), (0, 0), (0, 0)),
                                  ((0,), (2,), (2,))])
def test_pad_model(isz, case):
    axes, low, high = case
    shape = (3, 4)
    rng = np.random.default_rng(isz)
    x = rng.integers(0, 2**(8 * isz) - 1, size=shape, dtype=np.uint64).astype(DT[isz])
    v = np.array(rng.integers(0, 2**(8 * isz) - 1, dtype=np.uint64)).astype(DT[isz])
    widths = [[0, 0], [0, 0]]
    for a, l, h in zip(axes, low, high):
        widths[a] = [l, h]
    ref = np.pad(x, widths, constant_values=v)
    for ln, strides in layouts_of(shape):
        xa = np.broadcast_to(x[:1], shape) if ln == "broadcast" else x
        r = np.pad(xa, widths, constant_values=v)
        mem, lays = setup([(xa, strides), (v, ())], r.shape, isz)
        dt = MX_NAME[isz]
        node = Node("Pad", (axes, low, high), tuple(_lay_as(l, dt) for l in lays), (Layout.row_major(r.shape, dt),))
        plan = lo.plan_node(node, DEV)
        assert plan is not None
        run_plan(mem, plan, 2)
        np.testing.assert_array_equal(output(mem, r.shape, DT[isz]), r, err_msg=ln)
    assert ref.shape == r.shape


def test_pad_declines_negative():
    R = Layout.row_major
    assert lo.plan_node(Node("Pad", ((0,), (-1,), (0,)), (R((3,), "int32"), R((), "int32")),
                             (R((2,), "int32"),)), DEV) is None


# ------------------------------------------------------------------ Arange
ARANGE_CASES = [
    (0, 10, 1), (5, -5, -1), (0, 5, 0.5), (-3.25, 4, 0.75), (0, 1, 0.1), (0.1, 2, 1), (0, 3000, 1),
    (2040, 2060, 1), (0, 300, 1), (250, 260, 1), (1e6, 1e6 + 50, 3), (0, 70000, 7), (2**24 - 10, 2**24 + 10, 1),
    (-100, 100, 2.5), (0, 2**-20 * 9, 2**-20), (0.0, 10.0, 3.0), (7, 1000, 97), (1, 2, 0.001),
]
ARANGE_DTYPES = ["uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
                 "float16", "bfloat16", "float32", "float64"]


def _mx_arange(start, stop, step, dtype):
    return mx.arange(start, stop, step, dtype=getattr(mx, dtype))


@pytest.mark.parametrize("dtype", ARANGE_DTYPES)
def test_arange_matches_mlx_cpu(dtype):
    planned = 0
    for start, stop, step in ARANGE_CASES:
        try:
            ref = _mx_arange(start, stop, step, dtype)
            mx.eval(ref)
        except Exception:
            continue
        n = ref.size
        node = Node("Arange", (float(start), float(stop), float(step)), (), (Layout.row_major((n,), dtype),))
        plan = lo.plan_node(node, DEV)
        if plan is None:
            continue
        planned += 1
        if n == 0:
            assert plan.steps == ()
            continue
        mem = Mem()
        mem.base = {}
        mem.bufs[("o", 0)] = np.zeros(n * ITEMSIZE[dtype], np.uint8)
        run_plan(mem, plan, 0)
        if dtype in lo.INTS:
            got = mem.bufs[("o", 0)].view(getattr(np, dtype))
            np.testing.assert_array_equal(got, np.array(ref), err_msg=f"{start} {stop} {step}")
        else:
            _, vals = mem.floats
            want = np.array(ref.astype(mx.float64) if dtype != "float64" else ref)
            # exact in T: the double values convert without rounding
            np.testing.assert_array_equal(vals, want, err_msg=f"{start} {stop} {step}")
            if dtype == "float32":
                assert np.all(vals.astype(np.float32).astype(np.float64) == vals)
    assert planned >= 5, dtype


def test_arange_declines_inexact_floats():
    def p(start, step, n, dt):
        return lo.arange_values(float(start), float(step), n, dt)
    assert p(0, 0.1, 10, "float32") is None           # 0.1 not dyadic
    assert p(0, 1, 2**24 + 2, "float32") is None      # past 2^24
    assert p(0, 1, 2**24, "float32") is not None
    assert p(0, 1, 2**11 + 1, "float16") is None
    assert p(0, 1, 2**8 + 1, "bfloat16") is None
    assert p(0, 1, 256, "bfloat16") is not None
    assert p(0, 2, 256, "bfloat16") is not None        # even values to 510: 8 bits each
    assert p(1, 2, 256, "bfloat16") is None            # odd values past 2^8
    assert p(0, 1, 70000, "float16") is None           # past the float16 range too
    assert p(1e308, 0, 2, "float64") is None          # scaling overflows: declined, no error
    assert p(float("nan"), 1, 2, "float32") is None
    assert p(300, 1, 2, "int8") is None                # start undefined in int8
    assert p(-1, 1, 2, "uint8") is None
    assert lo.plan_node(Node("Arange", (0.0, 3.0, 1.0), (), (Layout.row_major((3,), "bool"),)), DEV) is None
    assert lo.plan_node(Node("Arange", (0.0, 3.0, 1.0), (), (Layout.row_major((3,), "complex64"),)), DEV) is None


# ------------------------------------------------------------------ NumberOfElements
def test_number_of_elements():
    R = Layout.row_major
    x = R((3, 5, 7), "float32")
    p = lo.plan_node(Node("NumberOfElements", ((0, 2), False, "int32"), (x,), (R((), "int32"),)), DEV)
    a = decode("LayoutArangeArgs", p.steps[0].tail)
    assert p.steps[0].kernel == "layout_v_arange_uint32_uint32" and a["istart"] == 21 and a["n"] == 1
    p = lo.plan_node(Node("NumberOfElements", ((1,), True, "float32"), (x,), (R((), "float32"),)), DEV)
    a = decode("LayoutArangeArgs", p.steps[0].tail)
    assert p.steps[0].kernel == "layout_v_arange_float32_float32" and a["fstart"] == 1.0 / 5
    assert lo.plan_node(Node("NumberOfElements", ((3,), False, "int32"), (x,), (R((), "int32"),)), DEV) is None


def test_every_planned_kernel_exists():
    R = Layout.row_major
    nodes = [
        Node("Select", (), (R((4,), "bool"), R((4,), "complex64"), R((4,), "complex64")), (R((4,), "complex64"),)),
        Node("Concatenate", (1,), (R((2, 3), "float64"), R((2, 1), "float64")), (R((2, 4), "float64"),)),
        Node("Concatenate", (0,), (R((2, 3), "bfloat16"), Layout.strided((1, 3), (0, 1), "bfloat16")),
             (R((3, 3), "bfloat16"),)),
        Node("Pad", ((0,), (1,), (1,)), (R((3,), "bool"), R((), "bool")), (R((5,), "bool"),)),
    ] + [Node("Arange", (0.0, 4.0, 1.0), (), (R((4,), dt),)) for dt in ARANGE_DTYPES]
    for node in nodes:
        plan = lo.plan_node(node, DEV)
        assert plan is not None, node.prim
        for s in plan.steps:
            assert kt.has_kernel(s.family, s.kernel), s.kernel
