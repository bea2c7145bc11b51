"""A planned kernel launch (the kernel step of ``runtime/plan.py``) and the one call
that performs it.

A ``Launch`` is computed once per node signature by a family's ``plan`` (no GPU
involved) and cached; per call only the pointers change. Every kernel takes one
argument struct by value whose leading fields are the buffer pointers (inputs, then
the output), so the argument blob is those pointers packed in front of a constant
tail built at plan time (see ``hip_kernels/include/mlxa/args.h``).
"""

from __future__ import annotations

import dataclasses
import struct

_POINTERS: dict = {}


def _pointers(n: int) -> struct.Struct:
    st = _POINTERS.get(n)
    if st is None:
        st = _POINTERS[n] = struct.Struct("<" + "Q" * n)
    return st


@dataclasses.dataclass(frozen=True)
class Launch:
    family: str           # hip_kernels/<family>.hip
    kernel: str           # extern "C" name, from kernel_table
    grid: tuple           # (x, y, z) blocks; grid[0] == 0 means nothing to do
    block: tuple          # (x, y, z) threads
    shared_mem: int       # dynamic shared memory, bytes
    n_ptrs: int           # leading pointer fields of the argument struct
    tail: bytes = b""     # the struct's remaining fields, already packed
    # which buffers the leading pointer fields are (plan.Ref); None: the node's inputs in
    # order, then its first output (every elementwise kernel)
    refs: tuple = None
    # a function handle resolved already (kernels compiled at run time: runtime/jit.py);
    # None: ``family``/``kernel`` name a prebuilt kernel looked up through Modules
    function: object = None

    @property
    def empty(self) -> bool:
        return self.grid[0] == 0

    def args(self, ptrs: tuple) -> bytes:
        """Argument blob for ``driver.launch``: ``ptrs`` are device addresses of element 0
        of each input, then of the output."""
        if len(ptrs) != self.n_ptrs:
            raise ValueError(f"{self.kernel} takes {self.n_ptrs} pointers, got {len(ptrs)}")
        try:
            return _pointers(self.n_ptrs).pack(*ptrs) + self.tail
        except struct.error as e:
            raise ValueError(f"{self.kernel}: pointers must be non-negative 64-bit ints, got {ptrs!r}") from e


def run(launch: Launch, modules, driver, ptrs: tuple, stream=None, native=None) -> None:
    """Launch ``launch`` with buffer addresses ``ptrs`` on ``stream`` (None: default);
    through ``native`` (a ``NativeLauncher``) when given."""
    if launch.empty:
        return
    fn = launch.function if launch.function is not None else modules.function(launch.family, launch.kernel)
    if native is not None:
        native(fn, launch.grid, launch.block, launch.args(ptrs), launch.shared_mem, stream)
    else:
        driver.launch(fn, launch.grid, launch.block, launch.args(ptrs), launch.shared_mem, stream)


class NativeLauncher:
    """Launches from the bridge's native code through the driver table's own launch entry
    point (one binding; saves the ctypes call). Errors are raised by the driver, with the
    same text as its own launch."""

    def __init__(self, driver, bridge_launch):
        self.driver, self._launch = driver, bridge_launch
        self._entry, self._end = driver.launch_entry()

    def __call__(self, fn, grid, block, args, shared_mem, stream):
        self.driver.ensure_bound()
        status = self._launch(self._entry, self._end, fn.value, grid[0], grid[1], grid[2],
                              block[0], block[1], block[2], shared_mem,
                              stream.value if stream is not None else 0, args)
        if status:
            self.driver.launch_failed(status, fn, grid, block, args, shared_mem, stream)

    def time_launches(self, fn, grid, block, args, shared_mem, stream, count) -> float:
        """Seconds per launch of ``count`` identical launches from a native loop: the driver's
        own cost of a launch, with nothing of ours around it (the reference of the eager
        replay's per-node cost in benchmarks/eval_overhead.py)."""
        from . import bridge

        self.driver.ensure_bound()
        status, seconds = bridge.launch_repeat(
            self._entry, self._end, fn.value, grid[0], grid[1], grid[2], block[0], block[1],
            block[2], shared_mem, stream.value if stream is not None else 0, args, count)
        if status:
            self.driver.launch_failed(status, fn, grid, block, args, shared_mem, stream)
        return seconds / count

    @classmethod
    def for_driver(cls, driver):
        """A native launcher, or None where the driver has no launch entry (the host driver)
        or ``MLX_AMD_NATIVE_LAUNCH=0`` asks for ctypes launches."""
        import os

        if os.environ.get("MLX_AMD_NATIVE_LAUNCH", "1") == "0" or driver.platform == "host":
            return None
        from . import bridge

        return cls(driver, bridge.launch)
