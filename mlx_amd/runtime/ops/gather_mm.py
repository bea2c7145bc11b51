"""GatherMM launcher: MLX's GatherMM primitive (mx.gather_mm; mlx-lm's SwitchGLU for
unquantized mixture-of-experts) on hip_kernels/gather_mm.hip.

Semantics (MLX 0.32.4): inputs a (..., M, K), b (..., K, N), lhs_indices and
rhs_indices (uint32, MLX casts them; both of the output's batch shape, possibly
broadcast). Output matrix i (row-major over the output batch shape) is
a[lhs[i]] @ b[rhs[i]], an index naming a matrix of a (b) by its flat position over a's
(b's) batch dimensions. ``state()`` is (left_sorted, right_sorted): hints only, the
result does not depend on them. An index past the last matrix is clamped to it (MLX's
CPU reads out of bounds).

dtypes: MLX's CPU evaluates float32 only; we also take float16 and bfloat16
(accumulating in float32, one rounding on store). Others: CPU fallback (MLX's error).
Layouts: any strides for a, b (transposed, broadcast, sliced) and the index arrays;
batch dimensions collapse to at most 8 each. Kernels: a wave per output column for
M <= 8 when b's columns run along K (a transposed weight, as SwitchLinear holds it)
or N == 1; the tiled kernel otherwise. K == 0 gives zeros, as MLX.
"""

from __future__ import annotations

import math
import struct

from .. import kernel_table as kt
from .. import plan as _plan
from ..launch import Launch
from ..plan import Memset, Plan, out
from . import elementwise as ew

FAMILY = "gather_mm"
PRIMITIVES = {"GatherMM": "gather_mm"}

MAX_DIMS = 8          # MLXA_GMM_MAX_DIMS
ROWS_WAVES = 4        # mlxa::gmm::kRowsWaves
ROWS_MAX_M = 8        # mlxa::gmm::kMaxM
TILE = 64             # mlxa::gmm::kTile
TILED_THREADS = 256   # mlxa::gmm::kThreads
MAX_GRID = (1 << 31) - 1

_ARGS = struct.Struct(f"<12q{7 * MAX_DIMS}q4i")
N_PTRS = 5
ARG_SIZE = 8 * N_PTRS + _ARGS.size
_Q = ("M", "N", "K", "a_rs", "a_cs", "b_rs", "b_cs", "batch", "a_mats", "b_mats", "tiles_n", "tiles_m")
_ARR = ("a_shape", "a_strides", "b_shape", "b_strides", "idx_shape", "lhs_strides", "rhs_strides")
ARG_FIELDS = {"a": 0, "b": 8, "lhs": 16, "rhs": 24, "out": 32,
              **{f: 40 + 8 * i for i, f in enumerate(_Q)},
              **{f: 136 + 8 * MAX_DIMS * i for i, f in enumerate(_ARR)},
              "nd_a": 136 + 56 * MAX_DIMS, "nd_b": 140 + 56 * MAX_DIMS,
              "nd_idx": 144 + 56 * MAX_DIMS, "pad": 148 + 56 * MAX_DIMS}


def _dims(shape, strides):
    """(innermost-first shape padded with 1, strides padded with 0)"""
    nd = len(shape)
    return (list(reversed(shape)) + [1] * (MAX_DIMS - nd),
            list(reversed(strides)) + [0] * (MAX_DIMS - nd))


def pack_args(M, N, K, a_rs, a_cs, b_rs, b_cs, batch, a_mats, b_mats, tiles_n, tiles_m,
              a_batch, b_batch, idx_batch) -> bytes:
    """The tail of GatherMMArgs (after the five pointers). a_batch/b_batch are
    (shape, strides) and idx_batch (shape, lhs strides, rhs strides), outermost first."""
    ash, ast = _dims(*a_batch)
    bsh, bst = _dims(*b_batch)
    ish, ls = _dims(idx_batch[0], idx_batch[1])
    _, rs = _dims(idx_batch[0], idx_batch[2])
    return _ARGS.pack(M, N, K, a_rs, a_cs, b_rs, b_cs, batch, a_mats, b_mats, tiles_n, tiles_m,
                      *ash, *ast, *bsh, *bst, *ish, *ls, *rs,
                      len(a_batch[0]), len(b_batch[0]), len(idx_batch[0]), 0)


def unpack_args(tail: bytes) -> dict:
    """The fields of a packed tail (for tests and messages)."""
    v = _ARGS.unpack(tail)
    d = dict(zip(_Q, v[:12]))
    for i, f in enumerate(_ARR):
        d[f] = v[12 + MAX_DIMS * i: 12 + MAX_DIMS * (i + 1)]
    d["nd_a"], d["nd_b"], d["nd_idx"], _ = v[12 + 7 * MAX_DIMS:]
    return d


def choose(M: int, N: int, b_rs: int) -> str:
    """'rows' (a wave per output column) or 'tiled'."""
    return "rows" if M <= ROWS_MAX_M and (b_rs == 1 or N == 1) else "tiled"


def plan(a, b, lhs, rhs, o, device):
    tb = kt.table(FAMILY)
    dt = o.dtype
    if dt not in tb.DTYPES or a.dtype != dt or b.dtype != dt:
        return None
    if lhs.dtype != "uint32" or rhs.dtype != "uint32" or a.ndim < 2 or b.ndim < 2 or o.ndim < 2:
        return None
    M, K = a.shape[-2:]
    K2, N = b.shape[-2:]
    bshape = o.shape[:-2]
    if K2 != K or o.shape[-2:] != (M, N) or lhs.shape != bshape or rhs.shape != bshape:
        return None
    if o.size == 0:
        return Plan(())
    if K == 0:
        return Plan((Memset(out(0), o.nbytes),))
    a_mats, b_mats = math.prod(a.shape[:-2]), math.prod(b.shape[:-2])
    if a_mats == 0 or b_mats == 0:
        return None
    batch = math.prod(bshape)
    a_b = ew.collapse_dims(a.shape[:-2], a.strides[:-2])
    b_b = ew.collapse_dims(b.shape[:-2], b.strides[:-2])
    i_b = ew.collapse_dims(bshape, lhs.strides, rhs.strides)
    if max(len(a_b[0]), len(b_b[0]), len(i_b[0])) > MAX_DIMS:
        return None
    # strides of a dimension of size one never move: 0 keeps the kernel's tests simple
    a_rs = a.strides[-2] if M > 1 else 0
    a_cs = a.strides[-1] if K > 1 else 1
    b_rs = b.strides[-2] if K > 1 else 1
    b_cs = b.strides[-1] if N > 1 else 0
    kind = choose(M, N, b_rs)
    if kind == "rows":
        tiles_n, tiles_m = -(-N // ROWS_WAVES), 1
        wave = _plan.wave_width(device)
        name, block = tb.rows(kt, dt, wave), ROWS_WAVES * wave
    else:
        tiles_n, tiles_m = -(-N // TILE), -(-M // TILE)
        name, block = tb.tiled(kt, dt), TILED_THREADS
    grid = batch * tiles_n * tiles_m
    if grid > MAX_GRID:
        return None
    tail = pack_args(M, N, K, a_rs, a_cs, b_rs, b_cs, batch, a_mats, b_mats, tiles_n, tiles_m,
                     (a_b[0], a_b[1][0]), (b_b[0], b_b[1][0]), (i_b[0], i_b[1][0], i_b[1][1]))
    return Plan((Launch(FAMILY, name, (grid, 1, 1), (block, 1, 1), 0, N_PTRS, tail),))


def plan_node(node, device):
    if node.prim not in PRIMITIVES or len(node.ins) != 4 or len(node.outs) != 1:
        return None
    return plan(*node.ins, node.out, device)
