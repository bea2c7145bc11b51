"""matrix_units without a GPU: the self-tests' shared harness (compare_twins) over the host
driver with a stand-in for the launches, and the 16-bit conversions it uses."""

import ctypes
import struct

import numpy as np
import pytest

from mlx_amd.runtime import matrix_units
from mlx_amd.runtime.driver.host import HostDriver
from mlx_amd.runtime.launch import Launch


class KernelStandIn(HostDriver):
    """A host driver whose launches run a numpy stand-in: the kernel named in the launch
    reads input 0 (n float values of the dtype) and writes them times a factor to its output
    (the last pointer); the stand-in records the pointer tuples it was given."""

    def __init__(self, dtype, n, factors):
        super().__init__()
        self.dtype, self.n, self.factors, self.calls = dtype, n, factors, []

    def launch(self, function, grid, block, args, shared_mem=0, stream=None):
        ptrs = struct.unpack("<4Q", args[:32])
        self.calls.append(ptrs)
        src = np.empty(self.n, np.uint16)
        ctypes.memmove(src.ctypes.data, ptrs[0], src.nbytes)
        out = matrix_units.to16(matrix_units.from16(src, self.dtype) * self.factors[function], self.dtype)
        ctypes.memmove(ptrs[3], out.ctypes.data, out.nbytes)


class Modules:
    def function(self, family, kernel):
        return kernel


class Rt:
    def __init__(self, drv):
        self.driver, self.modules = drv, Modules()


def _steps():
    return {name: Launch("t", name, (1, 1, 1), (32, 1, 1), 0, 4, b"", ()) for name in ("k_mma", "k_twin")}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("mma_factor,ok", [(1.0, True), (1.001, True), (1.5, False)])
def test_compare_twins(dtype, mma_factor, ok):
    n = 300
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    other = np.zeros(7, np.uint16)                     # a second input, unused by the stand-in
    drv = KernelStandIn(dtype, n, {"k_mma": mma_factor, "k_twin": 1.0})
    st = _steps()
    got_ok, why = matrix_units.compare_twins(
        Rt(drv), [matrix_units.to16(x, dtype), other], {"mma": st["k_mma"], "twin": st["k_twin"]},
        lambda i, out: (i[0], i[1], i[1], out), n, dtype, 2e-2, what="case")
    assert got_ok is ok and (why == "" if ok else why.startswith("case: max difference"))
    # one upload per input, one output per kernel, the inputs' pointers handed to both, all freed
    assert len(drv.calls) == 2 and drv.calls[0][:3] == drv.calls[1][:3] and drv.calls[0][3] != drv.calls[1][3]
    assert drv.live_allocations() == 0


def test_compare_twins_perturb_and_unwritten_outputs():
    n = 64
    x = np.linspace(-1, 1, n).astype(np.float32)
    drv = KernelStandIn("bfloat16", n, {"k_mma": 1.0, "k_twin": 1.0})
    st = _steps()
    steps = {"mma": st["k_mma"], "twin": st["k_twin"]}
    args = (lambda i, out: (i[0], i[0], i[0], out), n, "bfloat16", 1e-3)
    inputs = [matrix_units.to16(x, "bfloat16")]
    assert matrix_units.compare_twins(Rt(drv), inputs, steps, *args) == (True, "")
    ok, why = matrix_units.compare_twins(Rt(drv), inputs, steps, *args, perturb=lambda g: g + 1.0, what="p")
    assert not ok and why.startswith("p: max difference")

    class Silent(KernelStandIn):   # a kernel that never writes: its output stays NaN
        def launch(self, function, grid, block, args, shared_mem=0, stream=None):
            if function == "k_mma":
                return
            super().launch(function, grid, block, args, shared_mem, stream)

    drv = Silent("bfloat16", n, {"k_mma": 1.0, "k_twin": 1.0})
    assert matrix_units.compare_twins(Rt(drv), inputs, steps, *args, what="s") == (False, "s: non-finite values")
    assert drv.live_allocations() == 0


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_round_trip(dtype):
    x = np.array([0.0, -0.0, 1.0, -2.5, 3.140625, 65280.0, np.inf, -np.inf], np.float32)   # exact in both
    assert np.array_equal(matrix_units.from16(matrix_units.to16(x, dtype), dtype), x)
    # bfloat16 rounds to nearest even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7
    if dtype == "bfloat16":
        h = np.array([1 + 2**-8, 1 + 3 * 2**-8], np.float32)
        assert matrix_units.from16(matrix_units.to16(h, dtype), dtype).tolist() == [1.0, 1 + 2**-6]
