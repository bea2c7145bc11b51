"""Indexing plans without a GPU: the argument structs byte for byte against
hip_kernels/include/mlxa/indexing_args.h, and every plan run through a NumPy model of its
kernel (the tail decoded field by field, memory addressed by element offsets from the
inputs' element 0, exactly as the kernels do) and compared with MLX's CPU result over
dtypes, index dtypes, strided/broadcast layouts, negative indices, 0-d and empty arrays."""

import math
import os
import struct

import mlx.core as mx
import numpy as np
import pytest

from mlx_amd.runtime import kernel_table as kt
from mlx_amd.runtime.driver.base import DeviceProperties
from mlx_amd.runtime.launch import Launch
from mlx_amd.runtime.ops import indexing as ix
from mlx_amd.runtime.plan import ITEMSIZE, Layout, Node, Plan, inp, out as out_ref, row_strides
from cprobe import probe_output

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def props(wave=32, cus=100):
    return DeviceProperties(0, "test", "gfx1100", "gfx1100", {}, wave, cus, 1 << 34, False,
                            0, 0, 0, 0, 1024, 65536, True, "0")


DEV = props()
R = Layout.row_major
MD, MA, MY = ix.MAX_DIMS, ix.MAX_ARRAYS, ix.MAX_DYN


# ------------------------------------------------------------------ the C structs
_PROBE = r"""
#include <cstddef>
#include <cstdio>
#include "mlxa/indexing_args.h"
#define F(S, f) std::printf(#S " " #f " %zu\n", offsetof(S, f));
#define Z(S) std::printf(#S " sizeof %zu\n", sizeof(S));
int main() {
  Z(GatherScatterArgs) F(GatherScatterArgs, data) F(GatherScatterArgs, idx) F(GatherScatterArgs, out)
  F(GatherScatterArgs, n) F(GatherScatterArgs, slice_n) F(GatherScatterArgs, idx_strides)
  F(GatherScatterArgs, pos_strides) F(GatherScatterArgs, axis_strides) F(GatherScatterArgs, axis_size)
  F(GatherScatterArgs, axis_hi) F(GatherScatterArgs, slice_strides) F(GatherScatterArgs, slice_data_strides)
  F(GatherScatterArgs, idx_shape) F(GatherScatterArgs, slice_shape) F(GatherScatterArgs, idx_ndim)
  F(GatherScatterArgs, slice_ndim) F(GatherScatterArgs, n_idx) F(GatherScatterArgs, idx_kind)
  F(GatherScatterArgs, vec)
  Z(AxisArgs) F(AxisArgs, data) F(AxisArgs, idx) F(AxisArgs, out) F(AxisArgs, n) F(AxisArgs, axis_stride)
  F(AxisArgs, axis_size) F(AxisArgs, strides) F(AxisArgs, shape) F(AxisArgs, ndim) F(AxisArgs, idx_kind)
  Z(SliceArgs) F(SliceArgs, data) F(SliceArgs, start) F(SliceArgs, out) F(SliceArgs, n) F(SliceArgs, strides)
  F(SliceArgs, start_stride) F(SliceArgs, dyn_strides) F(SliceArgs, dyn_hi) F(SliceArgs, shape)
  F(SliceArgs, ndim) F(SliceArgs, n_dyn) F(SliceArgs, dyn_side) F(SliceArgs, start_kind) F(SliceArgs, vec)
  struct SliceTwin { const void* p[3]; SliceArgs a; SliceShape b; };   // the twin kernel's parameters
  Z(SliceShape) Z(SliceTwin) F(SliceTwin, a) F(SliceTwin, b) F(SliceShape, n) F(SliceShape, vec)
  std::printf("MAX arrays %d\n", MLXA_IDX_MAX_ARRAYS);
  std::printf("MAX dyn %d\n", MLXA_DYN_MAX_AXES);
  std::printf("MAX dims %d\n", MLXA_MAX_DIMS);
}
"""


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    d = tmp_path_factory.mktemp("idxargs")
    out = probe_output(_PROBE, d)
    return {tuple(line.split()[:2]): int(line.split()[2]) for line in out.splitlines()}


# Field order and formats of the packers, as (name, struct fmt) after the pointers.
GS_FIELDS = [("n", "q"), ("slice_n", "q"), ("idx_strides", f"{MA * MD}q"), ("pos_strides", f"{MD}q"),
             ("axis_strides", f"{MA}q"), ("axis_size", f"{MA}q"), ("axis_hi", f"{MA}q"),
             ("slice_strides", f"{MD}q"), ("slice_data_strides", f"{MD}q"), ("idx_shape", f"{MD}i"),
             ("slice_shape", f"{MD}i"), ("idx_ndim", "i"), ("slice_ndim", "i"), ("n_idx", "i"),
             ("idx_kind", "i"), ("vec", "i")]
AX_FIELDS = [("n", "q"), ("axis_stride", "q"), ("axis_size", "q"), ("strides", f"{3 * MD}q"),
             ("shape", f"{MD}i"), ("ndim", "i"), ("idx_kind", "i")]
SL_FIELDS = [("n", "q"), ("strides", f"{2 * MD}q"), ("start_stride", "q"), ("dyn_strides", f"{MY}q"),
             ("dyn_hi", f"{MY}q"), ("shape", f"{MD}i"), ("ndim", "i"), ("n_dyn", "i"),
             ("dyn_side", "i"), ("start_kind", "i"), ("vec", "i")]
STRUCTS = {"GatherScatterArgs": (2 + MA, GS_FIELDS), "AxisArgs": (3, AX_FIELDS), "SliceArgs": (3, SL_FIELDS)}


def decode(struct_name, blob, c):
    nptr, fields = STRUCTS[struct_name]
    ptr_fields = {"GatherScatterArgs": ("data", "idx", "out"), "AxisArgs": ("data", "idx", "out"),
                  "SliceArgs": ("data", "start", "out")}[struct_name]
    out = {}
    for f, fmt in fields:
        v = struct.unpack_from("<" + fmt, blob, c[(struct_name, f)])
        out[f] = v if len(v) > 1 else v[0]
    ptrs = struct.unpack_from(f"<{nptr}Q", blob, 0)
    assert c[(struct_name, ptr_fields[0])] == 0
    return out, ptrs


def test_struct_sizes_match_c(c_layout):
    c = c_layout
    assert c[("MAX", "arrays")] == MA and c[("MAX", "dyn")] == MY and c[("MAX", "dims")] == MD
    for name, (nptr, size) in ix.ARG_STRUCTS.items():
        if name not in STRUCTS:   # MaskedArgs: test_masked_args_match_c
            continue
        assert c[(name, "sizeof")] == size, name
        fields = STRUCTS[name][1]
        # the packer's fields follow the pointers back to back, as the header lays them out
        off = 8 * nptr
        for f, fmt in fields:
            assert c[(name, f)] == off, (name, f)
            off += struct.calcsize("<" + fmt)
        assert off + (4 if name != "AxisArgs" else 0) == size, name   # pad_


def test_slice_twin_layout_and_plan(c_layout):
    """The twin kernel's parameters: the second write's three pointers, the first's
    SliceArgs, the second's shape (the fields after SliceArgs' pointers); its plan donates
    or copies each cache as one write alone would, and moves nothing else."""
    c = c_layout
    size = c[("SliceArgs", "sizeof")]
    assert c[("SliceShape", "sizeof")] == size - 24 and c[("SliceShape", "n")] == 0
    assert c[("SliceShape", "vec")] == c[("SliceArgs", "vec")] - 24
    assert (c[("SliceTwin", "a")], c[("SliceTwin", "b")], c[("SliceTwin", "sizeof")]) == (24, 24 + size, 2 * size)
    cache, step = R((1, 8, 64, 128), "bfloat16"), Layout.strided((1, 8, 1, 128), (8 * 128, 128, 1024, 1), "bfloat16")
    params = (4, (0, 0, 5, 0), (1, 8, 6, 128), (1, 1, 1, 1))
    su = Node("SliceUpdate", params, (cache, step), (cache,))
    alone = ix.plan_node(su, DEV)
    p = ix.plan_siblings([su, su], DEV)
    (st,) = p.steps
    assert st.kernel == "indexing_slice_twin_none_uint16_uint16" and st.grid[1] == 2 and st.n_ptrs == 6
    assert st.tail == alone.steps[0].tail * 2
    first = alone.steps[0].refs
    assert st.refs[3:] == first and st.refs[:3] == tuple(r._replace(index=r.index + (2 if r.kind == "i" else 1))
                                                         for r in first)
    assert p.donate == ((0, 0), (1, 2)) and p.written == alone.written * 2
    assert [j for j, _ in p.init] == [0, 1] and p.init[1][1][0].refs == (inp(2), out_ref(1))
    # other cache shapes, a reduction, or another primitive: no twin
    other = Node("SliceUpdate", params, (R((1, 8, 32, 128), "bfloat16"), step), (R((1, 8, 32, 128), "bfloat16"),))
    assert ix.plan_siblings([su, other], DEV) is None
    add = Node("SliceUpdate", (2,) + params[1:], (cache, step), (cache,))
    assert ix.plan_siblings([add, add], DEV) is None
    assert ix.plan_siblings([su], DEV) is None


def test_table_is_lean_and_named():
    names = kt.kernel_names("indexing")
    assert 100 < len(names) < 250
    assert len(set(names)) == len(names)
    assert "indexing_gather_uint16_uint16" in names and "indexing_gather_uint16_uint16_i64" in names
    assert "indexing_scatter_sum_bfloat16_bfloat16" in names
    assert "indexing_scatter_prod_complex64_complex64" not in names
    assert "indexing_slice_none_uint64_uint64_i64" in names
    assert kt.families().count("indexing") == 1


# ------------------------------------------------------------------ test data
IDX_DTYPES = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64")
DATA_DTYPES = ("bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
               "float16", "bfloat16", "float32", "float64", "complex64")
NP = {"bool": np.bool_, "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
      "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64, "float16": np.float16,
      "bfloat16": np.float32, "float32": np.float32, "float64": np.float64, "complex64": np.complex64}


def values(dtype, n, rng, lo=-20, hi=20):
    if dtype == "bool":
        return rng.random(n) < 0.5
    if dtype.startswith("uint"):
        return rng.integers(0, hi, n).astype(NP[dtype])
    if dtype == "complex64":
        return (rng.integers(lo, hi, n) + 1j * rng.integers(lo, hi, n)).astype(np.complex64)
    return rng.integers(lo, hi, n).astype(NP[dtype])


class Arr:
    """An input as the kernels see it: a flat buffer and a Layout addressing it from its
    element 0 (offset), plus the same array as an MLX value for the reference."""

    def __init__(self, flat, shape, strides, offset, dtype):
        self.flat, self.offset, self.dtype = flat, offset, dtype
        self.layout = Layout.strided(shape, strides, dtype)
        view = np.lib.stride_tricks.as_strided(flat[offset:], shape=shape,
                                               strides=[s * flat.itemsize for s in strides])
        self.np = np.array(view)
        self.mx = mx.array(self.np).astype(getattr(mx, "bool_" if dtype == "bool" else dtype))

    def read(self, off):
        return self.flat[self.offset + off]


def make(dtype, shape, rng, kind="row", fill=None):
    """kind: row | transposed | broadcast (first dim) | sliced (offset, step 2 on the last)."""
    shape = tuple(shape)
    n = max(1, math.prod(shape))
    if kind == "row" or len(shape) == 0:
        flat = fill(n) if fill else values(dtype, n, rng)
        return Arr(flat, shape, row_strides(shape), 0, dtype)
    if kind == "transposed":
        rev = tuple(reversed(shape))
        flat = fill(n) if fill else values(dtype, n, rng)
        st = tuple(reversed(row_strides(rev)))
        return Arr(flat, shape, st, 0, dtype)
    if kind == "broadcast":
        inner = shape[1:]
        m = max(1, math.prod(inner))
        flat = fill(m) if fill else values(dtype, m, rng)
        return Arr(flat, shape, (0,) + row_strides(inner), 0, dtype)
    if kind == "sliced":
        big = shape[:-1] + (2 * shape[-1] + 1,)
        m = max(1, math.prod(big)) + 3
        flat = fill(m) if fill else values(dtype, m, rng)
        st = row_strides(big)
        return Arr(flat, shape, st[:-1] + (2 * st[-1],), 3, dtype)
    raise ValueError(kind)


def mlx_dtype_of(arr):
    return arr.mx.dtype


def to_np(a: mx.array):
    if a.dtype == mx.bfloat16:
        a = a.astype(mx.float32)
    return np.array(a)


# ------------------------------------------------------------------ kernel models
def _coords(i, shape):
    """Coordinates of flat index i over an innermost-first shape."""
    out = []
    for d in shape:
        out.append(i % d)
        i //= d
    return out


def _off(coords, strides):
    return sum(c * s for c, s in zip(coords, strides))


def _wrap_clamp(v, size, hi, clamp):
    v = v + size if v < 0 else v
    if clamp:
        return min(max(v, 0), hi), True
    return v, 0 <= v <= hi


def _reduce(op, dtype):
    def f(y, x):
        if op is None:
            return x
        if dtype == "bool":
            return {"sum": y or x, "prod": y and x, "max": y or x, "min": y and x}[op]
        t = NP[dtype]
        if dtype == "bfloat16":   # one rounding to bfloat16 per update, like the kernels
            r = {"sum": y + x, "prod": y * x, "max": y if y > x else x, "min": y if y < x else x}[op]
            return np.float32(to_np(mx.array(np.float32(r)).astype(mx.bfloat16)))
        with np.errstate(over="ignore"):
            if op == "sum":
                return (np.array(y, t) + np.array(x, t)).astype(t)[()]
            if op == "prod":
                return (np.array(y, t) * np.array(x, t)).astype(t)[()]
        if op == "max":
            return y if y > x else x
        return y if y < x else x
    return f


def run_plan(plan: Plan, ins, out_shape, out_dtype, c, op=None, donated=False):
    """Execute a plan's steps on NumPy buffers with the kernels' addressing."""
    n_out = max(1, math.prod(out_shape))
    out = np.zeros(n_out, dtype=NP[out_dtype])
    steps = list(plan.steps)
    if not donated:
        for j, init in plan.init:
            steps = list(init) + steps
    else:
        assert plan.donate == ((0, 0),)
        out[:] = ins[0].np.reshape(-1)[:n_out] if ins[0].np.size else out
    for st in steps:
        assert isinstance(st, Launch)
        if st.empty:
            continue
        if st.family == "copy":           # init copy: input 0 into the output, row-major
            assert st.refs == (ix.inp(0), ix.out_ref(0))
            out[:] = ins[0].np.reshape(-1)
            continue
        assert st.family == "indexing"
        args = st.args(tuple(range(100, 100 + st.n_ptrs)))
        kind = st.kernel.split("_")[1]
        if kind == "gather":
            layout = "gather_axis" if st.kernel.startswith("indexing_gather_axis") else "gather"
        elif kind == "scatter":
            layout = "scatter_axis" if st.kernel.startswith("indexing_scatter_axis") else "scatter"
        else:
            layout = "slice"
        red = None
        for r in ("sum", "prod", "max", "min"):
            if f"_{r}_" in st.kernel:
                red = r
        f = _reduce(red, out_dtype)

        def buf(ref):
            assert ref.kind in "io"
            return ins[ref.index] if ref.kind == "i" else None

        if layout in ("gather", "scatter"):
            a, _ = decode("GatherScatterArgs", args, c)
            data = buf(st.refs[0])
            idx = [buf(r) for r in st.refs[1:1 + a["n_idx"]]]
            ish, ssh = a["idx_shape"][:a["idx_ndim"]], a["slice_shape"][:a["slice_ndim"]]
            for e in range(a["n"]):
                i, s = divmod(e, a["slice_n"])
                ic, sc = _coords(i, ish), _coords(s, ssh)
                off, ok = 0, True
                for k, arr in enumerate(idx):
                    v = int(arr.read(_off(ic, a["idx_strides"][k * MD:(k + 1) * MD])))
                    v, good = _wrap_clamp(v, a["axis_size"][k], a["axis_hi"][k], layout == "gather")
                    ok = ok and good
                    off += v * a["axis_strides"][k]
                if layout == "gather":
                    out[e] = data.read(off + _off(sc, a["slice_strides"]))
                elif ok:
                    o = off + _off(sc, a["slice_strides"])
                    assert 0 <= o < n_out
                    out[o] = f(out[o], data.read(_off(ic, a["pos_strides"]) + _off(sc, a["slice_data_strides"])))
        elif layout in ("gather_axis", "scatter_axis"):
            a, _ = decode("AxisArgs", args, c)
            data, idx = buf(st.refs[0]), buf(st.refs[1])
            sh = a["shape"][:a["ndim"]]
            S = [a["strides"][k * MD:(k + 1) * MD] for k in range(3)]
            for e in range(a["n"]):
                cc = _coords(e, sh)
                v = int(idx.read(_off(cc, S[1])))
                v = v + a["axis_size"] if v < 0 else v
                if layout == "gather_axis":
                    v = min(max(v, 0), a["axis_size"] - 1)
                    out[e] = data.read(_off(cc, S[0]) + v * a["axis_stride"])
                elif 0 <= v < a["axis_size"]:
                    o = _off(cc, S[2]) + v * a["axis_stride"]
                    out[o] = f(out[o], data.read(_off(cc, S[0])))
        else:
            a, _ = decode("SliceArgs", args, c)
            data, start = buf(st.refs[0]), buf(st.refs[1])
            dyn = 0
            for k in range(a["n_dyn"]):
                v = int(start.read(k * a["start_stride"]))
                dyn += min(max(v, 0), a["dyn_hi"][k]) * a["dyn_strides"][k]
            dbase = dyn if a["dyn_side"] == 0 else 0
            obase = (dyn if a["dyn_side"] == 1 else 0) + st.refs[2].offset // ITEMSIZE[out_dtype]
            sh = a["shape"][:a["ndim"]]
            for e in range(a["n"]):
                cc = _coords(e, sh)
                o = obase + _off(cc, a["strides"][MD:])
                assert 0 <= o < n_out
                out[o] = f(out[o], data.read(dbase + _off(cc, a["strides"][:MD])))
    return out.reshape(out_shape) if math.prod(out_shape) else out[:0].reshape(out_shape)


def node_of(fn, *arrs, prim):
    """The node MLX builds for fn(*inputs): parameters from the bridge's node table,
    layouts from our Arr inputs (in MLX's input order, given by the caller)."""
    from mlx_amd import _bridge
    y = fn(*[a.mx for a in arrs])
    nodes = [n for n in _bridge.Graph([y]).nodes if n[0] == prim]
    assert len(nodes) == 1, nodes
    params = nodes[0][1]
    params = params if isinstance(params, tuple) else (() if params is None else (params,))
    return y, params


def check(prim, params, ins, ref: mx.array, donated=False):
    mx.eval(ref)
    out_dtype = str(ref.dtype).split(".")[-1]
    node = Node(prim, params, tuple(a.layout for a in ins), (R(ref.shape, out_dtype),))
    plan = ix.plan_node(node, DEV)
    assert plan is not None, f"{prim} {params} {[ (a.layout.shape, a.layout.dtype) for a in ins]} not planned"
    got = run_plan(plan, ins, ref.shape, out_dtype, C_LAYOUT)
    np.testing.assert_array_equal(got, to_np(ref).astype(got.dtype))
    return plan


C_LAYOUT = None


@pytest.fixture(autouse=True)
def _c(c_layout):
    global C_LAYOUT
    C_LAYOUT = c_layout


# ------------------------------------------------------------------ Gather
@pytest.mark.parametrize("dtype", DATA_DTYPES)
def test_take_rows_every_dtype(dtype):
    rng = np.random.default_rng(1)
    src = make(dtype, (7, 6), rng)
    idx = Arr(np.array([0, 6, -1, 3, -7], np.int32), (5,), (1,), 0, "int32")
    ref = mx.take(src.mx, idx.mx, axis=0)
    _, params = node_of(lambda s, i: mx.take(s, i, axis=0), src, idx, prim="Gather")
    check("Gather", params, (src, idx), mx.expand_dims(ref, 1))


@pytest.mark.parametrize("idt", IDX_DTYPES)
@pytest.mark.parametrize("kind", ["row", "transposed", "sliced", "broadcast"])
def test_take_index_dtypes_and_layouts(idt, kind):
    rng = np.random.default_rng(2)
    src = make("float32", (5, 4, 3), rng, kind)
    lo = -3 if idt.startswith("int") else 0
    idx = make(idt, (2, 3), rng, "row", fill=lambda m: rng.integers(lo, 3, m).astype(NP[idt]))
    for axis in (0, 1, 2):
        fn = lambda s, i, axis=axis: mx.take(s, i, axis=axis)
        y, params = node_of(fn, src, idx, prim="Gather")
        sl = list(src.layout.shape)
        sl[axis] = 1
        # Gather's own output: index shape + slice sizes
        want = np.moveaxis(np.take(src.np, idx.np.astype(np.int64), axis=axis), [axis, axis + 1], [0, 1])
        check("Gather", params, (src, idx), mx.array(want.reshape(2, 3, *sl)))


def test_fancy_two_arrays_broadcast_indices():
    rng = np.random.default_rng(3)
    src = make("int16", (6, 5, 4), rng, "transposed")
    i0 = Arr(np.array([0, 5, -2], np.int64), (3, 4), (1, 0), 0, "int64")          # broadcast
    i1 = Arr(np.array([4, 0, 1, -1], np.int64), (3, 4), (0, 1), 0, "int64")
    y = src.mx[i0.mx, i1.mx]
    from mlx_amd import _bridge
    g = [n for n in _bridge.Graph([y]).nodes if n[0] == "Gather"][0]
    check("Gather", g[1], (src, i0, i1), mx.reshape(y, (3, 4, 1, 1, 4)))


def test_embedding_lookup_is_vectorised():
    table = Layout.row_major((128256, 2048), "bfloat16")
    ids = Layout.row_major((4,), "int32")
    node = Node("Gather", ((0,), (1, 2048)), (table, ids), (R((4, 1, 2048), "bfloat16"),))
    plan = ix.plan_node(node, DEV)
    (launch,) = plan.steps
    a, _ = decode("GatherScatterArgs", launch.args(tuple(range(8))), C_LAYOUT)
    assert launch.kernel == "indexing_gather_uint16_uint16"
    assert a["vec"] == 8 and a["slice_ndim"] == 1 and a["slice_shape"][0] == 2048
    assert launch.grid[0] == 4 * 2048 // 8 // 256
    # 128256 x 2048 = 2^28 elements: 32-bit offsets still suffice
    node = Node("Gather", ((0,), (1, 2048)), (Layout.row_major((1 << 21, 2048), "bfloat16"), ids),
                (R((4, 1, 2048), "bfloat16"),))
    assert ix.plan_node(node, DEV).steps[0].kernel.endswith("_i64")


def test_gather_declines():
    s, i = R((4, 5), "float32"), R((3,), "int32")
    ok = Node("Gather", ((0,), (1, 5)), (s, i), (R((3, 1, 5), "float32"),))
    assert ix.plan_node(ok, DEV) is not None
    assert ix.plan_node(Node("Gather", ((0,), (1, 5)), (s, R((3,), "float32")), (R((3, 1, 5), "float32"),)), DEV) is None
    mixed = Node("Gather", ((0, 1), (1, 1)), (s, i, R((3,), "int64")), (R((3, 1, 1), "float32"),))
    assert ix.plan_node(mixed, DEV) is None
    empty_axis = Node("Gather", ((0,), (1, 5)), (R((0, 5), "float32"), i), (R((3, 1, 5), "float32"),))
    assert ix.plan_node(empty_axis, DEV) is None
    empty = Node("Gather", ((0,), (1, 5)), (s, R((0,), "int32")), (R((0, 1, 5), "float32"),))
    assert ix.plan_node(empty, DEV).steps == ()


# ------------------------------------------------------------------ GatherAxis
@pytest.mark.parametrize("dtype", ["bool", "int8", "bfloat16", "float64", "complex64"])
@pytest.mark.parametrize("kind", ["row", "transposed", "sliced"])
def test_take_along_axis(dtype, kind):
    rng = np.random.default_rng(4)
    src = make(dtype, (4, 5, 3), rng, kind)
    for axis in (0, 1, 2, -1):
        shp = list(src.layout.shape)
        shp[axis] = 6
        d = src.layout.shape[axis]
        idx = make("int32", shp, rng, "transposed", fill=lambda m: rng.integers(-d, d, m).astype(np.int32))
        fn = lambda s, i, axis=axis: mx.take_along_axis(s, i, axis=axis)
        y, params = node_of(fn, src, idx, prim="GatherAxis")
        check("GatherAxis", params, (src, idx), y)


# ------------------------------------------------------------------ Scatter
SCATTERS = {
    "none": lambda a, i, u: _set(a, i, u),
    "sum": lambda a, i, u: a.at[i].add(u),
    "prod": lambda a, i, u: a.at[i].multiply(u),
    "max": lambda a, i, u: a.at[i].maximum(u),
    "min": lambda a, i, u: a.at[i].minimum(u),
}


def _set(a, i, u):
    b = mx.array(a)
    b[i] = u
    return b


# complex64 prod/max/min go to MLX's CPU (test_scatter_declines)
@pytest.mark.parametrize("dtype,op", [(d, o) for d in DATA_DTYPES for o in SCATTERS
                                      if not (d == "complex64" and o in ("prod", "max", "min"))])
def test_scatter_rows(dtype, op):
    rng = np.random.default_rng(5)
    dst = make(dtype, (6, 4), rng, "transposed")
    # duplicates only where the result does not depend on the order
    ids = [1, -1, 3] if op == "none" else [1, -1, 3, 1, 5, 5]
    idx = Arr(np.array(ids, np.int16), (len(ids),), (1,), 0, "int16")
    upd = make(dtype, (len(ids), 4), rng, "sliced")
    fn = SCATTERS[op]
    y, params = node_of(fn, dst, idx, upd, prim="Scatter")
    # MLX reshapes the updates to index shape + slice shape (len, 1, 4)
    upd3 = Arr(upd.flat, (len(ids), 1, 4), (upd.layout.strides[0], 0, upd.layout.strides[1]), upd.offset, dtype)
    plan = check("Scatter", params, (dst, idx, upd3), y)
    assert plan.donate == ((0, 0),) and plan.init and plan.written is None


def test_scatter_broadcast_scalar_and_out_of_range_skipped():
    rng = np.random.default_rng(6)
    dst = make("float32", (5, 3), rng)
    idx = Arr(np.array([0, 7, -9, 4], np.int32), (4,), (1,), 0, "int32")  # 7, -9: out of range
    upd = Arr(np.array([2.5], np.float32), (4, 1, 3), (0, 0, 0), 0, "float32")
    node = Node("Scatter", (2, (0,)), (dst.layout, idx.layout, upd.layout), (R((5, 3), "float32"),))
    plan = ix.plan_node(node, DEV)
    got = run_plan(plan, (dst, idx, upd), (5, 3), "float32", C_LAYOUT)
    want = dst.np.copy()
    want[0] += 2.5
    want[4] += 2.5
    np.testing.assert_array_equal(got, want)


def test_scatter_vector_path_conditions():
    dst, idx = R((64, 128), "bfloat16"), R((4,), "int32")
    upd = R((4, 1, 128), "bfloat16")
    plan = ix.plan_node(Node("Scatter", (4, (0,)), (dst, idx, upd), (R((64, 128), "bfloat16"),)), DEV)
    a, _ = decode("GatherScatterArgs", plan.steps[0].args(tuple(range(8))), C_LAYOUT)
    assert a["vec"] == 8 and plan.steps[0].kernel == "indexing_scatter_none_uint16_uint16"
    plan = ix.plan_node(Node("Scatter", (2, (0,)), (dst, idx, upd), (R((64, 128), "bfloat16"),)), DEV)
    a, _ = decode("GatherScatterArgs", plan.steps[0].args(tuple(range(8))), C_LAYOUT)
    assert a["vec"] == 1 and plan.steps[0].kernel == "indexing_scatter_sum_bfloat16_bfloat16"


def test_scatter_declines():
    dst, idx = R((4, 5), "complex64"), R((2,), "int32")
    upd = R((2, 1, 5), "complex64")
    assert ix.plan_node(Node("Scatter", (3, (0,)), (dst, idx, upd), (R((4, 5), "complex64"),)), DEV) is None
    assert ix.plan_node(Node("Scatter", (2, (0,)), (dst, idx, upd), (R((4, 5), "complex64"),)), DEV) is not None
    big = R((1 << 16, 1 << 16), "float32")
    u = R((2, 1, 1 << 16), "float32")
    assert ix.plan_node(Node("Scatter", (2, (0,)), (big, idx, u), (R(big.shape, "float32"),)), DEV) is None
    assert ix.plan_node(Node("Scatter", (4, (0,)), (big, idx, u), (R(big.shape, "float32"),)), DEV) is not None


# ------------------------------------------------------------------ ScatterAxis
@pytest.mark.parametrize("dtype", ["uint8", "int64", "float16", "float32", "complex64"])
@pytest.mark.parametrize("op", ["none", "sum"])
def test_put_along_axis(dtype, op):
    rng = np.random.default_rng(7)
    dst = make(dtype, (4, 6), rng, "transposed")
    for axis in (0, 1):
        d = dst.layout.shape[axis]
        shp = [4, 6]
        shp[axis] = 2
        if op == "none":   # unique along the axis
            idx_np = np.stack([rng.permutation(d)[:2] for _ in range(shp[1 - axis])], axis=1 - axis)
            idx_np = (idx_np - (d if rng.random() < 0.5 else 0)).astype(np.int32)
        else:
            idx_np = rng.integers(-d, d, shp).astype(np.int32)
        idx = Arr(idx_np.reshape(-1), tuple(shp), row_strides(shp), 0, "int32")
        upd = make(dtype, shp, rng)
        if op == "none":
            fn = lambda a, i, u, axis=axis: mx.put_along_axis(a, i, u, axis=axis)
            y, params = node_of(fn, dst, idx, upd, prim="ScatterAxis")
        else:
            # ScatterAxis Sum is what the VJP of take_along_axis builds; its reference here
            # is a NumPy accumulation into dst
            _, params = node_of(lambda a, i, u, axis=axis: mx.vjp(
                lambda x: mx.take_along_axis(x, i, axis=axis), [a], [u])[1][0], dst, idx, upd, prim="ScatterAxis")
            want = dst.np.copy()
            for p in np.ndindex(*shp):
                q = list(p)
                q[axis] = int(idx_np[p]) % d
                want[tuple(q)] = _reduce("sum", dtype)(want[tuple(q)], upd.np[p])
            y = mx.array(want).astype(dst.mx.dtype)
        check("ScatterAxis", params, (dst, idx, upd), y)


# ------------------------------------------------------------------ SliceUpdate
@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int32", "bfloat16", "float64", "complex64"])
def test_slice_update_set(dtype):
    rng = np.random.default_rng(8)
    dst = make(dtype, (6, 5, 4), rng, "transposed")
    upd = make(dtype, (2, 3, 4), rng, "sliced")

    def fn(a, u):
        b = mx.array(a)
        b[4:1:-2, ::2, :] = u
        return b
    y, params = node_of(fn, dst, upd, prim="SliceUpdate")
    plan = check("SliceUpdate", params, (dst, upd), y)
    assert plan.donate == ((0, 0),) and plan.written is not None


@pytest.mark.parametrize("op", ["add", "multiply", "maximum", "minimum"])
def test_slice_update_reduce(op):
    rng = np.random.default_rng(9)
    dst = make("int32", (5, 6), rng)
    upd = make("int32", (2, 6), rng, "broadcast")
    fn = lambda a, u: getattr(a.at[1:4:2], op)(u)
    y, params = node_of(fn, dst, upd, prim="SliceUpdate")
    check("SliceUpdate", params, (dst, upd), y)


def test_kv_cache_step_written_hull_and_vectors():
    B, H, T, D = 32, 8, 4096, 128
    cache = R((B, H, T, D), "bfloat16")
    step = R((B, H, 1, D), "bfloat16")
    t = 1000
    node = Node("SliceUpdate", (4, (0, 0, t, 0), (B, H, t + 1, D), (1, 1, 1, 1)), (cache, step),
                (R(cache.shape, "bfloat16"),))
    plan = ix.plan_node(node, DEV)
    (launch,) = plan.steps
    assert launch.refs[2] == ix.out_ref(0, t * D * 2)
    lo, hi = plan.written[0]
    assert lo == t * D * 2
    assert hi == ((B * H - 1) * T * D + t * D + D) * 2
    a, _ = decode("SliceArgs", launch.args((1, 2, 3)), C_LAYOUT)
    assert a["vec"] == 1 and a["ndim"] == 2 and a["shape"][:2] == (D, B * H)
    assert a["strides"][MD:MD + 2] == (1, T * D)
    assert plan.init[0][1][0].family == "copy"


def test_slice_update_declines_mismatch():
    dst, upd = R((6,), "float32"), R((4,), "float32")
    assert ix.plan_node(Node("SliceUpdate", (4, (0,), (3,), (1,)), (dst, upd), (R((6,), "float32"),)), DEV) is None


# ------------------------------------------------------------------ DynamicSlice(Update)
@pytest.mark.parametrize("idt", ["uint8", "int32", "int64"])
@pytest.mark.parametrize("dtype", ["bool", "float16", "float32", "uint64"])
def test_dynamic_slice(idt, dtype):
    rng = np.random.default_rng(10)
    src = make(dtype, (5, 6, 3), rng, "transposed")
    start = Arr(np.array([2, 1], NP[idt]), (2,), (1,), 0, idt)
    fn = lambda s, st: mx.slice(s, st, axes=(0, 1), slice_size=(3, 4, 2))
    y, params = node_of(fn, src, start, prim="DynamicSlice")
    check("DynamicSlice", params, (src, start), y)


@pytest.mark.parametrize("axes", [(0,), (1, 2)])
def test_dynamic_slice_update(axes):
    rng = np.random.default_rng(11)
    src = make("bfloat16", (5, 6, 8), rng, "sliced")
    upd = make("bfloat16", (2, 3, 8) if axes == (0,) else (5, 3, 8), rng, "broadcast")
    start = Arr(np.array([3] if axes == (0,) else [2, 0], np.int32), (len(axes),), (1,), 0, "int32")
    fn = lambda s, u, st: mx.slice_update(s, u, st, axes=axes)
    y, params = node_of(fn, src, upd, start, prim="DynamicSliceUpdate")
    check("DynamicSliceUpdate", params, (src, upd, start), y)


def test_zero_d_and_empty():
    rng = np.random.default_rng(12)
    # take from a 1-d array with a 0-d index
    src = make("float32", (7,), rng)
    idx = Arr(np.array([-2], np.int32), (), (), 0, "int32")
    y, params = node_of(lambda s, i: mx.take(s, i, axis=0), src, idx, prim="Gather")
    check("Gather", params, (src, idx), mx.reshape(y, (1,)))
    # scatter with no updates: only the copy
    dst = make("int32", (4, 3), rng)
    node = Node("Scatter", (2, (0,)), (dst.layout, R((0,), "int32"), R((0, 1, 3), "int32")), (R((4, 3), "int32"),))
    plan = ix.plan_node(node, DEV)
    assert plan.steps == () and plan.written == ((0, 0),)
    got = run_plan(plan, (dst,), (4, 3), "int32", C_LAYOUT)
    np.testing.assert_array_equal(got, dst.np)


# ------------------------------------------------------------------ MaskedScatter
_MS_PROBE = r"""
#include <cstddef>
#include <cstdio>
#include "mlxa/indexing_args.h"
#define F(f) std::printf(#f " %zu\n", offsetof(MaskedArgs, f));
int main() {
  std::printf("sizeof %zu\n", sizeof(MaskedArgs));
  F(mask) F(src) F(out) F(counts) F(batch) F(inner) F(chunks) F(src_inner) F(mask_bstride)
  F(src_bstride) F(mask_strides) F(src_strides) F(mask_shape) F(src_shape) F(mask_ndim) F(src_ndim)
  std::printf("tile %d\n", MLXA_MASKED_TILE);
}
"""
MS_FIELDS = [("batch", "q"), ("inner", "q"), ("chunks", "q"), ("src_inner", "q"), ("mask_bstride", "q"),
             ("src_bstride", "q"), ("mask_strides", f"{MD}q"), ("src_strides", f"{MD}q"),
             ("mask_shape", f"{MD}i"), ("src_shape", f"{MD}i"), ("mask_ndim", "i"), ("src_ndim", "i")]


@pytest.fixture(scope="module")
def ms_layout(tmp_path_factory):
    out = probe_output(_MS_PROBE, tmp_path_factory.mktemp("msargs"))
    return {line.split()[0]: int(line.split()[1]) for line in out.splitlines()}


def test_masked_args_match_c(ms_layout):
    c = ms_layout
    assert c["tile"] == ix.MASKED_TILE
    nptr, size = ix.ARG_STRUCTS["MaskedArgs"]
    assert c["sizeof"] == size and c["counts"] == 8 * (nptr - 1)
    off = 8 * nptr
    for f, fmt in MS_FIELDS:
        assert c[f] == off, f
        off += struct.calcsize("<" + fmt)
    assert off == size


def _ms_decode(blob, c):
    a = {}
    for f, fmt in MS_FIELDS:
        v = struct.unpack_from("<" + fmt, blob, c[f])
        a[f] = v if len(v) > 1 else v[0]
    return a


def run_masked(plan, ins, out_shape, out_dtype, c, donated=False):
    """The three MaskedScatter kernels in NumPy, tile by tile and thread by thread as the
    kernels split the work (rank = tile prefix + thread prefix + running count)."""
    dst, mask, src = ins
    n_out = max(1, math.prod(out_shape))
    out = np.zeros(n_out, dtype=NP[out_dtype])
    steps = list(plan.steps)
    if donated:
        assert plan.donate == ((0, 0),)
        out[:] = dst.np.reshape(-1)
    else:
        for _, init in plan.init:
            steps = list(init) + steps
    temp = np.zeros(plan.temps[0] // 8 if plan.temps else 0, np.int64)
    T, ITEMS = ix.MASKED_TILE, ix.MASKED_TILE // ix.MASKED_THREADS
    for st in steps:
        if isinstance(st, ix.Memset):
            assert st.ref.kind == "t" and st.ref.offset % 8 == 0
            temp[st.ref.offset // 8] = 0
            continue
        if isinstance(st, ix.HostCall):
            assert isinstance(st.fn, ix.MaskedCheck) and st.refs[0].kind == "t"
            if temp[st.refs[0].offset // 8] & 0xFFFFFFFF:
                raise RuntimeError("[MaskedScatter] Source does not have enough elements for mask.")
            continue
        if st.family == "copy":
            assert st.refs == (ix.inp(0), ix.out_ref(0))
            out[:] = dst.np.reshape(-1)
            continue
        assert st.refs == (ix.inp(1), ix.inp(2), ix.out_ref(0), ix.tmp(0)), st.refs
        a = _ms_decode(st.args(tuple(range(100, 104))), c)
        B, inner, chunks = a["batch"], a["inner"], a["chunks"]
        msh, mst = a["mask_shape"][:a["mask_ndim"]], a["mask_strides"]
        ssh, sst = a["src_shape"][:a["src_ndim"]], a["src_strides"]

        def bit(b, e):
            return e < inner and bool(mask.read(b * a["mask_bstride"] + _off(_coords(e, msh), mst)))

        kind = st.kernel.split("_")[2]
        if kind == "count":
            assert st.grid == (chunks, B, 1)
            for b in range(B):
                for ch in range(chunks):
                    temp[b * chunks + ch] = sum(bit(b, e) for e in range(ch * T, (ch + 1) * T))
        elif kind == "scan":
            assert st.grid == (B, 1, 1)
            for b in range(B):
                seg = temp[b * chunks:(b + 1) * chunks].copy()
                temp[b * chunks:(b + 1) * chunks] = np.cumsum(seg) - seg
                if seg.sum() > a["src_inner"]:
                    temp[B * chunks] = 1
        else:
            bits = ix._table().BITS[ITEMSIZE[out_dtype]]
            assert st.grid == (chunks, B, 1) and st.kernel == f"indexing_masked_scatter_{bits}_{bits}"
            for b in range(B):
                for ch in range(chunks):
                    k = temp[b * chunks + ch]
                    for t in range(ix.MASKED_THREADS):
                        for i in range(ITEMS):
                            e = ch * T + t * ITEMS + i
                            if bit(b, e):
                                if k < a["src_inner"]:
                                    out[b * inner + e] = src.read(b * a["src_bstride"] + _off(_coords(int(k), ssh), sst))
                                k += 1
    return out.reshape(out_shape)


def _ms_check(dst, mask, src, ms_layout, donated=False):
    """Build MLX's MaskedScatter node for dst[mask] = src (batch dim leading) and compare."""
    out_dtype = dst.dtype
    node = Node("MaskedScatter", (), (dst.layout, mask.layout, src.layout), (R(dst.layout.shape, out_dtype),))
    plan = ix.plan_node(node, DEV)
    assert plan is not None
    got = run_masked(plan, (dst, mask, src), dst.layout.shape, out_dtype, ms_layout, donated)
    # reference: MLX's own MaskedScatter, batched through vmap exactly as the node is
    def one(d, m, s):
        d = mx.array(d)
        d[m] = mx.reshape(s, (-1,))
        return d

    ref = mx.vmap(one)(dst.mx, mask.mx, src.mx)
    np.testing.assert_array_equal(got, to_np(ref).astype(got.dtype))
    return plan


@pytest.mark.parametrize("dtype", DATA_DTYPES)
def test_masked_scatter_every_dtype(dtype, ms_layout):
    rng = np.random.default_rng(20)
    dst = make(dtype, (2, 5, 7), rng)
    mask = make("bool", (2, 5, 7), rng)
    src = make(dtype, (2, 40), rng)
    plan = _ms_check(dst, mask, src, ms_layout)
    assert plan.donate == ((0, 0),) and plan.temps == (8 * 2 * 1 + 8,)
    assert f"masked_scatter_{ix._table().BITS[ITEMSIZE[dtype]]}" in plan.steps[3].kernel
    _ms_check(dst, mask, src, ms_layout, donated=True)


@pytest.mark.parametrize("kind", ["transposed", "broadcast", "sliced"])
def test_masked_scatter_layouts(kind, ms_layout):
    rng = np.random.default_rng(21)
    dst = make("float32", (3, 4, 6), rng, kind)
    mask = make("bool", (3, 4, 6), rng, kind)
    src = make("float32", (3, 6, 5), rng, kind)
    _ms_check(dst, mask, src, ms_layout)


def test_masked_scatter_many_tiles_and_broadcast_row_mask(ms_layout):
    rng = np.random.default_rng(22)
    n = ix.MASKED_TILE * 2 + 77                 # three tiles, the last one partial
    dst = make("int16", (1, n), rng)
    mask = make("bool", (1, n), rng, fill=lambda m: rng.random(m) < 0.7)
    src = make("int16", (1, n), rng)
    plan = _ms_check(dst, mask, src, ms_layout)
    assert plan.steps[1].grid == (3, 1, 1)
    # a row mask broadcast over the columns (what a[m] = v with m of dst's leading shape makes)
    dst = make("uint8", (2, 3, 4), rng)
    m = Arr(np.array([1, 0, 1, 0, 1, 1], np.bool_), (2, 3, 4), (3, 1, 0), 0, "bool")
    src = make("uint8", (2, 3, 4), rng)
    _ms_check(dst, m, src, ms_layout)


def test_masked_scatter_short_source_raises(ms_layout):
    rng = np.random.default_rng(23)
    dst = make("float32", (1, 10), rng)
    mask = Arr(np.ones(10, np.bool_), (1, 10), (10, 1), 0, "bool")
    src = make("float32", (1, 4), rng)
    node = Node("MaskedScatter", (), (dst.layout, mask.layout, src.layout), (R((1, 10), "float32"),))
    plan = ix.plan_node(node, DEV)
    with pytest.raises(RuntimeError, match="enough elements"):
        run_masked(plan, (dst, mask, src), (1, 10), "float32", ms_layout)


def test_masked_scatter_real_node_and_declines():
    from mlx_amd import _bridge
    a = mx.zeros((3, 4))
    a[mx.array([True, False, True])] = mx.arange(8).astype(mx.float32).reshape(2, 4)
    nodes = [n for n in _bridge.Graph([a]).nodes if n[0] == "MaskedScatter"]
    assert len(nodes) == 1 and nodes[0][1] is None and len(nodes[0][2]) == 3
    f32, b = "float32", "bool"
    ok = Node("MaskedScatter", (), (R((1, 3, 4), f32), R((1, 3, 4), b), R((1, 8), f32)), (R((1, 3, 4), f32),))
    assert ix.plan_node(ok, DEV) is not None
    bad = [  # non-bool mask, dtype mismatch, mask shape differs, source batch differs
        Node("MaskedScatter", (), (R((1, 3, 4), f32), R((1, 3, 4), "int32"), R((1, 8), f32)), (R((1, 3, 4), f32),)),
        Node("MaskedScatter", (), (R((1, 3, 4), f32), R((1, 3, 4), b), R((1, 8), "float16")), (R((1, 3, 4), f32),)),
        Node("MaskedScatter", (), (R((1, 3, 4), f32), R((1, 3, 1), b), R((1, 8), f32)), (R((1, 3, 4), f32),)),
        Node("MaskedScatter", (), (R((2, 3, 4), f32), R((2, 3, 4), b), R((1, 8), f32)), (R((2, 3, 4), f32),)),
    ]
    for node in bad:
        assert ix.plan_node(node, DEV) is None
    empty = Node("MaskedScatter", (), (R((0, 4), f32), R((0, 4), b), R((0, 8), f32)), (R((0, 4), f32),))
    assert ix.plan_node(empty, DEV).steps == ()
