"""Binary launcher: z = op(a, b) for MLX's binary arithmetic, comparison and logical
primitives (hip_kernels/binary.hip). MLX broadcasts and promotes before the primitive:
both inputs arrive with the output's shape (zero strides where broadcast) and one dtype.
"""

from __future__ import annotations

from .. import kernel_table as kt
from . import elementwise as ew
from .elementwise import Layout
from ..launch import Launch
from ..plan import Plan, inp, tmp
from ..plan import out as outref

FAMILY = "binary"

PRIMITIVES = {
    "Add": "add", "Subtract": "subtract", "Multiply": "multiply", "Divide": "divide", "FloorDivide": "floor_divide",
    "Maximum": "maximum", "Minimum": "minimum", "Power": "power", "Remainder": "remainder",
    "ArcTan2": "arctan2", "LogAddExp": "logaddexp", "Equal": "equal", "NotEqual": "not_equal",
    "Less": "less", "LessEqual": "less_equal", "Greater": "greater",
    "GreaterEqual": "greater_equal", "LogicalAnd": "logical_and", "LogicalOr": "logical_or",
    "BitwiseBinary": "bitwise", "DivMod": "divmod",
}

# BitwiseBinary::Op in MLX's primitives.h: And, Or, Xor, LeftShift, RightShift
_BITWISE = {0: "bitwise_and", 1: "bitwise_or", 2: "bitwise_xor", 3: "left_shift", 4: "right_shift"}


def op_for(primitive: str, params=()) -> str | None:
    if primitive == "Equal" and params and params[0]:
        return None   # equal_nan=True (array_equal(..., equal_nan=True)): MLX's CPU does it
    if primitive == "BitwiseBinary":
        return _BITWISE.get(params[0]) if params else None
    return PRIMITIVES.get(primitive)


def _resolve(op, ins, out, params):
    """(op, kernel dtype, kernel output dtype) for ``out = op(a, b)``, or None."""
    if op in PRIMITIVES:
        op = op_for(op, params)
    if op == "floor_divide" and ins and ins[0].dtype in ("float16", "bfloat16"):
        op = "floor_divide_r"
    entry = kt.BINARY.get(op)
    if entry is None or len(ins) != 2:
        return None
    a, b = ins
    if a.dtype != b.dtype or out.dtype != (entry[2] or a.dtype):
        return None
    if a.shape != out.shape or b.shape != out.shape or not out.row_contiguous:
        return None
    kd = kt.binary_kernel_dtype(op, a.dtype)
    if kd is None:
        return None
    return op, kd, entry[2] or kd


def plan(op: str, ins: tuple, out: Layout, device, params=()):
    """Launch for ``out = op(ins[0], ins[1])``, or None when no single kernel covers it."""
    r = _resolve(op, ins, out, params)
    if r is None:
        return None
    op, kd, od = r
    a, b = ins
    n = out.size
    kinds = tuple("s" if ew.is_scalar(x) else "v" if ew.is_dense_like(x, out) else None
                  for x in ins)
    lay = "".join(kinds) if None not in kinds else None
    if lay == "vv" or (lay in ("sv", "vs") and kd in kt.SCALAR_LAYOUT_DTYPES):
        name = kt.kernel_name(FAMILY, lay, op, kd, od)
        return ew.contiguous_launch(FAMILY, name, n, 3, kd, od, device)
    shape, (sa, sb) = ew.collapse_dims(out.shape, a.strides, b.strides)
    if len(shape) > ew.MAX_DIMS or ew.needs_i64(n, shape, sa, sb):
        return None
    name = kt.kernel_name(FAMILY, "g", op, kd, od)
    return ew.strided_launch(FAMILY, name, n, 3, shape, (sa, sb), device)


def _dense_inputs(ins, out, device):
    """Steps copying every operand that is not laid out like ``out`` into its own
    contiguous temporary; (steps, temps, refs of the operands) or None."""
    steps, temps, refs = [], [], []
    for i, x in enumerate(ins):
        if ew.is_dense_like(x, out):
            refs.append(inp(i))
            continue
        t = tmp(len(temps))
        launch = ew.dense_copy_launch(x, out.shape, inp(i), t, device)
        if launch is None:
            return None
        steps.append(launch)
        temps.append(max(out.size * x.itemsize, 1))
        refs.append(t)
    return steps, temps, refs


def plan_steps(op: str, ins: tuple, out: Layout, device, params=()):
    """(steps, temps): one launch, or (past 32-bit indices) same-size copies of the
    strided operands into contiguous temporaries and the vv kernel on them."""
    one = plan(op, ins, out, device, params)
    if one is not None:
        return (ew.with_refs(one, (inp(0), inp(1), outref(0))),), ()
    r = _resolve(op, ins, out, params)
    if r is None:
        return None
    op, kd, od = r
    got = _dense_inputs(ins, out, device)
    if got is None:
        return None
    steps, temps, refs = got
    name = kt.kernel_name(FAMILY, "vv", op, kd, od)
    last = ew.contiguous_launch(FAMILY, name, out.size, 3, kd, od, device)
    return tuple(steps) + (ew.with_refs(last, tuple(refs) + (outref(0),)),), tuple(temps)


def plan_divmod(ins: tuple, outs: tuple, device):
    """DivMod: one launch writing floor_divide to out(0) and remainder to out(1)."""
    if len(ins) != 2 or len(outs) != 2:
        return None
    a, b = ins
    q, r = outs
    dt = a.dtype
    if dt not in kt.DIVMOD_DTYPES or b.dtype != dt or q.dtype != dt or r.dtype != dt:
        return None
    if not (a.shape == b.shape == q.shape == r.shape) or not (q.row_contiguous and r.row_contiguous):
        return None
    n = q.size
    refs_out = (outref(0), outref(1))
    if ew.is_dense_like(a, q) and ew.is_dense_like(b, q):
        name = kt.kernel_name(FAMILY, "vv", "divmod", dt, dt)
        grid, block = ew.grid_for(n, device)
        return Plan((Launch(FAMILY, name, grid, block, 0, 4, ew.v_tail(n), (inp(0), inp(1)) + refs_out),))
    shape, (sa, sb) = ew.collapse_dims(q.shape, a.strides, b.strides)
    if len(shape) <= ew.MAX_DIMS and not ew.needs_i64(n, shape, sa, sb):
        name = kt.kernel_name(FAMILY, "g", "divmod", dt, dt)
        grid, block = ew.grid_for(n, device)
        return Plan((Launch(FAMILY, name, grid, block, 0, 4, ew.g_tail(n, shape, sa, sb),
                            (inp(0), inp(1)) + refs_out),))
    got = _dense_inputs(ins, q, device)
    if got is None:
        return None
    steps, temps, refs = got
    name = kt.kernel_name(FAMILY, "vv", "divmod", dt, dt)
    grid, block = ew.grid_for(n, device)
    last = Launch(FAMILY, name, grid, block, 0, 4, ew.v_tail(n), tuple(refs) + refs_out)
    return Plan(tuple(steps) + (last,), temps=tuple(temps))


def plan_node(node, device):
    """The node's plan; a single output may take over an input's buffer (each element is
    read and written by the same thread). DivMod has two outputs and its own plan."""
    if node.prim == "DivMod":
        return plan_divmod(node.ins, node.outs, device)
    return ew.elementwise_plan(plan_steps, node, device)
