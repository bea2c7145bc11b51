"""Unary launcher: y = op(x) for MLX's unary math primitives (hip_kernels/unary.hip)."""

from __future__ import annotations

from .. import kernel_table as kt
from . import elementwise as ew
from .elementwise import Layout
from ..plan import inp, tmp
from ..plan import out as outref
from . import copy as _copy

FAMILY = "unary"

# MLX primitive class -> op name (Log and Sqrt are refined by their parameters: op_for).
PRIMITIVES = {
    "Abs": "abs", "Negative": "negative", "Square": "square", "Sign": "sign",
    "Exp": "exp", "Expm1": "expm1", "Log": "log", "Log1p": "log1p", "Sqrt": "sqrt",
    "Sin": "sin", "Cos": "cos", "Tan": "tan", "Tanh": "tanh", "Sinh": "sinh", "Cosh": "cosh",
    "ArcSin": "arcsin", "ArcCos": "arccos", "ArcTan": "arctan", "ArcSinh": "arcsinh",
    "ArcCosh": "arccosh", "ArcTanh": "arctanh", "Sigmoid": "sigmoid", "Erf": "erf",
    "ErfInv": "erfinv", "Floor": "floor", "Ceil": "ceil", "Round": "round",
    "LogicalNot": "logical_not", "BitwiseInvert": "bitwise_invert", "Conjugate": "conjugate",
    "Real": "real", "Imag": "imag",
}

# Log::Base in MLX's primitives.h is enum { two, ten, e }: the bridge may pass the
# enumerator's value or its name.
_LOG_BASES = {0: "log2", 1: "log10", 2: "log", "two": "log2", "ten": "log10", "e": "log"}


def op_for(primitive: str, params=()) -> str | None:
    """Op name for an MLX primitive and its ``state()`` parameters; None if unsupported."""
    op = PRIMITIVES.get(primitive)
    params = tuple(params or ())
    if primitive == "Log" and params:
        return _LOG_BASES.get(params[0])
    if primitive == "Sqrt" and params and params[0]:
        return "rsqrt"
    return op


def _resolve(op, ins, out, params):
    """(op, kernel dtype) for ``out = op(ins[0])``; kernel dtype "identity" for the ops
    that leave this dtype unchanged (abs of unsigned, floor of integers): a copy."""
    if op in PRIMITIVES:
        op = op_for(op, params)
    if op is None or op not in kt.UNARY or len(ins) != 1:
        return None
    (x,) = ins
    if x.shape != out.shape or not out.row_contiguous:
        return None
    if x.dtype in kt.UNARY_IDENTITY.get(op, ()):
        return (op, "identity") if out.dtype == x.dtype else None
    if op == "abs" and x.dtype == "complex64":
        op = "abs_c"
    kd = kt.unary_kernel_dtype(op, x.dtype)
    if kd is None:
        return None
    want = kt.UNARY[op][2] or x.dtype
    if out.dtype != want:
        return None
    return op, kd


def plan(op: str, ins: tuple, out: Layout, device, params=()):
    """Launch for ``out = op(ins[0])``, or None when no single kernel covers it.

    ``op`` is an op name (``"exp"``) or an MLX primitive class name with ``params``.
    """
    r = _resolve(op, ins, out, params)
    if r is None:
        return None
    op, kd = r
    (x,) = ins
    if kd == "identity":
        return _copy.plan("copy", ins, out, device)
    od = kt.UNARY[op][2] or kd
    n = out.size
    if ew.is_dense_like(x, out):
        name = kt.kernel_name(FAMILY, "v", op, kd, od)
        return ew.contiguous_launch(FAMILY, name, n, 2, kd, od, device)
    shape, (st,) = ew.collapse_dims(out.shape, x.strides)
    if len(shape) > ew.MAX_DIMS or ew.needs_i64(n, shape, st):
        return None
    name = kt.kernel_name(FAMILY, "g", op, kd, od)
    return ew.strided_launch(FAMILY, name, n, 2, shape, (st,), device)


def plan_steps(op: str, ins: tuple, out: Layout, device, params=()):
    """(steps, temps): one launch, or (past 32-bit indices) a same-size copy of the input
    into a contiguous temporary and the contiguous kernel on it."""
    one = plan(op, ins, out, device, params)
    if one is not None:
        return (ew.with_refs(one, (inp(0), outref(0))),), ()
    r = _resolve(op, ins, out, params)
    if r is None:
        return None
    op, kd = r
    (x,) = ins
    if kd == "identity":
        return _copy.plan_steps("copy", ins, out, device)
    first = ew.dense_copy_launch(x, out.shape, inp(0), tmp(0), device)
    if first is None:
        return None
    od = kt.UNARY[op][2] or kd
    name = kt.kernel_name(FAMILY, "v", op, kd, od)
    second = ew.with_refs(ew.contiguous_launch(FAMILY, name, out.size, 2, kd, od, device), (tmp(0), outref(0)))
    return (first, second), (max(out.size * x.itemsize, 1),)


def plan_node(node, device):
    """The node's plan; the output may take over an input's buffer (each element is read
    and written by the same thread)."""
    return ew.elementwise_plan(plan_steps, node, device)
