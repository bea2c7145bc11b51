"""Norm launcher: our mlx_amd::RMSNorm and mlx_amd::LayerNorm (mx.fast.rms_norm and
layer_norm while enabled; src/bridge/fast.h) over the last axis (hip_kernels/norm.hip).

Inputs: x, then the weight and the bias when present (both already in the output
dtype: the bridge casts them as MLX does). Covered: x float32/float16/bfloat16 with the
output x's dtype or float32; rows of any uniform stride (the outer dimensions collapse
to one) whose items are contiguous; weight and bias contiguous. Anything else (float64,
integer x, gathered rows, strided items): None, MLX's decomposition on the CPU.
Statistics in float32; roundings as MLX's decomposition (see norm.hip).
"""

from __future__ import annotations

import math
import struct

from .. import kernel_table as kt
from .. import plan as _plan
from ..launch import Launch
from ..plan import Plan, inp, out
from . import elementwise as ew

FAMILY = "norm"
PRIMITIVES = {"mlx_amd::RMSNorm": "rms", "mlx_amd::LayerNorm": "ln"}

MAX_BLOCK = 512
_ARGS = struct.Struct("<qqiifi")         # NormArgs after its four pointers
ARG_SIZE = 32 + _ARGS.size
ARG_FIELDS = {"x": 0, "w": 8, "b": 16, "out": 24, "rows": 32, "row_stride": 40, "n": 48,
              "flags": 52, "eps": 56, "pad": 60}
INT32_MAX = (1 << 31) - 1


def _table():
    return kt.table(FAMILY)


def pack_args(rows, row_stride, n, flags, eps) -> bytes:
    return _ARGS.pack(rows, row_stride, n, flags, eps, 0)


def choose(n: int, x_itemsize: int, out_itemsize: int, wave: int):
    """(layout, threads per block) for rows of n elements."""
    v = 16 // max(x_itemsize, out_itemsize)
    groups = -(-n // v)
    k = _table().REG_GROUPS
    if groups <= MAX_BLOCK * k:
        t = -(-groups // k)
        return "r", min(MAX_BLOCK, max(wave, -(-t // wave) * wave))
    return "l", MAX_BLOCK


def _row_stride(x):
    """Elements between row starts when every row is at a uniform stride, else None."""
    rshape, (rstr,) = ew.collapse_dims(x.shape[:-1], x.strides[:-1])
    if len(rshape) != 1:
        return None
    return rstr[0] if rshape[0] > 1 else 0


def plan_node(node, device):
    op = PRIMITIVES.get(node.prim)
    if op is None or len(node.outs) != 1:
        return None
    p = node.params
    eps, has_w = float(p[0]), bool(p[1])
    has_b = bool(p[2]) if op == "ln" else False
    if len(node.ins) != 1 + has_w + has_b:
        return None
    x, o = node.ins[0], node.out
    if (x.dtype, o.dtype) not in _table().PAIRS or x.ndim == 0 or o.shape != x.shape:
        return None
    if o.size == 0:
        return Plan(())
    n = x.shape[-1]
    rows = o.size // n
    if n > INT32_MAX or rows > INT32_MAX:
        return None
    if n > 1 and x.strides[-1] != 1:
        return None
    for lay in node.ins[1:]:
        if lay.dtype != o.dtype or lay.shape != (n,) or (n > 1 and lay.strides[0] != 1):
            return None
    rs = _row_stride(x)
    if rs is None:
        return None
    wave = _plan.wave_width(device)
    layout, threads = choose(n, x.itemsize, o.itemsize, wave)
    name = _table().kernel(kt, layout, op, x.dtype, o.dtype, wave)
    iw = 1 if has_w else 0
    ib = 1 + has_w if has_b else 0
    refs = (inp(0), inp(iw), inp(ib), out(0))
    flags = (1 if has_w else 0) | (2 if has_b else 0)
    tail = pack_args(rows, rs, n, flags, eps)
    return Plan((Launch(FAMILY, name, (rows, 1, 1), (threads, 1, 1), 0, 4, tail, refs=refs),))
