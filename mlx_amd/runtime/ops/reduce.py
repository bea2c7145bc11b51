"""Reduce launcher: MLX's Reduce (sum, prod, min, max, and, or) and ArgReduce (argmin,
argmax) on hip_kernels/reduce.hip.

Planning, per node (pure, cached by the evaluator):
  1. split the input's dims into kept dims (output order, collapsed) and reduced dims
     (reordered innermost = smallest stride, collapsed): the reduction order does not
     matter for these ops, so any transposed or broadcast input collapses as far as its
     strides allow;
  2. pick the layout: ``row`` when the innermost reduced dim is the input's contiguous
     one (or the all-reduce), ``col`` when the innermost kept dim is, else whichever
     walks the smaller stride; complex min/max go to ``seq`` (MLX's NaN rules for them
     depend on element order);
  3. when the outputs alone cannot fill the GPU, split the reduced range: each split
     writes a partial (accumulator type) to a temporary laid out [output][split], and a
     second row pass over it finishes. Deterministic: no atomics, fixed order.
ArgReduce: one group of threads per output along the axis (``argrow``: contiguous axis
or few outputs), one thread per output (``argcol``: coalesced over the kept dims); a few
long float rows (a row of logits) in parts over many blocks, then the best of the parts
(``argsplit`` + ``argpairs``).
"""

from __future__ import annotations

import math
import struct

from .. import kernel_table as kt
from ..launch import Launch
from ..plan import ITEMSIZE, Plan, compute_units, inp, out, tmp, wave_width

FAMILY = "reduce"
PRIMITIVES = {"Reduce": "reduce", "ArgReduce": "arg_reduce"}

# Reduce::ReduceType { And, Or, Sum, Prod, Min, Max }, ArgReduce::ReduceType { ArgMin, ArgMax }
REDUCE_TYPES = {0: "and", 1: "or", 2: "sum", 3: "prod", 4: "min", 5: "max"}
ARG_TYPES = {0: "argmin", 1: "argmax"}
_NAMES = {"And": "and", "Or": "or", "Sum": "sum", "Prod": "prod", "Min": "min", "Max": "max",
          "ArgMin": "argmin", "ArgMax": "argmax"}

DIMS = 8
_I32 = 2**31 - 1
_GRID_Y = 65535
_MAX_SPLITS = 1024
_COL_THREADS = 256
# Tuning knobs (tools/reduce_variants.py sweeps them on a GPU):
# a row reduction whose row needs more than 8 waves takes a block of ROW_BLOCK threads
# (rows over 16384 16-byte units: 512, and up to FEW_LONG_ROWS of them FEW_ROWS_BLOCK, which
# also doubles their split count: H100, session 24, sum of one f32 row of 2^28 2882 -> 3042 GB/s
# (torch.sum 3060), bf16 2799 -> 2926, 8 rows of 2^24 2803 -> 2904, 16 bf16 rows of 2^22 equal,
# but 64 rows of 2^20 2522 -> 2453 and 512 of 2^17 2702 -> 2639: tools/reduce_variants.py --few-rows);
ROW_BLOCK = 128
FEW_LONG_ROWS = 16
FEW_ROWS_BLOCK = 256
# a column reduction splits its reduced range only when its blocks fill less than this
# share of the device's resident blocks: each split adds a second launch.
COL_SPLIT_BELOW = 0.125

_T = None  # the family's kernel table module, loaded on first use


def _table():
    global _T
    if _T is None:
        _T = kt.table(FAMILY)
    return _T


# ---- dtype rules ------------------------------------------------------------------------
_SMALL_INTS = ("bool", "int8", "int16", "int32", "uint8", "uint16", "uint32")


def out_dtype(op: str, dt: str) -> str:
    """The output dtype MLX gives a Reduce of ``op`` over ``dt``."""
    if op in ("and", "or"):
        return "bool"
    if op in ("sum", "prod") and dt in _SMALL_INTS:
        return "uint32" if dt.startswith("uint") else "int32"
    return dt


# bits that make an element nonzero (the sign bit left out for floats: -0.0 is zero)
_MASKS = {"float16": 0x7FFF, "bfloat16": 0x7FFF, "float32": 0x7FFFFFFF,
          "float64": 0x7FFFFFFFFFFFFFFF, "complex64": 0x7FFFFFFF7FFFFFFF}
_BITS = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}


def route(op: str, dt: str):
    """(kernel op, kernel input dtype, kernel output dtype, mask) for ``op`` over ``dt``;
    kernel op "seq_min"/"seq_max" for complex min/max; None when no kernel covers it."""
    size = ITEMSIZE.get(dt)
    if size is None:
        return None
    if op in ("and", "or"):
        return op, _BITS[size], "bool", _MASKS.get(dt, (1 << (8 * size)) - 1)
    if op in ("min", "max"):
        if dt == "bool":
            return ("or" if op == "max" else "and"), "uint8", "bool", 0xFF
        if dt == "complex64":
            return "seq_" + op, "complex64", "complex64", 0
        return op, dt, dt, 0
    if op in ("sum", "prod"):
        kin = {"bool": "uint8", "uint32": "int32", "uint64": "int64"}.get(dt, dt)
        return op, kin, _table()._sum_out(kin), 0
    return None


def finish_kernel(op: str, part: str, final: str):
    """(op, in, out, mask) of the row kernel that finishes partials of dtype ``part``."""
    if op in ("and", "or"):
        return op, "uint8", "bool", 0xFF
    if part == "float32" and final in ("float16", "bfloat16"):
        return op, "float32", final, 0
    return op, part, part, 0


# ---- dims ---------------------------------------------------------------------------------
def collapse(shape, strides):
    """Drop size-1 dims, merge neighbours contiguous in order (outermost first)."""
    dims = [(int(d), int(s)) for d, s in zip(shape, strides) if d != 1]
    outd = []
    for d, s in dims:
        if outd and outd[-1][1] == s * d:
            outd[-1] = (outd[-1][0] * d, s)
        else:
            outd.append((d, s))
    return [d for d, _ in outd], [s for _, s in outd]


def _stride_key(s):
    return math.inf if s == 0 else abs(s)


def reduced_dims(shape, strides, sort=True):
    """Reduced dims (shape, strides) outermost first: by decreasing stride (zero strides
    outermost) when ``sort``, else in logical order; collapsed."""
    dims = [(d, s) for d, s in zip(shape, strides) if d != 1]
    if sort:
        dims.sort(key=lambda t: _stride_key(t[1]), reverse=True)
    return collapse([d for d, _ in dims], [s for _, s in dims])


def _pow2ceil(n):
    return 1 << max(0, int(n) - 1).bit_length()


def _pad(v, fill):
    v = list(v)
    return v + [fill] * (DIMS - len(v))


# ---- argument structs (hip_kernels/include/mlxa/reduce_args.h) ----------------------------
_ROW = struct.Struct(f"<5qQ{DIMS}q{DIMS}q{DIMS}i{DIMS}i8i")
_COL = struct.Struct(f"<5qQ{DIMS}q{DIMS}q{DIMS}i{DIMS}i8i")
_ARG = struct.Struct(f"<3q{DIMS}q{DIMS}i2i")
# name -> (pointer count, total size) for the tests against the C structs
ARG_STRUCTS = {"ReduceRowArgs": (2, 16 + _ROW.size), "ReduceColArgs": (2, 16 + _COL.size),
               "ArgReduceArgs": (2, 16 + _ARG.size)}


def row_tail(n_out, row_len, row_stride, outer, chunk, mask, kept, red, group, splits,
             split_outer, flat, partial) -> bytes:
    return _ROW.pack(n_out, row_len, row_stride, outer, chunk, mask,
                     *_pad(kept[1], 0), *_pad(red[1], 0), *_pad(kept[0], 1), *_pad(red[0], 1),
                     len(kept[0]), len(red[0]), group, splits, int(split_outer), int(flat), int(partial), 0)


def col_tail(n_cols, col_stride, n_batch, n_red, chunk, mask, batch, red, bx, by, col_blocks,
             splits, partial) -> bytes:
    return _COL.pack(n_cols, col_stride, n_batch, n_red, chunk, mask,
                     *_pad(batch[1], 0), *_pad(red[1], 0), *_pad(batch[0], 1), *_pad(red[0], 1),
                     len(batch[0]), len(red[0]), bx, by, col_blocks, splits, int(partial), 0)


def arg_tail(n_out, axis_len, axis_stride, kept, group) -> bytes:
    return _ARG.pack(n_out, axis_len, axis_stride, *_pad(kept[1], 0), *_pad(kept[0], 1), len(kept[0]), group)


def unpack_row(tail: bytes) -> dict:
    v = _ROW.unpack(tail)
    keys = ("n_out", "row_len", "row_stride", "outer", "chunk", "mask")
    d = dict(zip(keys, v[:6]))
    o = 6
    d["kept_strides"], d["red_strides"] = v[o:o + DIMS], v[o + DIMS:o + 2 * DIMS]
    o += 2 * DIMS
    d["kept_shape"], d["red_shape"] = v[o:o + DIMS], v[o + DIMS:o + 2 * DIMS]
    o += 2 * DIMS
    d.update(zip(("kept_ndim", "red_ndim", "group", "splits", "split_outer", "flat", "partial"), v[o:o + 7]))
    return d


def unpack_col(tail: bytes) -> dict:
    v = _COL.unpack(tail)
    d = dict(zip(("n_cols", "col_stride", "n_batch", "n_red", "chunk", "mask"), v[:6]))
    o = 6
    d["batch_strides"], d["red_strides"] = v[o:o + DIMS], v[o + DIMS:o + 2 * DIMS]
    o += 2 * DIMS
    d["batch_shape"], d["red_shape"] = v[o:o + DIMS], v[o + DIMS:o + 2 * DIMS]
    o += 2 * DIMS
    d.update(zip(("batch_ndim", "red_ndim", "bx", "by", "col_blocks", "splits", "partial"), v[o:o + 7]))
    return d


def unpack_arg(tail: bytes) -> dict:
    v = _ARG.unpack(tail)
    d = dict(zip(("n_out", "axis_len", "axis_stride"), v[:3]))
    d["kept_strides"], d["kept_shape"] = v[3:3 + DIMS], v[3 + DIMS:3 + 2 * DIMS]
    d["kept_ndim"], d["group"] = v[3 + 2 * DIMS:]
    return d


# ---- geometry -------------------------------------------------------------------------------
def _resident_blocks(device, block):
    """Blocks of ``block`` threads that fill the device once (2048 threads per CU/SM)."""
    return compute_units(device) * max(1, 2048 // block)


def _group(units, W, n_out=None):
    """(threads per output, block) for ``units`` parallel work items per output, of ``n_out``
    outputs (None: not measured with FEW_ROWS_BLOCK, as arg reductions: 512 for long rows)."""
    if units <= W:
        g = min(W, _pow2ceil(max(1, units)))
        return g, 256
    if units <= 8 * W:
        return W, 256
    b = ROW_BLOCK if units <= 16384 else FEW_ROWS_BLOCK if n_out is not None and n_out <= FEW_LONG_ROWS else max(512, ROW_BLOCK)
    return b, b


def _kname(layout, op, kin, kout, W=None):
    return _table().name(kt, layout, op, kin, kout, W)


def _row_launch(op, kin, kout, mask, n_out, L, rs, red, kept, device, W, refs, allow_split=True):
    """Steps and temporaries of a row-layout reduction; ``red`` are the outer reduced dims."""
    M = math.prod(red[0])
    V = 16 // ITEMSIZE[kin]
    flat = M > 1 and L <= 32
    if flat:
        units = M * L
    else:
        units = -(-L // V) if rs == 1 else L
    G, block = _group(units, W, n_out)
    per_block = block // G
    blocks = -(-n_out // per_block)
    if blocks > _I32:
        return None
    work = M * L
    S, split_outer, chunk = 1, False, 0
    target = _resident_blocks(device, block)
    if allow_split and blocks < target and work >= 8 * G * V:
        S = min(-(-target // blocks), _MAX_SPLITS, max(1, work // (4 * G * V)))
        if flat or M >= 2 * S:
            S = min(S, M)
            chunk = -(-M // S)
            S, split_outer = -(-M // chunk), True
        else:
            per = -(-L // S)
            chunk = -(-per // V) * V          # V-aligned chunks keep rows on 16-byte loads
            S = -(-L // chunk)
    name = _kname("row", op, kin, kout, W)
    if S <= 1:
        tail = row_tail(n_out, L, rs, M, 0, mask, kept, red, G, 1, False, flat, False)
        return (Launch(FAMILY, name, (blocks, 1, 1), (block, 1, 1), 0, 2, tail, refs),), ()
    part = _table().acc_dtype(op, kin)
    tail = row_tail(n_out, L, rs, M, chunk, mask, kept, red, G, S, split_outer, flat, True)
    first = Launch(FAMILY, name, (blocks, S, 1), (block, 1, 1), 0, 2, tail, (refs[0], tmp(0)))
    fop, fin, fout, fmask = finish_kernel(op, part, kout)
    second = _row_launch(fop, fin, fout, fmask, n_out, S, 1, ((), ()), ((n_out,), (S,)), device, W,
                         (tmp(0), refs[1]), allow_split=False)
    return (first,) + second[0], (n_out * S * ITEMSIZE[part],)


def _col_launch(op, kin, kout, mask, C, cs, batch, red, device, W, refs):
    n_batch = math.prod(batch[0])
    n_red = math.prod(red[0])
    V = 16 // ITEMSIZE[kin]
    bx = min(32, _pow2ceil(-(-C // V)))
    by = _COL_THREADS // bx
    col_blocks = -(-C // (bx * V))
    blocks = n_batch * col_blocks
    if blocks > _I32 or col_blocks > _I32:
        return None
    target = _resident_blocks(device, _COL_THREADS)
    S, chunk = 1, max(1, n_red)
    if blocks < target * COL_SPLIT_BELOW and n_red >= 16 * by:
        S = min(-(-target // blocks), _MAX_SPLITS, n_red // (8 * by))
        chunk = -(-n_red // S)
        S = -(-n_red // chunk)
    name = _kname("col", op, kin, kout)
    n_out = n_batch * C
    if S <= 1:
        tail = col_tail(C, cs, n_batch, n_red, chunk, mask, batch, red, bx, by, col_blocks, 1, False)
        return (Launch(FAMILY, name, (blocks, 1, 1), (_COL_THREADS, 1, 1), 0, 2, tail, refs),), ()
    part = _table().acc_dtype(op, kin)
    tail = col_tail(C, cs, n_batch, n_red, chunk, mask, batch, red, bx, by, col_blocks, S, True)
    first = Launch(FAMILY, name, (blocks, S, 1), (_COL_THREADS, 1, 1), 0, 2, tail, (refs[0], tmp(0)))
    fop, fin, fout, fmask = finish_kernel(op, part, kout)
    second = _row_launch(fop, fin, fout, fmask, n_out, S, 1, ((), ()), ((n_out,), (S,)), device, W,
                         (tmp(0), refs[1]), allow_split=False)
    return (first,) + second[0], (n_out * S * ITEMSIZE[part],)


# ---- Reduce -----------------------------------------------------------------------------------
def _op_name(table, v):
    if isinstance(v, str):
        return _NAMES.get(v)
    return table.get(int(v))


def plan_reduce(node, device):
    if len(node.ins) != 1 or len(node.outs) != 1 or len(node.params) != 2:
        return None
    op = _op_name(REDUCE_TYPES, node.params[0])
    x, o = node.ins[0], node.out
    if op is None or x.dtype not in ITEMSIZE or o.dtype != out_dtype(op, x.dtype):
        return None
    nd = x.ndim
    axes = sorted({int(a) % nd for a in node.params[1]} if nd else set())
    if o.size == 0:
        return Plan(())
    if o.shape != tuple(1 if i in axes else d for i, d in enumerate(x.shape)):
        return None
    r = route(op, x.dtype)
    if r is None:
        return None
    kop, kin, kout, mask = r
    W = wave_width(device)
    refs = (inp(0), out(0))
    n_out = o.size
    kept = collapse([x.shape[i] for i in range(nd) if i not in axes],
                    [x.strides[i] for i in range(nd) if i not in axes])
    rshape = [x.shape[i] for i in axes]
    rstr = [x.strides[i] for i in axes]
    if x.size == 0:   # nothing to reduce: every output is the identity
        kept, red, L, rs = ([n_out], [0]), ([], []), 0, 1
    else:
        red = reduced_dims(rshape, rstr, sort=not kop.startswith("seq_"))
        if red[0]:
            L, rs = red[0][-1], red[1][-1]
            red = (red[0][:-1], red[1][:-1])
        else:
            L, rs = 1, 1
    if len(kept[0]) > DIMS or len(red[0]) > DIMS:
        return None
    if kop.startswith("seq_"):
        tail = row_tail(n_out, L, rs, math.prod(red[0]), 0, 0, kept, red, 1, 1, False, False, False)
        blocks = -(-n_out // 256)
        if blocks > _I32:
            return None
        return Plan((Launch(FAMILY, _kname("seq", kop[4:], kin, kout), (blocks, 1, 1), (256, 1, 1),
                            0, 2, tail, refs),))
    use_col = False
    if kept[0] and x.size:
        k_in = _stride_key(kept[1][-1])
        r_in = _stride_key(rs) if L > 1 else math.inf
        use_col = r_in != 1 and (k_in == 1 or k_in < r_in)
    if use_col:
        # the innermost reduced dim rejoins the others: the column kernel walks them all
        allred = (list(red[0]) + ([L] if L > 1 else []), list(red[1]) + ([rs] if L > 1 else []))
        if len(allred[0]) > DIMS:
            return None
        C, cs = kept[0][-1], kept[1][-1]
        batch = (kept[0][:-1], kept[1][:-1])
        res = _col_launch(kop, kin, kout, mask, C, cs, batch, allred, device, W, refs)
    else:
        res = _row_launch(kop, kin, kout, mask, n_out, L, rs, red, kept, device, W, refs)
    if res is None:
        return None
    steps, temps = res
    return Plan(steps, temps=temps)


# ---- ArgReduce --------------------------------------------------------------------------------
ARG_SPLIT_BLOCK = 256
ARG_SPLIT_MIN_PART = 2048   # elements a split block takes at least (8 a thread)


def _arg_split(op, dt, n_out, L, st, kept, per_block, device, W):
    """Few long rows (an LLM's row of logits): each row in parts over many blocks (argsplit:
    the best (value, index) of each part), then the best of each row's parts (argpairs);
    None where one pass fills the device or the row is short."""
    blocks = -(-n_out // per_block)
    target = _resident_blocks(device, ARG_SPLIT_BLOCK)
    if dt not in _table().ARG_SPLIT_DTYPES or n_out > FEW_LONG_ROWS or blocks * 4 > target:
        return None
    S = min(-(-target // n_out), _MAX_SPLITS, L // ARG_SPLIT_MIN_PART)
    if S < 2:
        return None
    first = Launch(FAMILY, _kname("argsplit", op, dt, "uint32", W), (n_out, S, 1), (ARG_SPLIT_BLOCK, 1, 1), 0, 2,
                   arg_tail(n_out, L, st, kept, ARG_SPLIT_BLOCK), (inp(0), tmp(0)))
    group, block = _group(S, W)
    second = Launch(FAMILY, _kname("argpairs", op, dt, "uint32", W), (-(-n_out // (block // group)), 1, 1),
                    (block, 1, 1), 0, 2, arg_tail(n_out, S, 1, ((), ()), group), (tmp(0), out(0)))
    return Plan((first, second), temps=(n_out * S * 8,))   # (float, uint32) pairs


def plan_arg_reduce(node, device):
    if len(node.ins) != 1 or len(node.outs) != 1 or len(node.params) != 2:
        return None
    op = _op_name(ARG_TYPES, node.params[0])
    x, o = node.ins[0], node.out
    if op is None or x.ndim == 0 or o.dtype != "uint32" or x.dtype not in ITEMSIZE:
        return None
    axis = int(node.params[1]) % x.ndim
    if o.shape != tuple(1 if i == axis else d for i, d in enumerate(x.shape)):
        return None
    n_out = o.size
    if n_out == 0:
        return Plan(())
    L, st = x.shape[axis], x.strides[axis]
    if L >= 2**32:
        return None
    kept = collapse([d for i, d in enumerate(x.shape) if i != axis],
                    [s for i, s in enumerate(x.strides) if i != axis])
    if len(kept[0]) > DIMS:
        return None
    W = wave_width(device)
    dt = "uint8" if x.dtype == "bool" else x.dtype
    tail_group = 1
    if dt == "complex64":
        name, group, block = _kname("argseq", op, dt, "uint32"), 1, 256
    elif st == 1 or L == 1 or n_out < _resident_blocks(device, 256) * 64:
        V = 16 // ITEMSIZE[dt]
        units = -(-L // V) if st == 1 else L
        group, block = _group(units, W)
        split = _arg_split(op, dt, n_out, L, st, kept, block // group, device, W)
        if split is not None:
            return split
        name, tail_group = _kname("argrow", op, dt, "uint32", W), group
    else:
        name, group, block = _kname("argcol", op, dt, "uint32"), 1, 256
    blocks = -(-n_out // (block // group))
    if blocks > _I32:
        return None
    tail = arg_tail(n_out, L, st, kept, tail_group)
    return Plan((Launch(FAMILY, name, (blocks, 1, 1), (block, 1, 1), 0, 2, tail, (inp(0), out(0))),))


def plan_node(node, device):
    if node.prim == "Reduce":
        return plan_reduce(node, device)
    if node.prim == "ArgReduce":
        return plan_arg_reduce(node, device)
    return None
