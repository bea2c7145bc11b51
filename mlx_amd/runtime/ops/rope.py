"""Rope launcher: our mlx_amd::RoPE (mx.fast.rope while enabled; src/bridge/fast.h) on
hip_kernels/rope.hip.

Inputs: x, the int32 offset (0-d, or one per batch), and float32 freqs when given.
Covered: x float32/float16/bfloat16 of 3+ dimensions with any strides (MLX's usual
input is a transposed (B, L, H, D) -> (B, H, L, D) view) as long as the dimensions
between the batch and the sequence axes collapse to one stride; both layouts
(traditional or not), dims < D (the tail passes through), given frequencies, scale.
The output is row-contiguous. Anything else: None (MLX's decomposition on the CPU).
Two RoPE nodes with equal parameters whose inputs are there together (an attention's q
and k, TWINS) run as one launch of the twin kernel (``plan_siblings``).
"""

from __future__ import annotations

import math
import struct

from .. import kernel_table as kt
from ..launch import Launch
from ..plan import Plan, inp, out, twin_launch
from . import elementwise as ew

FAMILY = "rope"
PRIMITIVES = {"mlx_amd::RoPE": "rope"}
TWINS = ("mlx_amd::RoPE",)

BLOCK = 256
MAX_GRID = 1 << 20
# work items that fill the GPU (H200: 132 SMs x 2048 threads = 270k); with more than
# this many (position, pair, head) items, items take several heads each and compute the
# angle once for them (exp, cos, sin cost more than the pair's bytes)
FILL_ITEMS = 1 << 17
_ARGS = struct.Struct("<qqqqq9iffi")     # RopeArgs after its four pointers
ARG_SIZE = 32 + _ARGS.size
TWIN_ARG_SIZE = 32 + ARG_SIZE + _ARGS.size   # the second's pointers, RopeArgs, the second's shape
ARG_FIELDS = {"x": 0, "offset": 8, "freqs": 16, "out": 24, "stride_b": 32, "stride_n": 40,
              "stride_l": 48, "stride_d": 56, "total": 64, "n_heads": 72, "seq": 76, "d": 80,
              "half": 84, "items": 88, "offset_stride": 92, "freqs_stride": 96,
              "traditional": 100, "has_freqs": 104, "scale": 108, "inv_freq_log": 112, "head_chunk": 116}
INT32_MAX = (1 << 31) - 1


def f32(v: float) -> float:
    return struct.unpack("<f", struct.pack("<f", v))[0]


def inv_freq_log(base: float, half: int) -> float:
    """log(base) / half as MLX computes it: float32 log of the float32 base, divided in
    float32."""
    if base <= 0:
        return float("nan") if base < 0 else float("-inf")
    return f32(f32(math.log(f32(base))) / half)


def pack_args(strides, total, n_heads, seq, d, half, items, offset_stride, freqs_stride,
              traditional, has_freqs, scale, ifl, head_chunk=1) -> bytes:
    return _ARGS.pack(*strides, total, n_heads, seq, d, half, items, offset_stride, freqs_stride,
                      int(traditional), int(has_freqs), scale, ifl, head_chunk)


def head_chunk(B, N, L, items) -> int:
    """Heads per work item: 1 (most parallel) until there are enough items to fill the GPU."""
    return max(1, min(N, (B * N * L * items) // FILL_ITEMS))


def plan_node(node, device):
    if node.prim not in PRIMITIVES or len(node.outs) != 1:
        return None
    dims, traditional, base, scale, has_freqs = node.params
    dims, has_freqs = int(dims), bool(has_freqs)
    if len(node.ins) != 2 + has_freqs:
        return None
    x, off, o = node.ins[0], node.ins[1], node.out
    t = kt.table(FAMILY)
    if x.dtype not in t.DTYPES or o.dtype != x.dtype or o.shape != x.shape or x.ndim < 3:
        return None
    if off.dtype != "int32" or off.ndim > 1:
        return None
    if o.size == 0:
        return Plan(())
    B, L, D = x.shape[0], x.shape[-2], x.shape[-1]
    half = dims // 2
    if dims <= 0 or dims % 2 or dims > D:
        return None
    if off.size == 1:
        off_stride = 0
    elif off.size == B:
        off_stride = off.strides[0]
    else:
        return None
    fr_stride = 0
    if has_freqs:
        fr = node.ins[2]
        if fr.dtype != "float32" or fr.shape != (half,):
            return None
        fr_stride = fr.strides[0] if half > 1 else 0
    mshape, (mstr,) = ew.collapse_dims(x.shape[1:-2], x.strides[1:-2]) if x.ndim > 3 else ((1,), [(0,)])
    if len(mshape) != 1:
        return None
    N = mshape[0]
    stride_n = mstr[0] if N > 1 else 0
    items = half + (D - dims)
    hc = head_chunk(B, N, L, items)
    total = B * (-(-N // hc)) * L * items
    if max(abs(s) for s in x.strides) * max(x.shape) > (1 << 62) or D > INT32_MAX or L > INT32_MAX \
            or N > INT32_MAX:
        return None
    strides = (x.strides[0], stride_n, x.strides[-2], x.strides[-1])
    ifl = 0.0 if has_freqs else inv_freq_log(float(base), half)
    tail = pack_args(strides, total, N, L, D, half, items, off_stride, fr_stride, bool(traditional),
                     has_freqs, f32(float(scale)), ifl, hc)
    grid = min(MAX_GRID, -(-total // BLOCK))
    refs = (inp(0), inp(1), inp(2 if has_freqs else 1), out(0))
    name = t.kernel(kt, x.dtype)
    return Plan((Launch(FAMILY, name, (grid, 1, 1), (BLOCK, 1, 1), 0, 4, tail, refs=refs),))


def plan_siblings(nodes, device):
    """Two RoPE nodes (TWINS: equal parameters, inputs there together) as one launch of the
    twin kernel, each rotation over its own blocks (grid y); None unless each alone would
    be one launch of the same dtype's kernel."""
    if len(nodes) != 2 or any(n.prim not in PRIMITIVES for n in nodes):
        return None
    plans = [plan_node(n, device) for n in nodes]
    if any(p is None or len(p.steps) != 1 for p in plans):
        return None
    (a,), (b,) = plans[0].steps, plans[1].steps
    if a.kernel != b.kernel:
        return None
    return Plan((twin_launch(kt.table(FAMILY).twin(kt, nodes[0].ins[0].dtype), a, b, len(nodes[0].ins)),))
