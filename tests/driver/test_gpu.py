"""The HIP and CUDA drivers on a real GPU (the H200 test machine runs the CUDA one).

Each test runs once per driver; a driver whose library does not load, or that sees
no device, is skipped with the reason.
"""

import ctypes
import json
import lzma
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

from mlx_amd.runtime.driver import DriverError, DriverUnavailable, load

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(params=[pytest.param("hip", marks=pytest.mark.gpu), pytest.param("cuda", marks=pytest.mark.gpu)])
def drv(request):
    try:
        d = load(request.param)
        n = d.device_count()
    except (DriverUnavailable, DriverError) as e:
        pytest.skip(f"{request.param} driver unusable here: {e}")
    if n == 0:
        pytest.skip(f"{request.param} driver loaded ({d.library_path}) but sees no device")
    d.set_device(0)
    return d


def host_view(ptr, n):
    return np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(ptr))


def test_properties_are_plausible(drv):
    p = drv.properties(0)
    assert p.wave_size in (32, 64) and p.compute_units > 0 and p.total_memory > 0
    assert p.max_threads_per_block >= 256 and p.max_shared_memory_per_block >= 16384
    assert re.fullmatch(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d", p.pci_bus_id)
    assert re.fullmatch(r"gfx[0-9a-f]+|sm_\d+", p.arch) and p.name
    free, total = drv.mem_info()
    assert 0 < free <= total


def test_info_shows_the_device(drv):
    env = dict(os.environ, MLX_AMD_DRIVER=drv.name, MLX_AMD_AUTO="0")
    r = subprocess.run([sys.executable, "-m", "mlx_amd", "info", "--json"], capture_output=True, text=True,
                       env=env, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    p = drv.properties(0)
    assert info["driver"] == drv.name and len(info["devices"]) == drv.device_count()
    d0 = info["devices"][0]
    assert (d0["name"], d0["arch"], d0["wave_size"], d0["total_memory"]) == (p.name, p.arch, p.wave_size,
                                                                             p.total_memory)
    assert 0 < d0["free_memory"] <= d0["total_memory"]
    r = subprocess.run([sys.executable, "-m", "mlx_amd", "info"], capture_output=True, text=True,
                       env=env, cwd=REPO, timeout=120)
    assert r.returncode == 0 and p.name in r.stdout and f"wave size {p.wave_size}" in r.stdout


def test_device_memory_round_trips(drv):
    n = (1 << 20) + 3
    rng = np.random.default_rng(0)
    src = rng.integers(0, 256, n, dtype=np.uint8)
    out = np.zeros(n, np.uint8)
    a, b = drv.malloc(n), drv.malloc(n)
    try:
        drv.memset(a, 0xAB, n)
        drv.memcpy_dtoh(out.ctypes.data, a, n)
        assert (out == 0xAB).all()
        drv.memcpy_htod(a, src.ctypes.data, n)
        drv.memcpy_dtod(b, a, n)
        drv.memcpy_dtoh(out.ctypes.data, b, n)
        assert (out == src).all()
        # direction inferred from the addresses
        drv.memset(b, 0, n)
        rev = src[::-1].copy()      # held: a temporary's buffer is freed before the copy reads it
        drv.memcpy(b, rev.ctypes.data, n)
        drv.memcpy(out.ctypes.data, b, n)
        assert (out == rev).all()
        # queued on a stream
        s = drv.stream_create()
        src2 = np.ascontiguousarray(src ^ 0x5A)
        drv.memcpy_htod(a, src2.ctypes.data, n, s)
        drv.memcpy_dtod(b, a, n, s)
        drv.memset(a, 1, 16, s)
        drv.memcpy_async(out.ctypes.data, b, n, s)
        drv.stream_synchronize(s)
        assert (out == src2).all()
        drv.memcpy_dtoh(out.ctypes.data, a, 16, s)
        drv.stream_synchronize(s)
        assert (out[:16] == 1).all()
        drv.stream_destroy(s)
    finally:
        drv.free(a)
        drv.free(b)


def test_pinned_and_managed_memory(drv):
    n = 1 << 16
    pinned = drv.host_alloc(n)
    dev = drv.malloc(n)
    try:
        hv = host_view(pinned, n)
        hv[:] = np.arange(n, dtype=np.uint32).view(np.uint8)[:n]
        expect = hv.copy()
        s = drv.stream_create()
        drv.memcpy_htod(dev, pinned, n, s)
        drv.stream_synchronize(s)      # the copy has read the pinned buffer
        hv[:] = 0
        drv.memcpy_dtoh(pinned, dev, n, s)
        drv.stream_synchronize(s)
        assert (hv == expect).all()
        drv.stream_destroy(s)
    finally:
        drv.host_free(pinned)
    if not drv.properties(0).managed_memory:
        drv.free(dev)
        pytest.skip("device reports no managed-memory support")
    managed = drv.malloc_managed(n)
    try:
        mv = host_view(managed, n)
        mv[:] = 9                       # written by the host
        drv.memset(managed, 7, n // 2)  # then by the device
        drv.synchronize()
        assert (mv[: n // 2] == 7).all() and (mv[n // 2:] == 9).all()
        drv.memcpy_dtod(dev, managed, n)
        out = np.zeros(n, np.uint8)
        drv.memcpy_dtoh(out.ctypes.data, dev, n)
        assert (out == mv).all()
    finally:
        drv.free(managed)
        drv.free(dev)


def test_events_and_stream_ordering(drv):
    s1, s2 = drv.stream_create(), drv.stream_create()
    e1, e2, e3 = drv.event_create(), drv.event_create(), drv.event_create(timing=False)
    drv.event_record(e1, s1)
    drv.event_record(e2, s1)
    drv.stream_wait_event(s2, e2)
    drv.event_record(e3, s2)
    drv.event_synchronize(e3)
    assert drv.event_query(e2) and drv.event_query(e3)
    assert drv.event_elapsed_ms(e1, e2) >= 0
    with pytest.raises(DriverError):      # no timing on e3
        drv.event_elapsed_ms(e1, e3)
    for e in (e1, e2, e3):
        drv.event_destroy(e)
    drv.stream_destroy(s1)
    drv.stream_destroy(s2)
    with pytest.raises(ValueError):       # already destroyed
        drv.stream_destroy(s1)


def test_out_of_memory_is_a_clean_driver_error(drv):
    with pytest.raises(DriverError) as ei:
        drv.malloc(1 << 60)
    assert ei.value.out_of_memory, str(ei.value)
    assert str(1 << 60) in str(ei.value)


def _smoke_image(drv, arch, tmp_path):
    """The smoke kernel for this device: the installed build, else nvcc on the fly (NVIDIA)."""
    kdir = os.path.join(REPO, "mlx_amd", "kernels")
    try:
        with open(os.path.join(kdir, "manifest.json")) as f:
            fam = json.load(f)["targets"][arch]["families"]["smoke"]
        with open(os.path.join(kdir, fam["file"]), "rb") as f:
            data = f.read()
        return lzma.decompress(data) if fam["file"].endswith(".xz") else data
    except (OSError, KeyError, ValueError):
        pass
    if drv.platform != "nvidia":
        pytest.skip(f"no built smoke kernel for {arch} (run build_kernels.py)")
    nvcc = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)), None)
    if nvcc is None:
        pytest.skip("no prebuilt smoke cubin and no nvcc to build one")
    out = str(tmp_path / "smoke.cubin")
    r = subprocess.run([nvcc, "-cubin", f"-arch={arch}", "-I", os.path.join(REPO, "hip_kernels", "include"),
                        "-x", "cu", os.path.join(REPO, "hip_kernels", "smoke.hip"), "-o", out],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with open(out, "rb") as f:
        return f.read()


def test_smoke_kernel_launch(drv, tmp_path):
    props = drv.properties(0)
    mod = drv.module_load_data(_smoke_image(drv, props.arch, tmp_path))
    fn = drv.module_get_function(mod, "smoke_axpy_float32")
    with pytest.raises(DriverError):
        drv.module_get_function(mod, "no_such_kernel")
    n, alpha = (1 << 20) + 17, 1.5
    rng = np.random.default_rng(1)
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    dx, dy = drv.malloc(4 * n), drv.malloc(4 * n)
    s = drv.stream_create()
    start, end = drv.event_create(), drv.event_create()
    try:
        drv.memcpy_htod(dx, x.ctypes.data, 4 * n)
        drv.memcpy_htod(dy, y.ctypes.data, 4 * n)
        # struct SmokeArgs { float alpha; const float* x; float* y; long long n; } by value
        blob = struct.pack("<f4xQQq", alpha, dx, dy, n)
        drv.event_record(start, s)
        drv.launch(fn, (min((n + 255) // 256, 4 * props.compute_units),), (256,), blob, 0, s)
        drv.event_record(end, s)
        drv.stream_synchronize(s)
        out = np.empty(n, np.float32)
        drv.memcpy_dtoh(out.ctypes.data, dy, 4 * n)
        np.testing.assert_allclose(out, np.float32(alpha) * x + y, rtol=1e-6, atol=1e-6)
        assert drv.event_elapsed_ms(start, end) > 0
        with pytest.raises(DriverError, match="smoke_axpy_float32"):   # block too large for any GPU
            drv.launch(fn, (1,), (1 << 16,), blob, 0, s)
    finally:
        drv.stream_destroy(s)
        drv.free(dx)
        drv.free(dy)
        drv.module_unload(mod)
