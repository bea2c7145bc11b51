"""Plans of the norm and rope families (no GPU): kernel choice, geometry, argument
packing byte for byte against the C structs, and what falls back."""

import math
import struct
import types

import pytest

from cprobe import probe_output
from mlx_amd.runtime import kernel_table as kt
from mlx_amd.runtime.ops import dispatch_table
from mlx_amd.runtime.ops import norm as nm
from mlx_amd.runtime.ops import rope as rp
from mlx_amd.runtime.plan import Layout, Node

DEV32, DEV64 = types.SimpleNamespace(wave_size=32), types.SimpleNamespace(wave_size=64)
R = Layout.row_major


def test_dispatch_and_tables():
    d = dispatch_table()
    assert d["mlx_amd::RMSNorm"] is nm and d["mlx_amd::LayerNorm"] is nm and d["mlx_amd::RoPE"] is rp
    names = kt.kernel_names("norm")
    # rms/ln x r/l x 5 dtype pairs x 2 waves, the residual add + rms and the twin rms (3 dtypes
    # x 2 waves each)
    assert len(names) == len(set(names)) == 40 + 6 + 6
    assert "norm_r_rms_bfloat16_float32_w64" in names
    assert kt.kernel_names("rope") == [f"rope_{k}_{d}_{d}" for d in ("float32", "float16", "bfloat16")
                                       for k in ("g", "t", "kv")]
    for fam in ("norm", "rope"):
        src = kt.instantiation_source(fam)
        assert src.count("\n") == len(kt.kernel_names(fam)) + 1


def rms(x, o, w=True, eps=1e-5):
    ins = (x,) + ((R((x.shape[-1],), o.dtype),) if w else ())
    return Node("mlx_amd::RMSNorm", (eps, w), ins, (o,))


def ln(x, o, w=True, b=True, eps=1e-5):
    extra = tuple(R((x.shape[-1],), o.dtype) for f in (w, b) if f)
    return Node("mlx_amd::LayerNorm", (eps, w, b), (x,) + extra, (o,))


@pytest.mark.parametrize("dev,w", [(DEV32, 32), (DEV64, 64)])
def test_rms_plan_geometry(dev, w):
    x = R((4096, 4096), "bfloat16")
    p = nm.plan_node(rms(x, x), dev)
    (st,) = p.steps
    # 4096 bf16 = 512 groups of 8, 4 groups per thread: 128 threads
    assert st.kernel == f"norm_r_rms_bfloat16_bfloat16_w{w}" and st.grid == (4096, 1, 1)
    assert st.block == (128, 1, 1) and st.n_ptrs == 4
    assert [tuple(r) for r in st.refs] == [("i", 0, 0), ("i", 1, 0), ("i", 0, 0), ("o", 0, 0)]
    rows, rs, n, flags, eps, _ = nm._ARGS.unpack(st.tail)
    assert (rows, rs, n, flags) == (4096, 4096, 4096, 1) and eps == pytest.approx(1e-5)
    # short rows: at least one wave; long rows: the looped kernel
    assert nm.plan_node(rms(R((3, 8), "float32"), R((3, 8), "float32")), dev).steps[0].block == (w, 1, 1)
    big = R((2, 100000), "float32")
    st = nm.plan_node(rms(big, big, w=False), dev).steps[0]
    assert st.kernel == f"norm_l_rms_float32_float32_w{w}" and st.block == (512, 1, 1)
    assert [tuple(r) for r in st.refs] == [("i", 0, 0), ("i", 0, 0), ("i", 0, 0), ("o", 0, 0)]


def test_layer_norm_refs_and_flags():
    x, o = R((5, 64), "float16"), R((5, 64), "float32")
    for w, b, refs, flags in [(True, True, (0, 1, 2), 3), (True, False, (0, 1, 0), 1),
                              (False, True, (0, 0, 1), 2), (False, False, (0, 0, 0), 0)]:
        oo = o if (w or b) else x
        st = nm.plan_node(ln(x, oo, w, b), DEV32).steps[0]
        assert st.kernel.startswith("norm_r_ln_float16_" + oo.dtype)
        assert tuple(r.index for r in st.refs[:3]) == refs and nm._ARGS.unpack(st.tail)[3] == flags


def test_norm_layouts():
    # sliced rows (row stride > n), a broadcast batch dim collapses, 3-d
    x = Layout.strided((6, 32), (48, 1), "float32")
    assert nm._ARGS.unpack(nm.plan_node(rms(x, R((6, 32), "float32")), DEV32).steps[0].tail)[1] == 48
    x = Layout.strided((2, 3, 32), (96, 32, 1), "float32")
    assert nm._ARGS.unpack(nm.plan_node(rms(x, R((2, 3, 32), "float32")), DEV32).steps[0].tail)[:2] == (6, 32)
    x = Layout.strided((1, 32), (0, 1), "float32")
    assert nm._ARGS.unpack(nm.plan_node(rms(x, R((1, 32), "float32")), DEV32).steps[0].tail)[:2] == (1, 0)
    # every row the same (broadcast): one stride of 0
    x = Layout.strided((4, 32), (0, 1), "float32")
    assert nm._ARGS.unpack(nm.plan_node(rms(x, R((4, 32), "float32")), DEV32).steps[0].tail)[1] == 0
    # not covered: strided items, float64, int x, bad weight
    o = R((4, 32), "float32")
    assert nm.plan_node(rms(Layout.strided((4, 32), (1, 4), "float32"), o), DEV32) is None
    # rows that do not collapse to one stride: a row-contiguous copy into a temporary first
    two = nm.plan_node(rms(Layout.strided((2, 2, 32), (200, 32, 1), "float32"), R((2, 2, 32), "float32")), DEV32)
    assert [s.family for s in two.steps] == ["copy", "norm"] and two.temps == (2 * 2 * 32 * 4,)
    assert two.steps[0].refs[1] == ("t", 0, 0) and two.steps[1].refs[0] == ("t", 0, 0)
    assert nm._ARGS.unpack(two.steps[1].tail)[:2] == (4, 32)
    assert nm.plan_node(rms(R((4, 32), "float64"), R((4, 32), "float64")), DEV32) is None
    assert nm.plan_node(rms(R((4, 32), "int32"), R((4, 32), "float16")), DEV32) is None
    bad = Node("mlx_amd::RMSNorm", (1e-5, True), (R((4, 32), "float32"), Layout.strided((32,), (2,), "float32")),
               (o,))
    assert nm.plan_node(bad, DEV32) is None
    # empty: nothing to launch
    assert nm.plan_node(rms(R((0, 32), "float32"), R((0, 32), "float32")), DEV32).steps == ()


def rope_node(x, dims, trad=False, base=10000.0, scale=1.0, off=R((), "int32"), freqs=None):
    ins = (x, off) + ((freqs,) if freqs is not None else ())
    return Node("mlx_amd::RoPE", (dims, trad, 0.0 if freqs else base, scale, freqs is not None), ins,
                (R(x.shape, x.dtype),))


def unpack_rope(st):
    v = rp._ARGS.unpack(st.tail)
    keys = ["stride_b", "stride_n", "stride_l", "stride_d", "total", "n_heads", "seq", "d", "half", "items",
            "offset_stride", "freqs_stride", "traditional", "has_freqs", "scale", "inv_freq_log", "head_chunk"]
    return dict(zip(keys, v))


def test_rope_plans():
    # (B, L, H, D) -> (B, H, L, D) transposed view
    x = Layout.strided((2, 4, 6, 64), (6 * 4 * 64, 64, 4 * 64, 1), "bfloat16")
    st = rp.plan_node(rope_node(x, 32, off=R((2,), "int32")), DEV32).steps[0]
    a = unpack_rope(st)
    assert st.kernel == "rope_g_bfloat16_bfloat16" and st.n_ptrs == 4
    assert (a["stride_b"], a["stride_n"], a["stride_l"], a["stride_d"]) == (1536, 64, 256, 1)
    assert (a["n_heads"], a["seq"], a["d"], a["half"], a["items"]) == (4, 6, 64, 16, 48)
    assert a["total"] == 2 * 4 * 6 * 48 and a["offset_stride"] == 1 and a["head_chunk"] == 1
    assert a["inv_freq_log"] == pytest.approx(math.log(10000.0) / 16, rel=1e-6)
    assert [tuple(r) for r in st.refs] == [("i", 0, 0), ("i", 1, 0), ("i", 1, 0), ("o", 0, 0)]
    # freqs, traditional, 5-d input collapses its middle dims, 3-d has N = 1
    x5 = R((2, 3, 5, 7, 16), "float32")
    st = rp.plan_node(rope_node(x5, 16, trad=True, freqs=R((8,), "float32")), DEV32).steps[0]
    a = unpack_rope(st)
    assert (a["n_heads"], a["stride_n"], a["traditional"], a["has_freqs"], a["freqs_stride"]) == (15, 112, 1, 1, 1)
    assert [r.index for r in st.refs] == [0, 1, 2, 0]
    a = unpack_rope(rp.plan_node(rope_node(R((3, 5, 8), "float16"), 8), DEV32).steps[0])
    assert (a["n_heads"], a["stride_n"], a["seq"], a["offset_stride"]) == (1, 0, 5, 0)
    # prefill-sized: items take several heads (angle once per item), the last chunk ragged
    a = unpack_rope(rp.plan_node(rope_node(R((1, 30, 4096, 128), "bfloat16"), 128), DEV32).steps[0])
    hc = a["head_chunk"]
    assert hc == min(30, 30 * 4096 * 64 // rp.FILL_ITEMS) == 30
    a = unpack_rope(rp.plan_node(rope_node(R((1, 30, 512, 128), "bfloat16"), 128), DEV32).steps[0])
    assert a["head_chunk"] == 7 and a["total"] == 5 * 512 * 64     # 30 heads in chunks of 7: 5
    # not covered: float64, a wrong-sized offset, middle dims that do not collapse
    assert rp.plan_node(rope_node(R((2, 3, 8), "float64"), 8), DEV32) is None
    assert rp.plan_node(rope_node(R((2, 3, 8), "float32"), 8, off=R((3,), "int32")), DEV32) is None
    xs = Layout.strided((2, 3, 4, 5, 8), (1000, 300, 40, 8, 1), "float32")
    assert rp.plan_node(rope_node(xs, 8), DEV32) is None
    assert rp.plan_node(rope_node(R((0, 3, 8), "float32"), 8), DEV32).steps == ()


def test_inv_freq_log_is_float32_math():
    v = rp.inv_freq_log(10000.0, 64)
    assert v == rp.f32(v) and v == rp.f32(rp.f32(math.log(10000.0)) / 64)


# ---------------------------------------------------------------- the C structs
_PROBE = r"""
#include <cstddef>
#include <cstdio>
#include "mlxa/norm_args.h"
#include "mlxa/rope_args.h"
#define F(S, f) std::printf(#S "." #f " %zu\n", offsetof(S, f));
int main() {
  std::printf("NormArgs.sizeof %zu\n", sizeof(NormArgs));
  std::printf("RopeArgs.sizeof %zu\n", sizeof(RopeArgs));
  std::printf("NormAddArgs.sizeof %zu\n", sizeof(NormAddArgs));
  F(NormAddArgs, rows) F(NormAddArgs, n) F(NormAddArgs, flags) F(NormAddArgs, eps)
  F(NormArgs, x) F(NormArgs, w) F(NormArgs, b) F(NormArgs, out) F(NormArgs, rows)
  F(NormArgs, row_stride) F(NormArgs, n) F(NormArgs, flags) F(NormArgs, eps) F(NormArgs, pad)
  F(RopeArgs, x) F(RopeArgs, offset) F(RopeArgs, freqs) F(RopeArgs, out) F(RopeArgs, stride_b)
  F(RopeArgs, stride_n) F(RopeArgs, stride_l) F(RopeArgs, stride_d) F(RopeArgs, total)
  F(RopeArgs, n_heads) F(RopeArgs, seq) F(RopeArgs, d) F(RopeArgs, half) F(RopeArgs, items)
  F(RopeArgs, offset_stride) F(RopeArgs, freqs_stride) F(RopeArgs, traditional)
  F(RopeArgs, has_freqs) F(RopeArgs, scale) F(RopeArgs, inv_freq_log) F(RopeArgs, head_chunk)
  struct NormTwin { const void* p[4]; NormArgs a; NormShape b; };
  std::printf("NormTwin.sizeof %zu\n", sizeof(NormTwin));
  F(NormTwin, b) F(NormShape, rows) F(NormShape, eps)
  struct Twin { const void* p[4]; RopeArgs a; RopeShape b; };   // the twin kernel's parameters
  std::printf("RopeShape.sizeof %zu\n", sizeof(RopeShape));
  std::printf("Twin.sizeof %zu\n", sizeof(Twin));
  F(Twin, a) F(Twin, b) F(RopeShape, stride_b) F(RopeShape, head_chunk)
  struct Kv { const void* p[7]; RopeArgs a; RopeShape b; RopeKvShape c; };   // rope_kv's parameters
  std::printf("Kv.sizeof %zu\n", sizeof(Kv));
  std::printf("RopeKvShape.sizeof %zu\n", sizeof(RopeKvShape));
  F(Kv, a) F(Kv, b) F(Kv, c) F(RopeKvShape, v_b) F(RopeKvShape, v_total) F(RopeKvShape, h) F(RopeKvShape, pad)
}
"""


def test_args_match_c(tmp_path):
    out = probe_output(_PROBE, tmp_path)
    c = {k: int(v) for k, v in (line.split() for line in out.splitlines())}
    assert c["NormArgs.sizeof"] == nm.ARG_SIZE == 64
    assert c["RopeArgs.sizeof"] == rp.ARG_SIZE == 120
    assert c["NormAddArgs.sizeof"] == nm.ADD_ARG_SIZE == 64
    assert [c["NormAddArgs." + f] for f in ("rows", "n", "flags", "eps")] == [40, 48, 52, 56]
    for f, off in nm.ARG_FIELDS.items():
        assert c["NormArgs." + f] == off, f
    for f, off in rp.ARG_FIELDS.items():
        assert c["RopeArgs." + f] == off, f
    # the twin: the second's pointers, the first's RopeArgs, the second's shape (its tail)
    assert c["Twin.sizeof"] == rp.TWIN_ARG_SIZE == 240 and (c["Twin.a"], c["Twin.b"]) == (32, 152)
    assert c["RopeShape.sizeof"] == rp.ARG_SIZE - 32 and c["RopeShape.stride_b"] == 0
    assert c["RopeShape.head_chunk"] == rp.ARG_FIELDS["head_chunk"] - 32
    # rope_kv: seven pointers, q's RopeArgs, k's shape, the slots' geometry
    assert c["Kv.sizeof"] == rp.KV_ARG_SIZE and (c["Kv.a"], c["Kv.b"], c["Kv.c"]) == (56, 176, 264)
    assert c["RopeKvShape.sizeof"] == rp._KV_ARGS.size == 80
    assert (c["RopeKvShape.v_b"], c["RopeKvShape.v_total"], c["RopeKvShape.h"], c["RopeKvShape.pad"]) == (24, 56, 64, 76)
    assert (c["NormTwin.sizeof"], c["NormTwin.b"]) == (2 * nm.ARG_SIZE, 32 + nm.ARG_SIZE)
    assert (c["NormShape.rows"], c["NormShape.eps"]) == (0, nm.ARG_FIELDS["eps"] - 32)
    blob = struct.pack("<QQQQ", 1, 2, 3, 4) + nm.pack_args(7, 9, 11, 3, 0.5)
    assert len(blob) == nm.ARG_SIZE
    assert struct.unpack_from("<qqiif", blob, 32) == (7, 9, 11, 3, 0.5)


@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
def test_q_and_k_norm_twin_plan(dt):
    """Two RMS norms (Qwen 3's q and k norms) as one launch: the twin kernel with each
    norm's own geometry and tail (the second's pointers first), grid y picking the norm;
    declined where they would not be one register-layout launch each of one geometry."""
    q, k = R((1, 1, 32, 128), dt), R((1, 1, 8, 128), dt)
    p = nm.plan_siblings([rms(q, q, eps=1e-6), rms(k, k, eps=1e-6)], DEV32)
    (st,) = p.steps
    a, b = (nm.plan_node(rms(x, x, eps=1e-6), DEV32).steps[0] for x in (q, k))
    assert st.kernel == f"norm_r_rmstwin_{dt}_{dt}_w32" and st.grid == (32, 2, 1) and st.block == a.block
    assert st.tail == a.tail + b.tail and st.n_ptrs == 8
    # (x, weight, bias: x again when there is none, out) of the second, then of the first
    assert [tuple(r) for r in st.refs] == [("i", 2, 0), ("i", 3, 0), ("i", 2, 0), ("o", 1, 0),
                                           ("i", 0, 0), ("i", 1, 0), ("i", 0, 0), ("o", 0, 0)]
    assert nm.plan_siblings([rms(q, q), rms(R((1, 1, 8, 4096), dt), R((1, 1, 8, 4096), dt))], DEV32) is None
    # fewer rows than compute units take a group a thread, more take REG_GROUPS: two geometries
    dev = types.SimpleNamespace(wave_size=32, compute_units=132)
    few, many = R((1, 1, 4, 1024), dt), R((1, 200, 8, 1024), dt)
    assert nm.plan_siblings([rms(few, few), rms(many, many)], dev) is None
    assert nm.plan_siblings([rms(many, many), rms(many, many)], dev) is not None
    assert nm.plan_siblings([ln(q, q), ln(k, k)], DEV32) is None


@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
def test_residual_add_and_rms_norm_pair_plan(dt):
    """An Add and the RMSNorm of its sum as one launch: the pair's kernel on the register
    layout with the norm's own geometry (so its sums run in the same order), the Add's two
    inputs, the norm's weight and both outputs; declined where one launch cannot serve."""
    x = R((1, 1, 4096), dt)
    add = Node("Add", (), (x, x), (x,))
    nrm = rms(x, x)
    p = nm.plan_siblings([add, nrm], DEV32)
    (st,) = p.steps
    alone = nm.plan_node(nrm, DEV32).steps[0]
    assert st.kernel == f"norm_r_rmsadd_{dt}_{dt}_w32" and st.block == alone.block and st.grid == (1, 1, 1)
    # Add's a, b; the norm's inputs follow (its x, the sum, is never read); sum, then norm
    assert [tuple(r) for r in st.refs] == [("i", 0, 0), ("i", 1, 0), ("i", 3, 0), ("o", 0, 0), ("o", 1, 0)]
    rows, n, flags, eps, _ = nm._ADD_ARGS.unpack(st.tail)
    assert (rows, n, flags) == (1, 4096, 1) and eps == pytest.approx(1e-5)
    no_w = nm.plan_siblings([add, rms(x, x, w=False)], DEV32).steps[0]
    assert nm._ADD_ARGS.unpack(no_w.tail)[2] == 0 and no_w.refs[2] == no_w.refs[0]
    # declined: a broadcast operand, a float32 norm of 16-bit rows, a row too long for the
    # register layout, another primitive
    assert nm.plan_siblings([Node("Add", (), (x, R((4096,), dt)), (x,)), nrm], DEV32) is None
    if dt != "float32":
        assert nm.plan_siblings([add, rms(x, R((1, 1, 4096), "float32"))], DEV32) is None
    long = R((2, 100000), dt)
    assert nm.plan_siblings([Node("Add", (), (long, long), (long,)), rms(long, long)], DEV32) is None
    assert nm.plan_siblings([Node("Subtract", (), (x, x), (x,)), nrm], DEV32) is None



def slice_update(cache, upd, start):
    """mlx-lm's KVCache write: cache[..., start:start + L, :] = upd."""
    L = upd.shape[2]
    st = (0, 0, start, 0)
    stop = (cache.shape[0], cache.shape[1], start + L, cache.shape[3])
    return Node("SliceUpdate", (4, st, stop, (1, 1, 1, 1)), (cache, upd), (R(cache.shape, cache.dtype),))


@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_rope_and_cache_writes_plan(dt):
    """q's and k's RoPE, then the k and v cache writes (the evaluator's twin chain) as one
    rope_kv launch: k's pointers, the k slot (output 2 at the slice start), v, the v slot,
    then q's; the tails of q's and k's rotations and the slots' geometry; the cache writes'
    own donation, copies and written ranges moved past the rotations. Declined where a write
    is not a plain slot write of the whole rotated k."""
    from mlx_amd.runtime.ops import indexing

    B, Hq, Hkv, L, D, MAXL, start = 1, 32, 8, 1, 128, 256, 37
    q = Layout.strided((B, Hq, L, D), (L * (Hq + 2 * Hkv) * D, D, (Hq + 2 * Hkv) * D, 1), dt)
    k = Layout.strided((B, Hkv, L, D), (L * (Hq + 2 * Hkv) * D, D, (Hq + 2 * Hkv) * D, 1), dt)
    v = k
    cache = R((B, Hkv, MAXL, D), dt)
    rq, rk = rope_node(q, D), rope_node(k, D)
    wk, wv = slice_update(cache, R(rk.out.shape, dt), start), slice_update(cache, v, start)
    p = rp.plan_siblings([rq, rk, wk, wv], DEV32)
    (st,) = p.steps
    qa, ka = rp.plan_node(rq, DEV32).steps[0], rp.plan_node(rk, DEV32).steps[0]
    item = 4 if dt == "float32" else 2
    base = start * D * item
    assert st.kernel == f"rope_kv_{dt}_{dt}" and st.grid[1:] == (3, 1) and st.n_ptrs == 11
    assert st.grid[0] == max(qa.grid[0], ka.grid[0], -(-(B * Hkv * L * D) // rp.BLOCK))
    # inputs: q's x, offset (0, 1), k's (2, 3), the k write's cache and update (4, 5), the v
    # write's cache and v (6, 7); outputs: q, k, the k cache, the v cache
    assert [tuple(r) for r in st.refs] == [("i", 2, 0), ("i", 3, 0), ("i", 3, 0), ("o", 1, 0), ("o", 2, base),
                                           ("i", 7, 0), ("o", 3, base), ("i", 0, 0), ("i", 1, 0), ("i", 1, 0),
                                           ("o", 0, 0)]
    assert st.tail == qa.tail + ka.tail + rp._KV_ARGS.pack(MAXL * Hkv * D, MAXL * D, D, *v.strides,
                                                           B * Hkv * L * D, Hkv, L, D, 0)
    assert len(st.tail) + 8 * st.n_ptrs == rp.KV_ARG_SIZE
    writes = indexing.plan_siblings([wk, wv], DEV32)
    assert p.donate == ((2, 4), (3, 6)) and p.written == (None, None) + writes.written
    assert [j for j, _ in p.init] == [2, 3]
    for (j, (cp,)), (_, (wcp,)) in zip(p.init, writes.init):   # each cache's copy, refs moved
        assert cp.kernel == wcp.kernel and {r.kind for r in cp.refs} == {"i", "o"}
        assert [r.index for r in cp.refs if r.kind == "o"] == [j]
        assert [r.index for r in cp.refs if r.kind == "i"] == [4 if j == 2 else 6]
    # declined: the first write stores something else than the whole rotated k; a summing
    # write; a slice with a step on the last axis; caches of two shapes
    other = R((B, Hkv, 2, D), dt)
    assert rp.plan_siblings([rq, rk, slice_update(cache, other, start), slice_update(cache, other, start)],
                            DEV32) is None
    summing = Node("SliceUpdate", (2,) + wk.params[1:], wk.ins, wk.outs)
    assert rp.plan_siblings([rq, rk, summing, summing], DEV32) is None
    half = R((B, Hkv, MAXL, 2 * D), dt)
    stepped = Node("SliceUpdate", (4, (0, 0, start, 0), (B, Hkv, start + 1, 2 * D), (1, 1, 1, 2)),
                   (half, R(rk.out.shape, dt)), (half,))
    assert rp.plan_siblings([rq, rk, stepped, stepped], DEV32) is None
    assert rp.plan_siblings([rq, rk, wk, slice_update(R((B, Hkv, 2 * MAXL, D), dt), v, start)], DEV32) is None
