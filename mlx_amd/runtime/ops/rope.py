"""Rope launcher: our mlx_amd::RoPE (mx.fast.rope while enabled; src/bridge/fast.h) on
hip_kernels/rope.hip.

Inputs: x, the int32 offset (0-d, or one per batch), and float32 freqs when given.
Covered: x float32/float16/bfloat16 of 3+ dimensions with any strides (MLX's usual
input is a transposed (B, L, H, D) -> (B, H, L, D) view) as long as the dimensions
between the batch and the sequence axes collapse to one stride; both layouts
(traditional or not), dims < D (the tail passes through), given frequencies, scale.
The output is row-contiguous. Anything else: None (MLX's decomposition on the CPU).
Two RoPE nodes with equal parameters whose inputs are there together (an attention's q
and k, TWINS) run as one launch of the twin kernel (``plan_siblings``); when the k and v
cache writes (twin SliceUpdates, the first writing the second rotation) follow, the four
run as one launch of the rope_kv kernel (TWIN_CHAINS_AFTER): a decode step's rotations and
cache writes in one launch instead of two.
"""

from __future__ import annotations

import dataclasses
import math
import struct

from .. import kernel_table as kt
from ..launch import Launch
from ..plan import Plan, inp, out, regroup, row_strides, twin_launch
from . import elementwise as ew

FAMILY = "rope"
PRIMITIVES = {"mlx_amd::RoPE": "rope"}
TWINS = ("mlx_amd::RoPE",)
TWIN_CHAINS_AFTER = {"mlx_amd::RoPE": ("SliceUpdate",)}

BLOCK = 256
MAX_GRID = 1 << 20
# work items that fill the GPU (H200: 132 SMs x 2048 threads = 270k); with more than
# this many (position, pair, head) items, items take several heads each and compute the
# angle once for them (exp, cos, sin cost more than the pair's bytes)
FILL_ITEMS = 1 << 17
_ARGS = struct.Struct("<qqqqq9iffi")     # RopeArgs after its four pointers
ARG_SIZE = 32 + _ARGS.size
TWIN_ARG_SIZE = 32 + ARG_SIZE + _ARGS.size   # the second's pointers, RopeArgs, the second's shape
_KV_ARGS = struct.Struct("<8q4i")        # RopeKvShape
KV_ARG_SIZE = 56 + ARG_SIZE + _ARGS.size + _KV_ARGS.size   # 7 pointers, RopeArgs, RopeShape, RopeKvShape
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
    be one launch of the same dtype's kernel. Four nodes: the two, then the k and v cache
    writes (``plan_rope_kv``)."""
    if len(nodes) == 4:
        return plan_rope_kv(nodes, device)
    ab = _alone(nodes, device)
    if ab is None:
        return None
    return Plan((twin_launch(kt.table(FAMILY).twin(kt, nodes[0].ins[0].dtype), *ab, len(nodes[0].ins)),))


def _alone(nodes, device):
    """The single launches of two RoPE nodes planned alone, when both are one launch of the
    same kernel (what a twin or rope_kv launch combines), else None."""
    if len(nodes) != 2 or any(n.prim not in PRIMITIVES for n in nodes):
        return None
    plans = [plan_node(n, device) for n in nodes]
    if any(p is None or len(p.steps) != 1 for p in plans):
        return None
    (a,), (b,) = plans[0].steps, plans[1].steps
    return (a, b) if a.kernel == b.kernel else None


def plan_rope_kv(nodes, device):
    """q's and k's RoPE, then the k and v cache writes (the evaluator's twin chain: two
    SliceUpdates with equal parameters, the first writing the second rotation's output, as
    mlx-lm's KVCache does) as one launch of the rope_kv kernel: grid y 0 rotates q, 1
    rotates k into its output and the k cache's slot, 2 copies v into the v cache's slot.
    Donation, the copies of caches that cannot be donated and the written ranges are the
    cache writes' own (indexing's twin plan). None unless the writes are plain 4-D slot
    writes of the whole rotated k and a v of its shape, on caches of one shape."""
    from . import indexing

    rq, rk, wk, wv = nodes
    if wk.prim != "SliceUpdate" or wv.prim != "SliceUpdate" or len(wk.ins) != 2 or len(wv.ins) != 2:
        return None
    ab = _alone([rq, rk], device)
    writes = indexing.plan_siblings([wk, wv], device)
    if ab is None or writes is None:
        return None
    qa, ka = ab     # q's launch (its RopeArgs), k's (its pointers and shape)
    kout, kupd, vupd, cache = rk.out, wk.ins[1], wv.ins[1], wk.out
    dt = kout.dtype
    if kout.ndim != 4 or kupd.shape != kout.shape or vupd.shape != kout.shape or cache.ndim != 4 \
            or {kupd.dtype, vupd.dtype, cache.dtype, wv.out.dtype} != {dt}:
        return None
    rtype, start, _stop, steps = wk.params
    if indexing.REDUCE.get(int(rtype), "?") is not None:   # a plain write, no reduction
        return None
    orow = row_strides(cache.shape)
    slot = [r * int(st) for r, st in zip(orow, steps)]
    if slot[3] != 1:
        return None
    base = sum(int(a) * r for a, r in zip(start, orow)) * kout.itemsize
    B, H, L, D = kout.shape
    nq, nk = len(rq.ins), len(rk.ins)
    v_in = nq + nk + 2 + 1          # v: the second write's update
    kv = _KV_ARGS.pack(slot[0], slot[1], slot[2], *vupd.strides, B * H * L * D, H, L, D, 0)
    name = kt.table(FAMILY).kv(kt, dt)
    if not kt.has_kernel(FAMILY, name):
        return None
    # k's refs as the group's second (x, offset, freqs, out 1), the slots in outputs 2 and 3
    k_refs = regroup(ka.refs, nq, 1)
    refs = k_refs + (out(2, base), inp(v_in), out(3, base)) + qa.refs
    grid = max(qa.grid[0], ka.grid[0], min(MAX_GRID, -(-(B * H * L * D) // BLOCK)))
    launch = Launch(FAMILY, name, (grid, 3, 1), qa.block, 0, len(refs), qa.tail + ka.tail + kv, refs=refs)
    shift = nq + nk
    init = tuple((j + 2, tuple(dataclasses.replace(st, refs=regroup(st.refs, shift, 2)) for st in steps_))
                 for j, steps_ in writes.init)
    donate = tuple((oj + 2, ii + shift) for oj, ii in writes.donate)
    written = (None, None) + tuple(writes.written) if writes.written is not None else None
    return Plan((launch,), donate=donate, init=init, written=written)
