"""Layout launcher: Select (mx.where), Concatenate, Pad, Arange and NumberOfElements
through hip_kernels/layout.hip (and the copy family for contiguous slabs).

* Select: MLX has broadcast cond/a/b to the output shape and promoted a/b to the output
  dtype; one strided kernel per element size (bits only), 64-bit indices when needed.
* Concatenate: per input, its slab of the output (offset along ``axis``). When every
  dimension before ``axis`` is 1 the slab is contiguous at a byte offset and the copy
  family's own plan writes it; otherwise our strided-output copy writes the slab view.
* Pad: fill the output with the pad value (a 0-d input), then write x into the interior
  view with the same strided-output copy.
* Arange: MLX's CPU converts start to T, takes step' = T(start + step) - T(start) in T
  and accumulates ``v += step'`` element by element. Integers wrap, so element i is
  T(start) + i*step' modulo 2^bits: exact on the GPU. For floats the running sum rounds
  at every step; we plan only when no step rounds: start, start + step and every value
  are multiples of 2^-24 whose scaled magnitudes fit the type's significand (2^24 for
  float32, 2^11 float16, 2^8 bfloat16, 2^52 float64, so that i*step' is exact in double
  as well). Then every partial sum is exact and equals start + i*step'. Anything else
  (arange(0, 1, 0.1) in float32, say) returns None: MLX's CPU runs it.
* NumberOfElements: a constant of the (static) shapes, written by the Arange kernel with
  a zero step.
"""

from __future__ import annotations

import os

import math
import struct

from .. import kernel_table as kt
from . import elementwise as ew
from .elementwise import Layout
from ..launch import Launch
from ..plan import ITEMSIZE, Plan, Ref, inp, row_strides
from ..plan import out as outref

FAMILY = "layout"

ALL_PRIMITIVES = {
    "Select": "select", "Concatenate": "concatenate", "Pad": "pad", "Arange": "arange",
    "NumberOfElements": "number_of_elements",
}
# MLX_AMD_LAYOUT=0 sends these to MLX's CPU fallback (to bisect a suspected layout problem)
PRIMITIVES = {} if os.environ.get("MLX_AMD_LAYOUT") == "0" else ALL_PRIMITIVES

MAX_DIMS = kt.MAX_DIMS
INTS = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64")
# significand bound per float dtype (see the module docstring) and the finest grid
FLOAT_BITS = {"float32": 24, "float16": 11, "bfloat16": 8, "float64": 52}
_FINEST = 24   # values must be multiples of 2^-24 (float16's smallest subnormal)

# ---- argument structs (layout_args.h), innermost dimension first --------------------
_STRIDES = struct.Struct(f"<{MAX_DIMS}q")
_DIMS = struct.Struct(f"<{MAX_DIMS}i i i")
_I64 = struct.Struct("<q")
_ARANGE = struct.Struct("<qqqdd")   # n, istart, istep, fstart, fstep

# name -> (pointer count, total size) for the tests against the C structs
ARG_STRUCTS = {
    "LayoutSelectArgs": (4, 4 * 8 + 8 + 3 * MAX_DIMS * 8 + MAX_DIMS * 4 + 8),
    "LayoutCopyArgs": (2, 2 * 8 + 8 + 2 * MAX_DIMS * 8 + MAX_DIMS * 4 + 8),
    "LayoutFillArgs": (2, 2 * 8 + 8),
    "LayoutArangeArgs": (1, 8 + 5 * 8),
}


def _pad(v, fill=0):
    v = list(reversed(v))
    return v + [fill] * (MAX_DIMS - len(v))


def g_tail(n: int, shape, *strides) -> bytes:
    b = _I64.pack(n)
    for st in strides:
        b += _STRIDES.pack(*_pad(st))
    return b + _DIMS.pack(*_pad(shape, 1), len(shape), 0)


def arange_tail(n: int, istart: int, istep: int, fstart: float, fstep: float) -> bytes:
    wrap = lambda v: ((v + 2**63) % 2**64) - 2**63   # noqa: E731  (two's complement int64)
    return _ARANGE.pack(n, wrap(istart), wrap(istep), fstart, fstep)


_DIM_MAX = 2**31 - 1   # the structs hold extents as int32


def _collapse(shape, *strides):
    """collapse_dims, then extents past int32 split into two factors (a small one found
    by trial); None when one cannot be split or the result has too many dimensions."""
    cshape, sts = ew.collapse_dims(shape, *strides)
    out_shape, out_st = [], [[] for _ in sts]
    for d, dim in enumerate(cshape):
        if dim <= _DIM_MAX:
            out_shape.append(dim)
            for o, st in zip(out_st, sts):
                o.append(st[d])
            continue
        k = next((k for k in range(2, 1 << 16) if dim % k == 0 and dim // k <= _DIM_MAX), None)
        if k is None:
            return None
        inner = dim // k
        out_shape += [k, inner]
        for o, st in zip(out_st, sts):
            o += [st[d] * inner, st[d]]
    if len(out_shape) > MAX_DIMS:
        return None
    return tuple(out_shape), [tuple(o) for o in out_st]


def _name(layout, op, dtype, large=False):
    return kt.kernel_name(FAMILY, layout, op, dtype, dtype, large)


def _sized(dtype):
    return kt.SIZED.get(dtype)


# ---- kernels ------------------------------------------------------------------------
def select_launch(cond: Layout, a: Layout, b: Layout, out: Layout, device):
    n = out.size
    got = _collapse(out.shape, cond.strides, a.strides, b.strides)
    if got is None:
        return None
    shape, sts = got
    large = ew.needs_i64(n, shape, *sts)
    name = _name("g", "select", _sized(out.dtype), large)
    grid, block = ew.grid_for(n, device)
    return Launch(FAMILY, name, grid, block, 0, 4, g_tail(n, shape, *sts), refs=(inp(0), inp(1), inp(2), outref(0)))


def strided_copy_launch(x: Layout, out_strides, src: Ref, dst: Ref, device):
    """``x`` (any layout) written through the output view of ``x.shape`` with element
    strides ``out_strides`` starting at ``dst``."""
    n = x.size
    got = _collapse(x.shape, x.strides, tuple(out_strides))
    if got is None:
        return None
    shape, sts = got
    large = ew.needs_i64(n, shape, *sts)
    name = _name("g", "copy", _sized(x.dtype), large)
    grid, block = ew.grid_for(n, device)
    return Launch(FAMILY, name, grid, block, 0, 2, g_tail(n, shape, *sts), refs=(src, dst))


def fill_launch(n: int, dtype: str, value: Ref, dst: Ref, device) -> Launch:
    grid, block = ew.grid_for(n, device)
    return Launch(FAMILY, _name("v", "fill", _sized(dtype)), grid, block, 0, 2, _I64.pack(n), refs=(value, dst))


def _arange_launch(dtype, n, istart, istep, fstart, fstep, device) -> Launch:
    kd = dtype if dtype in FLOAT_BITS else _sized(dtype)
    grid, block = ew.grid_for(n, device)
    return Launch(FAMILY, _name("v", "arange", kd), grid, block, 0, 1,
                  arange_tail(n, istart, istep, fstart, fstep), refs=(outref(0),))


# ---- Select ---------------------------------------------------------------------------
def plan_select(node, device):
    if len(node.ins) != 3 or len(node.outs) != 1:
        return None
    cond, a, b = node.ins
    o = node.out
    if cond.dtype != "bool" or a.dtype != o.dtype or b.dtype != o.dtype or o.dtype not in ITEMSIZE:
        return None
    if not (cond.shape == a.shape == b.shape == o.shape):
        return None
    if o.size == 0:
        return Plan(())
    launch = select_launch(cond, a, b, o, device)
    return None if launch is None else Plan((launch,))


# ---- Concatenate ------------------------------------------------------------------------
def _remap(step, k: int, byte_off: int, tbase: int):
    """A copy-family step of a one-input plan re-pointed at input ``k``, the output slab
    at ``byte_off`` and temporaries from ``tbase``."""
    def m(r: Ref) -> Ref:
        if r.kind == "i":
            return inp(k, r.offset)
        if r.kind == "o":
            return outref(0, r.offset + byte_off)
        return Ref("t", r.index + tbase, r.offset)
    return ew.with_refs(step, tuple(m(r) for r in step.refs))


def _slab_steps(x: Layout, k: int, view_strides, byte_off: int, contiguous: bool, tbase: int, device):
    """(steps, temps) writing input ``k`` into its output view, or None."""
    if contiguous:
        from . import copy as cp

        got = cp.plan_steps("copy", (x,), Layout.row_major(x.shape, x.dtype), device)
        if got is not None:
            steps, temps = got
            if all(isinstance(s, Launch) and s.refs is not None for s in steps):
                return tuple(_remap(s, k, byte_off, tbase) for s in steps), tuple(temps)
    launch = strided_copy_launch(x, view_strides, inp(k), outref(0, byte_off), device)
    return None if launch is None else ((launch,), ())


def plan_concatenate(node, device):
    if len(node.outs) != 1 or not node.ins or len(node.params) != 1:
        return None
    o = node.out
    nd = o.ndim
    axis = int(node.params[0])
    if nd == 0 or not -nd <= axis < nd:
        return None
    axis %= nd
    if o.dtype not in ITEMSIZE:
        return None
    ostr = row_strides(o.shape)
    isz = ITEMSIZE[o.dtype]
    contiguous = math.prod(o.shape[:axis]) == 1
    steps, temps, pos = [], [], 0
    for k, x in enumerate(node.ins):
        if x.dtype != o.dtype or x.ndim != nd:
            return None
        if any(x.shape[d] != o.shape[d] for d in range(nd) if d != axis):
            return None
        if x.size:
            got = _slab_steps(x, k, ostr, pos * ostr[axis] * isz, contiguous, len(temps), device)
            if got is None:
                return None
            steps += got[0]
            temps += got[1]
        pos += x.shape[axis]
    if pos != o.shape[axis]:
        return None
    return Plan(tuple(steps), temps=tuple(temps))


# ---- Pad --------------------------------------------------------------------------------
def plan_pad(node, device):
    if len(node.ins) != 2 or len(node.outs) != 1 or len(node.params) != 3:
        return None
    x, val = node.ins
    o = node.out
    axes, low, high = (tuple(int(v) for v in p) for p in node.params)
    if x.dtype != o.dtype or val.dtype != o.dtype or val.size != 1 or o.dtype not in ITEMSIZE:
        return None
    if len(axes) != len(low) or len(axes) != len(high) or x.ndim != o.ndim:
        return None
    nd = o.ndim
    lo = [0] * nd
    shape = list(x.shape)
    for ax, l, h in zip(axes, low, high):
        if not -nd <= ax < nd or l < 0 or h < 0:
            return None
        ax %= nd
        lo[ax] = l
        shape[ax] += l + h
    if tuple(shape) != o.shape:
        return None
    if o.size == 0:
        return Plan(())
    ostr = row_strides(o.shape)
    steps = [fill_launch(o.size, o.dtype, inp(1), outref(0), device)]
    if x.size:
        off = sum(l * s for l, s in zip(lo, ostr)) * ITEMSIZE[o.dtype]
        launch = strided_copy_launch(x, ostr, inp(0), outref(0, off), device)
        if launch is None:
            return None
        steps.append(launch)
    return Plan(tuple(steps))


# ---- Arange -----------------------------------------------------------------------------
_INT_RANGE = {dt: ((0, 2 ** (8 * ITEMSIZE[dt]) - 1) if dt.startswith("u")
                   else (-(2 ** (8 * ITEMSIZE[dt] - 1)), 2 ** (8 * ITEMSIZE[dt] - 1) - 1)) for dt in INTS}


def _to_int(v: float, dtype: str):
    """C's double -> integer conversion (truncation), or None where it is undefined."""
    if not math.isfinite(v):
        return None
    t = math.trunc(v)
    lo, hi = _INT_RANGE[dtype]
    return t if lo <= t <= hi else None


def _scaled(v: float):
    """v * 2^24 as an int when v is a finite multiple of 2^-24, else None."""
    if not math.isfinite(v):
        return None
    s = v * 2.0 ** _FINEST   # exact (a power-of-two scale) unless it overflows
    return int(s) if math.isfinite(s) and s == math.floor(s) else None


def _significant(m: int) -> int:
    """Bits from the highest to the lowest set bit of |m| (0 for 0)."""
    m = abs(m)
    return m.bit_length() - ((m & -m).bit_length() - 1) if m else 0


def arange_values(start: float, step: float, n: int, dtype: str):
    """(istart, istep, fstart, fstep) for the kernel, or None when the result is not
    provably MLX's sequential one (see the module docstring)."""
    nxt = start + step   # MLX forms start + step in double, then converts it to T
    if dtype in INTS:
        a, b = _to_int(start, dtype), _to_int(nxt, dtype)
        if a is None or b is None:
            return None
        return a, b - a, 0.0, 0.0   # the kernel wraps like the sequential sum does
    bits = FLOAT_BITS.get(dtype)
    if bits is None:
        return None
    a, b = _scaled(start), _scaled(nxt)
    if a is None or b is None:
        return None
    d = b - a
    last = a + (n - 1) * d
    # every value a + i*d is a multiple of g (the largest power of two dividing a and d)
    # and at most max(|a|, |last|) in magnitude: below 2^bits * g all of them, and step'
    # itself, are exact in T, so no partial sum of the accumulation rounds
    g = (a | d) & -(a | d) if (a or d) else 1
    if max(abs(a), abs(last)) >= (g << bits) or _significant(d) > bits:
        return None
    if max(abs(a), abs(last)) * 2.0 ** -_FINEST > _FLOAT_MAX[dtype]:
        return None
    return 0, 0, a * 2.0 ** -_FINEST, d * 2.0 ** -_FINEST


_FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3e38, "float32": 3.4e38, "float64": 1.7e308}


def plan_arange(node, device):
    if node.ins or len(node.outs) != 1 or len(node.params) != 3:
        return None
    o = node.out
    start, _stop, step = (float(v) for v in node.params)
    n = o.size
    if o.ndim != 1:
        return None
    if n == 0:
        return Plan(())
    got = arange_values(start, step, n, o.dtype)
    if got is None:
        return None
    return Plan((_arange_launch(o.dtype, n, *got, device),))


# ---- NumberOfElements -------------------------------------------------------------------
def plan_number_of_elements(node, device):
    if len(node.ins) != 1 or len(node.outs) != 1 or len(node.params) != 3:
        return None
    (x,), o = node.ins, node.out
    axes, inverted, _dt = node.params
    if o.size != 1:
        return None
    count = 1.0   # MLX counts in double
    for ax in axes:
        ax = int(ax)
        if not -x.ndim <= ax < x.ndim:
            return None
        count *= x.shape[ax]
    if inverted:
        count = 1.0 / count if count else math.inf
    if o.dtype in INTS:
        v = _to_int(count, o.dtype)
        if v is None:
            return None
        return Plan((_arange_launch(o.dtype, 1, v, 0, 0.0, 0.0, device),))
    if o.dtype in FLOAT_BITS:
        # the kernel's double -> T conversion is MLX's (float64 -> 16-bit through float32)
        return Plan((_arange_launch(o.dtype, 1, 0, 0, count, 0.0, device),))
    return None


_PLANNERS = {
    "Select": plan_select, "Concatenate": plan_concatenate, "Pad": plan_pad,
    "Arange": plan_arange, "NumberOfElements": plan_number_of_elements,
}


def plan_node(node, device):
    fn = _PLANNERS.get(node.prim)
    if fn is None:
        return None
    try:
        return fn(node, device)
    except (TypeError, ValueError):   # malformed parameters: MLX's CPU runs the node
        return None
