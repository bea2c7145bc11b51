"""Sibling matvecs on the GPU: an attention's q/k/v projections (and an MLP's gate/up) on
one x run as one launch (evaluator SIBLINGS: quantized qmv_h2, the gemv of bf16 decode),
at the first sighting in Python, when recorded, and in native replays with and without
CUDA/HIP graphs. Every evaluation is compared with MLX's CPU result (the tolerances of
tests/ops/test_quantized_gpu.py and test_matmul_gpu.py: float32 accumulation against a
float32 reference, rounded to x's dtype), and the launch count shows the fusion happened."""

import math

import mlx.core as mx
import numpy as np
import pytest

from oracle import assert_close, plain_mlx

pytestmark = pytest.mark.gpu

F32 = mx.float32
TOL = {mx.float16: (5e-3, 5e-3), mx.bfloat16: (2e-2, 3e-2), mx.float32: (1e-4, 1e-4)}
# qmv_h2 sums float16 products in half precision (quantized.hip: ~2^-12 of the terms per
# 16-term half sum) over k up to 4096 here: on O(1) outputs a few of thousands of rows land
# ~6e-3 from the float32 reference, with or without siblings (test_quantized_gpu.py's
# dynamic-range test allows 4e-3 times x's scale for the same reason)
QTOL = {**TOL, mx.float16: (5e-3, 1e-2)}


def _x(K, dtype, seed, L=1):
    mx.random.seed(seed)
    x = (mx.random.normal((1, L, K)) / math.sqrt(K)).astype(dtype)
    mx.eval(x)
    return x


class _Counting:
    """The evaluator's native launcher, counting the launches Python makes (first
    sightings); replays launch from native code, past it. Plans made while it counts
    launch through it, not straight through bridge.launch_refs."""

    direct_launches = False

    def __init__(self, real):
        self.real, self.n = real, 0

    def __call__(self, *a):
        self.n += 1
        return self.real(*a)

    def __getattr__(self, name):
        return getattr(self.real, name)


def _run_steps(rt, step, args, ref, steps=6, tol=TOL, compare=None):
    """Evaluate step(x_t, *args) for several x_t (args[0] is x's (K, dtype): a new random
    row each time, so a stale output cannot pass) under mlx-amd and compare each output
    with ref(x_t, *args) under plain MLX (or ``compare(got, want, t)`` does). Returns the
    launches Python made per evaluation, the replays and the nodes replays handed back to
    Python."""
    ev = rt.evaluator
    launches = []
    replays0, back0 = ev.replays, ev.replay_python
    for t in range(steps):
        with plain_mlx():
            x = _x(*args[0][:2], 100 + t, *args[0][2:])
            want = ref(x, *args[1:])
            mx.eval(want)
        real = ev.native
        ev.native = counting = _Counting(real)
        try:
            got = step(x, *args[1:])
            mx.eval(got)
        finally:
            ev.native = real
        launches.append(counting.n)
        if compare is not None:
            compare(got, want, t)
            continue
        for j, (g, w) in enumerate(zip(got, want)):
            rt_, at = tol[w.dtype]
            assert_close(g, w, f"step {t} output {j}", rt_, at)
    return launches, ev.replays - replays0, ev.replay_python - back0


def _on_then_off(rt, monkeypatch, table, step, args, ref, compare, prims):
    """Run the steps with the grouping as it is, then with the evaluator's ``table``
    (CHAINS, TAILS) emptied, each from a fresh recording: both compare every step, the first
    replays natively with nothing back in Python, and ``prims`` ran on the GPU only. Returns
    the launches Python made per first-sighting evaluation, on and off."""
    from mlx_amd.runtime import evaluator as E

    launches, replays, back = _run_steps(rt, step, args, ref, compare=compare)
    assert launches[0] == launches[1] and replays == 4 and back == 0, (launches, replays, back)
    by = rt.evaluator.stats.by_prim
    assert all(by[p]["cpu"] == 0 for p in prims), {p: by[p] for p in prims}
    monkeypatch.setattr(E, table, {})
    ev = rt.evaluator
    ev.drop_programs()
    ev._seen.clear()
    ev._sib_groups.clear()
    off, _, back = _run_steps(rt, step, args, ref, compare=compare)
    assert off[0] == off[1] and back == 0, off
    return launches[0], off[0]


@pytest.fixture(params=[False, True], ids=["eager", "graphs"])
def graphs(request, gpu_runtime, monkeypatch):
    ev = gpu_runtime.evaluator
    if request.param and not ev.graphs:
        pytest.skip("this device's driver runs no graphs")
    monkeypatch.setattr(ev, "graphs", request.param)
    ev.drop_programs()
    ev._seen.clear()     # each test's graph is recorded at its own second sighting
    ev._sib_groups.clear()   # (groups are cached by structure: a test may switch the tables)
    yield request.param
    ev.drop_programs()
    ev._sib_groups.clear()


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("bits,gs", [(4, 64), (8, 32), (2, 128)])
@pytest.mark.parametrize("rows,K", [((512, 128, 128), 1024), ((256, 1000), 512), ((4096, 1024, 1024), 4096)])
def test_quantized_siblings(gpu_runtime, graphs, dt, bits, gs, rows, K):
    dtype = {"bf16": mx.bfloat16, "f16": mx.float16}[dt]
    qs = []
    for j, n in enumerate(rows):
        mx.random.seed(10 + j)
        q = mx.quantize(mx.random.normal((n, K)).astype(dtype), group_size=gs, bits=bits)
        mx.eval(*q)
        qs.extend(q)

    def step(x, *flat):
        return [mx.quantized_matmul(x, *flat[3 * j: 3 * j + 3], transpose=True, group_size=gs, bits=bits)
                for j in range(len(rows))]

    def ref(x, *flat):   # float32 products (MLX's x86 CPU sums in x's dtype), rounded to it
        outs = []
        for j in range(len(rows)):
            w, s, b = flat[3 * j: 3 * j + 3]
            d = mx.dequantize(w, s.astype(F32), b.astype(F32), group_size=gs, bits=bits, dtype=F32)
            outs.append((x.astype(F32) @ d.T).astype(x.dtype))
        return outs

    launches, replays, back = _run_steps(gpu_runtime, step, [(K, dtype)] + qs, ref, tol=QTOL)
    by = gpu_runtime.evaluator.stats.by_prim["QuantizedMatmul"]
    assert by["cpu"] == 0 and by["gpu"] >= 6 * len(rows)
    # one launch for all matrices at the two sightings in Python (x is a leaf: evaluated
    # under plain MLX first); then replays that run every node natively, the siblings with
    # their first node
    assert launches[:2] == [1, 1] and replays == 4 and back == 0, (launches, replays, back)


@pytest.mark.parametrize("dt", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("rows,K", [((2048, 512, 512), 2048), ((64, 1000), 256), ((8192, 8192), 2048)])
def test_gemv_siblings(gpu_runtime, graphs, dt, rows, K):
    dtype = {"bf16": mx.bfloat16, "f16": mx.float16, "f32": mx.float32}[dt]
    ws = []
    for j, n in enumerate(rows):
        mx.random.seed(20 + j)
        w = mx.random.normal((n, K)).astype(dtype)
        mx.eval(w)
        ws.append(w)

    def step(x, *ws):
        return [x @ w.T for w in ws]

    def ref(x, *ws):
        return [(x.astype(F32) @ w.astype(F32).T).astype(x.dtype) for w in ws]

    launches, replays, back = _run_steps(gpu_runtime, step, [(K, dtype)] + ws, ref)
    by = gpu_runtime.evaluator.stats.by_prim["Matmul"]
    assert by["cpu"] == 0 and by["gpu"] >= 6 * len(rows)
    assert launches[:2] == [1, 1] and replays == 4 and back == 0, (launches, replays, back)


def test_siblings_off_switch_gives_one_launch_each(gpu_runtime, monkeypatch):
    """MLX_AMD_SIBLINGS=0 (an empty table): every matvec its own launch, same results."""
    from mlx_amd.runtime import evaluator as E

    monkeypatch.setattr(E, "SIBLINGS", {})
    ev = gpu_runtime.evaluator
    monkeypatch.setattr(ev, "graphs", False)
    ev.drop_programs()
    ev._seen.clear()
    ev._sib_groups.clear()
    ws = []
    for j, n in enumerate((256, 64, 64)):
        mx.random.seed(30 + j)
        w = mx.random.normal((n, 512)).astype(mx.bfloat16)
        mx.eval(w)
        ws.append(w)
    launches, _, _ = _run_steps(gpu_runtime, lambda x, *ws: [x @ w.T for w in ws], [(512, mx.bfloat16)] + ws,
                                lambda x, *ws: [(x.astype(F32) @ w.astype(F32).T).astype(x.dtype) for w in ws])
    ev.drop_programs()
    ev._sib_groups.clear()
    assert launches[:2] == [3, 3], launches


@pytest.mark.parametrize("dt", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("shape", [(1, 1, 4096), (1, 7, 2048), (3, 1000)])
def test_residual_add_and_rms_norm_pair(gpu_runtime, graphs, monkeypatch, dt, shape):
    """An Add whose sum an RMSNorm reads (a transformer block's residual and next norm) runs
    as one launch (norm_r_rmsadd) writing both the sum and its norm: equal to MLX on the CPU
    within the oracle's tolerances (as the norm tests), and bit for bit what the two nodes
    give unpaired. (h * 2.0 reads the sum later: the residual path.)"""
    from mlx_amd.runtime import evaluator as E

    dtype = {"bf16": mx.bfloat16, "f16": mx.float16, "f32": mx.float32}[dt]
    K = shape[-1]
    mx.random.seed(7)
    w = (1.0 + 0.1 * mx.random.normal((K,))).astype(dtype)
    r = mx.random.normal(shape).astype(dtype)
    mx.eval(w, r)

    def step(x, r, w):
        h = x + r
        return [h, mx.fast.rms_norm(h, w, 1e-5), h * 2.0]

    ev = gpu_runtime.evaluator

    def xs(seed):
        with plain_mlx():
            mx.random.seed(seed)
            x = mx.random.normal(shape).astype(dtype)
            mx.eval(x)
        return x

    # the reference: the same program on MLX's CPU (mx.fast.rms_norm decomposed there)
    launches, replays, back = _run_steps_shaped(gpu_runtime, step, xs, [r, w], step)
    assert launches[:2] == [2, 2] and replays == 4 and back == 0, (launches, replays, back)
    by = ev.stats.by_prim
    assert by["mlx_amd::RMSNorm"]["cpu"] == 0 and by["Add"]["cpu"] == 0
    # unpaired: the same values bit for bit (same roundings, same reduction order)
    x = xs(3)
    paired = step(x, r, w)
    mx.eval(paired)
    monkeypatch.setattr(E, "PAIRS", {})
    ev.drop_programs()
    ev._seen.clear()
    ev._sib_groups.clear()
    alone = step(x, r, w)
    mx.eval(alone)
    ev._sib_groups.clear()   # (cached without the pair: drop it for the tests after)
    for p, a in zip(paired, alone):
        with plain_mlx():
            assert np.array_equal(np.array(p.astype(F32)), np.array(a.astype(F32)))


def _run_steps_shaped(rt, step, make_x, rest, ref, steps=6):
    """_run_steps for an x of any shape: make_x(seed) under plain MLX."""
    ev = rt.evaluator
    launches = []
    replays0, back0 = ev.replays, ev.replay_python
    for t in range(steps):
        x = make_x(100 + t)
        with plain_mlx():
            want = ref(x, *rest)
            mx.eval(want)
        real = ev.native
        ev.native = counting = _Counting(real)
        try:
            got = step(x, *rest)
            mx.eval(got)
        finally:
            ev.native = real
        launches.append(counting.n)
        for j, (g, w) in enumerate(zip(got, want)):
            assert_close(g, w, f"step {t} output {j}")   # the oracle's tolerances by dtype
    return launches, ev.replays - replays0, ev.replay_python - back0


_CHAIN_CASES = [(4, 64, (512, 128, 128), 1024, 1), (8, 32, (256,), 512, 1), (2, 128, (1024, 1000), 2048, 1),
                (4, 64, (64, 32), 4096, 1), (4, 64, (128, 64), 512, 2), (0, 0, (512, 128, 128), 1024, 1),
                (0, 0, (300,), 2048, 1), (0, 0, (64, 32), 512, 2)]


# (qmv_h2 and its chain take 16-bit x: float32 with dense projections only)
@pytest.mark.parametrize("dt,bits,gs,rows,K,L", [(dt,) + c for c in _CHAIN_CASES for dt in ("bf16", "f16")]
                         + [("f32",) + c for c in _CHAIN_CASES if c[0] == 0])
def test_residual_norm_projections_chain(gpu_runtime, graphs, monkeypatch, dt, bits, gs, rows, K, L):
    """An Add, the RMSNorm of its sum and the projections of the norm's output (a
    transformer block's residual, next norm and q/k/v or gate/up) run as one launch
    (quantized: qmv_h2n; dense, bits 0: gemv_rmsrows; each block makes the norm's row
    itself), at the first sightings and in native
    replays: the sum and the norm (both read later) equal MLX on the CPU within the oracle's
    tolerances, and every product is the float32 product of that norm's output (an ulp of
    the norm moves a product of k terms by ~sqrt(k) ulps: compared with the CPU's own norm,
    small products would fail for that alone) within the tolerances above. With the chains
    off: the pair and the projections, one launch each; and so with them on for two rows (a
    prompt: qmv_h2n takes one)."""
    from mlx_amd.runtime import evaluator as E

    from mlx_amd.runtime.ops import matmul

    if not bits:   # dense chains are opt-in (MLX_AMD_DENSE_CHAINS=1): on for this test
        monkeypatch.setattr(matmul, "CHAINS_AFTER", matmul.DENSE_CHAINS)
        monkeypatch.setattr(E, "CHAINS", E.chain_table(E.DISPATCH, E.PAIRS))
        gpu_runtime.evaluator._sib_groups.clear()
    dtype = {"bf16": mx.bfloat16, "f16": mx.float16, "f32": mx.float32}[dt]
    mx.random.seed(11)
    w = (1.0 + 0.1 * mx.random.normal((K,))).astype(dtype)
    r = mx.random.normal((1, L, K)).astype(dtype)
    qs = []
    for j, n in enumerate(rows):
        mx.random.seed(40 + j)   # weights ~1/sqrt(k), as a model's: products O(1) from the O(1) norm
        m = (mx.random.normal((n, K)) / math.sqrt(K)).astype(dtype)
        qs.extend(mx.quantize(m, group_size=gs, bits=bits) if bits else (m,))
    mx.eval(w, r, *qs)

    def weight(flat, j):         # projection j's matrix as float32
        if not bits:
            return flat[j].astype(F32)
        wq, s, b = flat[3 * j: 3 * j + 3]
        return mx.dequantize(wq, s.astype(F32), b.astype(F32), group_size=gs, bits=bits, dtype=F32)

    def projections(y, flat):
        if not bits:
            return [y @ flat[j].T for j in range(len(rows))]
        return [mx.quantized_matmul(y, *flat[3 * j: 3 * j + 3], transpose=True, group_size=gs, bits=bits)
                for j in range(len(rows))]

    def step(x, r, w, *flat):
        h = x * 64.0 + r           # x: O(1/sqrt(K)); the sum O(1)
        y = mx.fast.rms_norm(h, w, 1e-5)
        return [h * 2.0, y] + projections(y, flat)

    def ref(x, r, w, *flat):       # MLX's CPU sum and norm
        h = x * 64.0 + r
        return [h * 2.0, mx.fast.rms_norm(h, w, 1e-5)]

    def compare(got, want, t):
        assert_close(got[0], want[0], f"step {t}: the sum")
        assert_close(got[1], want[1], f"step {t}: the norm")
        with plain_mlx():
            y = mx.array(np.array(got[1].astype(F32))).astype(dtype)
            for j in range(len(rows)):
                want_j = (y.astype(F32) @ weight(qs, j).T).astype(dtype)
                assert_close(got[2 + j], want_j, f"step {t}: product {j}", *(QTOL if bits else TOL)[dtype])

    # x * 64 and h * 2 besides the chain's one launch; nothing handed back to Python
    on, off = _on_then_off(gpu_runtime, monkeypatch, "CHAINS", step, [(K, dtype, L), r, w] + qs, ref, compare,
                           ("QuantizedMatmul", "mlx_amd::RMSNorm"))
    # one launch fewer for one row; none for two (the projections then as qmv_h2 or qmv_mma
    # would take them, with or without siblings)
    assert on == off - (L == 1) and (L > 1 or on == 3), (on, off)



_SWIGLU = mx.compile(lambda g, u: mx.sigmoid(g) * g * u, shapeless=True)   # mlx-lm's swiglu


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("bits,gs,K,N,chain", [(4, 64, 1024, 512, False), (4, 64, 4096, 960, True),
                                               (8, 32, 512, 256, True), (2, 128, 2048, 384, False)])
def test_swiglu_tail(gpu_runtime, graphs, monkeypatch, dt, bits, gs, K, N, chain):
    """mlx-lm's MLP at decode: gate and up projections (siblings), their compiled swiglu
    (the group's tail), the down projection of it; with ``chain`` after a residual add and its
    RMS norm (the chain's projections). Gate, up and swiglu run as one qmv_h2g (qmv_h2ng)
    launch, at the first sightings and in native replays: gate and up are the float32
    products of x within QTOL and the swiglu equals MLX's CPU swiglu of those gate and up;
    the down projection follows from it. With the tails off: the swiglu's own launches more."""

    dtype = {"bf16": mx.bfloat16, "f16": mx.float16}[dt]
    mx.random.seed(3)
    w = (1.0 + 0.1 * mx.random.normal((K,))).astype(dtype)
    r = mx.random.normal((1, 1, K)).astype(dtype)
    qs = []
    for j, (n, k) in enumerate(((N, K), (N, K), (K, N))):
        mx.random.seed(60 + j)
        # gate and up O(1) where the swiglu bends: x of norm 1 (_x), or of O(1) values (the norm)
        scale = 1.0 / math.sqrt(k) if chain or j == 2 else 1.0
        qs.extend(mx.quantize((mx.random.normal((n, k)) * scale).astype(dtype), group_size=gs, bits=bits))
    mx.eval(w, r, *qs)

    def qmm(x, j, flat):
        return mx.quantized_matmul(x, *flat[3 * j: 3 * j + 3], transpose=True, group_size=gs, bits=bits)

    def step(x, r, w, *flat):
        if chain:
            h = x * 64.0 + r
            x = mx.fast.rms_norm(h, w, 1e-5)
        g, u = qmm(x, 0, flat), qmm(x, 1, flat)
        s = _SWIGLU(g, u)
        return [x, g, u, s, qmm(s, 2, flat)]

    def deq(j):
        return mx.dequantize(*qs[3 * j: 3 * j + 3], group_size=gs, bits=bits, dtype=F32)

    def compare(got, want, t):
        with plain_mlx():
            x = mx.array(np.array(got[0].astype(F32))).astype(dtype)
            g, u = (mx.array(np.array(a.astype(F32))).astype(dtype) for a in got[1:3])
            for j in range(2):
                assert_close(got[1 + j], (x.astype(F32) @ deq(j).T).astype(dtype), f"step {t}: projection {j}",
                             *QTOL[dtype])
            s = _SWIGLU(g, u)
            assert_close(got[3], s, f"step {t}: the swiglu")
            assert_close(got[4], (s.astype(F32) @ deq(2).T).astype(dtype), f"step {t}: the down projection",
                         *QTOL[dtype])

    args = [(K, dtype), r, w] + qs
    nothing = lambda *a: []   # noqa: E731  (compare builds its references from the outputs)
    on, off = _on_then_off(gpu_runtime, monkeypatch, "TAILS", step, args, nothing, compare,
                           ("QuantizedMatmul", "Compiled"))
    # (x * 64 and the chain or) gate, up and swiglu as one; the down projection: the swiglu
    # alone takes one launch or more (node by node where the driver compiles no generated
    # kernels: the emulator)
    assert on == 2 + chain and off >= on + 1, (on, off)
