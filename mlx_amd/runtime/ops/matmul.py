"""Matmul launcher: Matmul and AddMM through the vendor GEMM libraries (``runtime/blas``),
our gemv kernel for matrix-vector shapes (hip_kernels/gemv.hip) and our portable tiled
GEMM (hip_kernels/gemm.hip) where no library serves.

Inputs arrive as a (..., M, K) and b (..., K, N) with equal batch shapes (MLX
broadcasts them first; zero strides are common). Row-major D = A B is handed to the
column-major libraries as D^T = B^T A^T, so a row- or column-contiguous operand goes
to the library as it is, transposed or not; other layouts are copied into a temporary
with the copy family's plan first. A batch that is not one stride apart becomes a short
list of jobs, each a strided-batched call; a batch broadcast against a row-major
operand folds into M. AddMM (state: alpha, beta) copies c, already broadcast to the
output's shape, into the output, then accumulates with beta into it.

Plans are pure data. The GEMM step is a ``HostCall`` of a ``GemmCall``, which also
carries the portable kernel's launches for the same operands: when no library takes
the problem at run time (not installed, no kernel for the type/arch), those run.
``MLX_AMD_GEMM=kernel`` plans the portable kernel directly (the GPU suite checks it
that way); ``MLX_AMD_GEMM=blas`` skips the gemv kernel.

Not covered here: GatherMM (gather_mm.py), BlockMaskedMM and SegmentedMM (masked_mm.py); AddMM with
K == 0; integer dtypes (MLX refuses them too).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import struct

from .. import kernel_table as kt
from ..launch import Launch
from ..plan import HostCall, Layout, Memset, Plan, dynamic_smem, inp, ksplit, out, tmp, wave_width
from . import copy as copy_family
from . import elementwise as ew

FAMILY = "gemm"
GEMV_FAMILY = "gemv"

PRIMITIVES = {"Matmul": "matmul", "AddMM": "addmm"}

DTYPES = ("float32", "float16", "bfloat16", "float64", "complex64")
GEMV_DTYPES = ("float32", "float16", "bfloat16")
ITEM = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "complex64": 8}

MAX_LIB_JOBS = 64        # separate library calls per node before copying instead
MAX_KERNEL_JOBS = 4096   # launches of the portable kernel per node
GRID_Z = 65535
GEMV_WAVES = 4           # waves per gemv block (mlxa::kGemvWaves)
GEMV_ROWS = 2            # rows per gemv wave (mlxa::kGemvRows)
GEMV_STATIC_SMEM = 4096  # gemv's static shared memory and the emulated wave's slots, rounded up
GEMV_PER_CU = 24         # plan.ksplit's waves per CU for the gemv (tools/matvec_sweep.cu)
TILE = 64                # mlxa::kTileM == kTileN
GEMM_THREADS = 256

# ---- argument structs (gemv_args.h, gemm_args.h) ----------------------------------
_GEMV_TAIL = struct.Struct("<7q2f2i")    # after the 3 pointers
_GEMM_TAIL = struct.Struct("<14q2d")     # after the 4 pointers
ARG_STRUCTS = {"GemvArgs": (3, 3 * 8 + _GEMV_TAIL.size), "GemmArgs": (4, 4 * 8 + _GEMM_TAIL.size)}
GEMV_SIBS = 2                            # MLXA_GEMV_SIBS: GemvSibs' matrices (before GemvArgs)
_GEMV_SIB_ROWS = struct.Struct("<2q")    # GemvSibRows (after GemvArgs)
# Matmul nodes on one x (q/k/v, gate/up of a bf16 decode step) may run as one gemv (plan_siblings)
SIBLINGS = ("Matmul",)
# ... and with the residual add and RMS norm before them as one gemv_rmsrows launch (chain):
# only with MLX_AMD_DENSE_CHAINS=1. On an H100 every block recomputing the norm cost more
# than the launch it saves (llama-8b bf16 decode 143.5 -> 136.3 tok/s, session 27: unlike
# qmv_h2n, the gemv's many blocks start with it, no weight loads in flight); kept for AMD
# GPUs, where a launch costs more, to be measured there.
DENSE_CHAINS = {("Add", "mlx_amd::RMSNorm"): ("Matmul",)}
CHAINS_AFTER = DENSE_CHAINS if os.environ.get("MLX_AMD_DENSE_CHAINS") == "1" else {}


def gemv_tail(rows, k, ldw, incx, bw, bx, by, alpha=1.0, beta=0.0, ksplit=1) -> bytes:
    return _GEMV_TAIL.pack(rows, k, ldw, incx, bw, bx, by, alpha, beta, ksplit, 0)


def gemm_tail(m, n, k, a_rs, a_cs, b_rs, b_cs, a_bs, b_bs, d_bs, c_rs, c_cs, c_bs, ldd,
              alpha=1.0, beta=0.0) -> bytes:
    return _GEMM_TAIL.pack(m, n, k, a_rs, a_cs, b_rs, b_cs, a_bs, b_bs, d_bs, c_rs, c_cs, c_bs, ldd,
                           alpha, beta)


def _mode() -> str:
    return os.environ.get("MLX_AMD_GEMM", "auto").strip().lower() or "auto"


# ---- operands --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Operand:
    """One matrix operand as the steps see it: which buffer, its inner strides (rows,
    cols) and its batch strides, in elements."""

    ref: tuple            # plan.Ref of element 0
    rs: int
    cs: int
    bs: tuple             # per batch dim


def lib_layout(rows: int, cols: int, rs: int, cs: int):
    """('row', ld): element (i, j) at i*ld + j; ('col', ld): at i + j*ld; None: neither."""
    if (cs == 1 or cols == 1) and (rows == 1 or rs >= max(cols, 1)):
        return "row", (rs if rows > 1 else max(cols, 1))
    if (rs == 1 or rows == 1) and (cols == 1 or cs >= max(rows, 1)):
        return "col", (cs if cols > 1 else max(rows, 1))
    return None


def _collapse_batch(shape, *strides):
    """Batch dims after dropping 1s and merging neighbours (may be empty)."""
    if not shape or all(d == 1 for d in shape):
        return (), [() for _ in strides]
    s, st = ew.collapse_dims(tuple(shape), *strides)
    return s, st


def _split(shape, strides, inner_ok):
    """(inner count, inner strides, outer offsets per job): the last batch dim becomes a
    strided batch when ``inner_ok(its strides)``, every other index a separate job."""
    if not shape:
        return 1, tuple(0 for _ in strides), [tuple(0 for _ in strides)]
    if inner_ok(tuple(s[-1] for s in strides)):
        outer, inner = shape[:-1], shape[-1]
        istr = tuple(s[-1] for s in strides)
        ostr = [s[:-1] for s in strides]
    else:
        outer, inner, istr, ostr = shape, 1, tuple(0 for _ in strides), list(strides)
    jobs = []
    for idx in itertools.product(*(range(d) for d in outer)):
        jobs.append(tuple(sum(i * s for i, s in zip(idx, st)) for st in ostr))
    return inner, istr, jobs


def _materialize(x: Layout, i: int, t: int, device):
    """Copy input ``i`` row-contiguous into temporary ``t``: (launch, Operand) or None."""
    lau = copy_family.copy_to(x, inp(i), tmp(t), device)
    if lau is None:
        return None
    st = Layout.row_major(x.shape, x.dtype).strides
    return lau, Operand(tmp(t), st[-2], st[-1], st[:-2])


# ---- the library step -------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class GemmCall:
    """HostCall body. ``ptrs`` are (A, B, D) in our row-major naming; per job (byte
    offsets into them) the library computes column-major D^T = B^T A^T, so its first
    operand is our B. When no library takes the problem, our kernel's launches run."""

    gemm: object                # blas.Gemm, column-major
    jobs: tuple                 # per job (A, B, D) byte offsets
    fallback: tuple             # (Launch, (A, B, C, D) byte offsets) of the portable kernel

    def __call__(self, ptrs, stream, ctx):
        from .. import blas
        from ..launch import run

        a, b, d = ptrs
        done = 0
        for oa, ob, od in self.jobs:
            if not blas.run(ctx, self.gemm, b + ob, a + oa, d + od, d + od, stream):
                break
            done += 1
        if done == len(self.jobs):
            return
        if done:   # libraries answer per problem, and every job is the same problem
            raise RuntimeError(f"mlx-amd: a GEMM library took {done} of {len(self.jobs)} jobs of {self.gemm}")
        for lau, (fa, fb, fc, fd) in self.fallback:
            run(lau, ctx.modules, ctx.driver, (a + fa, b + fb, d + fc, d + fd), stream)

    def native(self, ctx, ptrs):
        """The fields of a native library step (bridge replay.h, PLibCall) for a replay to
        make these calls itself at addresses aligned at least as ``ptrs`` (A, B, D) are,
        or None (the library has no native form, or takes no part of the problem)."""
        from .. import blas
        from ..blas.lt import alignment

        a, b, d = ptrs
        al = [256, 256, 256]
        for oa, ob, od in self.jobs:     # the library's A is our B (D^T = B^T A^T)
            for i, p in enumerate((b + ob, a + oa, d + od)):
                al[i] = min(al[i], alignment(p))
        got = blas.native(ctx, self.gemm, (al[0], al[1], al[2], al[2]))
        if got is None:
            return None
        fields, eng = got
        return fields + ((1, 0, 2), [(ob, oa, od) for oa, ob, od in self.jobs], eng)


# ---- planning -----------------------------------------------------------------------------

def _check(node):
    if node.prim not in PRIMITIVES or len(node.outs) != 1:
        return None
    addmm = node.prim == "AddMM"
    if len(node.ins) != (3 if addmm else 2):
        return None
    a, b = node.ins[0], node.ins[1]
    o = node.out
    dt = o.dtype
    if dt not in DTYPES or a.dtype != dt or b.dtype != dt or (addmm and node.ins[2].dtype != dt):
        return None
    if a.ndim < 2 or b.ndim < 2 or a.ndim != b.ndim or o.ndim != a.ndim:
        return None
    if a.shape[:-2] != b.shape[:-2] or o.shape[:-2] != a.shape[:-2]:
        return None
    M, K = a.shape[-2:]
    K2, N = b.shape[-2:]
    if K != K2 or o.shape[-2:] != (M, N):
        return None
    if addmm and node.ins[2].shape != o.shape:
        return None
    alpha, beta = 1.0, 0.0
    if addmm:
        if len(node.params) != 2:
            return None
        alpha, beta = float(node.params[0]), float(node.params[1])
    return a, b, o, dt, M, N, K, alpha, beta


def _c_init(node, device):
    """AddMM: c copied into the output (the GEMM then accumulates into it), or None."""
    c = node.ins[2]
    lau = copy_family.plan("copy", (c,), node.out, device)
    if lau is None:
        return None
    return dataclasses.replace(lau, refs=(inp(2), out(0)))


def kernel_launches(dt, M, N, K, A: Operand, B: Operand, C, bshape, alpha, beta, relative=False):
    """The portable kernel over any strides: list of (Launch, (A, B, C, D) byte offsets).
    ``C`` is (ref, rs, cs, bs) of the beta term or None. ``relative``: offsets are
    returned instead of being folded into the launches' refs (the HostCall fallback)."""
    isz = ITEM[dt]
    d_bs = ew.row_strides(bshape + (M, N))[:-2] if bshape else ()
    c_ref, c_rs, c_cs, c_bs = C if C is not None else (out(0), N, 1, d_bs)
    shape, (abs_, bbs, cbs, dbs) = _collapse_batch(bshape, A.bs, B.bs, c_bs, d_bs)
    inner, (ia, ib, ic, id_), jobs = _split(shape, (abs_, bbs, cbs, dbs), lambda s: True)
    name = kt.table("gemm").name(kt, dt)
    out_list = []
    grid_xy = (-(-N // TILE), -(-M // TILE))
    if grid_xy[1] >= GRID_Z:
        return None
    for ja, jb, jc, jd in jobs:
        for z0 in range(0, inner, GRID_Z):
            zc = min(GRID_Z, inner - z0)
            offs = tuple(isz * (j + z0 * s) for j, s in ((ja, ia), (jb, ib), (jc, ic), (jd, id_)))
            tail = gemm_tail(M, N, K, A.rs, A.cs, B.rs, B.cs, ia, ib, id_, c_rs, c_cs, ic, N, alpha, beta)
            if relative:
                refs = None
            else:
                refs = (A.ref._replace(offset=A.ref.offset + offs[0]), B.ref._replace(offset=B.ref.offset + offs[1]),
                        c_ref._replace(offset=c_ref.offset + offs[2]), out(0, offs[3]))
            lau = Launch(FAMILY, name, (grid_xy[0], grid_xy[1], zc), (GEMM_THREADS, 1, 1), 0, 4, tail, refs)
            out_list.append((lau, offs))
            if len(out_list) > MAX_KERNEL_JOBS:
                return None
    return out_list


def _gemv(dt, M, N, K, A: Operand, B: Operand, bshape, device, alpha, beta, sibs=()):
    """Our gemv for M == 1 or N == 1 with a row-contiguous matrix side; None otherwise.
    ``sibs``: (rows, matrix ref, output ref) of matrices laid out like B whose products
    with the same x the launch also computes (row vector x only); None if it cannot."""
    if dt not in GEMV_DTYPES or min(M, N) != 1 or K < 1:
        return None
    if N == 1 and (A.cs == 1 or K == 1) and M > 1:       # y[m] = sum_k a[m, k] b[k, 0]
        w, x, rows, ldw, incx, w_bs, x_bs = A, B, M, A.rs, B.rs, A.bs, B.bs
    elif M == 1 and (B.rs == 1 or K == 1) and (N > 1 or sibs):     # y[n] = sum_k b[k, n] a[0, k]
        w, x, rows, ldw, incx, w_bs, x_bs = B, A, N, B.cs, A.cs, B.bs, A.bs
    elif M == 1 and N == 1 and (A.cs == 1 or K == 1):
        w, x, rows, ldw, incx, w_bs, x_bs = A, B, 1, A.rs, B.rs, A.bs, B.bs
    else:
        return None
    if sibs and (w is not B or K == 1 or beta != 0.0 or len(sibs) > GEMV_SIBS):
        return None
    if K == 1:
        ldw = ldw if rows > 1 else 1
    d_bs = ew.row_strides(bshape + (M, N))[:-2] if bshape else ()
    shape, (wb, xb, db) = _collapse_batch(bshape, w_bs, x_bs, d_bs)
    if len(shape) > 1 or (shape and shape[0] > GRID_Z):
        return None
    batch = shape[0] if shape else 1
    if sibs and batch != 1:
        return None
    seg_rows = [rows] + [r for r, _, _ in sibs]
    ks = ksplit(-(-sum(seg_rows) // GEMV_ROWS) * batch, K * ITEM[dt] // 16, device, GEMV_WAVES,
                per_cu=GEMV_PER_CU)
    block_rows = GEMV_WAVES // ks * GEMV_ROWS
    grid_x = sum(-(-r // block_rows) for r in seg_rows)
    if grid_x >= 2**31:
        return None
    W = wave_width(device)
    name = kt.table("gemv").name(kt, dt, W)
    tail = gemv_tail(rows, K, ldw, incx, wb[0] if shape else 0, xb[0] if shape else 0,
                     db[0] if shape else 0, alpha, beta, ks)
    # GemvSibs (an absent sibling repeats the node's own w and y), GemvArgs, GemvSibRows
    per = [(m_ref, o_ref) for _, m_ref, o_ref in sibs] + [(w.ref, out(0))] * (GEMV_SIBS - len(sibs))
    sib_refs = tuple(p[0] for p in per) + tuple(p[1] for p in per)
    tail += _GEMV_SIB_ROWS.pack(*(seg_rows[1:] + [0] * (GEMV_SIBS - len(sibs))))
    return Launch(GEMV_FAMILY, name, (grid_x, batch, 1), (GEMV_WAVES * W, 1, 1), 0, 3 + 2 * GEMV_SIBS, tail,
                  sib_refs + (w.ref, x.ref, out(0)))


def _blas_plan(dt, M, N, K, A: Operand, B: Operand, bshape, alpha, beta, steps, temps):
    """HostCall steps for the libraries (operands row- or column-contiguous), or None."""
    from ..blas import Gemm

    la = lib_layout(M, K, A.rs, A.cs)
    lb = lib_layout(K, N, B.rs, B.cs)
    if la is None or lb is None:
        return None
    isz = ITEM[dt]
    d_bs = ew.row_strides(bshape + (M, N))[:-2] if bshape else ()
    shape, (abs_, bbs, dbs) = _collapse_batch(bshape, A.bs, B.bs, d_bs)
    m_rows = M
    # a batch broadcast against a row-major A whose batches are stacked rows: fold into M
    if len(shape) == 1 and bbs[0] == 0 and la[0] == "row" and abs_[0] == M * la[1] and M > 1:
        m_rows, shape, abs_, bbs, dbs = M * shape[0], (), (), (), ()
    elif len(shape) == 1 and bbs[0] == 0 and la[0] == "row" and M == 1 and abs_[0] >= K:
        m_rows, la, shape, abs_, bbs, dbs = shape[0], ("row", abs_[0]), (), (), (), ()
    inner, (ia, ib, id_), jobs = _split(shape, (abs_, bbs, dbs), lambda s: s[0] != 0 and s[1] != 0)
    if len(jobs) > MAX_LIB_JOBS:
        return None
    # column-major: D^T (N x m_rows) = B^T (N x K) A^T (K x m_rows)
    g = Gemm(dt, N, m_rows, K, trans_a=(lb[0] == "col"), trans_b=(la[0] == "col"),
             lda=lb[1], ldb=la[1], ldc=N, batch=inner, stride_a=ib, stride_b=ia, stride_c=id_,
             alpha=alpha, beta=beta)
    job_offs = tuple((isz * ja, isz * jb, isz * jd) for ja, jb, jd in jobs)
    fb = kernel_launches(dt, M, N, K, A, B, None, bshape, alpha, beta, relative=True)
    if fb is None:
        return None
    # the kernel's beta term is D itself (AddMM copied c there): its C offset is D's
    fb = tuple((lau, (oa, ob, od, od)) for lau, (oa, ob, _oc, od) in fb)
    call = GemmCall(g, job_offs, fb)
    steps.append(HostCall(call, (A.ref, B.ref, out(0)), what=f"gemm {dt} {M}x{N}x{K}"))
    return Plan(tuple(steps), temps=tuple(temps))


def plan_node(node, device):
    chk = _check(node)
    if chk is None:
        return None
    a, b, o, dt, M, N, K, alpha, beta = chk
    addmm = node.prim == "AddMM"
    bshape = o.shape[:-2]
    if o.size == 0:
        return Plan(())
    if K == 0:
        if addmm:
            return None
        return Plan((Memset(out(0), o.nbytes, 0),))
    A = Operand(inp(0), a.strides[-2], a.strides[-1], a.strides[:-2])
    B = Operand(inp(1), b.strides[-2], b.strides[-1], b.strides[:-2])
    mode = _mode()
    steps: list = []
    if addmm and beta != 0.0:
        c = node.ins[2]
        if mode == "kernel" or dt not in kt.COPY_DTYPES:
            # the portable kernel reads c in place through its strides
            C = (inp(2), c.strides[-2], c.strides[-1], c.strides[:-2])
            lau = kernel_launches(dt, M, N, K, A, B, C, bshape, alpha, beta)
            return None if lau is None else Plan(tuple(x for x, _ in lau))
        init = _c_init(node, device)
        if init is None:
            return None
        steps.append(init)
    if mode == "kernel":
        lau = kernel_launches(dt, M, N, K, A, B, None, bshape, alpha, beta)
        return None if lau is None else Plan(tuple(steps) + tuple(x for x, _ in lau))
    if mode != "blas":
        gv = _gemv(dt, M, N, K, A, B, bshape, device, alpha, beta)
        if gv is not None:
            return Plan(tuple(steps) + (gv,))
    # the libraries need each operand row- or column-contiguous: copy the others
    temps: list = []
    ops = [A, B]
    for i, (x, (r, cdim)) in enumerate(((a, (M, K)), (b, (K, N)))):
        op = ops[i]
        if lib_layout(r, cdim, op.rs, op.cs) is None:
            mat = _materialize(x, i, len(temps), device) if dt in kt.COPY_DTYPES else None
            if mat is None:
                lau = kernel_launches(dt, M, N, K, A, B, None, bshape, alpha, beta)
                return None if lau is None else Plan(tuple(steps) + tuple(x for x, _ in lau))
            steps.append(mat[0])
            temps.append(x.size * ITEM[dt])
            ops[i] = mat[1]
    plan = _blas_plan(dt, M, N, K, ops[0], ops[1], bshape, alpha, beta, list(steps), list(temps))
    if plan is not None:
        return plan
    # too many separate batches: copy both operands row-contiguous, one strided batch
    for i, x in enumerate((a, b)):
        if ops[i].ref.kind == "i" and dt in kt.COPY_DTYPES:
            mat = _materialize(x, i, len(temps), device)
            if mat is not None:
                steps.append(mat[0])
                temps.append(x.size * ITEM[dt])
                ops[i] = mat[1]
    plan = _blas_plan(dt, M, N, K, ops[0], ops[1], bshape, alpha, beta, list(steps), list(temps))
    if plan is not None:
        return plan
    lau = kernel_launches(dt, M, N, K, A, B, None, bshape, alpha, beta)
    return None if lau is None else Plan(tuple(s for s in steps if s.refs[-1].kind != "t")
                                          + tuple(x for x, _ in lau))


def plan_siblings(nodes, device):
    """Matmul nodes of one row vector x times several matrices laid out alike (a bf16
    decode step's q/k/v projections, its MLP's gate and up) as one gemv launch, the
    siblings' rows after the first matrix's: one launch instead of one per matrix; on the
    H200 each small matvec launch costs ~4 us over its bytes (matvec_sweep-h200.txt). Only
    where the first alone would take our gemv with x as the vector, the matrices have the
    same k, strides and dtype, and one batch; else None (each runs alone)."""
    if nodes and nodes[0].prim == "Add":
        return _plan_rms_chain(nodes, device)
    if len(nodes) < 2 or len(nodes) > 1 + GEMV_SIBS or _mode() != "auto":
        return None
    chks = [_check(n) for n in nodes]
    if any(c is None or n.prim != "Matmul" for c, n in zip(chks, nodes)):
        return None
    a, b, o, dt, M, N, K, _, _ = chks[0]
    if M != 1 or o.size == 0 or K == 0 or math.prod(o.shape[:-2]) != 1:
        return None
    sibs = []
    for j, (a2, b2, o2, dt2, M2, N2, K2, _, _) in enumerate(chks[1:], 1):
        if (a2 != a or dt2 != dt or M2 != 1 or K2 != K or N2 == 0 or o2.shape[:-1] != o.shape[:-1]
                or b2.strides != b.strides):
            return None
        sibs.append((N2, inp(2 * j + 1), out(j)))
    A = Operand(inp(0), a.strides[-2], a.strides[-1], a.strides[:-2])
    B = Operand(inp(1), b.strides[-2], b.strides[-1], b.strides[:-2])
    gv = _gemv(dt, M, N, K, A, B, o.shape[:-2], device, 1.0, 0.0, sibs=tuple(sibs))
    return None if gv is None else Plan((gv,))


def _plan_rms_chain(nodes, device):
    """[Add, RMSNorm of its sum, 1-3 Matmuls of the norm's output (a row vector) times
    matrices] (the evaluator's CHAINS: a bf16 decode step's residual add, next norm and
    q/k/v or gate/up projections, or the head) as one gemv_rmsrows launch: each block makes
    the norm's row in shared memory before its products, block (0, 0) writes the sum and the
    norm's output. Only where the projections alone would be one gemv launch reading x in
    place (one row, one batch) and the row fits the shared memory; else None."""
    from . import norm

    head = norm.chain_head(nodes)
    ms = nodes[2:]
    if head is None or len(ms) > 1 + GEMV_SIBS or _mode() != "auto" or any(m.prim != "Matmul" for m in ms):
        return None
    y = head[0]
    for m in ms:
        chk = _check(m)
        if chk is None:
            return None
        a, _b, _o, dt, M, _N, K, _, _ = chk
        if dt != y.dtype or M != 1 or K != y.shape[-1] or a.size != y.size or not a.row_contiguous:
            return None
    sub = plan_siblings(ms, device) if len(ms) > 1 else plan_node(ms[0], device)
    if sub is None or len(sub.steps) != 1 or sub.temps or sub.init:
        return None
    (lau,) = sub.steps
    W = wave_width(device)
    if not isinstance(lau, Launch) or lau.kernel != kt.table("gemv").name(kt, y.dtype, W):
        return None
    smem = y.size * ITEM[y.dtype]
    if smem > dynamic_smem(device, GEMV_STATIC_SMEM):
        return None
    return Plan((norm.with_prologue(head, lau, kt.table("gemv").rms_name(kt, y.dtype, W), smem),))
