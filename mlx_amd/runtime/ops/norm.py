"""Norm launcher: our mlx_amd::RMSNorm and mlx_amd::LayerNorm (mx.fast.rms_norm and
layer_norm while enabled; src/bridge/fast.h) over the last axis (hip_kernels/norm.hip).

Inputs: x, then the weight and the bias when present (both already in the output
dtype: the bridge casts them as MLX does). Covered: x float32/float16/bfloat16 with the
output x's dtype or float32; rows of any uniform stride (the outer dimensions collapse
to one) whose items are contiguous, other row layouts through a row-contiguous copy first;
weight and bias contiguous. Anything else (float64, integer x, strided items): None, MLX's
decomposition on the CPU.
Statistics in float32; roundings as MLX's decomposition (see norm.hip).
"""

from __future__ import annotations

import struct

from .. import kernel_table as kt
from .. import plan as _plan
from ..launch import Launch
from ..plan import Plan, inp, out, tmp, twin_launch
from . import copy as copy_family
from . import elementwise as ew

FAMILY = "norm"
PRIMITIVES = {"mlx_amd::RMSNorm": "rms", "mlx_amd::LayerNorm": "ln"}

# An Add whose sum feeds an RMSNorm (a transformer block's residual, then the next norm) may
# run with it as one launch (plan_siblings): one launch and one read of the sum fewer
PAIRS_AFTER = {"Add": ("mlx_amd::RMSNorm",)}
TWINS = ("mlx_amd::RMSNorm",)

MAX_BLOCK = 512
_ARGS = struct.Struct("<qqiifi")         # NormArgs after its four pointers
ARG_SIZE = 32 + _ARGS.size
ARG_FIELDS = {"x": 0, "w": 8, "b": 16, "out": 24, "rows": 32, "row_stride": 40, "n": 48,
              "flags": 52, "eps": 56, "pad": 60}
_ADD_ARGS = struct.Struct("<qiifi")     # NormAddArgs after its five pointers
ADD_ARG_SIZE = 40 + _ADD_ARGS.size
INT32_MAX = (1 << 31) - 1


def _table():
    return kt.table(FAMILY)


def pack_args(rows, row_stride, n, flags, eps) -> bytes:
    return _ARGS.pack(rows, row_stride, n, flags, eps, 0)


def choose(n: int, x_itemsize: int, out_itemsize: int, wave: int, rows: int = 0, cus: int = 0):
    """(layout, threads per block) for rows of n elements. Many rows: REG_GROUPS groups a
    thread (fewer threads, more blocks per CU). Fewer rows than CUs (a decode step's one
    row): a group a thread, up to MAX_BLOCK, since the block's latency is the kernel's
    (one load in flight per thread, a shorter reduction, the weight prefetched whole)."""
    v = 16 // max(x_itemsize, out_itemsize)
    groups = -(-n // v)
    k = _table().REG_GROUPS
    if groups <= MAX_BLOCK * k:
        t = groups if rows < cus else -(-groups // k)
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
    pre, temps, x_ref = (), (), inp(0)
    if rs is None:
        # rows at no uniform stride (Gemma 3 normalises q and k after their transpose: a
        # (B, H, L, D) view of (B, L, H, D)): copied row-contiguous first, one launch more
        # instead of MLX's decomposition on the CPU
        cp = copy_family.copy_to(x, inp(0), tmp(0), device)
        if cp is None:
            return None
        pre, temps, x_ref, rs = (cp,), (x.nbytes,), tmp(0), n
    wave = _plan.wave_width(device)
    layout, threads = choose(n, x.itemsize, o.itemsize, wave, rows, _plan.compute_units(device))
    name = _table().kernel(kt, layout, op, x.dtype, o.dtype, wave)
    iw = 1 if has_w else 0
    ib = 1 + has_w if has_b else 0
    refs = (x_ref, inp(iw), inp(ib), out(0))
    flags = (1 if has_w else 0) | (2 if has_b else 0)
    tail = pack_args(rows, rs, n, flags, eps)
    return Plan(pre + (Launch(FAMILY, name, (rows, 1, 1), (threads, 1, 1), 0, 4, tail, refs=refs),), temps=temps)


def plan_siblings(nodes, device):
    """[Add, RMSNorm of the Add's output] as one launch (norm_r_rmsadd): the sum is written
    (later nodes read it: the residual) and normalised in the same pass, with the roundings
    of the two nodes. Only for same-shape row-contiguous operands of one float dtype, rows
    that fit the register layout, and the norm's output in that dtype; else None.
    [RMSNorm, RMSNorm] (TWINS): ``_twin``."""
    if len(nodes) == 2 and nodes[0].prim == nodes[1].prim == "mlx_amd::RMSNorm":
        return _twin(nodes, device)
    if len(nodes) != 2:
        return None
    got = add_rms(*nodes)
    if got is None:
        return None
    add, nrm = nodes
    h = add.out
    dt = h.dtype
    rows, n, eps, has_w = got
    wave = _plan.wave_width(device)
    layout, threads = choose(n, h.itemsize, h.itemsize, wave, rows, _plan.compute_units(device))
    if layout != "r":
        return None
    name = _table().add_kernel(kt, dt, wave)
    tail = _ADD_ARGS.pack(rows, n, 1 if has_w else 0, eps, 0)
    return Plan((Launch(FAMILY, name, (rows, 1, 1), (threads, 1, 1), 0, 5, tail, refs=_add_rms_refs(add, nrm, has_w)),))


def _add_rms_refs(add, nrm, has_w):
    """NormAddArgs' / RmsPro's pointers in a group plan of [Add, RMSNorm, ...]: the Add's two
    inputs, the norm's weight (its x is the Add's output: never read), the sum, the norm."""
    n_before = len(add.ins) + len(nrm.ins)
    return (inp(0), inp(1), inp(n_before - 1) if has_w else inp(0), out(0), out(1))


def add_rms(add, nrm):
    """(rows, n, eps, has weight) of an Add and the RMSNorm of its sum that one pass can
    compute (norm_r_rmsadd here, qmv_h2n's prologue in the quantized family): same-shape
    row-contiguous operands of one float dtype, the norm's output in it; else None."""
    if add.prim != "Add" or nrm.prim != "mlx_amd::RMSNorm":
        return None
    if len(add.ins) != 2 or len(add.outs) != 1 or len(nrm.outs) != 1:
        return None
    h, y = add.out, nrm.out
    dt = h.dtype
    if dt not in _table().ADD_DTYPES or h.ndim == 0 or h.size == 0:
        return None
    for lay in (add.ins[0], add.ins[1], nrm.ins[0]):
        if lay.dtype != dt or lay.shape != h.shape or not lay.row_contiguous:
            return None
    eps, has_w = float(nrm.params[0]), bool(nrm.params[1])
    if len(nrm.ins) != 1 + has_w or y.dtype != dt or y.shape != h.shape:
        return None
    n = h.shape[-1]
    rows = h.size // n
    if n > INT32_MAX or rows > INT32_MAX:
        return None
    if has_w and (nrm.ins[1].dtype != dt or nrm.ins[1].shape != (n,) or (n > 1 and nrm.ins[1].strides[0] != 1)):
        return None
    return rows, n, eps, has_w


_PRO_SHAPE = struct.Struct("<fi")     # RmsProShape (norm_args.h)


def chain_head(nodes):
    """The pair at the head of a chain (the evaluator's CHAINS: [Add, RMSNorm of its sum,
    projections of the norm's output...]) that a matrix-vector kernel's RMS norm prologue can
    make (norm_args.h: RmsPro; one row): (the norm's output, inputs of the pair, RmsPro's
    references, RmsProShape) or None."""
    if len(nodes) < 3:
        return None
    add, nrm = nodes[:2]
    got = add_rms(add, nrm)
    if got is None or got[0] != 1:
        return None
    _rows, _n, eps, has_w = got
    return nrm.out, len(add.ins) + len(nrm.ins), _add_rms_refs(add, nrm, has_w), _PRO_SHAPE.pack(eps, 1 if has_w else 0)


def with_prologue(head, lau: Launch, kernel: str, shared_mem: int) -> Launch:
    """A chain's projections launch ``lau`` (planned on the projections alone) as the launch
    of its prologue variant ``kernel``: RmsPro's pointers first, the projections' references
    after the pair's inputs and outputs, RmsProShape after their tail."""
    _y, n_before, refs, shape = head
    return Launch(lau.family, kernel, lau.grid, lau.block, shared_mem, len(refs) + lau.n_ptrs, lau.tail + shape,
                  refs + _plan.regroup(lau.refs, n_before, 2))


def _twin(nodes, device):
    """Two RMS norms (an attention's q and k norms) as one launch of the twin kernel, a
    block per row of each (grid y picks the norm): where each alone is one register-layout
    launch of the same kernel geometry with its output in x's dtype."""
    plans = [plan_node(n, device) for n in nodes]
    if any(p is None or len(p.steps) != 1 or p.temps for p in plans):
        return None
    (a,), (b,) = plans[0].steps, plans[1].steps
    dt = nodes[0].ins[0].dtype
    wave = _plan.wave_width(device)
    if a.kernel != b.kernel or a.block != b.block or a.kernel != _table().kernel(kt, "r", "rms", dt, dt, wave):
        return None
    name = _table().twin_kernel(kt, dt, wave)
    if not kt.has_kernel(FAMILY, name):
        return None
    return Plan((twin_launch(name, a, b, len(nodes[0].ins)),))
