"""Hadamard launcher: MLX's Hadamard primitive (mx.hadamard_transform) along the last
axis, on hip_kernels/hadamard.hip.

MLX's definition (0.32.4 CPU): the row length n is m * 2^k with m in {1, 12, 20, 28}
(a power of two has m = 1, otherwise the first of 12, 20, 28 dividing n); the row, read
as an m x 2^k matrix X (X[i][p] = x[i * 2^k + p]), becomes scale * H_m X H_{2^k} with
H_{2^k} the Sylvester (natural order) matrix. The radix-2 stages run low index bits
first, the m stage sums over i in order from 0; a one-element row is just scaled. Rows
whose n / m is not a power of two (MLX accepts n = 36 and computes something that is not
a Hadamard transform) go to MLX's CPU fallback, as do
dtypes other than float32/float16/bfloat16 (MLX casts integers to float32 first).

Passes: a row of at most 4096 elements is one pass (a block holds whole rows). Longer
rows are split: the first pass transforms the low 12 bits of the 2^k index in contiguous
chunks, middle passes 9 more bits at a time (strided lines, 16 per block), the last pass
the remaining bits together with the m stage and the scale. Every element goes through
the same float32 operations in the same order as MLX's CPU loop, so float32 matches it
bit for bit; float16/bfloat16 go through a float32 buffer between passes and are rounded
once (MLX's CPU rounds after every stage: we are closer to the exact transform).
The input may have any strides; the output is row-contiguous.
"""

from __future__ import annotations

import math
import struct

from .. import kernel_table as kt
from ..launch import Launch
from ..plan import Plan, inp, out, tmp
from . import elementwise as ew

FAMILY = "hadamard"
PRIMITIVES = {"Hadamard": "hadamard"}

MAX_DIMS = 8          # MLXA_HADAMARD_MAX_DIMS
MAX_M = 28            # MLXA_HADAMARD_MAX_M
THREADS = 256         # mlxa::had::kThreads
SMEM = 8704           # mlxa::had::kSmem (floats)
ONE_PASS = 4096       # longest row done in one pass
FIRST_BITS = 12       # bits of the first of several passes (contiguous chunks)
MID_BITS = 9          # bits of a middle pass (strided lines)
STRIDED_LINES = 16    # lines per block of a strided pass
MAX_LINE = 512        # longest strided line
MAX_GRID = (1 << 31) - 1

# Sloane's matrices as MLX uses them (row j, column k; '+' is +1)
H = {
    12: ("+-++++++++++ --+-+-+-+-+- +++-++----++ +---+--+-++- +++++-++---- +-+---+--+-+ "
         "++--+++-++-- +--++---+--+ ++----+++-++ +--+-++---+- ++++----+++- +-+--+-++---"),
    20: ("+----+----++--++-++- -+----+---+++---+-++ --+----+---+++-+-+-+ ---+----+---+++++-+- "
         "----+----++--++-++-+ -+++++-----+--+++--+ +-+++-+---+-+--+++-- ++-++--+---+-+--+++- "
         "+++-+---+---+-+--+++ ++++-----++--+-+--++ --++-+-++-+-----++++ ---++-+-++-+---+-+++ "
         "+---++-+-+--+--++-++ ++---++-+----+-+++-+ -++---++-+----+++++- -+--+--++-+----+---- "
         "+-+-----++-+----+--- -+-+-+---+--+----+-- --+-+++------+----+- +--+--++------+----+"),
    28: ("+------++----++-+--+-+--++-- -+-----+++-----+-+--+-+--++- --+-----+++---+-+-+----+--++ "
         "---+-----+++---+-+-+-+--+--+ ----+-----+++---+-+-+++--+-- -----+-----++++--+-+--++--+- "
         "------++----++-+--+-+--++--+ --++++-+-------++--+++-+--+- ---++++-+-----+-++--+-+-+--+ "
         "+---+++--+----++-++--+-+-+-- ++---++---+----++-++--+-+-+- +++---+----+----++-++--+-+-+ "
         "++++--------+-+--++-++--+-+- -++++--------+++--++--+--+-+ -+-++-++--++--+--------++++- "
         "+-+-++--+--++--+--------++++ -+-+-++--+--++--+----+---+++ +-+-+-++--+--+---+---++---++ "
         "++-+-+-++--+------+--+++---+ -++-+-+-++--+------+-++++--- +-++-+---++--+------+-++++-- "
         "-++--++-+-++-+++----++------ +-++--++-+-++-+++-----+----- ++-++---+-+-++-+++-----+---- "
         "-++-++-+-+-+-+--+++-----+--- --++-++++-+-+----+++-----+-- +--++-+-++-+-+----+++-----+- "
         "++--++-+-++-+-+----++------+"),
}


def matrix(m: int):
    """H_m as rows of +1/-1 ints (m = 1: [[1]])."""
    if m == 1:
        return [[1]]
    return [[1 if ch == "+" else -1 for ch in row] for row in H[m].split()]


def row_masks(m: int) -> tuple:
    """hm[j]: bit k set where H_m[j][k] is +1 (zero-padded to MAX_M entries)."""
    masks = [sum(1 << k for k, v in enumerate(row) if v > 0) for row in matrix(m)]
    return tuple(masks) + (0,) * (MAX_M - len(masks))


def decompose(n: int):
    """(m, k) with n = m * 2^k as MLX decomposes it, or None where MLX's result is not a
    Hadamard transform (n / m not a power of two) or MLX refuses n."""
    if n <= 0:
        return None
    m = 1
    if n & (n - 1):
        m = next((f for f in (12, 20, 28) if n % f == 0), 0)
        if not m:
            return None
        n //= m
        if n & (n - 1):
            return None
    if n > (1 << 26):
        return None
    return m, n.bit_length() - 1


_ARGS = struct.Struct(f"<qqqqq{MAX_DIMS}q{MAX_DIMS}qiiif{MAX_M}I")
ARG_SIZE = 16 + _ARGS.size
ARG_FIELDS = {"in": 0, "out": 8, "lines": 16, "S": 24, "gpr": 32, "n": 40, "in_elem": 48,
              "in_shape": 56, "in_strides": 56 + 8 * MAX_DIMS, "nd": 56 + 16 * MAX_DIMS,
              "P": 60 + 16 * MAX_DIMS, "C": 64 + 16 * MAX_DIMS, "scale": 68 + 16 * MAX_DIMS,
              "hm": 72 + 16 * MAX_DIMS}


def pack_args(lines, S, gpr, n, in_elem, row_shape, row_strides, P, C, scale, m) -> bytes:
    """The tail of HadamardArgs (after the two pointers); row dims outermost first."""
    nd = len(row_shape)
    shape = list(reversed(row_shape)) + [1] * (MAX_DIMS - nd)
    strides = list(reversed(row_strides)) + [0] * (MAX_DIMS - nd)
    return _ARGS.pack(lines, S, gpr, n, in_elem, *shape, *strides, nd, P, C, scale, *row_masks(m))


def passes(m: int, k: int):
    """[(m of the pass, bits of P, low bit)] covering bits 0..k, m in the last pass."""
    if m << k <= ONE_PASS:
        return [(m, k, 0)]
    out_, lo = [(1, min(k, FIRST_BITS), 0)], min(k, FIRST_BITS)
    while True:
        r = k - lo
        if m << r <= MAX_LINE:
            if r or m > 1:
                out_.append((m, r, lo))
            return out_
        b = min(r, MID_BITS)
        out_.append((1, b, lo))
        lo += b


def _scale(params) -> float:
    p = params
    while isinstance(p, (tuple, list)):
        if len(p) != 1:
            raise ValueError(f"Hadamard state should be (scale,), got {params!r}")
        p = p[0]
    return float(p)


def plan(x, o, scale: float):
    tb = kt.table(FAMILY)
    if x.dtype not in tb.DTYPES or o.dtype != x.dtype or o.shape != x.shape or x.ndim == 0:
        return None
    n = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    if rows == 0 or n == 0:
        return Plan(())
    mk = decompose(n)
    if mk is None:
        return None
    m, k = mk
    rshape, (rstrides,) = ew.collapse_dims(x.shape[:-1], x.strides[:-1])
    if len(rshape) > MAX_DIMS:
        return None
    in_elem = x.strides[-1] if n > 1 else 1
    plist = passes(m, k)
    # float32 passes work in place in the output; 16-bit ones in a float32 buffer
    direct = x.dtype == "float32" or len(plist) == 1
    work = out(0) if direct else tmp(0)
    temps = () if direct else (rows * n * 4,)
    steps = []
    for idx, (pm, pbits, lo) in enumerate(plist):
        first, last = idx == 0, idx == len(plist) - 1
        P, S = 1 << pbits, 1 << lo
        R = pm * P
        lines = rows * n // R
        gpr = n // (R * S)
        C = max(1, ONE_PASS // R) if S == 1 else STRIDED_LINES
        C = min(C, lines)
        assert C * (R + 1) <= SMEM
        grid = -(-lines // C)
        if grid > MAX_GRID:
            return None
        src_dt = x.dtype if first else "float32"
        dst_dt = x.dtype if last else "float32"
        if first:
            tail = pack_args(lines, S, gpr, n, in_elem, rshape, rstrides, P, C,
                             scale if last else 1.0, pm)
        else:
            tail = pack_args(lines, S, gpr, n, 1, (rows,), (n,), P, C, scale if last else 1.0, pm)
        refs = (inp(0) if first else work, out(0) if last else work)
        steps.append(Launch(FAMILY, tb.kernel(kt, pm, src_dt, dst_dt), (grid, 1, 1),
                            (THREADS, 1, 1), 0, 2, tail, refs))
    return Plan(tuple(steps), temps=temps)


def plan_node(node, device):
    if node.prim not in PRIMITIVES or len(node.ins) != 1 or len(node.outs) != 1:
        return None
    try:
        scale = _scale(node.params)
    except (TypeError, ValueError):
        return None
    return plan(node.ins[0], node.out, scale)
