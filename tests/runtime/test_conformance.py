"""Conformance: programs across the MLX API run plainly and under mlx-amd in one process
must give the same outcome: results of the same shape and dtype with equal values (exact
for integers and bool, dtype-tolerant for floats), the same exception type and message, and
the same number of calls of traced functions (each program returns its counters). Plus the
memory functions under enable() and save/load across the two modes.

Every program is deterministic: inputs come from numpy seeds or explicit random keys, and a
program that uses MLX's global RNG seeds it first, so both runs see the same numbers.
"""

import copy
import functools
import os
import pickle
import tempfile
import threading

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
import pytest
from mlx.utils import tree_flatten

import mlx_amd
from oracle import plain_mlx

# MLX's own functions, captured at import (conftest keeps mlx-amd off until a test enables it)
_PLAIN = {n: getattr(mx, n) for n in ("eval", "async_eval", "get_active_memory", "get_peak_memory",
                                      "reset_peak_memory", "get_cache_memory", "clear_cache",
                                      "set_memory_limit", "set_cache_limit", "save")}
_PLAIN_RMS_NORM = mx.fast.rms_norm
_PLAIN_ITEM = mx.array.item

TOL = {mx.float32: (1e-5, 1e-6), mx.complex64: (1e-5, 1e-6), mx.float64: (1e-12, 1e-13),
       mx.float16: (1e-2, 1e-2), mx.bfloat16: (1e-2, 1e-2)}
TOL.update({np.dtype(np.float32): TOL[mx.float32], np.dtype(np.complex64): TOL[mx.complex64],
            np.dtype(np.float64): TOL[mx.float64]})   # leaves read back with numpy on the way

DTYPES = [mx.bool_, mx.uint8, mx.uint16, mx.uint32, mx.uint64, mx.int8, mx.int16, mx.int32,
          mx.int64, mx.float16, mx.bfloat16, mx.float32, mx.float64, mx.complex64]

NAN, INF = float("nan"), float("inf")


# --- comparing outcomes ------------------------------------------------------------------
class Arr:
    """An array result as read back in the mode that computed it."""

    def __init__(self, shape, dtype, values):
        self.shape, self.dtype, self.values = shape, dtype, values

    def __repr__(self):
        return f"Arr({self.shape}, {self.dtype}, {self.values!r})"


def _leaves(tree):
    if isinstance(tree, (list, tuple)):
        return [x for t in tree for x in _leaves(t)]
    if isinstance(tree, dict):
        return [x for k in sorted(tree) for x in _leaves(tree[k])]
    return [tree]


def _read(leaf):
    if isinstance(leaf, mx.array):
        # 16-bit floats widen to float32 exactly; numpy has no bfloat16
        wide = leaf.astype(mx.float32) if leaf.dtype in (mx.float16, mx.bfloat16) else leaf
        return Arr(leaf.shape, leaf.dtype, np.array(wide))
    if isinstance(leaf, np.ndarray):
        return Arr(leaf.shape, leaf.dtype, leaf)
    return leaf


def outcome(program):
    """("ok", leaves read back) or ("raise", (exception type, message))."""
    try:
        leaves = _leaves(program())
        mx.eval([x for x in leaves if isinstance(x, mx.array)])
        return "ok", [_read(x) for x in leaves]
    except Exception as e:  # comparing them is the point
        return "raise", (type(e), str(e))


def assert_same(got, ref):
    assert got[0] == ref[0], f"plain MLX: {ref}\nmlx-amd: {got}"
    if ref[0] == "raise":
        assert got[1] == ref[1], f"plain MLX raised {ref[1]}, mlx-amd raised {got[1]}"
        return
    assert len(got[1]) == len(ref[1]), f"{len(got[1])} leaves != {len(ref[1])}"
    for i, (g, r) in enumerate(zip(got[1], ref[1])):
        what = f"leaf {i}"
        if isinstance(r, Arr):
            assert isinstance(g, Arr), f"{what}: {g!r} is not an array"
            assert (g.shape, g.dtype) == (r.shape, r.dtype), f"{what}: {g.shape} {g.dtype} != {r.shape} {r.dtype}"
            if r.dtype in TOL:
                # atol scales with the leaf's magnitude: a sum that cancels to near zero
                # differs with the summation order (the GPU's is not MLX's CPU's)
                rtol, atol = TOL[r.dtype]
                finite = np.abs(r.values[np.isfinite(r.values)]) if np.size(r.values) else np.zeros(1)
                scale = float(finite.max()) if finite.size else 0.0
                np.testing.assert_allclose(g.values, r.values, rtol=rtol, atol=max(atol, rtol * scale),
                                           equal_nan=True, err_msg=what)
            else:
                np.testing.assert_array_equal(g.values, r.values, err_msg=what)
        elif isinstance(r, float):
            close = g == pytest.approx(r, rel=1e-5, abs=1e-6, nan_ok=True)
            assert type(g) is float and close, f"{what}: {g!r} != {r!r}"
        else:
            assert type(g) is type(r) and g == r, f"{what}: {g!r} != {r!r}"


def assert_same_behaviour(program, expected):
    with plain_mlx():
        ref = outcome(program)
    assert ref[0] == expected, f"plain MLX: {ref}"  # else the case tests nothing
    assert_same(outcome(program), ref)


# --- inputs ------------------------------------------------------------------------------
def normal(shape, seed=0):
    return mx.array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def uniform(shape, lo, hi, seed=0):
    return mx.array(np.random.default_rng(seed).uniform(lo, hi, shape).astype(np.float32))


def counter():
    """A call counter: calls(fn) counts calls of fn in calls.n."""
    def calls(fn):
        @functools.wraps(fn)
        def counted(*a, **k):
            calls.n += 1
            return fn(*a, **k)
        return counted
    calls.n = 0
    return calls


# --- programs ----------------------------------------------------------------------------
PROGRAMS = []


def case(name, fn=None):
    """Register fn (or, as a decorator, the function below) as program `name`; programs
    named error-* must raise in plain MLX, all others must not."""
    if fn is None:
        return lambda f: case(name, f)
    fn.expected = "raise" if name.startswith("error-") else "ok"
    PROGRAMS.append(pytest.param(fn, id=name))
    return fn


# creation
def _creation(dt):
    def program():
        src = mx.array(np.array([[0, 1, 2], [3, 4, 5]])).astype(dt)
        return [mx.zeros((2, 3), dt), mx.ones((3,), dt), mx.full((2, 2), 5, dt), mx.full((2, 3), src[0]),
                mx.eye(3, 4, k=1, dtype=dt), mx.tri(3, 3, k=-1, dtype=dt), mx.identity(2, dtype=dt),
                mx.zeros_like(src), mx.ones_like(src), src, src.T, mx.view(src, mx.uint8)]
    return program


for _dt in DTYPES:
    case(f"create-{str(_dt).split('.')[-1]}", _creation(_dt))

case("create-arange-linspace", lambda: [
    mx.arange(10), mx.arange(2, 11, 3), mx.arange(0.0, 1.0, 0.1), mx.arange(10, 0, -2),
    mx.arange(5, dtype=mx.float16), mx.arange(-3, 3, dtype=mx.int8), mx.arange(0, 1, 0.25, dtype=mx.bfloat16),
    mx.linspace(0, 1, 7), mx.linspace(-3, 3, 5, dtype=mx.float16), mx.linspace(2, 2, 1)])

case("create-from-python-numpy", lambda: [
    mx.array([[1, 2], [3, 4]]), mx.array([1, 2.5]), mx.array([True, False]), mx.array([1 + 2j, 3j]),
    mx.array(3.5), mx.array(7, dtype=mx.uint8), mx.array(np.arange(12).reshape(3, 4).T) * 2,
    mx.array(np.arange(24, dtype=np.int16).reshape(4, 6)[::2, 1::3]) + 1,
    mx.array(np.array([2**63 - 1, -2**63], dtype=np.int64)), mx.array(np.array([2**64 - 1], dtype=np.uint64)),
    mx.array(np.linspace(0, 1, 5)), mx.array(np.float16([0.1, 65504])), mx.array(np.bool_([True, False])) | True])


# arithmetic
@case("arith-broadcast")
def _():
    a, b = normal((3, 1, 4), 0), normal((2, 1), 1)
    return [a + b, a - b, a * b, a / (mx.abs(b) + 1), a ** 2, mx.power(mx.abs(a), b), -a, 2 - a, a * True,
            mx.add(a, 1.5), mx.multiply(b, mx.array([1, 2, 3]))]


case("arith-type-promotion", lambda: [
    mx.ones(3, mx.int8) + mx.ones(3, mx.uint8), mx.ones(3, mx.int32) + mx.ones(3, mx.float16),
    mx.ones(2, mx.uint64) + mx.ones(2, mx.int64), mx.ones(2, mx.bfloat16) + mx.ones(2, mx.float16),
    mx.ones(2, mx.int8) + 100, mx.ones(2, mx.float16) * 2.5, mx.array([True, False]) + mx.array([True, True]),
    mx.ones(2, mx.uint8) * 1.5, mx.array([1, 2], mx.int32) / mx.array([2, 4], mx.int32),
    mx.ones(2, mx.complex64) * mx.ones(2, mx.float16), mx.ones(2, mx.float64) + mx.ones(2, mx.float32),
    mx.ones(2, mx.uint32) - mx.ones(2, mx.int16), mx.array([3], mx.int16) * 2.0, 1 / mx.array([4], mx.uint8)])


@case("arith-integer-division-signs")
def _():
    a = mx.array([7, -7, 7, -7, 0, 5, -1], mx.int32)
    b = mx.array([2, 2, -2, -2, 3, -5, 4], mx.int32)
    out = [a // b, a % b, *mx.divmod(a, b), mx.remainder(a, b), mx.floor_divide(a, b), a / b]
    for dt in (mx.int8, mx.int64, mx.float32, mx.float16):
        out += [a.astype(dt) // b.astype(dt), a.astype(dt) % b.astype(dt)]
    u, v = mx.array([7, 200, 0, 255], mx.uint8), mx.array([2, 7, 9, 16], mx.uint8)
    f = mx.array([-7.5, 7.5, -0.5, 5.25])
    return out + [u // v, u % v, f % 2, f // 2, f % -2, mx.remainder(f, 0.75)]


@case("arith-bitwise-shifts")
def _():
    out = []
    for dt in (mx.uint8, mx.int8, mx.int16, mx.uint32, mx.int32, mx.int64, mx.uint64):
        a, b = mx.array([0, 1, 5, 100, 127], dt), mx.array([3, 6, 1, 27, 2], dt)
        s = mx.array([0, 1, 2, 3, 7], dt)
        out += [a & b, a | b, a ^ b, ~a, a << s, a >> s, mx.bitwise_xor(a, 0x55), a << 1]
    neg = mx.array([-8, -1, 5, -128], mx.int32)
    flags = mx.array([True, False, True])
    return out + [neg >> 1, neg >> 3, neg << 3, ~neg, neg & 0xF0, flags & mx.array([True, True, False]),
                  flags | False, flags ^ True, ~flags]


case("arith-comparisons", lambda: (lambda a, b: [
    a == b, a != b, a < b, a <= b, a > b, a >= b, mx.isnan(a), mx.isinf(a), mx.isfinite(a),
    mx.isposinf(a), mx.isneginf(a), mx.isclose(a, mx.array(1.0000001)), mx.allclose(a, a),
    mx.allclose(a, a, equal_nan=True),
    mx.array_equal(a, a), mx.array_equal(a, a, equal_nan=True), mx.logical_and(a > 0, a < 3),
    mx.logical_or(a > 1, mx.isnan(a)), mx.logical_not(a > 0), mx.ones(3, mx.int32) == mx.ones(3, mx.float32),
    mx.array([1, 2, 3], mx.uint8) < mx.array([-1, 2, 4], mx.int8)])(
    mx.array([1.0, NAN, -INF, 2.0, 0.0, INF]), mx.array([[1.0], [2.0]])))


@case("arith-where-clip-minmax")
def _():
    x, y = normal((4, 5), 0), normal((4, 5), 1)
    n = mx.array([1.0, NAN, 3.0, -INF])
    i = mx.arange(-4, 8).reshape(3, 4)
    return [mx.where(x > 0, x, y), mx.where(x > 0, x, 0), mx.where(mx.array([True, False]), 1, mx.array([[2], [3]])),
            mx.clip(x, -0.5, 0.5), mx.clip(x, None, 0), mx.clip(x, y, None), mx.clip(i, 2, 5), mx.maximum(x, y),
            mx.minimum(x, 0), mx.maximum(n, 2.0), mx.minimum(n, 2.0), mx.maximum(i, mx.array(1, mx.uint8)),
            mx.minimum(i.astype(mx.float16), 1.5)]


_UNARY = [mx.exp, mx.expm1, mx.log, mx.log1p, mx.log2, mx.log10, mx.sqrt, mx.rsqrt, mx.sin, mx.cos, mx.tan,
          mx.arcsin, mx.arccos, mx.arctan, mx.sinh, mx.cosh, mx.tanh, mx.arcsinh, mx.arctanh, mx.erf,
          mx.erfinv, mx.sigmoid, mx.abs, mx.sign, mx.floor, mx.ceil, mx.round, mx.square, mx.reciprocal,
          mx.negative, mx.degrees, mx.radians]
_ODD_DOMAIN = [mx.exp, mx.sin, mx.tanh, mx.arcsin, mx.arctanh, mx.erf, mx.erfinv, mx.sigmoid, mx.abs,
               mx.sign, mx.floor, mx.ceil, mx.round, mx.square]


def _math(dt):
    def program():
        x = uniform((3, 7), 0.05, 0.95).astype(dt)
        y = uniform((3, 7), -3, 3, seed=1).astype(dt)
        return ([f(x) for f in _UNARY] + [f(-x) for f in _ODD_DOMAIN] +
                [mx.arctan2(x, y), mx.logaddexp(x, y), mx.power(x, y), mx.round(y, 2), mx.trunc(y)])
    return program


for _dt in (mx.float32, mx.float16, mx.bfloat16):
    case(f"math-{str(_dt).split('.')[-1]}", _math(_dt))

case("math-special-values", lambda: (lambda v: [
    mx.log(v), mx.sqrt(v), mx.exp(v), 1 / v, mx.log1p(v), mx.sigmoid(v), mx.tanh(v), mx.erfinv(mx.clip(v, -1, 1)),
    mx.arcsin(v), mx.sign(v), mx.round(mx.array([0.5, 1.5, 2.5, -0.5, -2.5])),
    mx.nan_to_num(v), mx.nan_to_num(v, nan=1.0, posinf=9.0, neginf=-9.0)])(
    mx.array([-1.0, 0.0, -0.0, INF, -INF, NAN, 1e-30, 88.8])))


case("math-complex", lambda: (lambda z: [
    z * z, z + 1, z - 2j, mx.abs(z), mx.conj(z), mx.real(z), mx.imag(z), z / (z + 2), mx.exp(z), z.sum(),
    z == z, -z, mx.ones(3) + z, z.prod()])(mx.array([1 + 2j, -3 + 0.5j, -1j])))

case("math-overflow-and-casts", lambda: [
    mx.array([127], mx.int8) + mx.array([1], mx.int8), mx.array([0], mx.uint8) - mx.array([1], mx.uint8),
    mx.array([1.7, -1.7, 2.5, -0.5]).astype(mx.int32), mx.array([70000.0, 1e-8]).astype(mx.float16),
    mx.array([1 / 3, 1e38, 3.3e-39]).astype(mx.bfloat16), mx.array([2**40 + 1], mx.int64).astype(mx.float32),
    mx.array([0, 1, -2]).astype(mx.bool_), mx.array([True, False]).astype(mx.float32),
    mx.array([200.7, 0.2]).astype(mx.uint8), mx.array([-1], mx.int32).astype(mx.uint32),
    mx.array([2**32 - 1], mx.uint32).astype(mx.int64), mx.array([300], mx.int32).astype(mx.int8),
    mx.array([1.5 - 2j]).astype(mx.float32), mx.array([65504], mx.float16).astype(mx.bfloat16),
    mx.array([0.1], mx.float64).astype(mx.float32), mx.array([2.0]).astype(mx.complex64)])


# reductions
def _reduction(fn):
    def program():
        x = normal((3, 4, 5))
        return [fn(x), fn(x, axis=1), fn(x, axis=(0, 2), keepdims=True), fn(x, axis=-1), fn(x.T, axis=0),
                fn(x[:, ::2], axis=(1, 2)), fn(x.astype(mx.float16), axis=1)]
    return program


for _fn in (mx.sum, mx.prod, mx.max, mx.min, mx.mean, mx.logsumexp, mx.median):
    case(f"reduce-{_fn.__name__}", _reduction(_fn))

case("reduce-var-std", lambda: (lambda x: [
    mx.var(x), mx.var(x, axis=0), mx.var(x, axis=1, ddof=1), mx.std(x), mx.std(x, axis=(0, 1), keepdims=True),
    mx.std(x, axis=-1, ddof=1), mx.var(mx.arange(6)), mx.std(x.astype(mx.bfloat16), axis=0)])(normal((6, 3, 2))))

case("reduce-integers-and-bool", lambda: (lambda i, b: [
    mx.sum(i), mx.sum(i.astype(mx.int8)), mx.sum(i.astype(mx.uint8), axis=0), mx.prod(i[:2] + 1, axis=1),
    mx.mean(i), mx.max(i.astype(mx.uint32)), mx.min(i.astype(mx.int64), axis=0), mx.sum(b), mx.sum(b, axis=0),
    mx.all(b), mx.any(b), mx.all(b, axis=1), mx.any(b, axis=0, keepdims=True), mx.all(i > -20), mx.any(i > 100),
    mx.sum(mx.zeros((0, 3)), axis=0), mx.prod(mx.zeros((2, 0)), axis=1), mx.all(mx.zeros((0,), mx.bool_)),
    mx.count_nonzero(i), mx.sum(i.astype(mx.uint64) * 2**40)])(
    mx.array(np.random.default_rng(0).integers(-10, 10, (4, 5)).astype(np.int32)),
    mx.array([[True, False, True], [True, True, True]])))

case("reduce-arg-minmax", lambda: (lambda x, t: [
    mx.argmax(x), mx.argmax(x, axis=0), mx.argmin(x, axis=1), mx.argmax(x, axis=1, keepdims=True),
    mx.argmax(t), mx.argmin(t), mx.argmax(t, axis=0), mx.argmin(t.astype(mx.int8), axis=1),
    mx.argmax(t.astype(mx.float16), axis=-1)])(normal((4, 6)), mx.array([[1, 3, 3, 0], [2, 2, 0, 0], [5, 5, 5, 5]])))

case("reduce-softmax", lambda: (lambda x: [
    mx.softmax(x), mx.softmax(x, axis=0), mx.softmax(x, axis=(0, 1)), mx.softmax(x, precise=True),
    mx.softmax(x.astype(mx.float16), axis=-1), mx.softmax(x.astype(mx.bfloat16), axis=-1, precise=True),
    mx.softmax(mx.array([[0.0, -INF, 1.0], [-INF, -INF, 2.0]])), mx.logsumexp(mx.array([-INF, -INF])),
    mx.logsumexp(mx.array([[1.0, INF], [-INF, 0.0]]), axis=1), mx.logsumexp(x, axis=0, keepdims=True)])(normal((3, 8))))


@case("reduce-scans")
def _():
    x, i = normal((3, 5)), mx.array([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]], mx.int32)
    out = []
    for fn in (mx.cumsum, mx.cumprod, mx.cummax, mx.cummin, mx.logcumsumexp):
        for kw in ({}, {"reverse": True}, {"inclusive": False}, {"reverse": True, "inclusive": False}):
            out += [fn(x, axis=1, **kw), fn(x, axis=0, **kw)]
        if fn is not mx.logcumsumexp:
            out += [fn(i, axis=1), fn(i.astype(mx.uint8), axis=0, reverse=True), fn(x.T, axis=1)]
    return out + [mx.cumsum(x), mx.cumsum(mx.array([True, True, False, True])), mx.cumsum(x.astype(mx.float16), axis=1)]


# shapes
case("shape-reshape-transpose", lambda: (lambda x: [
    x.reshape(4, 6), x.reshape(-1, 2), x.transpose(2, 0, 1), x.T, x.T + 1, mx.swapaxes(x, 0, 2),
    mx.moveaxis(x, 0, -1), mx.expand_dims(x, (0, 2)), mx.squeeze(mx.expand_dims(x, 1), 1), x.flatten(),
    mx.flatten(x, 1, 2), mx.unflatten(x, 2, (2, 2)), mx.atleast_3d(mx.array(1)), mx.atleast_2d(mx.arange(3)),
    mx.transpose(x, (1, 0, 2)).reshape(3, 8), mx.contiguous(x.T), mx.matrix_transpose(x), x[None, ..., None].shape,
    mx.diag(mx.arange(3)), mx.diagonal(x, 1, 1, 2), mx.trace(x[0]), mx.tril(x[0]), mx.triu(x[1], 1)])(
    mx.arange(24).reshape(2, 3, 4)))

case("shape-concat-stack-split", lambda: (lambda a, b: [
    mx.concatenate([a, b]), mx.concatenate([a, b], axis=1), mx.concatenate([a.T, b.T], axis=0),
    mx.concatenate([a, b], axis=None), mx.concat([a, b.astype(mx.float32)], axis=-1), mx.stack([a, b]),
    mx.stack([a, b], axis=-1), mx.split(mx.arange(10), 5), mx.split(mx.arange(10), [3, 7]),
    mx.split(a, 3, axis=1), mx.unstack(a, axis=1), mx.meshgrid(mx.arange(3), mx.arange(2))])(
    mx.arange(6).reshape(2, 3), mx.arange(6, 12).reshape(2, 3)))

case("shape-pad-tile-repeat", lambda: (lambda a: [
    mx.pad(a, 1), mx.pad(a, ((0, 1), (2, 0)), constant_values=-1), mx.pad(a, ((1, 1), (1, 1)), mode="edge"),
    mx.pad(a.astype(mx.float16), (0, 2), constant_values=0.5), mx.tile(a, (2, 1)), mx.tile(a, 3),
    mx.repeat(a, 2), mx.repeat(a, 2, axis=1), mx.broadcast_to(mx.array([1, 2, 3]), (2, 3)),
    mx.broadcast_to(mx.array([[1], [2]]), (2, 3)) + a, mx.broadcast_arrays(a, mx.array([7])),
    mx.roll(a, 1), mx.roll(a, -1, axis=1), mx.roll(a, (1, 2), axis=(0, 1)), mx.flip(a, 1), mx.kron(a, a[:1, :2])])(
    mx.arange(6).reshape(2, 3)))


@case("shape-as-strided")
def _():
    x = mx.arange(10, dtype=mx.float32)
    w = mx.as_strided(x, (4, 4), (2, 1))  # overlapping windows
    return [w, w * 2, w.sum(axis=1), mx.as_strided(x, (3, 3), (0, 1)), mx.as_strided(x, (2, 3), (3, 1), 2),
            mx.as_strided(x.reshape(2, 5), (5, 2), (1, 5)), mx.as_strided(x[::2] * 1, (2, 2), (1, 2)),
            mx.as_strided(x.reshape(2, 5).T, (3, 2), (1, 1)), mx.as_strided(x[2:], (2, 2), (1, 1)),
            x.reshape(2, 5).T.view(mx.uint8), x[1:].view(mx.int16), mx.array([1, 0, 2], mx.uint8).view(mx.bool_)]


@case("shape-writes-through-views")
def _():
    # a slice or broadcast taken before a write keeps the old values
    a = mx.arange(4)
    v = a[:2]
    a[0] = 100
    b = mx.broadcast_to(mx.arange(3), (2, 3))
    b[0] = 5
    c = mx.arange(6).reshape(2, 3)
    t = c.T
    c[:, 0] = -1
    return [a, v, b, c, t, mx.contiguous(mx.broadcast_to(mx.arange(3), (2, 3)), allow_col_major=True)]


case("shape-negative-step-slices", lambda: (lambda x: [
    x[::-1], x[:, ::-2], x[1:, 3:0:-1, ::-3], x[..., -1], x[None, :, 1], x[-1:-3:-1, 2], x[::-1] * 2,
    x[::-1, ::-1].sum(axis=0), x[:, ::-1].T, x[::2, ::-1] + x[1::-1, ::-1][:2], x[5:1], x[:, 1:2, ::-4],
    mx.slice(x, mx.array([1, 2]), axes=(0, 1), slice_size=(2, 2, 5))])(mx.arange(60).reshape(3, 4, 5)))


# indexing
case("index-gathers", lambda: (lambda x, i, j: [
    x[1], x[1, 2, 3], x[i], x[:, j], x[i, 1:3], x[i, :, i], x[-1, j], x[mx.array([-1, 0])],
    x[..., mx.array([4, 0])], x[i[:, None], mx.array([0, 1])], x[:, mx.array([3, 1]), 0:5:2], x[mx.array(2)],
    x[i.astype(mx.uint8)],
    x[i.astype(mx.int64), mx.array([3, 0, 1])]])(
    mx.arange(60, dtype=mx.float32).reshape(3, 4, 5), mx.array([2, 0, 1]), mx.array([[0, 3], [1, 2]])))

case("index-take-put-along", lambda: (lambda x, idx: [
    mx.take(x, idx), mx.take(x, idx, axis=1), mx.take(x, mx.array(2), axis=0), mx.take(x, 3),
    mx.take(x, mx.array([[0, -1]]), axis=-1), mx.take_along_axis(x, mx.argsort(x, axis=-1), axis=-1),
    mx.take_along_axis(x, mx.array([[0], [2], [1], [3]]), axis=1),
    mx.take_along_axis(x, mx.array([[0, 1, 2, 3]]), axis=0), mx.take_along_axis(x, mx.array([3, 7]), axis=None),
    mx.put_along_axis(x, mx.array([[1], [0], [3], [2]]), mx.array(-1.0), axis=1),
    mx.put_along_axis(x, mx.array([[3, 2, 1, 0]]), mx.array([[10.0, 20, 30, 40]]), axis=0)])(
    normal((4, 4)), mx.array([3, 0, 2])))


@case("index-setitem")
def _():
    x = mx.zeros((4, 5))
    x[1] = 1
    x[:, 2] = mx.arange(4)
    x[mx.array([0, 3]), 4] = -1
    x[1:3, ::2] = mx.array([[7.0], [8.0]])
    x[::-1, 0] = x[::-1, 0] + 5
    x[..., -1:] *= 3
    y = mx.arange(10)
    y[mx.array([1, 5, 7])] = mx.array([10, 50, 70])
    y[-2:] = 0
    z = mx.zeros((2, 3), mx.float16)
    z[0] = 1.5
    return [x, y, z]


case("index-at-updates", lambda: (lambda idx: [
    mx.zeros(5, mx.int32).at[idx].add(1), mx.zeros(5, mx.int32).at[idx].subtract(2),
    mx.ones(5).at[idx].multiply(2.0), mx.zeros(5).at[idx].maximum(mx.array([1.0, 2, 3, 4, 5, 6])),
    mx.zeros(5).at[idx].minimum(mx.array([-1.0, 2, -3, 4, -5, 6])), mx.zeros((3, 3)).at[1:, mx.array([0, 2])].add(5.0),
    mx.zeros((3, 2)).at[mx.array([0, 0, 2])].add(mx.array([[1.0, 2], [3, 4], [5, 6]])),
    mx.zeros(4, mx.float16).at[mx.array([1, 1])].add(0.5)])(mx.array([0, 1, 1, 3, 3, 3])))


# sorting: only what MLX specifies is compared (partition and topk leave order open)
case("sort-argsort", lambda: (lambda x, t: [
    mx.sort(x), mx.sort(x, axis=0), mx.sort(x, axis=None), mx.argsort(x), mx.argsort(x, axis=1),
    mx.argsort(x, axis=None), mx.sort(t), mx.sort(t.astype(mx.uint8)), mx.sort(t.astype(mx.float16)),
    mx.sort(mx.array([3.0, NAN, -INF, 1.0, INF, 2.0])), mx.sort(x.T, axis=1), mx.argsort(x[:, ::-1], axis=0)])(
    mx.array(np.random.default_rng(0).permutation(60).reshape(3, 4, 5).astype(np.float32)),
    mx.array([5, 1, 5, -2, 0, 1, 9, 9], mx.int32)))


@case("sort-partition-topk")
def _():
    x = mx.array(np.random.default_rng(1).permutation(40).reshape(4, 10).astype(np.float32))
    p, ap = mx.partition(x, 3, axis=1), mx.argpartition(x, 3, axis=1)
    p0 = mx.partition(x, 1, axis=0)
    k = mx.topk(x, 4, axis=-1)
    return [p[:, 3], mx.sort(p[:, :3], axis=1), mx.sort(p[:, 4:], axis=1), mx.take_along_axis(x, ap, 1)[:, 3],
            mx.sort(mx.take_along_axis(x, ap[:, :3], 1), axis=1),
            p0[1], mx.sort(k, axis=-1), mx.sort(mx.topk(x, 2, axis=0), axis=0), mx.sort(mx.topk(x.flatten(), 5))]


# random: explicit keys or a seeded global RNG; bits compared exactly where they are bits
# (keys, uniform's mantissas); normal's erfinv may round differently from MLX's CPU one
@case("random-keys")
def _():
    k = mx.random.key(42)
    k1, k2 = mx.random.split(k)
    ks = mx.random.split(k, 4)
    u = mx.random.uniform(shape=(3, 4), key=k1)
    n = mx.random.normal((5,), key=k2)
    return [k, ks, u, u.view(mx.uint32), n,
            mx.random.randint(-5, 5, (10,), key=ks[0]), mx.random.randint(0, 200, (6,), dtype=mx.uint8, key=ks[1]),
            mx.random.bernoulli(0.3, (10,), key=ks[2]), mx.random.bernoulli(mx.array([0.1, 0.9]), key=ks[3]),
            mx.random.uniform(-2, mx.array([1.0, 2, 3]), (2, 3), dtype=mx.float16, key=k1),
            mx.random.normal((4,), dtype=mx.bfloat16, loc=1.0, scale=2.0, key=k2)]


@case("random-distributions")
def _():
    ks = mx.random.split(mx.random.key(7), 5)
    logits = mx.log(mx.array([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]]))
    g = mx.random.gumbel((6,), key=ks[2])
    return [mx.random.categorical(logits, key=ks[0]), mx.random.categorical(logits, num_samples=8, key=ks[1]),
            # the bits of exactly computed floats (gumbel's logs differ by ulps from MLX's CPU)
            g, mx.random.uniform(shape=(6,), key=ks[2]).view(mx.uint32), mx.random.permutation(10, key=ks[3]),
            mx.random.permutation(mx.arange(6) * 3, key=ks[4]),
            mx.random.truncated_normal(-1, 1, (8,), key=ks[0]), mx.random.laplace((4,), key=ks[1])]


@case("random-global-seed")
def _():
    mx.random.seed(7)
    a = mx.random.uniform(shape=(4,))
    b = mx.random.normal((2, 3))
    c = mx.random.randint(0, 10, (6,))
    mx.random.seed(7)
    return [a, b, c, a.view(mx.uint32), mx.random.uniform(shape=(4,)) == a, mx.random.key(3)]


# linear algebra
case("matmul-family", lambda: (lambda a, b, c: [
    a @ b, normal((2, 3, 4), 3) @ b, normal((2, 1, 3, 4), 4) @ normal((3, 4, 2), 5), a[0] @ b, a @ b[:, 0],
    a[0] @ b[:, 0], (a.astype(mx.float16) @ b.astype(mx.float16)), a.astype(mx.bfloat16) @ b.astype(mx.bfloat16),
    b.T @ a.T, mx.addmm(c, a, b), mx.addmm(c, a, b, alpha=0.5, beta=2.0), mx.addmm(c[0], a, b, beta=0.0),
    mx.einsum("ij,jk->ik", a, b), mx.einsum("bij,bjk->bik", normal((2, 3, 4)), normal((2, 4, 2))),
    mx.einsum("ii->i", b[:, :4]), mx.einsum("ij->", a), mx.einsum("i,j->ij", a[0], b[0]),
    mx.tensordot(a, b, axes=1), mx.tensordot(normal((2, 3, 4)), normal((3, 2, 5)), axes=([1, 0], [0, 1])),
    mx.outer(a[0], b[0]), mx.inner(a, a), mx.vecdot(a, a), mx.matmul(a, b[:, :1] * 0)])(
    normal((3, 4), 0), normal((4, 5), 1), normal((3, 5), 2)))


def _quantized(bits):
    def program():
        w, x, xt = normal((32, 128), 0), normal((2, 128), 1), normal((3, 32), 2)
        wq, s, b = mx.quantize(w, group_size=64, bits=bits)
        hq, hs, hb = mx.quantize(w.astype(mx.float16), group_size=64, bits=bits)
        return [wq, s, b, mx.dequantize(wq, s, b, group_size=64, bits=bits),
                mx.quantized_matmul(x, wq, s, b, transpose=True, group_size=64, bits=bits),
                mx.quantized_matmul(xt, wq, s, b, transpose=False, group_size=64, bits=bits),
                hq, hs, mx.quantized_matmul(x.astype(mx.float16), hq, hs, hb, group_size=64, bits=bits)]
    return program


for _bits in (4, 8):
    case(f"quantized-{_bits}bit", _quantized(_bits))

case("fast-norms", lambda: (lambda x, w, b: [
    mx.fast.rms_norm(x, w, 1e-5), mx.fast.rms_norm(x, None, 1e-5),
    mx.fast.rms_norm(x.astype(mx.float16), w.astype(mx.float16), 1e-6),
    mx.fast.rms_norm(x.astype(mx.bfloat16), w.astype(mx.bfloat16), 1e-5), mx.fast.rms_norm(x.T, w[:3], 1e-5),
    mx.fast.layer_norm(x, w, b, 1e-5), mx.fast.layer_norm(x, None, None, 1e-5), mx.fast.layer_norm(x, w, None, 1e-3),
    mx.fast.layer_norm(x.astype(mx.float16), w.astype(mx.float16), b.astype(mx.float16), 1e-5)])(
    normal((3, 8), 0), normal((8,), 1), normal((8,), 2)))

case("fast-rope", lambda: (lambda x: [
    mx.fast.rope(x, 8, traditional=False, base=10000.0, scale=1.0, offset=0),
    mx.fast.rope(x, 8, traditional=True, base=10000.0, scale=1.0, offset=0),
    mx.fast.rope(x, 8, traditional=False, base=500.0, scale=0.5, offset=3),
    mx.fast.rope(x, 4, traditional=False, base=10000.0, scale=1.0, offset=1),
    mx.fast.rope(x.astype(mx.float16), 8, traditional=False, base=10000.0, scale=1.0, offset=2),
    mx.fast.rope(x, 8, traditional=False, base=None, scale=1.0, offset=mx.array(5), freqs=mx.arange(1.0, 5.0))])(
    normal((1, 2, 5, 8))))


@case("fast-sdpa")
def _():
    q, k, v = normal((1, 4, 6, 8), 0), normal((1, 4, 6, 8), 1), normal((1, 4, 6, 8), 2)
    kv2, vv2 = normal((1, 2, 6, 8), 3), normal((1, 2, 6, 8), 4)
    add = normal((6, 6), 5)
    keep = mx.array(np.random.default_rng(6).random((6, 6)) > 0.3) | mx.eye(6, dtype=mx.bool_)
    sdpa = mx.fast.scaled_dot_product_attention
    return [sdpa(q, k, v, scale=0.35), sdpa(q, k, v, scale=0.35, mask="causal"), sdpa(q, k, v, scale=1.0, mask=add),
            sdpa(q, k, v, scale=0.35, mask=keep), sdpa(q, kv2, vv2, scale=0.35),
            sdpa(q, kv2, vv2, scale=0.35, mask="causal"),
            sdpa(q[:, :, -1:], k, v, scale=0.35), sdpa(q[:, :, -2:], k, v, scale=0.35, mask="causal"),
            sdpa(q.astype(mx.float16), k.astype(mx.float16), v.astype(mx.float16), scale=0.35, mask="causal"),
            sdpa(q, k, v, scale=0.35, sinks=normal((4,), 7)),
            sdpa(q, k[:, :, :3], v[:, :, :3], scale=0.35, mask="causal"),
            sdpa(q, k, v, scale=0.35, mask=add.astype(mx.float16)), sdpa(q, k, v, scale=0.35, mask=add[0]),
            sdpa(q, k, v, scale=0.35, mask=normal((1, 4, 6, 6), 8)), sdpa(q, k, v[..., :4], scale=mx.array(0.35)),
            sdpa(q, k.astype(mx.float16), v, scale=0.35)]


@case("fast-vmap-jvp")
def _():
    x, w = normal((2, 3, 8), 0), normal((8,), 1)
    rope = functools.partial(mx.fast.rope, dims=8, traditional=False, base=10000.0, scale=1.0, offset=1)
    sdpa = functools.partial(mx.fast.scaled_dot_product_attention, scale=0.5, mask="causal")
    return [mx.vmap(lambda a: mx.fast.rms_norm(a, w, 1e-5))(x),
            mx.vmap(lambda a: mx.fast.layer_norm(a, w, w, 1e-5), in_axes=1)(x), mx.vmap(rope)(x[None]),
            mx.jvp(lambda a: mx.fast.rms_norm(a, w, 1e-5), [x], [x * 2]),
            mx.jvp(lambda a: mx.fast.layer_norm(a, w, None, 1e-5), [x], [x]), mx.jvp(rope, [x[None]], [x[None]]),
            mx.jvp(lambda a: sdpa(a, a * 2, a), [x[None]], [x[None]]),
            mx.fast.rope(x.reshape(1, 3, 2, 8).transpose(0, 2, 1, 3), 8, traditional=True, base=10000.0, scale=1.0,
                         offset=2),
            mx.fast.rope(x[:, None], 8, traditional=False, base=10000.0, scale=1.0, offset=mx.array([1, 4])),
            mx.fast.rms_norm(x, w.astype(mx.float16), 1e-5), mx.fast.layer_norm(x.astype(mx.bfloat16), w, None, 1e-5)]


@case("fast-grads")
def _():
    x, w, b = normal((3, 8), 0), normal((8,), 1), normal((8,), 2)
    q = normal((1, 2, 4, 8), 3)

    def loss(x, w, b, q):
        return (mx.fast.rms_norm(x, w, 1e-5).sum() + (mx.fast.layer_norm(x, w, b, 1e-5) ** 2).sum()
                + mx.fast.rope(q, 8, traditional=False, base=10000.0, scale=1.0, offset=0).sum()
                + mx.fast.scaled_dot_product_attention(q, q * 2, q, scale=0.5, mask="causal").sum())
    return mx.value_and_grad(loss, argnums=(0, 1, 2, 3))(x, w, b, q)


case("fft-cpu-stream", lambda: (lambda x, m: [
    mx.fft.fft(x, stream=mx.cpu), mx.fft.ifft(x, stream=mx.cpu), mx.fft.rfft(x, stream=mx.cpu),
    mx.fft.irfft(mx.fft.rfft(x, stream=mx.cpu), stream=mx.cpu), mx.fft.fft(x, n=16, stream=mx.cpu),
    mx.fft.rfft(x, n=6, stream=mx.cpu), mx.fft.fft2(m.astype(mx.complex64), stream=mx.cpu),
    mx.fft.rfftn(m, stream=mx.cpu),
    mx.fft.irfftn(mx.fft.rfftn(m, stream=mx.cpu), s=(4, 6), axes=(0, 1), stream=mx.cpu),
    mx.fft.fft(m, axis=0, stream=mx.cpu), mx.fft.ifft2(m, stream=mx.cpu), mx.fft.fftshift(x)])(
    normal((8,), 0), normal((4, 6), 1)))


@case("linalg-cpu-stream")
def _():
    a = normal((4, 4), 0) + 4 * mx.eye(4)
    spd = a @ a.T + mx.eye(4)
    v, rhs = normal((5,), 1), normal((4, 2), 2)
    cpu = {"stream": mx.cpu}
    q, r = mx.linalg.qr(a, **cpu)
    return [mx.linalg.inv(a, **cpu), mx.linalg.inv(mx.stack([a, spd]), **cpu), mx.linalg.cholesky(spd, **cpu),
            mx.linalg.cholesky(spd, upper=True, **cpu), q, r, q @ r, mx.linalg.qr(normal((5, 3), 3), **cpu),
            mx.linalg.norm(a), mx.linalg.norm(a, ord="fro"), mx.linalg.norm(v, ord=1), mx.linalg.norm(v, ord=INF),
            mx.linalg.norm(v, ord=-INF), mx.linalg.norm(v, ord=3), mx.linalg.norm(a, axis=1),
            mx.linalg.norm(a, ord=1), mx.linalg.norm(a, ord="nuc", **cpu), mx.linalg.norm(a, ord=2, **cpu),
            mx.linalg.solve(a, rhs, **cpu), mx.linalg.svd(a, compute_uv=False, **cpu), mx.linalg.eigvalsh(spd, **cpu),
            mx.linalg.tri_inv(mx.tril(a), **cpu), mx.linalg.cholesky_inv(mx.linalg.cholesky(spd, **cpu), **cpu),
            mx.linalg.solve_triangular(mx.triu(a), rhs, upper=True, **cpu), mx.linalg.cross(a[0, :3], a[1, :3])]


@case("linalg-decompositions")
def _():
    a = mx.array([[4.0, 1, 2], [1, 5, 3], [2, 3, 6]])
    g = mx.array([[2.0, 1, 0], [4, 3, 1], [1, 1, 5]])
    cpu = {"stream": mx.cpu}
    w, v = mx.linalg.eigh(a, **cpu)
    u, sv, vt = mx.linalg.svd(g, **cpu)
    # singular and eigen vectors are defined up to sign: compare what is not
    # not positive definite: MLX raises nothing and leaves LAPACK's partial factor, the GPU
    # path the solver library's (ops/linalg.py): the same behaviour, values undefined
    c = mx.linalg.cholesky(-mx.eye(3), **cpu)
    mx.eval(c)
    return [w, mx.abs(v), (v * w) @ v.T, sv, mx.abs(u), mx.abs(vt), (u * sv) @ vt, mx.linalg.lu(g, **cpu),
            mx.linalg.lu_factor(g, **cpu), mx.linalg.eigvals(g, **cpu), mx.linalg.det(g, **cpu),
            mx.linalg.slogdet(g, **cpu), mx.linalg.pinv(g[:, :2], **cpu), (c.shape, c.dtype)]


@case("matmul-gathered-masked-segmented")
def _():
    x, w = normal((2, 3, 8), 0), normal((2, 8, 4), 1)
    return [mx.gather_mm(x, w, rhs_indices=mx.array([[1], [0]])),
            mx.gather_mm(x[0], w, rhs_indices=mx.array([1, 0, 1])),
            mx.block_masked_mm(normal((64, 64), 2), normal((64, 64), 3), 32, mx.array([[True, False], [True, True]])),
            mx.segmented_mm(normal((4, 6), 4), normal((6, 3), 5), mx.array([[0, 2], [2, 6]], mx.uint32)),
            mx.hadamard_transform(normal((2, 8), 6)), mx.hadamard_transform(normal((16,), 7), scale=0.25),
            mx.conv3d(normal((1, 4, 4, 4, 2), 8), normal((3, 2, 2, 2, 2), 9)),
            mx.conv_transpose2d(normal((1, 4, 4, 2), 10), normal((3, 2, 2, 2), 11), stride=2, output_padding=1)]


@case("quantized-other-modes")
def _():
    w, x = normal((8, 64), 0), normal((2, 64), 1)
    out = [mx.from_fp8(mx.to_fp8(mx.array([0.1, 1.5, -300.0, 1e-4])), mx.float32)]
    for kw in ({"mode": "mxfp4"}, {"mode": "mxfp8"}, {"bits": 2}, {"bits": 3}, {"bits": 6, "group_size": 32},
               {"bits": 5, "group_size": 32}):
        q = mx.quantize(w, **kw)
        out += [q, mx.dequantize(*q, **kw), mx.quantized_matmul(x, *q, **kw)]
    q = mx.quantize(normal((2, 4, 64), 2))
    return out + [mx.gather_qmm(normal((2, 1, 64), 3), *q, rhs_indices=mx.array([[0], [1]]), transpose=True)]


@case("float64-and-integer-powers")
def _():
    d = mx.array(np.linspace(-2, 3, 6).reshape(2, 3))
    i = mx.array([2, 3, -2, 0], mx.int32)
    f = mx.array([1.0, -1.0, 0.0])
    return [d * d, mx.exp(d), d.sum(), d @ d.T, mx.sort(d[:, ::-1]), mx.cumsum(d, axis=1), d.astype(mx.float32),
            mx.power(i, mx.array([3, 0, 5, 0], mx.int32)), mx.power(i, 2), f // 0, f % 0, f / 0,
            mx.searchsorted(mx.array([1.0, 2, 3]), mx.array([2.5, 0, 3])), mx.diff(mx.array([1, 4, 9, 16])),
            mx.median(mx.array([1.0, 5, 3, 2])), mx.minmax(mx.array([1.0, 5, 3, 2]))]


# mlx.nn
@case("nn-linear-embedding")
def _():
    mx.random.seed(0)
    lin, bare = nn.Linear(8, 4), nn.Linear(8, 4, bias=False)
    emb = nn.Embedding(10, 4)
    ids = mx.array([[1, 9, 0], [3, 3, 7]])
    x = normal((3, 8))
    return [lin(x), bare(x), lin(x[0]), emb(ids), emb.as_linear(normal((2, 4), 1)),
            nn.Bilinear(3, 2, 5)(x[:, :3], x[:, 3:5])]


@case("nn-conv")
def _():
    mx.random.seed(1)
    c1 = nn.Conv1d(3, 5, 3, stride=2, padding=1)
    c2 = nn.Conv2d(3, 4, (3, 3), padding=1, stride=(1, 2))
    x1, x2 = normal((2, 10, 3), 0), normal((1, 6, 6, 3), 1)
    w = normal((4, 2, 2, 3), 2)
    return [c1(x1), c2(x2), nn.Conv1d(3, 2, 1, bias=False)(x1), mx.conv2d(x2, w, dilation=2),
            mx.conv1d(x1, normal((6, 3, 1), 3), groups=3), mx.conv_transpose1d(x1, normal((2, 3, 3), 4), stride=2),
            mx.conv2d(x2.astype(mx.float16), w.astype(mx.float16), padding=(1, 0)), mx.conv_general(x2, w, flip=True)]


@case("nn-norm-layers")
def _():
    mx.random.seed(2)
    x = normal((2, 3, 8))
    ln, ln_bare, rms = nn.LayerNorm(8), nn.LayerNorm(8, affine=False, eps=1e-3), nn.RMSNorm(8)
    ln.weight = normal((8,), 1)
    rms.weight = normal((8,), 2)
    gn = nn.GroupNorm(2, 8)
    return [ln(x), ln_bare(x), rms(x), gn(x), nn.BatchNorm(8)(x), nn.InstanceNorm(8)(x)]


@case("nn-attention")
def _():
    mx.random.seed(3)
    mha = nn.MultiHeadAttention(16, 4)
    cross = nn.MultiHeadAttention(16, 2, query_input_dims=8, key_input_dims=12, value_input_dims=12, bias=True)
    q, kv = normal((2, 5, 16), 0), normal((2, 7, 12), 1)
    mask = nn.MultiHeadAttention.create_additive_causal_mask(5)
    return [mha(q, q, q), mha(q, q, q, mask=mask), cross(normal((2, 5, 8), 2), kv, kv), mask]


case("nn-activations", lambda: (lambda x: [
    nn.GELU()(x), nn.GELU(approx="precise")(x), nn.GELU(approx="fast")(x), nn.SiLU()(x), nn.ReLU()(x),
    nn.gelu_approx(x), nn.gelu_fast_approx(x), nn.silu(x.astype(mx.float16)), nn.softplus(x), nn.mish(x),
    nn.leaky_relu(x, 0.1), nn.elu(x), nn.selu(x), nn.relu6(x * 4), nn.hardswish(x), nn.log_softmax(x),
    nn.glu(x), nn.PReLU()(x), nn.Tanh()(x), nn.log_sigmoid(x), nn.softsign(x), nn.celu(x), nn.step(x)])(
    normal((4, 6)) * 3))


@case("nn-dropout-seeded")
def _():
    mx.random.seed(11)
    x = mx.ones((4, 8))
    d, d2 = nn.Dropout(0.5), nn.Dropout2d(0.25)
    out = [d(x), d(x), d2(mx.ones((2, 3, 3, 4)))]
    d.eval()
    return out + [d(x)]


@case("nn-losses")
def _():
    logits, targets = normal((5, 4), 0), mx.array([0, 3, 1, 1, 2])
    probs = mx.softmax(normal((5, 4), 1), axis=-1)
    pred, y = normal((5, 3), 2), normal((5, 3), 3)
    L = nn.losses
    return [L.cross_entropy(logits, targets), L.cross_entropy(logits, targets, reduction="mean"),
            L.cross_entropy(logits, targets, label_smoothing=0.1, reduction="sum"), L.cross_entropy(logits, probs),
            L.cross_entropy(logits, targets, weights=mx.array([1.0, 0, 2, 1, 1])), L.mse_loss(pred, y),
            L.mse_loss(pred, y, reduction="none"), L.l1_loss(pred, y), L.smooth_l1_loss(pred, y, beta=0.5),
            L.binary_cross_entropy(pred, (y > 0).astype(mx.float32)), L.nll_loss(nn.log_softmax(logits), targets),
            L.kl_div_loss(nn.log_softmax(logits), nn.log_softmax(pred[:, :1] + logits)), L.huber_loss(pred, y),
            L.cosine_similarity_loss(pred, y), L.hinge_loss(pred, mx.sign(y)), L.log_cosh_loss(pred, y)]


def _optimizer(make):
    def program():
        mx.random.seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        opt = make()
        x, y = normal((16, 4), 1), mx.array(np.random.default_rng(2).integers(0, 2, 16))
        loss_and_grad = nn.value_and_grad(model, lambda m, x, y: nn.losses.cross_entropy(m(x), y, reduction="mean"))
        losses = []
        for _ in range(3):
            loss, grads = loss_and_grad(model, x, y)
            opt.update(model, grads)
            mx.eval(model.parameters(), opt.state)
            losses.append(loss)
        return [losses, dict(tree_flatten(model.parameters())), dict(tree_flatten(opt.state))]
    return program


case("optim-sgd-momentum", _optimizer(lambda: optim.SGD(learning_rate=0.1, momentum=0.9, nesterov=True)))
case("optim-adam", _optimizer(lambda: optim.Adam(learning_rate=1e-2)))
case("optim-adamw", _optimizer(lambda: optim.AdamW(learning_rate=1e-2, weight_decay=0.1)))


# transforms: each program returns its call counters too
@case("transform-grad-value-and-grad")
def _():
    calls = counter()
    f = calls(lambda x, y: (mx.sin(x) * y).sum())
    x, y = normal((3, 4), 0), normal((3, 4), 1)
    v, gv = mx.value_and_grad(f, argnums=(0, 1))(x, y)
    g2 = mx.grad(calls(lambda p: (p["w"] ** 2 * p["b"][0]).sum()))({"w": x, "b": [y]})
    gg = mx.grad(mx.grad(calls(lambda s: s ** 3 + mx.sin(s))))(mx.array(0.7))
    return [mx.grad(f)(x, y), mx.grad(f, argnums=1)(x, y), v, gv, g2, gg, calls.n]


@case("transform-vjp-jvp")
def _():
    calls = counter()
    f = calls(lambda x, y: [mx.exp(x) * y, x @ y.T])
    x, y = normal((2, 3), 0), normal((2, 3), 1)
    outs, vjps = mx.vjp(f, [x, y], [mx.ones((2, 3)), normal((2, 2), 2)])
    outs2, jvps = mx.jvp(f, [x, y], [normal((2, 3), 3), mx.zeros((2, 3))])
    return [outs, vjps, outs2, jvps, calls.n]


@case("transform-vmap")
def _():
    calls = counter()
    f = calls(lambda a, b: (a * b).sum() + a[0])
    x, y = normal((4, 3), 0), normal((3,), 1)
    m = normal((5, 2, 3), 2)
    return [mx.vmap(f)(x, x), mx.vmap(f, in_axes=(0, None))(x, y), mx.vmap(f, in_axes=(1, None))(x[:3].T, y),
            mx.vmap(calls(lambda a: a.T @ a), in_axes=0, out_axes=2)(m),
            mx.vmap(mx.vmap(f, in_axes=(0, None)), in_axes=(0, None))(m, y), mx.vmap(mx.grad(f))(x, x),
            mx.vmap(calls(lambda a: mx.sort(a)[::-1]))(x), calls.n]


@case("transform-stop-gradient-custom-checkpoint")
def _():
    calls = counter()

    @mx.custom_function
    def double(x):
        return x * 2

    @double.vjp
    def _(primals, cotangent, output):
        return (cotangent * 10,)

    x = normal((4,), 0)
    body = calls(lambda x: mx.sin(x) * x)
    return [mx.grad(lambda x: (mx.stop_gradient(x) * x).sum())(x), mx.grad(lambda x: double(x).sum())(x),
            mx.grad(lambda x: mx.checkpoint(body)(x).sum())(x), mx.grad(lambda x: body(x).sum())(x), calls.n]


@case("compile-trace-counts")
def _():
    calls = counter()
    f = mx.compile(calls(lambda x, y: mx.exp(x) * y + 1))
    x, y = normal((3,), 0), normal((3,), 1)
    outs = [f(x, y), f(x, y), f(x * 2, y), f(normal((2, 3)), y), f(x.astype(mx.float16), y), f(x, y)]
    return [outs, calls.n]


@case("compile-shapeless")
def _():
    calls = counter()
    # x.shape[-1] is baked in at the trace: later shapes reuse it, in both modes alike
    f = mx.compile(calls(lambda x: (mx.tanh(x) * 2).sum(axis=-1) + x.shape[-1]), shapeless=True)
    outs = [f(normal(s, i)) for i, s in enumerate(((2,), (3,), (2, 3), (4, 3), (5,), (3, 3, 3)))]
    return [outs, calls.n]


@case("compile-python-args")
def _():
    calls = counter()
    f = mx.compile(calls(lambda x, s, mode: x * s if mode == "mul" else x + s))
    x = normal((3,))
    return [f(x, 2.0, "mul"), f(x, 2.0, "mul"), f(x, 3.0, "mul"), f(x, 2.0, "add"), f(x, 2, "mul"), calls.n]


@case("compile-captured-state")
def _():
    calls = counter()
    state = [mx.array(1.0), mx.zeros(3)]

    @functools.partial(mx.compile, inputs=state, outputs=state)
    @calls
    def step(x):
        state[0] = state[0] * 2 + x.sum()
        state[1] = state[1] + x
        return state[0] + 1

    outs = [step(mx.array([1.0, 2.0, 3.0])) for _ in range(3)]
    return [outs, state, calls.n]


@case("compile-module-state")
def _():
    mx.random.seed(4)
    calls = counter()
    model = nn.Linear(4, 2)
    opt = optim.SGD(learning_rate=0.1, momentum=0.5)
    loss_and_grad = nn.value_and_grad(model, lambda m, x, y: nn.losses.mse_loss(m(x), y))

    @functools.partial(mx.compile, inputs=[model.state, opt.state], outputs=[model.state, opt.state])
    @calls
    def step(x, y):
        loss, grads = loss_and_grad(model, x, y)
        opt.update(model, grads)
        return loss

    x, y = normal((8, 4), 0), normal((8, 2), 1)
    losses = []
    for _ in range(4):
        losses.append(step(x, y))
        mx.eval(model.state, opt.state)
    return [losses, dict(tree_flatten(model.parameters())), calls.n]


@case("compile-inside-grad-and-vmap")
def _():
    calls = counter()
    f = mx.compile(calls(lambda x: mx.sin(x) * x))
    x = normal((4, 3))
    return [mx.grad(lambda x: f(x).sum())(x), mx.vmap(f)(x), mx.compile(mx.grad(lambda x: f(x).sum()))(x), calls.n]


@case("compile-shapeless-fast-ops")
def _():
    calls = counter()
    w = normal((8,), 1)
    f = mx.compile(calls(lambda a: mx.fast.rms_norm(a, w, 1e-5) + mx.fast.layer_norm(a, w, w, 1e-5)
                         + mx.fast.scaled_dot_product_attention(a, a, a, scale=0.5)), shapeless=True)
    return [f(normal((1, 2, 3, 8), 2)), f(normal((1, 2, 5, 8), 3)), f(normal((2, 1, 4, 8), 4)), calls.n]




def _exported(fn, *calls, shapeless=False):
    """fn exported to a file (traced on calls[0]) and imported back: its results on calls."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "fn.mlxfn")
        mx.export_function(path, fn, *calls[0], shapeless=shapeless)
        imported = mx.import_function(path)
        out = [imported(*args) for args in calls]
        mx.eval(out)
        return out


case("export-import-function", lambda: [
    _exported(lambda x, y: [mx.exp(x) @ y, (x * 2).sum()], (normal((2, 3)), normal((3, 2), 1))),
    _exported(lambda x: mx.tanh(x) * 2, (normal((2, 3)),), (normal((4, 3), 1),), shapeless=True)])
case("export-import-fast-norms-rope", lambda: _exported(
    lambda a, w: [mx.fast.rms_norm(a, w, 1e-5), mx.fast.layer_norm(a, w, None, 1e-5),
                  mx.fast.rope(a, 8, traditional=True, base=10000.0, scale=1.0, offset=0)],
    (normal((1, 2, 3, 8)), normal((8,), 1))))
case("export-import-fast-sdpa", lambda: _exported(
    lambda a: mx.fast.scaled_dot_product_attention(a, a * 2, a, scale=0.5, mask="causal"), (normal((1, 2, 3, 8)),)))


@case("exporter-fast-ops")
def _():
    # mx.exporter traces at each call: each trace must hold MLX's own fast ops too
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "fn.mlxfn")
        with mx.exporter(path, lambda a: mx.fast.rms_norm(a, None, 1e-5) * 2) as exporter:
            exporter(normal((2, 8)))
            exporter(normal((3, 8), 1))
        imported = mx.import_function(path)
        out = [imported(normal((2, 8), 2)), imported(normal((3, 8), 3))]
        mx.eval(out)
        return out


# MLX 0.32.4 passes a compiled function's non-array outputs through (it does not raise)
case("compile-non-array-outputs", lambda: mx.compile(lambda x: [x + 1, "tag", None, 2.5])(mx.ones(2)))


# evaluation and reads
@case("reads-async-eval-item-tolist")
def _():
    x = mx.arange(12, dtype=mx.float32).reshape(3, 4)
    y = x * 2 + 1
    mx.async_eval(y)
    z = y.sum(axis=0)
    mx.eval(z)
    h = (x / 3).astype(mx.bfloat16)
    mx.async_eval(h, [z * 2])
    mx.synchronize()
    return [y[1, 2].item(), y.tolist(), np.array(y), np.array(y.T), z, int(y[0, 0]), float(y.sum()), bool(y.any()),
            repr(y[0]), str(y[:, 0]), f"{y[0, 1].item():.2f}", h.tolist(), h[2, 3].item(), mx.array([1, -2]).tolist(),
            mx.array([True, False]).tolist(), mx.array([1 + 1j]).tolist(), mx.array(5, mx.uint64).item(),
            np.asarray(mx.arange(5, dtype=mx.int8)[::-2]), repr(mx.array([1.5, 2], mx.float16)), len(y), y.size,
            y.nbytes, [r.tolist() for r in z], copy.deepcopy(y * 1), copy.copy(y + 1),
            pickle.loads(pickle.dumps(h * 2)), bytes(memoryview(z * 1)), memoryview(y.T).tolist(),
            np.from_dlpack(y + 2), complex(mx.array(1 + 2j) * 2), [10, 20, 30][mx.array(1) + 1],
            f"{(y[0, 0] * 3):.1f}"]


@case("reads-eval-non-arrays")
def _():
    x = mx.ones(2) * 3
    mx.eval([x, 1, None, {"a": "b"}])
    mx.eval()
    mx.async_eval("a", x + 1)
    return [mx.eval(3), mx.async_eval(), x]


@case("streams-and-threads")
def _():
    s = mx.new_stream(mx.cpu)
    x = normal((4, 4))
    y = mx.add(x, 1, stream=s)
    with mx.stream(s):
        z = y @ y
    mx.async_eval(z)
    mx.synchronize(s)
    found = {}

    def work():  # evaluated and read on another thread
        found["t"] = np.array(mx.exp(x) * 2)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    return [y, z, mx.multiply(z, 2, stream=mx.cpu), found["t"], mx.depends([x + 1], [z])]


@case("reads-lazy-chain-and-views")
def _():
    x = normal((64,), 0)
    ys = []
    for i in range(4):
        x = x * 0.5 + i
        mx.async_eval(x)
        ys.append(x)
    v = ys[-1].reshape(8, 8)[::2, 1::3]
    return [ys, v, v.tolist(), ys[0][3].item(), np.array(v)]


# errors
case("error-broadcast", lambda: mx.ones((2, 3)) + mx.ones((4,)))
case("error-matmul-shapes", lambda: mx.ones((2, 2)) @ mx.ones((3, 2)))
case("error-matmul-integer", lambda: mx.ones((2, 3), mx.int32) @ mx.ones((3, 2), mx.int32))
case("error-reshape", lambda: mx.arange(3).reshape(2, 2))
case("error-sum-axis", lambda: mx.sum(mx.ones((2, 3)), axis=3))
case("error-transpose-axes", lambda: mx.transpose(mx.ones((2, 3)), (0, 2)))
case("error-concatenate", lambda: mx.concatenate([mx.ones((2, 3)), mx.ones((2, 4))]))
case("error-take-axis", lambda: mx.take(mx.ones((2, 3)), mx.array([0]), axis=2))
case("error-bitwise-float", lambda: mx.bitwise_and(mx.ones(2), mx.ones(2)))
case("error-shift-float", lambda: mx.ones(2) << 1)
case("error-astype-argument", lambda: mx.ones(3).astype("float32"))
case("error-int8-scalar-overflow", lambda: mx.ones(2, mx.int8) + 300)
case("error-empty-max", lambda: mx.max(mx.zeros((0,))))
case("error-item-size", lambda: mx.array([1, 2]).item())
case("error-grad-non-scalar", lambda: mx.grad(lambda x: x)(mx.ones(2)))
case("error-eval-inside-vmap", lambda: mx.vmap(lambda x: mx.eval(x * 2) or x)(mx.ones((2, 3))))
case("error-eval-inside-compile", lambda: mx.compile(lambda x: mx.eval(x * 2) or x)(mx.ones((2, 3))))
case("error-inv-gpu-stream", lambda: mx.linalg.inv(mx.eye(3), stream=mx.gpu))
case("error-inv-singular", lambda: mx.linalg.inv(mx.zeros((3, 3)), stream=mx.cpu))
case("error-quantize-group-size", lambda: mx.quantize(normal((32, 128)), group_size=48, bits=4))
case("error-load-missing", lambda: mx.load("/nonexistent/conformance/missing.npy"))
case("error-random-key-dtype", lambda: mx.random.split(mx.array([1.0, 2.0])))
case("error-rms-norm-weight", lambda: mx.fast.rms_norm(mx.ones((2, 4)), mx.ones(3), 1e-5))
case("error-layer-norm-weight", lambda: mx.fast.layer_norm(mx.ones((1, 4)), mx.ones(3), None, 1e-5))
case("error-rope-odd-dims", lambda: mx.fast.rope(mx.ones((1, 2, 3, 4)), 5, traditional=False, base=10000.0,
                                                 scale=1.0, offset=0))
case("error-sdpa-mask-string", lambda: mx.fast.scaled_dot_product_attention(
    mx.ones((1, 2, 3, 4)), mx.ones((1, 2, 3, 4)), mx.ones((1, 2, 3, 4)), scale=1.0, mask="bad"))
case("error-sdpa-rank", lambda: mx.fast.scaled_dot_product_attention(
    mx.ones((2, 3, 4)), mx.ones((2, 3, 4)), mx.ones((2, 3, 4)), scale=1.0))
case("error-sdpa-kv-heads", lambda: mx.fast.scaled_dot_product_attention(
    mx.ones((1, 3, 2, 8)), mx.ones((1, 2, 2, 8)), mx.ones((1, 2, 2, 8)), scale=1.0))
case("error-rms-norm-int", lambda: mx.fast.rms_norm(mx.ones((2, 8), mx.int32), mx.ones(8, mx.int32), 1e-5))
case("error-rope-float-offset", lambda: mx.fast.rope(mx.ones((1, 2, 8)), 8, traditional=False, base=10000.0,
                                                     scale=1.0, offset=mx.array(1.5)))
case("error-as-strided-reversed", lambda: mx.as_strided(mx.arange(10)[::-1], (3,), (1,)))
case("error-view-larger-dtype", lambda: mx.arange(3, dtype=mx.int8).view(mx.int16))
case("error-numpy-bfloat16", lambda: np.array(mx.ones(2, mx.bfloat16) * 2))
case("error-format-vector", lambda: f"{mx.ones(2) * 2:.2f}")
case("error-bool-vector", lambda: bool(mx.ones(2) * 2))
case("error-index-float", lambda: [1, 2, 3][mx.array(1.0) * 1])
case("error-inv-singular-read", lambda: mx.linalg.inv(mx.zeros((3, 3)), stream=mx.cpu).tolist())
case("error-sdpa-head-dims", lambda: mx.fast.scaled_dot_product_attention(
    mx.ones((1, 2, 3, 4)), mx.ones((1, 2, 3, 5)), mx.ones((1, 2, 3, 4)), scale=1.0))

# argument errors of the functions enable() puts in MLX's place (mx.eval, the memory
# functions, mx.save*, mx.fast.*): MLX's own bindings raise these
case("error-eval-keyword-argument", lambda: mx.eval(x=mx.ones(2)))
case("error-synchronize-bad-stream", lambda: mx.synchronize("gpu0"))
case("error-memory-function-argument", lambda: mx.get_active_memory(0))
case("error-set-cache-limit-negative", lambda: mx.set_cache_limit(-1))
case("error-set-wired-limit-negative", lambda: mx.set_wired_limit(-1))
case("error-save-missing-arguments", lambda: mx.save())
case("error-rms-norm-missing-eps", lambda: mx.fast.rms_norm(mx.ones((2, 8)), None))
case("error-rms-norm-numpy-input", lambda: mx.fast.rms_norm(np.ones((2, 8), np.float32), None, 1e-5))


@case("memory-cache-limit-takes-bool")
def _():
    old = mx.set_cache_limit(True)  # a bool is an int to MLX's binding
    mx.set_cache_limit(old)
    return type(old).__name__       # the value is the pool's own


@pytest.mark.parametrize("program", PROGRAMS)
def test_program_behaves_as_in_plain_mlx(runtime, program):
    assert_same_behaviour(program, program.expected)


# --- dedicated checks --------------------------------------------------------------------
def test_compiled_function_keeps_its_cache_across_modes(runtime):
    """mlx-amd leaves mx.compile to MLX: a function compiled in one mode and called in the
    other is traced once, as when both calls are plain."""
    def count(first, second):
        calls = counter()
        f = mx.compile(calls(lambda x: x * 3 + 1))
        x = mx.arange(4, dtype=mx.float32)
        with first():
            a = np.array(f(x))
        with second():
            b = np.array(f(x))
        return calls.n, a.tolist(), b.tolist()

    with plain_mlx():
        ref = count(plain_mlx, plain_mlx)
    assert ref[0] == 1
    assert count(plain_mlx, mlx_amd.enable) == ref
    assert count(mlx_amd.enable, plain_mlx) == ref


def test_memory_counters_under_enable(runtime):
    assert mx.get_active_memory is mlx_amd.get_active_memory
    x = mx.random.normal((256, 256), key=mx.random.key(0))
    y = x @ x
    mx.eval(y)
    active, peak, cache = mx.get_active_memory(), mx.get_peak_memory(), mx.get_cache_memory()
    assert all(type(v) is int and v >= 0 for v in (active, peak, cache, mx.get_memory_limit()))
    assert peak >= active
    if runtime.driver.platform != "host":  # the host driver leaves every result in MLX's memory
        assert active >= y.nbytes
    assert mx.reset_peak_memory() is None
    assert mx.get_peak_memory() == mx.get_active_memory()
    old = mx.set_cache_limit(1 << 20)
    assert type(old) is int and mx.set_cache_limit(old) == 1 << 20
    old = mx.set_memory_limit(1 << 34)
    assert type(old) is int and mx.set_memory_limit(old) == 1 << 34
    del x, y
    assert mx.clear_cache() is None
    assert mx.get_cache_memory() == 0
    # a zero cache limit keeps nothing cached through further work
    old = mx.set_cache_limit(0)
    try:
        mx.eval(mx.ones((512, 512)) * 2)
        assert mx.get_cache_memory() == 0
    finally:
        mx.set_cache_limit(old)
    with plain_mlx():
        for name, fn in _PLAIN.items():
            assert getattr(mx, name) is fn, name
        assert mx.fast.rms_norm is _PLAIN_RMS_NORM and mx.array.item is _PLAIN_ITEM
        assert type(mx.get_active_memory()) is int and type(mx.get_peak_memory()) is int
    assert mx.get_active_memory is mlx_amd.get_active_memory and mx.eval is mlx_amd.eval


_SAVED = {"f32": np.arange(12, dtype=np.float32).reshape(3, 4) / 7, "i32": np.arange(-3, 3, dtype=np.int32),
          "u8": np.array([0, 255, 7], dtype=np.uint8), "f16": np.array([0.5, -2, 65504], dtype=np.float16),
          "b": np.array([True, False, True])}
_FORMATS = {  # what each format holds, and how to save it
    "npy": (["f32"], lambda p, a: mx.save(p, a["f32"])),
    "npz": (list(_SAVED), lambda p, a: mx.savez(p, **a)),
    "safetensors": (list(_SAVED), lambda p, a: mx.save_safetensors(p, a, metadata={"k": "v"})),
    "gguf": (["f32", "i32", "f16"], lambda p, a: mx.save_gguf(p, a)),
}


@pytest.mark.parametrize("fmt", list(_FORMATS))
@pytest.mark.parametrize("direction", ["plain-to-amd", "amd-to-plain"])
def test_save_load_across_modes(runtime, tmp_path, fmt, direction):
    keys, save = _FORMATS[fmt]

    def roundtrip(path, save_mode, load_mode):
        def program():
            with save_mode():
                # lazy results and a transposed view: the saved bytes must be the logical values
                arrays = {k: mx.array(_SAVED[k]) for k in keys}
                arrays["f32"] = (mx.array(_SAVED["f32"].T) * 1).T
                save(str(path), arrays)
            with load_mode():  # mx.load is lazy: evaluate in the loading mode
                loaded = mx.load(str(path))
                out = [loaded, {k: v * 2 for k, v in loaded.items() if v.dtype != mx.bool_}] \
                    if isinstance(loaded, dict) else [loaded, loaded.T + 1]
                mx.eval(out)
                return out
        return program

    modes = (plain_mlx, mlx_amd.enable) if direction == "plain-to-amd" else (mlx_amd.enable, plain_mlx)
    with plain_mlx():
        ref = outcome(roundtrip(tmp_path / f"ref.{fmt}", plain_mlx, plain_mlx))
    assert ref[0] == "ok", ref
    assert_same(outcome(roundtrip(tmp_path / f"got.{fmt}", *modes)), ref)


def test_shapeless_compile_of_rope_works_as_on_mlx_gpu_backends(runtime):
    """The one intended difference: MLX's CPU wheel decomposes mx.fast.rope into slices,
    which a shapeless compile cannot shape; MLX's GPU backends build their fused RoPE, whose
    output shape is its input's, and so does mlx-amd. Plain MLX here raises; ours computes
    what the eager call computes."""
    def f(a):
        return mx.fast.rope(a, 8, traditional=False, base=10000.0, scale=1.0, offset=1)

    with plain_mlx():
        kind, value = outcome(lambda: mx.compile(f, shapeless=True)(normal((1, 2, 3, 8))))
    assert kind == "raise" and value[0] is ValueError and "infer output shapes" in value[1], value
    compiled = mx.compile(f, shapeless=True)
    for shape, seed in (((1, 2, 3, 8), 0), ((2, 1, 5, 8), 1)):
        x = normal(shape, seed)
        np.testing.assert_allclose(np.array(compiled(x)), np.array(f(x)), rtol=1e-6, atol=1e-6)
