"""What the unary, binary and copy launchers share: array layouts, dimension collapse,
layout classification, launch geometry and the packing of the argument structs of
``hip_kernels/include/mlxa/args.h``.

Kernels always write a fresh row-contiguous output (or an input donated to it), so a
plan depends only on the inputs' layouts relative to the output's shape.
"""

from __future__ import annotations

import struct

from .. import kernel_table as kt
from ..launch import Launch
from ..plan import ITEMSIZE, Layout, Plan, compute_units, row_strides  # noqa: F401  (shared by every launcher)


MAX_DIMS = kt.MAX_DIMS
BLOCK = kt.ELEMENTWISE_BLOCK
_I32_LIMIT = 2**31 - 1
_BLOCKS_PER_CU = 16   # enough resident blocks to hide latency; the rest is grid-stride


def collapse_dims(shape, *strides):
    """Drop size-1 dimensions and merge neighbours that are contiguous for every stride
    vector. Returns (shape, [strides, ...]); a 0-d or one-element array becomes one
    dimension of size 1. Element order (row-major over ``shape``) is unchanged."""
    keep = [i for i, d in enumerate(shape) if d != 1]
    if not keep:
        return (1,), [(0,) for _ in strides]
    cshape = [shape[keep[0]]]
    cstr = [[st[keep[0]]] for st in strides]
    for i in keep[1:]:
        d = shape[i]
        if all(c[-1] == st[i] * d for c, st in zip(cstr, strides)):
            cshape[-1] *= d
            for c, st in zip(cstr, strides):
                c[-1] = st[i]
        else:
            cshape.append(d)
            for c, st in zip(cstr, strides):
                c.append(st[i])
    return tuple(cshape), [tuple(c) for c in cstr]


def is_scalar(lay: Layout) -> bool:
    return lay.data_size == 1


def is_dense_like(lay: Layout, out: Layout) -> bool:
    """Elements are stored at offsets 0..n-1 in the output's row-major order."""
    n = out.size
    if lay.data_size != n or lay.shape != out.shape:
        return False
    if lay.row_contiguous:
        return True
    return lay.contiguous and all(
        a == b for d, a, b in zip(out.shape, lay.strides, out.strides) if d != 1)


def needs_i64(n: int, shape, *strides) -> bool:
    if n > _I32_LIMIT:
        return True
    return any(sum((d - 1) * abs(s) for d, s in zip(shape, st)) > _I32_LIMIT for st in strides)


def grid_for(items: int, device) -> tuple:
    """1-D grid-stride geometry for ``items`` work items on ``device``."""
    wave = int(device.wave_size)
    if wave <= 0 or BLOCK % wave:
        raise ValueError(f"unsupported wave size {wave}: block size {BLOCK} must be a multiple")
    if items <= 0:
        return (0, 1, 1), (BLOCK, 1, 1)
    cap = compute_units(device) * _BLOCKS_PER_CU
    return (min(-(-items // BLOCK), cap), 1, 1), (BLOCK, 1, 1)


def vec_width(in_dtype: str, out_dtype: str) -> int:
    """Elements per thread in contiguous kernels (mlxa::vec_width)."""
    return 16 // max(ITEMSIZE[in_dtype], ITEMSIZE[out_dtype])


# ---- argument structs (args.h); shape/strides are packed innermost dimension first ----
_I64 = struct.Struct("<q")
_GDIMS = struct.Struct(f"<{MAX_DIMS}i i i")          # shape[8], ndim, pad
_STRIDES = struct.Struct(f"<{MAX_DIMS}q")

# name -> (pointer count, total size) for the tests against the C structs
ARG_STRUCTS = {
    "UnaryVArgs": (2, 2 * 8 + 8),
    "UnaryGArgs": (2, 2 * 8 + 8 + MAX_DIMS * 8 + MAX_DIMS * 4 + 8),
    "BinaryVArgs": (3, 3 * 8 + 8),
    "BinaryGArgs": (3, 3 * 8 + 8 + 2 * MAX_DIMS * 8 + MAX_DIMS * 4 + 8),
    "CopyTArgs": (2, 2 * 8 + 6 * 8),
}
_T = struct.Struct("<6q")   # rows, cols, batch, in_row_stride, in_col_stride, in_batch_stride


def _pad(v, fill=0):
    v = list(reversed(v))
    return v + [fill] * (MAX_DIMS - len(v))


def v_tail(n: int) -> bytes:
    return _I64.pack(n)


def g_tail(n: int, shape, *strides) -> bytes:
    out = _I64.pack(n)
    for st in strides:
        out += _STRIDES.pack(*_pad(st))
    return out + _GDIMS.pack(*_pad(shape, 1), len(shape), 0)


def contiguous_launch(family, kernel, n, ptrs, in_dtype, out_dtype, device) -> Launch:
    grid, block = grid_for(-(-n // vec_width(in_dtype, out_dtype)), device)
    return Launch(family, kernel, grid, block, 0, ptrs, v_tail(n))


def transpose_launch(family, kernel, rows, cols, batch, strides, device) -> Launch:
    """One 32x32 tile per block iteration (copy_t in copy.hip); ``strides`` are the input's
    (row, col, batch) strides in elements."""
    tiles = -(-rows // 32) * -(-cols // 32) * batch
    grid, block = grid_for(tiles * BLOCK, device)
    return Launch(family, kernel, grid, block, 0, 2, _T.pack(rows, cols, batch, *strides))


def strided_launch(family, kernel, n, ptrs, shape, strides, device) -> Launch:
    grid, block = grid_for(n, device)
    return Launch(family, kernel, grid, block, 0, ptrs, g_tail(n, shape, *strides))


# ---- arrays past 32-bit indices: a same-size strided copy into a contiguous temporary
def dense_copy_launch(lay: Layout, shape, src_ref, dst_ref, device):
    """Launch of the identity copy (by element size) of ``lay`` read as ``shape`` in
    row-major order into a contiguous buffer; 64-bit indices when needed. None beyond
    MAX_DIMS collapsed dimensions."""
    import dataclasses

    n = 1
    for d in shape:
        n *= d
    cshape, (st,) = collapse_dims(shape, lay.strides)
    if len(cshape) > MAX_DIMS:
        return None
    sz = kt.SIZED[lay.dtype]
    name = kt.kernel_name("copy", "g", None, sz, sz, needs_i64(n, cshape, st))
    launch = strided_launch("copy", name, n, 2, cshape, (st,), device)
    return dataclasses.replace(launch, refs=(src_ref, dst_ref))


def with_refs(launch: Launch, refs) -> Launch:
    import dataclasses

    return dataclasses.replace(launch, refs=tuple(refs))


_DIVMOD = struct.Struct("<q")
ARG_STRUCTS["DivModVArgs"] = (4, 4 * 8 + 8)
ARG_STRUCTS["DivModGArgs"] = (4, 4 * 8 + 8 + 2 * MAX_DIMS * 8 + MAX_DIMS * 4 + 8)


def elementwise_plan(plan_steps, node, device):
    """The plan of a one-output elementwise node from a family's ``plan_steps``: its steps
    and temporaries; the output may take over any input's buffer (each element is read and
    written by the same thread, or the input went to a temporary first)."""
    if len(node.outs) != 1:
        return None
    got = plan_steps(node.prim, node.ins, node.out, device, node.params)
    if got is None:
        return None
    steps, temps = got
    return Plan(steps, temps=temps, donate=tuple((0, i) for i in range(len(node.ins))))
