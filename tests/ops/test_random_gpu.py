"""RandomBits on the GPU: bit-exact against MLX's CPU threefry.

End to end through the evaluator (mx.random.* under mlx-amd vs plain MLX, RandomBits never
on the CPU fallback), and kernel-level for what no Python API reaches (output widths 1
and 2, runs of bytes that are not whole words), against the layout model that
tests/ops/test_random_plans.py checks against MLX's CPU."""

import mlx.core as mx
import numpy as np
import pytest

from oracle import check_gpu
from mlx_amd.runtime.launch import run
from mlx_amd.runtime.ops import random as rnd
from mlx_amd.runtime.plan import Layout, Node

pytestmark = pytest.mark.gpu

PRIMS = ("RandomBits",)
EXACT = dict(rtol=0, atol=0)
SEEDS = [0, 1, 42, 2**32 - 1, 2**32, 2**63 + 977, 2**64 - 1]


# ---------------------------------------------------------------- end to end
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("num", [1, 2, 3, 17, 1000])
def test_split_exact(gpu_runtime, seed, num):
    check_gpu(lambda k: mx.random.split(k, num), mx.random.key(seed), prims=PRIMS, **EXACT)


@pytest.mark.parametrize("shape", [(), (1,), (2,), (3,), (7,), (8,), (13,), (4, 5), (3, 7, 9),
                                   (1025,), (1 << 20,), ((1 << 20) + 3,), (0,), (0, 3)])
def test_uniform_shapes(gpu_runtime, shape):
    # uniform(bits) = bits / (2^32 - 1): any different word shows far above the tolerance
    check_gpu(lambda k: mx.random.uniform(shape=shape, key=k), mx.random.key(len(shape) * 7 + 3),
              prims=PRIMS if np.prod(shape) else ())


@pytest.mark.parametrize("seed", SEEDS[:4])
def test_randint_bits_exact(gpu_runtime, seed):
    # randint over [0, 2^24): the float path is exact there, so the ints are compared exactly
    check_gpu(lambda k: mx.random.randint(0, 1 << 24, (257,), key=k), mx.random.key(seed),
              prims=PRIMS, **EXACT)


def test_explicit_keys_high_bits(gpu_runtime):
    for k0, k1 in [(0xFFFFFFFF, 0xFFFFFFFF), (0x80000000, 1), (0, 0x1BD11BDA)]:
        key = mx.array([k0, k1], dtype=mx.uint32)
        check_gpu(lambda k: mx.random.split(k, 9), key, prims=PRIMS, **EXACT)


@pytest.mark.parametrize("per_key", [1, 2, 5, 6])
def test_batched_keys_vmap(gpu_runtime, per_key):
    keys = mx.random.split(mx.random.key(11), 12).reshape(3, 4, 2)
    f = mx.vmap(mx.vmap(lambda k: mx.random.split(k, per_key)))
    check_gpu(f, keys, prims=PRIMS, **EXACT)


def test_batched_keys_transposed(gpu_runtime):
    # keys stored transposed (2, 6) -> vmapped along axis 1: RandomBits reads strided keys
    keys = mx.random.split(mx.random.key(3), 6).T
    f = mx.vmap(lambda k: mx.random.uniform(shape=(7,), key=k), in_axes=1)
    check_gpu(f, keys, prims=PRIMS)


@pytest.mark.parametrize("fn", [
    lambda k: mx.random.normal((33, 17), key=k),
    lambda k: mx.random.normal((64,), dtype=mx.float16, key=k),
    lambda k: mx.random.uniform(-2.0, 3.0, (5, 9), key=k),
    lambda k: mx.random.uniform(shape=(31,), dtype=mx.bfloat16, key=k),
    lambda k: mx.random.randint(-5, 100, (6, 11), key=k),
    lambda k: mx.random.bernoulli(0.3, (129,), key=k),
    lambda k: mx.random.categorical(mx.log(mx.arange(1, 9, dtype=mx.float32)), num_samples=50, key=k),
    lambda k: mx.random.gumbel((17,), key=k),
    lambda k: mx.random.truncated_normal(-1.0, 1.0, (23,), key=k),
    lambda k: mx.random.laplace((19,), key=k),
    lambda k: mx.random.permutation(37, key=k),
], ids=["normal", "normal_f16", "uniform_range", "uniform_bf16", "randint", "bernoulli",
        "categorical", "gumbel", "truncated_normal", "laplace", "permutation"])
def test_distributions(gpu_runtime, fn):
    check_gpu(fn, mx.random.key(2024), prims=PRIMS)


def test_global_key_state(gpu_runtime):
    # the implicit global key: split on the GPU, then draws from the new key
    from oracle import plain_mlx
    with plain_mlx():
        mx.random.seed(123)
        ref = np.array(mx.random.uniform(shape=(10,)))
        ref2 = np.array(mx.random.uniform(shape=(3,)))
    mx.random.seed(123)
    got = np.array(mx.random.uniform(shape=(10,)))
    got2 = np.array(mx.random.uniform(shape=(3,)))
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got2, ref2)


# ---------------------------------------------------------------- kernel level: any width
def _launch_bits(rt, key_words: np.ndarray, key_layout: Layout, out_shape, width):
    drv = rt.driver
    dt = {1: "uint8", 2: "uint16", 4: "uint32"}[width]
    out_lay = Layout.row_major(out_shape, dt)
    node = Node("RandomBits", (tuple(out_shape), width), (key_layout,), (out_lay,))
    plan = rnd.plan_node(node, rt.props)
    assert plan is not None
    kbuf = np.ascontiguousarray(key_words, dtype=np.uint32)
    nbytes = out_lay.nbytes
    kp, op = drv.malloc(max(kbuf.nbytes, 16)), drv.malloc(max(nbytes + 64, 16))
    try:
        drv.memcpy_htod(kp, kbuf.ctypes.data, kbuf.nbytes)
        drv.memset(op, 0xAB, nbytes + 64)   # guard bytes past the end must stay
        for st in plan.steps:
            run(st, rt.modules, drv, (kp, op))
        drv.synchronize()
        got = np.empty(nbytes + 64, np.uint8)
        drv.memcpy_dtoh(got.ctypes.data, op, nbytes + 64)
    finally:
        drv.free(kp)
        drv.free(op)
    assert (got[nbytes:] == 0xAB).all(), "kernel wrote past the output"
    return got[:nbytes].tobytes()


@pytest.mark.parametrize("width", [1, 2, 4])
@pytest.mark.parametrize("num_keys,per_key", [(1, 1), (1, 2), (1, 3), (1, 5), (1, 7), (1, 9),
                                              (1, 4097), (3, 1), (5, 3), (7, 5), (4, 6), (33, 11)])
def test_kernel_widths_and_partial_words(gpu_runtime, width, num_keys, per_key):
    rng = np.random.default_rng(num_keys * 100 + per_key + width)
    keys = rng.integers(0, 2**32, size=(num_keys, 2), dtype=np.uint64).astype(np.uint32)
    lay = Layout.row_major((num_keys, 2) if num_keys > 1 else (2,), "uint32")
    out_shape = (num_keys, per_key) if num_keys > 1 else (per_key,)
    got = _launch_bits(gpu_runtime, keys.reshape(-1), lay, out_shape, width)
    ref = rnd.reference_bits([tuple(map(int, k)) for k in keys], num_keys * per_key * width)
    assert got == ref


def test_kernel_strided_keys(gpu_runtime):
    # keys (4, 2) inside a (2, 4) buffer, read transposed
    rng = np.random.default_rng(9)
    base = rng.integers(0, 2**32, size=(2, 4), dtype=np.uint64).astype(np.uint32)
    lay = Layout.strided((4, 2), (1, 4), "uint32")
    got = _launch_bits(gpu_runtime, base.reshape(-1), lay, (4, 3), 1)
    ref = rnd.reference_bits([(int(base[0, i]), int(base[1, i])) for i in range(4)], 12)
    assert got == ref
