"""GatherMM on the GPU.

float32 against plain MLX (its CPU GatherMM); tolerance (1e-4, 1e-4): summation order
over K only (inputs scaled by 1/sqrt(K), outputs O(1)). MLX's CPU takes float32 only,
so float16/bfloat16 are checked against a float32 reference computed by plain MLX from
the upcast inputs and rounded to the dtype; tolerances: the output rounding
(float16 (4e-3, 4e-3), bfloat16 (2e-2, 2e-2)).
"""

import math

import mlx.core as mx
import pytest

from oracle import check_gpu

pytestmark = pytest.mark.gpu

F32 = mx.float32
DT = {"f32": mx.float32, "f16": mx.float16, "bf16": mx.bfloat16}
TOL = {mx.float32: (1e-4, 1e-4), mx.float16: (4e-3, 4e-3), mx.bfloat16: (2e-2, 2e-2)}
PRIMS = ("GatherMM",)


def rnd(shape, dtype, seed, scale=1.0):
    mx.random.seed(seed)
    x = (mx.random.normal(shape) * scale).astype(dtype)
    mx.eval(x)
    return x


def idx(values):
    x = mx.array(values, dtype=mx.uint32)
    mx.eval(x)
    return x


def gmm(sorted_=False, tb=False):
    def f(a, b, li, ri):
        bb = mx.swapaxes(b, -1, -2) if tb else b
        return mx.gather_mm(a, bb, li, ri, sorted_indices=sorted_)
    return f


def gmm_ref(sorted_=False, tb=False):
    """float32 reference from upcast inputs, rounded to a's dtype."""
    def f(a, b, li, ri):
        return gmm(sorted_, tb)(a.astype(F32), b.astype(F32), li, ri).astype(a.dtype)
    return f


def check(a, b, li, ri, sorted_=False, tb=False, what=""):
    rt, at = TOL[a.dtype]
    ref = None if a.dtype == F32 else gmm_ref(sorted_, tb)
    check_gpu(gmm(sorted_, tb), a, b, li, ri, prims=PRIMS, ref_fn=ref, rtol=rt, atol=at, what=what)


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("M", [1, 3, 8, 9, 70])
@pytest.mark.parametrize("tb", [True, False])
def test_gather_mm_shapes(gpu_runtime, wave, dt, M, tb):
    E, K, N, B = 6, 96, 40, 5
    a = rnd((3, M, K), DT[dt], 1, 1 / math.sqrt(K))
    b = rnd((E, N, K) if tb else (E, K, N), DT[dt], 2)
    li = idx([0, 2, 1, 1, 0][:B])
    ri = idx([5, 0, 3, 3, 1][:B])
    check(a, b, li, ri, tb=tb, what=f"{dt} M={M} tb={tb}")


@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("K", [1, 7, 128, 1000])
def test_gather_mm_k(gpu_runtime, wave, dt, K):
    # K = 7: the element path of the decode kernel; 128/1000: 16-byte loads, odd tails
    a = rnd((4, 2, K), DT[dt], 3, 1 / math.sqrt(K))
    b = rnd((4, 33, K), DT[dt], 4)
    check(a, b, idx([3, 2, 1, 0, 0, 1]), idx([0, 0, 2, 3, 1, 1]), tb=True, what=f"{dt} K={K}")


def test_gather_mm_sorted(gpu_runtime, wave):
    a = rnd((16, 1, 64), F32, 5, 0.125)
    b = rnd((4, 48, 64), F32, 6)
    ri = idx([0, 0, 0, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3])
    check(a, b, idx(list(range(16))), ri, sorted_=True, tb=True, what="sorted rhs")


def test_gather_mm_broadcast_batch(gpu_runtime, wave):
    # a broadcast over the expert axis, indices of a broadcast batch shape, defaults
    a = rnd((2, 1, 3, 32), F32, 7, 0.2)
    b = rnd((5, 32, 24), F32, 8)
    ri = idx([[1], [4]])

    def f(a, b, ri):
        return mx.gather_mm(a, b, rhs_indices=ri)
    check_gpu(f, a, b, ri, prims=PRIMS, rtol=1e-4, atol=1e-4, what="lhs default, broadcast")

    def g(a, b, ri):   # sliced, transposed b and a broadcast a
        aa = mx.broadcast_to(a[:1], (2, 4, 3, 32))
        return mx.gather_mm(aa, mx.swapaxes(b[:, :, 1::2], -1, -2).swapaxes(-1, -2), rhs_indices=ri)
    check_gpu(g, a, b, mx.broadcast_to(idx([[0, 1, 2, 4]]), (2, 4)), prims=PRIMS, rtol=1e-4, atol=1e-4,
              what="sliced b, broadcast indices")


def test_gather_mm_empty_and_k0(gpu_runtime):
    a, b = rnd((2, 3, 0), F32, 9), rnd((3, 0, 5), F32, 9)
    check_gpu(gmm(), a, b, idx([0, 1]), idx([2, 0]), prims=PRIMS, what="K = 0")


@pytest.mark.parametrize("tokens", [3, 40])     # 40 tokens x 2 experts: sorted path
def test_switch_glu(gpu_runtime, wave, tokens):
    from mlx_lm.models.switch_layers import SwitchGLU

    mx.random.seed(10)
    layer = SwitchGLU(64, 96, 8)
    mx.eval(layer.parameters())
    x = rnd((1, tokens, 64), F32, 11)
    mx.random.seed(12)
    ind = mx.random.randint(0, 8, (1, tokens, 2)).astype(mx.uint32)
    mx.eval(ind)
    check_gpu(layer, x, ind, prims=PRIMS, rtol=1e-4, atol=1e-4, what=f"SwitchGLU {tokens} tokens")


def test_switch_glu_bf16(gpu_runtime):
    from mlx_lm.models.switch_layers import SwitchGLU

    mx.random.seed(13)
    layer = SwitchGLU(64, 96, 8)
    layer.set_dtype(mx.bfloat16)
    mx.eval(layer.parameters())
    x = rnd((1, 4, 64), mx.bfloat16, 14)
    ind = idx([[[0, 3], [7, 1], [2, 2], [5, 6]]])
    # float32 reference from the upcast layer: MLX's CPU has no bfloat16 GatherMM
    ref = SwitchGLU(64, 96, 8)
    ref.update(layer.parameters())
    ref.set_dtype(F32)
    check_gpu(layer, x, ind, prims=PRIMS, ref_fn=lambda x, i: ref(x.astype(F32), i).astype(mx.bfloat16),
              rtol=3e-2, atol=3e-2, what="SwitchGLU bf16")
