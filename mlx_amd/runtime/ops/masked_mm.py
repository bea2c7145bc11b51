"""masked_mm launcher: BlockMaskedMM and SegmentedMM, around the matmul family's GEMMs.

- BlockMaskedMM(block_size): inputs a (..., M, K), b (..., K, N), then the masks MLX
  passes: three inputs are (a, b, out mask), four (a, b, lhs mask, rhs mask), five all
  three. A mask holds one entry per block x block tile (partial tiles at the edges), bool
  (keep or zero the tile: NaN and inf in a zeroed tile become 0, as in MLX) or of the
  matmul's dtype (the tile scaled by it, rounded to the dtype). Steps: the operand masks
  on copies of A and B (our ``bmask`` kernel, hip_kernels/masked_mm.hip), the matmul
  family's plan for A @ B into the output, then the output mask in place. float16,
  bfloat16, float32 and float64 (MLX's CPU takes float32 only: beyond it, like GatherMM).
- SegmentedMM: a (M, K), b (K, N), segments (..., 2) uint32 (MLX casts them): out[s] =
  a[:, lo:hi] @ b[lo:hi, :] per segment, zeros when hi <= lo. The segments are data on
  the device, so one host step reads them (waiting for the stream) and issues one
  library GEMM per segment (our portable kernel where no library serves). A segment past
  K raises ValueError naming it (MLX's CPU aborts the process in BLAS there).
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
import struct

from .. import kernel_table as kt
from ..launch import Launch
from ..plan import HostCall, Layout, Memset, Node, Plan, embed, inp, out, tmp
from . import copy as copy_family
from . import elementwise as ew
from . import matmul

FAMILY = "masked_mm"
PRIMITIVES = {"BlockMaskedMM": "block_masked_mm", "SegmentedMM": "segmented_mm"}

DTYPES = ("float16", "bfloat16", "float32", "float64")
BATCH = 4                                  # MLXA_MMASK_BATCH
_ARGS = struct.Struct(f"<7q2i{3 * BATCH}q")  # BlockMaskArgs after its three pointers
_PTRS = 3
ARG_STRUCTS = {"BlockMaskArgs": (_PTRS, 8 * _PTRS + _ARGS.size)}


def plan_node(node, device):
    if node.prim == "BlockMaskedMM":
        return plan_block_masked(node, device)
    if node.prim == "SegmentedMM":
        return plan_segmented(node, device)
    return None


# ---- BlockMaskedMM ----------------------------------------------------------------------

def _pad(v, fill=0):
    v = tuple(int(x) for x in v)
    return v + (fill,) * (BATCH - len(v))


def bmask_launch(x: Layout, x_ref, mask: Layout, m_ref, y_ref, block: int, device):
    """y (row-contiguous, x's shape) = x with each block x block tile kept, zeroed or
    scaled by its mask entry; x and the mask take any strides. None past 4 batch dims."""
    rows, cols = x.shape[-2:]
    bshape = x.shape[:-2]
    if bshape:
        shape, (xbs, mbs) = ew.collapse_dims(bshape, x.strides[:-2], mask.strides[:-2])
    else:
        shape, xbs, mbs = (), (), ()
    if len(shape) > BATCH:
        return None
    total = rows * cols * math.prod(bshape)
    grid, blk = ew.grid_for(total, device)
    tail = _ARGS.pack(rows, cols, block, x.strides[-2], x.strides[-1], mask.strides[-2], mask.strides[-1],
                      len(shape), int(mask.dtype == "bool"), *_pad(shape, 1), *_pad(xbs), *_pad(mbs))
    name = kt.table("masked_mm").kernel(kt, x.dtype)
    return Launch(FAMILY, name, grid, blk, 0, _PTRS, tail, refs=(x_ref, m_ref, y_ref))


def _params_block(p):
    if isinstance(p, tuple) and len(p) == 1:
        p = p[0]
    return p if isinstance(p, int) and not isinstance(p, bool) and p > 0 else None


def plan_block_masked(node, device):
    block = _params_block(node.params)
    ins = node.ins
    if block is None or len(ins) not in (3, 4, 5) or len(node.outs) != 1:
        return None
    a, b, o = ins[0], ins[1], node.outs[0]
    dt = o.dtype
    if dt not in DTYPES or a.dtype != dt or b.dtype != dt or a.ndim < 2 or a.ndim != b.ndim or a.ndim != o.ndim:
        return None
    M, K = a.shape[-2:]
    N = b.shape[-1]
    bshape = o.shape[:-2]
    if b.shape[-2] != K or o.shape[-2:] != (M, N) or a.shape[:-2] != bshape or b.shape[:-2] != bshape:
        return None
    out_mask = ins[2] if len(ins) in (3, 5) else None
    lhs_mask, rhs_mask = (ins[-2], ins[-1]) if len(ins) in (4, 5) else (None, None)
    tm, tn, tk = (-(-d // block) for d in (M, N, K))
    for m, want in ((out_mask, (tm, tn)), (lhs_mask, (tm, tk)), (rhs_mask, (tk, tn))):
        if m is not None and (m.dtype not in ("bool", dt) or m.shape != bshape + want):
            return None
    if o.size == 0:
        return Plan(())
    steps, temps = [], []
    operands = []
    for i, (x, m) in enumerate(((a, lhs_mask), (b, rhs_mask))):
        if m is None:
            operands.append((x, inp(i)))
            continue
        t = len(temps)
        temps.append(max(x.nbytes, 1))
        lau = bmask_launch(x, inp(i), m, inp(len(ins) - 2 + i), tmp(t), block, device)
        if lau is None:
            return None
        steps.append(lau)
        operands.append((Layout.row_major(x.shape, dt), tmp(t)))
    (A, a_ref), (B, b_ref) = operands
    sub = matmul.plan_node(Node("Matmul", (), (A, B), (o,)), device)
    base = len(temps)
    gemm = embed(sub, {("i", 0): a_ref, ("i", 1): b_ref, ("o", 0): out(0)}, lambda i, n: base + i)
    if gemm is None:
        return None
    temps.extend(sub.temps)
    steps += gemm
    if out_mask is not None:
        lau = bmask_launch(Layout.row_major(o.shape, dt), out(0), out_mask, inp(2), out(0), block, device)
        if lau is None:
            return None
        steps.append(lau)
    return Plan(tuple(steps), temps=tuple(temps))


# ---- SegmentedMM ------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class SegmentCall:
    """HostCall: ``ptrs`` (A, B, segments, D). Reads the segments after the stream drains,
    then one GEMM per segment on the library (column-major, as the matmul family calls
    it) or the portable kernel."""

    dtype: str
    m: int
    n: int
    k: int
    a_lay: tuple          # lib_layout of A (M x K): ("row" | "col", leading dimension)
    b_lay: tuple          # ... of B (K x N)
    count: int            # segments

    def read(self, ptrs, stream, ctx) -> list:
        segs = (ctypes.c_uint32 * (2 * self.count))()
        ctx.driver.memcpy_dtoh(ctypes.addressof(segs), ptrs[2], 8 * self.count, stream)
        ctx.driver.stream_synchronize(stream)
        pairs = [(segs[2 * i], segs[2 * i + 1]) for i in range(self.count)]
        for i, (lo, hi) in enumerate(pairs):
            if hi > lo and hi > self.k:
                raise ValueError(f"[segmented_mm] segment {i} is [{lo}, {hi}) but the inner dimension "
                                 f"of the matmul is {self.k}")
        return pairs

    def offsets(self, lo: int) -> tuple:
        """Byte offsets of column ``lo`` of A and row ``lo`` of B."""
        isz = matmul.ITEM[self.dtype]
        (ka, lda), (kb, ldb) = self.a_lay, self.b_lay
        return lo * (1 if ka == "row" else lda) * isz, lo * (ldb if kb == "row" else 1) * isz

    def __call__(self, ptrs, stream, ctx):
        from .. import blas
        from ..launch import run

        a, b, _, d = ptrs
        isz = matmul.ITEM[self.dtype]
        (ka, lda), (kb, ldb) = self.a_lay, self.b_lay
        per = self.m * self.n * isz
        for i, (lo, hi) in enumerate(self.read(ptrs, stream, ctx)):
            di = d + i * per
            if hi <= lo:
                ctx.driver.memset(di, 0, per, stream)
                continue
            oa, ob = self.offsets(lo)
            k = hi - lo
            # column-major D^T (N x M) = B^T A^T, as the matmul family hands it over
            g = blas.Gemm(self.dtype, self.n, self.m, k, trans_a=(kb == "col"), trans_b=(ka == "col"),
                          lda=ldb, ldb=lda, ldc=self.n)
            if blas.run(ctx, g, b + ob, a + oa, di, di, stream):
                continue
            A = matmul.Operand(inp(0), *((lda, 1) if ka == "row" else (1, lda)), ())
            B = matmul.Operand(inp(1), *((ldb, 1) if kb == "row" else (1, ldb)), ())
            for lau, (fa, fb, fc, fd) in matmul.kernel_launches(self.dtype, self.m, self.n, k, A, B, None, (),
                                                               1.0, 0.0, relative=True):
                run(lau, ctx.modules, ctx.driver, (a + oa + fa, b + ob + fb, di + fc, di + fd), stream)


def _lib_operand(x: Layout, i: int, temps: list, steps: list, device):
    """(ref, lib_layout) of a 2-D operand the library can read, copying it row-contiguous
    first when its strides are neither; None when no copy plan exists."""
    lay = matmul.lib_layout(x.shape[0], x.shape[1], x.strides[0], x.strides[1])
    if lay is not None:
        return inp(i), lay
    lau = copy_family.copy_to(x, inp(i), tmp(len(temps)), device)
    if lau is None:
        return None
    temps.append(max(x.nbytes, 1))
    steps.append(lau)
    return tmp(len(temps) - 1), ("row", max(x.shape[1], 1))


def plan_segmented(node, device):
    if len(node.ins) != 3 or len(node.outs) != 1:
        return None
    a, b, seg = node.ins
    o = node.outs[0]
    dt = o.dtype
    if dt not in DTYPES or a.dtype != dt or b.dtype != dt or a.ndim != 2 or b.ndim != 2:
        return None
    M, K = a.shape
    N = b.shape[1]
    if b.shape[0] != K or seg.dtype != "uint32" or seg.ndim < 1 or seg.shape[-1] != 2:
        return None
    if o.shape != seg.shape[:-1] + (M, N):
        return None
    count = math.prod(seg.shape[:-1])
    if o.size == 0:
        return Plan(())
    if count and K == 0:
        return Plan((Memset(out(0), o.nbytes, 0),))
    steps, temps = [], []
    got = [_lib_operand(x, i, temps, steps, device) for i, x in enumerate((a, b))]
    if None in got:
        return None
    (a_ref, la), (b_ref, lb) = got
    s_ref = inp(2)
    if not seg.row_contiguous:
        row = Layout.row_major(seg.shape, "uint32")
        lau = copy_family.plan("copy", (seg,), row, device)
        if lau is None:
            return None
        temps.append(seg.nbytes)
        steps.append(dataclasses.replace(lau, refs=(inp(2), tmp(len(temps) - 1))))
        s_ref = tmp(len(temps) - 1)
    call = SegmentCall(dt, M, N, K, la, lb, count)
    steps.append(HostCall(call, (a_ref, b_ref, s_ref, out(0)), what=f"segmented_mm {dt} {M}x{N}x{K} x{count}"))
    return Plan(tuple(steps), temps=tuple(temps))
