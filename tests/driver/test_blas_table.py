"""The GEMM libraries' binding table (runtime/blas/table.py) without a GPU: rows are
consistent, every call the engines make is a row of their library, a missing library
names the package to install, and a failing call names the call, status and hint."""

import ctypes
import os
import re

import pytest

from mlx_amd.runtime.blas import lt, rocblas, table
from mlx_amd.runtime.driver.base import DriverUnavailable

BLAS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "mlx_amd", "runtime", "blas")


def _is_ctype(t):
    return isinstance(t, type) and issubclass(t, (ctypes._SimpleCData, ctypes._Pointer))


def test_rows_are_consistent():
    names = [e.name for e in table.TABLE]
    assert len(names) == len(set(names))
    for e in table.TABLE:
        assert e.library in ("lt", "rocblas"), e
        assert _is_ctype(e.restype) and all(_is_ctype(t) for t in e.argtypes), e.name
        for s in table.symbols(e, "hip"):
            assert s.startswith("hipblasLt" if e.library == "lt" else "rocblas_"), (e.name, s)
        for s in table.symbols(e, "cuda"):
            assert e.library == "lt" and s.startswith("cublasLt"), (e.name, s)
    assert len(table.rows("lt", "hip")) >= 14 and len(table.rows("lt", "cuda")) >= 14
    assert len(table.rows("rocblas", "hip")) == 5 and table.rows("rocblas", "cuda") == []


@pytest.mark.parametrize("path,library,vendors", [("lt.py", "lt", ("hip", "cuda")), ("rocblas.py", "rocblas", ("hip",))])
def test_every_call_the_engines_make_is_a_row(path, library, vendors):
    src = open(os.path.join(BLAS_DIR, path)).read()
    used = set(re.findall(r"self\.lib\.(\w+)\(", src)) | set(re.findall(r'_set\("(\w+)"', src))
    assert len(used) >= 4
    for name in used:
        e = table.BY_NAME[name]
        assert e.library == library, name
        vs = vendors if name not in ("lt_status_string",) else ("cuda",)
        for v in vs:
            assert table.symbols(e, v), (name, v)


def test_vendor_constants_differ_where_the_headers_do():
    c, h = lt.VENDORS["cuda"], lt.VENDORS["hip"]
    assert c["desc"]["TRANSA"] == 3 and h["desc"]["TRANSA"] == 0
    assert c["op"] == {"N": 0, "T": 1} and h["op"] == {"N": 111, "T": 112}
    assert c["compute"]["32F"] == 68 and h["compute"]["32F"] == 2      # true fp32, never TF32
    assert c["dtype"] == h["dtype"] and c["dtype"]["bfloat16"] == 14
    assert rocblas.DTYPE["bfloat16"] == 168 and rocblas.OP["T"] == 112


@pytest.mark.parametrize("library,vendor,package", [("lt", "cuda", "libcublasLt"), ("lt", "hip", "libhipblaslt1"),
                                                     ("rocblas", "hip", "librocblas4")])
def test_missing_library_names_the_package(monkeypatch, library, vendor, package):
    def opener(path):
        raise OSError(f"{path}: cannot open shared object file")

    with pytest.raises(DriverUnavailable) as ei:
        table.load(library, vendor, env={}, opener=opener)
    assert package in str(ei.value) and ei.value.tried


def test_failing_call_names_call_status_and_hint():
    class Fake:
        def __getitem__(self, sym):
            raise AttributeError(sym)

    lib = table.Library(Fake(), "hip", "lt", "/x/libhipblaslt.so")
    check = table.make_check(lib, lambda s: (lt.VENDORS["hip"]["status"][s], "unsupported"),
                             lambda s: lt._HINTS["hip"].get(s, ""))
    with pytest.raises(table.BlasError) as ei:
        check(7, "lt_matmul", 1, "A")
    msg = str(ei.value)
    assert "hipblasLtMatmul(1, A)" in msg and "HIPBLAS_STATUS_NOT_SUPPORTED" in msg and "rocBLAS" in msg
    with pytest.raises(DriverUnavailable, match="does not export hipblasLtCreate"):
        lib.lt_create
    with pytest.raises(AttributeError):
        lib.rb_create            # a rocBLAS row is not the Lt library's


def test_gemm_key_ignores_alpha_beta():
    from mlx_amd.runtime.blas import Gemm
    g1 = Gemm("float32", 4, 5, 6, False, True, 4, 5, 4, alpha=1.0, beta=0.0)
    g2 = Gemm("float32", 4, 5, 6, False, True, 4, 5, 4, alpha=2.0, beta=1.0)
    assert g1.key() == g2.key() and len(g1.key()) == 13
    assert lt.alignment(0x1000) == 256 and lt.alignment(0x1002) == 2
    assert lt.scalar_bytes("complex64", 2.0) == bytes(ctypes.c_float(2.0)) + bytes(ctypes.c_float(0.0))
