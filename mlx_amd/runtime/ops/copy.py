"""Copy launcher: dtype conversion (AsType) and strided -> row-contiguous copies (Copy,
Contiguous, and the reshapes that cannot be views) through hip_kernels/copy.hip.

Conversions reproduce MLX's x86 CPU build bit for bit (mlxa::cast and mlxa::apply in
hip_kernels/include/mlxa/): float -> integer truncates toward zero, and for NaN and
out-of-range values (undefined in C++) gives what that build gives: INT_MIN/INT64_MIN
for int32/int64, the int32 result's low byte for uint8, a split at 2^31 for uint32 from
float32/bfloat16 and the int64 result's low word for uint32 from float16. (MLX's own
float32/bfloat16 -> uint32 result for NaN, inf and values below -2^31 differs between
its contiguous and strided paths; we give its contiguous one everywhere.) The other
widths: int8/uint8/int16/uint16 keep the low bits of the int32 result; uint64 splits at
2^63 like uint32 at 2^31; float64 sources follow the same rules in double; float64 ->
float16/bfloat16 rounds through float32; float32 <-> float64 keep NaN payloads the x86
way (truncated / shifted, quiet bit set); complex64 -> real takes the real part (bool:
either part nonzero); real -> complex64 has a zero imaginary part. float -> bool
is x != 0 (NaN is true); rounding to float16/bfloat16 is to nearest even; NaNs take
MLX's encodings (float16 sign|0x7D00, bfloat16 0x7FC0). MLX's GPU backends saturate
instead; we follow the CPU build because it is the oracle on these machines.
"""

from __future__ import annotations

from .. import kernel_table as kt
from . import elementwise as ew
from .elementwise import Layout
from ..plan import inp, tmp
from ..plan import out as outref

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


def _kernel_exists(layout: str, src: str, dst: str, large: bool = False) -> bool:
    return kt.has_kernel(FAMILY, kt.kernel_name(FAMILY, layout, None, src, dst, large))


def _check(op, ins, out, params):
    if op in PRIMITIVES:
        op = op_for(op, params)
    if op not in ("astype", "copy", "reshape") or len(ins) != 1:
        return None
    (x,) = ins
    if x.dtype not in kt.CTYPES or out.dtype not in kt.CTYPES:
        return None
    if op != "astype" and x.dtype != out.dtype:
        return None
    if not out.row_contiguous or x.size != out.size or (op != "reshape" and x.shape != out.shape):
        return None
    return op


def copy_to(x: Layout, src_ref, dst_ref, device, out: Layout = None):
    """A launch copying ``x`` (any layout, read at ``src_ref``) to ``dst_ref`` as ``out``, by
    default x row-contiguous (what a family needs before a kernel that takes one layout);
    None when no single kernel covers it."""
    lau = plan("copy", (x,), out or Layout.row_major(x.shape, x.dtype), device)
    return None if lau is None else ew.with_refs(lau, (src_ref, dst_ref))


def plan(op: str, ins: tuple, out: Layout, device, params=()):
    """Launch writing ``ins[0]`` converted to ``out.dtype`` as a row-contiguous array of
    ``out.shape``; reshapes read the input in its own row-major order. None when no single
    kernel covers it (``plan_steps`` then chains a same-size copy and a conversion)."""
    op = _check(op, ins, out, params)
    if op is None:
        return None
    (x,) = ins
    src, dst = kt.copy_kernel_dtypes(x.dtype, out.dtype)
    n = out.size
    dense = (x.row_contiguous and x.data_size == n) if op == "reshape" else ew.is_dense_like(x, out)
    if dense:
        name = kt.kernel_name(FAMILY, "v", None, src, dst)
        return ew.contiguous_launch(FAMILY, name, n, 2, src, dst, device)
    shape, (st,) = ew.collapse_dims(x.shape, x.strides)
    if len(shape) > ew.MAX_DIMS:
        return None
    if op != "reshape" and len(shape) in (2, 3) and _kernel_exists("t", src, dst):
        # a (batched) transpose: contiguous along the output's rows, not its columns
        (rows, cols), (rs, cs) = shape[-2:], st[-2:]
        if rs == 1 and cs not in (0, 1) and min(rows, cols) >= TRANSPOSE_MIN:
            batch, bs = (shape[0], st[0]) if len(shape) == 3 else (1, 0)
            name = kt.kernel_name(FAMILY, "t", None, src, dst)
            return ew.transpose_launch(FAMILY, name, rows, cols, batch, (rs, cs, bs), device)
    large = ew.needs_i64(n, shape, st)
    if not _kernel_exists("g", src, dst, large):
        return None
    name = kt.kernel_name(FAMILY, "g", None, src, dst, large)
    return ew.strided_launch(FAMILY, name, n, 2, shape, (st,), device)


def plan_steps(op: str, ins: tuple, out: Layout, device, params=()):
    """(steps, temps) for the node: one launch, or a same-size strided copy of the input
    into a contiguous temporary followed by the contiguous conversion. None if neither."""
    one = plan(op, ins, out, device, params)
    if one is not None:
        return (ew.with_refs(one, (inp(0), outref(0))),), ()
    op = _check(op, ins, out, params)
    if op is None:
        return None
    (x,) = ins
    n = out.size
    first = ew.dense_copy_launch(x, x.shape, inp(0), tmp(0), device)
    if first is None:
        return None
    src, dst = kt.copy_kernel_dtypes(x.dtype, out.dtype)
    name = kt.kernel_name(FAMILY, "v", None, src, dst)
    second = ew.with_refs(ew.contiguous_launch(FAMILY, name, n, 2, src, dst, device), (tmp(0), outref(0)))
    return (first, second), (max(n * x.itemsize, 1),)


def plan_node(node, device):
    """The node's plan; the output may take over an input's buffer (each element is read
    and written by the same thread, or the input was copied to a temporary first)."""
    return ew.elementwise_plan(plan_steps, node, device)
