"""SDPA launcher: the mlx_amd::SDPA primitive (mx.fast.scaled_dot_product_attention while
mlx-amd is enabled; hip_kernels/sdpa.hip).

Inputs (q, k, v, [mask], [sinks]): q (B, Hq, Lq, D), k (B, Hkv, Lk, D), v (B, Hkv, Lk, Dv),
params (scale, mask_mode in {"", "causal", "array"}, has_sinks). Output (B, Hq, Lq, Dv)
row-contiguous in q's dtype. Semantics are MLX's decomposition (mlx/fast.cpp): causal
lets query i see keys j <= i + Lk - Lq; a false boolean mask (and the causal cut) puts
the lowest finite score there, so a row that sees nothing averages V uniformly; an
additive mask is added to the scaled scores; a sink is one more logit per query head.

Four paths, tried in this order:
* decode (Lq <= 8, D == Dv in HEAD_DIMS, K/V rows in 16-byte vectors): our kernel, one
  read of K and V for all query heads of a group, split over the keys so that the GPU is
  full (splits from Lk and the device's CU count); the last block of a row chunk's splits
  to finish combines them (a counter in the runtime's zeroed scratch, plan.zeroed()), so a
  decode is one launch. K/V are read through their strides (a KV cache is a slice of a
  larger buffer). float16/bfloat16 with D in 64/80/96/128 take the matrix-unit variant
  where the device's backend passed its self-test (the query rows of a kv head, up to 16,
  as one tile; Q K^T and P V on the unit); the rest, the FMA kernel (4 rows a block).
  ``MLX_AMD_SDPA_DECODE=mma|fma`` forces one (tests, A/B; plans are cached).
* flash prefill on the matrix unit (float16/bfloat16, D == Dv in 64/80/96/128, unit last
  strides, a device whose mlxa/mma.h backend passed its first-use self-test against the
  twin: runtime/matrix_units.py): one launch, 64 query rows per block in four waves, K/V
  tiles in two pipelined stages. Taken at every size (sdpa_bench-h200.json: 1.5-7x the
  other two paths from 512 to 4096 tokens on the H200), except few query tiles against
  more than FLASH_MAX_KEYS keys, which it does not split yet.
* flash prefill, the portable twin (D == Dv, a tile configuration for the dtype and head
  dim: every head dim for float16/bfloat16, all but 256 for float32; unit last strides):
  float32 FMA, one block per tile of query rows of one head, the softmax online over key
  tiles in shared memory, no score matrix in memory; causal tiles stop at their last
  visible key. Taken up to FLASH_MAX_WORK query x key pairs per head and FLASH_MAX_KEYS
  keys: beyond, the vendor GEMMs' matrix cores win (at 512 x 512 it matches them and saves
  16 host calls a layer; 3.6x slower at 4096). ``MLX_AMD_SDPA_PREFILL=mma|flash|gemm``
  forces one path (tests, A/B; plans are cached).
* GEMM prefill (anything else with a float16/bfloat16/float32 dtype): the queries in chunks
  (temporary scores bounded by CHUNK_BYTES); per chunk S = scale Q K^T through the
  matmul family (vendor GEMM; the query heads of a GQA group fold into the rows of one
  GEMM against their shared K, from a copy of q in (B, Hkv, Lq, G, D) order), our row
  softmax in place (float32, mask, causal, sinks; P in the input dtype, as MLX's
  decomposition rounds it), O = P V through the matmul family, and our scatter into the
  output. With causal, a chunk's GEMMs stop at its last visible key.

Not covered (MLX's CPU fallback): other dtypes (float64 is refused by MLX's own GPU
backends too), masks of another dtype, more than 4 mask dims, shapes beyond the 32-bit
grid/index limits.
"""

from __future__ import annotations

import dataclasses
import math
import struct

from .. import kernel_table as kt
from .. import matrix_units, switches
from ..launch import Launch
from ..plan import ZERO_BYTES, Layout, Memset, Node, Plan, Ref, compute_units, embed, inp, out, tmp, wave_width, zeroed
from . import copy as copy_family
from . import matmul as matmul_family

FAMILY = "sdpa"
PRIMITIVES = {"mlx_amd::SDPA": "sdpa"}

DTYPES = ("float16", "bfloat16", "float32")
ITEM = {"float16": 2, "bfloat16": 2, "float32": 4}
HEAD_DIMS = (64, 80, 96, 128, 256)
DECODE_MAX_LQ = 8
DECODE_ROWS = 4            # query rows per decode block (the kernels' R)
DECODE_BLOCK = 256         # mlxa::sdpa::kDecodeBlock
DECODE_BLOCKS_PER_CU = 2   # splits fill about this many blocks per CU: 2 (what 128 registers a
                           # thread keep resident) beat 1, 3, 4, 6 at 4k and 32k keys on the H200
DECODE_MMA_BLOCKS_PER_CU = 2   # the matrix-unit decode: 2 waves and 35 KB of stages a block; 2
                               # beat 1, 3, 4 at 32k and 128k keys on the H100 (sdpa_decode_mma-h100.txt)
DECODE_MMA_MIN_KEYS = 8192     # below, the FMA kernel's shorter start wins (at 4096 keys: 18 against 21 us)
DECODE_ENV = "MLX_AMD_SDPA_DECODE"
DECODE_MIN_KEYS = 32       # keys per split at least (fewer: the combine costs more than it saves;
                           # 128 left a 140-key llama-8b cache to 8 blocks: decode_defaults-h200.txt)
DECODE_MAX_SPLITS = 1024
ROWS_BLOCK = 256
SCATTER_BLOCK = 256
CHUNK_BYTES = 256 << 20    # the prefill's score chunk
CAUSAL_CHUNK = 512         # causal prefill: query rows per chunk at most (skips the upper triangle)
CAUSAL_MIN_CHUNK = 128
GRID_YZ = 65535
INT32 = (1 << 31) - 1

MASK_NONE, MASK_BOOL, MASK_ADD_T, MASK_ADD_F32 = 0, 1, 2, 3
SINK_NONE, SINK_T, SINK_F32 = 0, 1, 2

# ---- argument structs (sdpa_args.h) -----------------------------------------------
_DECODE = struct.Struct("<4q3q3q4qq10if i".replace(" ", ""))   # after the 9 pointers
_ROWS = struct.Struct("<q4qqq10i")                               # after the 3 pointers
_SCATTER = struct.Struct("<q6i")                                 # after the 2 pointers
_FLASH = struct.Struct("<3q3q3q4qq9if")                          # after the 6 pointers
ARG_SIZES = {"SdpaDecodeArgs": 72 + _DECODE.size,
             "SdpaRowsArgs": 24 + _ROWS.size, "SdpaScatterArgs": 16 + _SCATTER.size,
             "SdpaFlashArgs": 48 + _FLASH.size}
FLASH_BLOCK = 256          # mlxa::sdpa::kFlashBlock
FLASH_MAX_WORK = 512 * 512
FLASH_MAX_KEYS = 1024


def decode_tail(q_strides, k_strides, v_strides, mask_strides, sink_stride, B, Hq, Hkv, Lq, Lk,
                keys_per_split, n_splits, mask_kind, sink_kind, causal, scale_log2) -> bytes:
    return _DECODE.pack(*q_strides, *k_strides, *v_strides, *mask_strides, sink_stride, B, Hq, Hkv,
                        Lq, Lk, keys_per_split, n_splits, mask_kind, sink_kind, int(causal),
                        scale_log2, 0)


def decode_grid_tail(p, q_strides, k_strides, v_strides, Lk: int, kps: int, splits: int, rows: int) -> tuple:
    """The decode kernel's grid and argument tail: ``splits`` ranges of ``kps`` of the ``Lk``
    keys for each chunk of ``rows`` query rows of every (kv head, batch) of problem ``p``."""
    chunks = -(-(p.G * p.Lq) // rows)
    tail = decode_tail(q_strides, k_strides[:3], v_strides[:3], p.mask_strides, p.sink_stride, p.B, p.Hq, p.Hkv,
                       p.Lq, Lk, kps, splits, p.mask_kind, p.sink_kind, p.causal, p.scale * math.log2(math.e))
    return (splits * chunks, p.Hkv, p.B), tail


def rows_tail(ld, mask_strides, sink_stride, rows, n, G, c, Hkv, l0, Lq, Lk, mask_kind, sink_kind,
              causal) -> bytes:
    return _ROWS.pack(ld, *mask_strides, sink_stride, rows, n, G, c, Hkv, l0, Lq, Lk, mask_kind,
                      sink_kind, int(causal))


def flash_tail(q_strides, k_strides, v_strides, mask_strides, sink_stride, B, Hq, Hkv, Lq, Lk, q_tiles,
               mask_kind, sink_kind, causal, scale_log2) -> bytes:
    return _FLASH.pack(*q_strides, *k_strides, *v_strides, *mask_strides, sink_stride, B, Hq, Hkv, Lq,
                       Lk, q_tiles, mask_kind, sink_kind, int(causal), scale_log2)


def scatter_tail(total, c, G, dv, Lq, l0) -> bytes:
    return _SCATTER.pack(total, c, G, dv, Lq, l0, 0)


# ---- checking the node ------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Problem:
    dt: str
    B: int
    Hq: int
    Hkv: int
    Lq: int
    Lk: int
    D: int
    Dv: int
    scale: float
    causal: bool
    mask_kind: int
    mask_strides: tuple     # (b, h, l, j)
    sink_kind: int
    sink_stride: int
    mask_index: int         # input index of the mask (-1: none)
    sink_index: int

    @property
    def G(self) -> int:
        return self.Hq // self.Hkv

    @property
    def mask_ref(self) -> Ref:
        """The mask input, or q standing in for the unused pointer."""
        return inp(self.mask_index) if self.mask_index >= 0 else inp(0)

    @property
    def sink_ref(self) -> Ref:
        return inp(self.sink_index) if self.sink_index >= 0 else inp(0)


def _mask_strides(m: Layout, B, Hq, Lq, Lk):
    """(b, h, l, j) strides of a mask broadcastable to (B, Hq, Lq, Lk), or None."""
    if m.ndim > 4:
        return None
    shape = (1,) * (4 - m.ndim) + tuple(m.shape)
    strides = (0,) * (4 - m.ndim) + tuple(m.strides)
    res = []
    for d, s, full in zip(shape, strides, (B, Hq, Lq, Lk)):
        if d == full:
            res.append(s if full > 1 else 0)
        elif d == 1:
            res.append(0)
        else:
            return None
    return tuple(res)


def problem(node) -> Problem | None:
    if node.prim not in PRIMITIVES or len(node.outs) != 1 or len(node.params) != 3:
        return None
    scale, mode, has_sinks = node.params
    if mode not in ("", "causal", "array"):
        return None
    n_in = 3 + (mode == "array") + bool(has_sinks)
    if len(node.ins) != n_in:
        return None
    q, k, v = node.ins[:3]
    o = node.out
    dt = q.dtype
    if dt not in DTYPES or k.dtype != dt or v.dtype != dt or o.dtype != dt:
        return None
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        return None
    B, Hq, Lq, D = q.shape
    _, Hkv, Lk, Dk = k.shape
    Dv = v.shape[3]
    if k.shape[0] != B or v.shape[:3] != (B, Hkv, Lk) or Dk != D or Hkv == 0 or Hq % Hkv:
        return None
    if o.shape != (B, Hq, Lq, Dv):
        return None
    if max(B, Hq, Lq, Lk, D, Dv) > INT32 or B * Hq * Lq > INT32:
        return None
    mask_kind, mstr, mi = MASK_NONE, (0, 0, 0, 0), -1
    if mode == "array":
        m = node.ins[3]
        mi = 3
        if m.dtype == "bool":
            mask_kind = MASK_BOOL
        elif m.dtype == dt:
            mask_kind = MASK_ADD_T
        elif m.dtype == "float32":
            mask_kind = MASK_ADD_F32
        else:
            return None
        mstr = _mask_strides(m, B, Hq, Lq, Lk)
        if mstr is None:
            return None
    sink_kind, sstr, si = SINK_NONE, 0, -1
    if has_sinks:
        s = node.ins[-1]
        si = len(node.ins) - 1
        if s.shape not in ((Hq,),) and not (s.ndim == 1 and s.shape[0] == 1 and Hq == 1):
            return None
        if s.dtype == dt:
            sink_kind = SINK_T
        elif s.dtype == "float32":
            sink_kind = SINK_F32
        else:
            return None
        sstr = s.strides[0] if Hq > 1 else 0
    return Problem(dt, B, Hq, Hkv, Lq, Lk, D, Dv, float(scale), mode == "causal", mask_kind, mstr,
                   sink_kind, sstr, mi, si)


# ---- decode -------------------------------------------------------------------------------

def _vec_ok(x: Layout, itemsize: int) -> bool:
    """K/V rows in whole 16-byte vectors: unit last stride, other strides in vectors."""
    vec = 16 // itemsize
    b, h, s, d = x.strides
    if x.shape[3] > 1 and d != 1:
        return False
    return all(st % vec == 0 for st, n in zip((b, h, s), x.shape[:3]) if n > 1)


@dataclasses.dataclass(frozen=True)
class DecodeKernel:
    name: str
    rows: int             # query rows of a kv head per block
    block: int            # threads
    blocks_per_cu: int    # the split target
    matrix_unit: bool     # sdpa_decode_mma (else the FMA kernel)


def _decode_force() -> str:
    force = switches.choice(DECODE_ENV, ("auto", "mma", "fma"), "auto")
    return "" if force == "auto" else force


def _decode_mma_serves(p: Problem, device) -> bool:
    """The matrix-unit decode kernel exists for p (16-bit dtype, its head dims) and the
    device's backend is trusted (matrix_units)."""
    t = kt.table(FAMILY)
    return p.dt in t.MMA_DTYPES and p.D in t.MMA_HEAD_DIMS and matrix_units.usable(FAMILY, device, p.dt, mma_selftest)


def _fma_decode(p: Problem) -> DecodeKernel:
    return DecodeKernel(kt.table(FAMILY).decode(p.dt, p.D, DECODE_ROWS), DECODE_ROWS, DECODE_BLOCK,
                        DECODE_BLOCKS_PER_CU, False)


def _mma_decode(p: Problem, device) -> DecodeKernel:
    t = kt.table(FAMILY)
    return DecodeKernel(t.decode_mma(p.dt, p.D), t.DECODE_MMA_ROWS,
                        t.decode_mma_block(matrix_units.backend(device, p.dt)), DECODE_MMA_BLOCKS_PER_CU, True)


def decode_kernel(p: Problem, device, Lk: int = None) -> DecodeKernel:
    """The decode kernel for p on device (``Lk``: another key length than p's): the
    matrix-unit one where it serves from DECODE_MMA_MIN_KEYS keys, else the FMA one."""
    force = _decode_force()
    Lk = p.Lk if Lk is None else Lk
    if (force == "mma" or (not force and Lk >= DECODE_MMA_MIN_KEYS)) and _decode_mma_serves(p, device):
        return _mma_decode(p, device)
    return _fma_decode(p)


def decode_splits(p: Problem, device, Lk: int = None, kern: DecodeKernel = None) -> tuple:
    """(n_splits, keys per split): enough blocks to fill the device, few enough keys
    per split left for the kernel to stream (``Lk``: another key length than p's)."""
    kern = kern or decode_kernel(p, device, Lk)
    Lk = p.Lk if Lk is None else Lk
    chunks = -(-(p.G * p.Lq) // kern.rows)
    base = p.B * p.Hkv * chunks
    target = compute_units(device) * kern.blocks_per_cu
    splits = max(1, min(-(-target // base), Lk // DECODE_MIN_KEYS, DECODE_MAX_SPLITS))
    if base * 4 > ZERO_BYTES:   # a split count per row chunk in the zeroed scratch (never on
        splits = 1              # a real device: more chunks than the fill target need none)
    kps = -(-Lk // splits)
    return -(-Lk // kps), kps


def decode_max_splits(p: Problem, device, kern: DecodeKernel = None) -> int:
    """The most splits ``decode_splits`` gives this problem at any key length: the split
    count grows with Lk only until the blocks fill the device."""
    kern = kern or decode_kernel(p, device)
    chunks = -(-(p.G * p.Lq) // kern.rows)
    target = compute_units(device) * kern.blocks_per_cu
    return max(1, min(-(-target // (p.B * p.Hkv * chunks)), DECODE_MAX_SPLITS))


def plan_decode(node, p: Problem, device) -> Plan | None:
    q, k, v = node.ins[:3]
    isz = ITEM[p.dt]
    if p.Lq > DECODE_MAX_LQ or p.D != p.Dv or p.D not in HEAD_DIMS:
        return None
    if not (_vec_ok(k, isz) and _vec_ok(v, isz)):
        return None
    kern = decode_kernel(p, device)
    chunks = -(-(p.G * p.Lq) // kern.rows)
    splits, kps = decode_splits(p, device, kern=kern)
    if p.Hkv > GRID_YZ or p.B > GRID_YZ or splits * chunks > INT32:
        return None
    rows = p.B * p.Hq * p.Lq
    mask_ref, sink_ref = p.mask_ref, p.sink_ref
    temps, steps = (), []
    cap = splits
    if splits > 1:
        # partials for the most splits any longer KV length gets: a replay rebinds this plan
        # to every later decode step, none goes back to Python to be planned again (a
        # power-of-two headroom sent an LLM's SDPA nodes back at every doubling). Small: the
        # fill target bounds cap * rows (1.1 MB of partials for llama-8b on the H200)
        cap = max(splits, decode_max_splits(p, device, kern))
        temps = (cap * rows * p.D * 4, cap * rows * 2 * 4)
        po, pml, cnt = tmp(0), tmp(1), zeroed(0)
    else:
        po, pml, cnt = out(0), out(0), out(0)
    grid, tail = decode_grid_tail(p, q.strides, k.strides, v.strides, p.Lk, kps, splits, kern.rows)
    steps.append(Launch(FAMILY, kern.name, grid, (kern.block, 1, 1), 0, 9, tail,
                        (inp(0), inp(1), inp(2), mask_ref, sink_ref, out(0), po, pml, cnt)))
    return Plan(tuple(steps), temps=temps, rebind=DecodeRebind(p, node.ins, device, splits, cap, kern))


class DecodeRebind:
    """A decode plan's steps at another KV length (``Plan.rebind``): same node, same strides,
    k and v longer or shorter along the sequence; None when that needs another plan (no mask
    array, whose shape follows the length; the split count stays on the same side of 1 and
    within the temporaries planned)."""

    __slots__ = ("p", "ins", "device", "splits", "cap", "kern", "switch")

    def __init__(self, p, ins, device, splits, cap, kern):
        self.p, self.ins, self.device, self.splits, self.cap, self.kern = p, ins, device, splits, cap, kern
        # the key length where decode_kernel changes its choice (None: never), decided once:
        # a replay asks this at every decode step
        self.switch = DECODE_MMA_MIN_KEYS if not _decode_force() and _decode_mma_serves(p, device) else None

    def __call__(self, shapes, strides):
        p, ins = self.p, self.ins
        if p.mask_index >= 0 or len(shapes) != len(ins):
            return None
        q, k, v = ins[:3]
        if tuple(shapes[0]) != q.shape or tuple(strides[0]) != q.strides:
            return None
        Lk = shapes[1][2]
        for i, x in ((1, k), (2, v)):
            sh = tuple(shapes[i])
            if (tuple(strides[i]) != x.strides or len(sh) != 4 or sh[2] != Lk or sh[:2] != x.shape[:2]
                    or sh[3] != x.shape[3]):
                return None
        for i in range(3, len(ins)):     # sinks
            if tuple(shapes[i]) != ins[i].shape or tuple(strides[i]) != ins[i].strides:
                return None
        if Lk < 1 or (Lk > 1) != (k.shape[2] > 1) or Lk > INT32:
            return None                   # (_vec_ok skips unit dims)
        if self.switch is not None and (Lk >= self.switch) != self.kern.matrix_unit:
            return None                   # the other kernel from here on: planned once more
        splits, kps = decode_splits(p, self.device, Lk, self.kern)
        if (splits > 1) != (self.splits > 1) or splits > self.cap:
            return None
        return [decode_grid_tail(p, q.strides, k.strides, v.strides, Lk, kps, splits, self.kern.rows)]


# ---- flash prefill ------------------------------------------------------------------------

def _unit_last(x: Layout) -> bool:
    return x.shape[3] <= 1 or x.strides[3] == 1


PREFILL_ENV = "MLX_AMD_SDPA_PREFILL"


MMA_MAX_TILE_KEYS = 64     # the most keys of a K/V tile of sdpa_flash_mma on any backend (mma.h's kKeys)


def prefill_force() -> str:
    """"" (choose), "mma" (the matrix-unit flash kernel where it serves), "flash" (the
    portable twin) or "gemm": MLX_AMD_SDPA_PREFILL."""
    force = switches.choice(PREFILL_ENV, ("auto", "mma", "flash", "gemm"), "auto")
    return "" if force == "auto" else force


def _flash_launch(node, p: Problem, name: str, rows: int, block: int) -> Launch:
    q, k, v = node.ins[:3]
    q_tiles = -(-p.Lq // rows)
    tail = flash_tail(q.strides[:3], k.strides[:3], v.strides[:3], p.mask_strides, p.sink_stride, p.B, p.Hq,
                      p.Hkv, p.Lq, p.Lk, q_tiles, p.mask_kind, p.sink_kind, p.causal,
                      p.scale * math.log2(math.e))
    return Launch(FAMILY, name, (q_tiles, p.Hq, p.B), (block, 1, 1), 0, 6, tail,
                  (inp(0), inp(1), inp(2), p.mask_ref, p.sink_ref, out(0)))


def _flash_fits(node, p: Problem, rows: int) -> bool:
    return (all(_unit_last(x) for x in node.ins[:3]) and -(-p.Lq // rows) <= INT32
            and p.Hq <= GRID_YZ and p.B <= GRID_YZ)


def plan_flash_mma(node, p: Problem, device) -> Plan | None:
    """The flash kernel on the matrix unit (mlxa/mma.h): 16-bit dtypes, D == Dv in
    MMA_HEAD_DIMS, where matrix_units trusts the device's backend. Taken at every size,
    except few query tiles against more than FLASH_MAX_KEYS keys (no split over the keys
    yet: the GEMM path fills the GPU better there)."""
    force = prefill_force()
    t = kt.table(FAMILY)
    if force in ("flash", "gemm") or p.D != p.Dv or p.dt not in t.MMA_DTYPES or p.D not in t.MMA_HEAD_DIMS:
        return None
    rows = t.flash_mma_rows()
    if not _flash_fits(node, p, rows):
        return None
    # each thread's K/V tile copy offsets are 32-bit (sdpa.hip: TileCopies): a tile's rows of
    # K's and V's key strides (up to MMA_MAX_TILE_KEYS keys) must fit
    if MMA_MAX_TILE_KEYS * max(abs(node.ins[1].strides[2]), abs(node.ins[2].strides[2])) + p.D >= 2**31:
        return None
    blocks = -(-p.Lq // rows) * p.Hq * p.B
    if force != "mma" and p.Lk > FLASH_MAX_KEYS and blocks < 2 * compute_units(device):
        return None
    if not matrix_units.usable(FAMILY, device, p.dt, mma_selftest):
        return None
    block = t.flash_mma_block(matrix_units.backend(device, p.dt))
    return Plan((_flash_launch(node, p, t.flash_mma(p.dt, p.D), rows, block),))


def plan_flash(node, p: Problem, device) -> Plan | None:
    force = prefill_force()
    if force == "gemm" or (force != "flash" and (p.Lq * p.Lk > FLASH_MAX_WORK or p.Lk > FLASH_MAX_KEYS)):
        return None
    t = kt.table(FAMILY)
    cfg = t.flash_config(p.dt, p.D) if p.D == p.Dv and p.D in HEAD_DIMS else None
    if cfg is None or not _flash_fits(node, p, 16 * cfg[0]):
        return None
    return Plan((_flash_launch(node, p, t.flash(p.dt, p.D), 16 * cfg[0], FLASH_BLOCK),))


# The self-test of the matrix-unit kernels (matrix_units.usable): GQA 2:1, causal, a partial
# query tile and a partial key tile, every head dim; the tolerance is far below what a wrong
# lane layout gives (errors of the outputs' own size) and above P's rounding to 16 bits.
SELFTEST_SHAPE = (1, 2, 1, 80, 150)    # B, Hq, Hkv, Lq, Lk
SELFTEST_TOL = {"float16": 1e-2, "bfloat16": 4e-2}
SELFTEST_PERTURB = None                # tests: a function applied to the matrix-unit result


def mma_selftest(rt, dt: str) -> tuple:
    """(ok, why): every matrix-unit flash kernel of ``dt`` against the portable twin on the
    same inputs, on rt's device."""
    import numpy as np

    dev = rt.props
    B, Hq, Hkv, Lq, Lk = SELFTEST_SHAPE
    t = kt.table(FAMILY)
    rng = np.random.default_rng(1234)
    for D in t.MMA_HEAD_DIMS:
        ins = [rng.standard_normal(s).astype(np.float32) for s in ((B, Hq, Lq, D), (B, Hkv, Lk, D), (B, Hkv, Lk, D))]
        bufs = [matrix_units.to16(x, dt) for x in ins]
        lays = tuple(Layout.row_major(x.shape, dt) for x in ins)
        ol = Layout.row_major((B, Hq, Lq, D), dt)
        node = Node("mlx_amd::SDPA", (1.0 / math.sqrt(D), "causal", False), lays, (ol,))
        p = problem(node)
        cfg = t.flash_config(dt, D)
        block = t.flash_mma_block(matrix_units.backend(dev, dt))
        steps = {"mma": _flash_launch(node, p, t.flash_mma(dt, D), t.flash_mma_rows(), block),
                 "twin": _flash_launch(node, p, t.flash(dt, D), 16 * cfg[0], FLASH_BLOCK)}
        ok, why = matrix_units.compare_twins(rt, bufs, steps, lambda i, out: (i[0], i[1], i[2], i[0], i[0], out),
                                             ol.size, dt, SELFTEST_TOL[dt], SELFTEST_PERTURB, f"head dim {D}")
        if not ok:
            return ok, why
        ok, why = _decode_selftest(rt, dt, D, rng)
        if not ok:
            return ok, why
    return True, ""


# the decode kernels' self-test: 12 query heads on one kv head (a 16-row tile, partly filled),
# causal, a partial last stage; one split (the split combine is shared by both kernels)
DECODE_SELFTEST_SHAPE = (1, 12, 1, 1, 150)    # B, Hq, Hkv, Lq, Lk


def _decode_selftest(rt, dt: str, D: int, rng) -> tuple:
    import numpy as np

    B, Hq, Hkv, Lq, Lk = DECODE_SELFTEST_SHAPE
    ins = [rng.standard_normal(s).astype(np.float32) for s in ((B, Hq, Lq, D), (B, Hkv, Lk, D), (B, Hkv, Lk, D))]
    lays = tuple(Layout.row_major(x.shape, dt) for x in ins)
    ol = Layout.row_major((B, Hq, Lq, D), dt)
    p = problem(Node("mlx_amd::SDPA", (1.0 / math.sqrt(D), "causal", False), lays, (ol,)))

    def launch(kern):   # one split: the kernel writes the output itself
        grid, tail = decode_grid_tail(p, lays[0].strides, lays[1].strides, lays[2].strides, Lk, Lk, 1, kern.rows)
        return Launch(FAMILY, kern.name, grid, (kern.block, 1, 1), 0, 9, tail, None)

    steps = {"mma": launch(_mma_decode(p, rt.props)), "twin": launch(_fma_decode(p))}
    return matrix_units.compare_twins(rt, [matrix_units.to16(x, dt) for x in ins], steps,
                                      lambda i, o: (i[0], i[1], i[2], i[0], i[0], o, o, o, o),
                                      ol.size, dt, SELFTEST_TOL[dt], SELFTEST_PERTURB, f"decode, head dim {D}")


# ---- GEMM prefill -------------------------------------------------------------------------

class _Temps:
    """Temporaries of the node: ours by name, and the sub-plans' (matmul, copy) mapped
    onto shared scratch slots (the steps run in stream order, one after the other)."""

    def __init__(self):
        self.sizes: list = []
        self.sub: dict = {}      # sub-plan temp index -> our index

    def add(self, nbytes: int) -> int:
        self.sizes.append(max(int(nbytes), 1))
        return len(self.sizes) - 1

    def sub_slot(self, i: int, nbytes: int) -> int:
        j = self.sub.get(i)
        if j is None:
            j = self.sub[i] = self.add(nbytes)
        else:
            self.sizes[j] = max(self.sizes[j], int(nbytes))
        return j


def _gemm(a: Layout, b: Layout, a_ref: Ref, b_ref: Ref, d_ref: Ref, alpha: float, dt: str, device,
          temps: _Temps) -> list | None:
    """D = alpha * A B (4-d, batch dims equal) written row-contiguous at d_ref, through the
    matmul family's plan of an AddMM with beta 0."""
    o = Layout.row_major(a.shape[:-1] + (b.shape[-1],), dt)
    sub = matmul_family.plan_node(Node("AddMM", (float(alpha), 0.0), (a, b, o), (o,)), device)
    mapping = {("i", 0): a_ref, ("i", 1): b_ref, ("i", 2): d_ref, ("o", 0): d_ref}
    return embed(sub, mapping, temps.sub_slot)


def chunk_rows(p: Problem) -> int:
    isz = ITEM[p.dt]
    per_row = max(1, p.B * p.Hq * p.Lk * isz)
    c = max(1, min(p.Lq, CHUNK_BYTES // per_row))
    if p.causal:   # a few chunks, so that the GEMMs skip most of the upper triangle
        c = min(c, max(CAUSAL_MIN_CHUNK, min(CAUSAL_CHUNK, p.Lq // 4)))
    return c


def plan_prefill(node, p: Problem, device) -> Plan | None:
    q, k, v = node.ins[:3]
    dt, isz = p.dt, ITEM[p.dt]
    G, B, Hkv, Lq, Lk, D, Dv = p.G, p.B, p.Hkv, p.Lq, p.Lk, p.D, p.Dv
    t = kt.table(FAMILY)
    temps = _Temps()
    steps: list = []
    # q in (B, Hkv, Lq, G, D) order: the heads of a group become rows of one GEMM
    if G > 1:
        qb, qh, ql, qd = q.strides
        view = Layout.strided((B, Hkv, Lq, G, D), (qb, G * qh, ql, qh, qd), dt)
        qt = temps.add(q.size * isz)
        cp = copy_family.copy_to(view, inp(0), tmp(qt), device)
        if cp is None:
            return None
        steps.append(cp)
        q_ref, q_bs = tmp(qt), (Hkv * Lq * G * D, Lq * G * D)
        q_rs, q_cs = D, 1
    else:
        q_ref, q_bs = inp(0), q.strides[:2]
        q_rs, q_cs = q.strides[2], q.strides[3]
    c = chunk_rows(p)
    n_chunks = -(-Lq // c)
    s_t = temps.add(B * Hkv * c * G * Lk * isz)
    direct = n_chunks == 1 and G == 1          # O lands in the output as it is
    o_t = None if direct else temps.add(B * Hkv * c * G * Dv * isz)
    wave = wave_width(device)
    rows_name = t.rows(dt, wave)
    mask_ref, sink_ref = p.mask_ref, p.sink_ref
    kb, kh, ks, kd = k.strides
    vb, vh, vs, vd = v.strides
    if Dv * isz % 16 == 0:
        sc_name, vecw = t.scatter("v16"), 16 // isz
    else:
        sc_name, vecw = t.scatter("u16" if isz == 2 else "u32"), 1
    for ci in range(n_chunks):
        l0 = ci * c
        cc = min(c, Lq - l0)
        M = cc * G
        n = Lk
        if p.causal and l0 + Lk - Lq >= 0:
            n = min(Lk, l0 + cc + Lk - Lq)    # the chunk's last visible key + 1
        if n <= 0:
            n = Lk
        a = Layout.strided((B, Hkv, M, D), q_bs + (q_rs, q_cs), dt)
        a_off = l0 * (G * D if G > 1 else q_rs) * isz
        kT = Layout.strided((B, Hkv, D, n), (kb, kh, kd, ks), dt)
        g1 = _gemm(a, kT, q_ref._replace(offset=q_ref.offset + a_off), inp(1), tmp(s_t), p.scale, dt, device, temps)
        if g1 is None:
            return None
        steps += g1
        rows = B * Hkv * M
        if rows > INT32:
            return None
        steps.append(Launch(FAMILY, rows_name, (rows, 1, 1), (ROWS_BLOCK, 1, 1), 0, 3,
                            rows_tail(n, p.mask_strides, p.sink_stride, rows, n, G, cc, Hkv, l0, Lq, Lk,
                                      p.mask_kind, p.sink_kind, p.causal),
                            (tmp(s_t), mask_ref, sink_ref)))
        pl = Layout.row_major((B, Hkv, M, n), dt)
        vl = Layout.strided((B, Hkv, n, Dv), (vb, vh, vs, vd), dt)
        g2 = _gemm(pl, vl, tmp(s_t), inp(2), out(0) if direct else tmp(o_t), 1.0, dt, device, temps)
        if g2 is None:
            return None
        steps += g2
        if not direct:
            total = B * Hkv * M * Dv // vecw
            grid = min(-(-total // SCATTER_BLOCK), compute_units(device) * 16)
            steps.append(Launch(FAMILY, sc_name, (grid, 1, 1), (SCATTER_BLOCK, 1, 1), 0, 2,
                                scatter_tail(total, cc, G, Dv // vecw, Lq, l0), (tmp(o_t), out(0))))
    return Plan(tuple(steps), temps=tuple(temps.sizes))


def plan_node(node, device):
    p = problem(node)
    if p is None:
        return None
    if node.out.size == 0:
        return Plan(())
    if p.Lk == 0:
        return Plan((Memset(out(0), node.out.nbytes, 0),))
    if p.D == 0:
        return None
    for planner in (plan_decode, plan_flash_mma, plan_flash, plan_prefill):
        plan = planner(node, p, device)
        if plan is not None:
            return plan
    return None
