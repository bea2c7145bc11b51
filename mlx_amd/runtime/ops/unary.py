"""Unary launcher: y = op(x) for MLX's unary math primitives (hip_kernels/unary.hip)."""

from __future__ import annotations

from .. import kernel_table as kt
from . import elementwise as ew
from .elementwise import Layout
from ..plan import Plan

FAMILY = "unary"

# MLX primitive class -> op name (Log and Sqrt are refined by their parameters: op_for).
PRIMITIVES = {
    "Abs": "abs", "Negative": "negative", "Square": "square", "Sign": "sign",
    "Exp": "exp", "Expm1": "expm1", "Log": "log", "Log1p": "log1p", "Sqrt": "sqrt",
    "Sin": "sin", "Cos": "cos", "Tan": "tan", "Tanh": "tanh", "Sinh": "sinh", "Cosh": "cosh",
    "ArcSin": "arcsin", "ArcCos": "arccos", "ArcTan": "arctan", "ArcSinh": "arcsinh",
    "ArcCosh": "arccosh", "ArcTanh": "arctanh", "Sigmoid": "sigmoid", "Erf": "erf",
    "ErfInv": "erfinv", "Floor": "floor", "Ceil": "ceil", "Round": "round",
    "LogicalNot": "logical_not",
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


def plan(op: str, ins: tuple, out: Layout, device, params=()):
    """Launch for ``out = op(ins[0])``, or None when no kernel covers it.

    ``op`` is an op name (``"exp"``) or an MLX primitive class name with ``params``.
    """
    if op in PRIMITIVES:
        op = op_for(op, params)
    entry = kt.UNARY.get(op)
    if entry is None or len(ins) != 1:
        return None
    (x,) = ins
    if x.dtype not in entry[1] or out.dtype != x.dtype or x.shape != out.shape:
        return None
    if not out.row_contiguous:
        return None
    n = out.size
    if ew.is_dense_like(x, out):
        name = kt.kernel_name(FAMILY, "v", op, x.dtype, out.dtype)
        return ew.contiguous_launch(FAMILY, name, n, 2, x.dtype, out.dtype, device)
    shape, (st,) = ew.collapse_dims(out.shape, x.strides)
    if len(shape) > ew.MAX_DIMS:
        return None
    name = kt.kernel_name(FAMILY, "g", op, x.dtype, out.dtype, ew.needs_i64(n, shape, st))
    return ew.strided_launch(FAMILY, name, n, 2, shape, (st,), device)


def plan_node(node, device):
    """The node's plan: one launch; the output may take over an input's buffer (each
    element is read and written by the same thread)."""
    if len(node.outs) != 1:
        return None
    launch = plan(node.prim, node.ins, node.out, device, node.params)
    if launch is None:
        return None
    return Plan((launch,), donate=tuple((0, i) for i in range(len(node.ins))))
