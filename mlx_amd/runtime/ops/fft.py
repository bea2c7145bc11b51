"""FFT launcher: MLX's ``FFT`` primitive through the vendor FFT library (hipFFT on AMD,
cuFFT on the NVIDIA test GPU; ``runtime/fft``), with our copies, scaling and Hermitian
clean-up around it (hip_kernels/fft.hip).

State (MLX 0.32.4): (axes, inverse, real, odd_out). MLX has already sliced or zero-padded
the input to the transform sizes and cast it (float32 for rfft, complex64 otherwise), so
the node is one of: complex-to-complex over ``axes`` (shapes equal), real-to-complex
(the last of ``axes`` shrinks to n // 2 + 1) or complex-to-real (the output's last axis
is n, the input's n // 2 + 1). Inverse transforms are scaled by 1 / prod(n over axes),
as MLX's CPU does; the libraries never scale.

The libraries take batched transforms of rank 1 to 3 over the innermost dims of a
row-contiguous buffer, so each library stage permutes: its axes last (innermost), the
others in order in front as the batch. An input already laid out that way is read in
place; any other layout (transposed, sliced, broadcast, negative strides) is copied into
a temporary first with the copy family's plan. More than three axes run as successive
stages (a DFT is separable). The result lands in the output directly when the stage's
order is the output's, else in a temporary copied back.

Complex-to-real follows MLX's CPU (pocketfft) exactly also for input that is not
Hermitian: first the inverse complex transforms over all axes but the last, then a 1-D
complex-to-real over the last axis that reads only the real part of bin 0 (and of bin
n/2 for even n): we zero those imaginary parts in our copy before the library sees it,
since the libraries promise nothing there. A complex-to-real library call may overwrite
its input, so its input is always a temporary of ours. Axes of length 1 are identities
(dropped); a real axis of length 1 is a type conversion (the copy family).

Not covered (MLX's CPU fallback): float64 / other dtypes (MLX casts to complex64 and
float32 itself, so none reach here), a missing FFT library (``runtime.fft.available``)
and ``MLX_AMD_FFT=none``.
"""

from __future__ import annotations

import dataclasses
import math
import struct

from .. import kernel_table as kt
from ..launch import Launch
from ..plan import HostCall, Layout, Plan, inp, out, row_strides, tmp
from . import copy as copy_family
from . import elementwise as ew

FAMILY = "fft"
PRIMITIVES = {"FFT": "fft"}

MAX_RANK = 3              # hipFFT / cuFFT plan ranks
ALIGN = 16                # an input read in place below this alignment is staged first

# ---- argument structs (fft_args.h) -----------------------------------------------------
_SCALE = struct.Struct("<qfI")     # n, scale, pad (after the pointer)
_HERM = struct.Struct("<3q")       # rows, m, zero_last
ARG_STRUCTS = {"FftScaleArgs": (1, 8 + _SCALE.size), "FftHermitianArgs": (1, 8 + _HERM.size)}


def _table():
    return kt.table("fft")


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def inverse_scale(count: int) -> float:
    """1 / count as MLX's CPU computes it: in float32 (count converted to float first)."""
    return f32(1.0 / f32(float(count)))


def scale_launch(ref, nfloats: int, scale: float, device) -> Launch:
    grid, block = ew.grid_for(-(-nfloats // 4), device)
    return Launch(FAMILY, _table().SCALE, grid, block, 0, 1, _SCALE.pack(nfloats, scale, 0), (ref,))


def hermitian_launch(ref, rows: int, m: int, zero_last: bool, device) -> Launch:
    grid, block = ew.grid_for(rows, device)
    return Launch(FAMILY, _table().HERMITIAN, grid, block, 0, 1, _HERM.pack(rows, m, int(zero_last)), (ref,))


# ---- the library step ---------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class FftCall:
    """HostCall body: ptrs are (source, destination). ``stage`` (a contiguous copy launch,
    pointers (src, dst)) runs first into a pool block of ``stage_bytes`` when the source is
    an input whose address turns out less aligned than ``ALIGN``."""

    transform: object          # runtime.fft.Transform
    stage: object = None
    stage_bytes: int = 0

    def __call__(self, ptrs, stream, ctx):
        from .. import fft as fftlib
        from ..launch import run

        src, dst = ptrs
        if self.stage is None or src % ALIGN == 0:
            fftlib.run(ctx, self.transform, src, dst, stream)
            return
        pool = ctx.residency.device_pool
        blk = pool.alloc(self.stage_bytes)
        try:
            run(self.stage, ctx.modules, ctx.driver, (src, blk.data), stream, getattr(ctx, "native", None))
            fftlib.run(ctx, self.transform, blk.data, dst, stream)
        finally:
            pool.free(blk)     # stream order: its next user queues behind


# ---- planning -------------------------------------------------------------------------------

def _packed(shape, strides) -> bool:
    return all(s == r for d, s, r in zip(shape, strides, row_strides(shape)) if d != 1)


def _identity_order(perm, shape) -> bool:
    live = [a for a in perm if shape[a] != 1]
    return live == sorted(live)


def _copy(src: Layout, src_ref, dst_ref, dtype: str, device):
    """Launch writing ``src`` row-contiguous (converted to ``dtype``) at ``dst_ref``, or None."""
    dst = Layout.row_major(src.shape, dtype)
    if src.dtype == dtype:
        lau = copy_family.plan("copy", (src,), dst, device)
        if lau is None:
            return ew.dense_copy_launch(src, src.shape, src_ref, dst_ref, device)
    else:
        lau = copy_family.plan("astype", (src,), dst, device)
        if lau is None:
            return None
    return ew.with_refs(lau, (src_ref, dst_ref))


def _check(node):
    if node.prim != "FFT" or len(node.ins) != 1 or len(node.outs) != 1 or len(node.params) < 3:
        return None
    axes = tuple(int(a) for a in node.params[0])
    inverse, real = bool(node.params[1]), bool(node.params[2])
    x, o = node.ins[0], node.out
    kind = "c2c" if not real else ("c2r" if inverse else "r2c")
    if x.dtype != ("float32" if kind == "r2c" else "complex64"):
        return None
    if o.dtype != ("float32" if kind == "c2r" else "complex64"):
        return None
    nd = x.ndim
    if not axes or o.ndim != nd or len(set(axes)) != len(axes) or any(a < 0 or a >= nd for a in axes):
        return None
    last = axes[-1]
    for d in range(nd):
        xi, oi = x.shape[d], o.shape[d]
        if kind == "c2c" or d != last:
            if xi != oi:
                return None
        elif kind == "r2c" and oi != xi // 2 + 1:
            return None
        elif kind == "c2r" and xi != oi // 2 + 1:
            return None
    return kind, axes, inverse


class _Builder:
    """Steps and temporaries; ``cur`` is the data so far: (ref, Layout in the original
    axis order, whether it is a temporary of ours)."""

    def __init__(self, node, device):
        self.node, self.device = node, device
        self.steps, self.temps = [], []
        self.ref, self.lay, self.owned = inp(0), node.ins[0], False

    def temp(self, nbytes: int):
        self.temps.append(max(int(nbytes), 1))
        return tmp(len(self.temps) - 1)

    def cast(self, dtype: str, final: bool) -> bool:
        """Convert the data (real <-> complex) into the output or a temporary."""
        dst = out(0) if final else self.temp(self.lay.size * (8 if dtype == "complex64" else 4))
        lau = _copy(self.lay, self.ref, dst, dtype, self.device)
        if lau is None:
            # no strided conversion kernel for complex64: gather first, then convert
            mid = self.temp(self.lay.nbytes)
            gather = _copy(self.lay, self.ref, mid, self.lay.dtype, self.device)
            lau = _copy(Layout.row_major(self.lay.shape, self.lay.dtype), mid, dst, dtype, self.device)
            if gather is None or lau is None:
                return False
            self.steps.append(gather)
        self.steps.append(lau)
        self.ref, self.lay, self.owned = dst, Layout.row_major(self.lay.shape, dtype), dst.kind == "t"
        return True

    def stage(self, group: list, kind: str, inverse: bool, final: bool) -> bool:
        """One library transform over ``group`` (innermost last)."""
        cur = self.lay
        nd = cur.ndim
        batch_axes = [a for a in range(nd) if a not in group]
        perm = batch_axes + list(group)
        pshape = tuple(cur.shape[a] for a in perm)
        pstr = tuple(cur.strides[a] for a in perm)
        view = Layout.strided(pshape, pstr, cur.dtype)
        stage, stage_bytes = None, 0
        if _packed(pshape, pstr) and (kind != "c2r" or self.owned):
            src, src_owned = self.ref, self.owned
            if src.kind == "i":
                stage = copy_family.plan("copy", (view,), Layout.row_major(pshape, cur.dtype), self.device)
                if stage is None:
                    return False
                stage_bytes = view.nbytes
        else:
            src = self.temp(view.nbytes)
            lau = _copy(view, self.ref, src, cur.dtype, self.device)
            if lau is None:
                return False
            self.steps.append(lau)
            src_owned = True
        last = group[-1]
        oshape = list(cur.shape)
        if kind == "r2c":
            oshape[last] = cur.shape[last] // 2 + 1
            n = tuple(cur.shape[a] for a in group)
        elif kind == "c2r":
            oshape[last] = self.node.out.shape[last]
            n = tuple(oshape[a] for a in group)
            m, big_n = pshape[-1], oshape[last]
            self.steps.append(hermitian_launch(src, view.size // m, m, big_n % 2 == 0, self.device))
        else:
            n = tuple(cur.shape[a] for a in group)
        oshape = tuple(oshape)
        odt = "float32" if kind == "c2r" else "complex64"
        po = tuple(oshape[a] for a in perm)
        if final and _identity_order(perm, oshape):
            dst = out(0)
        elif kind == "c2c" and src_owned:
            dst = src                          # in place
        else:
            dst = self.temp(math.prod(po) * (4 if odt == "float32" else 8))
        batch = math.prod(pshape[:len(batch_axes)])
        from ..fft import Transform

        t = Transform(kind, n, batch, inverse if kind == "c2c" else False)
        self.steps.append(HostCall(FftCall(t, stage, stage_bytes), (src, dst),
                                   what=f"fft {kind} {'x'.join(map(str, n))} batch {batch}"))
        rs = row_strides(po)
        strides = [0] * nd
        for i, a in enumerate(perm):
            strides[a] = rs[i]
        self.ref, self.lay, self.owned = dst, Layout.strided(oshape, tuple(strides), odt), dst.kind == "t"
        return True

    def finish(self) -> bool:
        """Copy the data into the output unless it is there already."""
        if self.ref == out(0):
            return True
        lau = _copy(self.lay, self.ref, out(0), self.node.out.dtype, self.device)
        if lau is None:
            return False
        self.steps.append(lau)
        self.ref = out(0)
        return True


def _by_stride(axes, lay: Layout) -> list:
    """Axes ordered outermost-in-memory first: a dense input in any axis order then reads
    in place (the DFT over several axes does not depend on their order)."""
    return sorted(axes, key=lambda a: (-abs(lay.strides[a]), a))


def _groups(axes: list) -> list:
    """Chunks of at most MAX_RANK axes, innermost chunk first."""
    return [axes[max(0, i - MAX_RANK):i] for i in range(len(axes), 0, -MAX_RANK)]


def plan_node(node, device):
    chk = _check(node)
    if chk is None:
        return None
    kind, axes, inverse = chk
    x, o = node.ins[0], node.out
    if o.size == 0:
        return Plan(())
    from .. import fft as fftlib

    if not fftlib.available(fftlib.vendor_of(getattr(device, "arch", ""))):
        return None
    b = _Builder(node, device)
    last = axes[-1]
    ok = True
    if kind == "c2c":
        live = _by_stride([a for a in axes if x.shape[a] > 1], x)
        groups = _groups(live)
        for i, g in enumerate(groups):
            ok = ok and b.stage(g, "c2c", inverse, final=i == len(groups) - 1)
    elif kind == "r2c":
        others = _by_stride([a for a in axes[:-1] if x.shape[a] > 1], x)
        if x.shape[last] == 1:
            ok = b.cast("complex64", final=not others)
            rest = _groups(others)
        else:
            first = others[-(MAX_RANK - 1):] + [last]
            rest = _groups(others[:-(MAX_RANK - 1)])
            ok = b.stage(first, "r2c", False, final=not rest)
        for i, g in enumerate(rest):
            ok = ok and b.stage(g, "c2c", False, final=i == len(rest) - 1)
    else:
        others = _by_stride([a for a in axes[:-1] if o.shape[a] > 1], x)
        for g in _groups(others):
            ok = ok and b.stage(g, "c2c", True, final=False)
        if ok:
            if o.shape[last] == 1:
                ok = b.cast("float32", final=True)    # the real part of bin 0
            else:
                ok = b.stage([last], "c2r", False, final=True)
    if not ok or not b.finish():
        return None
    count = math.prod(o.shape[a] for a in axes)
    if inverse and count > 1:
        nfloats = o.size * (2 if o.dtype == "complex64" else 1)
        b.steps.append(scale_launch(out(0), nfloats, inverse_scale(count), device))
    return Plan(tuple(b.steps), temps=tuple(b.temps))
