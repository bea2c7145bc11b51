"""The caching pools, on a fake counting driver (no memory behind the addresses) and on HostDriver."""

import random

import pytest

from mlx_amd.runtime.driver.base import DriverError
from mlx_amd.runtime.driver.host import HostDriver
from mlx_amd.runtime.memory import (HOST_HEADER, LARGE_PAGE, MIN_BLOCK, SLAB_BYTES, SLAB_MAX, SMALL_MAX,
                                    Block, DevicePool, HostPool, round_size)

MiB = 1 << 20


class FakeDriver:
    """Hands out increasing fake addresses, logs every call, and runs out of memory
    past ``capacity`` live bytes (or with ``error`` set, fails with that error)."""

    def __init__(self, capacity=1 << 40):
        self.capacity, self.next, self.live, self.log = capacity, 1 << 32, {}, []
        self.error = None

    def _oom(self, call, n):
        raise DriverError(f"{call}({n})", 2, "fakeErrorOutOfMemory", "out of memory")

    def malloc(self, n):
        if self.error:
            raise self.error
        if sum(self.live.values()) + n > self.capacity:
            self._oom("malloc", n)
        p, self.next = self.next, self.next + n + 4096
        self.live[p] = n
        self.log.append(("malloc", p, n))
        return p

    malloc_managed = host_alloc = malloc

    def free(self, p):
        self.log.append(("free", p, self.live.pop(p)))

    host_free = free

    def mem_info(self):
        return self.capacity - sum(self.live.values()), self.capacity

    def calls(self, name):
        return [e for e in self.log if e[0] == name]


@pytest.fixture
def fake():
    return FakeDriver()


@pytest.fixture
def pool(fake):
    return DevicePool(fake, limit=1 << 36)


def held(drv):
    return sum(drv.live.values())


def check_consistent(pool, drv, live_blocks):
    assert pool.get_active_memory() == sum(b.size for b in live_blocks)
    assert held(drv) == pool.get_active_memory() + pool.get_cache_memory() + pool.stats()["slack"]
    assert pool.get_peak_memory() >= pool.get_active_memory()


# --- size classes -----------------------------------------------------------------

@pytest.mark.parametrize("n", [0, 1, 255, 256, 257, 1000, 4096, 4097, SMALL_MAX - 1, SMALL_MAX,
                               SMALL_MAX + 1, 3 * MiB + 5, 1 << 33])
def test_size_classes(n):
    s = round_size(n)
    assert s >= max(n, MIN_BLOCK) and s % MIN_BLOCK == 0
    if n <= SMALL_MAX:
        assert s & (s - 1) == 0 and (s < 2 * n or s == MIN_BLOCK)
    else:
        assert s % LARGE_PAGE == 0 and s - n < LARGE_PAGE


def test_blocks_are_small_and_aligned():
    d = HostDriver()
    dp, hp = DevicePool(d), HostPool(d)
    assert not hasattr(Block(1, 256, 1, 1, None), "__dict__")
    blocks = [dp.alloc(n) for n in (1, 300, 70000)] + [hp.alloc(n) for n in (0, 1, 300, 70000)]
    for b in blocks:
        assert b.data % 256 == 0
        assert b.data + b.requested <= b.ptr + b.size
    for b in blocks[3:]:
        assert b.data == b.ptr + HOST_HEADER
    for b in blocks[:3]:
        dp.free(b)
    for b in blocks[3:]:
        hp.free(b)
    dp.clear_cache()
    hp.clear_cache()
    assert d.live_allocations() == 0
    # one slab per class (0 and 1 bytes share one on the host side, behind the header)
    assert d.counters["host_alloc"] == 3 and d.counters["malloc"] == 3


# --- caching ------------------------------------------------------------------------

def test_freed_block_is_reused_without_the_driver(pool, fake):
    a = pool.alloc(1000)
    ptr = a.ptr
    pool.free(a)
    b = pool.alloc(900)                       # same class (1024)
    assert b.ptr == ptr and b.requested == 900 and b.size == 1024
    assert len(fake.calls("malloc")) == 1 and not fake.calls("free")
    assert pool.stats()["hits"] == 1


def test_best_fit(pool, fake):
    blocks = {n: pool.alloc(n) for n in (4096, 1024, 2048)}
    for b in blocks.values():
        pool.free(b)
    assert pool.alloc(1500).ptr == blocks[2048].ptr       # not the 4096 one
    assert pool.alloc(600).ptr == blocks[1024].ptr
    assert len(fake.calls("malloc")) == 3


def test_never_more_than_twice_the_request(pool, fake):
    big = pool.alloc(4096)
    pool.free(big)
    small = pool.alloc(1024)                  # 4096 > 2 * 1024: a new block
    assert small.ptr != big.ptr and len(fake.calls("malloc")) == 2
    half = pool.alloc(2048)                   # 4096 <= 2 * 2048: reuse
    assert half.ptr == big.ptr and half.size == 4096
    pool.free(small)
    pool.free(half)
    large = pool.alloc(5 * MiB)               # class 6 MiB
    pool.free(large)
    assert pool.alloc(2 * MiB + 1).ptr != large.ptr       # 6 MiB > 2 * (2 MiB + 1)
    assert pool.alloc(3 * MiB).ptr == large.ptr


def test_cache_limit_releases_least_recently_cached(pool, fake):
    S = 4 * MiB                               # large classes: a driver allocation each
    blocks = [pool.alloc(S) for _ in range(4)]
    assert pool.set_cache_limit(3 * S) == 1 << 36
    for b in blocks:
        pool.free(b)
    assert fake.calls("free") == [("free", blocks[0].ptr, S)]
    assert pool.get_cache_memory() == 3 * S
    pool.alloc(S)                             # takes the most recently cached one
    pool.free(pool.alloc(3 * MiB // 2))       # 2 MiB class: a new block (4 MiB > twice 1.5)
    pool.set_cache_limit(S)                   # shrinking trims at once, oldest first
    assert [e[1] for e in fake.calls("free")] == [blocks[0].ptr, blocks[1].ptr, blocks[2].ptr]
    pool.set_cache_limit(0)
    assert pool.get_cache_memory() == 0
    b = pool.alloc(3 * MiB)
    pool.free(b)                              # caching off: straight back to the driver
    assert fake.calls("free")[-1][1] == b.ptr


def test_counters(pool, fake):
    a, b = pool.alloc(3000), pool.alloc(MiB + 1)
    assert pool.get_active_memory() == 4096 + 2 * MiB
    assert pool.get_peak_memory() == pool.get_active_memory()
    pool.free(b)
    assert pool.get_active_memory() == 4096
    assert pool.get_cache_memory() == 2 * MiB
    assert pool.get_peak_memory() == 4096 + 2 * MiB
    pool.reset_peak_memory()
    assert pool.get_peak_memory() == 4096
    pool.clear_cache()
    # a's slab stays: its other slots are slack, not cache
    assert pool.get_cache_memory() == 0 and held(fake) == SLAB_BYTES
    assert pool.stats()["slack"] == SLAB_BYTES - 4096
    check_consistent(pool, fake, [a])
    pool.free(a)
    pool.clear_cache()
    assert held(fake) == 0 and pool.stats()["slack"] == 0


def test_random_sequences_stay_consistent(fake):
    pool = DevicePool(fake, limit=1 << 36)
    pool.set_cache_limit(8 * MiB)
    rng = random.Random(4)
    live = []
    for _ in range(2000):
        if live and rng.random() < 0.45:
            pool.free(live.pop(rng.randrange(len(live))))
        else:
            n = rng.choice([rng.randrange(0, 5000), rng.randrange(0, 3 * MiB)])
            b = pool.alloc(n)
            assert b.size >= n and b.size <= 2 * max(n + 1, MIN_BLOCK) and b.requested == n
            live.append(b)
        assert pool.get_cache_memory() <= 8 * MiB
    check_consistent(pool, fake, live)
    assert len({b.ptr for b in live}) == len(live)


# --- limits and out of memory ------------------------------------------------------------

def test_memory_limit_releases_cache_then_raises(pool, fake):
    a = pool.alloc(4 * MiB)
    c = pool.alloc(4 * MiB)
    pool.free(c)
    assert pool.set_memory_limit(12 * MiB) == 1 << 36
    b = pool.alloc(7 * MiB)                  # 8 MiB class: fits only once the cache is released
    assert pool.get_cache_memory() == 0 and ("free", c.ptr, 4 * MiB) in fake.log
    state = (pool.get_active_memory(), pool.get_peak_memory(), held(fake))
    with pytest.raises(MemoryError) as e:
        pool.alloc(3 * MiB)
    msg = str(e.value)
    assert "3145728 bytes" in msg and "(4.0 MiB block)" in msg and "over the memory limit" in msg
    assert "12.0 MiB active" in msg and "limit 12.0 MiB" in msg
    assert (pool.get_active_memory(), pool.get_peak_memory(), held(fake)) == state
    with pytest.raises(MemoryError, match=r"cannot allocate 1000 bytes \(2.0 MiB slab\)"):
        pool.alloc(1000)                     # a small block needs a new slab: the same limit
    pool.free(b)
    check_consistent(pool, fake, [a])


def test_driver_oom_frees_cache_and_retries(fake):
    fake.capacity = 10 * MiB
    pool = DevicePool(fake)
    assert pool.get_memory_limit() == int(10 * MiB * 0.9)
    pool.set_memory_limit(1 << 30)           # let the driver be the one that fails
    keep = pool.alloc(4 * MiB)
    cached = [pool.alloc(2 * MiB), pool.alloc(2 * MiB)]
    for b in cached:
        pool.free(b)
    got = pool.alloc(5 * MiB + 1)            # 6 MiB: fails at first, fits once the cache is gone
    assert pool.get_cache_memory() == 0 and pool.stats()["oom_retries"] == 1
    assert {e[1] for e in fake.calls("free")} == {b.ptr for b in cached}
    check_consistent(pool, fake, [keep, got])


def test_driver_oom_after_retry_is_a_memory_error(fake):
    fake.capacity = 10 * MiB
    pool = DevicePool(fake, limit=1 << 30)
    keep = pool.alloc(6 * MiB)
    pool.free(pool.alloc(3 * MiB // 2))       # 2 MiB class: a new block (4 MiB > twice 1.5)
    before = (pool.get_active_memory(), pool.get_peak_memory())
    with pytest.raises(MemoryError) as e:
        pool.alloc(7 * MiB)
    msg = str(e.value)
    assert "cannot allocate 7340032 bytes" in msg and "8.0 MiB block" in msg
    assert "6.0 MiB active" in msg and "0 B cached" in msg and "limit 1.0 GiB" in msg
    assert "4.0 MiB free of 10.0 MiB" in msg and "OutOfMemory" in msg
    assert isinstance(e.value.__cause__, DriverError)
    assert (pool.get_active_memory(), pool.get_peak_memory()) == before
    assert pool.get_cache_memory() == 0
    check_consistent(pool, fake, [keep])
    pool.free(keep)
    assert pool.alloc(7 * MiB).size == 8 * MiB   # usable again afterwards


def test_other_driver_errors_pass_through(pool, fake):
    fake.error = DriverError("malloc(256)", 700, "fakeErrorIllegalAddress", "illegal address")
    with pytest.raises(DriverError, match="IllegalAddress"):
        pool.alloc(1)
    assert pool.get_active_memory() == 0 and pool.stats()["oom_retries"] == 0


def test_host_driver_oom_path():
    d = HostDriver(fail_malloc_over=MiB)
    pool = DevicePool(d)
    ok = pool.alloc(MiB)
    with pytest.raises(MemoryError, match="2097153 bytes"):
        pool.alloc(2 * MiB + 1)
    pool.free(ok)
    pool.clear_cache()
    assert d.live_allocations() == 0


def test_bad_arguments(pool):
    with pytest.raises(ValueError, match=">= 0"):
        pool.alloc(-1)
    with pytest.raises(TypeError, match="int"):
        pool.alloc("10")
    with pytest.raises(TypeError):
        pool.alloc(1.5)
    b = pool.alloc(10)
    pool.free(b)
    with pytest.raises(ValueError, match="double free"):
        pool.free(b)
    other = DevicePool(FakeDriver(), limit=1 << 30)
    with pytest.raises(ValueError, match="not allocated by this"):
        other.free(pool.alloc(10))
    with pytest.raises(ValueError, match="limit"):
        pool.set_memory_limit(-5)
    with pytest.raises(ValueError, match="limit"):
        pool.set_cache_limit("big")


def test_host_pool_kinds():
    d = HostDriver()
    pinned, managed = HostPool(d), HostPool(d, managed=True)
    a, b = pinned.alloc(10), managed.alloc(10)
    assert d.counters["host_alloc"] == 1 and d.counters["malloc_managed"] == 1
    assert (pinned.kind, managed.kind) == ("host", "unified")
    assert managed.get_memory_limit() == int(d.mem_info()[1] * 0.75)
    pinned.free(a)
    managed.free(b)
    pinned.clear_cache()
    managed.clear_cache()
    assert d.counters["host_free"] == 1 and d.counters["free"] == 1
    assert d.live_allocations() == 0


def test_host_pool_maps_large_blocks_pageable_and_pins_the_rest():
    # with lazy write-back, blocks above SLAB_MAX are anonymous mappings (no pinning cost:
    # ~0.7 ms per MB on the H200), slab classes and pinned() stay pinned driver memory
    import ctypes

    d = HostDriver()
    pool = HostPool(d, pageable_large=True)
    small, big = pool.alloc(1000), pool.alloc(3 * MiB + 5)
    assert d.counters["host_alloc"] == 1                     # the small block's slab only
    assert big.size == 4 * MiB and big.ptr in pool._mapped
    ctypes.memset(big.data, 0x5A, 3 * MiB + 5)              # usable memory, every byte
    assert ctypes.string_at(big.data + 3 * MiB, 5) == b"Z" * 5
    pool.free(big)
    again = pool.alloc(3 * MiB)                              # from the cache: same mapping
    assert again.ptr == big.ptr and len(pool._mapped) == 1
    pool.free(again)
    pool.free(small)
    pool.clear_cache()
    assert not pool._mapped and d.counters["host_free"] == 1 and d.live_allocations() == 0
    stage = pool.pinned(2 * MiB)                             # any size, pinned, outside the pool
    assert d.counters["host_alloc"] == 2 and pool.get_active_memory() == 0
    pool.free_pinned(stage)
    assert d.live_allocations() == 0
    # without the switch (eager write-back copies asynchronously into these blocks), pinned
    plain = HostPool(d)
    b = plain.alloc(3 * MiB)
    assert d.counters["host_alloc"] == 3 and not plain._mapped
    plain.free(b)
    plain.clear_cache()


@pytest.mark.gpu
def test_real_device_oom_is_a_memory_error_and_the_pool_survives():
    from mlx_amd.runtime.driver import get_driver
    d = get_driver()
    free, total = d.mem_info()
    pool = DevicePool(d)
    pool.set_memory_limit(4 * total)         # let the driver be the one that refuses
    keep = pool.alloc(3000)
    pool.free(pool.alloc(MiB))
    with pytest.raises(MemoryError) as e:
        pool.alloc(2 * total)
    msg = str(e.value)
    assert f"cannot allocate {2 * total} bytes" in msg and "free of" in msg
    assert isinstance(e.value.__cause__, DriverError) and e.value.__cause__.out_of_memory
    assert pool.get_active_memory() == keep.size and pool.get_cache_memory() == 0
    assert pool.stats()["oom_retries"] == 1
    b = pool.alloc(MiB)                      # still usable
    d.memset(b.data, 7, MiB)
    pool.free(b)
    pool.free(keep)
    pool.clear_cache()


@pytest.mark.gpu
def test_real_device_async_pool_round_trip_and_release():
    """On CUDA the device pool takes the stream-ordered allocator by default: blocks keep
    their bytes through the stream, a cleared cache is reused at once, and after a
    synchronize the memory is the system's again (free memory back where it was)."""
    import ctypes

    from mlx_amd.runtime.driver import get_driver
    d = get_driver()
    pool = DevicePool(d)
    assert pool.async_alloc == (d.platform == "nvidia")
    d.synchronize()
    free0 = d.mem_info()[0]
    host = (ctypes.c_uint8 * (64 * MiB))()
    for rnd in range(3):
        blocks = [pool.alloc(64 * MiB) for _ in range(4)]
        for k, b in enumerate(blocks):
            d.memset(b.data, 16 * rnd + k, 64 * MiB)
        for k, b in enumerate(blocks):
            d.memcpy_dtoh(ctypes.addressof(host), b.data, 64 * MiB)
            assert host[0] == host[64 * MiB - 1] == 16 * rnd + k
        for b in blocks:
            pool.free(b)
        pool.clear_cache()
    d.synchronize()
    assert d.mem_info()[0] >= free0 - 64 * MiB       # (the driver may keep a little)


# --- slabs ---------------------------------------------------------------------------

def test_small_classes_share_slabs_and_a_slab_goes_back_when_unused(pool, fake):
    per = SLAB_BYTES // 4096
    blocks = [pool.alloc(3000) for _ in range(per + 1)]          # one slab full, one more begun
    assert len(fake.calls("malloc")) == 2 and all(e[2] == SLAB_BYTES for e in fake.calls("malloc"))
    assert len({b.ptr for b in blocks}) == len(blocks)
    assert all(b.ptr % 4096 == 0 for b in blocks)                 # slots at multiples of their class
    first = fake.calls("malloc")[0][1]
    assert {b.ptr for b in blocks[:per]} == {first + k * 4096 for k in range(per)}
    other = pool.alloc(SLAB_MAX)                                  # another class: its own slab
    assert len(fake.calls("malloc")) == 3
    for b in blocks[:per]:
        pool.free(b)
    pool.clear_cache()                                            # the full slab is unused: freed
    assert fake.calls("free") == [("free", first, SLAB_BYTES)]
    assert pool.get_cache_memory() == 0
    again = pool.alloc(4000)                                      # a free slot of the open slab
    assert len(fake.calls("malloc")) == 3
    check_consistent(pool, fake, [blocks[per], other, again])
    # memory.SLAB_MAX / SLAB_BYTES mirror src/bridge/pool.cpp: the class above the largest
    # slab class is a driver allocation of its own
    big = pool.alloc(SLAB_MAX + 1)
    assert fake.calls("malloc")[-1][1:] == (big.ptr, 2 * SLAB_MAX) and len(fake.calls("malloc")) == 4
    pool.free(big)
    for b in (blocks[per], other, again):
        pool.free(b)
    pool.clear_cache()
    assert held(fake) == 0 and pool.stats()["slack"] == 0
    assert pool.stats()["driver_allocs"] == 4 and pool.stats()["driver_frees"] == 4


def test_slabs_stay_consistent_under_random_use(fake):
    pool = DevicePool(fake, limit=1 << 36)
    rng = random.Random(9)
    live = []
    for step in range(4000):
        r = rng.random()
        if live and r < 0.45:
            pool.free(live.pop(rng.randrange(len(live))))
        elif r < 0.47:
            pool.clear_cache()
        elif r < 0.49:
            pool.set_cache_limit(rng.choice([0, 64 * 1024, 1 << 36]))
        else:
            b = pool.alloc(rng.choice([rng.randrange(0, 2000), rng.randrange(0, SLAB_MAX), rng.randrange(0, 3 * MiB)]))
            live.append(b)
        if step % 97 == 0:
            check_consistent(pool, fake, live)
    ranges = sorted((b.ptr, b.ptr + b.size) for b in live)
    assert all(e <= s for (_, e), (s, _) in zip(ranges, ranges[1:]))   # no two blocks overlap
    for b in live:
        pool.free(b)
    pool.clear_cache()
    assert held(fake) == 0 and pool.stats()["slack"] == 0


# --- the stream-ordered allocator --------------------------------------------------------

class AsyncFake(FakeDriver):
    """A driver with the stream-ordered allocator: its frees are logged apart, and memory
    freed that way only returns to the capacity at the next synchronize."""

    platform = "nvidia"

    def __init__(self, capacity=1 << 40):
        super().__init__(capacity)
        self.pending = []

    def async_alloc_supported(self):
        return True

    def malloc_async(self, n):
        p = self.malloc(n)
        self.log[-1] = ("malloc_async", p, n)
        return p

    def free_async(self, p):
        self.pending.append(p)
        self.log.append(("free_async", p, self.live[p]))

    def synchronize(self):
        for p in self.pending:
            self.live.pop(p)
        self.pending = []
        self.log.append(("synchronize", 0, 0))


def test_async_pool_allocates_and_clears_stream_ordered(monkeypatch):
    monkeypatch.delenv("MLX_AMD_ASYNC_ALLOC", raising=False)
    drv = AsyncFake()
    pool = DevicePool(drv, limit=1 << 36)
    assert pool.async_alloc and pool.stats()["async_alloc"]
    blocks = [pool.alloc(n) for n in (4 * MiB, 10 * MiB, 100)]
    for b in blocks:
        pool.free(b)
    pool.clear_cache()
    assert pool.get_cache_memory() == 0
    assert len(drv.calls("malloc_async")) == 3 and len(drv.calls("free_async")) == 3
    assert not drv.calls("malloc") and not drv.calls("free") and not drv.calls("synchronize")


def test_async_pool_choice_follows_platform_and_switch(monkeypatch):
    monkeypatch.delenv("MLX_AMD_ASYNC_ALLOC", raising=False)
    hip = AsyncFake()
    hip.platform = "amd"
    assert not DevicePool(hip, limit=1 << 30).async_alloc        # unmeasured on AMD: off by default
    monkeypatch.setenv("MLX_AMD_ASYNC_ALLOC", "1")
    assert DevicePool(hip, limit=1 << 30).async_alloc
    assert not DevicePool(FakeDriver(), limit=1 << 30).async_alloc   # a driver without it
    monkeypatch.setenv("MLX_AMD_ASYNC_ALLOC", "0")
    assert not DevicePool(AsyncFake(), limit=1 << 30).async_alloc
    assert not DevicePool(AsyncFake(), managed=True, limit=1 << 30).async_alloc
    monkeypatch.setenv("MLX_AMD_ASYNC_ALLOC", "yes")
    with pytest.raises(ValueError, match="MLX_AMD_ASYNC_ALLOC"):
        DevicePool(AsyncFake(), limit=1 << 30)


def test_async_pool_oom_retry_waits_for_its_frees(monkeypatch):
    """Memory freed stream-ordered is the driver's again only after a synchronize: the
    out-of-memory retry clears the cache, synchronizes, and then succeeds."""
    monkeypatch.delenv("MLX_AMD_ASYNC_ALLOC", raising=False)
    drv = AsyncFake(capacity=64 * MiB)
    pool = DevicePool(drv, limit=1 << 36)
    b = pool.alloc(40 * MiB)
    pool.free(b)                       # cached
    c = pool.alloc(60 * MiB)           # does not fit beside the cached block
    assert pool.stats()["oom_retries"] == 1 and c.size >= 60 * MiB
    names = [e[0] for e in drv.log]
    assert names.index("free_async") < names.index("synchronize") < len(names) - 1
