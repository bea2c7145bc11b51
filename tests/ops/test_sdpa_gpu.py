"""SDPA on the GPU (mlx_amd::SDPA, routed from mx.fast.scaled_dot_product_attention by
enable()) against plain MLX's CPU decomposition, and against a float32 reference from the
same inputs (ours must be at least about as accurate as MLX's own 16-bit result).

Decode (Lq <= 8: our split-K kernel and its combine) and prefill, three ways: our flash
kernel on the matrix unit (mma.sync here), its portable twin (D == Dv), and vendor GEMMs
around our row softmax and scatter; GQA 4:1, MQA, MHA; D in {64, 80, 96, 128, 256} and one without a
decode kernel; Dv != D; causal (also Lq > Lk, rows that see nothing), boolean (with a row
that sees nothing), additive (with -inf), sinks, none; Lk not a multiple of any tile; a
KV-cache slice of a larger buffer read through its strides; q transposed as mlx-lm makes
it; float16, bfloat16, float32; the prefill softmax at both wave widths."""

import math

import mlx.core as mx
import numpy as np
import pytest

import oracle

pytestmark = pytest.mark.gpu

PRIM = ("mlx_amd::SDPA",)
DT = {"float16": mx.float16, "bfloat16": mx.bfloat16, "float32": mx.float32}
# against MLX's CPU result (which rounds scores and probabilities to the input dtype)
TOL = {"float32": (2e-4, 2e-5), "float16": (1e-2, 4e-3), "bfloat16": (6e-2, 3e-2)}
# against the float32 reference: ours within 2x MLX's own error, or this
SLACK_ATOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.5e-2}


def _key(i):
    return mx.random.key(i)


def make(B, Hq, Hkv, Lq, Lk, D, Dv=None, dtype="bfloat16", mask=None, sinks=False, cache=None,
         transposed_q=False, seed=0):
    """q, k, v, and the mask/sinks arguments; ``cache``: K/V are [:, :, :Lk] of a
    (B, Hkv, cache, D) buffer."""
    Dv = Dv or D
    dt = DT[dtype]
    if transposed_q:
        q = mx.random.normal((B, Lq, Hq, D), key=_key(seed)).astype(dt).transpose(0, 2, 1, 3)
    else:
        q = mx.random.normal((B, Hq, Lq, D), key=_key(seed)).astype(dt)
    n = cache or Lk
    k = mx.random.normal((B, Hkv, n, D), key=_key(seed + 1)).astype(dt)
    v = mx.random.normal((B, Hkv, n, Dv), key=_key(seed + 2)).astype(dt)
    if cache:
        k, v = k[:, :, :Lk], v[:, :, :Lk]
    m = None
    if mask == "causal":
        m = "causal"
    elif mask == "bool":
        m = mx.random.uniform(shape=(B, 1, Lq, Lk), key=_key(seed + 3)) > 0.3
        m[..., 0, :] = False                                  # a row that sees nothing
    elif mask == "bool_full":
        m = mx.random.uniform(shape=(B, Hq, Lq, Lk), key=_key(seed + 3)) > 0.5
    elif mask == "additive":
        m = (mx.random.normal((Lq, Lk), key=_key(seed + 3)) * 2).astype(dt)
    elif mask == "window":                                    # -inf outside a sliding window
        qi = mx.arange(Lq)[:, None] + (Lk - Lq)
        kj = mx.arange(Lk)[None, :]
        m = mx.where((kj <= qi) & (kj > qi - 64), 0.0, -math.inf).astype(dt)
    s = (mx.random.normal((Hq,), key=_key(seed + 4)) * 2).astype(dt) if sinks else None
    return q, k, v, m, s


def attention(scale, mask_kind):
    def fn(q, k, v, *rest):
        rest = list(rest)
        mask = "causal" if mask_kind == "causal" else (rest.pop(0) if mask_kind else None)
        sinks = rest.pop(0) if rest else None
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask, sinks=sinks)
    return fn


def run_case(dtype, q, k, v, m, s):
    D = q.shape[-1]
    scale = 1.0 / math.sqrt(D)
    mask_kind = "causal" if isinstance(m, str) else ("array" if m is not None else None)
    args = [q, k, v] + ([m] if mask_kind == "array" else []) + ([s] if s is not None else [])
    fn = attention(scale, mask_kind)
    rt, at = TOL[dtype]
    got = oracle.check_gpu(fn, *args, prims=PRIM, rtol=rt, atol=at, what=f"sdpa {dtype}")
    # float32 reference from the same (rounded) inputs
    with oracle.plain_mlx():
        ref = fn(*args)
        f32 = [a.astype(mx.float32) if a.dtype != mx.bool_ else a for a in args]
        truth = fn(*f32)
        g, r, t = (oracle.to_numpy(x).astype(np.float64) for x in (got, ref, truth))
    assert np.array_equal(np.isnan(g), np.isnan(t)), "NaN places differ from the float32 reference"
    ok = np.isfinite(t)
    ours, theirs = np.max(np.abs(g - t)[ok], initial=0.0), np.max(np.abs(r - t)[ok], initial=0.0)
    assert ours <= max(2 * theirs, SLACK_ATOL[dtype]), f"error {ours:.3g} vs MLX's {theirs:.3g} against float32"
    return got


# (B, Hq, Hkv, Lq, Lk, D, Dv, mask, sinks, cache, transposed_q)
DECODE = [
    (1, 32, 8, 1, 4096, 128, None, None, False, None, True),        # GQA 4:1, split-K
    (1, 32, 8, 1, 1000, 128, None, "causal", False, 4096, True),    # KV-cache slice
    (1, 32, 8, 1, 1000, 128, None, "bool", True, 4096, False),
    (1, 8, 1, 1, 777, 64, None, "causal", False, None, False),      # MQA
    (2, 8, 2, 3, 333, 80, None, "bool_full", False, None, False),
    (1, 4, 4, 1, 77, 256, None, "additive", False, None, False),    # MHA, one split
    (1, 16, 4, 8, 513, 128, None, "causal", True, None, True),      # Lq 8, sinks
    (1, 8, 8, 1, 200, 96, None, None, True, None, False),
    (1, 8, 2, 2, 1000, 64, None, "window", False, None, False),     # -inf entries
    (1, 4, 1, 8, 5, 64, None, "causal", False, None, False),        # Lq > Lk: rows see nothing
    (2, 4, 2, 1, 3000, 256, None, "bool", False, None, False),
]


def _forced(env, request, monkeypatch, rt):
    """``env`` set to the fixture's parameter; plans and recordings are cached, so both are
    dropped around the test."""
    monkeypatch.setenv(env, request.param)
    ev = rt.evaluator
    ev.plans.clear()
    ev.drop_programs()
    yield request.param
    ev.plans.clear()
    ev.drop_programs()


@pytest.fixture(params=["mma", "fma"])
def decode_path(request, monkeypatch, gpu_runtime):
    """The matrix-unit decode kernel (where it serves: float16/bfloat16, head dims 64-128) or
    the FMA kernel."""
    yield from _forced("MLX_AMD_SDPA_DECODE", request, monkeypatch, gpu_runtime)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("case", DECODE, ids=lambda c: "x".join(str(x) for x in c[:6]) + f"-{c[7]}-s{int(c[8])}")
def test_decode(gpu_runtime, decode_path, dtype, case):
    B, Hq, Hkv, Lq, Lk, D, Dv, mask, sinks, cache, tq = case
    q, k, v, m, s = make(B, Hq, Hkv, Lq, Lk, D, Dv, dtype, mask, sinks, cache, tq)
    run_case(dtype, q, k, v, m, s)


PREFILL = [
    (1, 8, 2, 100, 100, 64, None, "causal", False, None, True),
    (1, 8, 8, 64, 300, 128, None, None, False, None, False),
    (2, 4, 1, 33, 90, 80, None, "bool", False, None, False),        # MQA
    (1, 4, 2, 50, 77, 256, None, "additive", True, None, False),
    (1, 4, 2, 20, 40, 64, 32, None, False, None, False),            # Dv != D
    (1, 32, 8, 40, 1000, 128, None, "causal", False, 4096, True),   # KV-cache slice
    (1, 2, 1, 600, 600, 64, None, "causal", True, None, False),     # several causal chunks
    (1, 4, 2, 300, 300, 96, None, "window", False, None, False),
    (1, 4, 4, 1, 50, 32, None, None, False, None, False),           # no decode kernel for D 32
    (1, 4, 1, 70, 20, 64, None, "causal", False, None, False),      # Lq > Lk: rows that see nothing
    (2, 8, 2, 129, 129, 128, None, "causal", True, None, True),     # tiles past Lq, q transposed
    (1, 2, 2, 17, 33, 256, None, "bool", False, None, False),
]


@pytest.fixture(params=["mma", "flash", "gemm"])
def prefill_path(request, monkeypatch, gpu_runtime):
    """The matrix-unit flash kernel, the portable flash kernel (each where it serves) or the
    GEMM path."""
    yield from _forced("MLX_AMD_SDPA_PREFILL", request, monkeypatch, gpu_runtime)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("case", PREFILL, ids=lambda c: "x".join(str(x) for x in c[:6]) + f"-{c[7]}-s{int(c[8])}")
def test_prefill(gpu_runtime, prefill_path, dtype, case):
    B, Hq, Hkv, Lq, Lk, D, Dv, mask, sinks, cache, tq = case
    q, k, v, m, s = make(B, Hq, Hkv, Lq, Lk, D, Dv, dtype, mask, sinks, cache, tq, seed=7)
    run_case(dtype, q, k, v, m, s)


@pytest.mark.parametrize("case", [PREFILL[0], PREFILL[3]], ids=["causal", "additive-sinks"])
def test_prefill_waves(gpu_runtime, prefill_path, wave, case):
    B, Hq, Hkv, Lq, Lk, D, Dv, mask, sinks, cache, tq = case
    q, k, v, m, s = make(B, Hq, Hkv, Lq, Lk, D, Dv, "bfloat16", mask, sinks, cache, tq, seed=11)
    run_case("bfloat16", q, k, v, m, s)


def test_decode_step_reuses_plan(gpu_runtime):
    """A token loop: the same shapes every step, different data; each step matches MLX."""
    for step in range(3):
        q, k, v, m, s = make(1, 32, 8, 1, 2048, 128, None, "bfloat16", None, False, 4096, True, seed=20 + step)
        run_case("bfloat16", q, k, v, m, s)


# (B, Hq, Hkv, Lq, Lk, D, Dv, mask, sinks, cache, transposed_q, dtype)
MANY_SPLITS = [
    (1, 8, 2, 1, 2048, 128, None, "causal", True, None, True, "bfloat16"),   # 2 lanes a quad, 4 rounds
    (1, 6, 2, 1, 2000, 64, None, None, False, None, False, "float16"),       # 3 rows a chunk, 4 lanes
    (1, 4, 4, 1, 1500, 96, None, "window", False, 3000, False, "float32"),   # one row, -inf splits
    (1, 8, 8, 1, 200, 96, None, None, True, None, True, "float32"),          # few keys: the sink weighs
]


@pytest.mark.parametrize("case", MANY_SPLITS, ids=lambda c: f"D{c[5]}-L{c[4]}-{c[11]}")
def test_decode_many_splits(gpu_runtime, monkeypatch, case):
    """The split combine with far more splits than a round of its loads (the split target
    raised, so on any device, the emulator's few compute units included): several rounds,
    2-8 lanes an output quad, the sinks folded into the rows' (max, sum), splits whose keys
    are all masked."""
    from mlx_amd.runtime.ops import sdpa as sdpa_ops

    ev = gpu_runtime.evaluator
    monkeypatch.setattr(sdpa_ops, "DECODE_BLOCKS_PER_CU", 64)
    monkeypatch.setenv("MLX_AMD_SDPA_DECODE", "fma")
    ev.plans.clear()
    ev.drop_programs()
    try:
        B, Hq, Hkv, Lq, Lk, D, Dv, mask, sinks, cache, tq, dtype = case
        q, k, v, m, s = make(B, Hq, Hkv, Lq, Lk, D, Dv, dtype, mask, sinks, cache, tq, seed=Lk)
        run_case(dtype, q, k, v, m, s)
    finally:
        ev.plans.clear()
        ev.drop_programs()


def test_split_counters_return_to_zero(gpu_runtime):
    """A split-K decode counts its blocks in the runtime's zeroed scratch and its last block
    combines and sets the count back: after decodes of every split count (eager, then a
    replayed token loop) the scratch is all zeros again, and each result matched MLX."""
    import ctypes

    from mlx_amd.runtime.plan import ZERO_BYTES

    rt = gpu_runtime
    ev = rt.evaluator
    for lk in (40, 300, 4096, 20000):
        q, k, v, m, s = make(1, 32, 8, 1, lk, 128, None, "bfloat16", None, lk % 2 == 0, None, True, seed=lk)
        run_case("bfloat16", q, k, v, m, s)
    fn = attention(1.0 / math.sqrt(128), None)
    cache = mx.random.normal((1, 8, 512, 128), key=_key(40)).astype(mx.bfloat16)
    for step in range(6):       # the same graph each step: recorded, then replayed natively
        q = mx.random.normal((1, 32, 1, 128), key=_key(41 + step)).astype(mx.bfloat16)
        kv = cache[:, :, : 300 + step]
        mx.eval(fn(q, kv, kv))
    ev.synchronize()
    host = (ctypes.c_ubyte * ZERO_BYTES)()
    rt.driver.memcpy_dtoh(ctypes.addressof(host), ev.zero_base, ZERO_BYTES)
    assert not any(bytes(host)), "a split-K decode left its arrival counter set"


def test_output_feeds_on(gpu_runtime):
    """The output is a normal array: later ops (a matmul) consume it on the GPU."""
    q, k, v, _, _ = make(1, 8, 2, 1, 500, 64, None, "float32", None, False, None, True, seed=30)
    w = mx.random.normal((64, 16), key=_key(31))
    fn = lambda q, k, v, w: mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125) @ w  # noqa: E731
    oracle.check_gpu(fn, q, k, v, w, prims=PRIM, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_prefill_rows_not_in_vectors(gpu_runtime, prefill_path, dtype):
    """K/V rows of an odd pitch (a slice of a D+1 wide buffer): element loads, same result."""
    q, _, _, _, _ = make(1, 4, 2, 45, 45, 64, None, dtype, None, False, None, False, seed=40)
    k = mx.random.normal((1, 2, 45, 65), key=_key(41)).astype(DT[dtype])[..., :64]
    v = mx.random.normal((1, 2, 45, 65), key=_key(42)).astype(DT[dtype])[..., :64]
    run_case(dtype, q, k, v, "causal", None)


def _prefill_kernels(rt, n):
    from mlx_amd.runtime.ops import sdpa
    return [getattr(st, "kernel", "") for st in sdpa.plan_node(n, rt.props).steps]


def _node(dt, Lq=300, D=64, Lk=None):
    from mlx_amd.runtime.plan import Layout, Node
    R = Layout.row_major
    Lk = Lk or Lq
    return Node("mlx_amd::SDPA", (0.125, "causal", False),
                (R((1, 8, Lq, D), dt), R((1, 2, Lk, D), dt), R((1, 2, Lk, D), dt)), (R((1, 8, Lq, D), dt),))


@pytest.fixture
def fresh_verdicts(gpu_runtime):
    from mlx_amd.runtime import matrix_units
    ev = gpu_runtime.evaluator
    matrix_units.forget()
    ev.plans.clear()
    ev.drop_programs()
    yield
    matrix_units.forget()
    ev.plans.clear()
    ev.drop_programs()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_matrix_unit_selftest(gpu_runtime, fresh_verdicts, monkeypatch, dtype):
    """The first-use self-test runs every matrix-unit flash kernel against its twin on this
    device and passes; the planner then takes the matrix-unit kernel."""
    from mlx_amd.runtime import matrix_units
    from mlx_amd.runtime.ops import sdpa
    monkeypatch.delenv("MLX_AMD_SDPA_PREFILL", raising=False)
    monkeypatch.delenv("MLX_AMD_MATRIX_UNITS", raising=False)
    monkeypatch.delenv("MLX_AMD_SDPA_DECODE", raising=False)
    if matrix_units.backend(gpu_runtime.props, dtype) is None:
        pytest.skip(f"no matrix-tile backend on {gpu_runtime.props.arch}")
    ok, why = sdpa.mma_selftest(gpu_runtime, dtype)
    assert ok, why
    assert _prefill_kernels(gpu_runtime, _node(dtype)) == [f"sdpa_flash_mma_d64_{dtype}"]
    assert _prefill_kernels(gpu_runtime, _node(dtype, Lq=1, Lk=16384)) == [f"sdpa_decode_mma_d64_{dtype}"]
    assert matrix_units.verdicts() == {("sdpa", gpu_runtime.props.arch, dtype): True}


def test_matrix_unit_selftest_mismatch_uses_the_twin(gpu_runtime, fresh_verdicts, monkeypatch):
    """A matrix-unit result that differs from the twin's (as a wrong lane layout on a new
    AMD arch would): one warning naming the test, the twin serves, results stay right."""
    from mlx_amd.runtime import matrix_units
    from mlx_amd.runtime.ops import sdpa
    monkeypatch.delenv("MLX_AMD_SDPA_PREFILL", raising=False)
    monkeypatch.delenv("MLX_AMD_MATRIX_UNITS", raising=False)
    monkeypatch.delenv("MLX_AMD_SDPA_DECODE", raising=False)
    if matrix_units.backend(gpu_runtime.props, "bfloat16") is None:
        pytest.skip(f"no matrix-tile backend on {gpu_runtime.props.arch}")
    monkeypatch.setattr(sdpa, "SELFTEST_PERTURB", lambda g: g * 1.5)
    q, k, v, m, s = make(1, 8, 2, 300, 300, 64, None, "bfloat16", "causal", False, None, False, seed=50)
    with pytest.warns(RuntimeWarning, match="differ from their portable twins"):
        run_case("bfloat16", q, k, v, m, s)
    assert _prefill_kernels(gpu_runtime, _node("bfloat16")) == ["sdpa_flash_d64_bfloat16"]
    assert _prefill_kernels(gpu_runtime, _node("bfloat16", Lq=1, Lk=16384)) == ["sdpa_decode_d64_r4_bfloat16"]
    assert matrix_units.verdicts()[("sdpa", gpu_runtime.props.arch, "bfloat16")] is False
