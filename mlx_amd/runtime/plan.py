"""The plan format: what a family launcher hands the engine for one MLX node.

A launcher sees a node as a ``Node`` (primitive class name, ``state()`` parameters as a
tuple, input layouts, output layouts) and returns a ``Plan`` or None (None: MLX's CPU
fallback runs the node). Plans are pure data computed without a GPU and cached by the
node's signature, so per evaluation only buffer addresses change. One format serves
every family:

* ``Launch``      one kernel launch (``runtime/launch.py``); its ``refs`` say which
                  buffers its leading pointer fields are.
* ``Memset``      fill a byte range of a buffer (zeroing an accumulator, say).
* ``HostCall``    a Python callable run in stream order with the resolved addresses:
                  vendor-library calls (GEMM, FFT) and anything else that is not a
                  kernel of ours.
* temporaries     device scratch (``Plan.temps``, bytes each), allocated from the pool
                  for the node's steps and recycled right after them (one stream: the
                  next user is queued behind them).
* donation        ``Plan.donate`` names (output, input) pairs where the output may take
                  over the input's buffer when nothing else holds it (the evaluator asks
                  the bridge); ``Plan.init`` are steps that run only for an output that
                  did not take its input's buffer (the copy a scatter or slice update
                  starts from). ``Plan.written`` narrows which bytes of an output the
                  steps changed when it was donated (a KV-cache slice update writes back
                  its slice, not the cache).
* rebind          optional: the same steps' grids and argument tails for other input
                  shapes, so a replayed node whose shapes move every step (SDPA decode at a
                  growing KV length) need not be planned again.

A buffer reference ``Ref`` is ``(kind, index, byte_offset)`` with kind ``"i"`` (input),
``"o"`` (output), ``"t"`` (temporary) or ``"z"`` (the runtime's zeroed scratch, index 0:
``ZERO_BYTES`` that are zero whenever no step runs, for counters a kernel counts up and
sets back to zero before it ends; a split-K's last-block-finishes count). Input addresses
already point at the input's element 0 (its array offset applied); outputs are fresh
row-contiguous buffers.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Callable, NamedTuple, Optional

from .launch import Launch  # noqa: F401  (re-exported: the plan format's kernel step)

ITEMSIZE = {
    "bool": 1, "uint8": 1, "int8": 1, "uint16": 2, "int16": 2, "float16": 2, "bfloat16": 2,
    "uint32": 4, "int32": 4, "float32": 4, "uint64": 8, "int64": 8, "float64": 8, "complex64": 8,
}
DTYPES = tuple(ITEMSIZE)


ZERO_BYTES = 1 << 16   # the zeroed scratch every runtime keeps ("z" references)


class Ref(NamedTuple):
    kind: str        # "i", "o", "t" or "z"
    index: int
    offset: int = 0  # bytes


def inp(i: int, offset: int = 0) -> Ref:
    return Ref("i", i, offset)


def out(i: int = 0, offset: int = 0) -> Ref:
    return Ref("o", i, offset)


def tmp(i: int, offset: int = 0) -> Ref:
    return Ref("t", i, offset)


def zeroed(offset: int = 0) -> Ref:
    """Bytes of the runtime's zeroed scratch; a step that changes them restores zeros."""
    return Ref("z", 0, offset)


@dataclasses.dataclass(frozen=True)
class Layout:
    """One array as kernels see it: strides in elements from element 0 (the address handed
    to a kernel already includes the array's offset); ``data_size`` as MLX defines it."""

    shape: tuple
    strides: tuple
    dtype: str
    data_size: int
    row_contiguous: bool
    contiguous: bool

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def nbytes(self) -> int:
        return self.size * ITEMSIZE[self.dtype]

    @classmethod
    def row_major(cls, shape, dtype: str) -> "Layout":
        shape = tuple(int(d) for d in shape)
        return cls(shape, row_strides(shape), dtype, math.prod(shape), True, True)

    @classmethod
    def strided(cls, shape, strides, dtype: str) -> "Layout":
        """A layout with flags worked out the way MLX sets them for views."""
        shape, strides = tuple(int(d) for d in shape), tuple(int(s) for s in strides)
        if len(shape) != len(strides):
            raise ValueError(f"shape {shape} and strides {strides} differ in length")
        size = math.prod(shape)
        live = [(d, s) for d, s in zip(shape, strides) if d != 1]
        row = all(s == r for d, s, r in zip(shape, strides, row_strides(shape)) if d != 1)
        # dense: the non-trivial dims tile 0..size-1 exactly in some order
        packed, expect = True, 1
        for s, d in sorted((s, d) for d, s in live):
            packed = packed and s == expect
            expect *= d
        span = 1 + sum((d - 1) * abs(s) for d, s in zip(shape, strides)) if size else 0
        return cls(shape, strides, dtype, size if packed else span, row, packed)


def row_strides(shape) -> tuple:
    out_, acc = [], 1
    for d in reversed(shape):
        out_.append(acc)
        acc *= d
    return tuple(reversed(out_))


@dataclasses.dataclass(frozen=True)
class Node:
    """What a launcher is told about one MLX node."""

    prim: str             # MLX primitive class name ("Reduce", "fast::RMSNorm")
    params: tuple         # state() as a tuple (a one-value state() arrives as a 1-tuple)
    ins: tuple            # Layout per input
    outs: tuple           # Layout per output: row-contiguous, shape and dtype of the output

    @property
    def out(self) -> Layout:
        return self.outs[0]


@dataclasses.dataclass(frozen=True)
class Memset:
    ref: Ref
    nbytes: int
    value: int = 0        # byte value


@dataclasses.dataclass(frozen=True)
class HostCall:
    """``fn(ptrs, stream, ctx)`` in stream order; ``ptrs`` are the resolved ``refs``
    and ``ctx`` the runtime's ``Context`` (driver, device properties, modules, pools)."""

    fn: Callable
    refs: tuple
    what: str = ""        # for messages and stats


@dataclasses.dataclass(frozen=True)
class Plan:
    steps: tuple
    temps: tuple = ()                 # bytes per temporary
    donate: tuple = ()                # (out_index, in_index) pairs
    init: tuple = ()                  # (out_index, steps): run when that output was not donated
    written: Optional[tuple] = None   # per output (lo, hi) bytes changed when donated; None: all
    # For a replay (evaluator/replay.h): rebind(in_shapes, in_strides) -> [(grid, tail)] per
    # step for the same node at other input shapes (an SDPA decode at the next KV length),
    # or None when those shapes need another plan. Not part of the plan's identity.
    rebind: Optional[Callable] = dataclasses.field(default=None, compare=False)

    def __post_init__(self):
        for s in self.steps:
            if not isinstance(s, (Launch, Memset, HostCall)):
                raise TypeError(f"plan step must be Launch, Memset or HostCall, got {type(s).__name__}")


def single(launch: Optional[Launch], **kw) -> Optional[Plan]:
    """The plan of one launch (None stays None: no kernel covers the node)."""
    if launch is None:
        return None
    return Plan((launch,), **kw)


def regroup(refs: tuple, n_ins: int, n_outs: int) -> tuple:
    """A node's references as a later member of a group plan (plan_siblings), whose
    inputs and outputs come after ``n_ins`` inputs and ``n_outs`` outputs of the ones
    before it."""
    shift = {"i": n_ins, "o": n_outs}
    return tuple(Ref(r.kind, r.index + shift.get(r.kind, 0), r.offset) for r in refs)


def twin_launch(kernel: str, first: Launch, second: Launch, first_ins: int) -> Launch:
    """Two single-launch plans (TWINS) as one launch of a twin kernel: the second's pointers
    (its inputs after the first node's ``first_ins``, its output the group's second), then the
    first's, then both tails; grid y picks the job, grid x covers the larger."""
    return Launch(first.family, kernel, (max(first.grid[0], second.grid[0]), 2, 1), first.block,
                  first.shared_mem, first.n_ptrs + second.n_ptrs, first.tail + second.tail,
                  refs=regroup(second.refs, first_ins, 1) + first.refs)


def default_refs(n_ins: int, n_outs: int = 1) -> tuple:
    """Inputs in order, then outputs: what a Launch without explicit refs points at."""
    return tuple(inp(i) for i in range(n_ins)) + tuple(out(i) for i in range(n_outs))


def compute_units(device) -> int:
    """The device's compute units (CUs / SMs), at least 1: what launchers size grids by."""
    return max(1, int(getattr(device, "compute_units", 1) or 1))


def dynamic_smem(device, static: int) -> int:
    """Dynamic shared memory a launch may ask for beside ``static`` bytes of the kernel's own
    (and the emulated wave's slots): the device's per-block limit, at most the 48 KiB every
    target gives without an opt-in."""
    return min(int(getattr(device, "max_shared_memory_per_block", 0) or 0), 49152) - static


def ksplit(groups: int, steps: int, device, waves: int = 4, per_cu: int = 24) -> int:
    """Waves of a block sharing one row group, each over every ksplit-th step of k (the
    matrix-vector kernels: gemv, qmv): the smallest split (1, 2, 4, up to ``waves``) that
    gives ``per_cu`` waves per compute unit for ``groups`` row groups, while every lane of
    a 32-wide wave keeps a step of the ``steps`` along k. (The per_cu values are the
    measured best of tools' variant sweeps on the H200: a split costs a block-wide sum.)"""
    target = compute_units(device) * per_cu
    ks = 1
    while ks < waves and groups * ks < target and steps >= 2 * ks * 32:
        ks *= 2
    return ks


def wave_width(device) -> int:
    """The wave width a launcher instantiates for: the device's, or ``MLX_AMD_WAVE`` (64
    runs the 64-wide variants emulated on a 32-wide GPU; the GPU suite does, for CDNA's
    code paths). Plans are cached: change it only with a fresh plan cache."""
    forced = os.environ.get("MLX_AMD_WAVE")
    w = int(forced) if forced else int(device.wave_size)
    if w not in (32, 64):
        raise ValueError(f"wave width {w} (MLX_AMD_WAVE or the device's) must be 32 or 64")
    if forced and w < int(device.wave_size):
        raise ValueError(f"MLX_AMD_WAVE={w} is narrower than the device's wave ({device.wave_size}): "
                         "only wider waves can be emulated")
    return w


def embed(sub: Optional[Plan], mapping: dict, temp_slot: Callable[[int, int], int],
          inline_init: bool = False) -> Optional[list]:
    """Another family's plan as steps of ours (the GEMMs inside SDPA, convolution, prefill
    qmm and masked matmuls, the nodes of a compiled tape): its inputs and outputs redirected
    through ``mapping`` {(kind, index): our Ref} (offsets add), its temporary i to our
    temporary ``temp_slot(i, nbytes)``. ``inline_init``: the caller never donates, so the
    sub-plan's init steps always run (first) and donation and written ranges do not
    matter. None when the sub-plan needs what steps alone cannot carry (donation, init
    steps, written ranges, without ``inline_init``), names a buffer ``mapping`` lacks, or
    has a step of another kind."""
    if sub is None:
        return None
    if not inline_init and (sub.donate or sub.init or sub.written is not None):
        return None

    def ref(r: Ref) -> Ref:
        if r.kind == "t":
            return tmp(temp_slot(r.index, sub.temps[r.index]), r.offset)
        if r.kind == "z":
            return r
        base = mapping[(r.kind, r.index)]
        return base._replace(offset=base.offset + r.offset)

    todo = [s for _, init in sub.init for s in init] if inline_init else []
    steps = []
    try:
        for s in todo + list(sub.steps):
            if isinstance(s, Launch):
                refs = s.refs if s.refs is not None else default_refs(s.n_ptrs - 1)
                steps.append(dataclasses.replace(s, refs=tuple(ref(r) for r in refs)))
            elif isinstance(s, HostCall):
                steps.append(dataclasses.replace(s, refs=tuple(ref(r) for r in s.refs)))
            elif isinstance(s, Memset):
                steps.append(dataclasses.replace(s, ref=ref(s.ref)))
            else:
                return None
    except KeyError:       # a buffer of the sub-plan we have no counterpart for
        return None
    return steps
