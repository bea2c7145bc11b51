"""Random launcher: MLX's RandomBits (hip_kernels/random.hip), bit-identical to MLX's CPU.

MLX splits each key's output into 32-bit words and fills them with threefry2x32 hashes
of counters (j, half + odd + j); the kernel reproduces that layout (mlxa/random_args.h),
so only the number of keys, the bytes per key and the key array's layout matter.
"""

from __future__ import annotations

import struct

from .. import kernel_table as kt
from ..launch import Launch
from ..plan import Plan, compute_units
from .elementwise import collapse_dims

FAMILY = "random"
PRIMITIVES = {"RandomBits": "random_bits"}

MAX_DIMS = 8
_BLOCK = 256
_BLOCKS_PER_CU = 16

# tail of RandomBitsArgs after the two pointers
_TAIL = struct.Struct(f"<qqq{MAX_DIMS}q{MAX_DIMS}iiIII")
ARG_STRUCTS = {"RandomBitsArgs": (2, 16 + _TAIL.size)}


def layout_words(bytes_per_key: int) -> tuple:
    """(half, odd) of MLX's counter layout for one key's run of bytes."""
    words = -(-bytes_per_key // 4)
    return words // 2, words % 2


def plan_node(node, device):
    if node.prim != "RandomBits" or len(node.ins) != 1 or len(node.outs) != 1:
        return None
    keys, out = node.ins[0], node.out
    if keys.dtype != "uint32" or keys.ndim < 1 or keys.shape[-1] != 2:
        return None
    num_keys = keys.size // 2
    if out.size == 0:
        return Plan(())
    if num_keys == 0 or out.size % num_keys:
        return None   # MLX divides by the key count; leave odd cases to it
    bytes_per_key = out.itemsize * (out.size // num_keys)
    half, odd = layout_words(bytes_per_key)
    per_key = half + odd
    if per_key >= 2**32 - 1:
        return None
    total = num_keys * per_key
    shape, (st,) = collapse_dims(keys.shape, keys.strides)
    if len(shape) > MAX_DIMS:
        return None
    # innermost dimension first
    rs, rt = list(reversed(shape)), list(reversed(st))
    rs += [1] * (MAX_DIMS - len(rs))
    rt += [0] * (MAX_DIMS - len(rt))
    tail = _TAIL.pack(num_keys, bytes_per_key, total, *rt, *rs, len(shape), half, odd, 0)
    cap = compute_units(device) * _BLOCKS_PER_CU
    grid = (min(-(-total // _BLOCK), cap), 1, 1)
    name = kt.table(FAMILY).KERNELS[0]
    return Plan((Launch(FAMILY, name, grid, (_BLOCK, 1, 1), 0, 2, tail),))


def reference_bits(keys, out_nbytes: int) -> bytes:
    """MLX's RandomBits output bytes computed in Python (for tests): ``keys`` is a list of
    (k0, k1) pairs, ``out_nbytes`` the whole output's size."""
    n = len(keys)
    bpk = out_nbytes // n if n else 0
    half, odd = layout_words(bpk)
    buf = bytearray()
    for k0, k1 in keys:
        words = [0] * (2 * half + odd)
        for j in range(half):
            a, b = threefry2x32(k0, k1, j, half + odd + j)
            words[j], words[half + odd + j] = a, b
        if odd:
            words[half] = threefry2x32(k0, k1, half, 0)[0]
        run = b"".join(struct.pack("<I", w) for w in words)
        buf += run[:bpk]
    return bytes(buf)


def threefry2x32(k0: int, k1: int, x0: int, x1: int) -> tuple:
    m = 0xFFFFFFFF
    ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA)
    rot = ((13, 15, 26, 6), (17, 29, 16, 24))
    x0, x1 = (x0 + k0) & m, (x1 + k1) & m
    for i in range(5):
        for r in rot[i % 2]:
            x0 = (x0 + x1) & m
            x1 = ((x1 << r) | (x1 >> (32 - r))) & m
            x1 ^= x0
        x0 = (x0 + ks[(i + 1) % 3]) & m
        x1 = (x1 + ks[(i + 2) % 3] + i + 1) & m
    return x0, x1


