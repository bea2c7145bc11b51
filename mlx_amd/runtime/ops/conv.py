"""Convolution launcher: MLX's Convolution primitive (conv1d/2d/3d, conv_general,
conv_transpose*, and the convolutions of a conv's vjp) as im2col + GEMM.

MLX's layouts are channels-last: input (N, *spatial, C_in), weight (C_out, *kernel,
C_in / groups), output (N, *out_spatial, C_out). State: kernel_strides, padding_lo,
padding_hi, kernel_dilation, input_dilation, groups, flip. An output element is

    out[n, o, co] = sum_{k, c} x~[n, o * stride + tap(k) * kdil - pad_lo, g * Cg + c] * w[co, k, c]

with g = co // (C_out / groups), tap(k) = K - 1 - k when flipping, and x~ the input
with (input_dilation - 1) zeros between its elements (taps outside it read 0).

Plan, float16/bfloat16 where the device has a matrix unit (mlxa/mma.h; runtime/matrix_units.py
checks it against a host reference at first use): one launch of conv_mma, the implicit GEMM
that reads each patch straight from the input into shared memory (no patches in memory), when
the layouts give 8-element runs (unit channel stride, C_in per group and every input stride
multiples of 8) and at most MMA_MAX_COG output channels per group share the patches (wider
GEMMs run faster as im2col + the vendor GEMM); ``MLX_AMD_CONV=im2col`` takes the path below
instead (benchmarks, tests).

Otherwise: our im2col kernel (hip_kernels/conv.hip) writes the patches of a chunk of output
positions into a temporary (at most CHUNK_BYTES), then the matmul family's plan for a
synthetic Matmul multiplies them by the weight seen as a (taps * Cg, C_out) matrix (the
vendor GEMM: tensor cores on both vendors), its buffer references remapped onto our
temporaries, inputs and the output's rows of that chunk. groups > 1 is one batched GEMM
over groups into a temporary, then a copy-family transpose into the output's columns. A
1x1 convolution with stride 1 and no padding of a row-contiguous input is the GEMM alone.

Not covered (MLX's CPU runs them): dtypes other than float16/bfloat16/float32/float64
(MLX refuses the others too), more than 3 spatial dims, convolutions needing more than
MAX_CHUNKS chunks.
"""

from __future__ import annotations

import dataclasses
import math
import struct

from .. import kernel_table as kt
from .. import matrix_units, switches
from ..launch import Launch
from ..plan import Layout, Memset, Node, Plan, compute_units, embed, inp, out as out_ref, tmp
from . import copy as copy_family
from . import matmul

FAMILY = "conv"

PRIMITIVES = {"Convolution": "conv"}

DTYPES = ("float16", "bfloat16", "float32", "float64")
ITEM = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
DIMS = 3                      # MLXA_CONV_DIMS
BLOCK = 256                   # MLXA_CONV_BLOCK
CHUNK_BYTES = 256 << 20       # patches per chunk
MAX_CHUNKS = 256
_BLOCKS_PER_CU = 32
_I32 = 2**31 - 1

# ---- argument struct (include/mlxa/conv_args.h) ----------------------------------------
_TAIL = struct.Struct("<3q" + f"{2 + DIMS}q" + f"{7 * DIMS}i" + "5i")
_MMA_TAIL = struct.Struct("<q" + f"{1 + DIMS}q" + f"{7 * DIMS}i" + "7i")
ARG_STRUCTS = {"ConvArgs": (2, 16 + _TAIL.size), "ConvMmaArgs": (3, 24 + _MMA_TAIL.size)}

ENV = "MLX_AMD_CONV"              # auto (default) | im2col
MMA_VE = 8                        # elements of one 16-byte run of a 16-bit dtype
MMA_M128_BLOCKS_PER_CU = 2        # BM = 128 when its blocks fill this many per unit, else 64
MMA_BM = None                     # tests and benchmarks: force a position tile
# conv_mma only where the GEMM is narrow: its cost is the flops at its own rate, im2col's the
# patches written and read back plus the flops at the vendor GEMM's (wgmma-class) rate, and the
# patches weigh more the fewer output channels share them. On a lent H100 (conv_bench-h100.json,
# session 33, after the corner-offset rewrite) conv_mma ran ResNet's 56x56 64->64 layer at 120
# TFLOP/s against im2col's 66, won at 128 channels (28x28: 149 / 127; 56x56 stride 2: 146 / 113)
# and lost at 256 and 512 (120 / 197, 86 / 284).
MMA_MAX_COG = 128


def conv_tail(p0, positions, n_work, in_strides, in_spatial, out_spatial, kernel, stride, pad_lo,
              kdil, idil, groups, cg, ktot, vec, flip) -> bytes:
    return _TAIL.pack(p0, positions, n_work, *in_strides, *in_spatial, *out_spatial, *kernel, *stride,
                      *pad_lo, *kdil, *idil, groups, cg, ktot, vec, int(bool(flip)))


def _pad(v, fill):
    """Spatial parameters padded in front to DIMS (extent-1 dims keep the order)."""
    v = [int(x) for x in v]
    return [fill] * (DIMS - len(v)) + v


@dataclasses.dataclass(frozen=True)
class Geometry:
    N: int
    C_in: int
    C_out: int
    G: int
    Cg: int
    Cog: int
    ktot: int
    positions: int            # N * prod(out spatial)
    in_spatial: tuple
    out_spatial: tuple
    kernel: tuple
    stride: tuple
    pad_lo: tuple
    kdil: tuple
    idil: tuple
    flip: bool

    @property
    def kd(self) -> int:      # GEMM depth: taps * channels per group
        return self.ktot * self.Cg


def geometry(node):
    """The convolution's sizes (padded to DIMS spatial dims), or None when not covered."""
    if node.prim != "Convolution" or len(node.ins) != 2 or len(node.outs) != 1 or len(node.params) != 7:
        return None
    x, w = node.ins
    o = node.out
    strides, lo, hi, kdil, idil, groups, flip = node.params
    D = x.ndim - 2
    if not (1 <= D <= DIMS and w.ndim == x.ndim and o.ndim == x.ndim):
        return None
    if not (x.dtype == w.dtype == o.dtype and o.dtype in DTYPES):
        return None
    if not all(len(p) == D for p in (strides, lo, hi, kdil, idil)):
        return None
    G = int(groups)
    N, C_in, C_out = x.shape[0], x.shape[-1], w.shape[0]
    if G < 1 or C_in % G or C_out % G or w.shape[-1] * G != C_in:
        return None
    if o.shape[0] != N or o.shape[-1] != C_out:
        return None
    if min(strides) < 1 or min(kdil) < 1 or min(idil) < 1:
        return None
    # the output extent MLX computes from these parameters (a mismatch: not our node)
    for d in range(D):
        S, K = x.shape[1 + d], w.shape[1 + d]
        span = (S - 1) * idil[d] + 1 + lo[d] + hi[d] - ((K - 1) * kdil[d] + 1)
        if S and K and span >= 0 and o.shape[1 + d] != span // strides[d] + 1:
            return None
    out_sp = tuple(o.shape[1:-1])
    return Geometry(N, C_in, C_out, G, C_in // G, C_out // G, math.prod(w.shape[1:-1]),
                    N * math.prod(out_sp), tuple(_pad(x.shape[1:-1], 1)), tuple(_pad(out_sp, 1)),
                    tuple(_pad(w.shape[1:-1], 1)), tuple(_pad(strides, 1)), tuple(_pad(lo, 0)),
                    tuple(_pad(kdil, 1)), tuple(_pad(idil, 1)), bool(flip))


# ---- a matmul plan on our buffers -----------------------------------------------------------
def _gemm_steps(A: Layout, B: Layout, D: Layout, a_ref, b_ref, d_ref, temps: list, device):
    """The matmul family's steps for D = A @ B on our buffers (its temporaries appended
    to ``temps``), or None."""
    plan = matmul.plan_node(Node("Matmul", (), (A, B), (D,)), device)
    if plan is None:
        return None
    base = len(temps)
    steps = embed(plan, {("i", 0): a_ref, ("i", 1): b_ref, ("o", 0): d_ref}, lambda i, n: base + i)
    if steps is not None:
        temps.extend(plan.temps)
    return steps


def _copy_launch(src: Layout, dst: Layout, src_ref, dst_ref, device):   # (the plan tests trace it)
    return copy_family.copy_to(src, src_ref, dst_ref, device, dst)


# ---- im2col ---------------------------------------------------------------------------------
def _vec(x: Layout, g: Geometry) -> int:
    """Channels per im2col work item: 16 bytes' worth when the layout proves it."""
    V = 16 // x.itemsize
    st = x.strides
    if V > 1 and st[-1] == 1 and g.Cg % V == 0 and all(s % V == 0 for s in st[:-1]):
        return V
    return 1


def _im2col(x: Layout, g: Geometry, p0: int, P: int, x_ref, t_ref, device) -> Launch:
    vec = _vec(x, g)
    n_work = P * g.G * (g.Cg // vec)
    sp = _pad(x.strides[1:-1], 0)
    in_strides = (x.strides[0], *sp, x.strides[-1])
    tail = conv_tail(p0, P, n_work, in_strides, g.in_spatial, g.out_spatial, g.kernel, g.stride, g.pad_lo,
                     g.kdil, g.idil, g.G, g.Cg, g.ktot, vec, g.flip)
    cap = compute_units(device) * _BLOCKS_PER_CU
    grid = (min(-(-n_work // BLOCK), cap), 1, 1) if n_work else (0, 1, 1)
    name = kt.table(FAMILY).name(kt, x.itemsize)
    return Launch(FAMILY, name, grid, (BLOCK, 1, 1), 0, 2, tail, (x_ref, t_ref))


# ---- the implicit GEMM on the matrix unit -------------------------------------------------------
def mma_tail(g: Geometry, x: Layout, out_vec: bool) -> bytes:
    sp = _pad(x.strides[1:-1], 0)
    return _MMA_TAIL.pack(g.positions, x.strides[0], *sp, *g.in_spatial, *g.out_spatial, *g.kernel, *g.stride,
                          *g.pad_lo, *g.kdil, *g.idil, g.Cg, g.Cog, g.C_out, g.kd, int(g.flip),
                          int(any(d > 1 for d in g.idil)), int(out_vec))


def _mma_fits(x: Layout, g: Geometry) -> bool:
    """The layouts give the kernel its 8-element runs and its sizes fit the grid."""
    st = x.strides
    return (st[-1] == 1 and g.Cg % MMA_VE == 0 and all(s % MMA_VE == 0 for s in st[:-1])
            and g.G <= 65535 and -(-g.Cog // kt.table(FAMILY).MMA_BN) <= 65535 and g.kd <= _I32
            and all(o * s + p + k * kd < 1 << 30 and i * di < _I32  # the kernel's 32-bit coordinates
                    for o, s, p, k, kd, i, di in zip(g.out_spatial, g.stride, g.pad_lo, g.kernel, g.kdil,
                                                     g.in_spatial, g.idil)))


def mma_launch(g: Geometry, x: Layout, dt: str, x_ref, w_ref, o_ref, device, bm=None) -> Launch:
    """The conv_mma launch; ``bm`` (position tile) None: the planner's choice."""
    t = kt.table(FAMILY)
    cu = compute_units(device)
    tiles = lambda m: -(-g.positions // m) * -(-g.Cog // t.MMA_BN) * g.G
    if bm is None:
        bm = MMA_BM or (128 if tiles(128) >= MMA_M128_BLOCKS_PER_CU * cu else 64)
    out_vec = g.C_out % MMA_VE == 0 and g.Cog % MMA_VE == 0
    grid = (-(-g.positions // bm), -(-g.Cog // t.MMA_BN), g.G)
    block = t.mma_block(matrix_units.backend(device, dt))
    return Launch(FAMILY, t.mma(dt, bm), grid, (block, 1, 1), 0, 3, mma_tail(g, x, out_vec), (x_ref, w_ref, o_ref))


def _mma_usable(device, dt: str) -> bool:
    return switches.choice(ENV, ("auto", "im2col"), "auto") == "auto" and dt in kt.table(FAMILY).MMA_DTYPES \
        and matrix_units.usable(FAMILY, device, dt, mma_selftest)


# The self-test (matrix_units.usable): two groups of 24 input channels, 40 output channels each
# (a partial channel tile), 3x3 taps with a stride and padding, 72 positions (a partial position
# tile), depth 216 (a partial depth chunk); both position tiles; against the direct definition
# of the rounded inputs. A wrong lane layout errs by the outputs' own size; the tolerance sits
# above the rounding of the 16-bit result.
SELFTEST_PARAMS = ((1, 2), (1, 1), (1, 1), (1, 1), (1, 1), 2, False)
SELFTEST_SHAPES = ((2, 9, 7, 48), (80, 3, 3, 24))
SELFTEST_TOL = {"float16": 2e-3, "bfloat16": 1.6e-2}      # of the largest |output|
SELFTEST_PERTURB = None                # tests: a function applied to the matrix-unit result


def mma_selftest(rt, dt: str) -> tuple:
    import numpy as np

    dev = rt.props
    rng = np.random.default_rng(4321)
    xs, ws = SELFTEST_SHAPES
    bufs = [matrix_units.to16(rng.standard_normal(s).astype(np.float32), dt) for s in (xs, ws)]
    ref = reference(matrix_units.from16(bufs[0], dt).reshape(xs), matrix_units.from16(bufs[1], dt).reshape(ws),
                    *SELFTEST_PARAMS)
    lays = (Layout.row_major(xs, dt), Layout.row_major(ws, dt))
    g = geometry(Node("Convolution", SELFTEST_PARAMS, lays, (Layout.row_major(ref.shape, dt),)))
    tol = SELFTEST_TOL[dt] * float(np.max(np.abs(ref)))
    for bm in kt.table(FAMILY).MMA_BM:
        steps = {"mma": mma_launch(g, lays[0], dt, inp(0), inp(1), out_ref(0), dev, bm)}
        ok, why = matrix_units.compare_twins(rt, bufs, steps, lambda i, o: (i[0], i[1], o), ref.size, dt, tol,
                                             SELFTEST_PERTURB, f"conv_mma m{bm}", reference=ref)
        if not ok:
            return ok, why
    return True, ""


def _is_pointwise(x: Layout, g: Geometry) -> bool:
    return (g.G == 1 and g.ktot == 1 and all(s == 1 for s in g.stride) and not any(g.pad_lo)
            and all(d == 1 for d in g.idil) and g.in_spatial == g.out_spatial and x.row_contiguous)


def plan_node(node, device):
    g = geometry(node)
    if g is None:
        return None
    x, w = node.ins
    o = node.out
    dt, isz = o.dtype, ITEM[o.dtype]
    if o.size == 0:
        return Plan(())
    if g.kd == 0 or x.size == 0:
        return Plan((Memset(out_ref(0), o.nbytes, 0),))
    if max(g.in_spatial + g.out_spatial) > _I32 or g.ktot > _I32 or g.Cg > _I32:
        return None
    steps: list = []
    temps: list = []
    # the weight as (C_out, taps * Cg) row-major: in place, or copied so
    if w.row_contiguous:
        w_ref = inp(1)
    else:
        cp = _copy_launch(w, Layout.row_major(w.shape, dt), inp(1), tmp(len(temps)), device)
        if cp is None:
            return None
        w_ref = tmp(len(temps))
        temps.append(w.size * isz)
        steps.append(cp)
    kd, M = g.kd, g.positions
    if _is_pointwise(x, g):
        A = Layout.strided((M, kd), (kd, 1), dt)
        B = Layout.strided((kd, g.C_out), (1, kd), dt)
        gemm = _gemm_steps(A, B, Layout.row_major((M, g.C_out), dt), inp(0), w_ref, out_ref(0), temps, device)
        return None if gemm is None else Plan(tuple(steps + gemm), temps=tuple(temps))
    if g.Cog <= MMA_MAX_COG and _mma_fits(x, g) and _mma_usable(device, dt):
        steps.append(mma_launch(g, x, dt, inp(0), w_ref, out_ref(0), device))
        return Plan(tuple(steps), temps=tuple(temps))
    # chunks of output positions whose patches fit CHUNK_BYTES
    per_pos = g.G * kd * isz
    P = max(1, min(M, CHUNK_BYTES // per_pos))
    chunks = -(-M // P)
    if chunks > MAX_CHUNKS:
        return None
    t_patch = len(temps)
    temps.append(P * per_pos)
    t_d = None
    if g.G > 1:
        t_d = len(temps)
        temps.append(P * g.C_out * isz)
    gemm_cache: dict = {}
    for c in range(chunks):
        p0 = c * P
        pc = min(P, M - p0)
        steps.append(_im2col(x, g, p0, pc, inp(0), tmp(t_patch), device))
        o_ref = out_ref(0, p0 * g.C_out * isz)
        if g.G == 1:
            key = pc
            if key not in gemm_cache:
                A = Layout.row_major((pc, kd), dt)
                B = Layout.strided((kd, g.C_out), (1, kd), dt)
                gemm_cache[key] = (A, B, Layout.row_major((pc, g.C_out), dt))
            A, B, D = gemm_cache[key]
            gemm = _gemm_steps(A, B, D, tmp(t_patch), w_ref, o_ref, temps, device)
            if gemm is None:
                return None
            steps.extend(gemm)
        else:
            # batched over groups: (G, pc, kd) @ (G, kd, Cog) -> (G, pc, Cog), then the
            # transpose into the output rows (pc, G, Cog)
            A = Layout.row_major((g.G, pc, kd), dt)
            B = Layout.strided((g.G, kd, g.Cog), (g.Cog * kd, 1, kd), dt)
            D = Layout.row_major((g.G, pc, g.Cog), dt)
            gemm = _gemm_steps(A, B, D, tmp(t_patch), w_ref, tmp(t_d), temps, device)
            if gemm is None:
                return None
            steps.extend(gemm)
            view = Layout.strided((pc, g.G, g.Cog), (g.Cog, pc * g.Cog, 1), dt)
            cp = _copy_launch(view, Layout.row_major((pc, g.G, g.Cog), dt), tmp(t_d), o_ref, device)
            if cp is None:
                return None
            steps.append(cp)
    return Plan(tuple(steps), temps=tuple(temps))


def reference(x, w, strides, lo, hi, kdil, idil, groups, flip):
    """NumPy model of the primitive (float64), for the plan tests: direct definition."""
    import numpy as np

    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    D = x.ndim - 2
    N, C_in, C_out = x.shape[0], x.shape[-1], w.shape[0]
    Cg, Cog = C_in // groups, C_out // groups
    K = w.shape[1:-1]
    S = x.shape[1:-1]
    O = [((S[d] - 1) * idil[d] + 1 + lo[d] + hi[d] - ((K[d] - 1) * kdil[d] + 1)) // strides[d] + 1
         for d in range(D)]
    out = np.zeros((N, *O, C_out))
    for oi in np.ndindex(*O):
        for ki in np.ndindex(*K):
            src = []
            for d in range(D):
                tap = K[d] - 1 - ki[d] if flip else ki[d]
                q = oi[d] * strides[d] + tap * kdil[d] - lo[d]
                if q < 0 or q % idil[d] or q // idil[d] >= S[d]:
                    break
                src.append(q // idil[d])
            else:
                xs = x[(slice(None), *src)]                 # (N, C_in)
                for gi in range(groups):
                    xg = xs[:, gi * Cg:(gi + 1) * Cg]
                    wg = w[(slice(gi * Cog, (gi + 1) * Cog), *ki)]   # (Cog, Cg)
                    out[(slice(None), *oi, slice(gi * Cog, (gi + 1) * Cog))] += xg @ wg.T
    return out
