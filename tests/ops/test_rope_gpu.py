"""mx.fast.rope on the GPU (our mlx_amd::RoPE node, the rope family) against plain MLX's own
mx.fast.rope on the CPU.

Tolerance: MLX's CPU exp, sin and cos are its own approximations; the GPU's differ by an ulp
or so, and the angle (position x frequency) carries that into the result: float32 is
compared at 1e-4 absolute for the small positions used here, the 16-bit types at their
default tolerance (cos and sin are rounded to them, as in MLX)."""

import mlx.core as mx
import pytest

import oracle

pytestmark = pytest.mark.gpu

P = ("mlx_amd::RoPE",)
TOL = {"float32": dict(rtol=1e-4, atol=1e-4), "float16": {}, "bfloat16": {}}


def rnd(shape, dtype, seed=0):
    return mx.random.normal(shape, key=mx.random.key(seed)).astype(getattr(mx, dtype))


def rope(x, dims, trad=False, base=10000.0, scale=1.0, offset=0, freqs=None):
    return mx.fast.rope(x, dims, traditional=trad, base=base, scale=scale, offset=offset, freqs=freqs)


@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("trad", [False, True])
@pytest.mark.parametrize("dims", [64, 32, 6])
def test_rope(gpu_runtime, dt, trad, dims):
    x = rnd((2, 3, 7, 64), dt, 1)
    for off in (0, 5):
        oracle.check_gpu(lambda x: rope(x, dims, trad, 10000.0, 1.0, off), x, prims=P,
                         what=f"{dt} trad={trad} dims={dims} off={off}", **TOL[dt])
    oracle.check_gpu(lambda x, o: rope(x, dims, trad, 500.0, 0.5, o), x, mx.array([3, 11], dtype=mx.int32),
                     prims=P, what="per-batch offset", **TOL[dt])
    oracle.check_gpu(lambda x, o: rope(x, dims, trad, 10000.0, 2.0, o), x, mx.array(4), prims=P,
                     what="0-d offset", **TOL[dt])
    freqs = mx.exp(mx.linspace(0.0, 4.0, dims // 2))
    oracle.check_gpu(lambda x, f: rope(x, dims, trad, None, 1.0, 2, f), x, freqs, prims=P, what="freqs",
                     **TOL[dt])


@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_rope_layouts(gpu_runtime, dt):
    # the usual mlx-lm layout: (B, L, H, D) -> (B, H, L, D) transposed view
    x = rnd((2, 9, 4, 32), dt, 2)
    oracle.check_gpu(lambda x: rope(x.transpose(0, 2, 1, 3), 32, False, 10000.0, 1.0, 3), x, prims=P,
                     **TOL[dt])
    oracle.check_gpu(lambda x: rope(x.transpose(0, 2, 1, 3), 16, True, 10000.0, 1.0, 3), x, prims=P, **TOL[dt])
    # 3-d, 5-d, a slice along D (strided items), one token (decode)
    oracle.check_gpu(lambda x: rope(x, 16, False, 10000.0, 1.0, 1), rnd((3, 5, 16), dt, 3), prims=P, **TOL[dt])
    oracle.check_gpu(lambda x: rope(x, 16, False, 10000.0, 1.0, 1), rnd((2, 2, 3, 4, 16), dt, 4), prims=P,
                     **TOL[dt])
    oracle.check_gpu(lambda x: rope(x[..., ::2], 8, False, 10000.0, 1.0, 1), rnd((2, 2, 3, 32), dt, 5),
                     prims=P, **TOL[dt])
    oracle.check_gpu(lambda x: rope(x, 32, False, 10000.0, 1.0, 17), rnd((1, 8, 1, 32), dt, 6), prims=P,
                     **TOL[dt])


def test_rope_nn_and_grad(gpu_runtime):
    import mlx.nn as nn

    x = rnd((1, 4, 6, 32), "float32", 7)
    oracle.check_gpu(lambda x: nn.RoPE(32)(x), x, prims=P, **TOL["float32"])
    oracle.check_gpu(lambda x: nn.RoPE(16, traditional=True, base=100.0)(x, offset=3), x, prims=P,
                     **TOL["float32"])
    oracle.check_gpu(lambda x: mx.grad(lambda x: (rope(x, 32) ** 2).sum())(x), x, **TOL["float32"])
    oracle.check_gpu(lambda x: rope(x, 32), mx.zeros((0, 2, 3, 32)))


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("trad", [False, True])
def test_rope_head_chunks(gpu_runtime, dt, trad):
    # enough (position, pair, head) items that each work item takes 2 heads (rope.head_chunk):
    # an odd head count gives a ragged last chunk; dims < D adds tail items; per-batch
    # offsets. Many heads rather than many positions: positions stay small, as above.
    from mlx_amd.runtime.ops import rope as rp

    B, L, H, D, dims = 2, 8, 205, 128, 96
    assert rp.head_chunk(B, H, L, dims // 2 + D - dims) == 2
    x = rnd((B, L, H, D), dt, 8)
    oracle.check_gpu(lambda x, o: rope(x.transpose(0, 2, 1, 3), dims, trad, 10000.0, 1.0, o), x,
                     mx.array([3, 9], dtype=mx.int32), prims=P, what=f"{dt} trad={trad}", **TOL[dt])


@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
@pytest.mark.parametrize("trad", [False, True])
def test_rope_twins(gpu_runtime, dt, trad):
    # an attention's q and k: two RoPE nodes with equal parameters on views of one projection,
    # each with its own offset array (mlx-lm passes the cache offset to both), run as one
    # launch of the twin kernel; head counts and lengths differ, so do the grids
    def qk(x, off):
        B, L = x.shape[:2]
        q = x[..., :8 * 32].reshape(B, L, 8, 32).transpose(0, 2, 1, 3)
        k = x[..., 8 * 32:].reshape(B, L, 2, 32).transpose(0, 2, 1, 3)
        return rope(q, 32, trad, 10000.0, 1.0, off), rope(k, 32, trad, 10000.0, 1.0, off)

    for B, L, off in ((1, 1, 37), (2, 5, 0)):
        x = rnd((B, L, 10 * 32), dt, 9)
        oracle.check_gpu(qk, x, mx.array(off, dtype=mx.int32), prims=P, what=f"{dt} B={B} L={L}", **TOL[dt])
    # different dims, or a second rotation whose input is made by the first: each alone
    x = rnd((1, 3, 2, 32), dt, 10)
    oracle.check_gpu(lambda x: (rope(x, 32, trad, offset=2), rope(x, 16, trad, offset=2)), x, prims=P, **TOL[dt])
    oracle.check_gpu(lambda x: rope(rope(x, 32, trad, offset=2), 32, trad, offset=2), x, prims=P, **TOL[dt])


@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("trad,dims", [(False, 32), (True, 32), (False, 16)])
def test_rope_and_cache_writes_as_one_launch(gpu_runtime, dt, trad, dims):
    """q's and k's RoPE and then the k and v cache writes, as mlx-lm's attention and KVCache
    make them (the twin chain: one rope_kv launch): a 3-token prompt, then decode steps that
    replay with the cache slot moving each step, equal to plain MLX step by step. The first
    step copies the caches (the test holds the zeros), later ones donate them."""
    Hq, Hkv, D, MAXL = 4, 2, 32, 16

    def step(x, kc, vc, off):
        B, L = x.shape[:2]
        q = x[..., :Hq * D].reshape(B, L, Hq, D).transpose(0, 2, 1, 3)
        k = x[..., Hq * D:(Hq + Hkv) * D].reshape(B, L, Hkv, D).transpose(0, 2, 1, 3)
        v = x[..., (Hq + Hkv) * D:].reshape(B, L, Hkv, D).transpose(0, 2, 1, 3)
        q = rope(q, dims, trad, offset=off)
        k = rope(k, dims, trad, offset=off)
        kc[..., off:off + L, :] = k
        vc[..., off:off + L, :] = v
        return q, kc, vc

    xs = [rnd((1, 3 if t == 0 else 1, (Hq + 2 * Hkv) * D), dt, 20 + t) for t in range(8)]
    offs = [0] + [3 + t for t in range(7)]

    def run():
        kc = mx.zeros((1, Hkv, MAXL, D), getattr(mx, dt))
        vc = mx.zeros((1, Hkv, MAXL, D), getattr(mx, dt))
        zeros = (kc, vc)
        outs = []
        for x, off in zip(xs, offs):
            q, kc, vc = step(x, kc, vc, off)
            mx.eval(q, kc, vc)
            outs.append((q, kc, vc))
        assert zeros[0].shape == (1, Hkv, MAXL, D)     # still held: the first step copied them
        return outs

    with oracle.plain_mlx():
        ref = run()
    gpu_runtime.evaluator.plans.clear()
    got = run()
    for t, (g, r) in enumerate(zip(got, ref)):
        for name, a, b in zip("qkv", g, r):
            oracle.assert_close(a, b, f"{dt} step {t} {name}", **TOL[dt])
    kernels = {st.kernel for entry in gpu_runtime.evaluator.plans.values() if entry[0] is not None
               for st in entry[0].steps if hasattr(st, "kernel")}
    assert f"rope_kv_{dt}_{dt}" in kernels, sorted(kernels)
