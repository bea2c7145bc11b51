"""Copy launcher: dtype conversion (AsType) and strided -> row-contiguous copies (Copy,
Contiguous, and the reshapes that cannot be views) through hip_kernels/copy.hip.

Conversions reproduce MLX's x86 CPU build bit for bit (mlxa::cast and mlxa::apply in
hip_kernels/include/mlxa/): float -> integer truncates toward zero, and for NaN and
out-of-range values (undefined in C++) gives what that build gives: INT_MIN/INT64_MIN
for int32/int64, the int32 result's low byte for uint8, a split at 2^31 for uint32 from
float32/bfloat16 and the int64 result's low word for uint32 from float16. (MLX's own
float32/bfloat16 -> uint32 result for NaN, inf and values below -2^31 differs between
its contiguous and strided paths; we give its contiguous one everywhere.) float -> bool
is x != 0 (NaN is true); rounding to float16/bfloat16 is to nearest even; NaNs take
MLX's encodings (float16 sign|0x7D00, bfloat16 0x7FC0). MLX's GPU backends saturate
instead; we follow the CPU build because it is the oracle on these machines.
"""

from __future__ import annotations

from .. import kernel_table as kt
from . import elementwise as ew
from .elementwise import Layout
from ..plan import Plan

FAMILY = "copy"

PRIMITIVES = {
    "AsType": "astype", "Copy": "copy", "Contiguous": "copy",
    # mx.full / zeros / ones: the input is the value already cast and broadcast to shape
    "Full": "copy",
    # reached only when the bridge could not make them views: a row-major gather
    "Reshape": "reshape", "Flatten": "reshape", "Unflatten": "reshape",
}


# Below this edge a transpose tile would be mostly idle threads: the strided kernel serves.
TRANSPOSE_MIN = 16


def op_for(primitive: str, params=()) -> str | None:
    return PRIMITIVES.get(primitive)


def plan(op: str, ins: tuple, out: Layout, device, params=()):
    """Launch writing ``ins[0]`` converted to ``out.dtype`` as a row-contiguous array of
    ``out.shape``; reshapes read the input in its own row-major order."""
    if op in PRIMITIVES:
        op = op_for(op, params)
    if op not in ("astype", "copy", "reshape") or len(ins) != 1:
        return None
    (x,) = ins
    if x.dtype not in kt.COPY_DTYPES or out.dtype not in kt.COPY_DTYPES:
        return None
    if op != "astype" and x.dtype != out.dtype:
        return None
    if not out.row_contiguous:
        return None
    n = out.size
    if x.size != n or (op != "reshape" and x.shape != out.shape):
        return None
    dense = (x.row_contiguous and x.data_size == n) if op == "reshape" else ew.is_dense_like(x, out)
    if dense:
        name = kt.kernel_name(FAMILY, "v", None, x.dtype, out.dtype)
        return ew.contiguous_launch(FAMILY, name, n, 2, x.dtype, out.dtype, device)
    shape, (st,) = ew.collapse_dims(x.shape, x.strides)
    if len(shape) > ew.MAX_DIMS:
        return None
    if op != "reshape" and len(shape) in (2, 3):
        # a (batched) transpose: contiguous along the output's rows, not its columns
        (rows, cols), (rs, cs) = shape[-2:], st[-2:]
        if rs == 1 and cs not in (0, 1) and min(rows, cols) >= TRANSPOSE_MIN:
            batch, bs = (shape[0], st[0]) if len(shape) == 3 else (1, 0)
            name = kt.kernel_name(FAMILY, "t", None, x.dtype, out.dtype)
            return ew.transpose_launch(FAMILY, name, rows, cols, batch, (rs, cs, bs), device)
    name = kt.kernel_name(FAMILY, "g", None, x.dtype, out.dtype, ew.needs_i64(n, shape, st))
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
