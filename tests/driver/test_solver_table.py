"""cuSOLVER's rows of the solver table (runtime/solver/table.py) against cusolverDn.h, where
a CUDA toolkit or NVIDIA's pip wheels put one (the H200 test machine has both): every
cuSOLVER symbol the table binds has the header's prototype (argument count and class of
every argument and of the result), and the enum and status values we hard-code are the
header's. The hipSOLVER rows are checked against ROCm 6.4 by tools/check_hip_bindings.py."""

import glob
import importlib.util
import os
import re
import sys

import pytest

from mlx_amd.runtime.solver import table as T

pytestmark = pytest.mark.gpu      # CI has nvcc but no cuSOLVER headers; the GPU machine has both

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _include_dir():
    """The first directory holding cusolverDn.h: $MLX_AMD_CUDA_INCLUDE, $CUDA_HOME, the
    toolkits under /usr/local, then NVIDIA's wheels (nvidia/*/include) on sys.path."""
    cands = [os.environ.get("MLX_AMD_CUDA_INCLUDE", "")]
    cands += [os.path.join(os.environ[v], "include") for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    cands += sorted(glob.glob("/usr/local/cuda*/include"), reverse=True)
    cands += sorted(glob.glob("/usr/local/cuda*/targets/*/include"), reverse=True)
    cands += [d for p in sys.path if p for d in sorted(glob.glob(os.path.join(p, "nvidia", "*", "include")))]
    return next((d for d in cands if d and os.path.exists(os.path.join(d, "cusolverDn.h"))), None)


@pytest.fixture(scope="module")
def cusolver_text():
    inc = _include_dir()
    if inc is None:
        pytest.skip("no cusolverDn.h (CUDA toolkit, or NVIDIA's cusolver wheel): cuSOLVER rows not checked")
    names = ("cusolverDn.h", "cusolver_common.h", "cublas_api.h", "library_types.h", "driver_types.h")
    # the wheels split the CUDA headers over several nvidia/* include directories
    dirs = [inc] + [os.path.join(os.path.dirname(os.path.dirname(inc)), d, "include")
                    for d in ("cublas", "cuda_runtime")]
    paths = []
    for n in names:
        p = next((os.path.join(d, n) for d in dirs if os.path.exists(os.path.join(d, n))), None)
        if p is None and n in ("cusolverDn.h", "cusolver_common.h", "cublas_api.h"):
            pytest.skip(f"{n} not found beside {inc}")
        if p:
            paths.append(p)
    return _checker().read_header(paths), inc


def _checker():
    spec = importlib.util.spec_from_file_location("check_hip_bindings", os.path.join(REPO, "tools", "check_hip_bindings.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _check(rows, text):
    c = _checker()
    # handles and streams are opaque pointers whichever header defines their structs
    over = {"cusolverDnHandle_t": "ptr", "cudaStream_t": "ptr"}
    return c.check_prototypes(rows, "cuda", c.prototypes(text, r"cusolverStatus_t"), c.macro_aliases(text),
                              c.typedefs(text), over)


def test_cusolver_rows_match_the_header(cusolver_text):
    text, inc = cusolver_text
    rows = T.rows_for("cuda")
    problems, checked = _check(rows, text)
    assert checked == sum(len(T.symbols(e, "cuda")) for e in rows) and checked >= 25, (checked, inc)
    assert not problems, "\n".join(problems)


def test_cusolver_enums_and_status_codes_match_the_header(cusolver_text):
    text, inc = cusolver_text
    want = {cname: v for cname, v in T.ENUMS["cuda"].values()}
    want.update({name: code for code, name in T.STATUS["cuda"].items()})
    for name, value in want.items():
        m = re.search(rf"\b{name}\s*=\s*(0x[0-9a-fA-F]+|-?\d+)", text)
        assert m, f"{name} not found in the headers under {inc}"
        assert int(m.group(1), 0) == value, f"{name}: table.py has {value}, the header {m.group(1)}"


def test_the_check_catches_a_wrong_row(cusolver_text):
    text, _ = cusolver_text
    # gesvd's job letters are signed char: an int there is a mismatch the check must name
    bad = [e._replace(argtypes=(T.P, T.I) + e.argtypes[2:]) if e.name == "dgesvd" else e for e in T.rows_for("cuda")]
    problems, _ = _check(bad, text)
    assert len(problems) == 1 and problems[0].startswith("dgesvd (cusolverDnDgesvd)"), problems
