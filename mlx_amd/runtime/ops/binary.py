"""Binary launcher: z = op(a, b) for MLX's binary arithmetic, comparison and logical
primitives (hip_kernels/binary.hip). MLX broadcasts and promotes before the primitive:
both inputs arrive with the output's shape (zero strides where broadcast) and one dtype.
"""

from __future__ import annotations

from .. import kernel_table as kt
from . import elementwise as ew
from .elementwise import Layout
from ..plan import Plan

FAMILY = "binary"

PRIMITIVES = {
    "Add": "add", "Subtract": "subtract", "Multiply": "multiply", "Divide": "divide", "FloorDivide": "floor_divide",
    "Maximum": "maximum", "Minimum": "minimum", "Power": "power", "Remainder": "remainder",
    "ArcTan2": "arctan2", "LogAddExp": "logaddexp", "Equal": "equal", "NotEqual": "not_equal",
    "Less": "less", "LessEqual": "less_equal", "Greater": "greater",
    "GreaterEqual": "greater_equal", "LogicalAnd": "logical_and", "LogicalOr": "logical_or",
}


def op_for(primitive: str, params=()) -> str | None:
    if primitive == "Equal" and params and params[0]:
        return None   # equal_nan=True (array_equal(..., equal_nan=True)): MLX's CPU does it
    return PRIMITIVES.get(primitive)


def plan(op: str, ins: tuple, out: Layout, device, params=()):
    """Launch for ``out = op(ins[0], ins[1])``, or None when no kernel covers it."""
    if op in PRIMITIVES:
        op = op_for(op, params)
    entry = kt.BINARY.get(op)
    if entry is None or len(ins) != 2:
        return None
    _, dtypes, out_dtype = entry
    a, b = ins
    if a.dtype != b.dtype or a.dtype not in dtypes or out.dtype != (out_dtype or a.dtype):
        return None
    if a.shape != out.shape or b.shape != out.shape:
        return None
    if not out.row_contiguous:
        return None
    n = out.size
    kinds = tuple("s" if ew.is_scalar(x) else "v" if ew.is_dense_like(x, out) else None
                  for x in ins)
    if None not in kinds:
        name = kt.kernel_name(FAMILY, "".join(kinds), op, a.dtype, out.dtype)
        return ew.contiguous_launch(FAMILY, name, n, 3, a.dtype, out.dtype, device)
    shape, (sa, sb) = ew.collapse_dims(out.shape, a.strides, b.strides)
    if len(shape) > ew.MAX_DIMS:
        return None
    name = kt.kernel_name(FAMILY, "g", op, a.dtype, out.dtype, ew.needs_i64(n, shape, sa, sb))
    return ew.strided_launch(FAMILY, name, n, 3, shape, (sa, sb), device)


def plan_node(node, device):
    """The node's plan: one launch; the output may take over an input's buffer (each
    element is read and written by the same thread)."""
    if len(node.outs) != 1:
        return None
    launch = plan(node.prim, node.ins, node.out, device, node.params)
    if launch is None:
        return None
    return Plan((launch,), donate=tuple((0, i) for i in range(len(node.ins))))
