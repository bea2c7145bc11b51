"""Matmul/AddMM plans without a GPU: the argument structs against the C headers, and every
plan executed by a numpy model of its steps (library GEMM, our gemv and tiled kernels,
copies) against numpy's product, over layouts, batches, broadcasts and dtypes."""

import dataclasses
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest

from mlx_amd.runtime import kernel_table as kt
from mlx_amd.runtime.launch import Launch
from mlx_amd.runtime.ops import matmul as mm
from mlx_amd.runtime.plan import HostCall, Layout, Memset, Node, Ref

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Dev:
    wave_size = 32
    compute_units = 132
    arch = "sm_90"


# --- argument structs ----------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_arg_structs_match_headers(tmp_path):
    src = tmp_path / "s.cpp"
    src.write_text('#include <cstdio>\n#include <cstddef>\n#include "mlxa/gemv_args.h"\n#include "mlxa/gemm_args.h"\n'
                   'int main(){printf("%zu %zu %zu %zu %zu %zu\\n", sizeof(GemvArgs), offsetof(GemvArgs, rows),'
                   ' offsetof(GemvArgs, alpha), sizeof(GemmArgs), offsetof(GemmArgs, m), offsetof(GemmArgs, alpha));'
                   ' printf("%zu %zu %d\\n", sizeof(GemvSibs), sizeof(GemvSibRows), MLXA_GEMV_SIBS);}\n')
    exe = tmp_path / "s"
    subprocess.run(["g++", "-std=c++17", "-I", os.path.join(REPO, "hip_kernels", "include"), str(src), "-o", str(exe)],
                   check=True)
    got = list(map(int, subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()))
    assert got == [mm.ARG_STRUCTS["GemvArgs"][1], 24, 80, mm.ARG_STRUCTS["GemmArgs"][1], 32, 144,
                   16 * mm.GEMV_SIBS, 8 * mm.GEMV_SIBS, mm.GEMV_SIBS]


def test_kernel_tables_name_every_planned_kernel():
    names = set(kt.kernel_names("gemv")) | set(kt.kernel_names("gemm"))
    # gemm: 5 dtypes; gemv and gemv_rmsrows: 3 dtypes x 2 waves each
    assert len(names) == 5 + 2 * 3 * 2
    for dt in mm.DTYPES:
        assert kt.table("gemm").name(kt, dt) in names


# --- a numpy model of the plan's steps -----------------------------------------------------

GEMV = struct.Struct("<3Q7q2f2i")
SIB_ROWS = struct.Struct(f"<{mm.GEMV_SIBS}q")


def gemv_fields(st):
    """GemvArgs of a gemv launch (pointers zero); GemvSibs' pointers come before it and
    GemvSibRows after it: sibling_rows(st) and refs[:2 * GEMV_SIBS]."""
    assert st.n_ptrs == 3 + 2 * mm.GEMV_SIBS and len(st.tail) == GEMV.size - 24 + SIB_ROWS.size
    return GEMV.unpack(b"\0" * 24 + st.tail[: GEMV.size - 24])


def sibling_rows(st):
    return SIB_ROWS.unpack(st.tail[GEMV.size - 24:])
GEMM = struct.Struct("<4Q14q2d")


class Machine:
    """Flat float64 buffers; a pointer is (buffer, element offset)."""

    def __init__(self, ins, out_size, temps, dt):
        self.ins, self.out, self.isz = ins, np.full(out_size, np.nan, dtype=ins[0][0].dtype), mm.ITEM[dt]
        self.temps = [np.full(t // self.isz, np.nan, dtype=ins[0][0].dtype) for t in temps]

    def ptr(self, ref):
        kind, i, off = ref
        assert off % self.isz == 0
        if kind == "i":
            buf, base = self.ins[i]
            return buf, base + off // self.isz
        return (self.out if kind == "o" else self.temps[i]), off // self.isz

    def run(self, plan, node):
        for st in plan.steps:
            if isinstance(st, Memset):
                buf, o = self.ptr(st.ref)
                buf[o:o + st.nbytes // self.isz] = 0
            elif isinstance(st, HostCall):
                a, b, d = (self.ptr(r) for r in st.refs)
                call = st.fn
                for oa, ob, od in call.jobs:
                    self.gemm_lib(call.gemm, shift(b, ob, self.isz), shift(a, oa, self.isz), shift(d, od, self.isz))
            elif st.family == "copy":
                src = node.ins[st.refs[0].index]
                buf, o = self.ptr(st.refs[1])
                sb, so = self.ins[st.refs[0].index]
                view = np.lib.stride_tricks.as_strided(sb[so:], src.shape, [s * sb.itemsize for s in src.strides]) \
                    if min(src.strides, default=0) >= 0 else view_any(sb, so, src)
                buf[o:o + src.size] = np.ascontiguousarray(view).ravel()
            elif st.family == "gemv":
                self.gemv(st)
            elif st.family == "gemm":
                self.gemm_kernel(st, [self.ptr(r) for r in st.refs])
            else:
                raise AssertionError(st)

    def gemm_lib(self, g, A, B, D):
        for i in range(g.batch):
            ar, ac = (g.k, g.m) if g.trans_a else (g.m, g.k)
            br, bc = (g.n, g.k) if g.trans_b else (g.k, g.n)
            Am = colmajor(A, i * g.stride_a, ar, ac, g.lda)
            Bm = colmajor(B, i * g.stride_b, br, bc, g.ldb)
            opa, opb = (Am.T if g.trans_a else Am), (Bm.T if g.trans_b else Bm)
            buf, o = D
            idx = o + i * g.stride_c + np.arange(g.m)[:, None] + np.arange(g.n)[None, :] * g.ldc
            old = buf[idx] if g.beta != 0 else 0
            buf[idx] = g.alpha * (opa @ opb) + g.beta * old

    def gemv(self, st):
        rows, k, ldw, incx, bw, bx, by, alpha, beta, ks, _ = gemv_fields(st)[3:]
        assert sibling_rows(st) == (0,) * mm.GEMV_SIBS
        (wb, wo), (xb, xo), (yb, yo) = (self.ptr(r) for r in st.refs[2 * mm.GEMV_SIBS:])
        for z in range(st.grid[1]):
            w = wb[wo + z * bw + np.arange(rows)[:, None] * ldw + np.arange(k)[None, :]]
            x = xb[xo + z * bx + np.arange(k) * incx]
            idx = yo + z * by + np.arange(rows)
            old = yb[idx] if beta != 0 else 0
            yb[idx] = alpha * (w @ x) + beta * old
        assert ks in (1, 2, 4) and st.grid[0] * (mm.GEMV_WAVES // ks) * mm.GEMV_ROWS >= rows

    def gemm_kernel(self, st, ptrs):
        f = GEMM.unpack(b"\0" * 32 + st.tail)[4:]
        m, n, k, ars, acs, brs, bcs, abs_, bbs, dbs, crs, ccs, cbs, ldd, alpha, beta = f
        (ab, ao), (bb, bo), (cb, co), (db, do) = ptrs
        assert st.grid[0] * mm.TILE >= n and st.grid[1] * mm.TILE >= m
        for z in range(st.grid[2]):
            A = ab[ao + z * abs_ + np.arange(m)[:, None] * ars + np.arange(k)[None, :] * acs]
            B = bb[bo + z * bbs + np.arange(k)[:, None] * brs + np.arange(n)[None, :] * bcs]
            C = cb[co + z * cbs + np.arange(m)[:, None] * crs + np.arange(n)[None, :] * ccs] if beta != 0 else 0
            db[do + z * dbs + np.arange(m)[:, None] * ldd + np.arange(n)[None, :]] = alpha * (A @ B) + beta * C


def shift(p, nbytes, isz):
    return p[0], p[1] + nbytes // isz


def colmajor(p, off, rows, cols, ld):
    buf, o = p
    return buf[o + off + np.arange(rows)[:, None] + np.arange(cols)[None, :] * ld]


def view_any(buf, base, lay):
    idx = base + sum(np.arange(d).reshape([-1 if j == i else 1 for j in range(len(lay.shape))]) * s
                     for i, (d, s) in enumerate(zip(lay.shape, lay.strides)))
    return buf[idx] if lay.shape else buf[base]


def make_operand(rng, shape, kind, dtype=np.float64):
    """(flat buffer, element-0 offset, Layout, numpy value) of a ``kind`` layout."""
    shape = tuple(shape)
    nd = len(shape)
    if kind == "row":
        perm = list(range(nd))
    elif kind == "col":
        perm = list(range(nd - 2)) + [nd - 1, nd - 2]
    elif kind == "batchlast":   # batch dims innermost in memory
        perm = list(range(2, nd)) + [0, 1] if nd > 2 else list(range(nd))
        perm = [nd - 2, nd - 1] + list(range(nd - 2))
    else:
        perm = list(range(nd))
    store = [shape[p] for p in perm]
    full = rng.integers(-3, 4, size=[s + (1 if kind == "pad" else 0) for s in store]).astype(dtype)
    if kind == "pad":
        full = full[tuple(slice(0, s) for s in store)]
    arr = np.moveaxis(full, list(range(nd)), perm) if kind != "pad" else full
    arr = np.transpose(full, np.argsort(perm)) if kind in ("row", "col", "batchlast") else arr
    base_buf = np.ascontiguousarray(full if kind != "pad" else np.array(full.base if full.base is not None else full))
    if kind == "pad":
        padded = rng.integers(-3, 4, size=[s + 1 for s in store]).astype(dtype)
        padded[tuple(slice(0, s) for s in store)] = full
        base_buf = padded
        arr = padded[tuple(slice(0, s) for s in store)]
    flat = base_buf.ravel()
    offset = 3
    buf = np.concatenate([np.full(offset, np.nan), flat]).astype(dtype)
    strides = tuple(s // arr.itemsize for s in arr.strides)
    lay = Layout.strided(shape, strides, "float32")
    return buf, offset, lay, np.array(arr)


def broadcast_operand(rng, shape, bdims):
    """Operand with zero strides on batch dims ``bdims``."""
    small = list(shape)
    for d in bdims:
        small[d] = 1
    v = rng.integers(-3, 4, size=small).astype(np.float64)
    strides = list(np.array(v.strides) // 8)
    for d in bdims:
        strides[d] = 0
    buf = np.concatenate([np.full(3, np.nan), v.ravel()])
    return buf, 3, Layout.strided(shape, tuple(strides), "float32"), np.broadcast_to(v, shape)


def run_plan(prim, ops, out_shape, dtype="float32", params=(), env=None, monkeypatch=None):
    ins = tuple(dataclasses.replace(o[2], dtype=dtype) for o in ops)
    o = Layout.row_major(out_shape, dtype)
    node = Node(prim, params, ins, (o,))
    plan = mm.plan_node(node, Dev())
    assert plan is not None, f"no plan for {[(l.shape, l.strides) for l in ins]}"
    machine = Machine([(op[0], op[1]) for op in ops], o.size, plan.temps, dtype)
    machine.run(plan, node)
    return plan, machine.out.reshape(out_shape)


SHAPES = [((5, 7), (7, 3)), ((64, 33), (33, 17)), ((1, 40), (40, 9)), ((9, 40), (40, 1)), ((1, 8), (8, 1)),
          ((2, 3, 6, 5), (2, 3, 5, 4))]


@pytest.mark.parametrize("mode", ["auto", "blas", "kernel"])
@pytest.mark.parametrize("ka", ["row", "col", "pad"])
@pytest.mark.parametrize("kb", ["row", "col", "pad"])
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: "x".join(map(str, s[0] + s[1][-1:])))
def test_matmul_plans_compute_the_product(monkeypatch, mode, ka, kb, shapes):
    monkeypatch.setenv("MLX_AMD_GEMM", mode)
    rng = np.random.default_rng(0)
    A, B = make_operand(rng, shapes[0], ka), make_operand(rng, shapes[1], kb)
    out_shape = shapes[0][:-1] + shapes[1][-1:]
    plan, got = run_plan("Matmul", [A, B], out_shape)
    np.testing.assert_array_equal(got, A[3] @ B[3])
    kinds = {type(s).__name__ + ":" + getattr(s, "family", "") for s in plan.steps}
    if mode == "kernel":
        assert kinds == {"Launch:gemm"}
    if mode == "blas":
        assert "Launch:gemv" not in kinds and "HostCall:" in kinds


@pytest.mark.parametrize("mode", ["auto", "kernel"])
@pytest.mark.parametrize("bdims_a,bdims_b", [((), (0,)), ((), (0, 1)), ((1,), ()), ((0,), (1,))])
def test_broadcast_batches(monkeypatch, mode, bdims_a, bdims_b):
    monkeypatch.setenv("MLX_AMD_GEMM", mode)
    rng = np.random.default_rng(1)
    A = broadcast_operand(rng, (3, 4, 6, 5), bdims_a)
    B = broadcast_operand(rng, (3, 4, 5, 7), bdims_b)
    plan, got = run_plan("Matmul", [A, B], (3, 4, 6, 7))
    np.testing.assert_array_equal(got, A[3] @ B[3])


def test_broadcast_weight_folds_into_m(monkeypatch):
    monkeypatch.setenv("MLX_AMD_GEMM", "auto")
    rng = np.random.default_rng(2)
    A = make_operand(rng, (6, 8, 16), "row")
    B = broadcast_operand(rng, (6, 16, 12), (0,))
    plan, got = run_plan("Matmul", [A, B], (6, 8, 12))
    np.testing.assert_array_equal(got, A[3] @ B[3])
    (call,) = [s for s in plan.steps if isinstance(s, HostCall)]
    assert call.fn.gemm.n == 48 and len(call.fn.jobs) == 1 and not plan.temps


def test_many_broadcast_batches_copy_instead_of_looping(monkeypatch):
    monkeypatch.setenv("MLX_AMD_GEMM", "auto")
    rng = np.random.default_rng(3)
    A = broadcast_operand(rng, (10, 10, 4, 5), (1,))
    B = broadcast_operand(rng, (10, 10, 5, 3), (0,))
    plan, got = run_plan("Matmul", [A, B], (10, 10, 4, 3))
    np.testing.assert_array_equal(got, A[3] @ B[3])
    (call,) = [s for s in plan.steps if isinstance(s, HostCall)]
    assert len(call.fn.jobs) <= mm.MAX_LIB_JOBS


@pytest.mark.parametrize("mode", ["auto", "kernel"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("shape", [((6, 5), (5, 4)), ((1, 8), (8, 6)), ((2, 3, 4), (2, 4, 5))])
def test_addmm_plans(monkeypatch, mode, dtype, shape):
    monkeypatch.setenv("MLX_AMD_GEMM", mode)
    rng = np.random.default_rng(4)
    A, B = make_operand(rng, shape[0], "row"), make_operand(rng, shape[1], "col")
    out_shape = shape[0][:-1] + shape[1][-1:]
    C = broadcast_operand(rng, out_shape, (len(out_shape) - 2,))     # a bias row over M
    plan, got = run_plan("AddMM", [A, B, C], out_shape, dtype=dtype, params=(2.0, 0.5))
    np.testing.assert_array_equal(got, 2.0 * (A[3] @ B[3]) + 0.5 * C[3])


def test_host_call_carries_the_portable_kernel_as_fallback(monkeypatch):
    monkeypatch.setenv("MLX_AMD_GEMM", "blas")
    rng = np.random.default_rng(5)
    A, B = make_operand(rng, (2, 9, 7), "col"), make_operand(rng, (2, 7, 5), "row")
    plan, _ = run_plan("Matmul", [A, B], (2, 9, 5))
    (call,) = [s for s in plan.steps if isinstance(s, HostCall)]
    # run the fallback launches through the model: same product
    machine = Machine([(A[0], A[1]), (B[0], B[1])], 90, (), "float32")
    for lau, (fa, fb, fc, fd) in call.fn.fallback:
        ptrs = [shift(machine.ptr(r), o, 4) for r, o in zip(call.refs + call.refs[-1:], (fa, fb, fc, fd))]
        machine.gemm_kernel(lau, ptrs)
    np.testing.assert_array_equal(machine.out.reshape(2, 9, 5), A[3] @ B[3])


def test_empty_and_k0():
    o = Layout.row_major((4, 0), "float32")
    assert mm.plan_node(Node("Matmul", (), (Layout.row_major((4, 3), "float32"), Layout.row_major((3, 0), "float32")),
                             (o,)), Dev()).steps == ()
    p = mm.plan_node(Node("Matmul", (), (Layout.row_major((4, 0), "float32"), Layout.row_major((0, 5), "float32")),
                          (Layout.row_major((4, 5), "float32"),)), Dev())
    assert p.steps == (Memset(("o", 0, 0), 80, 0),)


@pytest.mark.parametrize("dt", ["int32", "bool", "uint8"])
def test_unsupported_dtypes_fall_back(dt):
    a, b = Layout.row_major((4, 3), dt), Layout.row_major((3, 5), dt)
    assert mm.plan_node(Node("Matmul", (), (a, b), (Layout.row_major((4, 5), dt),)), Dev()) is None


def test_gemv_for_decode_shapes_picks_wave_width(monkeypatch):
    monkeypatch.delenv("MLX_AMD_GEMM", raising=False)
    x = Layout.row_major((1, 4096), "bfloat16")
    w_t = Layout.strided((4096, 14336), (1, 4096), "bfloat16")     # x @ W.T, W (14336, 4096)
    node = Node("Matmul", (), (x, w_t), (Layout.row_major((1, 14336), "bfloat16"),))
    (st,) = mm.plan_node(node, Dev()).steps
    assert isinstance(st, Launch) and st.kernel == "gemv_rows_bfloat16_bfloat16_w32"
    # 7168 row groups of 2 rows are enough waves for 132 compute units (24 each): no split
    assert st.block == (128, 1, 1) and st.grid == (14336 // 8, 1, 1)
    assert gemv_fields(st)[-2] == 1
    # few rows (a k/v projection): four waves split k
    kv = Node("Matmul", (), (x, Layout.strided((4096, 1024), (1, 4096), "bfloat16")),
              (Layout.row_major((1, 1024), "bfloat16"),))
    (st,) = mm.plan_node(kv, Dev()).steps
    assert gemv_fields(st)[-2] == 4 and st.grid == (1024 // 2, 1, 1)
    # enough rows (the lm head): no split
    wide = Node("Matmul", (), (x, Layout.strided((4096, 128256), (1, 4096), "bfloat16")),
                (Layout.row_major((1, 128256), "bfloat16"),))
    (st,) = mm.plan_node(wide, Dev()).steps
    assert gemv_fields(st)[-2] == 1 and st.grid == (128256 // 8, 1, 1)
    monkeypatch.setenv("MLX_AMD_WAVE", "64")
    (st,) = mm.plan_node(node, Dev()).steps
    assert st.kernel.endswith("_w64") and st.block == (256, 1, 1)


@pytest.mark.parametrize("rows", [(64, 16, 16), (256, 40), (8, 8, 100)])
def test_gemv_siblings_plan_model(monkeypatch, rows):
    """Matmul nodes of one row vector x times several matrices (q/k/v of a bf16 decode step)
    as one gemv launch: the siblings' row blocks follow the first matrix's, each reads its
    own matrix and writes its own output; the model of the launch gives every product."""
    monkeypatch.delenv("MLX_AMD_GEMM", raising=False)
    K, dt = 96, "float32"
    rng = np.random.default_rng(len(rows))
    x = rng.standard_normal(K)
    ws = [rng.standard_normal((n, K)) for n in rows]
    xl = Layout.row_major((1, 1, K), dt)
    nodes = [Node("Matmul", (), (xl, Layout.strided((1, K, n), (0, 1, K), dt)), (Layout.row_major((1, 1, n), dt),))
             for n in rows]
    plan = mm.plan_siblings(nodes, Dev())
    assert plan is not None and len(plan.steps) == 1
    st = plan.steps[0]
    assert st.kernel == "gemv_rows_float32_float32_w32" and st.grid[1] == 1
    n0, k, ldw, incx, *_rest, alpha, beta, ks, _ = gemv_fields(st)[3:]
    assert (n0, k, ldw, incx, alpha, beta) == (rows[0], K, K, 1, 1.0, 0.0)
    sib = sibling_rows(st)
    assert sib == tuple(rows[1:]) + (0,) * (mm.GEMV_SIBS - len(rows) + 1)
    block_rows = mm.GEMV_WAVES // ks * mm.GEMV_ROWS
    assert st.grid[0] == sum(-(-n // block_rows) for n in rows)
    # refs: sibling w's, sibling y's, then w, x, y of the first; each node's inputs are (x, w)
    mats = [st.refs[2 * mm.GEMV_SIBS]] + list(st.refs[: mm.GEMV_SIBS])
    ys = [st.refs[-1]] + list(st.refs[mm.GEMV_SIBS: 2 * mm.GEMV_SIBS])
    assert st.refs[2 * mm.GEMV_SIBS + 1].kind == "i" and st.refs[2 * mm.GEMV_SIBS + 1].index == 0
    # the kernel's block -> matrix map: each matrix's row blocks in turn
    got = [np.full(n, np.nan) for n in rows]
    segs = [n0] + [r for r in sib if r]
    for blk in range(st.grid[0]):
        j, b = 0, blk
        while b >= -(-segs[j] // block_rows):
            b -= -(-segs[j] // block_rows)
            j += 1
        m, y = mats[j], ys[j]
        assert m.kind == "i" and m.index % 2 == 1 and y.kind == "o" and m.offset == y.offset == 0
        r = np.arange(b * block_rows, min((b + 1) * block_rows, segs[j]))
        got[y.index][r] = ws[m.index // 2][r] @ x
    for g, w in zip(got, ws):
        np.testing.assert_allclose(g, w @ x)


def test_gemv_siblings_only_where_one_launch_serves(monkeypatch):
    monkeypatch.delenv("MLX_AMD_GEMM", raising=False)
    K, dt = 96, "bfloat16"
    xl = Layout.row_major((1, 1, K), dt)

    def node(n, k=K, x=xl, strides=None, dtype=dt, M=1):
        xx = x if M == 1 else Layout.row_major((1, M, k), dtype)
        return Node("Matmul", (), (xx, Layout.strided((1, k, n), strides or (0, 1, k), dtype)),
                    (Layout.row_major((1, M, n), dtype),))

    assert mm.plan_siblings([node(64), node(16)], Dev()) is not None
    assert mm.plan_siblings([node(64), node(16, k=64, x=Layout.row_major((1, 1, 64), dt))], Dev()) is None
    assert mm.plan_siblings([node(64), node(16, strides=(0, 1, 2 * K))], Dev()) is None   # another ldw
    assert mm.plan_siblings([node(64, M=2), node(16, M=2)], Dev()) is None                 # not a matvec
    assert mm.plan_siblings([node(64), node(16), node(16), node(16)], Dev()) is None       # too many
    monkeypatch.setenv("MLX_AMD_GEMM", "blas")
    assert mm.plan_siblings([node(64), node(16)], Dev()) is None



def _chain(rows, K=96, dt="bfloat16", M=1, has_w=True):
    """[Add, RMSNorm of its sum, Matmuls of the norm's output flattened] as the evaluator
    hands a chain to plan_siblings (inputs made by the group: row-major)."""
    h = Layout.row_major((1, M, K), dt)
    add = Node("Add", (), (h, h), (h,))
    nrm = Node("mlx_amd::RMSNorm", (1e-6, has_w), (h,) + ((Layout.row_major((K,), dt),) if has_w else ()), (h,))
    ms = [Node("Matmul", (), (Layout.row_major((M, K), dt), Layout.strided((K, n), (1, K), dt)),
               (Layout.row_major((M, n), dt),)) for n in rows]
    return [add, nrm] + ms


class SmemDev(Dev):
    max_shared_memory_per_block = 49152


@pytest.mark.parametrize("rows", [(64, 16, 16), (256,), (8, 100)])
@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
@pytest.mark.parametrize("has_w", [True, False])
def test_gemv_rms_chain_plan(monkeypatch, rows, dt, has_w):
    """A residual add, its RMS norm and the projections of the norm's output (flattened by
    MLX's matmul) as one gemv_rmsrows launch: RmsPro's pointers (the Add's inputs, the norm's
    weight, the sum, the norm's output) first, then the projections' gemv launch with its
    references after the pair's, RmsProShape after its tail, the norm's row in dynamic shared
    memory."""
    monkeypatch.delenv("MLX_AMD_GEMM", raising=False)
    nodes = _chain(rows, dt=dt, has_w=has_w)
    plan = mm.plan_siblings(nodes, SmemDev())
    sub = mm.plan_siblings(nodes[2:], SmemDev()) if len(rows) > 1 else mm.plan_node(nodes[2], SmemDev())
    assert plan is not None and len(plan.steps) == 1 and not plan.temps
    (st,), (one,) = plan.steps, sub.steps
    assert st.kernel == f"gemv_rmsrows_{dt}_{dt}_w32" and one.kernel == f"gemv_rows_{dt}_{dt}_w32"
    assert st.kernel in kt.kernel_names("gemv")
    n_before = 3 + has_w
    assert st.refs[:5] == (Ref("i", 0), Ref("i", 1), Ref("i", n_before - 1 if has_w else 0), Ref("o", 0), Ref("o", 1))
    assert st.refs[5:] == tuple(r._replace(index=r.index + (n_before if r.kind == "i" else 2)) for r in one.refs)
    assert st.n_ptrs == 5 + one.n_ptrs and st.tail == one.tail + struct.pack("<fi", 1e-6, int(has_w))
    assert st.grid == one.grid and st.block == one.block and st.shared_mem == 96 * (4 if dt == "float32" else 2)


def test_gemv_rms_chain_only_where_one_launch_serves(monkeypatch):
    """No chain for prompt rows, projections that are not one gemv launch (another k), the
    vendor-library mode, or a row past the shared memory."""
    monkeypatch.delenv("MLX_AMD_GEMM", raising=False)
    dev = SmemDev()
    assert mm.plan_siblings(_chain((64, 16)), dev) is not None
    assert mm.plan_siblings(_chain((64, 16), M=2), dev) is None
    other = _chain((16,), K=64)[2]
    assert mm.plan_siblings(_chain((64,))[:3] + [other], dev) is None
    assert mm.plan_siblings(_chain((64,), K=20000), dev) is not None          # 40 KB of bfloat16
    assert mm.plan_siblings(_chain((64,), K=24000), dev) is None
    monkeypatch.setenv("MLX_AMD_GEMM", "blas")
    assert mm.plan_siblings(_chain((64, 16)), dev) is None
