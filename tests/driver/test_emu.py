"""The kernel emulator (MLX_AMD_DRIVER=emu): its wave operations, barriers, traps and
dynamic shared memory, checked with small kernels compiled here against mlxa/emu.h.

The GPU suite under the emulator proves the kernels; these prove the emulator itself
(what a kernel sees must be what the hardware gives), at both wave widths.
"""

import ctypes
import os
import platform
import shutil
import struct
import subprocess
import sys

import pytest

from mlx_amd.runtime.driver import emu as emu_driver

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.path.join(emu_driver.PACKAGE_DIR, emu_driver.LIBRARY_NAME)   # where the driver looks

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or platform.machine() != "x86_64",
                                reason="the kernel emulator runs on x86-64 Linux only")

SOURCE = r"""
#include "mlxa/wave.h"

struct OutArgs { int* out; int width; int mode; };

// every shuffle flavour at a given width: out[lane] = value received (values are 100 + lane)
MLXA_GLOBAL void t_shfl(OutArgs a) {
  const int l = threadIdx.x, v = 100 + l;
  int r = 0;
  switch (a.mode) {
    case 0: r = mlxa::shfl(v, 3, a.width); break;
    case 1: r = mlxa::shfl_xor(v, 5, a.width); break;
    case 2: r = mlxa::shfl_up(v, 2u, a.width); break;
    case 3: r = mlxa::shfl_down(v, 2u, a.width); break;
    case 4: r = mlxa::shfl(v, l + 7, a.width); break;
  }
  a.out[blockIdx.x * blockDim.x + l] = r;
}

// the wave.h layer at W = a.mode: ballot of odd lanes (low and high words), reduce, scan
template <int W>
MLXA_DEVICE void wave_ops(OutArgs a) {
  const int l = mlxa::wave_lane<W>(), t = threadIdx.x;
  const unsigned long long b = mlxa::wave_ballot<W>((l & 1) == 1);
  const int sum = mlxa::wave_reduce<W>(l, [](int x, int y) { return x + y; });
  const int scan = mlxa::wave_inclusive_scan<W>(1, [](int x, int y) { return x + y; });
  a.out[4 * t] = (int)(b & 0xffffffffu);
  a.out[4 * t + 1] = (int)(b >> 32);
  a.out[4 * t + 2] = sum;
  a.out[4 * t + 3] = scan;
}
MLXA_GLOBAL void t_wave32(OutArgs a) { MLXA_WAVE_KERNEL_BODY(32, wave_ops<32>(a)); }
MLXA_GLOBAL void t_wave64(OutArgs a) { MLXA_WAVE_KERNEL_BODY(64, wave_ops<64>(a)); }

// block barrier with early-exiting threads: the rest must still pass it
MLXA_GLOBAL void t_exit_barrier(OutArgs a) {
  __shared__ int buf[1024];
  const int t = threadIdx.x;
  if (t % 3 == 0) return;
  buf[t] = t;
  mlxa::sync_block();
  a.out[t] = buf[(t + 1) % blockDim.x % 3 == 0 ? t : (t + 1) % blockDim.x];
}

// threads split between a named barrier that needs more of them and the block barrier
MLXA_GLOBAL void t_deadlock(OutArgs a) {
  if (threadIdx.x < 32) mlxa::named_barrier(1, 64);
  else mlxa::sync_block();
  a.out[threadIdx.x] = 1;
}

MLXA_GLOBAL void t_trap(OutArgs a) {
  if (blockIdx.x == 2 && threadIdx.x == 7) mlxa::trap();
  a.out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}

MLXA_DYNAMIC_SHARED(dyn, int);

// dynamic shared memory: each thread writes, the block reads its neighbour's value
MLXA_GLOBAL void t_dynamic(OutArgs a) {
  const int t = threadIdx.x, n = blockDim.x;
  dyn[t] = 1000 * (int)blockIdx.x + t;
  mlxa::sync_block();
  a.out[blockIdx.x * n + t] = dyn[(t + 1) % n];
}

// a read of an address nothing maps
MLXA_GLOBAL void t_fault(OutArgs a) { a.out[threadIdx.x] = *(volatile int*)(uintptr_t)(16 + a.mode); }

// atomics across blocks and threads
MLXA_GLOBAL void t_atomic(OutArgs a) { mlxa::atomic_add(a.out, 1); mlxa::atomic_max(a.out + 1, (int)(blockIdx.x * blockDim.x + threadIdx.x)); }
"""

KERNELS = ("t_fault", "t_shfl", "t_wave32", "t_wave64", "t_exit_barrier", "t_deadlock", "t_trap", "t_dynamic", "t_atomic")


def _compile(tmp_path, wave: int) -> bytes:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.fail("the emulator tests need a C++ compiler (g++), as the emu kernel build does")
    src = tmp_path / "t.cpp"
    src.write_text(SOURCE + "".join(f"MLXA_EMU_ENTRY({k})\n" for k in KERNELS) + "MLXA_EMU_MODULE_INFO\n")
    out = tmp_path / f"t{wave}.so"
    sys.path.insert(0, REPO)
    import build_kernels
    cmd = [cxx] + build_kernels.EMU_FLAGS + [f"-DMLXA_EMU_WAVE={wave}", "-I", os.path.join(REPO, "hip_kernels", "include"),
                                             "-o", str(out), str(src)]
    subprocess.run(cmd, check=True)
    return out.read_bytes()


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    if not os.path.isfile(LIB):
        pytest.fail(f"{LIB} is not built: build the bridge (cmake), which builds the emulator too")
    drv = emu_driver.EmuDriver()
    wave = drv.properties().wave_size
    mod = drv.module_load_data(_compile(tmp_path_factory.mktemp("emu"), wave))
    return drv, mod, wave


def _run(emu, kernel, n_out, grid, block, width=0, mode=0, shared=0, fill=0):
    drv, mod, _ = emu
    buf = (ctypes.c_int * n_out)(*([fill] * n_out))
    fn = drv.module_get_function(mod, kernel)
    drv.launch(fn, (grid, 1, 1), (block, 1, 1), struct.pack("Pii", ctypes.addressof(buf), width, mode),
               shared_mem=shared)
    return list(buf)


def _expect_shfl(mode, lane, width, wave):
    seg = lane & ~(width - 1)
    if mode == 0:
        src = seg | (3 & (width - 1))
    elif mode == 1:
        j = lane ^ 5
        src = lane if j >= seg + width else j
    elif mode == 2:
        src = lane if lane - seg < 2 else lane - 2
    elif mode == 3:
        src = lane if lane - seg + 2 >= width else lane + 2
    else:
        src = seg | ((lane + 7) & (width - 1))
    return 100 + src


@pytest.mark.parametrize("mode", range(5), ids=["idx", "xor", "up", "down", "wrap"])
def test_shuffles_follow_the_hardware_rules(emu, mode):
    wave = emu[2]
    for width in (w for w in (4, 8, 16, 32, 64) if w <= wave):
        got = _run(emu, "t_shfl", 2 * wave, 1, 2 * wave, width, mode)
        want = [_expect_shfl(mode, t % wave, width, wave) + (t // wave) * wave for t in range(2 * wave)]
        assert got == want, f"width {width}"


@pytest.mark.parametrize("w", [32, 64])
def test_wave_layer_ballot_reduce_scan(emu, w):
    from mlx_amd.runtime.driver import DriverError
    wave = emu[2]
    block = 2 * w
    if w < wave:   # never launched there: the variant compiles to a trap, as on CDNA
        with pytest.raises(DriverError, match="trapped"):
            _run(emu, f"t_wave{w}", 4 * block, 1, block)
        return
    out = _run(emu, f"t_wave{w}", 4 * block, 1, block)
    odd = sum(1 << i for i in range(1, w, 2))
    for t in range(block):
        lane = t % w
        assert out[4 * t] == struct.unpack("i", struct.pack("I", odd & 0xffffffff))[0]
        assert out[4 * t + 1] == (struct.unpack("i", struct.pack("I", odd >> 32))[0] if w == 64 else 0)
        assert out[4 * t + 2] == w * (w - 1) // 2
        assert out[4 * t + 3] == lane + 1


def test_barrier_counts_only_running_threads(emu):
    out = _run(emu, "t_exit_barrier", 96, 1, 96, fill=-1)
    for t in range(96):
        if t % 3 == 0:
            assert out[t] == -1
        else:
            n = (t + 1) % 96
            assert out[t] == (t if n % 3 == 0 else n)


def test_deadlock_is_a_launch_error_and_the_device_stays_usable(emu):
    from mlx_amd.runtime.driver import DriverError
    with pytest.raises(DriverError, match="deadlock.*named barrier"):
        _run(emu, "t_deadlock", 64, 1, 64)
    assert _run(emu, "t_dynamic", 4, 1, 4, shared=16) == [1, 2, 3, 0]


def test_trap_names_block_and_thread(emu):
    from mlx_amd.runtime.driver import DriverError
    with pytest.raises(DriverError, match=r"t_trap: kernel trapped .* block \(2,0,0\) thread \(7,0,0\)"):
        _run(emu, "t_trap", 4 * 32, 4, 32)


def test_memory_fault_is_a_launch_error_and_the_device_stays_usable(emu):
    from mlx_amd.runtime.driver import DriverError
    for _ in range(2):   # the handler is in place again for the next launch
        with pytest.raises(DriverError, match="t_fault: kernel trapped \\(memory fault"):
            _run(emu, "t_fault", 32, 1, 32)
    assert _run(emu, "t_dynamic", 4, 1, 4, shared=16) == [1, 2, 3, 0]


def test_dynamic_shared_memory_per_block(emu):
    out = _run(emu, "t_dynamic", 3 * 64, 3, 64, shared=64 * 4)
    assert out == [1000 * b + (t + 1) % 64 for b in range(3) for t in range(64)]


def test_atomics_over_the_grid(emu):
    out = _run(emu, "t_atomic", 2, 5, 128)
    assert out == [5 * 128, 5 * 128 - 1]


def test_module_of_the_other_width_is_refused(emu, tmp_path):
    from mlx_amd.runtime.driver import DriverError
    drv, _, wave = emu
    with pytest.raises(DriverError, match="built for wave"):
        drv.module_load_data(_compile(tmp_path, 96 - wave))


def test_memory_limit_and_accounting(emu):
    from mlx_amd.runtime.driver import DriverError
    drv = emu[0]
    free0, total = drv.mem_info()
    p = drv.malloc(1 << 20)
    assert drv.mem_info()[0] == free0 - (1 << 20)
    drv.free(p)
    assert drv.mem_info()[0] == free0
    with pytest.raises(DriverError, match="OUT_OF_MEMORY"):
        drv.malloc(total + 1)
