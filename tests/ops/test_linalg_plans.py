"""Linalg family plans without a GPU: the argument struct of hip_kernels/linalg.hip against
the packer, the plans' steps, a numpy model of the row-major / column-major bookkeeping
(what the library computes on MLX's buffers, read back row-major) against MLX's CPU
results, MLX's error texts, and the solver engine's calls into a recording fake library
for both vendors' signatures."""

import ctypes
import os
import re

import mlx.core as mx
import numpy as np
import pytest

from cprobe import probe_output
from mlx_amd.runtime import kernel_table as kt
from mlx_amd.runtime.launch import Launch
from mlx_amd.runtime.ops import linalg as la
from mlx_amd.runtime.plan import HostCall, Layout, Node, Plan
from mlx_amd.runtime.solver import SolverEngine
from mlx_amd.runtime.solver import table as st

R = Layout.row_major
HIP = os.path.join(os.path.dirname(__file__), "..", "..", "hip_kernels", "linalg.hip")


class Dev:
    wave_size, compute_units, arch = 32, 132, "sm_90"


def node(prim, x, params):
    return Node(prim, params, (x,), (R(x.shape, x.dtype),))


# ------------------------------------------------------------------ the struct, byte for byte
def test_args_struct_matches_the_packer(tmp_path):
    src = open(HIP).read()
    struct_src = re.search(r'extern "C" \{\s*// packed.*?\n(struct LinalgArgs \{.*?\};)', src, re.S).group(1)
    probe = ("#include <cstddef>\n#include <cstdint>\n#include <cstdio>\n" + struct_src + "\n"
             "#define F(f) std::printf(#f \" %zu\\n\", offsetof(LinalgArgs, f));\n"
             "int main() { std::printf(\"sizeof %zu\\n\", sizeof(LinalgArgs)); F(a) F(out) F(n) F(batch) F(keep_upper) }\n")
    got = dict((k, int(v)) for k, v in (line.split() for line in probe_output(probe, tmp_path).splitlines()))
    assert got == {"sizeof": 8 * la._PTRS + la._ARGS.size, "a": 0, "out": 8, "n": 24, "batch": 32, "keep_upper": 40}


def test_kernel_table():
    names = kt.kernel_names("linalg")
    assert set(names) == {f"linalg_{f}_{d}_{d}" for f in ("tri", "eye", "diag") for d in ("float32", "float64")} | {
        "linalg_lupiv_int32_uint32"}
    assert "MLXA_LINALG(linalg_diag_float64_float64, diag, double)" in kt.instantiation_source("linalg")


# ------------------------------------------------------------------------------ plans
@pytest.fixture
def solver_present(monkeypatch):
    from mlx_amd.runtime import solver

    monkeypatch.setattr(solver, "available", lambda vendor: True)


def test_no_library_means_mlx_cpu(monkeypatch):
    from mlx_amd.runtime import solver

    monkeypatch.setattr(solver, "available", lambda vendor: False)
    assert la.plan_node(node("Cholesky", R((4, 4), "float32"), (False,)), Dev()) is None


def test_cholesky_plan_steps(solver_present):
    x = Layout.strided((3, 5, 5), (25, 1, 5), "float32")        # transposed matrices
    for upper in (False, True):
        p = la.plan_node(node("Cholesky", x, (upper,)), Dev())
        copy, call, tri = p.steps
        assert isinstance(copy, Launch) and copy.family == "copy"
        assert isinstance(call, HostCall) and call.fn == la.SolverCall("potrf", ("float32", upper, 5, 3))
        assert tri.kernel == "linalg_tri_float32_float32" and tri.tail == la._ARGS.pack(5, 3, int(upper), 5)
        assert p.temps == (12,)
    assert la.plan_node(node("Cholesky", R((0, 4, 4), "float64"), True), Dev()) == Plan(())   # bare bool state
    for bad in (R((4, 4), "float16"), R((3, 4), "float32"), R((4,), "float32"), R((2, 4, 4), "complex64")):
        assert la.plan_node(node("Cholesky", bad, (False,)), Dev()) is None


def test_inverse_plan_steps(solver_present):
    x = R((2, 6, 6), "float64")
    p = la.plan_node(node("Inverse", x, (False, False)), Dev())
    kinds = [s.kernel if isinstance(s, Launch) else getattr(s.fn, "method", type(s.fn).__name__) for s in p.steps]
    assert kinds[1:] == ["linalg_eye_float64_float64", "inverse_t", "InfoCheck"]
    assert p.temps == (2 * 36 * 8, 4 * 6 * 2, 8 * 2)
    assert p.steps[-1].fn == la.InfoCheck("LU factorization", 2, solves=True)
    p = la.plan_node(node("Inverse", x, ((True, True),)), Dev())    # state as a nested tuple
    kinds = [s.kernel if isinstance(s, Launch) else getattr(s.fn, "method", type(s.fn).__name__) for s in p.steps]
    assert kinds[1:] == ["linalg_tri_float64_float64", "linalg_diag_float64_float64", "linalg_eye_float64_float64",
                         "inverse_t", "InfoCheck", "linalg_tri_float64_float64"]
    assert p.steps[2].grid[0] >= 1 and p.temps[-1] == 8
    assert la.plan_node(node("Inverse", x, (True,)), Dev()) is None   # malformed state


def eigh_node(x, uplo, vectors):
    outs = (R(x.shape[:-1], x.dtype),) + ((R(x.shape, x.dtype),) if vectors else ())
    return Node("Eigh", (uplo, vectors), (x,), outs)


def test_eigh_plan_steps(solver_present):
    x = Layout.strided((2, 6, 6), (36, 1, 6), "float32")
    p = la.plan_node(eigh_node(x, "L", True), Dev())
    copy, call, check, back = p.steps
    assert call.fn == la.SolverCall("syevd", ("float32", True, False, 6, 2)) and check.fn.prim == "Eigh"
    assert back.refs == (("t", 0, 0), ("o", 1, 0)) and p.temps == (2 * 36 * 4, 8)
    p = la.plan_node(eigh_node(R((6, 6), "float64"), "U", False), Dev())
    assert len(p.steps) == 3 and p.steps[1].fn.params[2] is True                 # lower_col
    assert la.plan_node(eigh_node(R((4, 4), "complex64"), "L", True), Dev()) is None
    assert la.plan_node(Node("Eigh", ("X", True), (R((4, 4), "float32"),),
                             (R((4,), "float32"), R((4, 4), "float32"))), Dev()) is None


def luf_node(x):
    m, n = x.shape[-2:]
    b = x.shape[:-2]
    return Node("LUF", (), (x,), (R(x.shape, x.dtype), R(b + (min(m, n),), "uint32"), R(b + (m,), "uint32")))


def test_luf_plan_steps(solver_present):
    p = la.plan_node(luf_node(R((2, 3, 5), "float32")), Dev())
    at, call, back, piv = p.steps
    assert call.fn == la.SolverCall("getrf", ("float32", 3, 5, 2)) and p.temps == (2 * 15 * 4, 4 * 3 * 2, 8)
    assert piv.kernel == "linalg_lupiv_int32_uint32" and piv.tail == la._ARGS.pack(3, 2, 0, 3)
    assert piv.refs == (("t", 1, 0), ("o", 1, 0), ("o", 2, 0))
    assert at.refs == (("i", 0, 0), ("t", 0, 0)) and back.refs == (("t", 0, 0), ("o", 0, 0))
    assert la.plan_node(luf_node(R((0, 4, 4), "float64")), Dev()) == Plan(())
    bad = Node("LUF", (), (R((4, 4), "float32"),), (R((4, 4), "float32"), R((4,), "int32"), R((4,), "uint32")))
    assert la.plan_node(bad, Dev()) is None


def qrf_node(x):
    m, n = x.shape[-2:]
    k, b = min(m, n), x.shape[:-2]
    return Node("QRF", (), (x,), (R(b + (m, k), x.dtype), R(b + (k, n), x.dtype)))


def test_qrf_plan_steps(solver_present):
    p = la.plan_node(qrf_node(R((2, 5, 3), "float64")), Dev())
    kinds = [s.kernel if isinstance(s, Launch) else s.fn.method for s in p.steps]
    assert kinds[1] == "geqrf" and kinds[3] == "linalg_tri_float64_float64" and kinds[4] == "orgqr"
    assert p.steps[3].tail == la._ARGS.pack(3, 2, 1, 3) and p.temps == (2 * 15 * 8, 2 * 3 * 8, 8)
    assert p.steps[2].refs == (("t", 0, 0), ("o", 1, 0)) and p.steps[5].refs == (("t", 0, 0), ("o", 0, 0))
    assert la.plan_node(qrf_node(R((3, 4), "float16")), Dev()) is None


def svd_node(x, uv):
    m, n = x.shape[-2:]
    k, b = min(m, n), x.shape[:-2]
    outs = (R(b + (m, m), x.dtype), R(b + (k,), x.dtype), R(b + (n, n), x.dtype)) if uv else (R(b + (k,), x.dtype),)
    return Node("SVD", (uv,), (x,), outs)


def test_svd_plan_steps(solver_present):
    tall = la.plan_node(svd_node(R((2, 5, 3), "float32"), True), Dev())
    call = tall.steps[1]
    assert call.fn == la.SolverCall("gesvd", ("float32", True, 5, 3, 2)) and len(tall.steps) == 5
    assert call.refs == (("t", 0, 0), ("o", 1, 0), ("t", 1, 0), ("t", 2, 0), ("t", 3, 0))
    assert tall.temps == (2 * 15 * 4, 2 * 25 * 4, 2 * 9 * 4, 8) and tall.steps[-1].fn.prim == "SVD"
    wide = la.plan_node(svd_node(R((3, 5), "float64"), True), Dev())
    call = wide.steps[1]                           # A^T's U' is A's V^T, its V'^T is A's U
    assert call.fn == la.SolverCall("gesvd", ("float64", True, 5, 3, 1)) and len(wide.steps) == 3
    assert call.refs == (("t", 0, 0), ("o", 1, 0), ("o", 2, 0), ("o", 0, 0), ("t", 2, 0))
    only = la.plan_node(svd_node(R((4, 4), "float32"), False), Dev())
    assert only.steps[1].fn.params[1] is False and only.steps[1].refs[1] == ("o", 0, 0)


# ------------------------------------------------- numpy model of the buffer bookkeeping
def col_major_view(buf, n):
    """What the library sees of a row-major n x n buffer: its transpose."""
    return buf.reshape(n, n).T


def model_cholesky(a, upper):
    n = a.shape[0]
    buf = a.astype(np.float64).copy().ravel()
    col = col_major_view(buf, n).copy()
    lower_col = upper           # Potrf(lower_col=upper)
    f = np.linalg.cholesky(col) if lower_col else np.linalg.cholesky(col).T   # the library's factor
    keep = np.tril(np.ones((n, n), bool)) if lower_col else np.triu(np.ones((n, n), bool))
    col[keep] = f[keep]         # potrf writes its triangle only
    out = col.T.copy()          # row-major read of the column-major result
    return np.triu(out) if upper else np.tril(out)   # the tri kernel


def model_inverse(a):
    n = a.shape[0]
    col = col_major_view(a.astype(np.float64).ravel(), n)
    x_col = np.linalg.solve(col, np.eye(n))           # getrf + getrs on identity
    return x_col.T.copy()                              # read row-major


@pytest.mark.parametrize("upper", [False, True])
def test_model_cholesky_is_mlx(upper):
    rng = np.random.default_rng(1)
    m = rng.standard_normal((6, 6))
    a = (m @ m.T + 6 * np.eye(6)).astype(np.float32)
    ref = np.array(mx.linalg.cholesky(mx.array(a), upper=upper, stream=mx.cpu))
    np.testing.assert_allclose(model_cholesky(a, upper), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("upper", [None, False, True])
def test_model_inverse_is_mlx(upper):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((5, 5)).astype(np.float32) + 3 * np.eye(5, dtype=np.float32)
    if upper is None:
        ref = np.array(mx.linalg.inv(mx.array(a), stream=mx.cpu))
        got = model_inverse(a)
    else:
        t = np.triu(a) if upper else np.tril(a)       # the tri kernel on the copy
        ref = np.array(mx.linalg.tri_inv(mx.array(a), upper=upper, stream=mx.cpu))
        got = model_inverse(t)
        got = np.triu(got) if upper else np.tril(got)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_model_eigh_is_mlx(uplo):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 5)).astype(np.float32)       # not symmetric: the triangle matters
    n = 5
    col = col_major_view(a.astype(np.float64).ravel(), n)
    lower_col = uplo == "U"                                   # Syevd(lower_col = UPLO == "U")
    sym = np.tril(col) + np.tril(col, -1).T if lower_col else np.triu(col) + np.triu(col, 1).T
    w, v_col = np.linalg.eigh(sym)                            # the library on that triangle
    buf = v_col.T.copy()                                      # column-major result, read row-major
    v = buf.T                                                 # the transposing copy
    rw, rv = (np.array(t) for t in mx.linalg.eigh(mx.array(a), UPLO=uplo, stream=mx.cpu))
    np.testing.assert_allclose(w, rw, rtol=1e-5, atol=1e-5)
    for k in range(n):                                        # columns are eigenvectors, up to sign
        s = np.sign(v[:, k] @ rv[:, k])
        np.testing.assert_allclose(s * v[:, k], rv[:, k], atol=1e-4)


def lapack_getrf(a):
    """Partial-pivoting LU of a column-major m x n matrix (as the library): (LU, 1-based swaps)."""
    a = a.astype(np.float64).copy()
    m, n = a.shape
    ipiv = []
    for j in range(min(m, n)):
        s = j + int(np.argmax(np.abs(a[j:, j])))
        ipiv.append(s + 1)
        a[[j, s]] = a[[s, j]]
        if a[j, j] != 0:
            a[j + 1:, j] /= a[j, j]
            a[j + 1:, j + 1:] -= np.outer(a[j + 1:, j], a[j, j + 1:])
    return a, np.array(ipiv, np.int32)


def lupiv(ipiv, m):
    """The lupiv kernel, thread by thread: pivots, and where row r ends up."""
    piv = (ipiv - 1).astype(np.uint32)
    perm = []
    for r in range(m):
        pos = r
        for j, t in enumerate(ipiv - 1):
            pos = t if pos == j else j if pos == t else pos
        perm.append(pos)
    return piv, np.array(perm, np.uint32)


@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (5, 3), (6, 6)])
def test_model_luf_is_mlx(shape):
    rng = np.random.default_rng(sum(shape))
    a = rng.standard_normal(shape).astype(np.float32)
    m, n = shape
    buf = a.T.copy().ravel()                       # the transposed copy: A^T row-major
    col = buf.reshape(n, m).T                      # what the library sees: A itself
    lu_col, ipiv = lapack_getrf(col)
    out = lu_col                                   # the copy back: row-major A's LU
    piv, perm = lupiv(ipiv, m)
    rlu, rpiv = (np.array(t) for t in mx.linalg.lu_factor(mx.array(a), stream=mx.cpu))
    rperm = np.array(mx.linalg.lu(mx.array(a), stream=mx.cpu)[0])
    np.testing.assert_allclose(out, rlu, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(piv, rpiv)
    np.testing.assert_array_equal(perm, rperm)


def householder_qr(a):
    """LAPACK's geqrf + orgqr in numpy (column-major A, m x n): (R k x n, Q m x k)."""
    a = a.astype(np.float64).copy()
    m, n = a.shape
    k = min(m, n)
    q = np.eye(m)
    for j in range(k):
        x = a[j:, j].copy()
        alpha, xn = x[0], np.linalg.norm(x[1:])
        if xn == 0:
            continue
        beta = -np.copysign(np.hypot(alpha, xn), alpha)
        v = x / (alpha - beta)
        v[0] = 1.0
        tau = (beta - alpha) / beta
        a[j:, j:] -= tau * np.outer(v, v @ a[j:, j:])
        q[:, j:] -= tau * np.outer(q[:, j:] @ v, v)
    return np.triu(a[:k, :]), q[:, :k]


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5)])
def test_model_qrf_is_mlx(shape):
    rng = np.random.default_rng(9 + sum(shape))
    a = rng.standard_normal(shape).astype(np.float32)
    m, n = shape
    col = a.T.copy().ravel().reshape(n, m).T        # what the library sees: A itself
    r_, q_ = householder_qr(col)                     # R from the factor, Q from orgqr
    rq, rr = (np.array(t) for t in mx.linalg.qr(mx.array(a), stream=mx.cpu))
    np.testing.assert_allclose(q_, rq, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r_, rr, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5)])
def test_model_svd_is_mlx(shape):
    rng = np.random.default_rng(11 + sum(shape))
    a = rng.standard_normal(shape).astype(np.float32)
    m, n = shape
    k = min(m, n)
    if m >= n:
        col = a.T.copy().ravel().reshape(n, m).T                   # transposed copy: A column-major
        uc, sv, vtc = np.linalg.svd(col)                            # the library, column-major out
        u, vt = uc, vtc                                             # transposing copies back
    else:
        col = a.ravel().reshape(m, n).T                             # the plain copy: A^T column-major
        uc, sv, vtc = np.linalg.svd(col)                            # A^T = U' S V'^T
        vt = uc.T.copy().ravel().reshape(n, n)                      # U' buffer read row-major
        u = vtc.T.copy().ravel().reshape(m, m)                      # V'^T buffer read row-major
    ru, rs, rvt = (np.array(t).astype(np.float64) for t in mx.linalg.svd(mx.array(a), stream=mx.cpu))
    np.testing.assert_allclose(sv, rs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((u[:, :k] * sv) @ vt[:k], a, atol=1e-4)
    np.testing.assert_allclose(u.T @ u, np.eye(m), atol=1e-5)
    np.testing.assert_allclose(vt @ vt.T, np.eye(n), atol=1e-5)
    for j in range(k):                                              # the same vectors up to sign
        sgn = np.sign(u[:, j] @ ru[:, j])
        np.testing.assert_allclose(sgn * u[:, j], ru[:, j], atol=1e-4)
        np.testing.assert_allclose(sgn * vt[j], rvt[j], atol=1e-4)


# ------------------------------------------------------------------ errors, as MLX words them
class FakeDriver:
    def __init__(self, codes):
        self.codes = codes

    def memcpy_dtoh(self, dst, src, n, stream):
        buf = (ctypes.c_int32 * len(self.codes))(*self.codes)
        ctypes.memmove(dst, buf, n)

    def stream_synchronize(self, stream):
        pass


class Ctx:
    def __init__(self, codes):
        self.driver = FakeDriver(codes)


def test_info_check_raises_mlx_errors():
    a = np.array([[1.0, 2.0], [2.0, 4.0]], np.float32)
    with pytest.raises(RuntimeError) as e:
        mx.eval(mx.linalg.inv(mx.array(a), stream=mx.cpu))
    with pytest.raises(RuntimeError) as got:
        la.InfoCheck("LU factorization", 2, solves=True)((0,), None, Ctx([0, 2, 0, 0]))
    assert str(got.value) == str(e.value)
    t = np.array([[1.0, 2.0], [0.0, 0.0]], np.float32)
    with pytest.raises(RuntimeError) as e:
        mx.eval(mx.linalg.tri_inv(mx.array(t), upper=True, stream=mx.cpu))
    with pytest.raises(RuntimeError) as got:
        la.InfoCheck("triangular inversion", 1)((0,), None, Ctx([2]))
    assert str(got.value) == str(e.value)
    la.InfoCheck("LU factorization", 2, solves=True)((0,), None, Ctx([0, 0, 0, 0]))   # no error
    with pytest.raises(RuntimeError, match=r"^\[Eigh::eval_cpu\] Eigenvalue decomposition failed with error code 3$"):
        la.InfoCheck("Eigenvalue decomposition", 1, prim="Eigh")((0,), None, Ctx([3]))
    with pytest.raises(RuntimeError, match="solve"):
        la.InfoCheck("LU factorization", 1, solves=True)((0,), None, Ctx([0, -3]))


# ------------------------------------------------ the engine against a recording fake library
class FakeLib:
    def __init__(self, vendor):
        self.vendor, self.calls = vendor, []

    def symbol(self, name):
        return name

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if not st.symbols(st.BY_NAME[name], self.vendor):
            raise AttributeError(f"{name} has no {self.vendor} symbol")

        def call(*args):
            self.calls.append((name, args))
            for a in args:                      # size queries: 7 elements of workspace
                if isinstance(a, ctypes._Pointer) or type(a).__name__ == "CArgObject":
                    ctypes.cast(a, ctypes.POINTER(ctypes.c_int))[0] = 7 if "buffer_size" in name else 0
            return 0
        return call


class FakePool:
    class B:
        def __init__(self, n):
            self.data, self.n = 0x10000, n

    def alloc(self, n):
        return self.B(n)

    def free(self, b):
        pass


class EngineDriver:
    def __init__(self, platform):
        self.platform = platform

    def synchronize(self):
        pass


@pytest.mark.parametrize("vendor,platform", [("hip", "amd"), ("cuda", "nvidia")])
def test_engine_calls_per_vendor(vendor, platform):
    lib = FakeLib(vendor)
    eng = SolverEngine(EngineDriver(platform), FakePool(), lib=lib)
    enums = {k: v for k, (_, v) in st.ENUMS[vendor].items()}
    lib.calls.clear()
    eng.potrf("float64", False, 3, 2, 0x1000, 0x9000, 0x5)
    names = [c[0] for c in lib.calls]
    assert names == ["set_stream", "dpotrf_buffer_size", "dpotrf", "dpotrf"]
    assert [c[1][1] for c in lib.calls[2:]] == [enums["fill_upper"]] * 2
    assert [c[1][3] for c in lib.calls[2:]] == [0x1000, 0x1000 + 72]      # matrix b at b * stride
    assert [c[1][-1] for c in lib.calls[2:]] == [0x9000, 0x9004]          # one info each
    lib.calls.clear()
    eng.inverse_t("float32", 4, 2, 0x1000, 0x2000, 0x3000, 0x4000, 0x5)
    names = [c[0] for c in lib.calls]
    if vendor == "hip":
        assert names == ["set_stream", "sgetrf_buffer_size", "sgetrs_buffer_size",
                         "sgetrf_ws", "sgetrs_ws", "sgetrf_ws", "sgetrs_ws"]
    else:
        assert names == ["set_stream", "sgetrf_buffer_size", "sgetrf", "sgetrs", "sgetrf", "sgetrs"]
    facts = [c[1] for c in lib.calls if c[0].startswith("sgetrf") and "buffer" not in c[0]]
    solves = [c[1] for c in lib.calls if c[0].startswith("sgetrs") and "buffer" not in c[0]]
    assert [f[-1] for f in facts] == [0x4000, 0x4004]          # factorization codes first,
    assert [s[-1] for s in solves] == [0x4008, 0x400C]         # then the solves'
    assert [f[-2] for f in facts] == [0x3000, 0x3000 + 16]     # n pivots per matrix
    assert all(s[1] == enums["op_n"] for s in solves)
    lib.calls.clear()
    eng.getrf("float64", 3, 5, 2, 0x1000, 0x3000, 0x4000, 0x5)       # rectangular: lda = m, min(m, n) swaps
    facts = [c[1] for c in lib.calls if c[0].startswith("dgetrf") and "buffer" not in c[0]]
    assert [f[1:3] + (f[4],) for f in facts] == [(3, 5, 3)] * 2
    assert [f[3] for f in facts] == [0x1000, 0x1000 + 120] and [f[-2] for f in facts] == [0x3000, 0x300C]


@pytest.mark.parametrize("vendor,platform", [("hip", "amd"), ("cuda", "nvidia")])
def test_engine_syevd_calls(vendor, platform):
    lib = FakeLib(vendor)
    eng = SolverEngine(EngineDriver(platform), FakePool(), lib=lib)
    enums = {k: v for k, (_, v) in st.ENUMS[vendor].items()}
    lib.calls.clear()
    eng.syevd("float32", True, True, 4, 2, 0x1000, 0x8000, 0x9000, 0x5)
    calls = [c for c in lib.calls if c[0] == "ssyevd"]
    assert [c[0] for c in lib.calls] == ["set_stream", "ssyevd_buffer_size", "ssyevd", "ssyevd"]
    assert all(c[1][1] == enums["eig_vector"] and c[1][2] == enums["fill_lower"] for c in calls)
    assert [c[1][4] for c in calls] == [0x1000, 0x1000 + 64] and [c[1][6] for c in calls] == [0x8000, 0x8010]
    assert [c[1][-1] for c in calls] == [0x9000, 0x9004]


@pytest.mark.parametrize("vendor,platform", [("hip", "amd"), ("cuda", "nvidia")])
def test_engine_qr_calls(vendor, platform):
    lib = FakeLib(vendor)
    eng = SolverEngine(EngineDriver(platform), FakePool(), lib=lib)
    lib.calls.clear()
    eng.geqrf("float32", 5, 3, 2, 0x1000, 0x2000, 0x3000, 0x5)
    eng.orgqr("float32", 5, 3, 2, 0x1000, 0x2000, 0x3000, 0x5)
    g = [c[1] for c in lib.calls if c[0] == "sgeqrf"]
    o = [c[1] for c in lib.calls if c[0] == "sorgqr"]
    assert [c[1:6] for c in g] == [(5, 3, 0x1000, 5, 0x2000), (5, 3, 0x1000 + 60, 5, 0x2000 + 12)]
    assert [c[1:7] for c in o] == [(5, 3, 3, 0x1000, 5, 0x2000), (5, 3, 3, 0x1000 + 60, 5, 0x2000 + 12)]


@pytest.mark.parametrize("vendor,platform", [("hip", "amd"), ("cuda", "nvidia")])
def test_engine_gesvd_calls(vendor, platform):
    lib = FakeLib(vendor)
    eng = SolverEngine(EngineDriver(platform), FakePool(), lib=lib)
    lib.calls.clear()
    eng.gesvd("float32", True, 5, 3, 2, 0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x5)
    names = [c[0] for c in lib.calls]
    assert names[1] == ("sgesvd_buffer_size_ws" if vendor == "hip" else "sgesvd_buffer_size")
    calls = [c[1] for c in lib.calls if c[0] == "sgesvd"]
    assert [c[1:5] for c in calls] == [(65, 65, 5, 3)] * 2                  # 'A', 'A', m, n
    assert [(c[5], c[7], c[8], c[10]) for c in calls] == [(0x1000, 0x2000, 0x3000, 0x4000),
                                                         (0x1000 + 60, 0x2000 + 12, 0x3000 + 100, 0x4000 + 36)]
    assert [(c[6], c[9], c[11]) for c in calls] == [(5, 5, 3)] * 2            # lda, ldu, ldvt
    lib.calls.clear()
    eng.gesvd("float64", False, 4, 4, 1, 0x1000, 0x2000, 0, 0, 0x5000, 0x5)
    c = [c[1] for c in lib.calls if c[0] == "dgesvd"][0]
    assert c[1] == c[2] == ord("N") and c[8] is None and c[10] is None


def test_solver_table_rows():
    for vendor in ("hip", "cuda"):
        rows = st.rows_for(vendor)
        syms = [s for e in rows for s in st.symbols(e, vendor)]
        assert len(syms) == len(set(syms)) and syms
        assert all(s.startswith("hipsolver" if vendor == "hip" else "cusolverDn") for s in syms)
    assert {e.name for e in st.rows_for("hip")} - {e.name for e in st.rows_for("cuda")} == {
        "sgetrf_ws", "dgetrf_ws", "sgetrs_ws", "dgetrs_ws", "sgetrs_buffer_size", "dgetrs_buffer_size",
        "sgesvd_buffer_size_ws", "dgesvd_buffer_size_ws"}
