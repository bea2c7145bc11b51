"""Quantized plans without a GPU: the argument structs against the C header, the packing
the kernels decode (a numpy model of their bit streams against MLX's own dequantize), the
qmv / dequant launches executed by a numpy model of the kernels over layouts, batches,
broadcasts and gathers, the prefill plan's renumbered GEMM, and the quantize arithmetic
bit for bit against mx.quantize."""

import os
import shutil
import struct
import subprocess

import mlx.core as mx
import numpy as np
import pytest

from mlx_amd.runtime import kernel_table as kt
from mlx_amd.runtime.launch import Launch
from mlx_amd.runtime.ops import norm as N
from mlx_amd.runtime.ops import quantized as Q
from mlx_amd.runtime.plan import HostCall, Layout, Node

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODES = {"affine": 0, "mxfp4": 1, "mxfp8": 2, "nvfp4": 3}


class Dev:
    wave_size = 32
    compute_units = 132
    arch = "sm_90"


# --- argument structs ------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_arg_structs_match_header(tmp_path):
    src = tmp_path / "s.cpp"
    src.write_text(
        '#include <cstdio>\n#include <cstddef>\n#include "mlxa/quantized_args.h"\n#include "mlxa/norm_args.h"\n'
        'int main(){printf("%zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu\\n", sizeof(QmvArgs), offsetof(QmvArgs, m),'
        ' offsetof(QmvArgs, group_shift), offsetof(QmvArgs, out_shape), offsetof(QmvArgs, b_str),'
        ' sizeof(DequantArgs), offsetof(DequantArgs, group_shift), offsetof(DequantArgs, b_str),'
        ' sizeof(QuantizeArgs), offsetof(QuantizeArgs, group_size), sizeof(Fp8Args));'
        ' printf("%zu %zu\\n", sizeof(QdqArgs), offsetof(QdqArgs, groups));'
        ' printf("%zu %zu %d\\n", sizeof(QmvSibs), sizeof(QmvSibRows), MLXA_QSIBS);'
        ' printf("%zu %zu %zu\\n", sizeof(RmsPro), offsetof(RmsPro, out), sizeof(RmsProShape));'
        ' printf("%zu\\n", sizeof(QmvGlu));}\n')
    exe = tmp_path / "s"
    subprocess.run(["g++", "-std=c++17", "-I", os.path.join(REPO, "hip_kernels", "include"), str(src), "-o", str(exe)],
                   check=True)
    got = list(map(int, subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()))
    assert got == [Q.ARG_STRUCTS["QmvArgs"][1], 56, 136, 168, 168 + 8 * 32,
                   Q.ARG_STRUCTS["DequantArgs"][1], 80, 88 + 3 * 32, Q.ARG_STRUCTS["QuantizeArgs"][1], 40,
                   Q.ARG_STRUCTS["Fp8Args"][1], Q.ARG_STRUCTS["QdqArgs"][1], 16,
                   8 * 4 * Q.QSIBS, 8 * Q.QSIBS, Q.QSIBS, 40, 32, N._PRO_SHAPE.size, 8]


def test_kernel_table_is_lean_and_names_planned_kernels():
    names = set(kt.kernel_names("quantized"))
    # qmv, dequant, quantize, fp8, qmv_mma (2 dtypes x 3 groups), qmv_h2, qmv_h2n, qmv_h2g and
    # qmv_h2ng (3 widths x 2 dtypes x 2 waves each), qdq (3 fp modes x 3 dtypes)
    assert len(names) == 9 * 3 * 2 + 9 * 3 + 6 * 3 + 2 * 3 + 2 * 3 + 4 * 3 * 2 * 2 + 3 * 3
    for fmt in kt.table("quantized").FORMATS:
        for dt in Q.DTYPES:
            assert kt.table("quantized").qmv_name(kt, fmt, dt, 64) in names
            assert kt.table("quantized").dequant_name(kt, fmt, dt) in names


# --- a numpy model of the kernels --------------------------------------------------------

def unpack(words, bits, count):
    """Values of the little-endian bit stream in uint32 ``words`` (the kernels' view)."""
    b = np.unpackbits(np.ascontiguousarray(words, dtype="<u4").view(np.uint8), bitorder="little")
    b = b[: count * bits].reshape(count, bits).astype(np.uint64)
    return (b << np.arange(bits, dtype=np.uint64)).sum(1)


def fp4(q):
    q = q.astype(np.int64)
    e, m = (q >> 1) & 3, q & 1
    v = np.where(e == 0, 0.5 * m, (1 + 0.5 * m) * 2.0 ** (e - 1))
    return np.where(q & 8, -v, v)


def fp8(q):
    q = q.astype(np.int64)
    e, m = (q >> 3) & 15, q & 7
    v = np.where(e == 0, m * 2.0 ** -9, (1 + m / 8) * 2.0 ** (e - 7))
    v = np.where((e == 15) & (m == 7), np.nan, v)
    return np.where(q & 0x80, -v, v)


def value(fmt, q):
    if fmt.mode == 0:
        return q.astype(np.float64)
    return fp8(q) if fmt.mode == 2 else fp4(q)


def scale_value(fmt, s):
    if fmt.mode == 0:
        return s.astype(np.float64)
    s = s.astype(np.int64)
    if fmt.mode == 3:
        return fp8(s)
    return np.where(s == 0, 2.0 ** -127, 2.0 ** (s - 127))


def loc(i, shape, strides):
    off = 0
    for d in range(len(shape) - 1, -1, -1):
        off += (i % shape[d]) * strides[d]
        i //= shape[d]
    return off


QMV = struct.Struct("<7Q10q8i36q")
DEQ = struct.Struct("<4Q6q2i16q")


class Mem:
    """Flat buffers per ref kind; a ref resolves to (buffer, element offset)."""

    def __init__(self, ins, outs, temps=()):
        self.bufs = {"i": ins, "o": outs, "t": list(temps)}

    def get(self, ref):
        buf = self.bufs[ref.kind][ref.index]
        assert ref.offset % buf.itemsize == 0
        return buf, ref.offset // buf.itemsize


def decode_rows(fmt, W, woff, w_row, S, soff, s_row, B, boff, b_row, rows, cols, gshift):
    """dequant(w) rows x cols as the kernels compute it (float64)."""
    nw = cols * fmt.bits // 32
    out = np.empty((rows, cols))
    g = np.arange(cols) >> gshift
    for r in range(rows):
        q = unpack(W[woff + r * w_row + np.arange(nw)], fmt.bits, cols)
        sc = scale_value(fmt, S[soff + r * s_row + g])
        out[r] = sc * value(fmt, q) + (B[boff + r * b_row + g].astype(np.float64) if fmt.mode == 0 else 0.0)
    return out


SIB_PTRS = 4 * Q.QSIBS    # qmv_h2: QmvSibs' pointers come first, QmvSibRows after QmvArgs


def run_qmv(lau, fmt, mem, dev=None):
    h2 = "qmv_h2" in lau.kernel
    blob = lau.args((0,) * lau.n_ptrs)
    skip = 8 * SIB_PTRS if h2 else 0
    f = QMV.unpack(blob[skip: skip + QMV.size])
    sib_rows = struct.unpack(f"<{Q.QSIBS}q", blob[skip + QMV.size:]) if h2 else ()
    assert len(blob) == skip + QMV.size + 8 * len(sib_rows)
    refs = lau.refs[SIB_PTRS:] if h2 else lau.refs
    m, n, k, batch, x_row, w_row, s_row, b_row, x_count, w_count = f[7:17]
    gshift, nb, x_nb, w_nb, _xv, _wv, gather, ks = f[17:25]
    arr = [f[25 + 4 * i: 29 + 4 * i] for i in range(9)]
    out_shape, lhs_str, rhs_str, x_shape, x_str, w_shape, w_str, s_str, b_str = arr
    (X, xo), (W, wo), (S, so), (B, bo), (L, lo), (R, ro), (O, oo) = [mem.get(r) for r in refs]
    if "qmv_mma" in lau.kernel:    # 16 rows a wave, 4 // ks tiles a block, all rows of x at once
        assert fmt.mode == 0 and fmt.bits == 4 and k % fmt.gs == 0
        assert ks in (1, 2, 4) and lau.grid[0] == -(-n // (Q.QMV_MMA_WAVES // ks * 16))
        assert lau.block[0] in (Q.QMV_MMA_WAVES * 32, Q.QMV_MMA_WAVES * 64)
    elif "qmv_h2" in lau.kernel:   # R rows a wave, 256 // W // ks row groups a block, x staged in shared memory
        t = kt.table("quantized")
        assert fmt.mode == 0 and fmt.bits in t.QMV_H2_ROWS and k % 32 == 0
        block_rows = t.QMV_H2_THREADS // (dev or Dev()).wave_size // ks * t.QMV_H2_ROWS[fmt.bits]
        n_all = n + sum(sib_rows)
        assert ks in (1, 2, 4, 8) and lau.grid[0] == Q.qmv_h2_blocks(n_all, m, batch, block_rows, dev or Dev()) * m
        # every matrix but the last starts its successor on a row-block boundary
        segs = [n] + [r for r in sib_rows if r]
        assert all(r % block_rows == 0 for r in segs[:-1]) and (batch == 1 or len(segs) == 1)
        assert lau.block[0] == t.QMV_H2_THREADS
        assert lau.shared_mem == k // 32 * t.QMV_H2_SMEM_PER_CHUNK
    else:
        assert ks in (1, 2, 4) and lau.grid[0] == -(-n // (Q.QMV_WAVES // ks * Q.QMV_ROWS)) * m
    for b in range(batch):
        xi, wi = b, b
        if gather:
            xi = min(int(L[lo + loc(b, out_shape[:nb], lhs_str)]), x_count - 1)
            wi = min(int(R[ro + loc(b, out_shape[:nb], rhs_str)]), w_count - 1)
        xb = xo + loc(xi, x_shape[:x_nb], x_str)
        deq = decode_rows(fmt, W, wo + loc(wi, w_shape[:w_nb], w_str), w_row, S, so + loc(wi, w_shape[:w_nb], s_str),
                          s_row, B, bo + loc(wi, w_shape[:w_nb], b_str), b_row, n, k, gshift)
        for mm in range(m):
            xr = X[xb + mm * x_row + np.arange(k)].astype(np.float64)
            O[oo + (b * m + mm) * n + np.arange(n)] = deq @ xr
    for j, rows in enumerate(sib_rows):   # siblings: batch 1, the same x, k and strides
        if not rows:
            continue
        (Wj, wj), (Sj, sj), (Bj, bj), (Oj, oj) = [mem.get(lau.refs[f * Q.QSIBS + j]) for f in range(4)]
        deq = decode_rows(fmt, Wj, wj, w_row, Sj, sj, s_row, Bj, bj, b_row, rows, k, gshift)
        for mm in range(m):
            xr = X[xo + mm * x_row + np.arange(k)].astype(np.float64)
            Oj[oj + mm * rows + np.arange(rows)] = deq @ xr


def run_dequant(lau, fmt, mem):
    f = DEQ.unpack(lau.args((0,) * 4))
    total, rows, cols, w_row, s_row, b_row, gshift, nb = f[4:12]
    shape, w_str, s_str, b_str = [f[12 + 4 * i: 16 + 4 * i] for i in range(4)]
    (W, wo), (S, so), (B, bo), (O, oo) = [mem.get(r) for r in lau.refs]
    nbat = total // (rows * (cols // fmt.cv))
    for bt in range(nbat):
        d = decode_rows(fmt, W, wo + loc(bt, shape[:nb], w_str), w_row, S, so + loc(bt, shape[:nb], s_str), s_row,
                        B, bo + loc(bt, shape[:nb], b_str), b_row, rows, cols, gshift)
        O[oo + bt * rows * cols + np.arange(rows * cols)] = d.ravel()


# --- inputs ---------------------------------------------------------------------------------

def np_of(a):
    a = a.astype(mx.float32) if a.dtype in (mx.float16, mx.bfloat16) else a
    return np.array(a)


def quantized(shape, gs, bits, mode, dtype=mx.float32, seed=0):
    mx.random.seed(seed)
    w = mx.random.normal(shape).astype(dtype)
    r = mx.quantize(w, group_size=gs, bits=bits, mode=mode)
    mx.eval(*r)
    return r


def layout_of(arr: np.ndarray, dtype: str):
    """Layout of a numpy view, with its flat base buffer (element 0 at offset 0)."""
    base = arr
    while base.base is not None and isinstance(base.base, np.ndarray):
        base = base.base
    isz = arr.itemsize
    strides = tuple(s // isz for s in arr.strides)
    off = (arr.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // isz
    flat = base.reshape(-1)[off:] if base.flags.c_contiguous else np.ascontiguousarray(base).reshape(-1)[off:]
    return Layout.strided(arr.shape, strides, dtype), flat


FORMATS = [("affine", 4, 64), ("affine", 8, 32), ("affine", 2, 128), ("affine", 3, 64), ("affine", 5, 32),
           ("affine", 6, 64), ("mxfp4", 4, 32), ("mxfp8", 8, 32), ("nvfp4", 4, 16)]


@pytest.mark.parametrize("mode,bits,gs", FORMATS)
def test_bit_stream_model_matches_mlx_dequantize(mode, bits, gs):
    wq, sc, *rest = quantized((12, 256), gs, bits, mode)
    f = Q.fmt_for(gs, bits, MODES[mode])
    assert f is not None
    bi = rest[0] if rest else sc
    ref = np_of(mx.dequantize(wq, sc, *rest, group_size=gs, bits=bits, mode=mode))
    s_flat = np.array(sc).ravel() if mode != "affine" else np_of(sc).ravel()
    got = decode_rows(f, np.array(wq).ravel(), 0, wq.shape[1], s_flat, 0, sc.shape[1], np_of(bi).ravel(), 0,
                      bi.shape[1], 12, 256, f.shift)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def _qmm_node(x_np, x_dt, wq, sc, bi, gs, bits, mode, transpose, out_shape):
    ins, bufs = [], []
    for a, dt in ((x_np, x_dt), (wq, "uint32"), (sc, "uint8" if mode else x_dt)) + (((bi, x_dt),) if mode == 0 else ()):
        lay, flat = layout_of(a, dt)
        ins.append(lay)
        bufs.append(flat)
    node = Node("QuantizedMatmul", (gs, bits, mode, transpose), tuple(ins), (Layout.row_major(out_shape, x_dt),))
    return node, bufs


def _ref_qmm(x, deq, transpose):
    return np.matmul(x.astype(np.float64), np.swapaxes(deq, -1, -2) if transpose else deq)


@pytest.mark.parametrize("mode,bits,gs", FORMATS)
@pytest.mark.parametrize("M", [1, 3, 8])
def test_qmv_plan_model(mode, bits, gs, M):
    N, K = 37, 256          # N not a multiple of the 16 rows of a block
    wq, sc, *rest = quantized((N, K), gs, bits, mode, seed=M)
    m = MODES[mode]
    deq = np_of(mx.dequantize(wq, sc, *rest, group_size=gs, bits=bits, mode=mode))
    x = np.random.default_rng(M).standard_normal((M, K)).astype(np.float32)
    sc_np = np.array(sc) if m else np_of(sc)
    bi_np = np_of(rest[0]) if rest else None
    node, bufs = _qmm_node(x, "float32", np.array(wq), sc_np, bi_np, gs, bits, m, True, (M, N))
    plan = Q.plan_node(node, Dev())
    assert plan is not None and len(plan.steps) == 1 and not plan.temps
    out_buf = np.full(M * N, np.nan)
    run_qmv(plan.steps[0], Q.fmt_for(gs, bits, m), Mem(bufs + [bufs[0], bufs[0]], [out_buf]))
    np.testing.assert_allclose(out_buf.reshape(M, N), _ref_qmm(x, deq, True), rtol=1e-5, atol=1e-4)


def _qmv_mma_case(dt, gs, M, N=40, K=512, dev=None, s_pad=0):
    """A 4-bit QuantizedMatmul node of 16-bit x (the values float32 in the model's buffers)
    and its plan; ``s_pad`` pads the rows of scales and biases by that many elements."""
    wq, sc, bi = quantized((N, K), gs, 4, "affine", seed=gs + M)
    rng = np.random.default_rng(M)
    x = rng.standard_normal((M, K)).astype(np.float32)
    sc_np, bi_np = np_of(sc), np_of(bi)
    if s_pad:
        sc_np = np.pad(sc_np, ((0, 0), (0, s_pad)))[:, : K // gs]
        bi_np = np.pad(bi_np, ((0, 0), (0, s_pad)))[:, : K // gs]
    node, bufs = _qmm_node(x, dt, np.array(wq), sc_np, bi_np, gs, 4, 0, True, (M, N))
    deq = np_of(mx.dequantize(wq, sc, bi, group_size=gs, bits=4))
    return Q.plan_node(node, dev or Dev()), bufs, x, deq


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("gs", [32, 64, 128])
@pytest.mark.parametrize("M", [2, 3, 8])
def test_qmv_mma_plan_model(dt, gs, M):
    """4-bit affine w with 2-8 rows of 16-bit x on a device with mma.sync: the matrix-unit
    kernel, every row of x in one launch, and the model of its arguments gives the product."""
    plan, bufs, x, deq = _qmv_mma_case(dt, gs, M)
    assert [st.kernel for st in plan.steps] == [f"quantized_qmv_mma_a4_g{gs}_{dt}_{dt}"]
    out_buf = np.full(M * 40, np.nan)
    run_qmv(plan.steps[0], Q.fmt_for(gs, 4, 0), Mem(bufs + [bufs[0], bufs[0]], [out_buf]))
    np.testing.assert_allclose(out_buf.reshape(M, 40), _ref_qmm(x, deq, True), rtol=1e-5, atol=1e-4)


class H2Dev(Dev):
    max_shared_memory_per_block = 49152


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("gs", [32, 128])
@pytest.mark.parametrize("M", [1, 5])
def test_qmv_h2_plan_model(dt, bits, gs, M):
    """16-bit x and 2/4/8-bit affine w (one row of x; or rows the matrix unit does not
    take) on qmv_h2, with 72 bytes of shared memory per chunk of k; the model of its
    arguments gives the product."""
    N, K = 37, 512
    wq, sc, bi = quantized((N, K), gs, bits, "affine", seed=bits + M)
    x = np.random.default_rng(M).standard_normal((M, K)).astype(np.float32)
    node, bufs = _qmm_node(x, dt, np.array(wq), np_of(sc), np_of(bi), gs, bits, 0, True, (M, N))
    plan = Q.plan_node(node, H2Dev())
    want = f"quantized_qmv_mma_a4_g{gs}_{dt}_{dt}" if (bits == 4 and M > 1) else f"quantized_qmv_h2_a{bits}_{dt}_{dt}_w32"
    assert [st.kernel for st in plan.steps] == [want]
    out_buf = np.full(M * N, np.nan)
    run_qmv(plan.steps[0], Q.fmt_for(gs, bits, 0), Mem(bufs + [bufs[0], bufs[0]], [out_buf]))
    deq = np_of(mx.dequantize(wq, sc, bi, group_size=gs, bits=bits))
    np.testing.assert_allclose(out_buf.reshape(M, N), _ref_qmm(x, deq, True), rtol=1e-5, atol=1e-4)



@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("bits,gs", [(4, 64), (8, 32), (2, 128)])
@pytest.mark.parametrize("rows", [(64, 32, 32), (128, 37), (32, 64, 96)])
def test_qmv_h2_siblings_plan_model(dt, bits, gs, rows):
    """QuantizedMatmul nodes on one x (q/k/v, gate/up) planned as one qmv_h2 launch: the
    siblings' rows follow the node's, each matrix reads its own operands and writes its own
    output, and the model of the launch gives every product."""
    K, M = 512, 1
    x = np.random.default_rng(bits).standard_normal((M, K)).astype(np.float32)
    nodes, mems, refs = [], [], []
    for j, n in enumerate(rows):
        wq, sc, bi = quantized((n, K), gs, bits, "affine", seed=10 * j + bits)
        node, bufs = _qmm_node(x, dt, np.array(wq), np_of(sc), np_of(bi), gs, bits, 0, True, (M, n))
        nodes.append(node)
        mems += bufs
        refs.append(np_of(mx.dequantize(wq, sc, bi, group_size=gs, bits=bits)))
    plan = Q.plan_siblings(nodes, H2Dev())
    assert plan is not None and [st.kernel for st in plan.steps] == [f"quantized_qmv_h2_a{bits}_{dt}_{dt}_w32"]
    outs = [np.full(M * n, np.nan) for n in rows]
    run_qmv(plan.steps[0], Q.fmt_for(gs, bits, 0), Mem(mems, outs), H2Dev())
    for o, n, deq in zip(outs, rows, refs):
        np.testing.assert_allclose(o.reshape(M, n), _ref_qmm(x, deq, True), rtol=1e-5, atol=1e-4)


def test_qmv_h2_siblings_only_where_one_launch_serves():
    """plan_siblings declines (None: each node runs alone) where one qmv_h2 launch cannot
    take the group: another format or k, float32 x, rows of a matrix that do not end on a
    row block, more siblings than the kernel has slots."""
    x = np.random.default_rng(0).standard_normal((1, 256)).astype(np.float32)

    def node(n, K=256, bits=4, gs=64, dt="bfloat16", xx=None):
        wq, sc, bi = quantized((n, K), gs, bits, "affine", seed=n + bits)
        xx = x if xx is None else xx
        return _qmm_node(xx, dt, np.array(wq), np_of(sc), np_of(bi), gs, bits, 0, True, (1, n))[0]

    dev = H2Dev()
    assert Q.plan_siblings([node(64), node(32)], dev) is not None
    assert Q.plan_siblings([node(64), node(32, bits=8)], dev) is None
    assert Q.plan_siblings([node(64), node(32, gs=32)], dev) is None
    x2 = np.random.default_rng(1).standard_normal((1, 512)).astype(np.float32)
    assert Q.plan_siblings([node(64), node(32, K=512, xx=x2)], dev) is None
    assert Q.plan_siblings([node(64, dt="float32"), node(32, dt="float32")], dev) is None
    assert Q.plan_siblings([node(37), node(32)], dev) is None      # 37 rows end mid-block
    assert Q.plan_siblings([node(64), node(32), node(32), node(32)], dev) is None

def _chain_nodes(K=512, rows=(64, 32, 32), dt="bfloat16", bits=4, gs=64, lead=(1, 1), has_w=True):
    """[Add, RMSNorm of its sum, QuantizedMatmuls of the norm's output] as the evaluator
    hands a chain to plan_siblings (the norm's x and the projections' x are made by the
    group: row-major)."""
    from mlx_amd.runtime.plan import Node

    h = Layout.row_major(lead + (K,), dt)
    add = Node("Add", (), (h, h), (h,))
    nrm = Node("mlx_amd::RMSNorm", (1e-5, has_w), (h,) + ((Layout.row_major((K,), dt),) if has_w else ()), (h,))
    x = np.zeros(lead + (K,), np.float32)
    qs = []
    for j, n in enumerate(rows):
        wq, sc, bi = quantized((n, K), gs, bits, "affine", seed=j)
        qs.append(_qmm_node(x, dt, np.array(wq), np_of(sc), np_of(bi), gs, bits, 0, True, lead + (n,))[0])
    return [add, nrm] + qs


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("rows", [(64, 32, 32), (128, 37), (96,)])
@pytest.mark.parametrize("has_w", [True, False])
def test_rms_chain_plan(dt, bits, rows, has_w):
    """A residual add, the RMS norm of its sum and 1-3 projections of the norm's output: one
    qmv_h2n launch whose pointers are the prologue's (the Add's inputs, the norm's weight, the
    sum, the norm's output), then the projections' qmv_h2 launch renumbered after the pair's
    inputs and outputs; its tail is theirs plus (eps, flags); its shared memory the staged x
    and, 16-byte aligned after it, the norm's row."""
    nodes = _chain_nodes(rows=rows, dt=dt, bits=bits, has_w=has_w)
    plan = Q.plan_siblings(nodes, H2Dev())
    alone = Q.plan_siblings(nodes[2:], H2Dev()) if len(rows) > 1 else Q.plan_node(nodes[2], H2Dev())
    assert plan is not None and alone is not None and len(plan.steps) == 1 and not plan.temps and not plan.donate
    (lau,), (sub,) = plan.steps, alone.steps
    assert lau.kernel == f"quantized_qmv_h2n_a{bits}_{dt}_{dt}_w32" and sub.kernel == f"quantized_qmv_h2_a{bits}_{dt}_{dt}_w32"
    n_before = 3 + has_w
    assert lau.n_ptrs == 5 + sub.n_ptrs == 5 + 7 + SIB_PTRS
    w_ref = Q.inp(3) if has_w else Q.inp(0)
    assert lau.refs[:5] == (Q.inp(0), Q.inp(1), w_ref, Q.out(0), Q.out(1))
    assert lau.refs[5:] == tuple(r._replace(index=r.index + (n_before if r.kind == "i" else 2)) for r in sub.refs)
    assert lau.tail == sub.tail + struct.pack("<fi", 1e-5, int(has_w))
    assert lau.grid == sub.grid and lau.block == sub.block
    assert lau.shared_mem == (512 // 32 * 72 + 15) // 16 * 16 + 512 * 2
    assert lau.kernel in kt.kernel_names("quantized")


def test_rms_chain_only_where_one_launch_serves():
    """plan_siblings declines a chain (None: the pair and the projections run as before)
    for more than one row, float32, a projection of another k or of another x, projections
    that are not one qmv_h2 launch (another format each), too many of them, or a row that
    does not fit the shared memory beside the staged x."""
    from mlx_amd.runtime.plan import Node

    dev = H2Dev()
    assert Q.plan_siblings(_chain_nodes(), dev) is not None
    assert Q.plan_siblings(_chain_nodes(lead=(1, 2)), dev) is None          # prefill rows
    assert Q.plan_siblings(_chain_nodes(dt="float32"), dev) is None
    assert Q.plan_siblings(_chain_nodes(rows=(64, 32, 32, 32)), dev) is None
    nodes = _chain_nodes(rows=(64, 32))
    other = _chain_nodes(rows=(32,), bits=8)[2]
    assert Q.plan_siblings(nodes[:3] + [other], dev) is None
    wider = _chain_nodes(K=1024, rows=(32,))[2]
    assert Q.plan_siblings(nodes[:2] + [wider], dev) is None
    y = nodes[1].out
    odd = Node("mlx_amd::RMSNorm", (1e-5, True), (y, Layout.row_major((y.shape[-1] + 1,), y.dtype)), (y,))
    assert Q.plan_siblings([nodes[0], odd] + nodes[2:], dev) is None          # a weight of another length
    big = _chain_nodes(K=8192, rows=(32,))      # 8192 values: 18 KB staged + 16 KB row, of 40 KB
    assert Q.plan_siblings(big, dev) is not None
    assert Q.plan_siblings(_chain_nodes(K=10240, rows=(32,)), dev) is None   # 23 + 20 KB


def _tape(fn, *arrays):
    """The tape description of fn's largest Compiled node as the bridge gives it (shapeless)."""
    from mlx_amd.runtime import bridge

    mx.eval(list(arrays))
    y = mx.compile(fn, shapeless=True)(*arrays)
    cs = [n for n in bridge.Graph([y]).nodes if n[0] == "Compiled"]
    return max(cs, key=lambda n: len(n[1][2]))[1]    # the largest (nn's activations compile apart)


def test_swiglu_gate_recognises_the_tape_and_nothing_else():
    """compiled.swiglu_gate: which input is the gate of silu(gate) * up, in any order of the
    products (mlx-lm's swiglu, nn.silu, the sigmoid written out); None for another activation,
    an extra op, a shared operand, float32 or a constant."""
    import mlx.nn as nn

    from mlx_amd.runtime.ops import compiled as C

    def gate_ok(tape):   # the index names the input the sigmoid reads (MLX orders the inputs)
        i = C.swiglu_gate(tape)
        return i is not None and tape[1][i][0] == next(n[2][0] for n in tape[2] if n[0] == "Sigmoid")

    a, b = mx.ones((1, 1, 64), mx.bfloat16), mx.ones((1, 1, 64), mx.bfloat16)
    assert gate_ok(_tape(lambda g, u: nn.silu(g) * u, a, b))
    assert gate_ok(_tape(lambda u, g: u * (g * mx.sigmoid(g)), a, b))
    assert gate_ok(_tape(lambda g, u: mx.sigmoid(g) * g * u, a.astype(mx.float16), b.astype(mx.float16)))
    try:
        from mlx_lm.models.activations import swiglu
    except ImportError:
        swiglu = None
    if swiglu is not None:
        assert gate_ok(_tape(lambda g, u: swiglu(g, u), a, b))
    for fn in (lambda g, u: nn.gelu_approx(g) * u, lambda g, u: nn.silu(g) * u + 1,
               lambda g, u: nn.silu(g) * g, lambda g, u: nn.silu(u) * nn.silu(g),
               lambda g, u: mx.sigmoid(g) * u * u):
        assert C.swiglu_gate(_tape(fn, a, b)) is None
    assert C.swiglu_gate(_tape(lambda g, u: nn.silu(g) * u, a.astype(mx.float32), b.astype(mx.float32))) is None
    assert C.swiglu_gate(_tape(lambda g: nn.silu(g) * 2.0, a)) is None
    assert C.swiglu_gate(("not", "a", "tape")) is None


def _swiglu(lead, N, dt, gate=0):
    """A Compiled swiglu node of two (lead + (N,)) rows (gate=1: its inputs the other way)."""
    import mlx.nn as nn

    h = Layout.row_major(lead + (N,), dt)
    a, b = mx.ones(lead + (N,), getattr(mx, dt)), mx.zeros(lead + (N,), getattr(mx, dt))
    tape = _tape(lambda g, u: nn.silu(g) * u, a, b)
    if gate == 1:   # (MLX orders a Compiled node's inputs as its trace meets them: gate first)
        tape = (tape[0], tape[1][::-1]) + tape[2:]
    return Node("Compiled", tape, (h, h), (h,))


def _glu_nodes(K=512, N=96, dt="bfloat16", bits=4, gs=64, lead=(1, 1), gate=0, up_rows=None):
    """[gate, up, Compiled swiglu of the two] as the evaluator hands a sibling group and its
    tail to plan_siblings."""
    x = np.zeros(lead + (K,), np.float32)
    qs = []
    for j, n in enumerate((N, up_rows or N)):
        wq, sc, bi = quantized((n, K), gs, bits, "affine", seed=j)
        qs.append(_qmm_node(x, dt, np.array(wq), np_of(sc), np_of(bi), gs, bits, 0, True, lead + (n,))[0])
    return qs + [_swiglu(lead, N, dt, gate)]


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("M", [1, 3])
def test_swiglu_tail_plan(dt, bits, M):
    """An MLP's gate and up and their compiled swiglu: one qmv_h2g launch, the siblings'
    qmv_h2 launch with QmvGlu's pointer (the swiglu's output, the group's third) first; tail,
    grid, block and shared memory the siblings' own. tail_ok takes a swiglu with its gate
    first and nothing else."""
    from mlx_amd.runtime.ops import compiled as C

    nodes = _glu_nodes(dt=dt, bits=bits, lead=(1, M))
    plan = Q.plan_siblings(nodes, H2Dev())
    alone = Q.plan_siblings(nodes[:2], H2Dev())
    if alone is None:   # (4-bit rows of x past one: the matrix unit's qmv_mma, no siblings)
        assert plan is None and M > 1 and bits == 4
        return
    assert plan is not None and len(plan.steps) == 1 and not plan.temps and not plan.donate
    (lau,), (sub,) = plan.steps, alone.steps
    assert lau.kernel == f"quantized_qmv_h2g_a{bits}_{dt}_{dt}_w32" and sub.kernel == f"quantized_qmv_h2_a{bits}_{dt}_{dt}_w32"
    assert lau.n_ptrs == 1 + sub.n_ptrs and lau.refs == (Q.out(2),) + sub.refs
    assert (lau.tail, lau.grid, lau.block, lau.shared_mem) == (sub.tail, sub.grid, sub.block, sub.shared_mem)
    assert lau.kernel in kt.kernel_names("quantized")
    graph_node = ("Compiled", nodes[2].params, (0, 1), (2,))
    assert Q.tail_ok(graph_node) and C.swiglu_gate(nodes[2].params) == 0
    assert not Q.tail_ok(("Compiled", _swiglu((1, 1), 64, dt, gate=1).params, (0, 1), (2,)))
    assert not Q.tail_ok(("Compiled", _tape(lambda g, u: g * u + 1, mx.ones((4,)), mx.ones((4,))), (0, 1), (2,)))
    assert not Q.tail_ok(("Add", (), (0, 1), (2,)))


def test_swiglu_tail_only_where_one_launch_serves():
    """plan_siblings declines the tail (None: the group and the swiglu run apart) where the
    gate and up alone are not one qmv_h2 launch (3 bits), their rows differ, the swiglu takes
    the up as its gate, or its output is not theirs in shape."""
    dev = H2Dev()
    assert Q.plan_siblings(_glu_nodes(), dev) is not None
    assert Q.plan_siblings(_glu_nodes(bits=3), dev) is None
    assert Q.plan_siblings(_glu_nodes(up_rows=64), dev) is None
    assert Q.plan_siblings(_glu_nodes(gate=1), dev) is None
    g, u, c = _glu_nodes()
    assert Q.plan_siblings([g, u, _swiglu((1, 1), 64, "bfloat16")], dev) is None


@pytest.mark.parametrize("bits", [4, 8])
def test_rms_chain_with_swiglu_tail_plan(bits):
    """A residual add, its RMS norm, the gate and up of the norm's output and their swiglu
    (a chain whose projections have a tail): one qmv_h2ng launch, RmsPro's pointers, then the
    tail plan's renumbered after the pair's inputs and two outputs (QmvGlu's: the group's
    fifth output)."""
    nodes = _chain_nodes(rows=(96, 96), bits=bits)
    c = _swiglu((1, 1), 96, "bfloat16")
    plan = Q.plan_siblings(nodes + [c], H2Dev())
    glu = Q.plan_siblings(nodes[2:] + [c], H2Dev())
    assert plan is not None and glu is not None and len(plan.steps) == 1 and not plan.temps
    (lau,), (sub,) = plan.steps, glu.steps
    assert lau.kernel == f"quantized_qmv_h2ng_a{bits}_bfloat16_bfloat16_w32" and lau.kernel in kt.kernel_names("quantized")
    assert lau.refs[:5] == (Q.inp(0), Q.inp(1), Q.inp(3), Q.out(0), Q.out(1)) and lau.refs[5] == Q.out(4)
    assert lau.refs[5:] == tuple(r._replace(index=r.index + (4 if r.kind == "i" else 2)) for r in sub.refs)
    assert lau.n_ptrs == 5 + sub.n_ptrs and lau.tail == sub.tail + struct.pack("<fi", 1e-5, 1)


@pytest.mark.parametrize("why", ["float32", "3 bits", "6 bits", "k past shared memory", "switched off",
                                 "no shared memory", "mxfp4"])
def test_qmv_h2_only_where_it_serves(why, monkeypatch):
    dt, bits, gs, K, mode, dev = "bfloat16", 4, 64, 512, 0, H2Dev()
    if why == "float32":
        dt = "float32"
    elif why in ("3 bits", "6 bits"):
        bits = int(why[0])
    elif why == "k past shared memory":
        K = 18176 + 64
    elif why == "switched off":
        monkeypatch.setattr(Q, "QMV_HALF2", False)
    elif why == "no shared memory":
        dev = Dev()
    else:
        mode, gs = 1, 32
    mname = {0: "affine", 1: "mxfp4"}[mode]
    wq, sc, *rest = quantized((8, K), gs, bits, mname)
    x = np.ones((1, K), np.float32)
    node, _ = _qmm_node(x, dt, np.array(wq), np.array(sc) if mode else np_of(sc),
                        np_of(rest[0]) if rest else None, gs, bits, mode, True, (1, 8))
    name = Q.plan_node(node, dev).steps[-1].kernel
    assert "qmv_h2" not in name and "_qmv_" in name, name
    if why == "k past shared memory":   # the longest k that fits still takes it
        wq, sc, bi = quantized((8, 18176), 64, 4, "affine")
        node, _ = _qmm_node(np.ones((1, 18176), np.float32), dt, np.array(wq), np_of(sc), np_of(bi), 64, 4, 0, True,
                            (1, 8))
        assert "qmv_h2" in Q.plan_node(node, dev).steps[-1].kernel


def test_qmv_h2_split_and_blocks():
    dev = H2Dev()
    split = lambda mats, k, w=32, m=1, batch=1: Q.qmv_h2_split(mats, m, batch, k // 32, 4, w, dev)  # noqa: E731
    assert split([14336], 4096) == 1       # 448 row blocks in two passes; split 2: 896 in four
    assert split([4096], 14336) == 2       # one pass either way: 256 blocks busy against 128
    assert split([1024], 4096) == 2        # 128 chunks: two waves of 32 lanes keep a pair each
    assert split([40], 512) == 1           # short rows: no idle lanes
    # llama-8b's q/k/v: one pass of 192 blocks at split 1 against two passes of 384 row
    # blocks over 264 blocks at split 2 (measured 15.0 against 17.8 us on an H100)
    assert split([4096, 1024, 1024], 4096) == 1
    # a sibling boundary that only the smaller row blocks of split 2 keep
    assert split([48, 48], 4096) == 2
    assert split([40, 8], 512) is None     # no split: 40 rows is no row block's multiple
    # 64-wide waves (4 a block): 256 row blocks of 16 rows in one pass at split 1
    assert split([4096], 14336, w=64) == 1
    assert split([128256], 4096) == 1      # the head: 16 passes against 31
    # two blocks per compute unit loop over the row blocks; fewer row blocks: one each
    assert Q.qmv_h2_blocks(128256, 1, 1, 32, dev) == 264
    assert Q.qmv_h2_blocks(1024, 1, 1, 16, dev) == 64
    assert Q.qmv_h2_blocks(14336, 2, 3, 32, dev) == 44                # rows of x and batches share the cap
    assert Q.qmv_h2_blocks(14336, 8, 4000, 32, dev) == 1


def test_qmv_h2_on_a_64_wide_device():
    """CDNA: 256-thread blocks of 4 row groups (a 512-thread block spilled its float16
    variants to scratch on gfx90a/gfx942), the product unchanged."""
    class Cdna(H2Dev):
        wave_size = 64
        arch = "gfx942"
        compute_units = 304

    N, K = 100, 1024
    wq, sc, bi = quantized((N, K), 64, 4, "affine", seed=9)
    x = np.random.default_rng(9).standard_normal((1, K)).astype(np.float32)
    node, bufs = _qmm_node(x, "float16", np.array(wq), np_of(sc), np_of(bi), 64, 4, 0, True, (1, N))
    st = Q.plan_node(node, Cdna()).steps[0]
    assert st.kernel == "quantized_qmv_h2_a4_float16_float16_w64" and st.block == (256, 1, 1)
    out_buf = np.full(N, np.nan)
    run_qmv(st, Q.fmt_for(64, 4, 0), Mem(bufs + [bufs[0], bufs[0]], [out_buf]), Cdna())
    deq = np_of(mx.dequantize(wq, sc, bi, group_size=64, bits=4))
    np.testing.assert_allclose(out_buf, deq @ x[0], rtol=1e-5, atol=1e-4)


def test_qmv_h2_persistent_plan_model():
    """More row blocks than the grid has blocks: each block loops (model: the product)."""
    N, K = 600, 256
    wq, sc, bi = quantized((N, K), 64, 4, "affine", seed=5)
    x = np.random.default_rng(5).standard_normal((1, K)).astype(np.float32)
    node, bufs = _qmm_node(x, "bfloat16", np.array(wq), np_of(sc), np_of(bi), 64, 4, 0, True, (1, N))

    class Small(H2Dev):
        compute_units = 4

    plan = Q.plan_node(node, Small())
    st = plan.steps[0]
    assert "qmv_h2" in st.kernel and st.grid[0] == 8 < -(-N // 32)
    out_buf = np.full(N, np.nan)
    run_qmv(st, Q.fmt_for(64, 4, 0), Mem(bufs + [bufs[0], bufs[0]], [out_buf]), Small())
    deq = np_of(mx.dequantize(wq, sc, bi, group_size=64, bits=4))
    np.testing.assert_allclose(out_buf, deq @ x[0], rtol=1e-5, atol=1e-4)


class AmdDev(Dev):
    arch = "gfx1100"


@pytest.mark.parametrize("why", ["one_row", "k", "float32", "amd", "wave64", "scale_rows", "switched_off"])
def test_qmv_mma_only_where_it_serves(why, monkeypatch):
    """The portable qmv serves everything else: one row of x (the decode step: slower on
    the matrix unit, see _qmv_mma_serves), k not a whole number of mma.sync's 256-value
    stages, float32 x, RDNA3 (no qmv_mma backend for its WMMA layout), an emulated 64-wide
    wave on the 32-wide GPU, scale rows not aligned for mma.sync's loads,
    MLX_AMD_MATRIX_UNITS=0."""
    kw = {}
    dt = "bfloat16"
    M = 2
    if why == "one_row":
        M = 1
    elif why == "k":
        kw["K"] = 320
    elif why == "float32":
        dt = "float32"
    elif why == "amd":
        kw["dev"] = AmdDev()
    elif why == "wave64":
        monkeypatch.setenv("MLX_AMD_WAVE", "64")      # the 64-lane kernels emulated on the 32-wide GPU
    elif why == "scale_rows":
        kw["s_pad"] = 3
    else:
        monkeypatch.setenv("MLX_AMD_MATRIX_UNITS", "0")
    plan, bufs, x, deq = _qmv_mma_case(dt, 64, M, **kw)
    assert len(plan.steps) == 1 and "qmv_mma" not in plan.steps[0].kernel
    out_buf = np.full(M * 40, np.nan)
    run_qmv(plan.steps[0], Q.fmt_for(64, 4, 0), Mem(bufs + [bufs[0], bufs[0]], [out_buf]))
    np.testing.assert_allclose(out_buf.reshape(M, 40), _ref_qmm(x, deq, True), rtol=1e-5, atol=1e-4)


def test_qmv_mma_ksplit():
    dev = Dev()
    assert Q.qmv_mma_ksplit(14336, 1, 4096 // 64, dev) == 1       # 896 tiles: ~6 waves per CU already
    assert Q.qmv_mma_ksplit(4096, 1, 14336 // 64, dev) == 4       # 256 tiles
    assert Q.qmv_mma_ksplit(4096, 1, 4096 // 64, dev) == 4
    assert Q.qmv_mma_ksplit(4096, 4, 4096 // 64, dev) == 1        # 4 batches: 1024 tiles
    assert Q.qmv_mma_ksplit(2048, 1, 512 // 64, dev) == 1         # eight groups: no split


class Mi300(Dev):
    arch = "gfx942"
    wave_size = 64
    compute_units = 304


class Rdna4(Dev):
    arch = "gfx1201"
    compute_units = 64


class Mi100(Mi300):
    arch = "gfx908"


@pytest.mark.parametrize("dev,dt,block", [(Mi300(), "bfloat16", 256), (Mi300(), "float16", 256),
                                          (Rdna4(), "bfloat16", 128), (Mi100(), "float16", 256)],
                         ids=["gfx942-bf16", "gfx942-f16", "gfx1201-bf16", "gfx908-f16"])
@pytest.mark.parametrize("K", [512, 320])
def test_qmv_mma_on_amd_matrix_units(dev, dt, block, K):
    """CDNA's MFMA and RDNA4's WMMA have a qmv_mma backend (compiled only: the self-test
    decides at first use on a real device): their wave's blocks, and k need only be whole
    groups (the 256-value stages are the NVIDIA backend's)."""
    plan, bufs, x, deq = _qmv_mma_case(dt, 64, 3, K=K, dev=dev)
    st = plan.steps[0]
    assert st.kernel == f"quantized_qmv_mma_a4_g64_{dt}_{dt}" and st.block[0] == block
    out_buf = np.full(3 * 40, np.nan)
    run_qmv(st, Q.fmt_for(64, 4, 0), Mem(bufs + [bufs[0], bufs[0]], [out_buf]))
    np.testing.assert_allclose(out_buf.reshape(3, 40), _ref_qmm(x, deq, True), rtol=1e-5, atol=1e-4)


def test_qmv_mma_not_on_gfx908_bfloat16():
    plan, *_ = _qmv_mma_case("bfloat16", 64, 3, dev=Mi100())
    assert "qmv_mma" not in plan.steps[0].kernel       # gfx908's MFMA has no bfloat16 16x16x16


def test_qmv_batched_broadcast_and_strided_x():
    gs, bits = 64, 4
    wq, sc, bi = quantized((3, 20, 128), gs, bits, "affine")
    deq = np_of(mx.dequantize(wq, sc, bi, group_size=gs, bits=bits))
    rng = np.random.default_rng(1)
    # x: (2, 3, 2, 128) viewed with a transposed batch and a row stride of 256
    xb = rng.standard_normal((3, 2, 2, 256)).astype(np.float32)
    x = xb.transpose(1, 0, 2, 3)[..., :128]
    w_b = np.broadcast_to(np.array(wq), (2, 3, 20, 16))
    s_b = np.broadcast_to(np_of(sc), (2, 3, 20, 2))
    b_b = np.broadcast_to(np_of(bi), (2, 3, 20, 2))
    node, bufs = _qmm_node(x, "float32", w_b, s_b, b_b, gs, bits, 0, True, (2, 3, 2, 20))
    plan = Q.plan_node(node, Dev())
    assert plan is not None and len(plan.steps) == 1
    out_buf = np.full(2 * 3 * 2 * 20, np.nan)
    run_qmv(plan.steps[0], Q.fmt_for(gs, bits, 0), Mem(bufs + [bufs[0], bufs[0]], [out_buf]))
    ref = _ref_qmm(x, np.broadcast_to(deq, (2, 3, 20, 128)), True)
    np.testing.assert_allclose(out_buf.reshape(2, 3, 2, 20), ref, rtol=1e-5, atol=1e-4)


def test_x_with_strided_last_axis_is_copied_first():
    wq, sc, bi = quantized((16, 64), 64, 4, "affine")
    x = np.zeros((2, 128), np.float32)[:, ::2]
    node, _ = _qmm_node(x, "float32", np.array(wq), np_of(sc), np_of(bi), 64, 4, 0, True, (2, 16))
    plan = Q.plan_node(node, Dev())
    assert plan is not None and len(plan.steps) == 2 and plan.temps == (2 * 64 * 4,)
    assert plan.steps[0].family == "copy" and plan.steps[1].refs[0] == ("t", 0, 0)


@pytest.mark.parametrize("mode,bits,gs", [("affine", 4, 64), ("affine", 3, 32), ("mxfp4", 4, 32), ("nvfp4", 4, 16)])
def test_gather_plan_model(mode, bits, gs):
    E, N, K = 4, 24, 128
    m = MODES[mode]
    wq, sc, *rest = quantized((E, N, K), gs, bits, mode)
    deq = np_of(mx.dequantize(wq, sc, *rest, group_size=gs, bits=bits, mode=mode))
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 1, 1, K)).astype(np.float32)       # (tokens, 1, M=1, K)
    rhs = rng.integers(0, E, (5, 2)).astype(np.uint32)              # top-2 experts
    lhs = np.broadcast_to(np.arange(5, dtype=np.uint32)[:, None], (5, 2))
    sc_np = np.array(sc) if m else np_of(sc)
    ins, bufs = [], []
    arrays = [(x, "float32"), (np.array(wq), "uint32"), (sc_np, "uint8" if m else "float32")]
    if m == 0:
        arrays.append((np_of(rest[0]), "float32"))
    arrays += [(lhs, "uint32"), (rhs, "uint32")]
    for a, dt in arrays:
        lay, flat = layout_of(a, dt)
        ins.append(lay)
        bufs.append(flat)
    node = Node("GatherQMM", (gs, bits, m, True, False, False), tuple(ins),
                (Layout.row_major((5, 2, 1, N), "float32"),))
    plan = Q.plan_node(node, Dev())
    assert plan is not None and len(plan.steps) == 1
    out_buf = np.full(5 * 2 * N, np.nan)
    # (the fp modes have no biases input: their refs point at the scales instead)
    run_qmv(plan.steps[0], Q.fmt_for(gs, bits, m), Mem(bufs, [out_buf]))
    ref = np.stack([np.stack([deq[rhs[t, j]] @ x[t, 0, 0] for j in range(2)]) for t in range(5)])
    np.testing.assert_allclose(out_buf.reshape(5, 2, N), ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("transpose", [True, False])
@pytest.mark.parametrize("mode,bits,gs", [("affine", 4, 64), ("affine", 6, 32), ("mxfp8", 8, 32)])
def test_prefill_plan_dequantizes_and_renumbers_the_gemm(mode, bits, gs, transpose):
    m = MODES[mode]
    N, K, M = (48 if transpose else 128), 128, 33    # the packed axis is a multiple of the group
    wshape = (2, N, K) if transpose else (2, K, N)
    wq, sc, *rest = quantized(wshape, gs, bits, mode)
    deq = np_of(mx.dequantize(wq, sc, *rest, group_size=gs, bits=bits, mode=mode))
    x = np.zeros((2, M, K), np.float32)
    sc_np = np.array(sc) if m else np_of(sc)
    node, bufs = _qmm_node(x, "float32", np.array(wq), sc_np, np_of(rest[0]) if rest else None, gs, bits, m,
                           transpose, (2, M, N))
    plan = Q.plan_node(node, Dev())
    assert plan is not None
    deq_l = plan.steps[0]
    assert deq_l.kernel.startswith("quantized_dequant_") and plan.temps[0] == 2 * N * K * 4
    temp = np.full(2 * N * K, np.nan)
    run_dequant(deq_l, Q.fmt_for(gs, bits, m), Mem(bufs if m == 0 else bufs + [bufs[2]], [], [temp]))
    p = Q._problem(node, False)
    _, _, _, b_lay, _ = Q.prefill_operands(p, Dev())
    B = np.lib.stride_tricks.as_strided(temp, b_lay.shape, tuple(s * 8 for s in b_lay.strides))
    np.testing.assert_allclose(B, np.swapaxes(deq, -1, -2) if transpose else deq, rtol=1e-6, atol=1e-6)
    # the GEMM reads x (input 0) and the temporary, never w/scales/biases
    for st in plan.steps[1:]:
        refs = st.refs if isinstance(st, (Launch, HostCall)) else (st.ref,)
        for r in refs:
            assert r.kind != "i" or r.index == 0, (st, r)
    assert any(isinstance(st, HostCall) and st.refs[1] == ("t", 0, 0) for st in plan.steps[1:]) or \
        any(isinstance(st, Launch) and ("t", 0, 0) in st.refs for st in plan.steps[1:])


def test_prefill_keeps_broadcast_w_batch_broadcast():
    wq, sc, bi = quantized((64, 128), 64, 4, "affine")
    x = np.zeros((3, 16, 128), np.float32)
    w_b = np.broadcast_to(np.array(wq), (3, 64, 16))
    s_b = np.broadcast_to(np_of(sc), (3, 64, 2))
    b_b = np.broadcast_to(np_of(bi), (3, 64, 2))
    node, _ = _qmm_node(x, "float32", w_b, s_b, b_b, 64, 4, 0, True, (3, 16, 64))
    plan = Q.plan_node(node, Dev())
    assert plan is not None and plan.temps[0] == 64 * 128 * 4        # one copy, not three


def test_unsupported_is_none():
    wq, sc, bi = quantized((16, 64), 64, 4, "affine")
    x = np.zeros((1, 64), np.float32)
    # scales in another dtype than x
    node, _ = _qmm_node(x, "float32", np.array(wq), np_of(sc).astype(np.float16), np_of(bi), 64, 4, 0, True, (1, 16))
    node = Node(node.prim, node.params, (node.ins[0], node.ins[1], Layout.row_major((16, 1), "float16"), node.ins[3]),
                node.outs)
    assert Q.plan_node(node, Dev()) is None
    # group size MLX's CPU does not take for affine
    node, _ = _qmm_node(x, "float32", np.array(wq), np_of(sc), np_of(bi), 64, 4, 0, True, (1, 16))
    assert Q.plan_node(Node(node.prim, (16, 4, 0, True), node.ins, node.outs), Dev()) is None
    assert Q.plan_node(Node(node.prim, (64, 7, 0, True), node.ins, node.outs), Dev()) is None
    # integer x
    ins = (Layout.row_major((1, 64), "int32"),) + node.ins[1:]
    assert Q.plan_node(Node(node.prim, node.params, ins, (Layout.row_major((1, 16), "int32"),)), Dev()) is None
    # quantize: dequantize direction / fp modes are not ours
    q = Node("fast::Quantize", (None, 64, 4, 1, False), (Layout.row_major((4, 64), "float32"),),
             (Layout.row_major((4, 8), "uint32"), Layout.row_major((4, 2), "uint8")))
    assert Q.plan_node(q, Dev()) is None


def test_empty_x_is_planned_without_kernels():
    # (MLX's CPU kernel divides by M * K and dies of SIGFPE on an empty x: never fall back)
    wq, sc, bi = quantized((16, 64), 64, 4, "affine")
    x = np.zeros((0, 64), np.float32)
    node, _ = _qmm_node(x, "float32", np.array(wq), np_of(sc), np_of(bi), 64, 4, 0, True, (0, 16))
    assert Q.plan_node(node, Dev()).steps == ()


def test_ksplit_for_long_rows():
    dev = Dev()
    assert Q.qmv_ksplit(14336, 1, 4096 // 32, dev) == 1       # 3584 row groups, 1584 waves wanted
    assert Q.qmv_ksplit(4096, 1, 14336 // 32, dev) == 2       # 1024 groups
    assert Q.qmv_ksplit(1024, 1, 4096 // 32, dev) == 4        # 256 groups
    assert Q.qmv_ksplit(2048, 1, 2048 // 32, dev) == 2        # 64 chunks: two waves of 32 lanes
    assert Q.qmv_ksplit(14336, 8, 4096 // 32, dev) == 1
    assert Q.qmv_ksplit(64, 1, 128 // 32, dev) == 1             # short rows: no idle waves
    wq, sc, bi = quantized((16, 8192), 64, 4, "affine")
    x = np.random.default_rng(0).standard_normal((1, 8192)).astype(np.float32)
    node, bufs = _qmm_node(x, "float32", np.array(wq), np_of(sc), np_of(bi), 64, 4, 0, True, (1, 16))
    plan = Q.plan_node(node, dev)
    assert QMV.unpack(plan.steps[0].args((0,) * 7))[24] == 4
    out_buf = np.full(16, np.nan)
    run_qmv(plan.steps[0], Q.fmt_for(64, 4, 0), Mem(bufs + [bufs[0], bufs[0]], [out_buf]))
    deq = np_of(mx.dequantize(wq, sc, bi, group_size=64, bits=4))
    np.testing.assert_allclose(out_buf, deq @ x[0], rtol=1e-5, atol=1e-4)


def test_plans_are_deterministic_and_hashable():
    wq, sc, bi = quantized((16, 64), 64, 4, "affine")
    x = np.zeros((1, 64), np.float32)
    node, _ = _qmm_node(x, "float32", np.array(wq), np_of(sc), np_of(bi), 64, 4, 0, True, (1, 16))
    a, b = Q.plan_node(node, Dev()), Q.plan_node(node, Dev())
    assert a == b and hash(a.steps) == hash(b.steps)


# --- quantize: MLX's arithmetic, bit for bit ---------------------------------------------

def quantize_model(w, gs, bits):
    """The kernel's per-group arithmetic in float32 (numpy), packed as the kernel packs."""
    f32 = np.float32
    g = w.astype(f32).reshape(-1, gs)
    n_bins, eps = f32((1 << bits) - 1), f32(1e-7)
    w_max, w_min = g.max(1), g.min(1)
    mask = np.abs(w_min) > np.abs(w_max)
    scale = ((w_max - w_min) / n_bins).astype(f32)
    scale = np.where(scale < eps, eps, scale).astype(f32)
    scale = np.where(mask, scale, -scale).astype(f32)
    edge = np.where(mask, w_min, w_max).astype(f32)
    q0 = np.rint((edge / scale).astype(f32))
    nz = q0 != 0
    scale = np.where(nz, (edge / np.where(nz, q0, f32(1))).astype(f32), scale).astype(f32)
    bias = np.where(nz, edge, f32(0)).astype(f32)
    e = np.rint(((g - bias[:, None]).astype(f32) / scale[:, None]).astype(f32))
    e = np.clip(e, 0, n_bins).astype(np.uint64)
    bitsarr = ((e[..., None] >> np.arange(bits, dtype=np.uint64)) & 1).astype(np.uint8).reshape(-1)
    words = np.packbits(bitsarr, bitorder="little").view("<u4")
    return words, scale, bias


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
@pytest.mark.parametrize("gs", [32, 64, 128])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_quantize_arithmetic_matches_mlx(bits, gs, dtype):
    mx.random.seed(bits * gs)
    w = (mx.random.normal((8, 256)) * 3).astype(getattr(mx, dtype))
    w = mx.concatenate([w, mx.zeros((1, 256), w.dtype), mx.full((1, 256), 2.5, w.dtype)])  # flat groups
    wq, sc, bi = mx.quantize(w, group_size=gs, bits=bits)
    words, scale, bias = quantize_model(np_of(w), gs, bits)
    np.testing.assert_array_equal(np.array(wq).ravel(), words)
    # scales/biases are rounded to the input dtype by the kernel (cast<T>)
    np.testing.assert_array_equal(np_of(sc).ravel(), np_of(mx.array(scale).astype(w.dtype)).ravel())
    np.testing.assert_array_equal(np_of(bi).ravel(), np_of(mx.array(bias).astype(w.dtype)).ravel())


def test_quantize_plan():
    q = Node("fast::Quantize", (None, 64, 3, 0, False), (Layout.row_major((6, 128), "bfloat16"),),
             (Layout.row_major((6, 12), "uint32"), Layout.row_major((6, 2), "bfloat16"),
              Layout.row_major((6, 2), "bfloat16")))
    plan = Q.plan_node(q, Dev())
    (lau,) = plan.steps
    assert lau.kernel == "quantized_quantize_a3_bfloat16_bfloat16"
    assert struct.unpack("<q2i", lau.tail) == (12, 64, 0)
    assert lau.refs == (("i", 0, 0), ("o", 0, 0), ("o", 1, 0), ("o", 2, 0))
    # a transposed input is copied row-contiguous first
    t = Layout.strided((6, 128), (1, 6), "bfloat16")
    plan = Q.plan_node(Node(q.prim, q.params, (t,), q.outs), Dev())
    assert len(plan.steps) == 2 and plan.temps == (6 * 128 * 2,)


# --- ConvertFP8: MLX's rounding, bit for bit ---------------------------------------------

def to_e4m3_model(f):
    """The kernel's float -> e4m3 bit manipulation (numpy, uint32 arithmetic)."""
    bits = np.asarray(f, np.float32).view(np.uint32).astype(np.uint64)
    sign = bits & 0x80000000
    bits = bits ^ sign
    dm = np.float32(np.uint32(141 << 23).view(np.float32))
    low = ((bits.astype(np.uint32).view(np.float32) + dm).view(np.uint32).astype(np.uint64) - (141 << 23)) & 0xFF
    high = (((bits + ((-(120 << 23)) & 0xFFFFFFFF) + 0x7FFFF + ((bits >> 20) & 1)) & 0xFFFFFFFF) >> 20) & 0xFF
    r = np.where(bits >= (543 << 21), 0x7E, np.where(bits < (121 << 23), low, high))
    return (r | (sign >> 24)).astype(np.uint8)


def from_e4m3_model(x):
    x = np.asarray(x, np.uint32)
    v = x & 127
    u = ((v << 7) | (((v + 1) >> 7) << 14) | ((x & 128) << 8)).astype(np.uint16)
    return u.view(np.float16).astype(np.float32) * np.float32(256)


def test_to_fp8_model_matches_mlx():
    rng = np.random.default_rng(0)
    vals = np.concatenate([
        rng.standard_normal(4000).astype(np.float32) * 10.0 ** rng.integers(-10, 4, 4000),
        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 448, 464, 463.9, 480, 1e30, 2.0 ** -9, 2.0 ** -10,
                  3 * 2.0 ** -10, 2.0 ** -6, 0.9 * 2.0 ** -6], np.float32),
        np.arange(0, 256, dtype=np.uint32).astype(np.uint8).view(np.uint8).astype(np.float32) / 7])
    for dt in (mx.float32, mx.bfloat16, mx.float16):
        a = mx.array(vals).astype(dt)
        got = to_e4m3_model(np_of(a))
        np.testing.assert_array_equal(got, np.array(mx.to_fp8(a)))


def test_from_fp8_model_matches_mlx():
    codes = np.arange(256, dtype=np.uint8)
    ref = np_of(mx.from_fp8(mx.array(codes), dtype=mx.float32))
    got = from_e4m3_model(codes)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    ok = ~np.isnan(ref)
    np.testing.assert_array_equal(got[ok].view(np.uint32), ref[ok].view(np.uint32))


def test_fp8_plans():
    x = Layout.row_major((3, 50), "bfloat16")
    p = Q.plan_node(Node("fast::ConvertFP8", (True,), (x,), (Layout.row_major((3, 50), "uint8"),)), Dev())
    (lau,) = p.steps
    assert lau.kernel == "quantized_fp8_to_bfloat16_uint8" and struct.unpack("<q", lau.tail) == (150,)
    t = Layout.strided((50, 3), (1, 50), "uint8")
    p = Q.plan_node(Node("fast::ConvertFP8", (False,), (t,), (Layout.row_major((50, 3), "float16"),)), Dev())
    assert len(p.steps) == 2 and p.steps[1].kernel == "quantized_fp8_from_uint8_float16" and p.temps == (150,)
    # integers are not MLX's fp8 sources
    assert Q.plan_node(Node("fast::ConvertFP8", (True,), (Layout.row_major((4,), "int32"),),
                            (Layout.row_major((4,), "uint8"),)), Dev()) is None


# --- QQMatmul: x quantized to w's fp mode and back, then the QuantizedMatmul plan ---------

def to_e2m1_model(x):
    """MLX's e2m1 thresholds (the kernel's to_e2m1) on float32 values: codes 0..15."""
    x = np.asarray(x, np.float32)
    a = np.abs(x)
    b = np.select([a > 5, a >= 3.5, a > 2.5, a >= 1.75, a > 1.25, a >= 0.75, a > 0.25], [7, 6, 5, 4, 3, 2, 1], 0)
    b = np.where(np.signbit(x), b | 8, b)
    return np.where(np.isnan(x), 7, b).astype(np.uint32)


def qdq_model(x, mode, scale_up=True):
    """The qdq kernel's arithmetic in numpy (float32 steps): per group of 16 (nvfp4) or 32,
    scale = max|x| (NaN left out) / 6 or 448 in the mode's scale format, values rounded to the
    value format, times the scale. float32 out (the kernel then rounds to x's dtype).
    ``scale_up=False``: the mx scale rounded to the nearest power of two instead (a wrong
    model: the tests show it differs from MLX)."""
    g = 16 if mode == "nvfp4" else 32
    xg = np.asarray(x, np.float32).reshape(-1, g)
    a = np.abs(xg)
    m = np.where(np.isnan(a), -np.inf, a).max(1)
    s = (m / np.float32(448 if mode == "mxfp8" else 6)).astype(np.float32)
    if mode == "nvfp4":
        s = from_e4m3_model(to_e4m3_model(s))
    else:
        with np.errstate(divide="ignore"):
            l2 = np.log2(s.astype(np.float64)).astype(np.float32)   # (any log2: the step up settles it)
        n = np.where(s == 0, -127, np.sign(l2) * np.floor(np.abs(l2) + 0.5))   # roundf: half away
        n = np.clip(np.nan_to_num(n), -127, 127).astype(np.int64)
        e = np.where(np.isfinite(s), n + 127, 255)
        dq = lambda e: np.where(e == 0, np.float32(2.0 ** -127), np.exp2(e.astype(np.float64) - 127)).astype(np.float32)  # noqa: E731
        if scale_up:                                          # the largest values never saturate
            e = np.where((e < 254) & (dq(e) < s), e + 1, e)
        s = dq(e)
    s = s[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.where(s == 0, np.float32(0), xg / s).astype(np.float32)
    q = from_e4m3_model(to_e4m3_model(e)) if mode == "mxfp8" else fp4(to_e2m1_model(e)).astype(np.float32)
    return (s * q).astype(np.float32).reshape(np.shape(x))


QQ_FORMATS = [("mxfp4", 32, 4, 1), ("mxfp8", 32, 8, 2), ("nvfp4", 16, 4, 3)]


@pytest.mark.parametrize("mode,gs,bits,m", QQ_FORMATS)
def test_qdq_model_matches_mlx_qqmm(mode, gs, bits, m):
    """MLX's own CPU QQMatmul (one row of float32 x) is the product of the model's x and the
    dequantized w: the arithmetic the kernel copies is MLX's, scale roundings included (x
    spans many binades, with zeros, a NaN-free group of tiny values and exact ties)."""
    K, N = 512, 24
    rng = np.random.default_rng(m)
    x = (rng.standard_normal(K) * 10.0 ** rng.integers(-3, 3, K)).astype(np.float32)
    x[:gs] = 0.0
    x[gs:2 * gs] *= 1e-30
    x[2 * gs:3 * gs] = np.float32(0.25) * np.arange(gs, dtype=np.float32) / 4   # e2m1 tie points
    w, sc = quantized((N, K), gs, bits, mode, seed=m)
    deq = np_of(mx.dequantize(w, sc, group_size=gs, bits=bits, mode=mode))
    got = np.array(mx.qqmm(mx.array(x[None]), w, sc, group_size=gs, bits=bits, mode=mode))[0]
    want = qdq_model(x, mode).astype(np.float64) @ deq.T.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5 * np.abs(want).max())
    if mode != "nvfp4":      # the comparison tells the scale rules apart
        wrong = qdq_model(x, mode, scale_up=False).astype(np.float64) @ deq.T.astype(np.float64)
        assert not np.allclose(got, wrong, rtol=2e-5, atol=1e-5 * np.abs(want).max())


def _qq_node(x_lay, mode, gs, bits, m, N, K, extra=0):
    w = Layout.row_major((N, K * bits // 32), "uint32")
    s = Layout.row_major((N, K // gs), "uint8")
    out_shape = tuple(x_lay.shape[:-1]) + (N,)
    ins = (x_lay, w, s) + tuple(Layout.row_major((), "float32") for _ in range(extra))
    return Node("QQMatmul", (gs, bits, m), ins, (Layout.row_major(out_shape, x_lay.dtype),))


@pytest.mark.parametrize("mode,gs,bits,m", QQ_FORMATS)
@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
@pytest.mark.parametrize("M", [1, 5, 40])
def test_qqmm_plan(mode, gs, bits, m, dt, M):
    """qdq over every group of x into a temporary of x's dtype, then QuantizedMatmul's own
    plan on it (qmv for M <= 8, dequantize + GEMM beyond), its temporaries after ours."""
    K, N = 256, 48
    x = Layout.row_major((2, M, K), dt)
    plan = Q.plan_node(_qq_node(x, mode, gs, bits, m, N, K), Dev())
    assert plan is not None
    qdq = plan.steps[0]
    assert qdq.kernel == f"quantized_qdq_{mode}_{dt}_{dt}" and qdq.kernel in kt.kernel_names("quantized")
    assert struct.unpack("<q", qdq.tail) == (2 * M * K // gs,) and qdq.refs[0].kind == "i"
    assert plan.temps[0] == 2 * M * K * (4 if dt == "float32" else 2)
    sub = Q.plan_node(Node("QuantizedMatmul", (gs, bits, m, True), (x,) + _qq_node(x, mode, gs, bits, m, N, K).ins[1:],
                           (Layout.row_major((2, M, N), dt),)), Dev())
    assert len(plan.steps) == 1 + len(sub.steps) and plan.temps[1:] == sub.temps
    first = plan.steps[1]
    assert first.kernel == sub.steps[0].kernel
    # the sub-plan's x is our temporary 0; its own temporaries are renumbered after it
    refs = [r for st in plan.steps[1:] for r in getattr(st, "refs", ())]
    assert ("t", 0) in {(r.kind, r.index) for r in refs}
    assert all(r.kind != "i" or r.index in (1, 2) for r in refs)


def test_qqmm_strided_x_is_copied_first_and_the_rest_declined():
    K, N = 128, 16
    x = Layout.strided((K, 3), (1, K), "float16")       # a transposed view: rows not contiguous
    xt = Layout.strided((3, K), (1, 3), "float16")
    plan = Q.plan_node(_qq_node(xt, "mxfp8", 32, 8, 2, N, K), Dev())
    assert plan is not None and plan.steps[0].kernel.startswith("copy") or "copy" in plan.steps[0].family
    assert plan.steps[1].kernel == "quantized_qdq_mxfp8_float16_float16" and plan.steps[1].refs[0] == Q.tmp(0)
    assert plan.temps[:2] == (3 * K * 2, 3 * K * 2)
    del x
    row = Layout.row_major((1, K), "float32")
    # nvfp4's global scales (MLX's CPU path), affine w, a group size the mode does not have
    assert Q.plan_node(_qq_node(row, "nvfp4", 16, 4, 3, N, K, extra=2), Dev()) is None
    assert Q.plan_node(_qq_node(row, "affine", 64, 4, 0, N, K), Dev()) is None
    assert Q.plan_node(_qq_node(row, "mxfp4", 16, 4, 1, N, K), Dev()) is None
    assert Q.plan_node(_qq_node(Layout.row_major((1, K), "int32"), "mxfp8", 32, 8, 2, N, K), Dev()) is None


@pytest.mark.parametrize("mode,gs,bits,m", QQ_FORMATS)
def test_gather_qqmm_plan(mode, gs, bits, m):
    """GatherQQMM's inputs (x, w, lhs, rhs, scales) reach GatherQMM's plan (x, w, scales, lhs,
    rhs) with x the qdq temporary; more than 8 rows of x take the dequantize + GatherMM path
    after the qdq; global scales are declined."""
    K, N, E = 128, 32, 4
    x = Layout.row_major((3, 2, K), "bfloat16")
    w = Layout.row_major((E, N, K * bits // 32), "uint32")
    s = Layout.row_major((E, N, K // gs), "uint8")
    idx = Layout.row_major((3,), "uint32")
    o = Layout.row_major((3, 2, N), "bfloat16")
    node = Node("GatherQQMM", (gs, bits, m, False, False), (x, w, idx, idx, s), (o,))
    plan = Q.plan_node(node, Dev())
    assert plan.steps[0].kernel == f"quantized_qdq_{mode}_bfloat16_bfloat16"
    syn = Q.plan_node(Node("GatherQMM", (gs, bits, m, True, False, False), (x, w, s, idx, idx), (o,)), Dev())
    assert [st.kernel for st in plan.steps[1:]] == [st.kernel for st in syn.steps]
    ours, theirs = plan.steps[-1].refs, syn.steps[-1].refs
    move = {("i", 0): ("t", 0), ("i", 1): ("i", 1), ("i", 2): ("i", 4), ("i", 3): ("i", 2), ("i", 4): ("i", 3)}
    assert [(r.kind, r.index) for r in ours] == [move.get((r.kind, r.index), (r.kind, r.index)) for r in theirs]
    big = Node("GatherQQMM", (gs, bits, m, False, False), (Layout.row_major((3, 9, K), "bfloat16"), w, idx, idx, s),
               (Layout.row_major((3, 9, N), "bfloat16"),))
    ks = [st.kernel for st in Q.plan_node(big, Dev()).steps]
    assert len(ks) == 3 and ks[0].startswith("quantized_qdq_") and "dequant" in ks[1] and ks[2].startswith("gather_mm_")
    g = Layout.row_major((), "float32")
    assert Q.plan_node(Node("GatherQQMM", (gs, bits, m, False, False), (x, w, idx, idx, s, g, g), (o,)), Dev()) is None


@pytest.mark.parametrize("transpose,M", [(True, 12), (False, 1)])
def test_gather_qmm_dequant_plan(transpose, M):
    """GatherQMM beyond the qmv kernel (M > 8 or transpose=False): one dequantize launch over
    every expert into temporary 0, then GatherMM reading x, that temporary (transposed where
    w holds (N, K)) and the node's own lhs / rhs index arrays."""
    E, N, K = 3, 64, 128
    rows, cols = (N, K) if transpose else (K, N)
    x = Layout.row_major((5, M, K), "bfloat16")
    w = Layout.row_major((E, rows, cols * 4 // 32), "uint32")
    s = Layout.row_major((E, rows, cols // 64), "bfloat16")
    idx = Layout.row_major((4,), "uint32")
    o = Layout.row_major((4, M, N), "bfloat16")
    plan = Q.plan_node(Node("GatherQMM", (64, 4, 0, transpose, False, False), (x, w, s, s, idx, idx), (o,)), Dev())
    deq, mm = plan.steps
    assert "dequant" in deq.kernel and deq.refs[-1] == ("t", 0, 0)
    assert plan.temps[0] == E * N * K * 2
    assert mm.kernel.startswith("gather_mm_")
    assert [(r.kind, r.index) for r in mm.refs] == [("i", 0), ("t", 0), ("i", 4), ("i", 5), ("o", 0)]
