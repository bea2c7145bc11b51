"""Our fused-op primitives (src/bridge/fast.cpp) and the mx.fast routing (mlx_amd/fastops.py),
on the CPU: MLX's own mx.fast is the oracle. The CPU path of our primitives runs MLX's own
decomposition, so results are bit-identical, and so are gradients, vmap and compile."""

import math

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

import mlx_amd
from mlx_amd import _bridge as B
from mlx_amd import fastops

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

FLOATS = (mx.float32, mx.float16, mx.bfloat16)


def same(a, b, what=""):
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} != {b.dtype}"
    # bitwise, NaNs included
    va = np.array(a.view(mx.uint16) if a.dtype in (mx.float16, mx.bfloat16) else a)
    vb = np.array(b.view(mx.uint16) if b.dtype in (mx.float16, mx.bfloat16) else b)
    assert va.tobytes() == vb.tobytes(), f"{what}: values differ\n{a}\n{b}"


def prims(*outs):
    return [p for p, *_ in B.Graph(list(outs)).nodes]


def rnd(shape, dtype=mx.float32, seed=0):
    return mx.random.normal(shape, key=mx.random.key(seed)).astype(dtype)


@pytest.fixture
def host_rt(host_runtime):
    """mlx_amd enabled over the GPU-less host driver (conftest's host_runtime)."""
    return host_runtime


# ------------------------------------------------------------------- the four ops
def rms_cases():
    for xd in FLOATS:
        for wd in FLOATS + (None,):
            yield xd, wd


@pytest.mark.parametrize("xd,wd", list(rms_cases()))
@pytest.mark.parametrize("shape", [(7, 33), (2, 3, 64), (1,), (5, 0)])
def test_rms_norm_matches_mlx(xd, wd, shape):
    x = rnd(shape, xd)
    w = None if wd is None else rnd(shape[-1:], wd, 1)
    y = B.fast_rms_norm(x, w, 1e-5)
    assert prims(y)[-1] == "mlx_amd::RMSNorm"
    same(y, mx.fast.rms_norm(x, w, 1e-5), f"rms {xd} {wd} {shape}")


def test_rms_norm_int_input_and_params():
    x = mx.arange(12).reshape(3, 4)
    w = rnd((4,), mx.float16)
    same(B.fast_rms_norm(x, w, 1e-3), mx.fast.rms_norm(x, w, 1e-3), "int x")
    g = B.Graph([B.fast_rms_norm(x, w, 0.5)])
    prim, params, ins, _ = g.nodes[-1]
    assert prim == "mlx_amd::RMSNorm" and params == (0.5, True) and len(ins) == 2
    assert g.arrays[ins[1]][1] == "float16"   # weight cast to the output dtype
    prim, params, ins, _ = B.Graph([B.fast_rms_norm(x.astype(mx.float32), None, 0.25)]).nodes[-1]
    assert params == (0.25, False) and len(ins) == 1


@pytest.mark.parametrize("xd", FLOATS)
@pytest.mark.parametrize("w,b", [(True, True), (True, False), (False, True), (False, False)])
def test_layer_norm_matches_mlx(xd, w, b):
    x = rnd((6, 40), xd) * 3 + 1
    wa = rnd((40,), mx.float32, 1) if w else None
    ba = rnd((40,), xd, 2) if b else None
    y = B.fast_layer_norm(x, wa, ba, 1e-5)
    prim, params, _, _ = B.Graph([y]).nodes[-1]
    assert prim == "mlx_amd::LayerNorm" and params == (pytest.approx(1e-5), w, b)
    same(y, mx.fast.layer_norm(x, wa, ba, 1e-5), f"ln {xd} {w} {b}")


def rope_ref(x, dims, trad, base, scale, offset, freqs=None):
    return mx.fast.rope(x, dims, traditional=trad, base=base, scale=scale, offset=offset, freqs=freqs)


@pytest.mark.parametrize("xd", FLOATS)
@pytest.mark.parametrize("trad", [False, True])
@pytest.mark.parametrize("dims", [64, 32, 10])
def test_rope_matches_mlx(xd, trad, dims):
    x = rnd((2, 3, 5, 64), xd)
    for off in (0, 7, mx.array(3), mx.array([1, 9], dtype=mx.int32), mx.array(4, dtype=mx.int64)):
        y = B.fast_rope(x, dims, trad, 10000.0, 0.5, off)
        assert B.Graph([y]).nodes[-1][0] == "mlx_amd::RoPE"
        same(y, rope_ref(x, dims, trad, 10000.0, 0.5, off), f"rope {xd} {trad} {dims} {off}")
    freqs = mx.exp(mx.linspace(0, 3, dims // 2))
    y = B.fast_rope(x, dims, trad, None, 1.0, 2, freqs)
    prim, params, ins, _ = B.Graph([y]).nodes[-1]
    assert params == (dims, trad, 0.0, 1.0, True) and len(ins) == 3
    same(y, rope_ref(x, dims, trad, None, 1.0, 2, freqs), "rope freqs")


def test_rope_inputs_and_layouts():
    # (B, L, H, D) -> (B, H, L, D): MLX's usual transposed view; 3-d and 5-d inputs
    x = rnd((2, 6, 4, 16)).transpose(0, 2, 1, 3)
    same(B.fast_rope(x, 16, False, 1e4, 1.0, 5), rope_ref(x, 16, False, 1e4, 1.0, 5), "transposed")
    for shape in [(3, 5, 8), (2, 2, 2, 3, 8)]:
        x = rnd(shape)
        same(B.fast_rope(x, 8, True, 100.0, 2.0, 1), rope_ref(x, 8, True, 100.0, 2.0, 1), str(shape))
    g = B.Graph([B.fast_rope(rnd((1, 2, 3, 8)), 8, False, 1e4, 1.0, 11)])
    prim, params, ins, _ = g.nodes[-1]
    assert params == (8, False, 10000.0, 1.0, False)
    assert g.arrays[ins[1]][:2] == ((), "int32")   # a Python int offset is a 0-d int32 array


def sdpa_ref(q, k, v, scale, mask=None, sinks=None):
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask, sinks=sinks)


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("hq,hkv,lq,lk", [(4, 4, 5, 5), (4, 2, 1, 9), (6, 2, 7, 3), (2, 1, 8, 8)])
def test_sdpa_matches_mlx(dt, hq, hkv, lq, lk):
    q, k, v = rnd((2, hq, lq, 16), dt, 1), rnd((2, hkv, lk, 16), dt, 2), rnd((2, hkv, lk, 8), dt, 3)
    scale = 1 / math.sqrt(16)
    bool_mask = rnd((lq, lk), seed=4) > -0.5
    add_mask = rnd((2, 1, lq, lk), dt, 5)
    sinks = rnd((hq,), dt, 6)
    for mode, mask, arr, sk in [("", None, None, None), ("causal", "causal", None, None),
                                ("array", bool_mask, bool_mask, None), ("array", add_mask, add_mask, None),
                                ("causal", "causal", None, sinks), ("", None, None, sinks)]:
        y = B.fast_sdpa(q, k, v, scale, "causal" if mode == "causal" else "", arr, sk)
        g = B.Graph([y])
        prim, params, ins, _ = g.nodes[-1]
        assert prim == "mlx_amd::SDPA" and params == (pytest.approx(scale), mode, sk is not None)
        assert g.arrays[ins[0]][0] == (2, hq, lq, 16)
        if arr is not None:  # the mask is broadcast to (B, Hq, Lq, Lk)
            assert g.arrays[ins[3]][0] == (2, hq, lq, lk)
        same(y, sdpa_ref(q, k, v, scale, mask, sk), f"sdpa {dt} {mode} {hq}/{hkv} {lq}x{lk} sinks={sk is not None}")


def test_sdpa_promotes_like_mlx():
    q, k, v = rnd((1, 2, 3, 8), mx.float16), rnd((1, 2, 4, 8)), rnd((1, 2, 4, 8), mx.bfloat16)
    y = B.fast_sdpa(q, k, v, 0.5, "", None, None)
    same(y, sdpa_ref(q, k, v, 0.5), "promoted")
    assert y.dtype == mx.float32


@pytest.mark.parametrize("call", [
    lambda f: f.rms_norm(rnd((3, 4)), rnd((5,)), 1e-5),
    lambda f: f.rms_norm(mx.array(1.0), None, 1e-5),
    lambda f: f.layer_norm(rnd((3, 4)), None, rnd((3,)), 1e-5),
    lambda f: f.rope(rnd((3, 4)), 4, traditional=False, base=1e4, scale=1.0, offset=0),
    lambda f: f.rope(rnd((1, 3, 4)), 3, traditional=False, base=1e4, scale=1.0, offset=0),
    lambda f: f.rope(rnd((1, 3, 4)), 4, traditional=False, base=None, scale=1.0, offset=0),
    lambda f: f.rope(rnd((1, 3, 4)), 4, traditional=False, base=1e4, scale=1.0, offset=mx.array(0.5)),
    lambda f: f.scaled_dot_product_attention(rnd((1, 3, 2, 4)), rnd((1, 2, 2, 4)), rnd((1, 2, 2, 4)), scale=1.0),
    lambda f: f.scaled_dot_product_attention(rnd((1, 2, 2, 4)), rnd((1, 2, 2, 4)), rnd((1, 2, 2, 4)),
                                             scale=1.0, mask="banana"),
])
def test_errors_are_mlx_errors(call):
    with pytest.raises(Exception) as theirs:
        mx.eval(call(mx.fast))
    with pytest.raises(type(theirs.value)) as ours:
        mx.eval(call(fastops))
    assert str(ours.value) == str(theirs.value)


# ------------------------------------------------------------------- transforms
def ops_pairs():
    w, b = rnd((32,), seed=1), rnd((32,), seed=2)
    freqs = mx.exp(mx.linspace(0, 2, 8))
    k, v = rnd((2, 2, 6, 32), seed=3), rnd((2, 2, 6, 32), seed=4)
    mask = rnd((2, 4, 6, 6), seed=5)
    return {
        "rms": (lambda x: B.fast_rms_norm(x, w, 1e-5), lambda x: mx.fast.rms_norm(x, w, 1e-5)),
        "ln": (lambda x: B.fast_layer_norm(x, w, b, 1e-5), lambda x: mx.fast.layer_norm(x, w, b, 1e-5)),
        "rope": (lambda x: B.fast_rope(x, 24, False, 1e4, 1.0, 3), lambda x: rope_ref(x, 24, False, 1e4, 1.0, 3)),
        "rope_t": (lambda x: B.fast_rope(x, 16, True, None, 0.7, mx.array([2, 5]), freqs),
                   lambda x: rope_ref(x, 16, True, None, 0.7, mx.array([2, 5]), freqs)),
        "sdpa": (lambda x: B.fast_sdpa(x, k, v, 0.2, "causal", None, None),
                 lambda x: sdpa_ref(x, k, v, 0.2, "causal")),
        "sdpa_mask": (lambda x: B.fast_sdpa(x, k, v, 0.2, "", mask, None), lambda x: sdpa_ref(x, k, v, 0.2, mask)),
    }


OPS = list(ops_pairs())


@pytest.mark.parametrize("op", OPS)
def test_grad_jvp_match(op):
    ours, theirs = ops_pairs()[op]
    x = rnd((2, 4, 6, 32), seed=7)
    ct = rnd((2, 4, 6, 32), seed=8)
    same(mx.grad(lambda x: (ours(x) * ct).sum())(x), mx.grad(lambda x: (theirs(x) * ct).sum())(x), "grad")
    same(mx.jvp(ours, [x], [ct])[1][0], mx.jvp(theirs, [x], [ct])[1][0], "jvp")
    same(mx.vjp(ours, [x], [ct])[1][0], mx.vjp(theirs, [x], [ct])[1][0], "vjp")


def test_grad_wrt_weight_bias_and_kv():
    x, w, b = rnd((5, 32)), rnd((32,), seed=1), rnd((32,), seed=2)
    f = lambda F: mx.grad(lambda x, w, b: (F(x, w, b, 1e-5) ** 2).sum(), argnums=(0, 1, 2))(x, w, b)
    for a, c in zip(f(B.fast_layer_norm), f(mx.fast.layer_norm)):
        same(a, c, "ln grads")
    g = lambda F: mx.grad(lambda x, w: (F(x, w, 1e-5) ** 2).sum(), argnums=(0, 1))(x, w)
    for a, c in zip(g(B.fast_rms_norm), g(mx.fast.rms_norm)):
        same(a, c, "rms grads")
    q, k, v = rnd((1, 4, 3, 8)), rnd((1, 2, 5, 8), seed=1), rnd((1, 2, 5, 8), seed=2)
    h = lambda F: mx.grad(lambda q, k, v: F(q, k, v).sum(), argnums=(0, 1, 2))(q, k, v)
    for a, c in zip(h(lambda q, k, v: B.fast_sdpa(q, k, v, 0.3, "causal", None, None)),
                    h(lambda q, k, v: sdpa_ref(q, k, v, 0.3, "causal"))):
        same(a, c, "sdpa grads")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axis", [0, 2])
def test_vmap_matches(op, axis):
    ours, theirs = ops_pairs()[op]
    # vmapped axis of size 3 inserted at `axis` of a (2, 4, 6, 32) input
    base = rnd((2, 4, 6, 32), seed=9)
    x = mx.stack([base, base * 2, base - 1], axis=axis)
    same(mx.vmap(ours, in_axes=axis)(x), mx.vmap(theirs, in_axes=axis)(x), f"vmap {op} axis {axis}")


def test_vmap_with_batched_weight_and_nested():
    x, W = rnd((3, 5, 16)), rnd((3, 16), seed=1)
    same(mx.vmap(lambda x, w: B.fast_rms_norm(x, w, 1e-5))(x, W),
         mx.vmap(lambda x, w: mx.fast.rms_norm(x, w, 1e-5))(x, W), "batched weight")
    f = lambda F: mx.vmap(mx.vmap(lambda x: F(x, None, 1e-4), in_axes=1), in_axes=0)
    same(f(B.fast_rms_norm)(rnd((2, 3, 4, 8))), f(mx.fast.rms_norm)(rnd((2, 3, 4, 8))), "nested vmap")
    # vmap inside grad
    g = lambda F: mx.grad(lambda x: mx.vmap(lambda r: F(r, None, 1e-5))(x).sum())(x)
    same(g(B.fast_rms_norm), g(mx.fast.rms_norm), "grad of vmap")


def test_compile_and_bigger_graphs():
    w = rnd((32,), seed=1)
    k, v = rnd((1, 2, 6, 32), seed=3), rnd((1, 2, 6, 32), seed=4)

    def block(F, x, off):
        h = F["rms"](x, w, 1e-5)
        q = F["rope"](h, 32, False, 1e4, 1.0, off)
        return F["sdpa"](q, k, v, 0.2, "causal") * 2 + x

    ours = {"rms": B.fast_rms_norm, "rope": lambda a, d, t, b, s, o: B.fast_rope(a, d, t, b, s, o),
            "sdpa": lambda q, k, v, s, m: B.fast_sdpa(q, k, v, s, m, None, None)}
    theirs = {"rms": mx.fast.rms_norm, "rope": lambda a, d, t, b, s, o: rope_ref(a, d, t, b, s, o),
              "sdpa": sdpa_ref}
    x = rnd((1, 2, 6, 32), seed=5)
    ref = block(theirs, x, 3)
    same(block(ours, x, 3), ref, "graph")
    cf = mx.compile(lambda x, o: block(ours, x, o))
    same(cf(x, mx.array(3)), ref, "compiled")
    same(cf(x, mx.array(3)), ref, "compiled again")
    same(cf(x * 1, mx.array(4)), block(theirs, x, 4), "compiled, new offset")
    cs = mx.compile(lambda x: B.fast_rms_norm(x, w, 1e-5) + 1, shapeless=True)
    for n in (3, 5):
        xs = rnd((n, 32))
        same(cs(xs), mx.fast.rms_norm(xs, w, 1e-5) + 1, f"shapeless {n}")
    # value_and_grad of a compiled function
    gf = mx.compile(mx.grad(lambda x: block(ours, x, 1).sum()))
    # compile fuses the decomposition's elementwise ops differently from ours (FMA
    # contraction in the fused CPU kernels): equal up to float32 rounding
    np.testing.assert_allclose(np.array(gf(x)), np.array(mx.grad(lambda x: block(theirs, x, 1).sum())(x)),
                               rtol=1e-5, atol=1e-6)


def test_async_eval_and_repeated_evals():
    x, w = rnd((64, 128)), rnd((128,), seed=1)
    ys = [B.fast_rms_norm(x * i, w, 1e-5) for i in range(4)]
    mx.async_eval(ys)
    for i, y in enumerate(ys):
        same(y, mx.fast.rms_norm(x * i, w, 1e-5), f"async {i}")
    # a chain where each result feeds the next one, evaluated step by step
    a, b = x, x
    for _ in range(5):
        a = B.fast_rms_norm(a * 1.5, w, 1e-5)
        b = mx.fast.rms_norm(b * 1.5, w, 1e-5)
        mx.eval(a)
    same(a, b, "chain")
    with mx.stream(mx.new_stream(mx.cpu)):
        c = B.fast_layer_norm(x, w, None, 1e-5)
    same(c, mx.fast.layer_norm(x, w, None, 1e-5), "other stream")


def test_input_buffers_are_not_reused():
    # x's buffer must survive our eval (no donation into the decomposition)
    x = rnd((8, 16))
    mx.eval(x)
    before = np.array(x)
    y = B.fast_rms_norm(x, None, 1e-5)
    del x
    mx.eval(y)
    x2 = mx.array(before)
    same(y, mx.fast.rms_norm(x2, None, 1e-5), "after")


# ------------------------------------------------------------------- routing
def test_enable_routes_and_disable_restores(host_rt):
    assert mx.fast.rms_norm is fastops.rms_norm
    assert mx.fast.scaled_dot_product_attention is fastops.scaled_dot_product_attention
    x = rnd((3, 8))
    assert prims(mx.fast.rms_norm(x, None, 1e-5))[-1] == "mlx_amd::RMSNorm"
    # explicit stream: MLX's own function
    assert "mlx_amd::RMSNorm" not in prims(mx.fast.rms_norm(x, None, 1e-5, stream=mx.cpu))
    mlx_amd.disable()
    try:
        assert mx.fast.rms_norm is fastops.original("rms_norm")
        assert mx.fast.rms_norm.__module__ != fastops.__name__
        assert "mlx_amd::RMSNorm" not in prims(mx.fast.rms_norm(x, None, 1e-5))
    finally:
        mlx_amd.enable()
    assert mx.fast.rope is fastops.rope


def test_dequantize_routes_and_falls_back(host_rt):
    """mx.dequantize (affine, biases given) is one mlx_amd::Dequantize node while enabled,
    MLX's own decomposition on the host driver's fallback, bit for bit; an fp mode, an
    explicit stream, another output dtype than the scales' stay MLX's function; disable()
    restores it."""
    q, s, b = mx.quantize(rnd((6, 128)), group_size=64, bits=4)
    assert mx.dequantize is fastops.dequantize
    y = mx.dequantize(q, s, b, group_size=64, bits=4)
    assert prims(y)[-1] == "mlx_amd::Dequantize"
    z = mx.dequantize(q, s, b, stream=mx.cpu)
    assert "mlx_amd::Dequantize" not in prims(z)
    same(y, z, "decomposition")   # our node, evaluated by the host driver's CPU fallback
    # vjp through MLX's decomposition (the scales and biases are differentiable)
    g = mx.grad(lambda s: mx.dequantize(q, s, b, group_size=64, bits=4).sum())(s)
    same(g, mx.grad(lambda s: mx.dequantize(q, s, b, group_size=64, bits=4, stream=mx.cpu).sum())(s), "vjp")
    assert "mlx_amd::Dequantize" not in prims(mx.dequantize(q, s, b, dtype=mx.float16))
    w, sc = mx.quantize(rnd((4, 64)), group_size=32, bits=4, mode="mxfp4")
    assert "mlx_amd::Dequantize" not in prims(mx.dequantize(w, sc, group_size=32, bits=4, mode="mxfp4"))
    mlx_amd.disable()
    try:
        assert mx.dequantize is fastops.original("dequantize") and mx.dequantize.__module__ != fastops.__name__
    finally:
        mlx_amd.enable()


def test_host_driver_fallback_path(host_rt):
    x, w = rnd((4, 2, 6, 32)), rnd((32,), seed=1)
    k, v = rnd((4, 2, 9, 32), seed=2), rnd((4, 2, 9, 32), seed=3)
    fns = {
        "rms": lambda: mx.fast.rms_norm(x, w, 1e-5),
        "ln": lambda: mx.fast.layer_norm(x, w, w, 1e-5),
        "rope": lambda: mx.fast.rope(x, 32, traditional=False, base=1e4, scale=1.0, offset=mx.array([1, 2, 3, 4])),
        "sdpa": lambda: mx.fast.scaled_dot_product_attention(x, k, v, scale=0.1, mask="causal"),
    }
    ours = {n: f() for n, f in fns.items()}
    mx.eval(list(ours.values()))
    by = mlx_amd.stats()["by_primitive"]
    for p in ("mlx_amd::RMSNorm", "mlx_amd::LayerNorm", "mlx_amd::RoPE", "mlx_amd::SDPA"):
        assert by[p]["cpu"] == 1, by
    mlx_amd.disable()
    try:
        for n, f in fns.items():
            same(ours[n], f(), n)
    finally:
        mlx_amd.enable()


def test_nn_layers_and_grad_under_enable(host_rt):
    mx.random.seed(3)
    layers = [nn.RMSNorm(32), nn.LayerNorm(32), nn.LayerNorm(32, affine=False), nn.RoPE(16),
              nn.RoPE(32, traditional=True, base=500.0, scale=0.5)]
    x = rnd((2, 3, 7, 32))
    got = [layer(x) for layer in layers]
    grads = [mx.grad(lambda x: (layer(x) ** 2).sum())(x) for layer in layers]
    mx.eval(got, grads)
    mlx_amd.disable()
    try:
        for i, layer in enumerate(layers):
            same(got[i], layer(x), type(layer).__name__)
            same(grads[i], mx.grad(lambda x: (layer(x) ** 2).sum())(x), "grad " + type(layer).__name__)
    finally:
        mlx_amd.enable()


def test_mlx_lm_llama_attention_under_enable(host_rt):
    from mlx_lm.models import llama
    from mlx_lm.models.base import create_attention_mask
    from mlx_lm.models.cache import KVCache

    args = llama.ModelArgs(model_type="llama", hidden_size=64, num_hidden_layers=2, intermediate_size=96,
                           num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
                           vocab_size=101, rope_theta=10000.0)
    mx.random.seed(0)
    model = llama.Model(args)
    mx.eval(model.parameters())
    tokens = mx.array([[1, 5, 9, 22, 7, 3]])

    def run():
        cache = [KVCache() for _ in model.layers]
        logits = model(tokens, cache=cache)
        steps = [logits]
        tok = mx.argmax(logits[:, -1:], axis=-1)
        for _ in range(3):  # decode steps: offset grows, one query
            lg = model(tok, cache=cache)
            tok = mx.argmax(lg[:, -1:], axis=-1)
            steps.append(lg)
        blk = model.layers[0]
        h = mx.random.normal((1, 6, 64), key=mx.random.key(1))
        steps.append(blk(h, mask=create_attention_mask(h, None)))
        mx.eval(steps)
        return steps

    ours = run()
    by = mlx_amd.stats()["by_primitive"]
    assert by["mlx_amd::RMSNorm"]["cpu"] > 0 and by["mlx_amd::RoPE"]["cpu"] > 0 and by["mlx_amd::SDPA"]["cpu"] > 0
    mlx_amd.disable()
    try:
        theirs = run()
    finally:
        mlx_amd.enable()
    for i, (a, b) in enumerate(zip(ours, theirs)):
        same(a, b, f"llama step {i}")
