"""Sort launcher: Sort, ArgSort, Partition, ArgPartition and SearchSorted
(hip_kernels/sort.hip).

MLX's CPU build sorts each row with std::stable_sort under a NaN-last comparator, so
the result is fully determined: stable, NaNs last in input order, -0.0 and +0.0 equal
(kept in input order). Values become unsigned keys of their size with that order
(mlxa/sort_args.h), and ties are broken by position, so ours is the same bit for bit.
Partition and ArgPartition are only defined up to the order within each side of kth;
a full sort is one valid answer.

Rows of up to 4096 elements sort in shared memory (one launch); longer rows go through
an LSD radix sort, 8 bits a pass, that this module lays out as steps over temporaries:
prologue (keys, and for floats their raw bits as the payload), then per pass count,
scan, scatter; the last scatter writes the output.

Where the build carries the helper library (runtime/sortlib.py: the vendor's device-wide
radix sort, hipCUB/rocPRIM on AMD, CUB on NVIDIA) a few long rows along the last axis go
to it instead (measured faster: benchmarks/results/sort_bandwidth-*.json): our prologue
writes the keys and the payload (raw bits for Sort, positions for ArgSort), the library
sorts the pairs (stable, like ours), and its sorted payload is the output.
"""

from __future__ import annotations

import dataclasses
import math
import struct

from .. import kernel_table as kt
from ..launch import Launch
from .. import sortlib
from ..plan import HostCall, Plan, compute_units, inp, out, tmp, wave_width
from .elementwise import collapse_dims

FAMILY = "sort"
PRIMITIVES = {"Sort": "sort", "ArgSort": "arg", "Partition": "sort", "ArgPartition": "arg",
              "SearchSorted": "search"}

MAX_DIMS = 8
KEY_UNSIGNED, KEY_SIGNED, KEY_FLOAT = 0, 1, 2
RADIX_IOTA, RADIX_FINAL, RADIX_WRITE_KEYS, RADIX_WRITE_VALS = 1, 2, 4, 8

# dtype -> (key kind, +inf bits)
KINDS = {
    "bool": (KEY_UNSIGNED, 0), "uint8": (KEY_UNSIGNED, 0), "uint16": (KEY_UNSIGNED, 0),
    "uint32": (KEY_UNSIGNED, 0), "uint64": (KEY_UNSIGNED, 0),
    "int8": (KEY_SIGNED, 0), "int16": (KEY_SIGNED, 0), "int32": (KEY_SIGNED, 0),
    "int64": (KEY_SIGNED, 0),
    "float16": (KEY_FLOAT, 0x7C00), "bfloat16": (KEY_FLOAT, 0x7F80),
    "float32": (KEY_FLOAT, 0x7F800000), "float64": (KEY_FLOAT, 0x7FF0000000000000),
}
SIZES = {"bool": 1, "uint8": 1, "int8": 1, "uint16": 2, "int16": 2, "float16": 2, "bfloat16": 2,
         "uint32": 4, "int32": 4, "float32": 4, "uint64": 8, "int64": 8, "float64": 8}

_ROWS = struct.Struct(f"<3q{MAX_DIMS}q{MAX_DIMS}i4iQ")
_BLOCK_TAIL = struct.Struct("<4i")
_KEYS_HEAD = struct.Struct("<2i")
_COUNT = struct.Struct("<q4i")
_SCAN = struct.Struct("<2i")
_SCATTER = struct.Struct("<qqQ4i")
_SEARCH = struct.Struct(f"<qq{MAX_DIMS}q{MAX_DIMS}iiIiiQ")

# name -> (pointer count, sizeof) for the tests against sort_args.h
ARG_STRUCTS = {
    "SortRows": (0, _ROWS.size),
    "SortBlockArgs": (2, 16 + _ROWS.size + _BLOCK_TAIL.size),
    "RadixKeysArgs": (3, 24 + _KEYS_HEAD.size + _ROWS.size),
    "RadixCountArgs": (2, 16 + _COUNT.size),
    "RadixScanArgs": (2, 16 + _SCAN.size),
    "RadixScatterArgs": (6, 48 + _SCATTER.size),
    "SearchSortedArgs": (3, 24 + _SEARCH.size),
}

# radix scatter blocks: at most RADIX_MAX_SUBTILES sub-tiles walked by one block, about
# RADIX_BLOCKS_PER_CU / 2 blocks per compute unit (tools/sort_variants.py sweeps them). The
# scatter is latency-bound (ncu: 32 % of DRAM bandwidth with 4 blocks per SM walking 16
# sub-tiles each); more, shorter blocks: 2^24 float32 1.65 -> 1.32 ms on an H100
# (benchmarks/results/sort_profile-h100.txt)
RADIX_MAX_SUBTILES = 2
RADIX_BLOCKS_PER_CU = 8

# the helper library takes rows longer than BLOCK_MAX along the last axis, at most
# LIBRARY_MAX_ROWS of them (one library call per row)
LIBRARY_MAX_ROWS = 8

_KT = None


def _table():
    global _KT
    if _KT is None:
        _KT = kt.table(FAMILY)
    return _KT


def _dims(shape, strides):
    """Collapsed dims innermost first, padded: (shape[8], strides[8], ndim)."""
    cs, (cst,) = collapse_dims(tuple(shape), tuple(strides))
    if len(cs) > MAX_DIMS:
        return None
    rs, rt = list(reversed(cs)), list(reversed(cst))
    nd = len(rs)
    return rs + [1] * (MAX_DIMS - nd), rt + [0] * (MAX_DIMS - nd), nd


def pack_rows(rows, n, in_axis_stride, out_inner, row_shape, row_strides, kind, abs_inf):
    d = _dims(row_shape, row_strides)
    if d is None:
        return None
    rs, rt, nd = d
    return _ROWS.pack(rows, in_axis_stride, out_inner, *rt, *rs, nd, n, kind, 0, abs_inf)


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _axis(params, ndim):
    axis = int(params[-1])
    axis = axis + ndim if axis < 0 else axis
    return axis if 0 <= axis < ndim else None


def plan_node(node, device):
    op = PRIMITIVES.get(node.prim)
    if op is None or len(node.outs) != 1:
        return None
    if op == "search":
        return _plan_search(node, device)
    if len(node.ins) != 1:
        return None
    x, o = node.ins[0], node.out
    if x.dtype not in KINDS or x.ndim == 0 or x.shape != o.shape:
        return None
    if o.dtype != ("uint32" if op == "arg" else x.dtype):
        return None
    axis = _axis(node.params, x.ndim)
    if axis is None:
        return None
    n = x.shape[axis]
    if node.prim in ("Partition", "ArgPartition"):
        kth = int(node.params[0])
        if not -n <= kth < n:
            return None
    if o.size == 0:
        return Plan(())
    rest_shape = x.shape[:axis] + x.shape[axis + 1:]
    rest_strides = x.strides[:axis] + x.strides[axis + 1:]
    rows = math.prod(rest_shape)
    out_inner = math.prod(x.shape[axis + 1:])
    kind, abs_inf = KINDS[x.dtype]
    rows_blob = pack_rows(rows, n, x.strides[axis], out_inner, rest_shape, rest_strides, kind, abs_inf)
    if rows_blob is None:
        return None
    key = _table().SIZE_NAME[SIZES[x.dtype]]
    if n <= _table().BLOCK_MAX:
        return _plan_block(op, key, n, rows, rows_blob, device)
    lib = _plan_library(op, key, x.dtype, n, rows, out_inner, rows_blob, device)
    if lib is not None:
        return lib
    return _plan_radix(op, key, x.dtype, n, rows, out_inner, rows_blob, device)


def _plan_block(op, key, n, rows, rows_blob, device):
    t = _table()
    seg = next_pow2(n)
    tile = min(tl for tl in t.BLOCK_TILES if tl >= seg)
    per_block = tile // seg
    grid = -(-rows // per_block)
    if grid >= 2**31:
        return None
    name = t.block_name(op, key, tile, wave_width(device))
    tail = rows_blob + _BLOCK_TAIL.pack(seg, 0, 0, 0)
    return Plan((Launch(FAMILY, name, (grid, 1, 1), (t.BLOCK_TILES[tile], 1, 1), 0, 2, tail),))


def radix_payload(op: str, dtype: str):
    """Payload carried through the radix passes: indices for ArgSort, the raw bits for
    float sorts (keys lose -0.0 and NaN payloads), none for integer sorts."""
    if op == "arg":
        return "u32"
    if KINDS[dtype][0] == KEY_FLOAT:
        return _table().SIZE_NAME[SIZES[dtype]]
    return None


@dataclasses.dataclass(frozen=True)
class LibrarySort:
    """HostCall body: ptrs are (keys, sorted keys, payload, output, library temp); one
    library call per row, in stream order."""

    arch: str
    kb: int                 # key bytes
    vb: int                 # payload bytes
    n: int
    rows: int
    temp_bytes: int

    def __call__(self, ptrs, stream, ctx):
        keys, sorted_keys, payload, output, temp = ptrs
        lib = sortlib.get(self.arch)
        if lib is None:
            raise sortlib.SortLibError(f"the sort library planned for {self.arch} is gone: "
                                       f"{sortlib.why_not(self.arch)}")
        n, kb, vb = self.n, self.kb, self.vb
        for r in range(self.rows):
            lib.sort_pairs(kb, vb, temp, self.temp_bytes, keys + r * n * kb, sorted_keys,
                           payload + r * n * vb, output + r * n * vb, n, stream)


def _plan_library(op, key, dtype, n, rows, out_inner, rows_blob, device):
    if out_inner != 1 or rows > LIBRARY_MAX_ROWS or n >= 2**31:
        return None
    arch = str(getattr(device, "arch", ""))
    lib = sortlib.get(arch)
    if lib is None:
        return None
    kb = SIZES[dtype]
    vb = 4 if op == "arg" else kb
    try:
        temp_bytes = lib.temp_bytes(kb, vb, n)
    except sortlib.SortLibError:
        return None
    keys = _keys_launch(key, n, rows, rows_blob, 2 if op == "arg" else 1, device)
    call = HostCall(LibrarySort(arch, kb, vb, n, rows, temp_bytes), (tmp(0), tmp(1), tmp(2), out(0), tmp(3)),
                    what=f"sortlib {op} {dtype}")
    return Plan((keys, call), temps=(rows * n * kb, n * kb, rows * n * vb, temp_bytes))


def _keys_launch(key, n, rows, rows_blob, write_raw, device):
    """The radix prologue: keys of every row into temporary 0, the payload (write_raw 1: the
    raw bits; 2: positions) into temporary 2."""
    kblocks = max(1, min(-(-n // 256), max(1, compute_units(device) * RADIX_BLOCKS_PER_CU // rows)))
    return Launch(FAMILY, _table().keys_name(key), (kblocks, rows, 1), (256, 1, 1), 0, 3,
                  _KEYS_HEAD.pack(write_raw, 0) + rows_blob, refs=(inp(0), tmp(0), tmp(2)))


def _plan_radix(op, key, dtype, n, rows, out_inner, rows_blob, device):
    t = _table()
    if rows > 65535 or n >= 2**31 - 8192:
        return None   # grid.y holds the row; positions are 32-bit
    w = wave_width(device)
    pay = radix_payload(op, dtype)
    ksz = SIZES[dtype]
    psz = {None: 0, "u16": 2, "u32": 4, "u64": 8}[pay]
    sub = t.radix_tile(key, pay, w)
    cap = compute_units(device) * RADIX_BLOCKS_PER_CU
    # a block walks `subtiles` sub-tiles in order: at most RADIX_MAX_SUBTILES (short serial
    # walks, see above), fewer where that already gives ~RADIX_BLOCKS_PER_CU / 2 blocks per CU
    subtiles = max(1, min(RADIX_MAX_SUBTILES, -(-rows * n // (sub * cap // 2)), -(-n // sub)))
    tile = sub * subtiles
    tiles = -(-n // tile)
    total = rows * n
    passes = ksz                            # 8 bits a pass
    temps = [total * ksz, total * ksz]      # t0, t1: keys ping-pong
    temps += [max(total * psz, 16), max(total * psz, 16)]   # t2, t3: payload ping-pong
    temps += [rows * 256 * tiles * 4, rows * 256 * 4]       # t4 counts, t5 totals
    steps = [_keys_launch(key, n, rows, rows_blob, 1 if pay and op != "arg" else 0, device)]
    key_xor = (1 << (8 * ksz - 1)) if KINDS[dtype][0] == KEY_SIGNED else 0
    for p in range(passes):
        src, dst = p % 2, (p + 1) % 2
        shift = 8 * p
        last = p == passes - 1
        steps.append(Launch(FAMILY, t.count_name(key), (tiles, rows, 1), (256, 1, 1), 0, 2,
                            _COUNT.pack(n, tiles, shift, tile, 0), refs=(tmp(src), tmp(4))))
        steps.append(Launch(FAMILY, t.scan_name(w), (256, rows, 1), (256, 1, 1), 0, 2,
                            _SCAN.pack(tiles, 0), refs=(tmp(4), tmp(5))))
        flags = RADIX_IOTA if (p == 0 and op == "arg") else 0
        if last:
            flags |= RADIX_FINAL | (RADIX_WRITE_VALS if pay else RADIX_WRITE_KEYS)
            kout = out(0) if not pay else tmp(dst)
            vout = out(0) if pay else tmp(2 + dst)
        else:
            flags |= RADIX_WRITE_KEYS | (RADIX_WRITE_VALS if pay else 0)
            kout, vout = tmp(dst), tmp(2 + dst)
        refs = (tmp(src), tmp(2 + src), kout, vout, tmp(4), tmp(5))
        steps.append(Launch(FAMILY, t.scatter_name(key, pay, w), (tiles, rows, 1), (256, 1, 1), 0, 6,
                            _SCATTER.pack(n, out_inner, key_xor, tiles, shift, flags, subtiles), refs=refs))
    return Plan(tuple(steps), temps=tuple(temps))


def _plan_search(node, device):
    if len(node.ins) != 2:
        return None
    a, v = node.ins
    o = node.out
    if a.dtype != v.dtype or a.dtype not in KINDS or a.ndim != 1 or o.dtype != "uint32":
        return None
    if o.shape != v.shape or a.size >= 2**32:
        return None
    if o.size == 0:
        return Plan(())
    d = _dims(v.shape if v.ndim else (1,), v.strides if v.ndim else (0,))
    if d is None:
        return None
    vs, vt, nd = d
    kind, abs_inf = KINDS[a.dtype]
    right = 1 if node.params and node.params[0] else 0
    tail = _SEARCH.pack(o.size, a.strides[0], *vt, *vs, nd, a.size, kind, right, abs_inf)
    cap = compute_units(device) * 16
    grid = (min(-(-o.size // 256), cap), 1, 1)
    key = _table().SIZE_NAME[SIZES[a.dtype]]
    return Plan((Launch(FAMILY, _table().search_name(key), grid, (256, 1, 1), 0, 3, tail),))
