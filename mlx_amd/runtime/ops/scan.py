"""Scan launcher: MLX's Scan primitive (cumsum, cumprod, cummax, cummin, logcumsumexp;
inclusive/exclusive, forward/reverse, any axis) through hip_kernels/scan.hip.

Semantics follow MLX 0.32.4's CPU loop (see scan.hip): exclusive scans start from 0, 1,
-inf/+inf (floats) or the integer limits (max/min), -inf (logaddexp); integers wrap;
bool sums give int32 (MLX's output dtype, read from the node). One deliberate
difference: float16/bfloat16 accumulate in float32 and round once per output, where
MLX's CPU rounds the running value to 16 bits after every element and stalls on long
scans (a float16 cumsum of ones stops at 2048, bfloat16 at 256); on exactly
representable partial results both agree bit for bit. complex64 goes to MLX's CPU.

Layouts: when the scan axis is the output's innermost (every later dim is 1) the row
kernel runs (any input strides: dense rows read 16 bytes at a time); otherwise the
column kernel, one thread per position of the other axes walking the axis in order
(also float64 logaddexp on rows: MLX's float-accurate exp makes its float64 result
depend on the combination order, so only its sequential order matches it). Rows longer than a
tile split into chunks of one block's tile scanned in one pass (decoupled look-back: each block
publishes its chunk's total and takes its prefix from the chunks before it); SINGLE_PASS = False
keeps the two-pass variant for few long rows (a totals launch, then a scan launch that folds the
totals before each chunk) and a block per row for many.
"""

from __future__ import annotations

import math
import struct

from .. import kernel_table as kt
from .. import plan as _plan
from ..launch import Launch
from ..plan import ITEMSIZE, Plan, inp, out as _out, tmp
from . import elementwise as ew

FAMILY = "scan"
PRIMITIVES = {"Scan": "scan"}

MAX_DIMS = 8                 # MLXA_SCAN_MAX_DIMS
WAVE_BLOCK = 256             # row kernel, a wave per row
# row kernel, a block per row (chunk); 256 is measured beside it (tools/scan_variants.py,
# "-rb256"): the kernel holds 64 registers a thread on sm_90 either way (2 blocks of 512 or
# 4 of 256 an SM), smaller blocks wait at a tile's barrier in smaller groups
ROW_BLOCK = 512
# MLXA_SCAN_ROW_GROUPS(v): 16-byte groups per row-kernel thread per tile, by elements per group
ROW_GROUPS = {4: 4, 2: 2, 8: 2, 16: 1}
WAVE_ROW_GROUPS = 4          # rows of at most this many groups per lane take a wave each
STATE_BYTES = 16             # MLXA_SCAN_STATE_BYTES: sizeof(State<A>) rounded up for every accumulator
STATUS_HEAD = 16             # MLXA_SCAN_STATUS_HEAD: the look-back ticket, padded
MAX_GRID = (1 << 31) - 1

REVERSE, INCLUSIVE, WAVE_ROWS = 1, 2, 4          # MLXA_SCAN_* flags
FULL, TOTALS, CARRIED, CLEAR, LOOKBACK = 0, 1, 2, 3, 4   # MLXA_SCAN_* modes
# few long rows: one pass with decoupled look-back (True) or two (chunk totals, then carried)
SINGLE_PASS = True
# look-back blocks: threads (a tile is this x elements per 16 bytes x ROW_GROUPS), and whether
# many rows longer than a tile take it too (else a block per row walks the row's tiles)
# Measured on an H100 (benchmarks/results/scan_variants-h100.txt): for few long rows the
# look-back reaches 0.66-0.67 of the copy bandwidth (two passes 0.45-0.49, torch.cumsum
# 0.69); for many rows a block per row is ahead (0.64-0.80 against 0.39-0.75).
LOOKBACK_BLOCK = 256
LOOKBACK_MANY_ROWS = False

_ARGS = struct.Struct(f"<5q{MAX_DIMS}q{MAX_DIMS}i4i")
ARG_SIZE = 24 + _ARGS.size
ARG_FIELDS = {"in": 0, "out": 8, "totals": 16, "rows": 24, "n": 32, "elem_stride": 40,
              "chunk": 48, "inner": 56, "strides": 64, "shape": 64 + 8 * MAX_DIMS,
              "ndim": 64 + 12 * MAX_DIMS, "nchunks": 68 + 12 * MAX_DIMS,
              "flags": 72 + 12 * MAX_DIMS, "mode": 76 + 12 * MAX_DIMS}

_NAMES = {"Max": "max", "Min": "min", "Sum": "sum", "Prod": "prod", "LogAddExp": "logaddexp"}


def _table():
    return kt.table(FAMILY)


def pack_args(rows, n, elem_stride, chunk, inner, shape, strides, nchunks, flags, mode) -> bytes:
    """The tail of ScanArgs (after the three pointers); dims innermost first."""
    nd = len(shape)
    sh = list(reversed(shape)) + [1] * (MAX_DIMS - nd)
    st = list(reversed(strides)) + [0] * (MAX_DIMS - nd)
    return _ARGS.pack(rows, n, elem_stride, chunk, inner, *st, *sh, nd, nchunks, flags, mode)


def op_name(reduce_type):
    t = _table()
    if isinstance(reduce_type, str):
        return _NAMES.get(reduce_type.split("::")[-1])
    return t.REDUCE_TYPES.get(int(reduce_type))


def plan_node(node, device):
    if node.prim != "Scan" or len(node.ins) != 1 or len(node.outs) != 1 or len(node.params) != 4:
        return None
    reduce_type, axis, reverse, inclusive = node.params
    return plan(op_name(reduce_type), int(axis), bool(reverse), bool(inclusive), node.ins[0], node.out, device)


def plan(op, axis, reverse, inclusive, x, out, device):
    t = _table()
    if op is None or x.ndim == 0 or x.shape != out.shape:
        return None
    pair = t.kernel_dtypes(op, x.dtype, out.dtype)
    if pair is None:
        return None
    if not -x.ndim <= axis < x.ndim:
        return None
    axis %= x.ndim
    if out.size == 0:
        return Plan(())
    n = x.shape[axis]
    inner = math.prod(x.shape[axis + 1:])
    oshape = x.shape[:axis] + x.shape[axis + 1:]
    ostrides = x.strides[:axis] + x.strides[axis + 1:]
    cshape, (cstrides,) = ew.collapse_dims(oshape, ostrides)
    if len(cshape) > MAX_DIMS:
        return None
    count = out.size // n              # rows (row kernel) or columns (column kernel)
    elem_stride = x.strides[axis] if n > 1 else 1
    flags = (REVERSE if reverse else 0) | (INCLUSIVE if inclusive else 0)
    src, dst = pair
    # float64 logaddexp: MLX's exp is float-accurate, so only MLX's own (sequential)
    # order reproduces its float64 results; the column kernel walks each row in order
    if inner != 1 or (op == "logaddexp" and src == "float64"):
        name = t.col_kernel(kt, op, src, dst)
        grid, block = ew.grid_for(count, device)
        tail = pack_args(count, n, elem_stride, n, inner, cshape, cstrides, 1, flags, FULL)
        return Plan((Launch(FAMILY, name, grid, block, 0, 3, tail, refs=(inp(0), _out(0), _out(0))),))

    wave = _plan.wave_width(device)
    name = t.row_kernel(kt, op, src, dst, wave)
    v = 16 // max(ITEMSIZE[src], ITEMSIZE[dst])
    if n <= WAVE_ROW_GROUPS * wave * v:
        per_block = WAVE_BLOCK // wave
        grid = -(-count // per_block)
        if grid > MAX_GRID:
            return None
        tail = pack_args(count, n, elem_stride, n, 1, cshape, cstrides, 1, flags | WAVE_ROWS, FULL)
        return Plan((Launch(FAMILY, name, (grid, 1, 1), (WAVE_BLOCK, 1, 1), 0, 3, tail,
                            refs=(inp(0), _out(0), _out(0))),))
    groups = -(-n // v)
    k = ROW_GROUPS[v]
    block = min(ROW_BLOCK, -(-(-(-groups // k)) // wave) * wave)
    tile = ROW_BLOCK * v * k
    cus = _plan.compute_units(device)
    nchunks = 1
    if count < 2 * cus and n > 4 * tile:
        want = -(-4 * cus // count)
        chunk = -(-(-(-n // want)) // tile) * tile
        nchunks = -(-n // chunk)
    lb_tile = LOOKBACK_BLOCK * v * k
    if (SINGLE_PASS and n > lb_tile and (nchunks > 1 or LOOKBACK_MANY_ROWS)
            and count * -(-n // lb_tile) < MAX_GRID):
        # measured on the H200 (benchmarks/results/scan_variants-h200.txt)
        return _plan_lookback(name, count, n, elem_stride, cshape, cstrides, flags, LOOKBACK_BLOCK, lb_tile,
                              device)
    if nchunks == 1 or count * nchunks > MAX_GRID:
        if count > MAX_GRID:
            return None
        tail = pack_args(count, n, elem_stride, n, 1, cshape, cstrides, 1, flags, FULL)
        return Plan((Launch(FAMILY, name, (count, 1, 1), (block, 1, 1), 0, 3, tail,
                            refs=(inp(0), _out(0), _out(0))),))
    refs = (inp(0), _out(0), tmp(0))
    steps = tuple(
        Launch(FAMILY, name, (count * nchunks, 1, 1), (ROW_BLOCK, 1, 1), 0, 3,
               pack_args(count, n, elem_stride, chunk, 1, cshape, cstrides, nchunks, flags, mode), refs=refs)
        for mode in (TOTALS, CARRIED))
    return Plan(steps, temps=(count * nchunks * STATE_BYTES,))


def _plan_lookback(name, count, n, elem_stride, cshape, cstrides, flags, block, tile, device):
    """Rows longer than a tile in one pass: chunks of one block's tile (``block`` threads),
    each block's prefix from the chunks before it (decoupled look-back); a first launch of
    the same kernel clears the status the second one publishes through (see scan_args.h
    and scan.hip: flags and 16-byte states, or one 64-bit word a chunk for 4-byte states)."""
    nchunks = -(-n // tile)
    slots = count * nchunks
    status = STATUS_HEAD + -(-slots * 4 // 16) * 16 + 2 * slots * STATE_BYTES
    words = STATUS_HEAD // 4 + 2 * slots
    clear_grid = min(-(-words // ROW_BLOCK), 4 * _plan.compute_units(device))
    refs = (inp(0), _out(0), tmp(0))
    return Plan((
        Launch(FAMILY, name, (clear_grid, 1, 1), (ROW_BLOCK, 1, 1), 0, 3,
               pack_args(count, n, elem_stride, tile, 1, cshape, cstrides, nchunks, flags, CLEAR), refs=refs),
        Launch(FAMILY, name, (slots, 1, 1), (block, 1, 1), 0, 3,
               pack_args(count, n, elem_stride, tile, 1, cshape, cstrides, nchunks, flags, LOOKBACK), refs=refs),
    ), temps=(status,))
