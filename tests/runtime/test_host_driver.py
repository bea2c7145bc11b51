"""The GPU-less HostDriver: honest properties, real host memory, injected failures."""

import ctypes
import os

import pytest

from mlx_amd.runtime.driver.base import DriverError
from mlx_amd.runtime.driver.host import HostDriver, host_memory_info


@pytest.fixture
def drv():
    d = HostDriver()
    yield d
    assert d.live_allocations() == 0, "a test leaked host-driver allocations"


def test_properties_describe_the_host(drv):
    p = drv.properties()
    assert (p.name, p.arch, drv.platform, drv.name) == ("host (no GPU)", "host", "host", "host")
    assert p.integrated and p.managed_memory
    assert p.wave_size == 32
    # /proc/meminfo's MemTotal is the kernel's totalram, which sysconf also reports
    assert p.total_memory == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert p.compute_units == os.cpu_count()
    assert drv.device_count() == 1 and drv.current_device() == 0
    free, total = drv.mem_info()
    assert 0 < free <= total == p.total_memory
    assert isinstance(p.as_dict(), dict)


def test_only_device_zero_exists(drv):
    drv.set_device(0)
    with pytest.raises(DriverError, match="one device"):
        drv.set_device(1)
    with pytest.raises(DriverError):
        drv.properties(2)


@pytest.mark.parametrize("alloc,free", [("malloc", "free"), ("host_alloc", "host_free"),
                                        ("malloc_managed", "free")])
def test_allocations_are_aligned_real_memory(drv, alloc, free):
    ptrs = [getattr(drv, alloc)(n) for n in (1, 255, 4097, 1 << 20)]
    for p, n in zip(ptrs, (1, 255, 4097, 1 << 20)):
        assert p % 256 == 0
        drv.memset(p, 0xAB, n)
        assert ctypes.string_at(p, n) == b"\xab" * n
    for p in ptrs:
        getattr(drv, free)(p)
    assert drv.counters[alloc] == 4 and drv.counters[free] == 4


def test_copies_move_bytes_and_are_counted(drv):
    src = (ctypes.c_uint8 * 1000)(*range(256), *range(256), *range(256), *range(232))
    a, b = drv.malloc(1000), drv.host_alloc(1000)
    drv.memcpy_htod(a, ctypes.addressof(src), 1000)
    drv.memcpy_dtoh(b, a + 100, 500, stream=None)
    assert ctypes.string_at(b, 500) == bytes(src)[100:600]
    s = drv.stream_create()
    drv.memcpy_dtod(a, a + 500, 400, stream=s)
    drv.memcpy_async(b, a, 10, stream=s)
    drv.memcpy(b + 10, a, 0)
    assert ctypes.string_at(b, 10) == bytes(src)[500:510]
    assert drv.counters["memcpy_htod_bytes"] == 1000 and drv.counters["memcpy_dtoh_bytes"] == 500
    assert drv.counters["memcpy_dtod_bytes"] == 400
    drv.stream_synchronize(s)
    drv.stream_destroy(s)
    drv.free(a)
    drv.host_free(b)


def test_bad_memory_calls_raise_not_crash(drv):
    p = drv.malloc(64)
    with pytest.raises(DriverError, match="host_free"):
        drv.host_free(p)              # wrong kind of allocation
    drv.free(p)
    with pytest.raises(DriverError, match="not a live"):
        drv.free(p)                   # double free
    with pytest.raises(DriverError, match="not a live"):
        drv.free(12345)
    with pytest.raises(DriverError, match="non-negative"):
        drv.malloc(-1)
    with pytest.raises(DriverError, match="null"):
        drv.memcpy_htod(0, 0, 16)
    with pytest.raises(DriverError, match="null"):
        drv.memset(0, 0, 1)
    with pytest.raises(DriverError, match="non-negative"):
        drv.memcpy(1, 1, -4)


def test_fail_malloc_over_is_an_out_of_memory_error(drv):
    drv.fail_malloc_over = 1024
    p = drv.malloc(1024)
    with pytest.raises(DriverError) as e:
        drv.malloc(1025)
    assert e.value.out_of_memory and "1025" in str(e.value)
    with pytest.raises(DriverError):
        drv.malloc_managed(4096)
    h = drv.host_alloc(4096)          # host allocations are not device memory
    drv.host_free(h)
    drv.free(p)


def test_capacity_tracks_live_device_bytes():
    d = HostDriver(capacity=10_000)
    assert d.mem_info() == (10_000, 10_000) and d.properties().total_memory == 10_000
    a = d.malloc(6000)
    assert d.mem_info() == (4000, 10_000)
    with pytest.raises(DriverError) as e:
        d.malloc(5000)
    assert e.value.out_of_memory
    d.free(a)
    b = d.malloc(5000)                # freeing made room again
    d.free(b)
    assert d.live_allocations() == 0


def test_streams_and_events(drv):
    s = drv.stream_create()
    e0, e1 = drv.event_create(), drv.event_create()
    with pytest.raises(DriverError, match="never recorded"):
        drv.event_elapsed_ms(e0, e1)
    drv.event_record(e0, s)
    drv.event_record(e1, s)
    assert drv.event_query(e1)
    drv.event_synchronize(e1)
    drv.stream_wait_event(s, e0)
    assert drv.event_elapsed_ms(e0, e1) >= 0.0
    drv.event_destroy(e0)
    with pytest.raises(DriverError, match="invalid resource handle"):
        drv.event_record(e0)
    with pytest.raises(DriverError):
        drv.stream_synchronize(e1)    # an event is not a stream
    drv.stream_destroy(s)
    with pytest.raises(DriverError):
        drv.stream_destroy(s)
    drv.synchronize()


def test_runs_no_kernels(drv):
    with pytest.raises(DriverError, match="runs no kernels"):
        drv.module_load_data(b"\x7fELF")
    with pytest.raises(DriverError, match="runs no kernels"):
        drv.module_get_function(None, "unary_v_exp_float32_float32")
    with pytest.raises(DriverError, match="runs no kernels"):
        drv.launch(None, (1, 1, 1), (32, 1, 1), b"")


def test_error_strings_and_versions(drv):
    assert drv.error_string(2)[0] == "hostErrorOutOfMemory"
    assert "unknown" in drv.error_string(99999)[1]
    assert drv.runtime_version() == "host" and drv.driver_version()
    avail, total = host_memory_info()
    assert 0 < avail <= total
