"""mx.compile'd functions on the GPU: each Compiled node is one kernel generated at run
time (runtime/ops/compiled.py + runtime/jit.py), compared with plain MLX."""

import time

import mlx.core as mx
import mlx.nn as nn
import pytest

import mlx_amd
from mlx_amd.runtime import jit
from mlx_amd.runtime.ops import compiled as C
from oracle import assert_close, plain_mlx

pytestmark = pytest.mark.gpu

TOL = {"float32": (2e-5, 1e-6), "float16": (5e-3, 2e-3), "bfloat16": (3e-2, 2e-2)}
DTYPES = [mx.float32, mx.float16, mx.bfloat16]


@pytest.fixture
def fresh_jit(gpu_runtime, tmp_path, monkeypatch):
    """An empty JIT cache (memory and disk) and plan cache for the test."""
    monkeypatch.setenv("MLX_AMD_JIT_CACHE", str(tmp_path / "jit"))
    jit.set_cache(None)
    gpu_runtime.evaluator.plans.clear()
    yield jit.cache()
    gpu_runtime.evaluator.plans.clear()
    jit.set_cache(None)


def leaves(t):
    return list(t) if isinstance(t, (list, tuple)) else [t]


def check_compiled(cf, *args, what=""):
    """cf(*args) under mlx-amd == under plain MLX, and every Compiled node ran on the GPU."""
    with plain_mlx():
        mx.enable_compile()
        mx.eval(list(args))
        ref = cf(*args)
        mx.eval(leaves(ref))
    mx.enable_compile()   # until enable() stops calling mx.disable_compile()
    mlx_amd.stats(reset=True)
    got = cf(*args)
    mx.eval(leaves(got))
    by = mlx_amd.stats()["by_primitive"].get("Compiled", {})
    assert by.get("cpu", 0) == 0 and by.get("gpu", 0) > 0, f"{what}: Compiled ran {by}; {C.last_jit_error()}"
    for i, (g, r) in enumerate(zip(leaves(got), leaves(ref))):
        name = str(r.dtype).split(".")[-1]
        rt, at = TOL.get(name, (0, 0))
        assert_close(g, r, f"{what} output {i}", rtol=rt, atol=at)
    return got


def rnd(shape, dt, scale=3.0):
    return (mx.random.normal(shape) * scale).astype(dt)


def layouts(shape, dt):
    """(name, array) pairs of one logical shape in several layouts."""
    r, c = shape
    yield "contiguous", rnd((r, c), dt)
    yield "transposed", rnd((c, r), dt).T
    yield "sliced", rnd((r + 3, 2 * c), dt)[2:r + 2, ::2]
    yield "broadcast_row", mx.broadcast_to(rnd((1, c), dt), (r, c))


MLX_LM = {
    "silu_mul": (lambda a, b: nn.silu(a) * b, 2),
    "gelu": (lambda a: nn.gelu(a), 1),
    "gelu_approx": (lambda a: nn.gelu_approx(a), 1),
    "gelu_fast": (lambda a: nn.gelu_fast_approx(a), 1),
    "softplus": (lambda a: nn.softplus(a), 1),
    "softcap": (lambda a: mx.tanh(a / 30.0) * 30.0, 1),
    "relu2_mix": (lambda a, b: mx.square(nn.relu(a)) + mx.maximum(a, b) - mx.minimum(a, b) * 0.5, 2),
    # sampler math: temperature, top-p mask over sorted cumulative probabilities
    "top_p": (lambda logits, cum: mx.where(cum > 1 - 0.9, logits * (1 / 0.7), -float("inf")), 2),
}


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("name", list(MLX_LM))
def test_mlx_lm_activations(gpu_runtime, fresh_jit, name, dt):
    fn, n = MLX_LM[name]
    cf = mx.compile(fn)
    args = [rnd((33, 70), dt) for _ in range(n)]
    if name == "top_p":
        args[1] = mx.random.uniform(shape=(33, 70)).astype(dt)
    check_compiled(cf, *args, what=f"{name} {dt}")


@pytest.mark.parametrize("dt", [mx.float32, mx.float16], ids=["float32", "float16"])
def test_layouts(gpu_runtime, fresh_jit, dt):
    cf = mx.compile(lambda a, b: nn.silu(a) * b + 1.0)
    for la, a in layouts((24, 40), dt):
        for lb, b in layouts((24, 40), dt):
            check_compiled(cf, a, b, what=f"{la} x {lb}")
    # lower-rank operand, 0-d operand, empty arrays
    check_compiled(cf, rnd((5, 6, 7), dt), rnd((7,), dt), what="rank broadcast")
    check_compiled(cf, rnd((5, 7), dt), mx.array(2.0, dtype=dt), what="0-d")
    mx.enable_compile()
    y = mx.compile(lambda a, b: nn.silu(a) * b + 1.0)(rnd((0, 4), dt), rnd((0, 4), dt))
    mx.eval(y)
    assert y.shape == (0, 4)


@pytest.mark.parametrize("dt", [mx.bfloat16, mx.float32], ids=["bfloat16", "float32"])
def test_dense_offsets_and_tails(gpu_runtime, fresh_jit, dt):
    """The dense kernel's vector body (16-byte aligned operands) and its element path (an
    operand at an odd element offset), with tails that are not a whole group."""
    cf = mx.compile(lambda a, b: nn.silu(a) * b)
    for n in (1000, 1003, 4096 * 33 + 5):
        for off_a, off_b in ((0, 0), (1, 0), (0, 3), (8, 8)):
            a = rnd((n + 8,), dt)[off_a:off_a + n]
            b = rnd((n + 8,), dt)[off_b:off_b + n]
            check_compiled(cf, a, b, what=f"n {n} offsets {off_a} {off_b}")


def test_edge_values(gpu_runtime, fresh_jit):
    x = mx.array([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-30, -1e30, 65504.0, 7e-8])
    cf = mx.compile(lambda a, b: (mx.exp(a) - b, mx.maximum(a, b) * 2, mx.sigmoid(a) + b))
    for dt in DTYPES:
        a = x.astype(dt)
        check_compiled(cf, a, a[::-1], what=f"edge {dt}")


def test_integer_and_bool_ops(gpu_runtime, fresh_jit):
    cf = mx.compile(lambda a, b: ((a * b + 7) // 1 - (a >> 2), (a > b) & (b != 0), (a ^ b) | 5))
    for dt in (mx.int32, mx.int64, mx.uint8, mx.int16, mx.uint32):
        a = mx.random.randint(-100, 100, (17, 9)).astype(dt)
        b = mx.random.randint(-100, 100, (17, 9)).astype(dt)
        check_compiled(cf, a, b, what=f"ints {dt}")
    wrap = mx.compile(lambda a, b: a * b + a)
    big = mx.array([2**31 - 1, -2**31, 123456789], dtype=mx.int32)
    check_compiled(wrap, big, big, what="int32 wrap")
    casts = mx.compile(lambda a: (a * 1.5).astype(mx.int32) + mx.abs(a).astype(mx.uint8))
    check_compiled(casts, mx.array([0.5, -2.7, 300.2, float("nan"), 1e10, -1e10]), what="float->int")
    logic = mx.compile(lambda a, b: mx.logical_or(mx.logical_not(a), mx.logical_and(a, b)))
    check_compiled(logic, mx.array([True, False, True, False]), mx.array([True, True, False, False]))


def test_multiple_outputs(gpu_runtime, fresh_jit):
    def fn(a, b):
        y = mx.exp(a * b)
        return y * 2, y
    check_compiled(mx.compile(fn), rnd((50, 3), mx.float32, 1.0), rnd((50, 3), mx.float32, 1.0))


@pytest.mark.vendor
def test_shapeless_recompiles_only_for_new_dtypes(gpu_runtime, fresh_jit):
    # the generated source carries no shapes (strides and extents are arguments), so
    # neither a new shape nor a new rank compiles again; a new dtype does
    cf = mx.compile(lambda a, b: nn.silu(a) * b, shapeless=True)
    for shape in [(4, 8), (64, 128), (3, 5), (2, 3, 4)]:
        check_compiled(cf, rnd(shape, mx.float32), rnd(shape, mx.float32), what=str(shape))
    assert fresh_jit.stats["compiles"] == 1, fresh_jit.stats
    check_compiled(cf, rnd((4, 8), mx.float16), rnd((4, 8), mx.float16), what="float16")
    assert fresh_jit.stats["compiles"] == 2


@pytest.mark.vendor
def test_disk_cache_is_used_by_a_fresh_process_cache(gpu_runtime, fresh_jit):
    cf = mx.compile(lambda a: nn.gelu_approx(a) * 3)
    check_compiled(cf, rnd((8, 8), mx.float32))
    assert fresh_jit.stats["compiles"] == 1
    jit.set_cache(None)            # same folder, empty memory: as a new process would
    gpu_runtime.evaluator.plans.clear()
    check_compiled(mx.compile(lambda a: nn.gelu_approx(a) * 3), rnd((8, 8), mx.float32))
    assert jit.cache().stats["compiles"] == 0 and jit.cache().stats["disk_hits"] == 1


def test_first_compile_time(gpu_runtime, fresh_jit):
    timings = {}
    for name in ("silu_mul", "gelu_approx"):
        fn, n = MLX_LM[name]
        t = time.perf_counter()
        check_compiled(mx.compile(fn), *[rnd((256, 512), mx.bfloat16) for _ in range(n)], what=name)
        timings[name] = (fresh_jit.stats["last_compile_seconds"], time.perf_counter() - t)
    for name, (comp, total) in timings.items():
        print(f"first compile {name} bf16: compiler {comp * 1e3:.0f} ms, whole call {total * 1e3:.0f} ms")
    assert all(c < 5.0 for c, _ in timings.values()), timings   # target < 1 s


def test_uncovered_tape_runs_node_by_node(gpu_runtime, fresh_jit, monkeypatch):
    def refuse(*a, **k):
        raise C.Unsupported("forced for the test")
    monkeypatch.setattr(C, "fused_source", refuse)
    before = C.STATS["by_node"]
    check_compiled(mx.compile(lambda a, b: mx.exp(a * b) + 1), rnd((16, 16), mx.float32, 1.0),
                   rnd((16, 16), mx.float32, 1.0), what="node by node")
    assert C.STATS["by_node"] > before
