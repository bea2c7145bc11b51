"""Sort planning without a GPU: the key order against MLX's CPU sort for every dtype,
the argument blobs against hip_kernels/include/mlxa/sort_args.h, path and tile choice,
and the radix plan's steps run by a Python model of each kernel (what the kernels
compute, from the blobs and refs the plan hands them) against MLX's argsort."""

import dataclasses
import os
import shutil
import struct
import subprocess

import mlx.core as mx
import numpy as np
import pytest

from mlx_amd.runtime import kernel_table as kt
from mlx_amd.runtime.driver.base import DeviceProperties
from mlx_amd.runtime.launch import Launch
from mlx_amd.runtime.ops import sort as srt
from mlx_amd.runtime.plan import Layout, Node

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEV = DeviceProperties(0, "test", "gfx942", "gfx942", {}, 64, 100, 1 << 34, False,
                       0, 0, 0, 0, 1024, 65536, True, "0")
R = Layout.row_major
NP = {"bool": np.bool_, "uint8": np.uint8, "int8": np.int8, "uint16": np.uint16, "int16": np.int16,
      "uint32": np.uint32, "int32": np.int32, "uint64": np.uint64, "int64": np.int64,
      "float16": np.float16, "float32": np.float32, "float64": np.float64}
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def to_key(bits: np.ndarray, dtype: str) -> np.ndarray:
    """Python twin of to_key in sort.hip over raw bits."""
    size = srt.SIZES[dtype]
    kind, inf = srt.KINDS[dtype]
    u = bits.astype(np.uint64)
    top = np.uint64(1 << (8 * size - 1))
    full = np.uint64((1 << (8 * size)) - 1)
    if kind == srt.KEY_UNSIGNED:
        return u
    if kind == srt.KEY_SIGNED:
        return u ^ top
    mag = u & (full ^ top)
    k = np.where(u & top, full ^ u, u | top)
    k = np.where(mag == 0, top, k)
    return np.where(mag > np.uint64(inf), full, k)


def raw_bits(a: mx.array) -> np.ndarray:
    dt = str(a.dtype).split(".")[-1]
    size = srt.SIZES[dt]
    if dt == "bool":
        return np.array(a).astype(np.uint8)
    return np.array(a.view({1: mx.uint8, 2: mx.uint16, 4: mx.uint32, 8: mx.uint64}[size]))


def sample(dtype, n, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return mx.array(rng.integers(0, 2, n).astype(np.bool_))
    if dtype in ("float16", "bfloat16", "float32", "float64"):
        v = rng.integers(-6, 6, n).astype(np.float64) / 2
        pool = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0]
        v[rng.choice(n, 12, replace=False)] = pool * 2
        base = mx.array(v.astype(np.float32 if dtype != "float64" else np.float64))
        a = base.astype(getattr(mx, dtype))
        # a negative-sign NaN with a payload, by bits
        bits = raw_bits(a).copy()
        size = srt.SIZES[dtype]
        bits[0] = {2: 0xFE01, 4: 0xFFC00005, 8: 0xFFF8000000000007}[size]
        return mx.array(bits).view(getattr(mx, dtype))
    info = np.iinfo(dtype)
    v = rng.integers(max(info.min, -50), min(info.max, 50), n).astype(dtype)
    v[:2] = [info.min, info.max]
    return mx.array(v)


@pytest.mark.parametrize("dtype", list(srt.KINDS))
def test_key_order_is_mlx_order(dtype):
    a = sample(dtype, 300, seed=len(dtype))
    keys = to_key(raw_bits(a), dtype)
    ours = np.argsort(keys, kind="stable")
    np.testing.assert_array_equal(ours, np.array(mx.argsort(a)))
    # and searchsorted with the same keys
    s = mx.sort(a)
    sk = to_key(raw_bits(s), dtype)
    for side in ("left", "right"):
        np.testing.assert_array_equal(np.searchsorted(sk, keys, side=side),
                                      np.array(mx.searchsorted(s, a, side=side)))


# ---------------------------------------------------------------- plans
def node(prim, params, x: Layout, out_dtype=None):
    o = R(x.shape, out_dtype or ("uint32" if prim.startswith("Arg") else x.dtype))
    return Node(prim, params, (x,), (o,))


@pytest.mark.parametrize("n,tile,threads", [(1, 512, 128), (8, 512, 128), (512, 512, 128),
                                            (513, 2048, 256), (2048, 2048, 256), (3000, 4096, 512),
                                            (4096, 4096, 512)])
def test_block_tiles(n, tile, threads):
    plan = srt.plan_node(node("Sort", (1,), R((10, n), "float32")), DEV)
    (launch,) = plan.steps
    assert launch.kernel == f"sort_block_sort_u32_t{tile}_w64" and kt.has_kernel("sort", launch.kernel)
    assert launch.block == (threads, 1, 1)
    seg = srt.next_pow2(n)
    assert launch.grid[0] == -(-10 // (tile // seg))
    rows = struct.unpack_from(srt._ROWS.format, launch.tail)
    assert rows[0] == 10 and rows[3 + 16 + 1] == n


def test_block_axis_layout():
    x = Layout.strided((4, 7, 5), (1, 20, 4), "int16")   # some permuted view
    plan = srt.plan_node(node("ArgSort", (1,), x), DEV)
    (launch,) = plan.steps
    f = struct.unpack_from(srt._ROWS.format, launch.tail)
    rows, axis_stride, inner = f[:3]
    assert (rows, axis_stride, inner) == (20, 20, 5)
    assert launch.kernel == "sort_block_arg_u16_t512_w64"


@pytest.mark.parametrize("bad", [
    node("Sort", (0,), R((4,), "complex64")),
    node("Sort", (0,), R((), "float32")),
    node("Sort", (3,), R((4, 4), "float32")),
    node("ArgSort", (0,), R((4,), "float32"), out_dtype="int32"),
    node("Partition", (9, 0), R((4,), "float32")),
])
def test_declines(bad):
    assert srt.plan_node(bad, DEV) is None


def test_empty_is_no_steps():
    plan = srt.plan_node(node("Sort", (1,), R((0, 5), "float32")), DEV)
    assert plan is not None and plan.steps == ()


@pytest.mark.parametrize("prim,dtype,pay", [("Sort", "float32", "u32"), ("Sort", "int32", None),
                                            ("ArgSort", "bfloat16", "u32"), ("Sort", "float16", "u16"),
                                            ("Sort", "float64", "u64"), ("ArgSort", "uint8", "u32")])
def test_radix_steps(prim, dtype, pay):
    plan = srt.plan_node(node(prim, (0,), R((10000,), dtype)), DEV)
    size = srt.SIZES[dtype]
    assert len(plan.steps) == 1 + 3 * size
    for st in plan.steps:
        assert kt.has_kernel("sort", st.kernel), st.kernel
        if "scan" in st.kernel or "scatter" in st.kernel:
            assert st.kernel.endswith("_w64")
    assert plan.steps[-1].kernel.startswith(f"sort_scatter_{kt.table('sort').SIZE_NAME[size]}_{pay or 'none'}")
    assert len(plan.temps) == 6


# ---------------------------------------------------------------- radix plan, modelled
def _model(plan, x: np.ndarray, out_dtype, n_out, seen_subtiles=None):
    """Run the plan's steps with Python models of the kernels; buffers are numpy arrays."""
    seen_subtiles = set() if seen_subtiles is None else seen_subtiles
    temps = [None] * len(plan.temps)
    out = np.zeros(n_out, dtype=out_dtype)
    bufs = {"i": [x], "o": [out], "t": temps}

    def get(ref):
        assert ref.offset == 0
        return bufs[ref.kind], ref.index

    for st in plan.steps:
        assert isinstance(st, Launch)
        name = st.kernel
        if name.startswith("sort_keys_"):
            wr = struct.unpack_from("<2i", st.tail)[0]
            f = struct.unpack_from(srt._ROWS.format, st.tail, 8)
            rows, axis_stride = f[0], f[1]
            n = f[3 + 16 + 1]
            kind = f[3 + 16 + 2]
            assert rows == 1 and axis_stride == 1
            (ib, ii), (kb, ki), (rb, ri) = (get(r) for r in st.refs)
            dt = {0: "uint32", 1: "int32", 2: "float32"}[kind] if x.dtype.itemsize == 4 else str(x.dtype)
            bits = x.view(UINT[x.dtype.itemsize])
            kb[ki] = to_key(bits, dt if dt != "float16" else "float16").astype(UINT[x.dtype.itemsize])
            if wr:
                rb[ri] = bits.copy()
        elif name.startswith("sort_count_"):
            n, tiles, shift, tile, _ = struct.unpack(srt._COUNT.format, st.tail)
            (kb, ki), (cb, ci) = (get(r) for r in st.refs)
            d = (kb[ki].astype(np.uint64) >> np.uint64(shift)) & np.uint64(255)
            c = np.zeros((256, tiles), np.uint32)
            for t in range(tiles):
                c[:, t] = np.bincount(d[t * tile:(t + 1) * tile].astype(np.int64), minlength=256)
            cb[ci] = c
        elif name.startswith("sort_scan_"):
            (cb, ci), (tb, ti) = (get(r) for r in st.refs)
            c = cb[ci]
            tb[ti] = c.sum(1).astype(np.uint32)
            cb[ci] = (np.cumsum(c, 1) - c).astype(np.uint32)
        elif name.startswith("sort_scatter_"):
            n, inner, kx, tiles, shift, flags, subtiles = struct.unpack(srt._SCATTER.format, st.tail)
            refs = [get(r) for r in st.refs]
            keys = refs[0][0][refs[0][1]]
            vals = np.arange(n, dtype=np.uint32) if flags & srt.RADIX_IOTA else (
                refs[1][0][refs[1][1]] if "none" not in name else None)
            counts, totals = refs[4][0][refs[4][1]], refs[5][0][refs[5][1]]
            start = np.cumsum(totals) - totals
            d = ((keys.astype(np.uint64) >> np.uint64(shift)) & np.uint64(255)).astype(np.int64)
            parts = name.split("_")
            # a block ranks its range sub-tile by sub-tile, in order: one stable range
            tile = subtiles * kt.table("sort").radix_tile(parts[2], None if parts[3] == "none" else parts[3],
                                                          int(parts[4][1:]))
            assert tiles == -(-n // tile) and subtiles >= 1
            seen_subtiles.add(subtiles)
            pos = np.empty(n, np.int64)
            for t in range(tiles):
                sl = slice(t * tile, min(n, (t + 1) * tile))
                dd = d[sl]
                rank = np.zeros(len(dd), np.int64)
                seen = {}
                for i, dig in enumerate(dd):
                    rank[i] = seen.get(dig, 0)
                    seen[dig] = rank[i] + 1
                pos[sl] = start[dd] + counts[dd, t] + rank
            assert sorted(pos.tolist()) == list(range(n))
            if flags & srt.RADIX_WRITE_KEYS:
                b, i = refs[2]
                arr = np.empty_like(keys)
                arr[pos] = keys
                if flags & srt.RADIX_FINAL:
                    arr = arr ^ keys.dtype.type(kx)
                    b[i][...] = arr.view(b[i].dtype) if b is bufs["o"] else arr
                else:
                    b[i] = arr
            if flags & srt.RADIX_WRITE_VALS:
                b, i = refs[3]
                arr = np.empty_like(vals)
                arr[pos] = vals
                if b is bufs["o"]:
                    b[i][...] = arr.view(b[i].dtype)
                else:
                    b[i] = arr
        else:
            raise AssertionError(name)
    return out


@pytest.mark.parametrize("dtype", ["float32", "int32", "uint32"])
@pytest.mark.parametrize("arg", [True, False])
@pytest.mark.parametrize("cus", [100, 1])
def test_radix_plan_model(dtype, arg, cus):
    """cus=1: few blocks, each walking several sub-tiles (the last range partial)."""
    rng = np.random.default_rng(1)
    n = 9000
    if dtype == "float32":
        x = (rng.integers(-50, 50, n) / 4).astype(np.float32)
        x[::97] = np.nan
        x[::89] = -0.0
    else:
        x = rng.integers(-300, 300, n).astype(dtype)
    a = mx.array(x)
    prim = "ArgSort" if arg else "Sort"
    dev = dataclasses.replace(DEV, compute_units=cus)
    plan = srt.plan_node(node(prim, (0,), R((n,), dtype)), dev)
    seen = set()
    got = _model(plan, x, np.uint32 if arg else x.dtype, n, seen)
    assert seen == {1} if cus == 100 else min(seen) > 1   # 9000 = 8 full sub-tiles + part
    ref = np.array(mx.argsort(a)) if arg else np.array(mx.sort(a))
    np.testing.assert_array_equal(got.view(UINT[got.dtype.itemsize]), ref.view(UINT[ref.dtype.itemsize]))


# ---------------------------------------------------------------- searchsorted plans
def test_searchsorted_plan():
    a = R((100,), "float32")
    v = Layout.strided((3, 4), (1, 3), "float32")
    n = Node("SearchSorted", (True,), (a, v), (R((3, 4), "uint32"),))
    (launch,) = srt.plan_node(n, DEV).steps
    assert launch.kernel == "sort_search_u32" and launch.n_ptrs == 3
    f = struct.unpack(srt._SEARCH.format, launch.tail)
    assert f[0] == 12 and f[1] == 1 and f[-3] == srt.KEY_FLOAT and f[-2] == 1
    bad = Node("SearchSorted", (False,), (R((4, 4), "float32"), v), (R((3, 4), "uint32"),))
    assert srt.plan_node(bad, DEV) is None


# ---------------------------------------------------------------- sort_args.h vs the packers
_FIELDS = {
    "SortRows": ["rows", "in_axis_stride", "out_inner", "row_strides", "row_shape", "row_ndim",
                 "n", "kind", "pad_", "abs_inf"],
    "SortBlockArgs": ["in", "out", "r", "seg", "pad_"],
    "RadixKeysArgs": ["in", "keys", "raw", "write_raw", "pad_", "r"],
    "RadixCountArgs": ["keys", "counts", "n", "tiles", "shift", "tile_size", "pad_"],
    "RadixScanArgs": ["counts", "totals", "tiles", "pad_"],
    "RadixScatterArgs": ["keys_in", "vals_in", "keys_out", "vals_out", "counts", "totals", "n",
                         "out_inner", "key_xor", "tiles", "shift", "flags", "subtiles"],
    "SearchSortedArgs": ["a", "v", "out", "count", "a_stride", "v_strides", "v_shape", "v_ndim",
                         "a_size", "kind", "right", "abs_inf"],
}
_SIZES = {"SortRows": [8, 8, 8, 64, 32, 4, 4, 4, 4, 8], "SortBlockArgs": [8, 8, 144, 4, 12],
          "RadixKeysArgs": [8, 8, 8, 4, 4, 144], "RadixCountArgs": [8, 8, 8, 4, 4, 4, 4],
          "RadixScanArgs": [8, 8, 4, 4],
          "RadixScatterArgs": [8] * 6 + [8, 8, 8, 4, 4, 4, 4],
          "SearchSortedArgs": [8, 8, 8, 8, 8, 64, 32, 4, 4, 4, 4, 8]}


def test_structs_match_c(tmp_path):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    lines = ["#include <cstddef>", "#include <cstdio>", '#include "mlxa/sort_args.h"', "int main() {"]
    for s, fields in _FIELDS.items():
        lines.append(f'std::printf("{s} sizeof %zu\\n", sizeof({s}));')
        for f in fields:
            lines.append(f'std::printf("{s} {f} %zu\\n", offsetof({s}, {f}));')
    lines.append('std::printf("MAX value %d\\n", MLXA_SORT_MAX_DIMS);')
    lines.append('std::printf("FLAGS value %d\\n", MLXA_RADIX_IOTA | MLXA_RADIX_FINAL << 4 | '
                 'MLXA_RADIX_WRITE_KEYS << 8 | MLXA_RADIX_WRITE_VALS << 12 | MLXA_KEY_FLOAT << 16 | MLXA_KEY_SIGNED << 20);')
    lines.append("}")
    (tmp_path / "p.cpp").write_text("\n".join(lines))
    subprocess.run([cxx, "-std=c++17", "-I", os.path.join(REPO, "hip_kernels", "include"),
                    str(tmp_path / "p.cpp"), "-o", str(tmp_path / "p")], check=True)
    out = subprocess.run([str(tmp_path / "p")], check=True, capture_output=True, text=True).stdout
    c = {(s, f): int(v) for s, f, v in (line.split() for line in out.splitlines())}
    assert c[("MAX", "value")] == srt.MAX_DIMS
    assert c[("FLAGS", "value")] == (srt.RADIX_IOTA | srt.RADIX_FINAL << 4 | srt.RADIX_WRITE_KEYS << 8
                                     | srt.RADIX_WRITE_VALS << 12 | srt.KEY_FLOAT << 16 | srt.KEY_SIGNED << 20)
    for s, fields in _FIELDS.items():
        off = 0
        for f, size in zip(fields, _SIZES[s]):
            assert c[(s, f)] == off, (s, f)
            off += size
        assert c[(s, "sizeof")] == off == srt.ARG_STRUCTS[s][1], s
