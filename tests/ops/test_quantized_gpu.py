"""QuantizedMatmul, GatherQMM and fast::Quantize on the GPU against MLX's CPU.

Weights come from mx.quantize on random data. The matmul reference is computed in
float32 on the CPU (mx.dequantize to float32, a float32 matmul, rounded to x's dtype)
because MLX's x86 CPU kernel accumulates in x's dtype (a bfloat16 running sum over K
is far from the true product); ours accumulates in float32 like MLX's GPU backends.
x is scaled by 1/sqrt(K) so outputs are O(1); tolerances (rtol, atol): float32
(1e-4, 1e-4): summation order only; float16 (5e-3, 5e-3) and bfloat16 (2e-2, 3e-2): the
output rounding plus, on the prefill path, the dequantized weights rounded to x's dtype
before the GEMM (what MLX's own quantized tests allow for these dtypes is looser).
fast::Quantize must match MLX bit for bit.
"""

import math

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from oracle import check_gpu, plain_mlx

pytestmark = pytest.mark.gpu

F32 = mx.float32
TOL = {mx.float32: (1e-4, 1e-4), mx.float16: (5e-3, 5e-3), mx.bfloat16: (2e-2, 3e-2)}
DT = {"f32": mx.float32, "f16": mx.float16, "bf16": mx.bfloat16}
QMM = ("QuantizedMatmul",)


def make(shape, gs, bits, mode="affine", dtype=mx.float32, seed=0):
    mx.random.seed(seed)
    w = mx.random.normal(shape).astype(dtype)
    r = mx.quantize(w, group_size=gs, bits=bits, mode=mode)
    mx.eval(*r)
    return tuple(r)


def xs(shape, dtype, seed=1):
    mx.random.seed(seed)
    x = (mx.random.normal(shape) / math.sqrt(shape[-1])).astype(dtype)
    mx.eval(x)
    return x


def qmm(gs, bits, mode, transpose):
    def f(x, w, *sb):
        return mx.quantized_matmul(x, w, *sb, transpose=transpose, group_size=gs, bits=bits, mode=mode)
    return f


def qmm_ref(gs, bits, mode, transpose):
    """float32 reference: dequantize in float32, float32 matmul, round to x's dtype."""
    def f(x, w, *sb):
        sb = tuple(a.astype(F32) for a in sb) if mode == "affine" else sb
        d = mx.dequantize(w, *sb, group_size=gs, bits=bits, mode=mode, dtype=F32)
        y = x.astype(F32) @ (mx.swapaxes(d, -1, -2) if transpose else d)
        return y.astype(x.dtype)
    return f


def check_qmm(x, q, gs, bits, mode="affine", transpose=True, what=""):
    rt, at = TOL[x.dtype]
    check_gpu(qmm(gs, bits, mode, transpose), x, *q, prims=QMM, ref_fn=qmm_ref(gs, bits, mode, transpose),
              rtol=rt, atol=at, what=what)


@pytest.fixture(params=["auto", "0"], ids=["units", "portable"])
def units(request, monkeypatch, gpu_runtime):
    """4-bit affine products of 16-bit x through the matrix-unit qmv (where the device has
    one: mma.sync on the H200) and through the portable qmv; plans, recordings and the
    self-test's verdicts are dropped around the test."""
    from mlx_amd.runtime import matrix_units
    monkeypatch.setenv("MLX_AMD_MATRIX_UNITS", request.param)
    ev = gpu_runtime.evaluator

    def fresh():
        matrix_units.forget()
        ev.plans.clear()
        ev.drop_programs()

    fresh()
    yield request.param
    fresh()


def qmv_kernel(rt, dt, gs, bits, M, N, K):
    """The kernel the quantized planner picks on this device for x (M, K) @ W (N, K)^T."""
    from mlx_amd.runtime.ops import quantized as Q
    from mlx_amd.runtime.plan import Layout, Node
    R = Layout.row_major
    ins = (R((M, K), dt), R((N, K * bits // 32), "uint32"), R((N, K // gs), dt), R((N, K // gs), dt))
    plan = Q.plan_node(Node("QuantizedMatmul", (gs, bits, 0, True), ins, (R((M, N), dt),)), rt.props)
    return plan.steps[-1].kernel


def expect_units(rt, units, wave, dt, gs, bits, M, N, K):
    """The matrix-unit qmv serves exactly the cases it claims, on a device that has it."""
    from mlx_amd.runtime import matrix_units
    dtn = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[dt]
    name = qmv_kernel(rt, dtn, gs, bits, M, N, K)
    from mlx_amd.runtime import kernel_table as kt
    be = matrix_units.backend(rt.props, dtn)
    claims = (units == "auto" and wave == rt.props.wave_size and bits == 4 and dtn != "float32" and M >= 2
              and be in kt.table("quantized").QMV_MMA_BACKENDS and (be != "mma_sync" or K % 256 == 0))
    assert ("qmv_mma" in name) == claims, name


# --- the LLM case: affine 4/8-bit, x @ W.T ------------------------------------------------

@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("gs", [32, 64, 128])
@pytest.mark.parametrize("M", [1, 3, 8])
def test_qmv_affine(gpu_runtime, wave, units, dt, bits, gs, M):
    N, K = 70, 512               # N: not a multiple of the 16 rows of a block
    expect_units(gpu_runtime, units, wave, dt, gs, bits, M, N, K)
    q = make((N, K), gs, bits, dtype=DT[dt])
    check_qmm(xs((M, K), DT[dt]), q, gs, bits, what=f"qmv {bits}b g{gs} {dt} M={M}")


@pytest.mark.parametrize("dt", ["f16", "bf16"])
@pytest.mark.parametrize("N,K,M", [(4096, 4096, 2), (1024, 4096, 2), (300, 14336, 3), (17, 256, 8), (2048, 768, 2),
                                   (4096, 4096, 1)])
def test_qmv_mma_shapes(gpu_runtime, units, dt, N, K, M):
    """LLM shapes and odd ones through both kernels: k split over 1, 2 and 4 waves, a
    single partial tile, an odd number of stages (one row of x: qmv either way)."""
    expect_units(gpu_runtime, units, 32, dt, 64, 4, M, N, K)
    q = make((N, K), 64, 4, dtype=DT[dt], seed=N)
    check_qmm(xs((M, K), DT[dt], seed=K), q, 64, 4, what=f"qmv {dt} {N}x{K} M={M}")


@pytest.mark.parametrize("kind", ["x_base", "scale_base"])
def test_qmv_mma_unaligned_bases(gpu_runtime, units, kind):
    """Strides the plan accepts but base addresses off the vector alignment (views at odd
    offsets): the kernel's slow path, MLX's order of operations."""
    K, N = 512, 48
    w, s, b = make((N, K), 64, 4, dtype=mx.bfloat16)
    if kind == "x_base":
        x = xs((2, K + 8), mx.bfloat16)[:, 1:K + 1]      # rows 16-byte apart, base 2 bytes off
    else:
        x = xs((2, K), mx.bfloat16)
        big = mx.pad(s, ((0, 0), (1, 7)))                  # rows of 16 scales, 32 bytes apart
        mx.eval(big)
        s = big[:, 1:9]                                    # a view 2 bytes past an aligned base
    check_qmm(x, (w, s, b), 64, 4, what=kind)


def test_qmv_mma_infinite_x(gpu_runtime, units):
    """An infinite x: MLX multiplies it by each dequantized weight (+-inf, never the NaN of
    inf * q where q == 0); the tile is redone in MLX's order."""
    q = make((40, 256), 64, 4, dtype=mx.bfloat16)
    x = xs((3, 256), mx.bfloat16)
    x = mx.where((mx.arange(256) == 70) & (mx.arange(3)[:, None] == 1), mx.array(float("inf"), mx.bfloat16), x)
    check_qmm(x, q, 64, 4, what="inf in x")


@pytest.mark.parametrize("units", ["auto"], indirect=True)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_qmv_mma_selftest(gpu_runtime, units, dtype):
    """The first-use self-test of the matrix-unit qmv against the portable one passes here."""
    from mlx_amd.runtime import matrix_units
    from mlx_amd.runtime.ops import quantized as Q
    from mlx_amd.runtime import kernel_table as kt
    if matrix_units.backend(gpu_runtime.props, dtype) not in kt.table("quantized").QMV_MMA_BACKENDS:
        pytest.skip(f"no matrix-unit qmv backend on {gpu_runtime.props.arch}")
    ok, why = Q.qmv_mma_selftest(gpu_runtime, dtype)
    assert ok, why
    assert "qmv_mma" in qmv_kernel(gpu_runtime, dtype, 64, 4, 2, 64, 512)
    assert matrix_units.verdicts() == {("quantized", gpu_runtime.props.arch, dtype): True}


@pytest.mark.parametrize("units", ["auto"], indirect=True)
def test_qmv_mma_selftest_mismatch_uses_the_twin(gpu_runtime, units, monkeypatch):
    """A matrix-unit result that differs from the twin's: one warning, the twin serves, the
    results stay right."""
    from mlx_amd.runtime import matrix_units
    from mlx_amd.runtime.ops import quantized as Q
    from mlx_amd.runtime import kernel_table as kt
    if matrix_units.backend(gpu_runtime.props, "bfloat16") not in kt.table("quantized").QMV_MMA_BACKENDS:
        pytest.skip(f"no matrix-unit qmv backend on {gpu_runtime.props.arch}")
    monkeypatch.setattr(Q, "SELFTEST_PERTURB", lambda g: g * 1.5)
    q = make((64, 512), 64, 4, dtype=mx.bfloat16)
    with pytest.warns(RuntimeWarning, match="differ from their portable twins"):
        check_qmm(xs((2, 512), mx.bfloat16), q, 64, 4, what="twin after a failed self-test")
    assert "qmv_mma" not in qmv_kernel(gpu_runtime, "bfloat16", 64, 4, 2, 64, 512)
    assert matrix_units.verdicts()[("quantized", gpu_runtime.props.arch, "bfloat16")] is False


def test_gather_qmm_mma(gpu_runtime, units):
    """GatherQMM of 4-bit experts with bfloat16 x (a mixture of experts' decode) through both
    kernels: the batch prologue picks each output batch's expert."""
    E, N, K, T, k = 4, 40, 256, 6, 2
    q = make((E, N, K), 64, 4, dtype=mx.bfloat16)
    idx = mx.array(np.random.default_rng(6).integers(0, E, (T, k)).astype(np.uint32))
    x = xs((T, 1, 2, K), mx.bfloat16)                  # two rows a token: qmv_mma's case

    def f(x, i, w, s, b):
        return mx.gather_qmm(x, w, s, b, rhs_indices=i, transpose=True, group_size=64, bits=4)

    def ref(x, i, w, s, b):
        d = mx.dequantize(w, s.astype(F32), b.astype(F32), group_size=64, bits=4, dtype=F32)[i]
        return (x.astype(F32) @ mx.swapaxes(d, -1, -2)).astype(x.dtype)

    rt, at = TOL[mx.bfloat16]
    check_gpu(f, x, idx, *q, prims=("GatherQMM",), ref_fn=ref, rtol=rt, atol=at, what="gather mma")


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("gs", [32, 64, 128])
@pytest.mark.parametrize("M", [33, 128])
def test_prefill_affine(gpu_runtime, dt, bits, gs, M):
    N, K = 72, 256
    q = make((N, K), gs, bits, dtype=DT[dt])
    check_qmm(xs((M, K), DT[dt]), q, gs, bits, what=f"prefill {bits}b g{gs} {dt} M={M}")


@pytest.mark.parametrize("K,gs", [(32, 32), (96, 32), (192, 64), (4096 + 128, 128), (8192, 64)])
def test_qmv_odd_k(gpu_runtime, wave, K, gs):
    # fewer chunks than lanes, chunks not a multiple of the wave; long rows split k over
    # 2 and 4 waves (qmv_ksplit)
    q = make((19, K), gs, 4, dtype=mx.bfloat16)
    check_qmm(xs((1, K), mx.bfloat16), q, gs, 4, what=f"K={K}")


# --- qmv_h2: packed half math for 16-bit x, 2/4/8-bit affine w ----------------------------------

def h2_x(M, K, dt, seed=7):
    """x whose chunks of 32 values span magnitudes 1e-4..1e3 (one value 2e3 in float16, whose
    outputs must stay finite; 1e7 in bfloat16), so every per-chunk power-of-two scale is
    exercised."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((M, K)) * 10.0 ** rng.uniform(-4, 3, (M, K // 32, 1)).repeat(32, 2).reshape(M, K)
    v[:, 5] = 2e3 if dt == mx.float16 else 1e7
    v[:, 40] = 1e-6
    return mx.array(v.astype(np.float32)).astype(dt)


@pytest.mark.parametrize("dt", ["f16", "bf16"])
@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("gs", [32, 128])
@pytest.mark.parametrize("M", [1, 3])
def test_qmv_h2_dynamic_range(gpu_runtime, wave, dt, bits, gs, M):
    """Chunks of very different magnitude: the error stays at the half sums' ~2^-11 of the
    magnitudes in each chunk (16 products a sum), far inside a bfloat16 output's rounding
    and within ~4 float16 ulps of the largest output (the H200: up to 1.6e-3 of it, where a
    chunk holds a value 1e3x its neighbours; MLX_AMD_QMV_HALF2=0 keeps float sums). Float
    reference. (3 rows of 4-bit x go to the matrix unit where the device has one; the other
    cases are qmv_h2's.)"""
    N, K = 40, 1024
    q = make((N, K), gs, bits, dtype=DT[dt])
    x = h2_x(M, K, DT[dt])
    name = qmv_kernel(gpu_runtime, {"f16": "float16", "bf16": "bfloat16"}[dt], gs, bits, M, N, K)
    assert "qmv_h2" in name or (M > 1 and bits == 4), name
    ref = qmm_ref(gs, bits, "affine", True)
    with plain_mlx():
        r = np.array(ref(x, *q).astype(F32))
    assert np.isfinite(r).all()
    scale = float(np.abs(r).max())
    check_gpu(qmm(gs, bits, "affine", True), x, *q, prims=QMM, ref_fn=ref, rtol=TOL[DT[dt]][0],
              atol=(4e-3 if dt == "f16" else 1e-3) * scale, what=f"h2 range {bits}b g{gs} {dt} M={M}")


@pytest.mark.parametrize("dt", ["f16", "bf16"])
@pytest.mark.parametrize("what", ["inf", "-inf", "nan", "overflowing sum"])
def test_qmv_h2_non_finite_x(gpu_runtime, wave, dt, what):
    """A non-finite x anywhere sends the block through qmv's float path: MLX's infinities
    and NaNs, and a chunk whose float sum overflows is no different."""
    N, K = 24, 256
    q = make((N, K), 64, 4, dtype=DT[dt])
    x = xs((2, K), DT[dt])
    big = 6e4 if dt == "f16" else 3e38
    val = {"inf": float("inf"), "-inf": -float("inf"), "nan": float("nan"), "overflowing sum": big}[what]
    pos = (mx.arange(K) >= 64) & (mx.arange(K) < 96) if what == "overflowing sum" else mx.arange(K) == 70
    x = mx.where(pos, mx.array(val, DT[dt]), x)
    if what == "overflowing sum":
        q = (q[0], q[1] * 0, q[2] * 0)                  # w = 0: finite products, the sum of x overflows
    check_qmm(x, q, 64, 4, what=f"h2 {what} {dt}")


@pytest.mark.parametrize("K", [32, 96, 18176, 18176 + 128])
def test_qmv_h2_k_limits(gpu_runtime, K):
    """One chunk, fewer chunks than lanes, the longest k the staged x fits (72 bytes a chunk
    beside the kernel's own shared memory) and one group past it (qmv's float path)."""
    gs = 32 if K < 128 else 128
    q = make((33, K), gs, 4, dtype=mx.bfloat16)
    name = qmv_kernel(gpu_runtime, "bfloat16", gs, 4, 1, 33, K)
    assert ("qmv_h2" in name) == (K <= 18176), name
    check_qmm(xs((1, K), mx.bfloat16), q, gs, 4, what=f"h2 K={K}")


def test_qmv_h2_switch(gpu_runtime, monkeypatch):
    """QMV_HALF2 = False keeps 16-bit x on qmv's float path (plans are cached: dropped)."""
    from mlx_amd.runtime.ops import quantized as Q
    monkeypatch.setattr(Q, "QMV_HALF2", False)
    gpu_runtime.evaluator.plans.clear()
    gpu_runtime.evaluator.drop_programs()
    try:
        assert "qmv_h2" not in qmv_kernel(gpu_runtime, "bfloat16", 64, 4, 1, 64, 512)
        q = make((64, 512), 64, 4, dtype=mx.bfloat16)
        check_qmm(xs((1, 512), mx.bfloat16), q, 64, 4, what="h2 off")
    finally:
        monkeypatch.undo()
        gpu_runtime.evaluator.plans.clear()
        gpu_runtime.evaluator.drop_programs()


# --- other widths, transpose=False, fp modes --------------------------------------------------

@pytest.mark.parametrize("bits", [2, 3, 5, 6])
@pytest.mark.parametrize("gs", [32, 64])
@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("M", [1, 5, 33])
def test_affine_other_bits(gpu_runtime, bits, gs, dt, M):
    q = make((40, 256), gs, bits, dtype=DT[dt])
    check_qmm(xs((M, 256), DT[dt]), q, gs, bits, what=f"{bits}b g{gs} {dt} M={M}")


@pytest.mark.parametrize("bits,gs", [(4, 64), (8, 32), (3, 64), (6, 32)])
@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("M", [1, 8, 33])
def test_affine_not_transposed(gpu_runtime, bits, gs, dt, M):
    K, N = 96, 128               # w is (K, N) packed along N
    q = make((K, N), gs, bits, dtype=DT[dt])
    check_qmm(xs((M, K), DT[dt]), q, gs, bits, transpose=False, what=f"x @ W {bits}b {dt} M={M}")


@pytest.mark.parametrize("mode,gs,bits", [("mxfp4", 32, 4), ("mxfp8", 32, 8), ("nvfp4", 16, 4)])
@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("M", [1, 3, 33])
@pytest.mark.parametrize("transpose", [True, False])
def test_fp_modes(gpu_runtime, wave, mode, gs, bits, dt, M, transpose):
    K, N = (256, 48) if transpose else (64, 128)
    q = make((N, K) if transpose else (K, N), gs, bits, mode, dtype=DT[dt])
    check_qmm(xs((M, K), DT[dt]), q, gs, bits, mode, transpose, what=f"{mode} {dt} M={M} t={transpose}")


# --- batches and layouts ---------------------------------------------------------------------

@pytest.mark.parametrize("M", [1, 4, 40])
def test_batched_x_shared_w(gpu_runtime, M):
    q = make((64, 128), 64, 4)
    check_qmm(xs((2, 3, M, 128), F32), q, 64, 4, what=f"x (2,3,{M},K)")


@pytest.mark.parametrize("M", [1, 40])
def test_batched_w(gpu_runtime, M):
    q = make((3, 64, 128), 64, 4, dtype=mx.float16)
    check_qmm(xs((3, M, 128), mx.float16), q, 64, 4, what="w (3,N,K)")
    # w's batch broadcast against x's
    q1 = make((1, 64, 128), 64, 4, dtype=mx.float16)
    check_qmm(xs((2, M, 128), mx.float16), q1, 64, 4, what="w (1,N,K) vs x (2,M,K)")


def test_vector_x(gpu_runtime):
    q = make((64, 128), 32, 4)
    check_qmm(xs((128,), F32), q, 32, 4, what="x (K,)")


@pytest.mark.parametrize("kind", ["transposed_batch", "row_stride", "misaligned", "strided_k"])
@pytest.mark.parametrize("M", [2, 36])
def test_noncontiguous_x(gpu_runtime, kind, M):
    K = 128
    q = make((48, K), 64, 4, dtype=mx.bfloat16)
    if kind == "transposed_batch":
        x = mx.swapaxes(xs((M, 2, K), mx.bfloat16), 0, 1)                  # (2, M, K), batch stride K
    elif kind == "row_stride":
        x = xs((M, 2 * K), mx.bfloat16)[:, :K]
    elif kind == "misaligned":
        x = xs((M, K + 3), mx.bfloat16)[:, 3:]                            # base not 16-byte aligned
    else:
        x = xs((M, 2 * K), mx.bfloat16)[:, ::2]                           # copied first
    check_qmm(x, q, 64, 4, what=kind)


def test_infinite_x_matches_mlx(gpu_runtime, wave):
    q = make((16, 64), 64, 4)
    x = xs((1, 64), F32)
    x = mx.where(mx.arange(64) == 5, mx.array(float("inf")), x)
    # with an infinite x MLX's order (x times each dequantized weight) gives +-inf, not NaN
    check_qmm(x, q, 64, 4, what="inf in x")


# --- mlx-lm style ------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", ["f16", "bf16"])
@pytest.mark.parametrize("M", [1, 40])
def test_quantized_linear(gpu_runtime, dt, M):
    mx.random.seed(3)
    lin = nn.Linear(256, 96, bias=True)
    lin.set_dtype(DT[dt])
    ql = nn.QuantizedLinear.from_linear(lin, group_size=64, bits=4)
    mx.eval(ql.parameters())
    x = xs((2, M, 256), DT[dt])
    rt, at = TOL[DT[dt]]

    def ref(x):
        d = mx.dequantize(ql.weight, ql.scales.astype(F32), ql.biases.astype(F32), group_size=64, bits=4)
        return (x.astype(F32) @ d.T + ql.bias.astype(F32)).astype(x.dtype)

    check_gpu(ql, x, prims=QMM, ref_fn=ref, rtol=rt, atol=at, what=f"QuantizedLinear {dt} M={M}")


@pytest.mark.parametrize("mode,gs,bits", [("affine", 64, 4), ("affine", 32, 8), ("mxfp4", 32, 4)])
@pytest.mark.parametrize("sorted_", [False, True])
def test_gather_qmm(gpu_runtime, wave, mode, gs, bits, sorted_):
    E, N, K, T, k = 4, 40, 128, 6, 2
    q = make((E, N, K), gs, bits, mode, dtype=mx.bfloat16)
    rng = np.random.default_rng(5)
    idx = mx.array(rng.integers(0, E, (T, k)).astype(np.uint32))
    x = xs((T, 1, 1, K), mx.bfloat16)                  # SwitchGLU: (tokens, 1, M=1, K)
    if sorted_:                                        # SwitchGLU's sorted path for long prompts
        order = mx.argsort(idx.flatten())
        idx_s = idx.flatten()[order]
        x = x.reshape(T, 1, K)[order // k]             # (T*k, 1, K)
        args = (x, idx_s)
    else:
        args = (x, idx)

    def f(x, i, w, *sb):
        return mx.gather_qmm(x, w, *sb, rhs_indices=i, transpose=True, group_size=gs, bits=bits, mode=mode,
                             sorted_indices=sorted_)

    def ref(x, i, w, *sb):
        sb = tuple(a.astype(F32) for a in sb) if mode == "affine" else sb
        d = mx.dequantize(w, *sb, group_size=gs, bits=bits, mode=mode, dtype=F32)[i]   # (..., N, K)
        return (x.astype(F32) @ mx.swapaxes(d, -1, -2)).astype(x.dtype)

    rt, at = TOL[mx.bfloat16]
    check_gpu(f, *args, *q, prims=("GatherQMM",), ref_fn=ref, rtol=rt, atol=at, what=f"gather {mode} s={sorted_}")


@pytest.mark.parametrize("mode,gs,bits", [("affine", 64, 4), ("affine", 32, 8), ("affine", 128, 3), ("mxfp4", 32, 4)])
@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("transpose,M", [(True, 12), (False, 1), (False, 12)])
def test_gather_qmm_dequantized(gpu_runtime, mode, gs, bits, dt, transpose, M):
    """More than 8 rows of x, or transpose=False: the experts dequantized, then GatherMM
    (lhs and rhs indices both, a repeated expert, the last expert)."""
    E, N, K = 3, 128, 128
    wshape = (E, N, K) if transpose else (E, K, N)
    q = make(wshape, gs, bits, mode, dtype=DT[dt])
    x = xs((4, M, K), DT[dt])
    lhs = mx.array(np.array([3, 0, 2, 2, 1], np.uint32))
    rhs = mx.array(np.array([1, 2, 0, 1, 2], np.uint32))

    def f(x, l, r, w, *sb):
        return mx.gather_qmm(x, w, *sb, lhs_indices=l, rhs_indices=r, transpose=transpose, group_size=gs,
                             bits=bits, mode=mode)

    def ref(x, l, r, w, *sb):
        sb = tuple(a.astype(F32) for a in sb) if mode == "affine" else sb
        d = mx.dequantize(w, *sb, group_size=gs, bits=bits, mode=mode, dtype=F32)[r]
        d = mx.swapaxes(d, -1, -2) if transpose else d
        return (x[l].astype(F32) @ d).astype(x.dtype)

    rt, at = TOL[DT[dt]]
    check_gpu(f, x, lhs, rhs, *q, prims=("GatherQMM",), ref_fn=ref, rtol=rt, atol=at,
              what=f"gather dequant {mode} {dt} t={transpose} M={M}")


def test_gather_qmm_lhs_indices(gpu_runtime):
    q = make((3, 32, 64), 64, 4)
    x = xs((5, 2, 64), F32)                            # 5 batches of M=2
    lhs = mx.array(np.array([4, 0, 2, 2], np.uint32))
    rhs = mx.array(np.array([1, 2, 0, 1], np.uint32))

    def f(x, l, r, w, s, b):
        return mx.gather_qmm(x, w, s, b, lhs_indices=l, rhs_indices=r, transpose=True, group_size=64, bits=4)

    def ref(x, l, r, w, s, b):
        d = mx.dequantize(w, s, b, group_size=64, bits=4)[r]
        return x[l] @ mx.swapaxes(d, -1, -2)

    check_gpu(f, x, lhs, rhs, *q, prims=("GatherQMM",), ref_fn=ref, rtol=1e-4, atol=1e-4, what="lhs+rhs")


# --- quantize: bit for bit --------------------------------------------------------------------

@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
@pytest.mark.parametrize("gs", [32, 64, 128])
@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_quantize_bit_exact(gpu_runtime, bits, gs, dt):
    mx.random.seed(bits + gs)
    w = (mx.random.normal((2, 24, 256)) * 2).astype(DT[dt])
    # a flat group, a zero group and a one-sided group
    w = mx.concatenate([w, mx.full((2, 1, 256), 1.5, DT[dt]), mx.zeros((2, 1, 256), DT[dt]),
                        mx.abs(w[:, :1])], axis=1)
    mx.eval(w)
    check_gpu(lambda a: mx.quantize(a, group_size=gs, bits=bits), w, prims=("fast::Quantize",),
              rtol=0, atol=0, what=f"quantize {bits}b g{gs} {dt}")


def test_quantize_transposed_input(gpu_runtime):
    w = mx.swapaxes(xs((128, 64), F32), 0, 1)          # (64, 128), not row-contiguous
    check_gpu(lambda a: mx.quantize(a, group_size=64, bits=4), w, prims=("fast::Quantize",), rtol=0, atol=0)


def test_quantize_then_matmul_on_gpu(gpu_runtime):
    # the whole mlx-lm conversion + forward path stays on the GPU
    w = xs((64, 128), mx.float16)
    x = xs((1, 128), mx.float16)

    def f(w, x):
        q = mx.quantize(w, group_size=64, bits=4)
        return mx.quantized_matmul(x, *q, transpose=True, group_size=64, bits=4)

    def ref(w, x):
        q = mx.quantize(w, group_size=64, bits=4)
        d = mx.dequantize(q[0], q[1].astype(F32), q[2].astype(F32), group_size=64, bits=4)
        return (x.astype(F32) @ d.T).astype(x.dtype)

    check_gpu(f, w, x, prims=("fast::Quantize", "QuantizedMatmul"), ref_fn=ref, rtol=5e-3, atol=5e-3)


# --- ConvertFP8: bit for bit ----------------------------------------------------------------------

@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_to_fp8(gpu_runtime, dt):
    rng = np.random.default_rng(7)
    v = rng.standard_normal(5000).astype(np.float32) * 10.0 ** rng.integers(-9, 4, 5000)
    v = np.concatenate([v, np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 448, 464, 463.9, 1e30, 2.0 ** -9,
                                     3 * 2.0 ** -10, 0.9 * 2.0 ** -6], np.float32)])
    a = mx.array(v).astype(DT[dt])
    mx.eval(a)
    check_gpu(mx.to_fp8, a, prims=("fast::ConvertFP8",), rtol=0, atol=0, what=f"to_fp8 {dt}")
    # a transposed view is copied first
    t = mx.swapaxes(a[:5000].reshape(100, 50), 0, 1)
    check_gpu(mx.to_fp8, t, prims=("fast::ConvertFP8",), rtol=0, atol=0, what=f"to_fp8 {dt} transposed")


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_from_fp8(gpu_runtime, dt):
    codes = mx.array(np.tile(np.arange(256, dtype=np.uint8), 3))
    mx.eval(codes)
    check_gpu(lambda c: mx.from_fp8(c, dtype=DT[dt]), codes, prims=("fast::ConvertFP8",), rtol=0, atol=0,
              what=f"from_fp8 {dt}")


# --- QQMatmul (mx.qqmm): x quantized to w's fp mode and back, then the quantized product ----

QQ = ("QQMatmul",)


def qqmm(gs, bits, mode):
    def f(x, w, s):
        return mx.qqmm(x, w, s, group_size=gs, bits=bits, mode=mode)
    return f


def qqmm_ref(gs, bits, mode):
    """MLX's own CPU QQMatmul row by row (it takes one row of x at a time) on x in float32,
    rounded to x's dtype: its x quantization is the arithmetic under test, and float32 keeps
    its accumulation (in x's dtype on the x86 CPU) from being the larger error."""
    def f(x, w, s):
        rows = x.reshape(-1, x.shape[-1]).astype(F32)
        ys = [mx.qqmm(rows[i:i + 1], w, s, group_size=gs, bits=bits, mode=mode) for i in range(rows.shape[0])]
        y = mx.concatenate(ys, axis=0) if ys else mx.zeros((0, w.shape[0]), F32)
        return y.reshape(*x.shape[:-1], w.shape[0]).astype(x.dtype)
    return f


QQ_MODES = [("mxfp4", 32, 4), ("mxfp8", 32, 8), ("nvfp4", 16, 4)]


@pytest.mark.parametrize("mode,gs,bits", QQ_MODES)
@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("shape", [(1, 256), (5, 256), (2, 3, 40, 256)], ids=["M1", "M5", "batch-M40"])
def test_qqmm(gpu_runtime, mode, gs, bits, dt, shape):
    """Every row as MLX's CPU computes one row (the only case MLX's CPU takes): the decode
    (qmv) and prefill (dequantize + GEMM) products of the quantized-and-back x. x spans a few
    binades so that groups get different scales."""
    N, K = 48, shape[-1]
    q = make((N, K), gs, bits, mode, dtype=DT[dt])
    mx.random.seed(3)
    x = (mx.random.normal(shape) * mx.power(4.0, mx.random.randint(-2, 3, shape).astype(F32))).astype(DT[dt])
    mx.eval(x)
    rt, at = TOL[DT[dt]]
    with plain_mlx():
        scale = float(np.abs(np.array(qqmm_ref(gs, bits, mode)(x, *q).astype(F32))).max())
    check_gpu(qqmm(gs, bits, mode), x, *q, prims=QQ, ref_fn=qqmm_ref(gs, bits, mode), rtol=rt, atol=at * scale,
              what=f"qqmm {mode} {dt} {shape}")


@pytest.mark.parametrize("mode,gs,bits", QQ_MODES)
def test_qqmm_edges(gpu_runtime, mode, gs, bits):
    """A transposed view of x (copied first), a zero group, tiny values, NaN and inf in x:
    MLX's CPU result, NaN places included."""
    N, K = 32, 128
    q = make((N, K), gs, bits, mode)
    mx.random.seed(5)
    xt = mx.random.normal((K, 3)).T            # (3, K), not row-contiguous
    check_gpu(qqmm(gs, bits, mode), xt, *q, prims=QQ, ref_fn=qqmm_ref(gs, bits, mode), rtol=1e-4, atol=1e-4,
              what=f"qqmm {mode} transposed x")
    v = np.array(mx.random.normal((1, K)))
    v[0, :gs] = 0.0
    v[0, gs:2 * gs] *= 1e-30
    v[0, 2 * gs + 1] = np.nan        # left out of its group's scale, then a finite code
    check_gpu(qqmm(gs, bits, mode), mx.array(v), *q, prims=QQ, rtol=1e-4, atol=1e-4,
              what=f"qqmm {mode} zero/tiny/NaN groups")
    v[0, 2 * gs + 1] = 1.0
    v[0, 3 * gs - 1] = np.inf        # an infinite scale (mx modes: NaN everywhere; nvfp4 saturates)
    check_gpu(qqmm(gs, bits, mode), mx.array(v), *q, prims=QQ, rtol=1e-4, atol=1e-4,
              what=f"qqmm {mode} inf")


@pytest.mark.parametrize("mode,gs,bits", QQ_MODES)
@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("M", [1, 3, 12])
def test_gather_qqmm(gpu_runtime, mode, gs, bits, dt, M):
    """mx.gather_qqmm (MLX's CPU raises: not implemented there): every output is MLX's CPU
    QQMatmul of the gathered x row and expert w, row by row."""
    E, N, K = 4, 40, 128
    q = make((E, N, K), gs, bits, mode, dtype=DT[dt])
    x = xs((3, M, K), DT[dt])
    lhs, rhs = mx.array([2, 0, 1, 1], mx.uint32), mx.array([3, 3, 0, 2], mx.uint32)
    mx.eval(lhs, rhs)

    def f(x, w, s, lhs, rhs):
        return mx.gather_qqmm(x, w, s, lhs_indices=lhs, rhs_indices=rhs, group_size=gs, bits=bits, mode=mode)

    def ref(x, w, s, lhs, rhs):
        one = qqmm_ref(gs, bits, mode)
        outs = [one(x[int(i)], w[int(j)], s[int(j)]) for i, j in zip(lhs.tolist(), rhs.tolist())]
        return mx.stack(outs)

    rt, at = TOL[DT[dt]]
    check_gpu(f, x, *q, lhs, rhs, prims=("GatherQQMM",), ref_fn=ref, rtol=rt, atol=at,
              what=f"gather_qqmm {mode} {dt} M={M}")


DQ = ("mlx_amd::Dequantize",)


@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("bits,gs", [(2, 32), (3, 64), (4, 64), (4, 128), (5, 32), (6, 64), (8, 128)])
def test_dequantize(gpu_runtime, dt, bits, gs):
    """mx.dequantize (affine) while enabled: one mlx_amd::Dequantize node on the prefill's
    dequantize kernel against MLX's decomposition: a batch of matrices, one matrix, gathered
    rows (a quantized embedding's lookup), strided rows; an explicit dtype other
    than the scales', and the fp modes, stay MLX's own function."""
    w, s, b = make((2, 24, 256), gs, bits, dtype=getattr(mx, dt))

    def f(w, s, b):
        return mx.dequantize(w, s, b, group_size=gs, bits=bits)

    tol = dict(rtol=0, atol=0)   # bit for bit (dequant_weight: MLX's roundings in T)
    check_gpu(f, w, s, b, prims=DQ, what=f"{dt} {bits}/{gs} batch", **tol)
    check_gpu(lambda w, s, b: f(w[1], s[1], b[1]), w, s, b, prims=DQ, what="matrix", **tol)
    idx = mx.array([3, 0, 17, 3])
    check_gpu(lambda w, s, b, i: f(w[0][i], s[0][i], b[0][i]), w, s, b, idx, prims=DQ, what="rows", **tol)
    check_gpu(lambda w, s, b: f(w[:, ::3], s[:, ::3], b[:, ::3]), w, s, b, prims=DQ, what="strided", **tol)
    check_gpu(lambda w, s, b: mx.dequantize(w, s, b, group_size=gs, bits=bits, dtype=mx.float32), w, s, b,
              what="float32 out")


def test_dequantize_other_modes_and_errors(gpu_runtime):
    w, s = make((8, 64), 32, 4, mode="mxfp4")[:2]
    check_gpu(lambda w, s: mx.dequantize(w, s, group_size=32, bits=4, mode="mxfp4"), w, s, what="mxfp4")
    q, sc, b = make((8, 128), 64, 4)
    with pytest.raises(ValueError, match="Shape of scales and biases"):
        mx.dequantize(q, sc, b, group_size=32, bits=4)
    with pytest.raises(ValueError, match="at least 2 dimension"):
        mx.dequantize(q[0], sc[0], b[0], group_size=64, bits=4)
