"""Quantized launcher: QuantizedMatmul, GatherQMM and fast::Quantize through
hip_kernels/quantized.hip.

MLX's packing: w is uint32 whose rows hold one little-endian bit stream of ``bits``-wide
values (value i at bit i * bits; MLX's 3/5/6-bit byte packs are that stream); one scale
(and, affine, one bias) per group of ``group_size`` values along the packed axis.
Modes (QuantizationMode): 0 affine (scale/bias in x's dtype, bits 2-6 and 8), 1 mxfp4
and 2 mxfp8 (e8m0 scale bytes, groups of 32), 3 nvfp4 (e4m3 scale bytes, groups of 16).

* decode (transpose, M <= 8 rows of x): the qmv kernel streams w once, dequantizes in
  registers and accumulates in float32; GatherQMM is the same kernel with its uint32
  index arrays choosing x's and w's batch per output batch. 16-bit x with 2/4/8-bit affine
  w takes qmv_h2 instead: the same stream on packed half-precision math (products in
  half, each chunk's sums to float32; x staged per block as half2 with a power-of-two
  scale per 32 values; any non-finite x sends the block through qmv's float path), about
  1.5-1.8x qmv's bandwidth on the H200 where w is large. For 4-bit affine w and 16-bit
  x and 2-8 rows of x (speculative or batched decode), qmv_mma does the same products on
  the matrix unit where the device has one that passed its first-use self-test against qmv
  (``matrix_units``: mma.sync on NVIDIA, MFMA on CDNA, WMMA on RDNA4; RDNA3 and older take
  qmv. Only mma.sync has run: the AMD backends compile in CI and meet their self-test at first
  use on a real device).
* prefill (M > 8) and transpose=False: w is dequantized into a temporary of x's dtype
  (its broadcast batch dimensions stay broadcast), then the matmul family plans the GEMM
  on a synthetic Matmul node whose refs are renumbered onto ours.
* fast::Quantize (affine, quantize direction): one thread per group with MLX's CPU
  arithmetic, bit for bit.
* fast::ConvertFP8 (mx.to_fp8 / mx.from_fp8): e4m3 with MLX's CPU rounding and its
  saturation (|x| >= 464, inf and NaN give +-448), bit for bit.
* QQMatmul (mx.qqmm, fp modes): x quantized to w's mode and back as MLX's CPU does it
  (qdq), then the QuantizedMatmul plan above on that x; any M (MLX's CPU: one row only).
  GatherQQMM (which MLX's CPU does not implement) is the same qdq before GatherQMM's plan.

* GatherQMM (and GatherQQMM after its qdq) with more than 8 rows of x, or transpose=False:
  every matrix of w dequantized into a temporary, then GatherMM's plan (gather_mm.py) with
  the node's index arrays.

* mlx_amd::Dequantize (mx.dequantize of the affine mode while enabled): the dequantize
  kernel into the output, with MLX's roundings in its dtype.

Not covered (MLX's CPU fallback): QQMatmul and GatherQQMM with nvfp4's global scales; fast::Quantize
of the fp modes or the dequantize direction (MLX's CPU build decomposes both into ops, so
neither reaches us); w/scales/biases whose last axis is not contiguous; more than 4 batch
dimensions after collapsing.
"""

from __future__ import annotations

import dataclasses
import math
import os
import struct

from .. import kernel_table as kt
from .. import matrix_units
from ..launch import Launch
from ..plan import Layout, Memset, Plan, compute_units, dynamic_smem, embed, inp, ksplit, out, tmp, wave_width
from . import compiled
from . import copy as copy_family
from . import elementwise as ew

FAMILY = "quantized"

PRIMITIVES = {"QuantizedMatmul": "qmm", "GatherQMM": "gather_qmm", "fast::Quantize": "quantize",
              "fast::ConvertFP8": "fp8", "QQMatmul": "qqmm", "GatherQQMM": "gather_qqmm",
              "mlx_amd::Dequantize": "dequantize"}

DTYPES = ("float32", "float16", "bfloat16")
ITEM = {"float32": 4, "float16": 2, "bfloat16": 2}
QBATCH = 4                  # MLXA_QBATCH
QMV_MAX_M = 8
QMV_WAVES = 4               # mlxa::q::kQmvWaves
QMV_ROWS = 4                # mlxa::q::kQmvRows
QMV_MMA_WAVES = 4           # mlxa::q::kQmvMmaWaves
BLOCK = 256                 # mlxa::q::kBlock
GRID_Y = 65535
_U31 = 2**31 - 1

# ---- argument structs (quantized_args.h) -------------------------------------------
_QMV_TAIL = struct.Struct("<10q8i36q")     # after the 7 pointers
_SIB_ROWS = struct.Struct("<2q")            # QmvSibRows (after QmvArgs: qmv_h2 only)
QSIBS = 2                                   # MLXA_QSIBS
# QuantizedMatmul nodes on one x (q/k/v, gate/up) may run as one qmv_h2 launch (plan_siblings)
SIBLINGS = ("QuantizedMatmul",)
# ... and with the residual add and RMS norm before them as one qmv_h2n launch (chain)
CHAINS_AFTER = {("Add", "mlx_amd::RMSNorm"): ("QuantizedMatmul",)}
# ... and the swiglu of a gate and up pair with them (mlx-lm's MLP) as one qmv_h2g launch (a
# tail: tail_ok picks the Compiled nodes that are one); MLX_AMD_GLU=0: off
TAILS_AFTER = {"QuantizedMatmul": ("Compiled",)} if os.environ.get("MLX_AMD_GLU", "1") != "0" else {}
_DEQ_TAIL = struct.Struct("<6q2i16q")      # after the 4 pointers
_QUANT_TAIL = struct.Struct("<q2i")        # after the 4 pointers
_FP8_TAIL = struct.Struct("<q")            # after the 2 pointers
_QDQ_TAIL = struct.Struct("<q")            # after the 2 pointers
ARG_STRUCTS = {"QmvArgs": (7, 7 * 8 + _QMV_TAIL.size), "DequantArgs": (4, 4 * 8 + _DEQ_TAIL.size),
               "QuantizeArgs": (4, 4 * 8 + _QUANT_TAIL.size), "Fp8Args": (2, 2 * 8 + _FP8_TAIL.size),
               "QdqArgs": (2, 2 * 8 + _QDQ_TAIL.size)}


def _pad(v, fill=0):
    v = tuple(int(x) for x in v)
    return v + (fill,) * (QBATCH - len(v))


def qmv_tail(m, n, k, batch, x_row, w_row, s_row, b_row, x_count, w_count, group_shift,
             out_shape, lhs_str, rhs_str, x_shape, x_str, w_shape, w_str, s_str, b_str,
             x_vec, w_vec, gather, ksplit=1) -> bytes:
    return _QMV_TAIL.pack(m, n, k, batch, x_row, w_row, s_row, b_row, x_count, w_count,
                          group_shift, len(out_shape), len(x_shape), len(w_shape), int(x_vec), int(w_vec),
                          int(gather), int(ksplit),
                          *_pad(out_shape, 1), *_pad(lhs_str), *_pad(rhs_str), *_pad(x_shape, 1), *_pad(x_str),
                          *_pad(w_shape, 1), *_pad(w_str), *_pad(s_str), *_pad(b_str))


def dequant_tail(total_chunks, rows, cols, w_row, s_row, b_row, group_shift, shape, w_str, s_str, b_str) -> bytes:
    return _DEQ_TAIL.pack(total_chunks, rows, cols, w_row, s_row, b_row, group_shift, len(shape),
                          *_pad(shape, 1), *_pad(w_str), *_pad(s_str), *_pad(b_str))


def quantize_tail(groups, group_size) -> bytes:
    return _QUANT_TAIL.pack(groups, group_size, 0)


def _table():
    return kt.table(FAMILY)


# ---- shared checks --------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Fmt:
    name: str
    mode: int
    bits: int
    cv: int        # values per chunk
    gs: int

    @property
    def cw(self) -> int:           # words per chunk
        return self.cv * self.bits // 32

    @property
    def affine(self) -> bool:
        return self.mode == 0

    @property
    def align(self) -> int:        # bytes the vector load of a chunk needs
        return 16 if self.cw % 4 == 0 else (8 if self.cw % 2 == 0 else 4)

    @property
    def shift(self) -> int:
        return self.gs.bit_length() - 1


def fmt_for(group_size, bits, mode):
    t = _table()
    name = t.fmt_name(int(mode), int(bits))
    if name is None:
        return None
    _m, _b, cv = t.FORMATS[name]
    gs = int(group_size)
    if gs <= 0 or gs & (gs - 1) or gs % cv:
        return None
    if mode == 0 and gs not in (32, 64, 128):
        return None
    if mode in (1, 2) and gs != 32:
        return None
    if mode == 3 and gs != 16:
        return None
    return Fmt(name, int(mode), int(bits), cv, gs)


def _inner_ok(lay: Layout) -> bool:
    """Last axis contiguous (or of one element)."""
    return lay.ndim >= 1 and (lay.shape[-1] <= 1 or lay.strides[-1] == 1)


def _row_stride(lay: Layout) -> int:
    return lay.strides[-2] if lay.ndim >= 2 and lay.shape[-2] > 1 else 0


def _collapse(shape, *strides):
    """Batch dims collapsed (row-major order kept); () when there is no batch."""
    if not shape or all(d == 1 for d in shape):
        return (), [() for _ in strides]
    s, st = ew.collapse_dims(tuple(shape), *strides)
    return s, st


def _grid_1d(items: int, device) -> tuple:
    cap = compute_units(device) * 32
    return (max(1, min(-(-items // BLOCK), cap)), 1, 1)


def _x_copy(x: Layout, device, temp_index: int):
    """x copied row-contiguous into temporary ``temp_index``: (launch, layout) or None."""
    lau = copy_family.copy_to(x, inp(0), tmp(temp_index), device)
    return None if lau is None else (lau, Layout.row_major(x.shape, x.dtype))


@dataclasses.dataclass(frozen=True)
class Problem:
    fmt: Fmt
    x: Layout
    w: Layout
    s: Layout
    b: Layout            # scales again for the fp modes (never read)
    o: Layout
    M: int
    N: int
    K: int
    transpose: bool


def _problem(node, gather: bool):
    n_idx = 2 if gather else 0
    if len(node.params) < 4 or len(node.outs) != 1:
        return None
    gs, bits, mode, transpose = node.params[:4]
    f = fmt_for(gs, bits, mode)
    if f is None:
        return None
    n_in = (4 if f.affine else 3) + n_idx
    if len(node.ins) != n_in:
        return None
    x, w, s = node.ins[:3]
    b = node.ins[3] if f.affine else s
    o = node.out
    dt = x.dtype
    if dt not in DTYPES or o.dtype != dt or w.dtype != "uint32":
        return None
    if f.affine and (s.dtype != dt or b.dtype != dt):
        return None
    if not f.affine and s.dtype != "uint8":
        return None
    if x.ndim < 1 or w.ndim < 2 or s.ndim != w.ndim or b.ndim != w.ndim or o.ndim < 1:
        return None
    K = x.shape[-1]
    M = x.shape[-2] if x.ndim >= 2 else 1
    N = o.shape[-1]
    transpose = bool(transpose)
    rows, cols = (N, K) if transpose else (K, N)
    if w.shape[-2] != rows or w.shape[-1] * 32 != cols * f.bits or cols % f.gs:
        return None
    if s.shape[-2:] != (rows, cols // f.gs) or b.shape[-2:] != s.shape[-2:]:
        return None
    if w.shape[:-2] != s.shape[:-2] or b.shape[:-2] != s.shape[:-2]:
        return None
    if not (_inner_ok(w) and _inner_ok(s) and _inner_ok(b)):
        return None
    if gather:
        if x.ndim < 2 or o.ndim < 2 or o.shape[-2:] != (M, N):
            return None
    elif o.shape != ((tuple(x.shape[:-2]) + (M, N)) if x.ndim >= 2 else (N,)):
        return None
    return Problem(f, x, w, s, b, o, M, N, K, transpose)


# ---- decode: the qmv kernel -----------------------------------------------------------

def _qmv_launch(p: Problem, device, x: Layout, x_ref, out_batch, x_batch, x_bstr, w_batch, w_bstrs,
                gather=None, force_mma=None, sibs=()):
    """One qmv launch (qmv_mma where it serves). ``gather``: (lhs strides, rhs strides) over
    ``out_batch``; ``force_mma``: the self-test's choice of kernel; ``sibs``: Problems on the
    same x whose rows qmv_h2 computes in the same launch (their operands are inputs
    4k+1..4k+3 and output k of sibling k = 1, 2): None where that launch cannot take them."""
    f, M, N, K = p.fmt, p.M, p.N, p.K
    dt = x.dtype
    isz = ITEM[dt]
    batch = 1
    for d in out_batch:
        batch *= d
    x_count, w_count = 1, 1
    for d in x_batch:
        x_count *= d
    for d in w_batch:
        w_count *= d
    if max(batch, x_count, w_count) > _U31:
        return None
    x_row = _row_stride(x)
    w_row, s_row, b_row = _row_stride(p.w), _row_stride(p.s), _row_stride(p.b)
    x_vec = (x_row * isz) % 16 == 0 and all((s * isz) % 16 == 0 for s in x_bstr)
    w_vec = (w_row * 4) % f.align == 0 and all((s * 4) % f.align == 0 for s in w_bstrs[0])
    W = wave_width(device)
    lhs_str, rhs_str = gather if gather is not None else ((), ())
    mma = _qmv_mma_serves(p, device, dt, W, x_vec, w_vec, x_bstr, w_bstrs) if force_mma is None else force_mma
    h2 = not mma and force_mma is None and _qmv_h2_serves(p, device, dt)
    if sibs and not (h2 and batch == 1 and gather is None and len(sibs) <= QSIBS):
        return None
    if h2:
        t = _table()
        rows = t.QMV_H2_ROWS[f.bits]
        n_all = N + sum(sp.N for sp in sibs)
        # each sibling's rows start a row block (the kernel picks the matrix per block)
        ks = qmv_h2_split([N] + [sp.N for sp in sibs], M, batch, K // 32, rows, W, device)
        if ks is None:
            return None
        block_rows = t.QMV_H2_THREADS // W // ks * rows
        grid_x = qmv_h2_blocks(n_all, M, batch, block_rows, device) * M
    elif mma:
        ks = qmv_mma_ksplit(N, batch, K // f.gs, device)
        grid_x = -(-N // (QMV_MMA_WAVES // ks * 16))
    else:
        ks = qmv_ksplit(N, M * batch, K // f.cv, device)
        grid_x = -(-N // (QMV_WAVES // ks * QMV_ROWS)) * M
    if grid_x > _U31:
        return None
    tail = qmv_tail(M, N, K, batch, x_row, w_row, s_row, b_row, x_count, w_count, f.shift,
                    out_batch, lhs_str, rhs_str, x_batch, x_bstr, w_batch, *w_bstrs,
                    x_vec, w_vec, gather is not None, ks)
    n_in = 4 if f.affine else 3
    b_ref = inp(3) if f.affine else inp(2)
    lhs_ref, rhs_ref = (inp(n_in), inp(n_in + 1)) if gather is not None else (x_ref, x_ref)
    refs = (x_ref, inp(1), inp(2), b_ref, lhs_ref, rhs_ref, out(0))
    if h2:
        t = _table()
        name = t.qmv_h2_name(kt, f.bits, dt, W)
        # QmvSibs first (w, scales, biases, out of each sibling; an absent one repeats the
        # node's own), then QmvArgs, then QmvSibRows
        own = (inp(1), inp(2), b_ref, out(0))
        per = [(inp(4 * k + 1), inp(4 * k + 2), inp(4 * k + 3), out(k)) for k in range(1, len(sibs) + 1)]
        per += [own] * (QSIBS - len(per))
        sib_refs = tuple(per[k][field] for field in range(4) for k in range(QSIBS))
        sib_rows = [sp.N for sp in sibs] + [0] * (QSIBS - len(sibs))
        return Launch(FAMILY, name, (grid_x, min(batch, GRID_Y), 1), (t.QMV_H2_THREADS, 1, 1),
                      K // 32 * t.QMV_H2_SMEM_PER_CHUNK, 7 + 4 * QSIBS, tail + _SIB_ROWS.pack(*sib_rows),
                      sib_refs + refs)
    if mma:
        name = _table().qmv_mma_name(kt, dt, f.gs)
        return Launch(FAMILY, name, (grid_x, min(batch, GRID_Y), 1), (QMV_MMA_WAVES * W, 1, 1), 0, 7, tail, refs)
    name = _table().qmv_name(kt, f.name, dt, W)
    return Launch(FAMILY, name, (grid_x, min(batch, GRID_Y), 1), (QMV_WAVES * W, 1, 1), 0, 7, tail, refs)


def qmv_ksplit(rows, row_sets, chunks, device) -> int:
    """Waves per row group (plan.ksplit over chunks of k; about 12 waves per compute unit:
    the kernel's registers allow ~16 resident)."""
    return ksplit(-(-rows // QMV_ROWS) * row_sets, chunks, device, QMV_WAVES, per_cu=12)


# qmv_h2 (see quantized.hip) takes 16-bit x and 2/4/8-bit affine w where its staged row of x
# fits the shared memory left beside the kernel's own; QMV_HALF2 = False (or
# MLX_AMD_QMV_HALF2=0 before the first plan) keeps every product on qmv's float path.
QMV_HALF2 = os.environ.get("MLX_AMD_QMV_HALF2", "1") != "0"
QMV_H2_STATIC_SMEM = 8192      # the kernel's static shared memory and the emulated wave's slots, rounded up


def _qmv_h2_serves(p: Problem, device, dt) -> bool:
    t = _table()
    f = p.fmt
    if not (QMV_HALF2 and f.affine and f.bits in t.QMV_H2_ROWS and dt in t.QMV_H2_DTYPES):
        return False
    limit = dynamic_smem(device, QMV_H2_STATIC_SMEM)
    # row offsets from a batch's w, scales and biases are 32-bit in the kernel
    rows_ok = all(p.N * _row_stride(lay) < 2**32 for lay in (p.w, p.s, p.b))
    return p.K % 32 == 0 and p.K // 32 * t.QMV_H2_SMEM_PER_CHUNK <= limit and rows_ok


QMV_H2_BLOCKS_PER_CU = 2  # qmv_h2 row blocks resident per CU (its registers' residency)


def qmv_h2_split(mats, m, batch, chunks, rows_per_wave, wave, device):
    """Waves of qmv_h2 per row group (its k split), or None when no split puts every matrix
    but the last on a row-block boundary (``mats``: the row counts of the node's matrix and
    its siblings). A block loops over its share of the row blocks (``qmv_h2_blocks``), and
    each pass over one is a latency-bound round (loads, sums, a block-wide reduction): the
    split with the fewest passes wins, then the one keeping the most blocks busy, then the
    smaller split; a split needs every lane of its waves to keep a pair of chunks of k.
    (H100, llama-8b 4-bit, tools/kernel_timeline.py: the fused q/k/v with its RMS prologue
    took 17.8 us in two passes at split 2 and 15.0 us in one at split 1; session 16's rule,
    ~12 waves per compute unit, chose 2. Every other decode projection keeps its split.)"""
    waves = _table().QMV_H2_THREADS // wave
    steps = chunks * 16 // wave        # pairs of chunks per 32 lanes (plan.ksplit's steps)
    best, ks = None, 1
    while ks <= waves and (ks == 1 or steps >= ks * 32):
        block_rows = waves // ks * rows_per_wave
        if not any(n % block_rows for n in mats[:-1]):
            units = -(-sum(mats) // block_rows)
            blocks = qmv_h2_blocks(sum(mats), m, batch, block_rows, device)
            key = (-(-units // blocks), -blocks, ks)
            if best is None or key < best[0]:
                best = (key, ks)
        ks *= 2
    return None if best is None else best[1]


def qmv_h2_blocks(rows, m, batch, block_rows, device) -> int:
    """Row blocks of qmv_h2 launched along x: at most two per compute unit (the residency its
    registers allow), each looping over its share of the row blocks with x staged once; a
    block per row block costs a staging of x each (tools/qmv_mma.cu on the H200, the 8b head:
    0.63 of the copy bandwidth with one block per row block, 0.77 with two per CU)."""
    cap = compute_units(device) * QMV_H2_BLOCKS_PER_CU // max(1, m * min(batch, GRID_Y))
    return max(1, min(-(-rows // block_rows), cap))


def qmv_mma_ksplit(rows, batch, groups, device) -> int:
    """Waves of qmv_mma per 16-row tile, each over a share of the quantization groups of k:
    the smallest of 1, 2, 4 that gives about 6 waves per compute unit while each wave keeps
    8 groups (tools/qmv_mma.cu on the H200: 1 for 14336 rows, 4 for 4096 rows of 4096 or 14336)."""
    target = compute_units(device) * 6
    tiles = -(-rows // 16) * batch
    ks = 1
    while ks < QMV_MMA_WAVES and tiles * ks < target and groups >= 16 * ks:
        ks *= 2
    return ks


def _qmv_mma_serves(p: Problem, device, dt, W, x_vec, w_vec, x_bstr, w_bstrs) -> bool:
    """qmv_mma takes the product: 2-8 rows of x (one row stays on qmv: in mlx-lm's decode of
    a llama-8b-shaped 4-bit model qmv_mma made the step slower, 181 against 232 tok/s in one
    lease, benchmarks/results/qmv_matrix_unit-h200.txt; at 4 rows it is 2.5x qmv, which reads
    w once per row), 4-bit affine w in groups of 32/64/128, 16-bit x with rows 16 bytes apart,
    the device's own wave width, and a matrix unit with a backend of this kernel (mma.sync,
    MFMA, gfx12 WMMA) that passed its self-test here. mma.sync also wants k a whole number of
    256-value stages and w's, the scales' and the biases' rows aligned for its vector loads
    (a stage's scales take 512 / group bytes); a base address off the alignment takes the
    kernel's slow, exact path."""
    t = _table()
    f = p.fmt
    if p.M < 2 or not (f.affine and f.bits == 4 and f.gs in t.QMV_MMA_GROUPS and dt in t.QMV_MMA_DTYPES):
        return False
    be = matrix_units.backend(device, dt)
    if be not in t.QMV_MMA_BACKENDS or W != int(device.wave_size) or not x_vec:
        return False
    if be == "mma_sync":   # 16-byte loads of w, x and a stage's scales
        if p.K % t.QMV_MMA_STAGE or not w_vec:
            return False
        sb = 512 // f.gs
        for row, bstr in ((_row_stride(p.s), w_bstrs[1]), (_row_stride(p.b), w_bstrs[2])):
            if (row * 2) % sb or any((st * 2) % sb for st in bstr):
                return False
    return matrix_units.usable(FAMILY, device, dt, qmv_mma_selftest)


# The self-test of qmv_mma (matrix_units.usable): every group size, 3 rows of x, 40 rows of w
# (a partial tile) and 2 stages of k, against qmv on the same packed weights. The tolerance
# is far below a wrong lane layout's errors (the outputs' own size, ~1) and above the two
# kernels' different sums rounded to 16 bits.
SELFTEST_SHAPE = (3, 40, 512)          # M, N, K
SELFTEST_TOL = {"float16": 1e-2, "bfloat16": 5e-2}
SELFTEST_PERTURB = None                # tests: a function applied to the matrix-unit result


def qmv_mma_selftest(rt, dt: str) -> tuple:
    """(ok, why): qmv_mma against qmv for each group size, on rt's device."""
    import numpy as np

    t = _table()
    M, N, K = SELFTEST_SHAPE
    rng = np.random.default_rng(4321)
    for gs in t.QMV_MMA_GROUPS:
        f = fmt_for(gs, 4, 0)
        G = K // gs
        x = rng.standard_normal((M, K)).astype(np.float32) / math.sqrt(K)
        w = rng.integers(0, 2**32, (N, K // 8), dtype=np.uint64).astype(np.uint32)
        sc = (rng.standard_normal((N, G)) * 0.05).astype(np.float32)
        bi = (rng.standard_normal((N, G)) * 0.2).astype(np.float32)
        host = [matrix_units.to16(x, dt), w, matrix_units.to16(sc, dt), matrix_units.to16(bi, dt)]
        lays = (Layout.row_major((M, K), dt), Layout.row_major((N, K // 8), "uint32"),
                Layout.row_major((N, G), dt), Layout.row_major((N, G), dt))
        o = Layout.row_major((M, N), dt)
        p = Problem(f, *lays, o, M, N, K, True)
        shape = ()
        args = (p, rt.props, lays[0], inp(0), shape, shape, (), shape, ((), (), ()))
        steps = {"mma": _qmv_launch(*args, force_mma=True), "twin": _qmv_launch(*args, force_mma=False)}
        ok, why = matrix_units.compare_twins(rt, host, steps, lambda i, out: (i[0], i[1], i[2], i[3], i[0], i[0], out),
                                             o.size, dt, SELFTEST_TOL[dt], SELFTEST_PERTURB, f"group {gs}")
        if not ok:
            return ok, why
    return True, ""


def _prepare_x(p: Problem, device, temps: list, steps: list):
    """x as the kernel reads it (elements along k contiguous): (layout, ref) or None."""
    x = p.x
    if _inner_ok(x):
        return x, inp(0)
    cp = _x_copy(x, device, len(temps))
    if cp is None:
        return None
    steps.append(cp[0])
    temps.append(max(x.nbytes, 1))
    return cp[1], tmp(len(temps) - 1)


def _plan_qmv(p: Problem, device, sibs=()):
    steps, temps = [], []
    px = _prepare_x(p, device, temps, steps)
    if px is None:
        return None
    x, x_ref = px
    bshape = p.o.shape[:-2] if p.x.ndim >= 2 else ()
    xb = x.strides[:-2] if x.ndim >= 2 else ()
    nb_w = p.w.ndim - 2
    if nb_w and p.w.shape[:-2] != tuple(bshape):
        return None
    zeros = tuple(0 for _ in bshape)
    ws = [lay.strides[:-2] if nb_w else zeros for lay in (p.w, p.s, p.b)]
    shape, (xs, w_s, s_s, b_s) = _collapse(bshape, xb, *ws)
    if len(shape) > QBATCH:
        return None
    lau = _qmv_launch(p, device, x, x_ref, shape, shape, xs, shape, (w_s, s_s, b_s), sibs=sibs)
    if lau is None:
        return None
    steps.append(lau)
    return Plan(tuple(steps), temps=tuple(temps))


def plan_siblings(nodes, device):
    """QuantizedMatmul nodes on the same x (an attention's q/k/v projections, an MLP's
    gate and up) as one qmv_h2 launch: one launch and one staging of x instead of one per
    matrix; on the H200 a small matvec costs ~4-5 us over its bytes (matvec_sweep-h200.txt),
    so this is what decode's q/k/v and gate/up gain. Only where each alone would take
    qmv_h2 (decode rows, affine 16-bit) with the same format, k, rows of x and row strides,
    one batch, x read in place; else None (each runs alone)."""
    if nodes and nodes[0].prim == "Add":
        return _plan_rms_chain(nodes, device)
    if nodes and nodes[-1].prim == "Compiled":
        return _plan_glu(nodes, device)
    ps = [_problem(n, gather=False) for n in nodes]
    if len(ps) < 2 or len(ps) > 1 + QSIBS or any(p is None for p in ps):
        return None
    p0 = ps[0]
    if not (p0.transpose and 0 < p0.M <= QMV_MAX_M and p0.K > 0 and _inner_ok(p0.x)):
        return None
    for p in ps:
        if (p.x != p0.x or p.fmt != p0.fmt or not p.transpose or p.K != p0.K or p.M != p0.M
                or p.w.ndim != 2 or p.o.size == 0 or p.o.shape[:-1] != p0.o.shape[:-1]
                or any(_row_stride(a) != _row_stride(b) for a, b in ((p.w, p0.w), (p.s, p0.s), (p.b, p0.b)))):
            return None
    return _plan_qmv(p0, device, sibs=tuple(ps[1:]))


def _plan_rms_chain(nodes, device):
    """[Add, RMSNorm of its sum, 1-3 QuantizedMatmuls of the norm's output] (the evaluator's
    CHAINS: a transformer block's residual add, its next norm and the projections after it)
    as one qmv_h2n launch: each block makes the norm's row itself before its products, block
    (0, 0) writes the sum and the norm's output (later nodes read them). With a gate and up
    and their swiglu as the projections (a tail): qmv_h2ng, both. A decode row only
    (one row of x, no batch) where the projections alone would be one qmv_h2 launch and the
    norm's row fits the shared memory beside the staged x; else None (the pair and the
    projections run as before)."""
    from . import norm

    head = norm.chain_head(nodes)
    qs = nodes[2:]
    glu = bool(qs) and qs[-1].prim == "Compiled"     # gate, up and their swiglu (a tail)
    mats = qs[:-1] if glu else qs
    if head is None or len(mats) > 1 + QSIBS or any(q.prim != "QuantizedMatmul" for q in mats):
        return None
    y = head[0]
    n = y.shape[-1]
    ps = [_problem(q, gather=False) for q in mats]
    if any(p is None or p.x.shape != y.shape or p.x.dtype != y.dtype or p.K != n for p in ps):
        return None
    sub = plan_siblings(qs, device) if len(qs) > 1 else _plan_qmv(ps[0], device)
    if sub is None or len(sub.steps) != 1 or sub.temps:
        return None
    (lau,) = sub.steps
    t = _table()
    dt, bits, W = y.dtype, ps[0].fmt.bits, wave_width(device)
    if lau.kernel != (t.qmv_h2g_name if glu else t.qmv_h2_name)(kt, bits, dt, W):
        return None
    smem = _pro_offset(n // 32) + n * ITEM[dt]
    if smem > dynamic_smem(device, QMV_H2_STATIC_SMEM):
        return None
    name = (t.qmv_h2ng_name if glu else t.qmv_h2n_name)(kt, bits, dt, W)
    return Plan((norm.with_prologue(head, lau, name, smem),))


def tail_ok(tail) -> bool:
    """Whether the evaluator tries graph node (prim, params, ins, outs) ``tail``, which reads
    the outputs of a sibling group in the group's order, with the group (TAILS_AFTER): a
    Compiled node only when it is a SwiGLU whose gate is its first input (the group's first)."""
    return tail[0] == "Compiled" and compiled.swiglu_gate(tail[1]) == 0


def _plan_glu(nodes, device):
    """[gate, up, Compiled swiglu of the two] (mlx-lm's MLP: swiglu(gate_proj(x), up_proj(x)),
    the evaluator's tail of a sibling group) as one qmv_h2g launch: the siblings' qmv_h2 launch
    whose blocks each take a row block of the gate and the same of the up, and store
    silu(gate) * up of those rows too (no launch, nor a read of gate and up, for the swiglu).
    Where the two alone are one qmv_h2 launch of equal rows and the swiglu's output is theirs
    in shape and dtype; else None (the group and the swiglu run apart)."""
    *qs, c = nodes
    if len(qs) != 2 or compiled.swiglu_gate(c.params) != 0 or len(c.ins) != 2 or len(c.outs) != 1:
        return None
    g, u = qs
    if g.out.shape != u.out.shape or c.out.shape != g.out.shape or c.out.dtype != g.out.dtype:
        return None
    sub = plan_siblings(qs, device)
    if sub is None or len(sub.steps) != 1 or sub.temps:
        return None
    (lau,) = sub.steps
    t = _table()
    bits, dt, W = g.params[1], g.out.dtype, wave_width(device)   # (group size, bits, mode, transpose)
    if lau.kernel != t.qmv_h2_name(kt, bits, dt, W):
        return None
    return Plan((Launch(lau.family, t.qmv_h2g_name(kt, bits, dt, W), lau.grid, lau.block, lau.shared_mem,
                        1 + lau.n_ptrs, lau.tail, (out(2),) + lau.refs),))


def _pro_offset(chunks: int) -> int:
    """mlxa::q::qmv_h2_pro_offset: bytes of staged x before the prologue's row."""
    return (chunks * _table().QMV_H2_SMEM_PER_CHUNK + 15) & ~15


# ---- prefill: dequantize, then the matmul family's GEMM -------------------------------

def prefill_operands(p: Problem, device):
    """(dequant launch, temporary bytes, x, w_deq, out layouts of the synthetic Matmul) or None."""
    M, N, K = p.M, p.N, p.K
    x, dt = p.x, p.x.dtype
    isz = ITEM[dt]
    rows, cols = (N, K) if p.transpose else (K, N)
    x2 = x if x.ndim >= 2 else Layout.strided((1, K), (K, x.strides[-1]), dt)
    bshape = tuple(x2.shape[:-2])
    nb_w = p.w.ndim - 2
    if nb_w and p.w.shape[:-2] != bshape:
        return None
    # distinct w batches: the dims some operand of w really walks (the rest stay broadcast)
    keep = [i for i in range(nb_w) if bshape[i] != 1 and any(l.strides[i] != 0 for l in (p.w, p.s, p.b))]
    kshape = tuple(bshape[i] for i in keep)
    cshape, (cw, cs, cb) = _collapse(kshape, *(tuple(l.strides[i] for i in keep) for l in (p.w, p.s, p.b)))
    if len(cshape) > QBATCH:
        return None
    nbat = 1
    for d in kshape:
        nbat *= d
    deq = _dequant_launch(p, nbat, rows, cols, cshape, (cw, cs, cb), device)
    if deq is None:
        return None
    # the dequantized operand as the GEMM's (..., K, N) input
    tstr = ew.row_strides(kshape + (rows, cols))
    bstr = [0] * len(bshape)
    for j, i in enumerate(keep):
        bstr[i] = tstr[j]
    inner = (1, K) if p.transpose else (N, 1)
    b_lay = Layout.strided(bshape + (K, N), tuple(bstr) + inner, dt)
    o_lay = Layout.row_major(bshape + (M, N), dt)
    return deq, max(nbat * rows * cols * isz, 1), x2, b_lay, o_lay


def _dequant_launch(p: Problem, mats, rows, cols, bshape, bstrides, device):
    """One launch dequantizing ``mats`` matrices of w (rows x cols, over the collapsed batch
    ``bshape`` with w's, the scales' and the biases' ``bstrides``) into temporary 0, row-major
    in x's dtype; None past 32-bit positions."""
    f = p.fmt
    total = mats * rows * (cols // f.cv)
    if total > _U31:
        return None
    tail = dequant_tail(total, rows, cols, _row_stride(p.w), _row_stride(p.s), _row_stride(p.b), f.shift,
                        bshape, *bstrides)
    return Launch(FAMILY, _table().dequant_name(kt, f.name, p.x.dtype), _grid_1d(total, device), (BLOCK, 1, 1), 0,
                  4, tail, (inp(1), inp(2), inp(3) if f.affine else inp(2), tmp(0)))


def _plan_prefill(p: Problem, device):
    from . import matmul

    ops = prefill_operands(p, device)
    if ops is None:
        return None
    deq, deq_bytes, x2, b_lay, o_lay = ops
    mplan = matmul.plan_node(_MatmulNode(x2, b_lay, o_lay), device)
    # the matmul's A is x, its B the dequantized w (our temporary 0); its temporaries follow
    gemm = embed(mplan, {("i", 0): inp(0), ("i", 1): tmp(0), ("o", 0): out(0)}, lambda i, n: i + 1)
    if gemm is None:
        return None
    return Plan((deq, *gemm), temps=(deq_bytes,) + tuple(mplan.temps))


def _MatmulNode(a, b, o):
    from ..plan import Node

    return Node("Matmul", (), (a, b), (o,))


# ---- GatherQMM -----------------------------------------------------------------------

def _plan_gather(node, device):
    p = _problem(node, gather=True)
    if p is None or p.x.ndim < 2:
        return None
    n_in = 4 if p.fmt.affine else 3
    lhs, rhs = node.ins[n_in], node.ins[n_in + 1]
    if lhs.dtype != "uint32" or rhs.dtype != "uint32":
        return None
    ob = tuple(p.o.shape[:-2])
    if lhs.shape != ob or rhs.shape != ob or p.x.shape[-2] != p.M:
        return None
    if not p.transpose or p.M > QMV_MAX_M:
        return _plan_gather_dequant(p, n_in, lhs, rhs, device)
    steps, temps = [], []
    px = _prepare_x(p, device, temps, steps)
    if px is None:
        return None
    x, x_ref = px
    oshape, (ls, rs) = _collapse(ob, lhs.strides, rhs.strides)
    xshape, (xs,) = _collapse(x.shape[:-2], x.strides[:-2])
    wshape, (w_s, s_s, b_s) = _collapse(p.w.shape[:-2], p.w.strides[:-2], p.s.strides[:-2], p.b.strides[:-2])
    if max(len(oshape), len(xshape), len(wshape)) > QBATCH:
        return None
    lau = _qmv_launch(p, device, x, x_ref, oshape, xshape, xs, wshape, (w_s, s_s, b_s), gather=(ls, rs))
    if lau is None:
        return None
    steps.append(lau)
    return Plan(tuple(steps), temps=tuple(temps))


def _plan_gather_dequant(p: Problem, n_in: int, lhs, rhs, device):
    """GatherQMM with more than QMV_MAX_M rows of x, or transpose=False: every matrix of w
    dequantized into a temporary of x's dtype (MLX's dequantize arithmetic, as the prefill
    path), then GatherMM's plan (gather_mm.py) over it with the node's own index arrays."""
    from ..plan import Node
    from . import gather_mm

    N, K = p.N, p.K
    dt = p.x.dtype
    rows, cols = (N, K) if p.transpose else (K, N)
    wb = tuple(p.w.shape[:-2])
    cshape, (cw, cs, cb) = _collapse(wb, p.w.strides[:-2], p.s.strides[:-2], p.b.strides[:-2])
    if len(cshape) > QBATCH:
        return None
    mats = math.prod(wb)
    deq = _dequant_launch(p, mats, rows, cols, cshape, (cw, cs, cb), device) if mats else None
    if deq is None:
        return None
    # w's matrices as GatherMM's b (..., K, N): read transposed where w holds them (N, K)
    bstr = tuple(ew.row_strides(wb + (rows, cols))[:-2])
    inner = (1, K) if p.transpose else (N, 1)
    b_lay = Layout.strided(wb + (K, N), bstr + inner, dt)
    sub = gather_mm.plan_node(Node("GatherMM", (False, False), (p.x, b_lay, lhs, rhs), (p.o,)), device)
    if sub is None:
        return None
    mm = embed(sub, {("i", 0): inp(0), ("i", 1): tmp(0), ("i", 2): inp(n_in), ("i", 3): inp(n_in + 1),
                     ("o", 0): out(0)}, lambda i, n: i + 1)
    if mm is None:
        return None
    return Plan((deq, *mm), temps=(max(mats * rows * cols * ITEM[dt], 1),) + tuple(sub.temps))


# ---- fast::Quantize --------------------------------------------------------------------

def _plan_quantize(node, device):
    if len(node.params) != 5 or len(node.ins) != 1 or len(node.outs) != 3:
        return None
    _, gs, bits, mode, dequantize = node.params
    if dequantize or int(mode) != 0:
        return None
    f = fmt_for(gs, bits, mode)
    if f is None:
        return None
    (w,) = node.ins
    wq, sc, bi = node.outs
    dt = w.dtype
    if dt not in DTYPES or wq.dtype != "uint32" or sc.dtype != dt or bi.dtype != dt or w.ndim < 1:
        return None
    K = w.shape[-1]
    if K % f.gs or wq.shape != w.shape[:-1] + (K * f.bits // 32,) or sc.shape != w.shape[:-1] + (K // f.gs,):
        return None
    if bi.shape != sc.shape:
        return None
    groups = w.size // f.gs
    if groups == 0:
        return Plan(())
    steps, temps = [], []
    w_ref = inp(0)
    if not w.row_contiguous:
        cp = _x_copy(w, device, 0)
        if cp is None:
            return None
        steps.append(cp[0])
        temps.append(w.nbytes)
        w_ref = tmp(0)
    name = _table().quantize_name(kt, f.bits, dt)
    steps.append(Launch(FAMILY, name, _grid_1d(groups, device), (BLOCK, 1, 1), 0, 4,
                        quantize_tail(groups, f.gs), (w_ref, out(0), out(1), out(2))))
    return Plan(tuple(steps), temps=tuple(temps))


# ---- fast::ConvertFP8 --------------------------------------------------------------------

def _plan_fp8(node, device):
    if len(node.params) != 1 or len(node.ins) != 1 or len(node.outs) != 1:
        return None
    to_fp8 = bool(node.params[0])
    (x,), o = node.ins, node.out
    dt = x.dtype if to_fp8 else o.dtype
    if dt not in DTYPES or (o.dtype if to_fp8 else x.dtype) != "uint8" or x.shape != o.shape:
        return None
    n = o.size
    if n == 0:
        return Plan(())
    steps, temps, x_ref = [], [], inp(0)
    if not ew.is_dense_like(x, o):
        cp = _x_copy(x, device, 0)
        if cp is None:
            return None
        steps.append(cp[0])
        temps.append(x.nbytes)
        x_ref = tmp(0)
    steps.append(Launch(FAMILY, _table().fp8_name(kt, to_fp8, dt), _grid_1d(n, device), (BLOCK, 1, 1), 0, 2,
                        _FP8_TAIL.pack(n), (x_ref, out(0))))
    return Plan(tuple(steps), temps=tuple(temps))


# ---- QQMatmul ----------------------------------------------------------------------------

def _plan_qqmm(node, device):
    """QQMatmul (mx.qqmm with an fp-mode quantized w): x quantized to w's mode and back in
    one pass (qdq: MLX's CPU arithmetic, per group of 16 or 32 values of K), then the
    QuantizedMatmul plan of that x, embedded. MLX's CPU takes one row of x (M == 1) only
    and raises for more; here every M and batch runs, each row as MLX computes one. Not
    taken: global scales (nvfp4's optional fourth and fifth inputs; MLX's CPU path),
    un-quantized w (MLX quantizes it first in the graph: a QQMatmul sees uint32 w)."""
    from ..plan import Node

    if len(node.params) != 3 or len(node.ins) != 3 or len(node.outs) != 1:
        return None
    gs, bits, mode = (int(v) for v in node.params)
    f = fmt_for(gs, bits, mode)
    if f is None or f.affine or f.name not in _table().QDQ_FORMATS:
        return None
    x, w, s = node.ins
    xr = Layout.row_major(x.shape, x.dtype)
    p = _problem(Node("QuantizedMatmul", (gs, bits, mode, True), (xr, w, s), node.outs), gather=False)
    if p is None:
        return None
    sub = _plan_qmm(p, device)
    if p.o.size == 0 or p.K == 0:     # nothing to read: no qdq
        return sub
    return _after_qdq(x, f, device, sub, {("i", 1): inp(1), ("i", 2): inp(2)})


def _after_qdq(x, f, device, sub, refs):
    """[x copied row-contiguous when it is not,] qdq of x into a temporary, then ``sub`` (a
    plan whose input 0 is that x; ``refs`` maps its other inputs to ours) with its
    temporaries after ours; None when there is no sub-plan or it cannot be embedded."""
    if sub is None:
        return None
    steps, temps, x_ref = [], [], inp(0)
    if not x.row_contiguous:
        xc = _x_copy(x, device, 0)
        if xc is None:
            return None
        steps.append(xc[0])
        temps.append(x.size * ITEM[x.dtype])
        x_ref = tmp(0)
    groups = x.size // f.gs
    hat = len(temps)
    temps.append(x.size * ITEM[x.dtype])
    steps.append(Launch(FAMILY, _table().qdq_name(kt, f.name, x.dtype), _grid_1d(groups, device), (BLOCK, 1, 1),
                        0, 2, _QDQ_TAIL.pack(groups), (x_ref, tmp(hat))))
    base = len(temps)
    mm = embed(sub, {("i", 0): tmp(hat), ("o", 0): out(0), **refs}, lambda i, n: base + i)
    if mm is None:
        return None
    return Plan(tuple(steps) + tuple(mm), temps=tuple(temps) + tuple(sub.temps))


def _plan_gather_qq(node, device):
    """GatherQQMM (mx.gather_qqmm, fp modes): qdq of x as for QQMatmul, then GatherQMM's plan
    (rows of x <= 8). MLX's CPU has no GatherQQMM at all; each output is what its QQMatmul
    of x[lhs] and w[rhs] gives. Inputs (x, w, lhs, rhs, scales); global scales: not taken."""
    from ..plan import Node

    if len(node.params) != 5 or len(node.ins) != 5 or len(node.outs) != 1:
        return None
    gs, bits, mode, lsorted, rsorted = node.params
    f = fmt_for(gs, bits, mode)
    if f is None or f.affine or f.name not in _table().QDQ_FORMATS:
        return None
    x, w, lhs, rhs, s = node.ins
    if x.dtype not in DTYPES or x.ndim < 2 or x.shape[-1] % f.gs:
        return None
    xr = Layout.row_major(x.shape, x.dtype)
    syn = Node("GatherQMM", (gs, bits, mode, True, lsorted, rsorted), (xr, w, s, lhs, rhs), node.outs)
    if node.out.size == 0:
        return Plan(()) if _problem(syn, True) is not None else None
    return _after_qdq(x, f, device, _plan_gather(syn, device),
                      {("i", 1): inp(1), ("i", 2): inp(4), ("i", 3): inp(2), ("i", 4): inp(3)})


# ---- entry --------------------------------------------------------------------------------

def _plan_dequantize(node, device):
    """mlx_amd::Dequantize (mx.dequantize, affine, while enabled) on the prefill's dequantize
    kernel: w's rows, its leading dimensions a batch of matrices, into the row-major output;
    scales, biases and output of one float dtype (else None: MLX's decomposition on the CPU)."""
    if len(node.ins) != 3 or len(node.outs) != 1:
        return None
    w, s, b = node.ins
    o = node.out
    f = fmt_for(int(node.params[0]), int(node.params[1]), 0)
    if f is None or w.dtype != "uint32" or o.dtype not in DTYPES or s.dtype != o.dtype or b.dtype != o.dtype:
        return None
    K = o.shape[-1] if o.ndim else 0
    if w.ndim == 0 or o.shape[:-1] != w.shape[:-1] or K % f.gs or s.shape != w.shape[:-1] + (K // f.gs,) \
            or b.shape != s.shape or not all(_inner_ok(lay) for lay in (w, s, b)):
        return None
    name = _table().dequant_name(kt, f.name, o.dtype)
    if not kt.has_kernel(FAMILY, name):
        return None
    if o.size == 0:
        return Plan(())
    rows = w.shape[-2] if w.ndim >= 2 else 1
    bshape = w.shape[:-2]
    cshape, (cw, cs, cb) = _collapse(bshape, *(lay.strides[:-2] for lay in (w, s, b)))
    mats = math.prod(bshape)
    total = mats * rows * (K // f.cv)
    if len(cshape) > QBATCH or total > _U31:
        return None
    tail = dequant_tail(total, rows, K, _row_stride(w), _row_stride(s), _row_stride(b), f.shift, cshape, cw, cs, cb)
    return Plan((Launch(FAMILY, name, _grid_1d(total, device), (BLOCK, 1, 1), 0, 4, tail,
                        (inp(0), inp(1), inp(2), out(0))),))


def plan_node(node, device):
    if node.prim == "mlx_amd::Dequantize":
        return _plan_dequantize(node, device)
    if node.prim == "fast::Quantize":
        return _plan_quantize(node, device)
    if node.prim == "fast::ConvertFP8":
        return _plan_fp8(node, device)
    if node.prim == "QQMatmul":
        return _plan_qqmm(node, device)
    if node.prim == "GatherQQMM":
        return _plan_gather_qq(node, device)
    if node.prim == "GatherQMM":
        if node.out.size == 0:
            return Plan(()) if _problem(node, True) is not None else None
        return _plan_gather(node, device)
    if node.prim != "QuantizedMatmul":
        return None
    p = _problem(node, gather=False)
    return None if p is None else _plan_qmm(p, device)


def _plan_qmm(p: Problem, device):
    """QuantizedMatmul's plan for a checked problem: qmv (decode) or dequantize + GEMM."""
    if p.o.size == 0:
        return Plan(())
    if p.K == 0:
        return Plan((Memset(out(0), p.o.nbytes, 0),))
    if p.transpose and p.M <= QMV_MAX_M:
        return _plan_qmv(p, device)
    return _plan_prefill(p, device)
