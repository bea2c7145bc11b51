"""The FFT libraries' binding table (runtime/fft/table.py): rows are consistent, every call
the engine makes is a row, the handle type is each vendor's, a missing library names the
package to install, a failing call names the call, status and hint; and (in Debian's
ROCm 6.4 toolchain chroot) every hipFFT row resolves in libhipfft.so with the prototype
hipfft.h declares, and the enum values we hard-code are the header's."""

import ctypes
import os
import re
import subprocess

import pytest

from mlx_amd.runtime import fft as fftlib
from mlx_amd.runtime.driver.base import DriverUnavailable
from mlx_amd.runtime.fft import table

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLCHAIN = os.path.join(REPO, "tools", "rocm-toolchain.sh")
CHROOT = os.environ.get("ROCM_CHROOT", "/var/cache/rocm-sid-root")


def _is_ctype(t):
    return isinstance(t, type) and issubclass(t, (ctypes._SimpleCData, ctypes._Pointer))


def test_rows_are_consistent():
    names = [e.name for e in table.TABLE]
    assert len(names) == len(set(names)) and len(names) == 11
    for e in table.TABLE:
        assert table.symbols(e, "hip") and table.symbols(e, "cuda"), e.name   # call for call
        (h,) = table.symbols(e, "hip")
        (c,) = table.symbols(e, "cuda")
        assert h.startswith("hipfft") and c.startswith("cufft") and h[6:] == c[5:], (h, c)
        assert _is_ctype(e.restype)
        assert all(_is_ctype(t) or t in (table.H, table.pH) for t in e.argtypes), e.name
    for vendor, (hty, phty) in table.HANDLE_TYPES.items():
        rows = table.rows_for(vendor)
        assert len(rows) == len(table.TABLE)
        for e, raw in zip(rows, table.TABLE):
            assert all(_is_ctype(t) for t in e.argtypes), (vendor, e.name)
            for t, r in zip(e.argtypes, raw.argtypes):
                if r is table.H:
                    assert t is hty
                elif r is table.pH:
                    assert t is phty
    assert table.HANDLE_TYPES["hip"][0] is ctypes.c_void_p and table.HANDLE_TYPES["cuda"][0] is ctypes.c_int


def test_every_call_the_engine_makes_is_a_row():
    src = open(os.path.join(REPO, "mlx_amd", "runtime", "fft", "__init__.py")).read()
    used = set(re.findall(r"lib\.(\w+)\(", src)) - {"library"}
    assert {"create", "set_auto_allocation", "make_plan_many64", "destroy", "set_stream", "set_work_area",
            "exec_c2c", "exec_r2c", "exec_c2r"} <= used
    for name in used:
        assert name in table.BY_NAME, name


def test_constants():
    assert table.TYPES == {"r2c": 0x2A, "c2r": 0x2C, "c2c": 0x29}
    assert table.DIRECTION == {"forward": -1, "inverse": 1}
    for v in ("hip", "cuda"):
        assert table.STATUS[v][0].endswith("_SUCCESS") and table.STATUS[v][16].endswith("_NOT_SUPPORTED")


@pytest.mark.parametrize("vendor,package", [("cuda", "libcufft"), ("hip", "libhipfft0")])
def test_missing_library_names_the_package(vendor, package):
    def opener(path):
        raise OSError(f"{path}: cannot open shared object file")

    with pytest.raises(DriverUnavailable) as ei:
        table.load(vendor, env={}, opener=opener)
    assert package in str(ei.value) and ei.value.tried


def test_failing_call_names_call_status_and_hint():
    class Fake:
        def __getitem__(self, sym):
            raise AttributeError(sym)

    lib = table.Library(Fake(), "hip", "/x/libhipfft.so")
    check = table.make_check(lib)
    with pytest.raises(table.FftError) as ei:
        check(8, "make_plan_many64", 1, "n")
    msg = str(ei.value)
    assert "hipfftMakePlanMany64(1, n)" in msg and "HIPFFT_INVALID_SIZE" in msg and "size" in msg
    with pytest.raises(DriverUnavailable, match="does not export hipfftCreate"):
        lib.create
    check(0, "create")          # success is silent


class _FakeLib:
    """Records calls; plans get handles 1, 2, ... and ask for 4 KiB of work area."""

    vendor = "cuda"
    path = "fake"

    def __init__(self):
        self.calls, self.next = [], 1

    def symbol(self, name):
        return name

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)

        def fn(*args):
            self.calls.append((name,) + args)
            if name == "create":
                args[0]._obj.value = self.next
                self.next += 1
            if name == "make_plan_many64":
                args[-1]._obj.value = 4096
            return 0

        return fn


class _Pool:
    class Block:
        def __init__(self, n):
            self.data, self.n = 0x10000 + n, n

    def __init__(self):
        self.live = []

    def alloc(self, n):
        b = self.Block(n)
        self.live.append(b)
        return b

    def free(self, b):
        self.live.remove(b)


class _Drv:
    platform = "nvidia"

    def synchronize(self):
        pass


def test_engine_caches_plans_and_sets_stream_and_work_area():
    lib, pool = _FakeLib(), _Pool()
    eng = fftlib.FftEngine(_Drv(), pool, lib=lib)
    t = fftlib.Transform("c2c", (64,), 8, inverse=True)
    eng.execute(t, 0x1000, 0x2000, "s")
    eng.execute(t, 0x1000, 0x2000, "s")
    names = [c[0] for c in lib.calls]
    assert names.count("create") == 1 and names.count("make_plan_many64") == 1
    assert names.count("exec_c2c") == 2 and names.count("set_stream") == 2
    mk = next(c for c in lib.calls if c[0] == "make_plan_many64")
    assert mk[2] == 1 and list(mk[3]) == [64] and mk[10] == table.TYPES["c2c"] and mk[11] == 8
    ex = [c for c in lib.calls if c[0] == "exec_c2c"][0]
    assert ex[2:] == (0x1000, 0x2000, table.DIRECTION["inverse"])
    assert ("set_auto_allocation", ex[1], 0) in [(c[0], c[1], c[2]) for c in lib.calls if len(c) == 3]
    assert len(pool.live) == 1 and pool.live[0].n == 4096
    eng.execute(fftlib.Transform("r2c", (4, 6), 3), 0x1000, 0x2000, "s")
    assert [c[0] for c in lib.calls].count("create") == 2
    eng.close()
    assert [c[0] for c in lib.calls].count("destroy") == 2 and pool.live == []


# --- hipFFT in Debian's ROCm 6.4 (the toolchain chroot) -------------------------------------

# Runs with the chroot's python3 (no pytest, no mlx): the header parser and compiled-constant
# helpers of tools/check_hip_bindings.py over the hipFFT rows. The same section belongs in
# that tool (see the fft report); until then this test is the check.
CHECK = r'''
import os, sys, tempfile
sys.path.insert(0, os.path.join(os.getcwd(), "tools"))
import check_hip_bindings as C
C.import_driver_package()
import importlib
T = importlib.import_module("mlx_amd.runtime.fft.table")
inc = "/usr/include"
problems = []
lib = T.load("hip")
rows = T.rows_for("hip")
missing = [s for e in rows for s in T.symbols(e, "hip") if not hasattr(lib._cdll, s)]
problems += ["missing hipfft symbol: " + m for m in missing]
n = sum(len(T.symbols(e, "hip")) for e in rows)
print(f"hipfft symbols: {n - len(missing)}/{n} resolved in {lib.path}")
hip_text = C.read_header([os.path.join(inc, "hip", h) for h in ("library_types.h", "hip_runtime_api.h")])
text = C.read_header([os.path.join(inc, "hipfft", "hipfft.h")]) + hip_text
# hipfft.h declares the handle an int under __HIP_PLATFORM_NVIDIA__ and a pointer on AMD
over = {"hipfftHandle": "ptr", "long long int": "i64"}
bad, checked = C.check_prototypes(rows, "hip", C.prototypes(text, r"hipfftResult"), C.macro_aliases(text),
                                  C.typedefs(text), over)
problems += bad
print(f"hipfft prototypes: {checked - len(bad)}/{checked} match {inc}/hipfft/hipfft.h")
want = {"HIPFFT_" + k.upper(): v for k, v in T.TYPES.items()}
want.update({"HIPFFT_FORWARD": T.DIRECTION["forward"], "HIPFFT_BACKWARD": T.DIRECTION["inverse"]})
want.update({name: code for code, name in T.STATUS["hip"].items()})
want["sizeof(hipfftHandle)"] = 8
with tempfile.TemporaryDirectory() as tmp:
    got = C.compile_and_print({k: k for k in want}, ["hipfft/hipfft.h"],
                              ["-D__HIP_PLATFORM_AMD__", "-I" + inc, "-w"], tmp, lang="c++")
bad = [f"{k}: table has {want[k]}, the header says {got.get(k)}" for k in want if got.get(k) != want[k]]
problems += bad
print(f"hipfft constants: {len(want) - len(bad)}/{len(want)} match")
for p in problems:
    print("FAIL: " + p)
print("OK" if not problems else f"{len(problems)} problem(s)")
sys.exit(1 if problems else 0)
'''


@pytest.mark.rocm
def test_hipfft_rows_match_rocm_64():
    if not os.path.exists(os.path.join(CHROOT, "usr", "include", "hipfft", "hipfft.h")):
        pytest.skip(f"no ROCm 6.4 toolchain chroot with hipFFT at {CHROOT} ({TOOLCHAIN} setup)")
    if os.geteuid() != 0:
        pytest.skip("the ROCm toolchain chroot needs root")
    r = subprocess.run([TOOLCHAIN, "run", REPO, "python3", "-c", CHECK], capture_output=True, text=True,
                       timeout=600, env=dict(os.environ, ROCM_CHROOT=CHROOT))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    lines = out.splitlines()
    assert "OK" in lines, out
    for section in ("hipfft symbols:", "hipfft prototypes:", "hipfft constants:"):
        line = next(l for l in lines if l.startswith(section))
        done, total = (int(x) for x in line.split()[2].split("/"))
        assert done == total and total > 0, line
