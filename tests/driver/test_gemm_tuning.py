"""The GEMM engine's algorithm timing (blas/lt.py, MLX_AMD_GEMM_TUNE) against a fake
library whose algorithms cost what the test says on a fake device clock: which candidate is
kept, when timing happens, what it never touches (the caller's operands), and the cases that
keep the heuristic's first (refused candidates, launch-bound problems, no scratch)."""

import ctypes

import pytest

from mlx_amd.runtime.blas import Gemm, lt


class Clock:
    now = 0.0     # ms


class FakeLib:
    """cuBLASLt's calls the engine makes. Candidate i's algorithm bytes start with i; a
    call of it advances the device clock by ``cost[i]`` ms and writes nothing."""

    path = "/fake/libcublasLt.so"

    def __init__(self, cost, states=None, refuse=(), vendor="cuda"):
        self.k = lt.VENDORS[vendor]
        self.cost, self.states, self.refuse = list(cost), states or [0] * len(cost), set(refuse)
        self.calls = []          # (algo index, A, B, C, D, stream)
        self.asked = []          # requested algorithm counts

    def symbol(self, call):
        return call

    def lt_create(self, h):
        h._obj.value = 1
        return 0

    def _new(self, out, *_):
        out._obj.value = 7
        return 0

    lt_desc_create = lt_layout_create = lt_pref_create = _new

    def lt_desc_set(self, *_):
        return 0

    lt_layout_set = lt_pref_set = lt_desc_set

    def lt_pref_destroy(self, *_):
        return 0

    lt_layout_destroy = lt_desc_destroy = lt_destroy = lt_pref_destroy

    def lt_heuristic(self, handle, desc, la, lb, lc, ld, pref, want, result, count):
        self.asked.append(want)
        n = min(want, len(self.cost))
        rb = self.k["result_bytes"]
        buf = bytearray(rb * want)
        for i in range(n):
            r = i * rb
            buf[r] = i
            buf[r + self.k["ws_at"]:r + self.k["ws_at"] + 8] = (1024 * i).to_bytes(8, "little")
            buf[r + self.k["state_at"]:r + self.k["state_at"] + 4] = self.states[i].to_bytes(4, "little", signed=True)
        ctypes.memmove(result, bytes(buf), len(buf))
        count._obj.value = n
        return 0

    @property
    def lt_matmul(self):
        return Entry(self._matmul)     # native() takes its address

    def _matmul(self, handle, desc, alpha, a, la, b, lb, beta, c, lc, d, ld, algo, ws, wsize, stream):
        i = algo.raw[0]
        self.calls.append((i, a, b, c, d, stream))
        if i in self.refuse:
            return 15
        Clock.now += self.cost[i]
        return 0


class Entry:
    """A library entry point: callable, and with an address for ctypes.cast."""
    _as_parameter_ = 0x5EED

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        return self.fn(*args)


class FakeDriver:
    platform = "nvidia"

    def __init__(self):
        self.syncs = 0
        self.live_events = 0

    def synchronize(self):
        self.syncs += 1

    def memset(self, ptr, value, nbytes, stream=None):
        self.filled = getattr(self, "filled", []) + [(ptr, value, nbytes)]

    def event_create(self, timing=True):
        self.live_events += 1
        return [0.0]

    def event_record(self, ev, stream=None):
        ev[0] = Clock.now

    def event_synchronize(self, ev):
        pass

    def event_elapsed_ms(self, a, b):
        return b[0] - a[0]

    def event_destroy(self, ev):
        self.live_events -= 1


class Block:
    def __init__(self, data, nbytes):
        self.data, self.nbytes = data, nbytes


class FakePool:
    def __init__(self, limit=1 << 40):
        self.limit, self.live, self.next, self.sizes = limit, set(), 0x10000000, []

    def alloc(self, n):
        if sum(b.nbytes for b in self.live) + n > self.limit:
            raise MemoryError(f"device pool: {n} bytes over the limit")
        self.next += (n + 0xFFFFF) & ~0xFFFFF
        b = Block(self.next, n)
        self.live.add(b)
        self.sizes.append(n)
        return b

    def free(self, b):
        self.live.remove(b)


WS = lt.VENDORS["cuda"]["workspace"]     # the engine's one workspace block, held for its life


def scratch(pool):
    return [b for b in pool.live if b.nbytes != WS]


def engine(monkeypatch, lib, mode=None, pool=None):
    if mode is None:
        monkeypatch.delenv(lt.TUNE_ENV, raising=False)
    else:
        monkeypatch.setenv(lt.TUNE_ENV, mode)
    pool = pool or FakePool()
    return lt.LtEngine(FakeDriver(), pool, lib=lib), pool


G = Gemm("bfloat16", 512, 4096, 4096, False, True, 512, 4096, 512, beta=1.0)
ALIGNS = (256, 256, 256, 256)
A, B, D = 0xA000, 0xB000, 0xD000


def algo_index(fields):
    return fields[10][0]      # LtEngine.native: the algorithm's bytes


def test_repeat_times_at_record_and_keeps_the_fastest(monkeypatch):
    lib = FakeLib([0.30, 0.25, 0.12, 0.40])
    eng, pool = engine(monkeypatch, lib)
    assert eng.tune == "repeat"
    eng.matmul(G, A, B, D, D, 5)                       # a first call: the heuristic's first
    assert lib.calls == [(0, A, B, D, D, 5)] and lib.asked == [lt.TUNE_CANDIDATES]
    assert eng.tunings == []
    fields = eng.native(G, ALIGNS)                       # a replay records it: timed once
    assert algo_index(fields) == 2 and fields[7] == 2048  # its workspace size travels with it
    timed = lib.calls[1:]
    assert [c[0] for c in timed] == [i for i in range(4) for _ in range(1 + lt.TUNE_REPS)]
    # scratch operands only, on the timing's own stream, never the caller's arrays
    assert all(c[1] not in (A, B, D) and c[4] not in (A, B, D) and c[5] is None for c in timed)
    assert not scratch(pool) and eng.driver.live_events == 0 and eng.driver.syncs >= 2
    assert len(eng.driver.filled) == 3 and all(v == 0x3C for _, v, _ in eng.driver.filled)
    g, aligns, times, best, secs = eng.tunings[0]
    assert g == G and best == 2 and times == pytest.approx([0.30, 0.25, 0.12, 0.40])
    n = len(lib.calls)
    eng.native(G, ALIGNS)
    eng.matmul(G, A, B, D, D, 5)
    assert len(lib.calls) == n + 1 and lib.calls[-1][0] == 2 and len(eng.tunings) == 1


def test_scratch_spans_each_operand():
    # column-major A (m x k, lda) etc.: ld * (cols - 1) + rows, plus the batch strides
    assert lt.operand_bytes("float32", 3, 4, 5, 1, 0) == 4 * (5 * 3 + 3)
    assert lt.operand_bytes("bfloat16", 3, 4, 5, 2, 100) == 2 * (5 * 3 + 3 + 100)
    assert lt.operand_bytes("float16", 0, 4, 5, 1, 0) == 0


def test_scratch_matches_the_problem(monkeypatch):
    lib = FakeLib([0.3, 0.2])
    eng, pool = engine(monkeypatch, lib)
    g = Gemm("float32", 100, 30, 50, True, False, 50, 50, 128, batch=3, stride_a=5000, stride_b=1500,
             stride_c=3840)
    eng.native(g, ALIGNS)
    assert pool.sizes[-3:] == [lt.operand_bytes("float32", 50, 100, 50, 3, 5000),
                               lt.operand_bytes("float32", 50, 30, 50, 3, 1500),
                               lt.operand_bytes("float32", 100, 30, 128, 3, 3840)]


def test_always_times_at_the_first_call(monkeypatch):
    lib = FakeLib([0.3, 0.1])
    eng, _ = engine(monkeypatch, lib, "always")
    eng.matmul(G, A, B, D, D, 5)
    assert lib.calls[-1] == (1, A, B, D, D, 5) and eng.tunings[0][3] == 1


def test_off_asks_for_one_and_never_times(monkeypatch):
    lib = FakeLib([0.3, 0.1])
    eng, pool = engine(monkeypatch, lib, "off")
    eng.native(G, ALIGNS)
    eng.matmul(G, A, B, D, D, 5)
    assert lib.asked == [1] and [c[0] for c in lib.calls] == [0] and not eng.tunings and pool.sizes == [WS]


def test_bad_mode_names_the_variable(monkeypatch):
    with pytest.raises(ValueError, match="MLX_AMD_GEMM_TUNE='fast'"):
        engine(monkeypatch, FakeLib([0.1]), "fast")


def test_refused_and_unusable_candidates_are_never_chosen(monkeypatch):
    # candidate 1 is the cheapest but the library refuses it; 2's state says unusable
    lib = FakeLib([0.3, 0.01, 0.02, 0.2], states=[0, 0, 15, 0], refuse={1})
    eng, _ = engine(monkeypatch, lib)
    fields = eng.native(G, ALIGNS)
    assert algo_index(fields) == 3
    g, aligns, times, best, secs = eng.tunings[0]
    assert len(times) == 3 and times[1] == float("inf") and best == 2     # candidates 0, 1, 3


def test_no_usable_candidate_is_not_supported(monkeypatch):
    lib = FakeLib([0.1, 0.2], states=[15, 15])
    eng, _ = engine(monkeypatch, lib)
    for _ in range(2):     # remembered: the heuristic is not asked again
        with pytest.raises(lt.NotSupported):
            eng.matmul(G, A, B, D, D, 5)
    assert len(lib.asked) == 1


def test_launch_bound_problems_keep_the_first(monkeypatch):
    lib = FakeLib([lt.TUNE_SKIP_US / 2e3, 0.0001])
    eng, _ = engine(monkeypatch, lib)
    assert algo_index(eng.native(G, ALIGNS)) == 0
    assert len(eng.tunings[0][2]) == 1


def test_no_scratch_keeps_the_first(monkeypatch):
    lib = FakeLib([0.3, 0.1])
    eng, pool = engine(monkeypatch, lib, pool=FakePool(limit=WS + (1 << 20)))
    assert algo_index(eng.native(G, ALIGNS)) == 0
    assert eng.tunings[0][2] is None and not scratch(pool)
    big = Gemm("float32", 1 << 13, 1 << 13, 1 << 13, False, False, 1 << 13, 1 << 13, 1 << 13)   # 768 MiB
    lib2 = FakeLib([0.3, 0.1])
    eng2, pool2 = engine(monkeypatch, lib2)
    assert algo_index(eng2.native(big, ALIGNS)) == 0 and pool2.sizes == [WS]     # over TUNE_SCRATCH


def test_one_candidate_is_not_timed(monkeypatch):
    lib = FakeLib([0.3])
    eng, pool = engine(monkeypatch, lib)
    eng.native(G, ALIGNS)
    assert not eng.tunings and pool.sizes == [WS]


@pytest.mark.parametrize("vendor", ["cuda", "hip"])
def test_result_records_are_read_per_vendor_layout(monkeypatch, vendor):
    lib = FakeLib([0.3, 0.2, 0.1], vendor=vendor)
    drv = FakeDriver()
    drv.platform = "nvidia" if vendor == "cuda" else "amd"
    monkeypatch.delenv(lt.TUNE_ENV, raising=False)
    eng = lt.LtEngine(drv, FakePool(), lib=lib)
    fields = eng.native(G, ALIGNS)
    assert algo_index(fields) == 2 and fields[7] == 2048 and len(fields[10]) == lt.VENDORS[vendor]["algo_bytes"]
