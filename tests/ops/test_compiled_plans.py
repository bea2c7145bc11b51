"""Plans and generated sources for Compiled nodes (runtime/ops/compiled.py), no GPU:
the compiler is a stand-in, except where nvcc / g++ check the generated code itself."""

import ctypes
import os
import shutil
import struct
import subprocess

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from mlx_amd.runtime import bridge
from mlx_amd.runtime.ops import compiled as C
from mlx_amd.runtime.ops import dispatch_table
from mlx_amd.runtime.plan import Launch, Layout, Node, Plan

DEV = type("Dev", (), {"wave_size": 32, "compute_units": 132, "arch": "sm_90"})()


def tape_of(fn, *arrays, shapeless=False):
    mx.eval(list(arrays))
    y = mx.compile(fn, shapeless=shapeless)(*arrays)
    g = bridge.Graph(list(y) if isinstance(y, tuple) else [y])
    cs = [n for n in g.nodes if n[0] == "Compiled"]
    n = max(cs, key=lambda c: len(c[2]))     # the largest fused node
    _, params, ins, outs = n
    metas = g.arrays
    return params, [metas[s] for s in ins], [metas[o] for o in outs]


def node_for(params, in_layouts, out_dtypes, shape):
    return Node("Compiled", params, tuple(in_layouts), tuple(Layout.row_major(shape, d) for d in out_dtypes))


def dense_node(fn, *arrays, shapeless=False):
    params, ins, outs = tape_of(fn, *arrays, shapeless=shapeless)
    shape = outs[0][0]
    lays = [Layout.row_major(s, d) for s, d, _ in ins]
    return node_for(params, lays, [d for _, d, _ in outs], shape)


def fake_compile(calls):
    def comp(source, name):
        calls.append((source, name))
        return ("fn", name)
    return comp


def ones(*shape, dtype=mx.float32):
    return mx.random.normal(shape).astype(dtype)


# ---------------------------------------------------------------- sources
def test_silu_mul_source():
    node = dense_node(lambda a, b: nn.silu(a) * b, ones(4, 8), ones(4, 8))
    src, name = C.fused_source(C.parse(node.params), ("float32",) * len(node.ins), ("float32",))
    assert "sigmoid_f(" in src and f'extern "C" __global__ void {name}_c' in src
    assert f"void {name}_g" in src
    assert "#include" not in src.replace("#include <cmath>", "")   # self-contained for NVRTC/hipRTC
    # loads first, then compute, then stores (donation safety), element by element and in
    # the vector body alike
    body = src[src.index("JD void body("):src.index("JD void body_v(")]
    assert body.rindex("((const ") < body.index("sigmoid_f(") < body.index("((float*)a.p[")
    body_v = src[src.index("JD void body_v("):src.index(f"void {name}_c")]
    assert body_v.rindex("((const VN<") < body_v.index("sigmoid_f(") < body_v.index("((VN<float>*)a.p[")
    assert "constexpr int V = 4;" in src     # 16 bytes of float32 a thread


def test_vector_width_follows_the_widest_operand():
    assert C.vector_width(("bfloat16", "bfloat16")) == 8
    assert C.vector_width(("bfloat16", "float32")) == 4
    assert C.vector_width(("bool", "uint8")) == 16
    assert C.vector_width(("int64", "float16")) == 2
    node = dense_node(lambda a, b: nn.silu(a) * b, ones(64, 64, dtype=mx.bfloat16), ones(64, 64, dtype=mx.bfloat16))
    launch, mode = C.fused_launch(node, DEV, "k")
    assert mode == "c" and launch.grid[0] == 2      # 4096 elements, 8 a thread, 256 threads a block


def test_float16_rounds_between_ops():
    node = dense_node(lambda a: nn.gelu_approx(a), ones(4, 8, dtype=mx.float16))
    src, _ = C.fused_source(C.parse(node.params), tuple(l.dtype for l in node.ins), ("float16",))
    assert "tanhf(h2f(" in src and src.count("f2h((float)(") >= 5


def test_integer_and_bool_source():
    fn = lambda a, b: (mx.where(a > 0, a, b).astype(mx.int32) & 3) + (a.astype(mx.int32) >> 1)
    node = dense_node(fn, ones(4, 8), ones(4, 8))
    src, _ = C.fused_source(C.parse(node.params), tuple(l.dtype for l in node.ins), ("int32",))
    assert "f2i_int32(" in src and "? v" in src and " & " in src and " >> " in src
    assert "wadd<int, unsigned int>" in src


def test_source_independent_of_shapes_but_not_dtypes():
    f = lambda a, b: nn.silu(a) * b
    s1 = C.fused_source(C.parse(dense_node(f, ones(4, 8), ones(4, 8)).params), ("float32",) * 2, ("float32",))
    s2 = C.fused_source(C.parse(dense_node(f, ones(64, 3), ones(64, 3)).params), ("float32",) * 2, ("float32",))
    assert s1 == s2
    n16 = dense_node(f, ones(4, 8, dtype=mx.float16), ones(4, 8, dtype=mx.float16))
    s3 = C.fused_source(C.parse(n16.params), ("float16",) * 2, ("float16",))
    assert s3[1] != s1[1]


@pytest.mark.parametrize("fn,dt", [
    (lambda a, b: a.astype(mx.float64) * b.astype(mx.float64), mx.float32),
    (lambda a, b: (a * b).astype(mx.complex64) + 1, mx.float32),
])
def test_generator_refuses_what_it_lacks(fn, dt):
    params, ins, outs = tape_of(fn, ones(3, 3, dtype=dt), ones(3, 3, dtype=dt))
    with pytest.raises(C.Unsupported):
        C.fused_source(C.parse(params), tuple(d for _, d, _ in ins), tuple(d for _, d, _ in outs))


# ---------------------------------------------------------------- plans
def unpack_tail(tail, ni):
    n, ndim, _ = struct.unpack_from("<qii", tail)
    shape = struct.unpack_from("<8i", tail, 16)
    st = [struct.unpack_from("<8q", tail, 48 + 64 * k) for k in range(ni)]
    return n, ndim, shape, st


def test_dense_plan_uses_c_kernel_and_donates():
    node = dense_node(lambda a, b: mx.exp(a * b) + 1, ones(4, 5), ones(4, 5))
    calls = []
    plan = C.plan_node(node, DEV, compile=fake_compile(calls))
    (launch,) = plan.steps
    assert launch.kernel.endswith("_c") and launch.function == ("fn", launch.kernel)
    assert launch.n_ptrs == 4 and launch.refs[-1] == ("o", 0, 0)
    n, ndim, shape, st = unpack_tail(launch.tail, 3)
    assert (n, ndim) == (20, 1) and [s[0] for s in st] == [1, 1, 0]   # the constant is a scalar
    assert set(plan.donate) == {(0, 0), (0, 1)}                      # never the constant
    assert len(launch.tail) == 8 + 8 + 32 + 3 * 64


def test_strided_plan_uses_g_kernel():
    params, ins, outs = tape_of(lambda a, b: nn.silu(a) * b, ones(6, 4), ones(6, 4))
    a = Layout.strided((6, 4), (1, 6), "float32")      # transposed
    b = Layout.strided((6, 4), (0, 1), "float32")      # broadcast row
    node = Node("Compiled", params, (a, b), (Layout.row_major((6, 4), "float32"),))
    calls = []
    plan = C.plan_node(node, DEV, compile=fake_compile(calls))
    (launch,) = plan.steps
    assert launch.kernel.endswith("_g")
    n, ndim, shape, st = unpack_tail(launch.tail, 2)
    assert (n, ndim) == (24, 2) and shape[:2] == (4, 6)
    assert st[0][:2] == (6, 1) and st[1][:2] == (1, 0)
    assert plan.donate == ()


def test_rank_broadcast_inputs():
    params, ins, outs = tape_of(lambda a, b: nn.silu(a) * b, ones(2, 3, 4), ones(2, 3, 4))
    a = Layout.row_major((2, 3, 4), "float32")
    b = Layout.row_major((4,), "float32")              # lower rank: right-aligned
    node = Node("Compiled", params, (a, b), (Layout.row_major((2, 3, 4), "float32"),))
    (launch,) = C.plan_node(node, DEV, compile=fake_compile([])).steps
    n, ndim, shape, st = unpack_tail(launch.tail, 2)
    assert launch.kernel.endswith("_g") and (n, ndim) == (24, 2)
    assert shape[:2] == (4, 6) and st[0][:2] == (1, 4) and st[1][:2] == (1, 0)


def test_empty_output_compiles_nothing():
    node = dense_node(lambda a, b: mx.exp(a * b) + 1, ones(0, 5), ones(0, 5))
    calls = []
    (launch,) = C.plan_node(node, DEV, compile=fake_compile(calls)).steps
    assert launch.empty and calls == []


@pytest.mark.parametrize("shapeless", [True, False])
def test_new_shapes_compile_no_new_source(shapeless):
    f = mx.compile(lambda a, b: nn.silu(a) * b, shapeless=shapeless)
    calls = []
    comp = fake_compile(calls)
    for shape in [(4, 8), (16, 32), (3, 5)]:
        params, ins, outs = tape_of(f, ones(*shape), ones(*shape))
        node = node_for(params, [Layout.row_major(s, d) for s, d, _ in ins], ["float32"], shape)
        C.plan_node(node, DEV, compile=comp)
    assert len(calls) == 3 and len({src for src, _ in calls}) == 1
    # a new rank or dtype is a new source
    params, ins, outs = tape_of(f, ones(2, 3, 4, dtype=mx.float16), ones(2, 3, 4, dtype=mx.float16))
    node = node_for(params, [Layout.row_major(s, d) for s, d, _ in ins], ["float16"], (2, 3, 4))
    C.plan_node(node, DEV, compile=comp)
    assert len({src for src, _ in calls}) == 2


def test_many_inputs_fuse_and_too_many_go_node_by_node(monkeypatch):
    def fn(*x):
        return ((x[0] * x[1] + x[2] * x[3]) + (x[4] * x[5] + x[6] * x[7])) * x[8]
    node = dense_node(fn, *[ones(8) for _ in range(9)])
    assert len(node.ins) == 9
    calls = []
    plan = C.plan_node(node, DEV, compile=fake_compile(calls))
    assert len(calls) == 1 and len(plan.steps) == 1 and plan.steps[0].n_ptrs == 10
    monkeypatch.setattr(C, "MAX_POINTERS", 9)   # one buffer fewer than the tape needs
    calls = []
    plan = C.plan_node(node, DEV, compile=fake_compile(calls))
    assert calls == [] and plan is not None
    assert all(st.function is None and st.family == "binary" for st in plan.steps)
    assert len(plan.steps) == 8 and len(plan.temps) == 7


# ---------------------------------------------------------------- node by node
def test_by_node_plan_with_real_families(monkeypatch):
    node = dense_node(lambda a, b: mx.exp(a * b) + 1, ones(4, 5), ones(4, 5))

    def refuse(*a, **k):
        raise C.Unsupported("forced")
    monkeypatch.setattr(C, "fused_source", refuse)
    before = C.STATS["by_node"]
    plan = C.plan_node(node, DEV, compile=fake_compile([]))
    assert plan is not None and C.STATS["by_node"] == before + 1
    kernels = [s.kernel for s in plan.steps]
    assert len(kernels) == 3 and "multiply" in kernels[0] and "exp" in kernels[1] and "add" in kernels[2]
    assert plan.temps == (80, 80)
    m, e, a = plan.steps
    assert m.refs == (("i", 0, 0), ("i", 1, 0), ("t", 0, 0))
    assert e.refs == (("t", 0, 0), ("t", 1, 0))
    assert a.refs == (("t", 1, 0), ("i", 2, 0), ("o", 0, 0))   # the Broadcast of the constant is a view


class FakeFamily:
    FAMILY = "fake"

    def __init__(self, temps=(), none=False):
        self.temps, self.none, self.nodes = temps, none, []

    def plan_node(self, node, device):
        self.nodes.append(node)
        if self.none:
            return None
        return Plan((Launch("fake", node.prim, (1, 1, 1), (32, 1, 1), 0, len(node.ins) + 1),),
                    temps=self.temps)


def test_by_node_plan_remaps_family_temps_and_broadcast_layouts():
    params, ins, outs = tape_of(lambda a, b: a.astype(mx.float64) * b.astype(mx.float64), ones(3, 4), ones(4))
    fam = FakeFamily(temps=(16,))
    table = {"AsType": fam, "Multiply": fam}
    node = Node("Compiled", params, (Layout.row_major((3, 4), "float32"), Layout.row_major((4,), "float32")),
                (Layout.row_major((3, 4), "float64"),))
    plan = C.by_node_plan(node, DEV, table)
    assert [n.prim for n in fam.nodes][-1] == "Multiply"
    # the lower-rank input reaches its consumer as a zero-stride broadcast of the output's shape
    b_in = [n for n in fam.nodes if n.prim == "AsType"][-1].ins[0]
    assert b_in.shape == (3, 4) and b_in.strides == (0, 1)
    assert plan.steps[-1].refs[-1] == ("o", 0, 0)
    # every family temporary got its own slot after the intermediates
    assert len(plan.temps) == 2 + 3 and plan.temps.count(16) == 3


def test_cpu_fallback_only_when_a_tape_node_has_no_plan(monkeypatch):
    node = dense_node(lambda a, b: a.astype(mx.float64) * b.astype(mx.float64), ones(3, 4), ones(3, 4))
    table = {"AsType": FakeFamily(), "Multiply": FakeFamily(none=True)}
    assert C.by_node_plan(node, DEV, table) is None
    monkeypatch.setattr("mlx_amd.runtime.ops.dispatch_table", lambda: table)
    before = C.STATS["cpu"]
    assert C.plan_node(node, DEV, compile=fake_compile([])) is None
    assert C.STATS["cpu"] == before + 1


def test_dispatch_claims_compiled():
    assert dispatch_table()["Compiled"] is C


# ---------------------------------------------------------------- the generated code itself
HOST_TEST = r"""
extern "C" void h2f_all(float* out) { for (unsigned i = 0; i < 65536; ++i) out[i] = h2f(h16{(unsigned short)i}); }
extern "C" void f2h_n(const float* in, unsigned short* out, int n) { for (int i = 0; i < n; ++i) out[i] = f2h(in[i]).b; }
extern "C" void f2bf_n(const float* in, unsigned short* out, int n) { for (int i = 0; i < n; ++i) out[i] = f2bf(in[i]).b; }
"""


@pytest.fixture(scope="module")
def prelude_lib(tmp_path_factory):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is needed to run the generated conversions on the host")
    d = tmp_path_factory.mktemp("prelude")
    (d / "p.cpp").write_text(C.PRELUDE + HOST_TEST)
    subprocess.run([gxx, "-O1", "-shared", "-fPIC", "-o", str(d / "p.so"), str(d / "p.cpp")], check=True)
    return ctypes.CDLL(str(d / "p.so"))


def test_float16_to_float_exhaustive(prelude_lib):
    out = np.zeros(65536, np.float32)
    prelude_lib.h2f_all(out.ctypes.data_as(ctypes.c_void_p))
    ref = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    nan = np.isnan(ref)
    assert np.array_equal(out[~nan].view(np.uint32), ref[~nan].view(np.uint32))
    # NaNs keep sign and payload, quiet bit set
    bits = np.arange(65536, dtype=np.uint32)[nan]
    want = ((bits & 0x8000) << 16) | 0x7FC00000 | ((bits & 0x3FF) << 13)
    assert np.array_equal(out[nan].view(np.uint32), want.astype(np.uint32))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_float_to_float16_and_bfloat16(prelude_lib):
    rng = np.random.default_rng(0)
    vals = np.concatenate([
        rng.standard_normal(20000).astype(np.float32) * np.float32(10.0) ** rng.integers(-9, 6, 20000),
        np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32),   # exact halves
        (np.arange(65535, dtype=np.uint16).view(np.float16).astype(np.float32)
         + np.arange(1, 65536, dtype=np.uint16).view(np.float16).astype(np.float32)) / 2,   # ties
        np.array([0.0, -0.0, np.inf, -np.inf, 65504, 65519.99, 65520, 1e-8, -6e-8, 3e-8], np.float32),
    ]).astype(np.float32)
    vals = vals[np.isfinite(vals) | np.isinf(vals)]
    out = np.zeros(len(vals), np.uint16)
    prelude_lib.f2h_n(vals.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), len(vals))
    with np.errstate(over="ignore"):
        ref = vals.astype(np.float16).view(np.uint16)
    ok = ~np.isnan(vals)
    assert np.array_equal(out[ok], ref[ok])
    nanin = np.array([np.nan, -np.nan], np.float32)
    o2 = np.zeros(2, np.uint16)
    prelude_lib.f2h_n(nanin.ctypes.data_as(ctypes.c_void_p), o2.ctypes.data_as(ctypes.c_void_p), 2)
    assert sorted(o2.tolist()) == [0x7D00, 0xFD00]
    # bfloat16: round to nearest even on the upper half; NaN -> 0x7FC0
    bvals = np.concatenate([vals, nanin])
    ob = np.zeros(len(bvals), np.uint16)
    prelude_lib.f2bf_n(bvals.ctypes.data_as(ctypes.c_void_p), ob.ctypes.data_as(ctypes.c_void_p), len(bvals))
    u = bvals.view(np.uint32).astype(np.uint64)
    rb = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    rb[np.isnan(bvals)] = 0x7FC0
    assert np.array_equal(ob, rb)


NVCC = os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc")


# The generated kernels run on the host: g++ compiles them with stand-ins for CUDA's thread
# indices, and a runner calls the kernel once per (block, thread) in turn (no kernel here
# synchronises threads, so any order is a valid schedule).
HOST_RUNNER = r"""
#include <cstring>
extern "C" void run(const void* args, unsigned long nbytes, unsigned grid, unsigned block) {
  Args a;
  std::memcpy(&a, args, nbytes < sizeof(Args) ? nbytes : sizeof(Args));
  gridDim.x = grid;
  blockDim.x = block;
  for (unsigned b = 0; b < grid; ++b)
    for (unsigned t = 0; t < block; ++t) {
      blockIdx.x = b;
      threadIdx.x = t;
      KERNEL(a);
    }
}
"""
HOST_SHIM = "#define __global__\nstruct Dim3 { unsigned x, y, z; };\nstatic Dim3 blockIdx, blockDim, gridDim, threadIdx;\n"


def run_on_host(tmp_path, src, kernel, launch, in_bytes, out_nbytes, misalign=False):
    """Outputs (bytes) of ``kernel`` over inputs given as bytes, each buffer at a 64-byte
    aligned address, or (misalign) one element past it."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is needed to run the generated kernels on the host")
    so = tmp_path / f"{kernel}.so"
    if not so.exists():
        (tmp_path / f"{kernel}.cpp").write_text(HOST_SHIM + src + HOST_RUNNER.replace("KERNEL", kernel))
        subprocess.run([gxx, "-O1", "-std=c++17", "-shared", "-fPIC", "-o", str(so), str(tmp_path / f"{kernel}.cpp")],
                       check=True)
    lib = ctypes.CDLL(str(so))
    keep, ptrs = [], []

    def buffer(data: bytes, item: int):
        raw = ctypes.create_string_buffer(len(data) + 128)
        base = (ctypes.addressof(raw) + 63) // 64 * 64 + (item if misalign else 0)
        ctypes.memmove(base, data, len(data))
        keep.append(raw)
        ptrs.append(base)
        return base

    for data, item in in_bytes:
        buffer(data, item)
    outs = [buffer(bytes(n), item) for n, item in out_nbytes]
    args = struct.pack(f"<{len(ptrs)}Q", *ptrs) + launch.tail
    lib.run(args, ctypes.c_ulong(len(args)), ctypes.c_uint(launch.grid[0]), ctypes.c_uint(launch.block[0]))
    return [ctypes.string_at(p, n) for p, (n, _) in zip(outs, out_nbytes)]


@pytest.mark.parametrize("case", ["silu_mul_bf16", "mixed_f16_int", "float32_scalar", "bool_out"])
def test_generated_kernel_runs_on_host_like_mlx(tmp_path, case):
    """The vector body (aligned buffers) and the element-by-element one (each buffer one
    element off) give the same bits, and MLX's values (the host's libm is not MLX's: floats
    within a few units of the last place)."""
    fn, dt = {
        "silu_mul_bf16": (lambda a, b: nn.silu(a) * b * 2.0, mx.bfloat16),
        "mixed_f16_int": (lambda a, b: (mx.where(a > b, nn.gelu_approx(a), nn.silu(b))
                                        + ((a.astype(mx.int32) >> 1) & 3).astype(mx.float16)), mx.float16),
        "float32_scalar": (lambda a, b: mx.exp(a) * 0.5 - b / 3.0, mx.float32),
        "bool_out": (lambda a, b: (a > b) | (a < -1.0), mx.float32),
    }[case]
    a, b = ones(5, 37, dtype=dt) * 3, ones(5, 37, dtype=dt) * 3     # 185 elements: groups and a tail
    mx.eval(a, b)
    y = mx.compile(fn)(a, b)
    g = bridge.Graph([y])
    prim, params, ins, outs = next(n for n in g.nodes if n[0] == "Compiled")
    metas = g.arrays
    host = {slot: ptr for slot, _k, ptr, *_ in g.leaves()}
    in_lays = [Layout.row_major(metas[s][0], metas[s][1]) for s in ins]
    node = node_for(params, in_lays, [metas[o][1] for o in outs], metas[outs[0]][0])
    src, name = C.fused_source(C.parse(params), tuple(l.dtype for l in node.ins), tuple(o.dtype for o in node.outs))
    launch, mode = C.fused_launch(node, DEV, name)
    assert mode == "c"
    in_bytes = [(ctypes.string_at(host[s], l.nbytes), l.itemsize) for s, l in zip(ins, in_lays)]
    g.release()
    out = [(node.out.nbytes, node.out.itemsize)]
    (vec,) = run_on_host(tmp_path, src, launch.kernel, launch, in_bytes, out)
    (elem,) = run_on_host(tmp_path, src, launch.kernel, launch, in_bytes, out, misalign=True)
    assert vec == elem
    ref = np.array(y.astype(mx.float32))
    npdt = {mx.bfloat16: None, mx.float16: np.float16, mx.float32: np.float32, mx.bool_: np.bool_}[y.dtype]
    got = (np.frombuffer(vec, np.uint16).astype(np.uint32) << 16).view(np.float32) if npdt is None else \
        np.frombuffer(vec, npdt).astype(np.float32)
    tol = {mx.bfloat16: 1e-2, mx.float16: 2e-3}.get(y.dtype, 1e-6)
    np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=tol, atol=tol)


def test_generated_source_compiles_with_nvcc(tmp_path):
    if not os.path.exists(NVCC):
        pytest.skip("nvcc not installed")
    fn = lambda a, b, c: (mx.where(a > b, nn.gelu_approx(a), nn.silu(b)) * c
                          + ((a.astype(mx.int32) >> 1) & 3).astype(mx.float16))
    arrs = [ones(4, 8, dtype=mx.float16) for _ in range(3)]
    params, ins, outs = tape_of(fn, *arrs)
    src, name = C.fused_source(C.parse(params), tuple(d for _, d, _ in ins), tuple(d for _, d, _ in outs))
    (tmp_path / "k.cu").write_text(src)
    r = subprocess.run([NVCC, "-x", "cu", "-std=c++17", "-arch=sm_90", "-cubin", "-Werror=all-warnings",
                        "-o", str(tmp_path / "k.cubin"), str(tmp_path / "k.cu")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "k.cubin").stat().st_size > 0



def test_generated_source_compiles_for_amd(tmp_path):
    """The same source as hipRTC sees it (the HIP runtime header pre-included, its
    hardware float16 conversions) for a wave-32 and a wave-64 arch, with the AMD toolchain
    that builds the package's kernels (hipcc here, else Debian's ROCm chroot: CI has it)."""
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, repo)
    import build_kernels

    try:
        tc = build_kernels.find_amd(None)
    except build_kernels.BuildError as e:
        pytest.skip(f"no AMD toolchain: {e}")
    fn = lambda a, b, c: (mx.where(a > b, nn.gelu_approx(a), nn.silu(b)) * c
                          + ((a.astype(mx.int32) >> 1) & 3).astype(mx.float16))
    params, ins, outs = tape_of(fn, *[ones(4, 8, dtype=mx.float16) for _ in range(3)])
    src, name = C.fused_source(C.parse(params), tuple(d for _, d, _ in ins), tuple(d for _, d, _ in outs))
    assert "MLXA_HW_F16" in src and "_Float16" in src
    (tmp_path / "k.hip").write_text(src)
    argv, env = tc.wrap(tmp_path, [tc.compiler, "-x", "hip", "--offload-arch=gfx1100", "--offload-arch=gfx942",
                                   "--cuda-device-only", "-c", "-O3", "-std=c++17", "-include", "hip/hip_runtime.h",
                                   "-Werror", "-o", str(tmp_path / "k.o"), str(tmp_path / "k.hip")])
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "k.o").stat().st_size > 0