"""The bridge's description of mx.compile's Compiled nodes (src/bridge/compiled.cpp)."""

import mlx.core as mx
import mlx.nn as nn
import pytest

from mlx_amd.runtime import bridge


def compiled_nodes(outs):
    g = bridge.Graph(list(outs) if isinstance(outs, (list, tuple)) else [outs])
    return g, [n for n in g.nodes if n[0] == "Compiled"]


def ones(*shape, dtype=mx.float32):
    a = mx.ones(shape, dtype=dtype)
    mx.eval(a)
    return a


def prims(desc):
    return [n[0] for n in desc[2]]


def check_wellformed(desc, node_ins, node_outs, metas):
    tag, ins, nodes, outs, arrays = desc
    assert tag == "tape"
    hash(desc)  # plans are cached by it
    assert len(ins) == len(node_ins) and len(outs) == len(node_outs)
    assert [i for i, _ in ins] == list(range(len(ins)))      # inputs are numbered first
    defined = {i for i, _ in ins}
    for prim, params, nin, nout in nodes:
        assert all(i in defined for i in nin), (prim, nin)
        defined.update(nout)
    assert all(o in defined for o in outs)
    assert len(arrays) == len(defined)
    for (aid, _), s in zip(ins, node_ins):
        assert arrays[aid][1] == metas[s][1]                   # dtypes agree with the node's
    for o, s in zip(outs, node_outs):
        assert arrays[o][1] == metas[s][1]


def test_exp_mul_add_with_constant():
    f = mx.compile(lambda a, b: mx.exp(a * b) + 1)
    g, cs = compiled_nodes(f(ones(4, 5), ones(4, 5)))
    (prim, desc, ins, outs), = cs
    check_wellformed(desc, ins, outs, g.arrays)
    assert prims(desc) == ["Multiply", "Exp", "Broadcast", "Add"]
    assert [c for _, c in desc[1]] == [False, False, True]
    const_id = desc[1][2][0]
    assert desc[4][const_id] == ((), "float32")
    bcast = desc[2][2]
    assert bcast[1] == (4, 5) and bcast[2] == (const_id,)


def test_parameters_of_tape_nodes():
    f = mx.compile(lambda a, b: (mx.where(a > 0, a, b).astype(mx.int32) & 3) + mx.log2(mx.abs(b)).astype(mx.int32))
    g, cs = compiled_nodes(f(ones(3, 2), ones(3, 2)))
    (_, desc, ins, outs), = cs
    check_wellformed(desc, ins, outs, g.arrays)
    by = {n[0]: n for n in desc[2]}
    assert by["AsType"][1] == "int32"
    assert by["BitwiseBinary"][1] == 0          # BitwiseBinary::And
    assert by["Log"][1] == 0                    # Log::Base::two
    assert "Select" in by and len(by["Select"][2]) == 3


def test_integer_and_bool_ops():
    f = mx.compile(lambda a, b: mx.logical_and(a > b, b >= 2) | mx.logical_not(a == b))
    a, b = ones(6, dtype=mx.int32), ones(6, dtype=mx.int32)
    g, cs = compiled_nodes(f(a, b))
    (_, desc, ins, outs), = cs
    check_wellformed(desc, ins, outs, g.arrays)
    assert desc[4][desc[3][0]][1] == "bool"
    assert {"Greater", "GreaterEqual", "LogicalAnd", "LogicalNot", "Equal"} <= set(prims(desc))


def test_multiple_outputs():
    def fn(a, b):
        y = mx.exp(a * b)      # an output that later tape nodes also read
        return y * 2, y
    g, cs = compiled_nodes(mx.compile(fn)(ones(4, 4), ones(4, 4)))
    (_, desc, ins, outs), = cs
    check_wellformed(desc, ins, outs, g.arrays)
    assert len(outs) == len(desc[3]) == 2
    exp_out = [n for n in desc[2] if n[0] == "Exp"][0][3][0]
    assert exp_out in desc[3]


def test_shapeless_description_does_not_change_with_shapes():
    f = mx.compile(lambda a, b: nn.silu(a) * b, shapeless=True)
    _, c1 = compiled_nodes(f(ones(4, 8), ones(4, 8)))
    g2, c2 = compiled_nodes(f(ones(16, 3), ones(16, 3)))
    assert len(c1) == len(c2) == 1
    assert c1[0][1] == c2[0][1]           # the same tape (the trace's shapes)
    (_, _, ins, outs), = c2
    assert g2.arrays[outs[0]][0] == (16, 3)   # the node itself has the call's shapes


def test_not_compiled_without_fusion():
    f = mx.compile(lambda a: mx.exp(a))   # one primitive: MLX does not fuse it
    _, cs = compiled_nodes(f(ones(3)))
    assert cs == []


@pytest.mark.parametrize("dt", [mx.float16, mx.bfloat16, mx.uint8, mx.int64])
def test_dtypes_recorded(dt):
    f = mx.compile(lambda a, b: mx.maximum(a * b, a) - b)
    g, cs = compiled_nodes(f(ones(5, dtype=dt), ones(5, dtype=dt)))
    (_, desc, ins, outs), = cs
    check_wellformed(desc, ins, outs, g.arrays)
    name = str(dt).split(".")[-1]
    assert all(a[1] == name for a in desc[4])
