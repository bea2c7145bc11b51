"""Indexing launcher: Gather (take, fancy indexing), GatherAxis (take_along_axis), Scatter
(``a.at[i].add``, ``a[i] = v``), ScatterAxis (put_along_axis), SliceUpdate (``a[s] = v``,
KV caches), DynamicSlice and DynamicSliceUpdate, through hip_kernels/indexing.hip.

Semantics are MLX's CPU build's: negative indices of signed index dtypes wrap once by the
axis extent. MLX checks no bounds; we never leave a buffer: an index still out of range
is clamped for reads (gathers, dynamic slice starts) and its update skipped for writes
(scatters). Scatter without reduction and duplicate indices: one of the updates wins (MLX
leaves the order undefined); reductions accumulate atomically, so duplicates are exact for
integers and order-dependent only in float rounding.

Outputs that start as a copy of an input (scatters, slice updates) take that input's
buffer when nobody else holds it (``Plan.donate``) and are otherwise initialised by a copy
step (``Plan.init``, the copy family's kernel); a donated static SliceUpdate reports the
byte hull of its slice as written, so a KV-cache step writes back only its slice. Two
static SliceUpdates with equal parameters on outputs of one shape (an attention's k and v
cache writes, TWINS) run as one launch of the twin kernel (``plan_siblings``).

MaskedScatter (``a[mask] = v``; per batch, the k-th true mask element takes src's k-th
element) runs as count / scan / scatter kernels over tiles of the mask. MLX raises when
the source is short of elements: the scan kernel flags that and a host step reads the
flag back (one stream synchronisation per MaskedScatter node) and raises MLX's
RuntimeError; ``MLX_AMD_MASKED_SCATTER_CHECK=0`` skips that round trip (positions past the
source's end then keep dst's values).

Not covered (MLX's CPU runs them): index arrays of different dtypes,
more than 6 index arrays or 8 collapsed dimensions, reductions needing 64-bit offsets,
complex64 prod/max/min.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
import os
import struct

from .. import kernel_table as kt
from ..plan import (ITEMSIZE, HostCall, Layout, Memset, Plan, compute_units, inp, out as out_ref, regroup,
                    row_strides, tmp, twin_launch)
from ..launch import Launch
from . import copy as copy_ops
from .elementwise import collapse_dims

FAMILY = "indexing"

TWINS = ("SliceUpdate",)

PRIMITIVES = {
    "Gather": "gather", "GatherAxis": "gather_axis", "Scatter": "scatter",
    "ScatterAxis": "scatter_axis", "SliceUpdate": "slice_update",
    "DynamicSlice": "dynamic_slice", "DynamicSliceUpdate": "dynamic_slice_update",
    "MaskedScatter": "masked_scatter",
}

MAX_DIMS = kt.MAX_DIMS
MAX_ARRAYS = 6          # MLXA_IDX_MAX_ARRAYS
MAX_DYN = 8             # MLXA_DYN_MAX_AXES
BLOCK = 256             # MLXA_IDX_BLOCK
_I32 = 2**31 - 1
_BLOCKS_PER_CU = 16

INDEX_KINDS = {"uint8": 0, "uint16": 1, "uint32": 2, "uint64": 3,
               "int8": 4, "int16": 5, "int32": 6, "int64": 7}
# Scatter::ReduceType and SliceUpdate::ReduceType are {Max, Min, Sum, Prod, None};
# ScatterAxis::ReduceType is {Sum, None}
REDUCE = {0: "max", 1: "min", 2: "sum", 3: "prod", 4: None}
AXIS_REDUCE = {0: "sum", 1: None}
# same-size dtypes the copy family has kernels for (init copies move bits)
_COPY_AS = {1: "uint8", 2: "float16", 4: "uint32", 8: "int64"}


def _table():
    return kt.table(FAMILY)


# ---- argument structs (include/mlxa/indexing_args.h) ---------------------------------
_GS = struct.Struct("<2q" + f"{MAX_ARRAYS * MAX_DIMS}q" + f"{MAX_DIMS}q" + f"{3 * MAX_ARRAYS}q"
                    + f"{2 * MAX_DIMS}q" + f"{2 * MAX_DIMS}i" + "6i")
_AX = struct.Struct("<3q" + f"{3 * MAX_DIMS}q" + f"{MAX_DIMS}i" + "2i")
_MS = struct.Struct("<6q" + f"{2 * MAX_DIMS}q" + f"{2 * MAX_DIMS}i" + "2i")
_SL = struct.Struct("<q" + f"{2 * MAX_DIMS}q" + "q" + f"{2 * MAX_DYN}q" + f"{MAX_DIMS}i" + "6i")

# name -> (pointer fields, sizeof) for the test against the C header
ARG_STRUCTS = {
    "GatherScatterArgs": (2 + MAX_ARRAYS, 8 * (2 + MAX_ARRAYS) + _GS.size),
    "AxisArgs": (3, 24 + _AX.size),
    "SliceArgs": (3, 24 + _SL.size),
    "MaskedArgs": (4, 32 + _MS.size),
}


def _inner_first(v, n=MAX_DIMS, fill=0):
    v = list(reversed(v))
    if len(v) > n:
        raise ValueError(f"{len(v)} dimensions, at most {n}")
    return v + [fill] * (n - len(v))


def _padded(v, n, fill=0):
    v = list(v)
    return v + [fill] * (n - len(v))


def gs_tail(n, slice_n, idx_shape, idx_strides, pos_strides, axis_strides, axis_size, axis_hi,
            slice_shape, slice_strides, slice_data_strides, kind, vec) -> bytes:
    ist = []
    for k in range(MAX_ARRAYS):
        ist += _inner_first(idx_strides[k]) if k < len(idx_strides) else [0] * MAX_DIMS
    return _GS.pack(n, slice_n, *ist, *_inner_first(pos_strides),
                    *_padded(axis_strides, MAX_ARRAYS), *_padded(axis_size, MAX_ARRAYS),
                    *_padded(axis_hi, MAX_ARRAYS), *_inner_first(slice_strides),
                    *_inner_first(slice_data_strides), *_inner_first(idx_shape, fill=1),
                    *_inner_first(slice_shape, fill=1), len(idx_shape), len(slice_shape),
                    len(axis_strides), kind, vec, 0)


def axis_tail(n, axis_stride, axis_size, shape, strides, kind) -> bytes:
    st = []
    for k in range(3):
        st += _inner_first(strides[k]) if k < len(strides) else [0] * MAX_DIMS
    return _AX.pack(n, axis_stride, axis_size, *st, *_inner_first(shape, fill=1), len(shape), kind)


def slice_tail(n, shape, data_strides, out_strides, vec, start_stride=0, dyn_strides=(),
               dyn_hi=(), dyn_side=0, start_kind=0) -> bytes:
    return _SL.pack(n, *_inner_first(data_strides), *_inner_first(out_strides), start_stride,
                    *_padded(dyn_strides, MAX_DYN), *_padded(dyn_hi, MAX_DYN),
                    *_inner_first(shape, fill=1), len(shape), len(dyn_strides), dyn_side,
                    start_kind, vec, 0)


def masked_tail(batch, inner, chunks, src_inner, mask_bstride, src_bstride, mask_shape, mask_strides,
                src_shape, src_strides) -> bytes:
    return _MS.pack(batch, inner, chunks, src_inner, mask_bstride, src_bstride, *_inner_first(mask_strides),
                    *_inner_first(src_strides), *_inner_first(mask_shape, fill=1),
                    *_inner_first(src_shape, fill=1), len(mask_shape), len(src_shape))


# ---- helpers -------------------------------------------------------------------------
def _span(shape, strides) -> int:
    return sum((d - 1) * abs(s) for d, s in zip(shape, strides)) if math.prod(shape) else 0


def _large(n, *layouts) -> bool:
    """64-bit offsets needed: more than 2^31-1 elements or a span that large."""
    return n > _I32 or any(_span(sh, st) > _I32 for sh, st in layouts)


def _grid(items, device) -> tuple:
    wave = int(device.wave_size)
    if wave <= 0 or BLOCK % wave:
        raise ValueError(f"unsupported wave size {wave}: block size {BLOCK} must be a multiple")
    if items <= 0:
        return (0, 1, 1)
    cap = compute_units(device) * _BLOCKS_PER_CU
    return (min(-(-items // BLOCK), cap), 1, 1)


def _launch(kernel, items, device, n_ptrs, tail, refs) -> Launch:
    return Launch(FAMILY, kernel, _grid(items, device), (BLOCK, 1, 1), 0, n_ptrs, tail, refs)


def _kernel(layout, op, dtype, large):
    """Kernel name, or None when the table has no such variant."""
    if op is None:
        name = _table().name(kt, layout, "none" if layout.startswith("scatter") or layout == "slice" else None,
                             _table().BITS[ITEMSIZE[dtype]], large)
    else:
        if large:
            return None
        name = _table().name(kt, layout, op, dtype)
    return name if kt.has_kernel(FAMILY, name) else None


def _norm_axis(axis, ndim):
    a = int(axis)
    a = a + ndim if a < 0 else a
    return a if 0 <= a < ndim else None


def _index_kind(idx) -> int | None:
    dts = {l.dtype for l in idx}
    if len(dts) > 1:
        return None
    return INDEX_KINDS.get(dts.pop()) if dts else 0


def init_copy(src: Layout, out: Layout, device):
    """Launch copying input 0 (any layout) into output 0 bit for bit, or None."""
    as_dt = _COPY_AS[ITEMSIZE[src.dtype]]
    x = dataclasses.replace(src, dtype=as_dt)
    o = dataclasses.replace(out, dtype=as_dt)
    launch = copy_ops.plan("copy", (x,), o, device)
    if launch is None:
        return None
    return dataclasses.replace(launch, refs=(inp(0), out_ref(0)))


def _updating_plan(steps, node, device, written=None):
    """Output 0 starts as input 0: donated, or copied by an init step."""
    src = node.ins[0]
    cp = init_copy(src, node.out, device)
    if cp is None:
        return None
    return Plan(tuple(steps), donate=((0, 0),), init=((0, (cp,)),),
                written=(written,) if written is not None else None)


# ---- Gather ----------------------------------------------------------------------------
def _gather(node, device):
    src, idx = node.ins[0], node.ins[1:]
    axes, slice_sizes = node.params
    axes = [_norm_axis(a, src.ndim) for a in axes]
    slice_sizes = tuple(int(s) for s in slice_sizes)
    out = node.out
    if None in axes or len(axes) != len(idx) or len(idx) > MAX_ARRAYS or len(slice_sizes) != src.ndim:
        return None
    kind = _index_kind(idx)
    idx_shape = idx[0].shape if idx else ()
    if kind is None or any(l.shape != idx_shape for l in idx):
        return None
    if out.dtype != src.dtype or out.shape != idx_shape + slice_sizes:
        return None
    if any(s > d for s, d in zip(slice_sizes, src.shape)):
        return None
    n = out.size
    if n == 0:
        return Plan(())
    if any(src.shape[a] == 0 for a in axes):
        return None
    if idx:
        ishape, ist = collapse_dims(idx_shape, *[l.strides for l in idx])
    else:
        ishape, ist = (1,), []
    sshape, (sst,) = collapse_dims(slice_sizes, src.strides)
    if len(ishape) > MAX_DIMS or len(sshape) > MAX_DIMS:
        return None
    axis_strides = [src.strides[a] for a in axes]
    V = 16 // src.itemsize
    vec = int(V > 1 and sst[-1] == 1 and sshape[-1] % V == 0 and all(s % V == 0 for s in sst[:-1])
              and all(s % V == 0 for s in axis_strides))
    large = _large(n, (src.shape, src.strides), *[(l.shape, l.strides) for l in idx])
    name = _kernel("gather", None, src.dtype, large)
    if name is None:
        return None
    tail = gs_tail(n, math.prod(slice_sizes), ishape, ist, (0,) * len(ishape), axis_strides,
                   [src.shape[a] for a in axes], [src.shape[a] - slice_sizes[a] for a in axes],
                   sshape, sst, (0,) * len(sshape), kind, V if vec else 1)
    refs = (inp(0),) + tuple(inp(1 + (k if k < len(idx) else 0)) if idx else inp(0)
                             for k in range(MAX_ARRAYS)) + (out_ref(0),)
    return Plan((_launch(name, n // (V if vec else 1), device, 2 + MAX_ARRAYS, tail, refs),))


# ---- Scatter ---------------------------------------------------------------------------
def _scatter(node, device):
    if len(node.ins) < 2:
        return None
    dst, idx, upd = node.ins[0], node.ins[1:-1], node.ins[-1]
    rtype, axes = node.params
    if int(rtype) not in REDUCE:
        return None
    op = REDUCE[int(rtype)]
    out = node.out
    axes = [_norm_axis(a, dst.ndim) for a in axes]
    if None in axes or len(axes) != len(idx) or len(idx) > MAX_ARRAYS:
        return None
    kind = _index_kind(idx)
    idx_shape = idx[0].shape if idx else ()
    if kind is None or any(l.shape != idx_shape for l in idx):
        return None
    if not (out.shape == dst.shape and out.dtype == dst.dtype == upd.dtype):
        return None
    k = len(idx_shape)
    if upd.ndim != k + dst.ndim or upd.shape[:k] != idx_shape:
        return None
    slice_shape = upd.shape[k:]
    if any(s > d for s, d in zip(slice_shape, dst.shape)):
        return None
    n = upd.size
    if out.size == 0:
        return Plan(())
    if n == 0:
        return _updating_plan((), node, device, written=(0, 0))
    orow = row_strides(out.shape)
    ishape, ist = collapse_dims(idx_shape, *[l.strides for l in idx], upd.strides[:k])
    ist, pos = ist[:-1], ist[-1]
    sshape, (sst, sdst) = collapse_dims(slice_shape, orow, upd.strides[k:])
    if len(ishape) > MAX_DIMS or len(sshape) > MAX_DIMS:
        return None
    axis_strides = [orow[a] for a in axes]
    V = 16 // dst.itemsize
    vec = int(op is None and V > 1 and sst[-1] == 1 and sdst[-1] in (0, 1) and sshape[-1] % V == 0
              and all(s % V == 0 for s in tuple(sst[:-1]) + tuple(sdst[:-1]) + tuple(pos))
              and all(s % V == 0 for s in axis_strides))
    large = _large(max(n, out.size), (upd.shape, upd.strides), *[(l.shape, l.strides) for l in idx])
    name = _kernel("scatter", op, dst.dtype, large)
    if name is None:
        return None
    tail = gs_tail(n, math.prod(slice_shape), ishape, ist, pos, axis_strides,
                   [dst.shape[a] for a in axes], [dst.shape[a] - slice_shape[a] for a in axes],
                   sshape, sst, sdst, kind, V if vec else 1)
    ui = len(node.ins) - 1
    refs = (inp(ui),) + tuple(inp(1 + (j if j < len(idx) else 0)) if idx else inp(ui)
                              for j in range(MAX_ARRAYS)) + (out_ref(0),)
    launch = _launch(name, n // (V if vec else 1), device, 2 + MAX_ARRAYS, tail, refs)
    return _updating_plan((launch,), node, device)


# ---- GatherAxis / ScatterAxis ----------------------------------------------------------
def _gather_axis(node, device):
    if len(node.ins) != 2 or len(node.params) != 1:
        return None
    src, idx = node.ins
    out = node.out
    axis = _norm_axis(node.params[0], src.ndim) if src.ndim else None
    kind = INDEX_KINDS.get(idx.dtype)
    if axis is None or kind is None or idx.ndim != src.ndim or out.shape != idx.shape or out.dtype != src.dtype:
        return None
    if any(a != b for d, (a, b) in enumerate(zip(src.shape, idx.shape)) if d != axis):
        return None
    n = out.size
    if n == 0:
        return Plan(())
    if src.shape[axis] == 0:
        return None
    sst = list(src.strides)
    sst[axis] = 0
    shape, (s0, s1) = collapse_dims(out.shape, sst, idx.strides)
    if len(shape) > MAX_DIMS:
        return None
    large = _large(n, (src.shape, src.strides), (idx.shape, idx.strides))
    name = _kernel("gather_axis", None, src.dtype, large)
    if name is None:
        return None
    tail = axis_tail(n, src.strides[axis], src.shape[axis], shape, (s0, s1), kind)
    return Plan((_launch(name, n, device, 3, tail, (inp(0), inp(1), out_ref(0))),))


def _scatter_axis(node, device):
    if len(node.ins) != 3 or len(node.params) != 2:
        return None
    dst, idx, upd = node.ins
    rtype, axis = node.params
    if int(rtype) not in AXIS_REDUCE:
        return None
    op = AXIS_REDUCE[int(rtype)]
    out = node.out
    axis = _norm_axis(axis, dst.ndim) if dst.ndim else None
    kind = INDEX_KINDS.get(idx.dtype)
    if axis is None or kind is None or not (out.shape == dst.shape and out.dtype == dst.dtype == upd.dtype):
        return None
    if idx.shape != upd.shape or idx.ndim != dst.ndim:
        return None
    if any(a > b for d, (a, b) in enumerate(zip(idx.shape, dst.shape)) if d != axis):
        return None
    if out.size == 0:
        return Plan(())
    n = idx.size
    if n == 0:
        return _updating_plan((), node, device, written=(0, 0))
    orow = row_strides(out.shape)
    ost = list(orow)
    ost[axis] = 0
    shape, (su, si, so) = collapse_dims(idx.shape, upd.strides, idx.strides, ost)
    if len(shape) > MAX_DIMS:
        return None
    large = _large(max(n, out.size), (upd.shape, upd.strides), (idx.shape, idx.strides))
    name = _kernel("scatter_axis", op, dst.dtype, large)
    if name is None:
        return None
    tail = axis_tail(n, orow[axis], dst.shape[axis], shape, (su, si, so), kind)
    launch = _launch(name, n, device, 3, tail, (inp(2), inp(1), out_ref(0)))
    return _updating_plan((launch,), node, device)


# ---- slices ----------------------------------------------------------------------------
def _extent(start, stop, step, dim):
    """Elements of MLX's normalised slice (stop may lie past either end, as in Python)."""
    if step == 0:
        return None
    return len(range(start, min(stop, dim) if step > 0 else max(stop, -1), step))


def _slice_update(node, device):
    if len(node.ins) != 2 or len(node.params) != 4:
        return None
    src, upd = node.ins
    rtype, start, stop, steps = node.params
    if int(rtype) not in REDUCE:
        return None
    op = REDUCE[int(rtype)]
    out = node.out
    D = src.ndim
    if not (out.shape == src.shape and out.dtype == src.dtype == upd.dtype and upd.ndim == D
            and len(start) == len(stop) == len(steps) == D):
        return None
    ext = tuple(_extent(int(a), int(b), int(c), d) for a, b, c, d in zip(start, stop, steps, src.shape))
    if ext != upd.shape:
        return None
    if out.size == 0:
        return Plan(())
    n = upd.size
    if n == 0:
        return _updating_plan((), node, device, written=(0, 0))
    for d in range(D):   # every touched element inside the array (MLX normalised the slice)
        first, last = int(start[d]), int(start[d]) + (ext[d] - 1) * int(steps[d])
        if not (0 <= first < src.shape[d] and 0 <= last < src.shape[d]):
            return None
    orow = row_strides(out.shape)
    ost = [r * int(s) for r, s in zip(orow, steps)]
    base = sum(int(s) * r for s, r in zip(start, orow))
    shape, (sd, so) = collapse_dims(upd.shape, upd.strides, ost)
    if len(shape) > MAX_DIMS:
        return None
    large = _large(max(n, out.size), (upd.shape, upd.strides))
    name = _kernel("slice", op, src.dtype, large)
    if name is None:
        return None
    item = src.itemsize
    lo = base + sum(min(0, (e - 1) * s) for e, s in zip(ext, ost))
    hi = base + sum(max(0, (e - 1) * s) for e, s in zip(ext, ost)) + 1
    tail = slice_tail(n, shape, sd, so, int(16 // item > 1))
    launch = _launch(name, n, device, 3, tail, (inp(1), inp(1), out_ref(0, base * item)))
    return _updating_plan((launch,), node, device, written=(lo * item, hi * item))


def _dyn_axes(params):
    """DynamicSlice(Update) axes: the bridge passes a one-value state() bare."""
    if params and isinstance(params[0], tuple):
        return params[0]
    return params


def _start(start, naxes):
    kind = INDEX_KINDS.get(start.dtype)
    if kind is None or start.size != naxes or start.ndim > 1 or naxes > MAX_DYN:
        return None
    return kind, (start.strides[0] if start.ndim == 1 else 0)


def _dynamic_slice(node, device):
    if len(node.ins) != 2 or len(node.params) != 2:
        return None
    src, start = node.ins
    axes, size = node.params
    out = node.out
    axes = [_norm_axis(a, src.ndim) for a in axes]
    size = tuple(int(s) for s in size)
    if None in axes or out.shape != size or out.dtype != src.dtype or len(size) != src.ndim:
        return None
    st = _start(start, len(axes))
    if st is None or any(s > d for s, d in zip(size, src.shape)):
        return None
    n = out.size
    if n == 0:
        return Plan(())
    shape, (sd, so) = collapse_dims(size, src.strides, row_strides(size))
    if len(shape) > MAX_DIMS:
        return None
    large = _large(n, (src.shape, src.strides))
    name = _kernel("slice", None, src.dtype, large)
    if name is None:
        return None
    tail = slice_tail(n, shape, sd, so, int(16 // src.itemsize > 1), st[1],
                      [src.strides[a] for a in axes], [src.shape[a] - size[a] for a in axes], 0, st[0])
    return Plan((_launch(name, n, device, 3, tail, (inp(0), inp(1), out_ref(0))),))


def _dynamic_slice_update(node, device):
    if len(node.ins) != 3:
        return None
    src, upd, start = node.ins
    axes = [_norm_axis(a, src.ndim) for a in _dyn_axes(node.params)]
    out = node.out
    if None in axes or not (out.shape == src.shape and out.dtype == src.dtype == upd.dtype
                            and upd.ndim == src.ndim):
        return None
    st = _start(start, len(axes))
    if st is None or any(u > d for u, d in zip(upd.shape, src.shape)):
        return None
    if out.size == 0:
        return Plan(())
    n = upd.size
    if n == 0:
        return _updating_plan((), node, device, written=(0, 0))
    orow = row_strides(out.shape)
    shape, (sd, so) = collapse_dims(upd.shape, upd.strides, orow)
    if len(shape) > MAX_DIMS:
        return None
    large = _large(max(n, out.size), (upd.shape, upd.strides))
    name = _kernel("slice", None, src.dtype, large)
    if name is None:
        return None
    tail = slice_tail(n, shape, sd, so, int(16 // src.itemsize > 1), st[1],
                      [orow[a] for a in axes], [src.shape[a] - upd.shape[a] for a in axes], 1, st[0])
    launch = _launch(name, n, device, 3, tail, (inp(1), inp(2), out_ref(0)))
    return _updating_plan((launch,), node, device)


# ---- MaskedScatter -----------------------------------------------------------------------
MASKED_TILE = 4096       # MLXA_MASKED_TILE
MASKED_THREADS = 256     # MLXA_MASKED_THREADS
_GRID_Y = 65535


@dataclasses.dataclass(frozen=True)
class MaskedCheck:
    """HostCall: MLX's error (RuntimeError) when a batch has more true mask elements than the source
    holds (the scan kernel's flag, read back after the stream drains)."""

    def __call__(self, ptrs, stream, ctx):
        flag = ctypes.c_int32(0)
        ctx.driver.memcpy_dtoh(ctypes.addressof(flag), ptrs[0], 4, stream)
        ctx.driver.stream_synchronize(stream)
        if flag.value:
            raise RuntimeError("[MaskedScatter] Source does not have enough elements for mask.")


def _inner_dims(shape, strides):
    """Collapsed inner dims (after the batch dim) of a layout: (shape, strides)."""
    if len(shape) <= 1:
        return (1,), (0,)
    sh, (st,) = collapse_dims(tuple(shape[1:]), tuple(strides[1:]))
    return sh, st


def _masked_scatter(node, device):
    if len(node.ins) != 3 or node.params not in ((), (None,)):
        return None
    dst, mask, src = node.ins
    out = node.out
    if not (out.shape == dst.shape == mask.shape and out.dtype == dst.dtype == src.dtype
            and mask.dtype == "bool" and dst.ndim >= 1 and src.ndim >= 1):
        return None
    B = dst.shape[0]
    if out.size == 0:
        return Plan(())
    if src.shape[0] != B or B > _GRID_Y:
        return None
    inner = out.size // B
    chunks = -(-inner // MASKED_TILE)
    src_inner = math.prod(src.shape[1:])
    mshape, mst = _inner_dims(mask.shape, mask.strides)
    sshape, sst = _inner_dims(src.shape, src.strides) if src_inner else ((1,), (0,))
    if len(mshape) > MAX_DIMS or len(sshape) > MAX_DIMS or chunks > _I32 or max(mshape + sshape) > _I32:
        return None
    name = _table().name(kt, "masked_scatter", None, _table().BITS[out.itemsize])
    count = _table().name(kt, "masked_count", None, "uint8")
    scan = _table().name(kt, "masked_scan", None, "uint8")
    if not all(kt.has_kernel(FAMILY, n) for n in (name, count, scan)):
        return None
    tail = masked_tail(B, inner, chunks, src_inner, mask.strides[0] if B > 1 else 0,
                       src.strides[0] if B > 1 else 0, mshape, mst, sshape, sst)
    flag_at = 8 * B * chunks
    refs = (inp(1), inp(2), out_ref(0), tmp(0))
    blk = (MASKED_THREADS, 1, 1)
    steps = [Memset(tmp(0, flag_at), 4, 0),
             Launch(FAMILY, count, (chunks, B, 1), blk, 0, 4, tail, refs),
             Launch(FAMILY, scan, (B, 1, 1), blk, 0, 4, tail, refs),
             Launch(FAMILY, name, (chunks, B, 1), blk, 0, 4, tail, refs)]
    if os.environ.get("MLX_AMD_MASKED_SCATTER_CHECK", "1") != "0":
        steps.append(HostCall(MaskedCheck(), (tmp(0, flag_at),), what="masked_scatter source check"))
    plan = _updating_plan(steps, node, device)
    return None if plan is None else dataclasses.replace(plan, temps=(flag_at + 8,))


_PLANNERS = {
    "Gather": _gather, "GatherAxis": _gather_axis, "Scatter": _scatter,
    "ScatterAxis": _scatter_axis, "SliceUpdate": _slice_update,
    "DynamicSlice": _dynamic_slice, "DynamicSliceUpdate": _dynamic_slice_update,
    "MaskedScatter": _masked_scatter,
}


def plan_node(node, device):
    """The node's plan, or None (MLX's CPU fallback)."""
    fn = _PLANNERS.get(node.prim)
    if fn is None or len(node.outs) != 1 or not node.out.row_contiguous:
        return None
    if any(l.dtype not in ITEMSIZE for l in node.ins) or node.out.dtype not in ITEMSIZE:
        return None
    return fn(node, device)


def plan_siblings(nodes, device):
    """Two static SliceUpdates without reduction (TWINS: equal parameters, inputs there
    together; an attention's k and v cache writes) as one launch of the twin kernel, each
    output donated or first copied as alone; None unless the outputs have one shape (the
    replay moves both writes by one offset) and each alone is one launch of the same kernel."""
    if len(nodes) != 2 or any(n.prim != "SliceUpdate" for n in nodes) or nodes[0].out.shape != nodes[1].out.shape:
        return None
    plans = [_slice_update(n, device) for n in nodes]
    if any(p is None or len(p.steps) != 1 or len(p.init) != 1 for p in plans):
        return None
    (a,), (b,) = plans[0].steps, plans[1].steps
    dt = nodes[0].out.dtype
    twin = None
    for large in (False, True):
        if a.kernel == b.kernel == _kernel("slice", None, dt, large):
            twin = _table().name(kt, "slice_twin", "none", _table().BITS[ITEMSIZE[dt]], large)
    if twin is None or not kt.has_kernel(FAMILY, twin):
        return None
    n0 = len(nodes[0].ins)
    (_, (cp1,)), = plans[1].init
    init = plans[0].init + ((1, (dataclasses.replace(cp1, refs=regroup(cp1.refs, n0, 1)),)),)
    return Plan((twin_launch(twin, a, b, n0),), donate=((0, 0), (1, n0)), init=init,
                written=plans[0].written + plans[1].written)
