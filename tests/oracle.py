"""The oracle for GPU tests: MLX's own CPU result for the same program.

    check_gpu(fn, *args, prims=("Reduce",))   # fn(*args) under enable() == plain MLX, and
                                              # every node of those primitives ran on the GPU
Inputs are evaluated by plain MLX first, so both runs see the same bytes. Use inside a
test that has the `gpu_runtime` (or `runtime`) fixture.
"""

from __future__ import annotations

import contextlib

import mlx.core as mx
import numpy as np

import mlx_amd

TOL = {"float32": (1e-5, 1e-6), "float16": (2e-3, 1e-3), "bfloat16": (1.6e-2, 1e-2),
       "float64": (1e-12, 1e-13), "complex64": (1e-5, 1e-6)}


@contextlib.contextmanager
def plain_mlx():
    """MLX without mlx-amd for the duration (re-enabled after when it was on)."""
    was = mlx_amd.is_enabled()
    mlx_amd.disable()
    try:
        yield
    finally:
        if was:
            mlx_amd.enable()


@contextlib.contextmanager
def fresh_plans(runtime):
    """The evaluator's plans and recorded programs dropped before and after (a planner
    constant or switch changes inside)."""
    ev = runtime.evaluator
    ev.plans.clear()
    ev.drop_programs()
    try:
        yield
    finally:
        ev.plans.clear()
        ev.drop_programs()


def _leaves(tree):
    if isinstance(tree, mx.array):
        return [tree]
    if isinstance(tree, (list, tuple)):
        return [x for t in tree for x in _leaves(t)]
    if isinstance(tree, dict):
        return [x for k in sorted(tree) for x in _leaves(tree[k])]
    return []


def to_numpy(a: mx.array) -> np.ndarray:
    """Exact host values: 16-bit floats widened to float32 (exactly), others as they are."""
    if a.dtype in (mx.float16, mx.bfloat16):
        a = a.astype(mx.float32)
    return np.array(a)


def assert_close(got: mx.array, ref: mx.array, what: str = "", rtol=None, atol=None):
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    assert got.dtype == ref.dtype, f"{what}: dtype {got.dtype} != {ref.dtype}"
    with plain_mlx():
        g, r = to_numpy(got), to_numpy(ref)
    name = str(ref.dtype).split(".")[-1]
    if name not in TOL or (rtol == 0 and atol == 0):
        # integers, bool: bit-exact
        np.testing.assert_array_equal(g, r, err_msg=what)
        return
    rt, at = TOL[name]
    np.testing.assert_allclose(g, r, rtol=rt if rtol is None else rtol, atol=at if atol is None else atol,
                               equal_nan=True, err_msg=what)


def _run_both(fn, ref_fn, args, prims, what):
    """(ours, reference): ref_fn(*args) under plain MLX, fn(*args) under mlx-amd, asserting
    that each primitive in ``prims`` ran only on the GPU."""
    with plain_mlx():
        mx.eval(_leaves(args))
        ref = ref_fn(*args)
        mx.eval(_leaves(ref))
    mlx_amd.stats(reset=True)
    got = fn(*args)
    mx.eval(_leaves(got))
    by = mlx_amd.stats()["by_primitive"]
    for p in prims:
        c = by.get(p, {})
        assert c.get("cpu", 0) == 0, f"{what}: {p} took MLX's CPU fallback {c.get('cpu')} time(s): {by}"
        assert c.get("gpu", 0) > 0, f"{what}: {p} never ran on the GPU: {by}"
    gl, rl = _leaves(got), _leaves(ref)
    assert len(gl) == len(rl)
    return got, gl, rl


def check_gpu(fn, *args, prims=(), rtol=None, atol=None, what="", ref_fn=None):
    """Run fn(*args) under plain MLX (or ``ref_fn``, where MLX's own result is not the
    reference: say why at the call) and under mlx-amd; compare every output leaf and assert
    that each primitive in ``prims`` ran only on the GPU (never MLX's CPU fallback)."""
    got, gl, rl = _run_both(fn, ref_fn or fn, args, prims, what)
    for i, (g, r) in enumerate(zip(gl, rl)):
        assert_close(g, r, f"{what} output {i}", rtol, atol)
    return got


def check_accuracy(fn, *args, truth, prims=(), slack=2.0, atol=0.0, what=""):
    """Where summation order alone separates two correct answers (long rows): ours must be
    as close to the float64 truth as MLX's CPU is (within ``slack`` times its largest
    error, or ``atol``), with NaN in the same places. ``truth(*numpy args)`` -> leaves."""
    got, gl, rl = _run_both(fn, fn, args, prims, what)
    with plain_mlx():
        t = truth(*[to_numpy(a).astype(np.float64) for a in args])
        t = t if isinstance(t, (list, tuple)) else [t]
        for i, (g, r, tv) in enumerate(zip(gl, rl, t)):
            g, r = to_numpy(g).astype(np.float64), to_numpy(r).astype(np.float64)
            np.testing.assert_array_equal(np.isnan(g), np.isnan(r), err_msg=f"{what} output {i}: NaN places")
            ok = ~np.isnan(r)
            same_inf = np.where(np.isinf(r[ok]), g[ok] == r[ok], True)
            assert same_inf.all(), f"{what} output {i}: infinities differ"
            fin = ok & np.isfinite(r) & np.isfinite(tv)
            ours = np.max(np.abs(g[fin] - tv[fin]), initial=0.0)
            theirs = np.max(np.abs(r[fin] - tv[fin]), initial=0.0)
            assert ours <= max(slack * theirs, atol), \
                f"{what} output {i}: max error {ours:.3g} vs MLX's {theirs:.3g} against float64"
    return got
