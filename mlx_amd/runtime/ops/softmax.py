"""Softmax launcher: MLX's Softmax and LogSumExp along the last axis
(hip_kernels/softmax.hip).

Numerics. float16/bfloat16 compute in float32 whatever ``precise`` says, float32 in
float32, float64 in float64 with MLX's float exp. MLX 0.32.4's x86 CPU build computes a
non-precise 16-bit softmax in the 16-bit type, one element after the other, so its
normaliser stalls on long rows (a bf16 row of 32768 normal values sums to ~8 there); we
give the float32 result instead, which is what ``precise=True`` and MLX's GPU backends
give. exp(x - max) is the hardware exp2 of an fma for the float types (within a few ulp
of MLX's CPU polynomial; its ~16 instructions twice per element made these kernels
compute-bound), and MLX's own polynomial for float64, which matches MLX to the rounding
of the sum.
Special values as MLX: NaN in a row -> NaN row (logsumexp NaN); a row whose max is not
finite (all -inf, or any +inf) -> NaN row for softmax, that max for logsumexp.

Layouts: rows must run along the last axis, which may have any stride (0 and transposed
inputs read element by element); the outer dimensions may have any strides. The output
is row-contiguous. Row length picks the kernel: a wave per row holding the row in
registers, a block per row holding it in registers, or a looped block per row.
"""

from __future__ import annotations

import math
import struct

from .. import kernel_table as kt
from .. import plan as _plan
from ..launch import Launch
from ..plan import Plan
from . import elementwise as ew

FAMILY = "softmax"
PRIMITIVES = {"Softmax": "softmax", "LogSumExp": "logsumexp"}

MAX_DIMS = 8              # MLXA_SOFTMAX_MAX_DIMS
WAVE_BLOCK = 256          # threads per block of the wave-per-row kernels
ROW_BLOCK = 512           # most threads per block of the block-per-row kernels
MAX_N = 1 << 30           # longer rows: fallback (32-bit in-row indices with headroom)
MAX_ROWS = (1 << 31) - 1  # grid.x limit

_ARGS = struct.Struct(f"<qq{MAX_DIMS}q{MAX_DIMS}iii")
ARG_SIZE = 16 + _ARGS.size   # two pointers, then the tail
ARG_FIELDS = {"in": 0, "out": 8, "rows": 16, "elem_stride": 24, "row_strides": 32,
              "row_shape": 32 + 8 * MAX_DIMS, "ndim": 32 + 12 * MAX_DIMS, "n": 36 + 12 * MAX_DIMS}


def _table():
    return kt.table(FAMILY)


def pack_args(rows, elem_stride, row_shape, row_strides, n) -> bytes:
    """The tail of SoftmaxArgs (after the two pointers); dims innermost first."""
    nd = len(row_shape)
    shape = list(reversed(row_shape)) + [1] * (MAX_DIMS - nd)
    strides = list(reversed(row_strides)) + [0] * (MAX_DIMS - nd)
    return _ARGS.pack(rows, elem_stride, *strides, *shape, nd, n)


def choose(op: str, n: int, itemsize: int, wave: int):
    """(layout, threads per block, rows per block) for rows of n elements."""
    groups = -(-n // (16 // itemsize))
    if groups <= 2 * wave:
        return "w2", WAVE_BLOCK, WAVE_BLOCK // wave
    if groups <= 8 * wave:
        return "w8", WAVE_BLOCK, WAVE_BLOCK // wave

    def threads(k):
        t = -(-groups // k)
        return min(ROW_BLOCK, -(-t // wave) * wave)

    if op == "softmax":
        if groups <= 2 * ROW_BLOCK:
            return "b2", threads(2), 1
        if groups <= 8 * ROW_BLOCK:
            return "b8", threads(8), 1
    return "l", threads(4), 1


def plan(op: str, x, out, device):
    t = _table()
    if x.dtype not in t.DTYPES or out.dtype != x.dtype or x.ndim == 0:
        return None
    n = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    if op == "softmax":
        if out.shape != x.shape:
            return None
    elif out.size != rows or out.shape not in (x.shape[:-1], x.shape[:-1] + (1,)):
        return None
    if rows == 0 or (n == 0 and op == "softmax"):
        return Plan(())                       # nothing to compute
    if n == 0 or n > MAX_N or rows > MAX_ROWS:
        return None
    elem_stride = x.strides[-1] if n > 1 else 1
    rshape, (rstrides,) = ew.collapse_dims(x.shape[:-1], x.strides[:-1])
    if len(rshape) > MAX_DIMS:
        return None
    wave = _plan.wave_width(device)
    layout, block, per_block = choose(op, n, x.itemsize, wave)
    name = t.kernel(kt, layout, op, x.dtype, wave)
    grid = -(-rows // per_block)
    tail = pack_args(rows, elem_stride, rshape, rstrides, n)
    return Plan((Launch(FAMILY, name, (grid, 1, 1), (block, 1, 1), 0, 2, tail),),
                donate=((0, 0),) if op == "softmax" else ())


def plan_node(node, device):
    op = PRIMITIVES.get(node.prim)
    if op is None or len(node.ins) != 1 or len(node.outs) != 1:
        return None
    return plan(op, node.ins[0], node.out, device)
