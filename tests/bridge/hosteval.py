"""A trivial evaluator over the bridge, for tests: host memory from numpy, zero-copy
views through ``try_view``, a few float32 elementwise nodes computed with numpy into
attached buffers (to prove ``attach``), and MLX's own ``eval_cpu`` for the rest."""

from __future__ import annotations

import ctypes
import itertools

import numpy as np

from mlx_amd.runtime import bridge

NP_DTYPES = {
    "bool": np.bool_, "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32,
    "uint64": np.uint64, "int8": np.int8, "int16": np.int16, "int32": np.int32,
    "int64": np.int64, "float16": np.float16, "float32": np.float32,
    "float64": np.float64, "complex64": np.complex64,
}

NUMPY_OPS = {"Add": np.add, "Subtract": np.subtract, "Multiply": np.multiply,
             "Exp": np.exp, "Negative": np.negative}

_tokens = itertools.count(1)
_owner: dict = {}  # token -> HostArena, so any arena's reap frees every arena's blocks


_libc = ctypes.CDLL(None)
_libc.aligned_alloc.restype = ctypes.c_void_p
_libc.aligned_alloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]


class HostArena:
    """256-byte-aligned host blocks with 256 bytes of slack in front. A block is freed
    only when the bridge reports its token: MLX may read it until then (even while
    the interpreter shuts down, when un-reported blocks are simply never freed)."""

    def __init__(self):
        self.blocks: dict[int, int] = {}
        self.freed: list[int] = []

    def alloc(self, nbytes: int) -> tuple[int, int]:
        size = (nbytes + 255) // 256 * 256 + 256
        base = _libc.aligned_alloc(256, size)
        if not base:
            raise MemoryError(f"aligned_alloc({size})")
        token = next(_tokens)
        self.blocks[token] = base
        _owner[token] = self
        return base + 256, token

    def reap(self) -> list[int]:
        """Free what the bridge reported; returns this arena's freed tokens."""
        mine = []
        for t in bridge.drain_freed():
            arena = _owner.pop(t, None)
            if arena is not None:
                _libc.free(arena.blocks.pop(t))
                arena.freed.append(t)
                if arena is self:
                    mine.append(t)
        return mine


def host_array(info, shape, dtype: str) -> np.ndarray:
    """A numpy view of an array's data as the bridge describes it."""
    key, data_ptr, offset, strides, data_size, nbytes = info[:6]
    np_dt = np.dtype(NP_DTYPES[dtype])
    if nbytes == 0 or 0 in shape:
        return np.zeros(shape, np_dt)
    buf = (ctypes.c_uint8 * nbytes).from_address(data_ptr)
    flat = np.frombuffer(buf, np.uint8)
    usable = (nbytes - offset) // np_dt.itemsize * np_dt.itemsize
    return np.lib.stride_tricks.as_strided(
        flat[offset:offset + usable].view(np_dt), shape,
        [s * np_dt.itemsize for s in strides])


def evaluate(outputs, arena: HostArena, views=True, compute=True, log=None):
    """Evaluate `outputs` through the bridge. Returns per-node paths taken."""
    g = bridge.Graph(list(outputs))
    paths = []
    try:
        nodes, metas = g.table()
        for i, (prim, params, ins, outs) in enumerate(nodes):
            if views and g.try_view(i):
                paths.append((prim, "view"))
            elif (compute and prim in NUMPY_OPS and len(outs) == 1
                  and all(metas[s][1] == "float32" for s in (*ins, *outs))):
                shape, dtype, _ = metas[outs[0]]
                args = [host_array(g.info(s), metas[s][0], metas[s][1]) for s in ins]
                res = NUMPY_OPS[prim](*args)
                addr, token = arena.alloc(int(np.prod(shape, dtype=np.int64)) * 4)
                g.attach(outs[0], addr, token)
                dst = host_array(g.info(outs[0]), shape, dtype)
                dst[...] = np.broadcast_to(res, shape)
                paths.append((prim, "numpy"))
            else:
                g.eval_cpu(i)
                paths.append((prim, "cpu"))
            g.finish(i)
            arena.reap()
    finally:
        g.release()
    arena.reap()
    if log is not None:
        log.extend(paths)
    return paths


def layout(info):
    """The layout part of an info tuple (no addresses, no ownership)."""
    return {"offset": info[2], "strides": info[3], "data_size": info[4],
            "row": info[6], "col": info[7], "contiguous": info[8]}
