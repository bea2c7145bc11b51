"""The residency manager: which side of each buffer is valid, in both memory modes.

On HostDriver "device" memory is host memory too, so every copy's contents can be
checked directly. The gpu-marked tests run the same sequence on the real driver.
"""

import ctypes
import dataclasses

import numpy as np
import pytest

from mlx_amd.runtime.driver.host import HostDriver
from mlx_amd.runtime.residency import Residency, resolve_mode


def view(ptr, n):
    """A writable numpy view of n bytes at a host address."""
    return np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(ptr))


def mlx_owned(n, seed=0):
    """Host bytes standing in for an MLX-allocated buffer: (array, key, data pointer)."""
    a = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)
    return a, a.ctypes.data - 8, a.ctypes.data


@pytest.fixture
def drv():
    return HostDriver()


@pytest.fixture
def res(drv):
    return Residency(drv, drv.properties(), mode="discrete")


@pytest.fixture
def uni(drv):
    return Residency(drv, drv.properties(), mode="unified")


# --- modes -----------------------------------------------------------------------------

def test_mode_comes_from_argument_env_or_props(drv, monkeypatch):
    props = drv.properties()
    monkeypatch.delenv("MLX_AMD_MEMORY", raising=False)
    assert resolve_mode(props) == "unified"                      # the host is "integrated"
    assert resolve_mode(dataclasses.replace(props, integrated=False)) == "discrete"
    monkeypatch.setenv("MLX_AMD_MEMORY", "Discrete")
    assert Residency(drv, props).mode == "discrete"
    assert resolve_mode(props, "unified") == "unified"           # the argument wins
    monkeypatch.setenv("MLX_AMD_MEMORY", "shared")
    with pytest.raises(ValueError, match="MLX_AMD_MEMORY='shared'"):
        Residency(drv, props)
    with pytest.raises(ValueError, match="managed memory"):
        resolve_mode(dataclasses.replace(props, managed_memory=False), "unified")


# --- discrete ------------------------------------------------------------------------------

def test_new_buffer_discrete(res, drv):
    token, host, dev = res.new_buffer(1000)
    assert token == host - 8 and res.key_of(token) == token
    assert host % 256 == 0 and dev % 256 == 0 and host != dev
    assert res.device_ptr(token, host, 1000) == dev
    assert res.stats()["uploads"] == 0 and res.stats()["our_buffers"] == 1
    assert drv.counters["host_alloc"] == 1 and drv.counters["malloc"] == 1


def test_mlx_owned_uploads_once_and_stays_resident(res, drv):
    a, key, ptr = mlx_owned(5000)
    d = res.device_ptr(key, ptr, a.nbytes)
    assert (view(d, 5000) == a).all()
    assert res.device_ptr(key, ptr, a.nbytes) == d
    assert res.device_ptr(key, ptr, a.nbytes) == d
    s = res.stats()
    assert (s["uploads"], s["upload_bytes"], s["resident_buffers"]) == (1, 5000, 1)
    assert drv.counters["memcpy_htod_bytes"] == 5000


def test_expired_drops_the_device_copy(res):
    a, key, ptr = mlx_owned(3000)
    res.device_ptr(key, ptr, a.nbytes)
    active = res.device_pool.get_active_memory()
    assert active > 0
    res.expired([key, 0xDEAD0])            # unknown keys are ignored
    assert res.stats()["resident_buffers"] == 0
    assert res.device_pool.get_active_memory() == 0
    res.device_ptr(key, ptr, a.nbytes)     # a new buffer at that address: uploaded afresh
    assert res.stats()["uploads"] == 2


def test_reused_address_with_other_size_is_uploaded_again(res):
    a, key, ptr = mlx_owned(3000)
    res.device_ptr(key, ptr, 3000)
    d = res.device_ptr(key, ptr, 2000)
    assert res.stats()["uploads"] == 2 and res.stats()["resident_buffers"] == 1
    assert (view(d, 2000) == a[:2000]).all()


def test_written_range_is_copied_back_exactly(res, drv):
    token, host, dev = res.new_buffer(4096)
    view(host, 4096)[:] = 7
    drv.memset(dev, 1, 4096)
    res.written(token, (100, 300))        # a kernel wrote these bytes
    res.written(token, (1000, 1100))      # and these: one hull [100, 1100)
    syncs = drv.counters["stream_synchronize"]
    assert res.ensure_host([token]) == 1000
    assert drv.counters["memcpy_dtoh_bytes"] == 1000
    assert drv.counters["stream_synchronize"] == syncs + 1
    h = view(host, 4096)
    assert (h[100:1100] == 1).all() and (h[:100] == 7).all() and (h[1100:] == 7).all()
    assert res.ensure_host([token]) == 0    # now valid: nothing more to copy
    s = res.stats()
    assert (s["writebacks"], s["writeback_bytes"]) == (1, 1000)


def test_many_stale_buffers_are_copied_with_one_wait(res, drv):
    """A CPU fallback node reading three device-made inputs queues three copies and waits
    once; buffers already valid on the host cost no wait at all."""
    bufs = [res.new_buffer(256) for _ in range(4)]
    for token, _, dev in bufs[:3]:
        drv.memset(dev, 3, 256)
        res.written(token)
    syncs = drv.counters["stream_synchronize"]
    assert res.ensure_host([t for t, _, _ in bufs]) == 3 * 256
    assert drv.counters["stream_synchronize"] == syncs + 1
    assert all((view(host, 256) == 3).all() for _, host, _ in bufs[:3])
    assert res.ensure_host([t for t, _, _ in bufs]) == 0
    assert drv.counters["stream_synchronize"] == syncs + 1


def test_writeback_only_alive_and_only_stale(res, drv):
    bufs = [res.new_buffer(512) for _ in range(3)]
    for i, (t, h, d) in enumerate(bufs):
        drv.memset(d, 10 + i, 512)
    res.written(bufs[0][0])               # whole buffer
    res.written(bufs[1][0], (8, 16))
    # bufs[2] never written: nothing to copy
    n = res.writeback([t for t, _, _ in bufs] + [0x1234])
    assert n == 512 + 8 == drv.counters["memcpy_dtoh_bytes"]
    assert (view(bufs[0][1], 512) == 10).all()
    assert (view(bufs[1][1], 512)[8:16] == 11).all()
    assert res.writeback([t for t, _, _ in bufs]) == 0
    t, h, d = bufs[0]
    drv.memset(d, 99, 512)
    res.written(t)
    assert res.writeback([bufs[1][0]]) == 0   # bufs[0] did not escape: no copy


def test_writeback_of_everything_still_tracked(res, drv):
    """The evaluator's end-of-eval form: reap the dead with freed(), then write back the rest."""
    (t1, h1, d1), (t2, h2, d2) = res.new_buffer(256), res.new_buffer(256)
    drv.memset(d1, 1, 256)
    drv.memset(d2, 2, 256)
    res.written(t1, (0, 64))
    res.written(t2)
    res.freed([t2])                       # died during the evaluation: never copied
    assert res.writeback(stream=None) == 64 == drv.counters["memcpy_dtoh_bytes"]
    assert (view(h1, 64) == 1).all()
    assert res.writeback() == 0


def test_host_written_makes_the_device_copy_stale(res, drv):
    a, key, ptr = mlx_owned(256, seed=1)
    d = res.device_ptr(key, ptr, 256)
    a[:] = 42                             # MLX's CPU fallback wrote the host buffer
    res.host_written(key)
    assert res.device_ptr(key, ptr, 256) == d
    assert (view(d, 256) == 42).all() and res.stats()["uploads"] == 2
    token, host, dev = res.new_buffer(64)
    view(host, 64)[:] = 5
    res.host_written(token)               # ours too: re-uploaded from the host copy
    assert res.device_ptr(token, host, 64) == dev and (view(dev, 64) == 5).all()
    res.host_written(0xBEEF00)            # untracked: nothing to do


def test_kernel_write_into_mlx_owned_buffer_is_written_back(res, drv):
    a, key, ptr = mlx_owned(1024, seed=2)
    orig = a.copy()
    d = res.device_ptr(key, ptr, 1024)
    drv.memset(d + 512, 0, 256)           # an in-place slice update on the device copy
    res.written(key, (512, 768))
    assert res.writeback([key]) == 256
    assert (a[512:768] == 0).all() and (a[:512] == orig[:512]).all() and (a[768:] == orig[768:]).all()


def test_freed_returns_blocks_for_reuse(res, drv):
    t1, h1, d1 = res.new_buffer(2000)
    t2, h2, d2 = res.new_buffer(5000)
    res.freed([t1, t2])
    assert res.host_pool.get_active_memory() == 0 and res.device_pool.get_active_memory() == 0
    assert res.host_pool.get_cache_memory() > 0 and res.stats()["our_buffers"] == 0
    t3, h3, d3 = res.new_buffer(1900)     # same class as t1: the very same blocks
    assert (t3, h3, d3) == (t1, h1, d1)
    assert drv.counters["host_alloc"] == 2 and drv.counters["malloc"] == 2
    with pytest.raises(ValueError, match="double free"):
        res.freed([t2])
    a, key, ptr = mlx_owned(100)
    res.device_ptr(key, ptr, 100)
    with pytest.raises(ValueError, match="not live buffers of ours"):
        res.freed([key])                  # MLX-owned buffers die through expired()
    assert res.stats()["resident_buffers"] == 1


class _LeafCache:
    """Stands in for a replay program's native leaf cache (src/bridge/replay.h)."""

    def __init__(self):
        self.forgotten, self.cleared = [], 0

    def forget_leaves(self, keys):
        self.forgotten += list(keys)

    def clear_leaves(self):
        self.cleared += 1


def test_every_way_a_device_copy_goes_stale_reaches_the_leaf_caches(res, monkeypatch):
    prog, seen = _LeafCache(), 0
    a, key, ptr = mlx_owned(3000)
    b, key_b, ptr_b = mlx_owned(100, seed=3)
    res.device_ptr(key, ptr, 3000)
    res.device_ptr(key_b, ptr_b, 100)
    token, host, dev = res.new_buffer(64)
    seen = res.sync_leaf_cache(prog, seen)
    assert prog.forgotten == [] and prog.cleared == 0
    res.expired([key])                    # MLX dropped the buffer
    res.host_written(key_b)               # the CPU fallback wrote it
    res.freed([token])                    # one of ours died
    res.device_ptr(key_b, ptr_b, 50)      # its address reused at another size: dropped
    seen = res.sync_leaf_cache(prog, seen)
    assert prog.forgotten == [key, key_b, token, key_b]
    assert res.sync_leaf_cache(prog, seen) == seen and len(prog.forgotten) == 4
    # a program that fell behind a trimmed log forgets everything
    from mlx_amd.runtime import residency as R

    monkeypatch.setattr(R, "INVAL_LOG", 4)
    late = _LeafCache()
    for i in range(6):
        t, _, _ = res.new_buffer(64)
        res.freed([t])
    assert res.sync_leaf_cache(late, 0) == res.sync_leaf_cache(prog, seen) and late.cleared == 1


def test_bad_calls_are_clear_errors(res):
    t, h, d = res.new_buffer(100)
    with pytest.raises(KeyError, match="not tracked"):
        res.written(0x999)
    with pytest.raises(ValueError, match="outside"):
        res.written(t, (50, 101))
    with pytest.raises(ValueError, match="null host data pointer"):
        res.device_ptr(0x5000, 0, 16)
    res.written(t, (5, 5))                # empty range: nothing stale
    assert res.ensure_host([t]) == 0


def test_new_buffer_oom_leaves_nothing_behind():
    d = HostDriver(fail_malloc_over=1 << 20)
    r = Residency(d, d.properties(), mode="discrete")
    with pytest.raises(MemoryError, match="3145728 bytes"):
        r.new_buffer(3 << 20)
    assert r.host_pool.get_active_memory() == 0 and r.stats()["our_buffers"] == 0


def test_clear_writes_back_then_drops_mlx_owned(res, drv):
    a, key, ptr = mlx_owned(512, seed=3)
    t, h, _ = res.new_buffer(512)
    d = res.device_ptr(key, ptr, 512)
    drv.memset(d, 0xEE, 16)
    res.written(key, (0, 16))
    res.clear()
    assert (a[:16] == 0xEE).all()
    s = res.stats()
    assert s["resident_buffers"] == 0 and s["our_buffers"] == 1
    assert res.device_ptr(t, h, 512)      # ours are untouched


# --- unified ----------------------------------------------------------------------------------

def test_unified_never_copies_ours(uni, drv):
    token, host, dev = uni.new_buffer(4096)
    assert dev == host and token == host - 8
    assert drv.counters["malloc_managed"] == 1 and drv.counters["host_alloc"] == 0
    view(dev, 4096)[:] = 3                # a kernel's write is the host's data
    uni.written(token, (0, 100))
    syncs = drv.counters["stream_synchronize"]
    assert uni.ensure_host([token]) == 0
    assert drv.counters["stream_synchronize"] == syncs + 1   # still waits for the kernels
    uni.written(token)
    assert uni.writeback([token]) == 0
    uni.host_written(token)
    assert uni.device_ptr(token, host, 4096) == host
    s = uni.stats()
    assert (s["uploads"], s["writebacks"]) == (0, 0)
    assert sum(drv.counters[k] for k in drv.counters if k.startswith("memcpy")) == 0
    uni.freed([token])
    assert uni.new_buffer(4000)[1] == host


def test_unified_copies_mlx_owned_once_into_managed_memory(uni, drv):
    a, key, ptr = mlx_owned(2048, seed=5)
    d = uni.device_ptr(key, ptr, 2048)
    assert d != ptr and (view(d, 2048) == a).all()
    assert uni.device_ptr(key, ptr, 2048) == d
    assert uni.stats()["uploads"] == 1 and drv.counters["malloc_managed"] == 1
    assert drv.counters["malloc"] == 0
    uni.expired([key])
    assert uni.device_pool.get_active_memory() == 0


# --- the same sequence on the real driver ------------------------------------------------------

@pytest.fixture(scope="module")
def gpu():
    from mlx_amd.runtime.driver import get_driver
    d = get_driver()
    return d, d.properties()


def dev_bytes(d, ptr, n):
    out = np.empty(n, np.uint8)
    d.memcpy_dtoh(out.ctypes.data, ptr, n)
    d.synchronize()
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["discrete", "unified"])
def test_residency_sequence_on_gpu(gpu, mode):
    d, props = gpu
    if mode == "unified" and not props.managed_memory:
        pytest.fail(f"{props.name} has no managed memory; unified mode cannot be tested")
    r = Residency(d, props, mode=mode)
    s = d.stream_create()
    n = 1 << 20
    a, key, ptr = mlx_owned(n, seed=11)

    # upload once, reuse
    dp = r.device_ptr(key, ptr, n, s)
    assert r.device_ptr(key, ptr, n, s) == dp
    d.stream_synchronize(s)
    assert (dev_bytes(d, dp, n) == a).all()
    assert r.stats()["uploads"] == 1 and r.stats()["upload_bytes"] == n

    # a "kernel" writes our output: device-to-device copy of the input, then a partial update
    token, host, dev = r.new_buffer(n)
    assert (dev == host) == (mode == "unified")
    d.memcpy_dtod(dev, dp, n, s)
    r.written(token)
    assert r.writeback([token], s) == (0 if mode == "unified" else n)
    assert (view(host, n) == a).all()
    d.memset(dev + 4096, 0x5A, 8192, s)
    r.written(token, (4096, 4096 + 8192))
    assert r.ensure_host([token], s) == (0 if mode == "unified" else 8192)
    h = view(host, n)
    assert (h[4096:12288] == 0x5A).all() and (h[:4096] == a[:4096]).all() and (h[12288:] == a[12288:]).all()

    # MLX's CPU fallback writes the input: re-uploaded on next use
    a[:] = 0x11
    r.host_written(key)
    assert r.device_ptr(key, ptr, n, s) == dp
    d.stream_synchronize(s)
    assert (dev_bytes(d, dp, n) == 0x11).all() and r.stats()["uploads"] == 2

    # freed blocks are reused; expired inputs drop their device copy
    r.freed([token])
    assert r.new_buffer(n)[0] == token
    r.expired([key])
    assert r.stats()["resident_buffers"] == 0
    r.clear()
    d.stream_destroy(s)
    r.device_pool.clear_cache()
    r.host_pool.clear_cache()


def test_small_uploads_are_staged_through_pinned_memory(res, drv):
    import mlx_amd.runtime.residency as rmod

    s = drv.stream_create()
    a, key, ptr = mlx_owned(12, seed=3)
    b, key_b, ptr_b = mlx_owned(rmod.SMALL_UPLOAD + 4, seed=4)
    d = res.device_ptr(key, ptr, 12, stream=s)
    assert res._stage is not None and res._stage_off == 12   # staged, not copied from a
    db = res.device_ptr(key_b, ptr_b, len(b), stream=s)
    assert res._stage_off == 12                              # large: straight from the source
    drv.stream_synchronize(s)
    assert bytes(view(d, 12)) == a.tobytes() and bytes(view(db, len(b))) == b.tobytes()
    # the arena is reused only after the evaluator says the stream is idle
    c, key_c, ptr_c = mlx_owned(8, seed=5)
    res.device_ptr(key_c, ptr_c, 8, stream=s)
    assert res._stage_off == 256 + 8
    res.synchronized()
    assert res._stage_off == 0
