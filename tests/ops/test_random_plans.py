"""RandomBits planning without a GPU: the Python model of MLX's counter layout against
MLX's CPU results, the plan's argument blob against the C struct in
hip_kernels/include/mlxa/random_args.h, and the cases the planner declines."""

import os
import struct

import mlx.core as mx
import numpy as np
import pytest

from mlx_amd.runtime import kernel_table as kt
from mlx_amd.runtime.driver.base import DeviceProperties
from mlx_amd.runtime.ops import random as rnd
from mlx_amd.runtime.plan import Layout, Node
from cprobe import probe_output

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEV = DeviceProperties(0, "test", "gfx1100", "gfx1100", {}, 32, 100, 1 << 34, False,
                       0, 0, 0, 0, 1024, 65536, True, "0")
R = Layout.row_major


def node(key_layout, out_shape, width=4):
    dt = {1: "uint8", 2: "uint16", 4: "uint32"}[width]
    return Node("RandomBits", (tuple(out_shape), width), (key_layout,), (R(out_shape, dt),))


def key_pairs(k):
    a = np.array(k).reshape(-1, 2)
    return [(int(x), int(y)) for x, y in a]


# ---------------------------------------------------------------- the layout model vs MLX
@pytest.mark.parametrize("seed", [0, 1, 7, 2**32 - 1, 2**63 + 12345])
def test_model_matches_split(seed):
    k = mx.random.key(seed)
    for n in (1, 2, 5, 16):
        got = np.frombuffer(rnd.reference_bits(key_pairs(k), 8 * n), np.uint32).reshape(n, 2)
        np.testing.assert_array_equal(got, np.array(mx.random.split(k, n)))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 13, 64, 65])
def test_model_matches_uniform_odd_sizes(n):
    # uniform is bits / (2^32 - 1) in float32: exact for the same bits
    k = mx.random.key(n * 31 + 3)
    u = np.array(mx.random.uniform(shape=(n,), key=k))
    b = np.frombuffer(rnd.reference_bits(key_pairs(k), 4 * n), np.uint32)
    np.testing.assert_array_equal(u, b.astype(np.float32) / np.float32(4294967295.0))


def test_model_matches_batched_keys():
    ks = mx.random.split(mx.random.key(5), 3)
    u = np.array(mx.vmap(lambda k: mx.random.uniform(shape=(5,), key=k))(ks))
    b = np.frombuffer(rnd.reference_bits(key_pairs(ks), 4 * 15), np.uint32).reshape(3, 5)
    np.testing.assert_array_equal(u, b.astype(np.float32) / np.float32(4294967295.0))


def test_layout_words():
    assert rnd.layout_words(4) == (0, 1)
    assert rnd.layout_words(8) == (1, 0)
    assert rnd.layout_words(3) == (0, 1)     # one partial word
    assert rnd.layout_words(9) == (1, 1)     # 3 words, the last partial
    assert rnd.layout_words(10) == (1, 1)
    assert rnd.layout_words(20) == (2, 1)


# ---------------------------------------------------------------- plans
_TAIL = struct.Struct("<qqq8q8iiIII")


def decode(plan):
    (launch,) = plan.steps
    f = _TAIL.unpack(launch.tail)
    return launch, dict(num_keys=f[0], bpk=f[1], total=f[2], strides=f[3:11], shape=f[11:19],
                        ndim=f[19], half=f[20], odd=f[21])


@pytest.mark.parametrize("out_shape,width,bpk,half,odd", [
    ((4, 5), 4, 80, 10, 0), ((7,), 4, 28, 3, 1), ((), 4, 4, 0, 1),
    ((5,), 1, 5, 1, 0), ((9,), 1, 9, 1, 1), ((3,), 2, 6, 1, 0), ((3,), 1, 3, 0, 1), ((1 << 20,), 4, 1 << 22, 1 << 19, 0),
])
def test_single_key(out_shape, width, bpk, half, odd):
    plan = rnd.plan_node(node(R((2,), "uint32"), out_shape, width), DEV)
    launch, f = decode(plan)
    assert kt.has_kernel("random", launch.kernel)
    assert launch.n_ptrs == 2 and launch.refs is None
    assert (f["num_keys"], f["bpk"], f["half"], f["odd"]) == (1, bpk, half, odd)
    assert f["total"] == half + odd
    assert launch.block == (256, 1, 1) and 1 <= launch.grid[0] <= DEV.compute_units * 16
    assert launch.grid[0] * 256 >= min(f["total"], DEV.compute_units * 16 * 256)


def test_batched_transposed_keys():
    # keys (3, 2) stored transposed: element (i, c) at c * 3 + i
    keys = Layout.strided((3, 2), (1, 3), "uint32")
    plan = rnd.plan_node(node(keys, (3, 5)), DEV)
    _, f = decode(plan)
    assert f["num_keys"] == 3 and f["bpk"] == 20 and (f["half"], f["odd"]) == (2, 1)
    assert f["ndim"] == 2 and f["shape"][:2] == (2, 3) and f["strides"][:2] == (3, 1)


def test_empty_output_has_no_steps():
    plan = rnd.plan_node(node(R((2,), "uint32"), (0, 3)), DEV)
    assert plan is not None and plan.steps == ()


@pytest.mark.parametrize("bad", [
    node(R((2,), "int32"), (4,)),          # keys must be uint32
    node(R((3,), "uint32"), (4,)),         # last key dim must be 2
    node(R((3, 2), "uint32"), (4,)),     # 4 elements over 3 keys
])
def test_declines(bad):
    assert rnd.plan_node(bad, DEV) is None


def test_other_primitive_declined():
    n = Node("Sort", (0,), (R((4,), "float32"),), (R((4,), "float32"),))
    assert rnd.plan_node(n, DEV) is None


# ---------------------------------------------------------------- random_args.h vs the packer
_PROBE = r"""
#include <cstddef>
#include <cstdio>
#include "mlxa/random_args.h"
#define F(S, f) std::printf(#S " " #f " %zu\n", offsetof(S, f));
#define Z(S) std::printf(#S " sizeof %zu\n", sizeof(S));
int main() {
  Z(RandomBitsArgs) F(RandomBitsArgs, keys) F(RandomBitsArgs, out) F(RandomBitsArgs, num_keys)
  F(RandomBitsArgs, bytes_per_key) F(RandomBitsArgs, total) F(RandomBitsArgs, key_strides)
  F(RandomBitsArgs, key_shape) F(RandomBitsArgs, key_ndim) F(RandomBitsArgs, half)
  F(RandomBitsArgs, odd) F(RandomBitsArgs, pad_)
  std::printf("MLXA_RANDOM_MAX_DIMS value %d\n", MLXA_RANDOM_MAX_DIMS);
}
"""


def test_struct_matches_c(tmp_path):
    out = probe_output(_PROBE, tmp_path)
    c = {(s, f): int(v) for s, f, v in (line.split() for line in out.splitlines())}
    assert c[("MLXA_RANDOM_MAX_DIMS", "value")] == rnd.MAX_DIMS
    nptr, size = rnd.ARG_STRUCTS["RandomBitsArgs"]
    assert c[("RandomBitsArgs", "sizeof")] == size == 16 + _TAIL.size
    # the tail fields in packing order, right after the two pointers
    order = ["num_keys", "bytes_per_key", "total", "key_strides", "key_shape", "key_ndim",
             "half", "odd", "pad_"]
    sizes = [8, 8, 8, 64, 32, 4, 4, 4, 4]
    off = 8 * nptr
    for f, s in zip(order, sizes):
        assert c[("RandomBitsArgs", f)] == off, f
        off += s
    assert off == size
