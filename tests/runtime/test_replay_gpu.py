"""Replay of recorded programs (src/bridge/replay.h) on the GPU: a graph structure seen
again runs from native code, and must give what plain MLX gives, every time, whatever
changed between evaluations (data, parameters, shapes, donation, CPU-fallback nodes).
Every test runs twice: replays launched as one CUDA graph each (MLX_AMD_GRAPHS=1) and
launched kernel by kernel (the default)."""

import mlx.core as mx
import numpy as np
import pytest

from mlx_amd.runtime import bridge
from oracle import assert_close, plain_mlx

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True, params=["graphs", "eager"])
def launch_mode(request, gpu_runtime, monkeypatch):
    ev = gpu_runtime.evaluator
    if request.param == "graphs" and ev.driver.graph_api() is None:
        pytest.fail("this driver lacks the graph calls")
    monkeypatch.setattr(ev, "graphs", request.param == "graphs")
    return request.param


def both(fn, *args):
    with plain_mlx():
        ref = fn(*args)
        mx.eval(ref)
    got = fn(*args)
    mx.eval(got)
    return got, ref


def _replays(rt):
    return rt.evaluator.replays


def test_repeated_chain_replays_and_matches(gpu_runtime):
    def f(x, c):
        for _ in range(20):
            x = x * c + 0.5
            x = mx.maximum(x, -x * 0.25)
        return x.sum(axis=-1), x.T[1:3]

    before = _replays(gpu_runtime)
    for k in range(5):
        x = mx.array(np.random.default_rng(k).standard_normal((7, 33)).astype(np.float32))
        got, ref = both(f, x, mx.array(1.0 + 0.01 * k))
        for g, r in zip(got, ref):
            assert_close(g, r, f"evaluation {k}")
    assert _replays(gpu_runtime) - before >= 3


def test_changing_parameters_and_shapes_fall_back_per_node(gpu_runtime):
    # the same structure with other slice bounds and other sizes: the nodes that differ
    # run through Python, the rest through the recording
    def f(x, n):
        y = mx.exp(x[:, :n]) * 2.0
        return mx.softmax(y, axis=-1).sum(axis=0)

    before = _replays(gpu_runtime)
    for n in (5, 5, 5, 9, 3, 12, 12):
        x = mx.array(np.random.default_rng(n).standard_normal((4, 16)).astype(np.float32))
        got, ref = both(f, x, n)
        assert_close(got, ref, f"n={n}")
    assert _replays(gpu_runtime) > before


def test_kv_cache_slice_updates_donate_and_match(gpu_runtime):
    # the decode pattern: a preallocated cache written one position per step, read up
    # to that position (SliceUpdate's offsets change every step)
    def run():
        cache = mx.zeros((1, 2, 16, 8), mx.float16)
        mx.eval(cache)
        outs = []
        for t in range(12):
            new = mx.full((1, 2, 1, 8), float(t + 1), mx.float16)
            cache[..., t:t + 1, :] = new
            y = (cache[..., : t + 1, :].astype(mx.float32) * 0.5).sum(axis=(2, 3))
            mx.eval(y, cache)
            outs.append(np.array(y))
        return np.stack(outs), np.array(cache.astype(mx.float32))

    with plain_mlx():
        ref = run()
    got = run()
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1], ref[1])


def test_cpu_fallback_node_inside_a_replayed_graph(gpu_runtime):
    # Inverse has no GPU path: it runs on MLX's CPU between GPU nodes, every time
    def f(a):
        b = a @ a.T + 4.0 * mx.eye(a.shape[0])
        inv = mx.linalg.inv(b, stream=mx.cpu)
        return (inv * 3.0 + 1.0).sum(axis=1)

    for k in range(4):
        a = mx.array(np.random.default_rng(10 + k).standard_normal((6, 6)).astype(np.float32))
        got, ref = both(f, a)
        assert_close(got, ref, f"evaluation {k}", rtol=1e-4, atol=1e-4)


def test_async_eval_steps_match_and_free_their_buffers(gpu_runtime):
    def step(x):
        return mx.tanh(x @ w) * 0.9 + x

    w = mx.array(np.random.default_rng(3).standard_normal((32, 32)).astype(np.float32) * 0.1)
    with plain_mlx():
        x = mx.ones((2, 32))
        refs = []
        for _ in range(8):
            x = step(x)
            mx.eval(x)
            refs.append(np.array(x))
    mx.eval(w)
    live0 = bridge.live()[0]
    x = mx.ones((2, 32))
    gots = []
    for _ in range(8):
        x = step(x)
        mx.async_eval(x)
        gots.append(x)
    for g, r in zip(gots, refs):
        np.testing.assert_allclose(np.array(g), r, rtol=1e-5, atol=1e-5)
    del gots, x, g
    assert bridge.live()[0] <= live0 + 2, "replayed evaluations leaked buffers"


def test_no_buffer_leak_over_many_replays(gpu_runtime):
    x = mx.array(np.arange(64, dtype=np.float32))
    mx.eval(x)
    for _ in range(3):
        mx.eval(((x * 2.0 + 1.0) ** 2).sum())
    live0, pool0 = bridge.live()[0], gpu_runtime.residency.device_pool.get_active_memory()
    for _ in range(50):
        y = ((x * 2.0 + 1.0) ** 2).sum()
        mx.eval(y)
        del y
    assert bridge.live()[0] <= live0
    assert gpu_runtime.residency.device_pool.get_active_memory() <= pool0


def test_replay_off_switch_gives_the_same(gpu_runtime, monkeypatch):
    ev = gpu_runtime.evaluator

    def f(x):
        return mx.cumsum(mx.sort(x * 3.0, axis=-1), axis=-1)

    x = mx.array(np.random.default_rng(5).standard_normal((3, 40)).astype(np.float32))
    on = [np.array(f(x)) for _ in range(4)]
    monkeypatch.setattr(ev, "replay", False)
    off = np.array(f(x))
    for o in on:
        np.testing.assert_array_equal(o, off)


def test_same_structure_other_output_dtype_is_not_replayed_as_recorded(gpu_runtime):
    # ConvertFP8's is_equivalent ignores the output dtype: the replay must compare it
    codes = mx.array(np.arange(256, dtype=np.uint8))
    mx.eval(codes)
    for dt in (mx.float16, mx.float16, mx.float16, mx.bfloat16, mx.float32, mx.bfloat16):
        got, ref = both(lambda c: mx.from_fp8(c, dtype=dt), codes)
        assert got.dtype == ref.dtype == dt
        np.testing.assert_array_equal(np.array(got.astype(mx.float32)), np.array(ref.astype(mx.float32)))


@pytest.mark.parametrize("mode", [None, "causal"])
def test_sdpa_decode_rebinds_to_growing_kv_lengths(gpu_runtime, mode):
    # one decode step per KV length: the recorded SDPA plan is rebound natively to each new
    # length (new split counts included), and recorded again where its split structure
    # changes; every step must equal plain MLX
    # float32: MLX's CPU decomposition is then accurate enough that a wrong key count or
    # split would show far above the tolerance
    rng = np.random.default_rng(7)
    K = mx.array(rng.standard_normal((1, 2, 1536, 64)).astype(np.float32))
    V = mx.array(rng.standard_normal((1, 2, 1536, 64)).astype(np.float32))
    q = mx.array(rng.standard_normal((1, 8, 1, 64)).astype(np.float32))
    mx.eval(K, V, q)

    def step(L):
        o = mx.fast.scaled_dot_product_attention(q, K[:, :, :L], V[:, :, :L], scale=0.125, mask=mode)
        return (o * 2.0).sum(axis=-1)

    ev = gpu_runtime.evaluator
    r0, p0 = ev.replays, ev.replay_python
    lengths = list(range(100, 1536, 11))
    for L in lengths:
        got, ref = both(step, L)
        assert_close(got, ref, f"L={L}", rtol=1e-4, atol=1e-4)
    assert ev.replays - r0 >= len(lengths) - 3
    assert ev.replay_python - p0 <= len(lengths) // 4, "SDPA decode was not rebound"


def test_sdpa_decode_replay_crosses_to_the_matrix_unit_kernel(gpu_runtime, monkeypatch):
    # a bfloat16 cache growing past DECODE_MMA_MIN_KEYS (lowered here so the test stays
    # small): the replayed FMA plan stops rebinding at the threshold, the node is planned
    # again with the matrix-unit kernel, whose plan then rebinds; every step equals plain MLX
    from mlx_amd.runtime.ops import sdpa
    monkeypatch.setattr(sdpa, "DECODE_MMA_MIN_KEYS", 700)
    monkeypatch.delenv("MLX_AMD_SDPA_DECODE", raising=False)
    ev = gpu_runtime.evaluator
    ev.plans.clear()
    ev.drop_programs()
    rng = np.random.default_rng(8)
    K = mx.array(rng.standard_normal((1, 2, 900, 128)).astype(np.float32)).astype(mx.bfloat16)
    V = mx.array(rng.standard_normal((1, 2, 900, 128)).astype(np.float32)).astype(mx.bfloat16)
    q = mx.array(rng.standard_normal((1, 8, 1, 128)).astype(np.float32)).astype(mx.bfloat16)
    mx.eval(K, V, q)

    def step(L):
        return mx.fast.scaled_dot_product_attention(q, K[:, :, :L], V[:, :, :L], scale=0.088, mask="causal")

    for L in range(640, 900, 13):
        got, ref = both(step, L)
        assert_close(got.astype(mx.float32), ref.astype(mx.float32), f"L={L}", rtol=2e-2, atol=2e-2)
    kernels = {getattr(st, "kernel", "") for e in ev.plans.values() if e[0] is not None for st in e[0].steps}
    assert "sdpa_decode_d128_r4_bfloat16" in kernels and "sdpa_decode_mma_d128_bfloat16" in kernels
    ev.plans.clear()
    ev.drop_programs()


def test_graph_launches_replace_kernel_launches(gpu_runtime, launch_mode):
    x = mx.array(np.random.default_rng(3).standard_normal((16, 100)).astype(np.float32))
    f = lambda v: mx.softmax(mx.exp(v * 0.1) + mx.sin(v), axis=-1).sum(axis=0)  # noqa: E731
    for _ in range(3):
        mx.eval(f(x))
    s0 = bridge.graph_stats()
    for k in range(5):
        got, ref = both(f, x + float(k))
        assert_close(got, ref, f"step {k}")
    s1 = bridge.graph_stats()
    if launch_mode == "graphs":
        assert s1["launches"] - s0["launches"] >= 4 and s1["failures"] == s0["failures"]
    else:
        assert s1["launches"] == s0["launches"]



def test_leaf_cache_never_serves_a_dead_buffer(gpu_runtime):
    # each step's weights are a fresh MLX-owned host array: numpy's allocator and MLX's
    # reuse the addresses the previous step's freed, so a cached device address that
    # outlived its buffer would feed last step's weights to this step's replay
    ev = gpu_runtime.evaluator
    rng = np.random.default_rng(5)
    x = mx.array(rng.standard_normal((4, 64)).astype(np.float32))
    r0 = ev.replays
    for k in range(12):
        w = mx.array(rng.standard_normal((64, 64)).astype(np.float32))
        want = np.array(x) @ np.array(w) + k
        y = x @ w + k
        mx.eval(y)   # (on Python 3.11, np.array of an unevaluated array is MLX's own CPU evaluation)
        got = np.array(y)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        del w
    assert ev.replays - r0 >= 8
    # a weight that stays alive is resolved from the cache
    w = mx.array(rng.standard_normal((64, 64)).astype(np.float32))
    for k in range(4):
        np.testing.assert_allclose(np.array(x @ w + k), np.array(x) @ np.array(w) + k, rtol=1e-4, atol=1e-4)
    assert max(p.program.cached_leaves for p in ev.programs.values()) >= 1


def test_small_constants_by_value_across_replays_and_a_cache_restart(gpu_runtime, monkeypatch):
    # every step makes fresh scalar arrays; replays take their device copies from the
    # residency's constant cache by value (bridge ConstCache): new values, values shared by
    # other dtypes with the same bytes, and a restart of the cache mid-run must all match
    from mlx_amd.runtime import residency as residency_mod

    res = gpu_runtime.residency
    monkeypatch.setattr(residency_mod, "CONST_SLAB", 1024)     # restarts every few steps
    monkeypatch.setattr(residency_mod, "CONST_BYTES", 2048)

    def f(x, k):
        a = x * mx.array(np.float32(1.0 + k)) + mx.array(np.float32(0.25 * k))
        b = mx.array(np.int32(np.float32(1.0).view(np.int32))) + (x > 0).astype(mx.int32)
        return a.sum(axis=-1), b       # float32 1.0 and an int32 with the same bytes

    before = _replays(gpu_runtime)
    x = mx.array(np.random.default_rng(3).standard_normal((5, 17)).astype(np.float32))
    for k in range(40):
        # the large step every ten evaluations fills constant slabs past the lowered limit
        big = [mx.array(np.float32(1000 + 97 * k + j)) for j in range(600)] if k % 10 == 9 else []
        got, ref = both(f, x, k)
        for g, r in zip(got, ref):
            assert_close(g, r, f"evaluation {k}")
        if big:
            s = big[0]
            for v in big[1:]:
                s = s + v
            got_s, ref_s = both(lambda: s * 1.0)
            assert_close(got_s, ref_s, f"the sum of 600 constants, evaluation {k}")
    assert _replays(gpu_runtime) - before >= 30
    assert len(res._const_slabs) <= 3    # trimmed before each replay, one slab per upload


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.vendor
def test_replayed_gemms_run_natively_and_match(gpu_runtime, monkeypatch, dtype):
    """Replayed GEMMs (a plain product, AddMM with alpha/beta, a batched product over a
    transposed operand, a product whose input is a slice at an odd offset) call the vendor
    library from native code: no Python GEMM call after the recording, and every step
    matches plain MLX. The odd offset breaks the recorded alignment on some steps: those
    fall back to the Python call, which must agree too."""
    from mlx_amd.runtime.ops import matmul

    gpu_runtime.evaluator.drop_programs()   # the other dtype's recording would be re-planned here
    python = []
    orig = matmul.GemmCall.__call__
    monkeypatch.setattr(matmul.GemmCall, "__call__", lambda self, *a: (python.append(1), orig(self, *a))[1])
    dt = getattr(mx, dtype)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == "float32" else dict(rtol=3e-2, atol=3e-2)

    def f(x, w, c, bx, bw):
        y = mx.addmm(c, x, w, alpha=0.5, beta=2.0)
        z = (bx @ bw.transpose(0, 2, 1)).sum(axis=0)
        return y @ w.T, z

    w = mx.random.normal((96, 160), key=mx.random.key(2)).astype(dt)
    bw = mx.random.normal((3, 40, 96), key=mx.random.key(3)).astype(dt)
    seen = 0
    for step in range(6):
        x = mx.random.normal((33, 96), key=mx.random.key(10 + step)).astype(dt)
        c = mx.random.normal((33, 160), key=mx.random.key(20 + step)).astype(dt)
        bx = mx.random.normal((3, 50, 96), key=mx.random.key(30 + step)).astype(dt)
        r0 = _replays(gpu_runtime)
        n0 = len(python)
        got, ref = both(f, x, w, c, bx, bw)
        for g, r in zip(got, ref):
            assert_close(g, r, **tol)
        if _replays(gpu_runtime) > r0:
            seen += 1
            assert len(python) == n0, f"step {step}: a replayed GEMM called back into Python"
    assert seen >= 3
    # an input at an odd element offset: the recorded alignment does not hold, Python serves
    big = mx.random.normal((34 * 96 + 1,), key=mx.random.key(40)).astype(dt)
    for step in range(4):
        x = big[1 + step % 2: 1 + step % 2 + 33 * 96].reshape(33, 96)
        got, ref = both(lambda x: x @ w, x)
        assert_close(got, ref, **tol)
