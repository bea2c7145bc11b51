"""Convolution on the GPU against MLX's CPU: nn.Conv1d/2d/3d, mx.conv_general over every
parameter (strides, asymmetric padding, kernel and input dilation, groups incl. depthwise,
flip), conv_transpose1d/2d, the gradient of a small CNN (its vjp is Convolutions with
input dilation and flip over transposed operands), float32/float16/bfloat16/float64,
transposed and sliced inputs, both GEMM paths (library and our portable kernel), and the
16-bit implicit GEMM on the matrix unit (conv_mma: both position tiles, its layouts, its
first-use self-test).

Values are small integers, so every sum is exact in each dtype whatever the summation
order (TF32 and 16-bit products included) and results compare exactly.

    pytest -m gpu tests/ops/test_conv_gpu.py
"""

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from oracle import check_gpu, fresh_plans

pytestmark = pytest.mark.gpu

FLOATS = ("float32", "float16", "bfloat16")
P = ("Convolution",)


def ints(shape, dtype="float32", seed=0, lo=-1, hi=2):
    v = np.random.default_rng(seed).integers(lo, hi, size=shape).astype(np.float32)
    return mx.array(v).astype(getattr(mx, dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_nn_conv_layers(gpu_runtime, dtype):
    dt = getattr(mx, dtype)
    for layer, shape, seed in ((nn.Conv1d(6, 8, 3, stride=2, padding=1), (2, 17, 6), 1),
                               (nn.Conv2d(4, 16, 3, padding=1), (2, 9, 10, 4), 2),
                               (nn.Conv3d(3, 5, (2, 3, 2), stride=(1, 2, 1)), (1, 5, 7, 6, 3), 3)):
        layer.update({k: ints(v.shape, dtype, seed + 10) for k, v in layer.parameters().items()})
        layer.set_dtype(dt)
        check_gpu(lambda x: layer(x), ints(shape, dtype, seed), prims=P, what=f"{dtype} {type(layer).__name__}")


GENERAL = [
    # (x shape, w shape, stride, (lo, hi), kernel_dilation, input_dilation, groups, flip)
    ((2, 11, 6), (4, 3, 6), 2, ([1], [2]), 1, 1, 1, False),
    ((2, 11, 6), (6, 3, 2), 1, ([0], [3]), 2, 1, 3, True),
    ((1, 8, 7, 8), (8, 3, 3, 1), (1, 2), ([1, 2], [1, 0]), (2, 1), 1, 8, False),        # depthwise
    ((1, 8, 7, 8), (16, 3, 3, 1), 1, ([1, 1], [1, 1]), 1, 1, 8, False),                # depthwise x2
    ((2, 5, 6, 4), (6, 2, 3, 2), (2, 1), ([0, 1], [2, 1]), (1, 2), (2, 1), 2, True),
    ((1, 4, 5, 3), (5, 3, 3, 3), 1, ([2, 2], [2, 2]), 1, (2, 3), 1, True),             # transpose-like
    ((1, 4, 5, 4, 2), (3, 2, 3, 2, 2), (1, 2, 1), ([1, 0, 1], [0, 1, 1]), (2, 1, 1), (1, 2, 1), 1, False),
    ((3, 6, 6, 16), (32, 1, 1, 16), 1, ([0, 0], [0, 0]), 1, 1, 1, False),              # pointwise GEMM
    ((2, 6, 6, 16), (8, 3, 3, 16), 1, ([1, 1], [1, 1]), 1, 1, 1, False),               # 16-byte im2col
]


# MLX's CPU convolves float64 only in its plain paths (the others raise there)
CASES = [(dt, c) for dt in FLOATS for c in range(len(GENERAL))] + [("float64", c) for c in (0, 7, 8)]


@pytest.mark.parametrize("dtype,case", CASES)
def test_conv_general_every_parameter(gpu_runtime, dtype, case):
    xs, ws, stride, pad, kdil, idil, groups, flip = GENERAL[case]
    fn = lambda x, w: mx.conv_general(x, w, stride=stride, padding=pad, kernel_dilation=kdil,
                                      input_dilation=idil, groups=groups, flip=flip)
    check_gpu(fn, ints(xs, dtype, case), ints(ws, dtype, 50 + case), prims=P, what=f"{dtype} case {case}")


@pytest.mark.parametrize("mode", ["kernel", "auto"])
def test_portable_gemm_and_layouts(gpu_runtime, monkeypatch, mode):
    monkeypatch.setenv("MLX_AMD_GEMM", mode)
    gpu_runtime.evaluator.plans.clear()
    try:
        x = ints((2, 7, 9, 8), "float32", 5)
        w = ints((6, 3, 3, 8), "float32", 6)
        check_gpu(lambda x, w: mx.conv2d(mx.transpose(x, (0, 2, 1, 3)), w, padding=1), x, w, prims=P,
                  what=f"{mode} transposed input")
        check_gpu(lambda x, w: mx.conv2d(x[:, 1:, ::2, :], w[:, ::-1], stride=2), x, w, prims=P,
                  what=f"{mode} sliced input, reversed weight")
        check_gpu(lambda x, w: mx.conv2d(x, mx.transpose(w, (0, 2, 1, 3)), groups=2),
                  x, ints((6, 3, 3, 4), "float32", 7), prims=P, what=f"{mode} transposed weight, groups")
    finally:
        gpu_runtime.evaluator.plans.clear()


@pytest.mark.parametrize("dtype", FLOATS)
def test_conv_transpose(gpu_runtime, dtype):
    check_gpu(lambda x, w: mx.conv_transpose1d(x, w, stride=2, padding=1), ints((2, 9, 4), dtype, 8),
              ints((5, 3, 4), dtype, 9), prims=P, what=f"{dtype} 1d")
    check_gpu(lambda x, w: mx.conv_transpose2d(x, w, stride=(2, 3), padding=(1, 0), output_padding=(1, 0)),
              ints((1, 5, 4, 6), dtype, 10), ints((3, 3, 4, 6), dtype, 11), prims=P, what=f"{dtype} 2d")
    check_gpu(lambda x, w: mx.conv_transpose2d(x, w, stride=2, groups=2), ints((1, 4, 4, 4), dtype, 12),
              ints((6, 2, 2, 2), dtype, 13), prims=P, what=f"{dtype} 2d groups")


def test_gradient_of_a_small_cnn(gpu_runtime):
    def loss(x, w1, w2, w3):
        h = nn.relu(mx.conv2d(x, w1, stride=2, padding=1))
        h = mx.conv2d(h, w2, padding=(1, 0), groups=2)
        h = mx.conv1d(mx.reshape(h, (h.shape[0], -1, h.shape[-1])), w3, stride=2)
        return mx.sum(h * h)

    args = (ints((2, 9, 8, 3), "float32", 14), ints((4, 3, 3, 3), "float32", 15),
            ints((6, 3, 2, 2), "float32", 16), ints((2, 3, 6), "float32", 17))
    check_gpu(mx.grad(loss, argnums=(0, 1, 2, 3)), *args, prims=P, what="grad")


def test_large_chunked(gpu_runtime, monkeypatch):
    from mlx_amd.runtime.ops import conv

    monkeypatch.setattr(conv, "CHUNK_BYTES", 1 << 20)        # several chunks of patches
    gpu_runtime.evaluator.plans.clear()
    try:
        x, w = ints((4, 40, 40, 32), "bfloat16", 18), ints((48, 3, 3, 32), "bfloat16", 19)
        check_gpu(lambda x, w: mx.conv2d(x, w, padding=1), x, w, prims=P, what="chunked")
        check_gpu(lambda x, w: mx.conv2d(x, w, padding=1, groups=4), x, ints((48, 3, 3, 8), "bfloat16", 20),
                  prims=P, what="chunked groups")
    finally:
        gpu_runtime.evaluator.plans.clear()


def test_empty(gpu_runtime):
    check_gpu(lambda x, w: mx.conv2d(x, w), mx.zeros((0, 5, 5, 2)), ints((3, 3, 3, 2)), prims=(), what="empty")


# ---- the implicit GEMM on the matrix unit (float16/bfloat16, 8-channel runs) -------------------
MMA = [
    # (x shape, w shape, stride, (lo, hi), kernel_dilation, input_dilation, groups, flip)
    ((2, 19, 8), (5, 3, 8), 2, ([1], [2]), 2, 1, 1, True),
    ((3, 13, 11, 32), (72, 3, 3, 32), 1, ([1, 1], [1, 1]), 1, 1, 1, False),    # partial tiles, 2 chunks/tap
    ((1, 9, 10, 48), (80, 3, 2, 24), (2, 1), ([1, 0], [0, 2]), (1, 2), 1, 2, False),   # groups, partial depth
    ((1, 4, 5, 16), (8, 3, 3, 16), 1, ([2, 2], [2, 2]), 1, (2, 3), 1, True),   # transpose-like
    ((1, 4, 5, 4, 8), (3, 2, 3, 2, 8), (1, 2, 1), ([1, 0, 1], [0, 1, 1]), (2, 1, 1), (1, 2, 1), 1, False),
    ((4, 20, 20, 64), (64, 3, 3, 64), 1, ([1, 1], [1, 1]), 1, 1, 1, False),    # 1600 positions: BM 128 too
    ((2, 7, 7, 16), (16, 1, 1, 16), 2, ([0, 0], [0, 0]), 1, 1, 1, False),      # strided 1x1
]


@pytest.fixture
def mma_kernels(gpu_runtime, monkeypatch):
    """The conv_mma kernels the planner chose (plans cleared before and after)."""
    from mlx_amd.runtime import matrix_units
    from mlx_amd.runtime.ops import conv
    monkeypatch.delenv("MLX_AMD_MATRIX_UNITS", raising=False)
    for dt in conv.kt.table(conv.FAMILY).MMA_DTYPES:   # the first-use self-test, before the spy
        matrix_units.usable(conv.FAMILY, gpu_runtime.props, dt, conv.mma_selftest)
    chosen = []
    real = conv.mma_launch

    def spy(*a, **k):
        st = real(*a, **k)
        chosen.append(st.kernel)
        return st

    monkeypatch.setattr(conv, "mma_launch", spy)
    monkeypatch.setattr(conv, "MMA_MAX_COG", 1 << 30)   # the wide cases too
    monkeypatch.delenv(conv.ENV, raising=False)
    with fresh_plans(gpu_runtime):
        yield chosen


@pytest.mark.parametrize("bm", [None, 64, 128])
@pytest.mark.parametrize("dtype,case", [(dt, c) for dt in ("float16", "bfloat16") for c in range(len(MMA))])
def test_matrix_unit_conv(gpu_runtime, mma_kernels, monkeypatch, dtype, case, bm):
    from mlx_amd.runtime import matrix_units
    from mlx_amd.runtime.ops import conv
    if matrix_units.backend(gpu_runtime.props, dtype) is None:
        pytest.skip(f"no matrix-tile backend on {gpu_runtime.props.arch}")
    monkeypatch.setattr(conv, "MMA_BM", bm)
    xs, ws, stride, pad, kdil, idil, groups, flip = MMA[case]
    fn = lambda x, w: mx.conv_general(x, w, stride=stride, padding=pad, kernel_dilation=kdil,
                                      input_dilation=idil, groups=groups, flip=flip)
    check_gpu(fn, ints(xs, dtype, case), ints(ws, dtype, 70 + case), prims=P, what=f"{dtype} mma case {case}")
    assert mma_kernels and all(k.startswith(f"conv_mma_{dtype}_m{bm or ''}") for k in mma_kernels), mma_kernels


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_matrix_unit_conv_layouts(gpu_runtime, mma_kernels, dtype):
    """Strided and offset inputs the kernel reads in place (an unaligned start takes its
    register copies), a transposed weight copied first, the gradient of a small CNN in 16 bits
    (its vjp convolutions: input dilation, flip, swapped operands), wide random values."""
    from mlx_amd.runtime import matrix_units
    if matrix_units.backend(gpu_runtime.props, dtype) is None:
        pytest.skip(f"no matrix-tile backend on {gpu_runtime.props.arch}")
    x = ints((2, 12, 10, 16), dtype, 80)
    w = ints((24, 3, 3, 16), dtype, 81)
    check_gpu(lambda x, w: mx.conv2d(x[:, 1::2, ::3, :], w, padding=1), x, w, prims=P, what="spatial slices")
    flat = ints((1 + 2 * 9 * 9 * 16,), dtype, 82)
    check_gpu(lambda f, w: mx.conv2d(mx.reshape(f[1:], (2, 9, 9, 16)), w, stride=2), flat, w, prims=P,
              what="unaligned start")
    check_gpu(lambda x, w: mx.conv2d(x, mx.transpose(w, (0, 2, 1, 3))), x, ints((24, 3, 3, 16), dtype, 83),
              prims=P, what="transposed weight")
    assert len(mma_kernels) >= 3

    def loss(x, w1, w2):   # integer sums, exact in float32 accumulators: each output rounds once
        h = mx.conv2d(x, w1, stride=2, padding=1)
        h = mx.conv2d(nn.relu(h), w2, padding=1, groups=2)
        return mx.sum(h.astype(mx.float32))

    args = (ints((2, 9, 8, 16), dtype, 84), ints((16, 3, 3, 16), dtype, 85), ints((16, 3, 3, 8), dtype, 86))
    check_gpu(mx.grad(loss, argnums=(0, 1, 2)), *args, prims=P, what="grad")
    # real-valued operands: every sum is rounded, so a tolerance of the 16-bit result
    rng = np.random.default_rng(87)
    xr = mx.array(rng.standard_normal((2, 15, 15, 64)).astype(np.float32)).astype(getattr(mx, dtype))
    wr = mx.array(rng.standard_normal((96, 3, 3, 64)).astype(np.float32) / 24).astype(getattr(mx, dtype))
    tol = 2e-2 if dtype == "bfloat16" else 3e-3
    check_gpu(lambda x, w: mx.conv2d(x, w, padding=1), xr, wr, prims=P, rtol=tol, atol=tol, what="normal values")


def test_matrix_unit_conv_selftest(gpu_runtime, mma_kernels, monkeypatch):
    """The first-use self-test passes on this device; a perturbed matrix-unit result fails it:
    a warning, and the im2col path serves the rest of the process."""
    from mlx_amd.runtime import matrix_units
    from mlx_amd.runtime.ops import conv
    if matrix_units.backend(gpu_runtime.props, "bfloat16") is None:
        pytest.skip(f"no matrix-tile backend on {gpu_runtime.props.arch}")
    for dt in ("float16", "bfloat16"):
        ok, why = conv.mma_selftest(gpu_runtime, dt)
        assert ok, why
    matrix_units.forget()
    monkeypatch.setattr(conv, "SELFTEST_PERTURB", lambda g: g + 0.25 * np.max(np.abs(g)))
    x, w = ints((2, 6, 6, 16), "bfloat16", 90), ints((8, 3, 3, 16), "bfloat16", 91)
    try:
        with pytest.warns(RuntimeWarning, match="differ from their portable twins"):
            check_gpu(lambda x, w: mx.conv2d(x, w, padding=1), x, w, prims=P, what="after a failed self-test")
        assert matrix_units.verdicts()[("conv", gpu_runtime.props.arch, "bfloat16")] is False
        # the verdict stays: new plans take im2col without testing again
        del mma_kernels[:]
        gpu_runtime.evaluator.plans.clear()
        check_gpu(lambda x, w: mx.conv2d(x, w, stride=2), x, w, prims=P, what="the next plan")
        assert mma_kernels == []
    finally:
        matrix_units.forget()
