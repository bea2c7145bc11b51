#!/usr/bin/env python3
"""Check mlx-amd's HIP bindings against a real ROCm install (CI: Debian's ROCm 6.4).

Runs with the ROCm environment's own python3, e.g.

    tools/rocm-toolchain.sh run "$PWD" python3 tools/check_hip_bindings.py

and exits non-zero on any mismatch. It checks that:
  1. libamdhip64 loads through the driver's own search and exports every HIP
     symbol in mlx_amd/runtime/driver/table.py;
  2. each declared prototype (argument count, and pointer / 32-bit / 64-bit /
     float class of every argument and of the result) matches hip_runtime_api.h;
  3. the enum values, launch-parameter constants and hipDeviceProp_t offsets that
     hip.py hard-codes equal what a C compiler computes from the same headers;
  4. with no GPU, the driver reports zero devices and a failing call raises a
     clean HipError instead of crashing;
  5. the GEMM libraries (mlx_amd/runtime/blas/table.py): libhipblaslt exports every
     hipBLASLt row, each prototype matches hipblaslt.h, and the enum values, struct
     sizes and offsets lt.py hard-codes match what a C++ compiler computes; the same
     for librocblas and rocblas.h when rocBLAS is installed (Debian: librocblas-dev;
     reported, not failed, when it is missing unless --require-rocblas);
  6. the FFT library (mlx_amd/runtime/fft/table.py): libhipfft exports every hipFFT row,
     each prototype matches hipfft.h, and the enum values the table hard-codes match;
  7. the solver library (mlx_amd/runtime/solver/table.py): libhipsolver exports every
     hipSOLVER row, each prototype matches hipsolver.h, and its enum values match;
  8. our helper libraries built for the AMD archs (build_kernels.py LIBRARIES, e.g.
     mlx_amd/kernels/gfx1100/sortlib.so.xz) load against this runtime's libamdhip64 with
     every symbol resolved (RTLD_NOW) and report the ABI runtime/sortlib.py binds
     (--libraries report: a failure to load is printed, not failed, e.g. ROCm 5.7, whose
     libamdhip64.so.5 they were not linked against).

The driver package is imported without running mlx_amd/__init__.py (which needs
mlx): the parent packages are created by hand. The header parser here is plain
regular expressions over declarations, shared with the CUDA check in
tests/driver/test_table.py.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def import_driver_package(repo: str = REPO):
    """mlx_amd.runtime.driver from the source tree, skipping the parents' __init__ files."""
    for name, rel in (("mlx_amd", "mlx_amd"), ("mlx_amd.runtime", "mlx_amd/runtime")):
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__path__ = [os.path.join(repo, rel)]
            sys.modules[name] = mod
    return importlib.import_module("mlx_amd.runtime.driver")


# --- a small C declaration parser ------------------------------------------------------

def read_header(paths) -> str:
    text = ""
    for p in paths:
        with open(p, errors="replace") as f:
            text += f.read() + "\n"
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def macro_aliases(text: str) -> dict:
    """``#define a b`` and ``#define a __CUDA_API_PTDS(b)`` -> {a: b}."""
    out = {}
    for m in re.finditer(r"^\s*#\s*define\s+(\w+)\s+(?:\w+\(\s*(\w+)\s*\)|(\w+))\s*$", text, re.M):
        out[m.group(1)] = m.group(2) or m.group(3)
    return out


def _split_params(s: str) -> list:
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    parts = [p.strip() for p in parts]
    return [] if parts in ([""], ["void"]) else parts


def prototypes(text: str, return_types: str) -> dict:
    """{function name: (return type, [parameter declarations])}; first declaration wins."""
    out = {}
    pat = re.compile(r"(?<![\w*])(" + return_types + r")\s*(?:[A-Z]+API\s+)?(\w+)\s*\(")
    for m in pat.finditer(text):
        name = m.group(2)
        i, depth = m.end(), 1
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        if name not in out:     # C declarations come before C++ convenience overloads
            params = re.sub(r"__dparm\s*\([^)]*\)", "", text[m.end():i - 1])
            params = _split_params(" ".join(params.split()))
            out[name] = (m.group(1), [p.split("=")[0].strip() for p in params])   # C++ defaults
    return out


def typedefs(text: str) -> dict:
    """{typedef name: underlying type text, or 'enum' / 'struct'}."""
    out = {}
    for m in re.finditer(r"typedef\s+(enum|struct|union)[\w\s]*\{[^{}]*\}\s*(\w+)\s*;", text):
        out[m.group(2)] = "enum" if m.group(1) == "enum" else "struct"
    for m in re.finditer(r"typedef\s+([^;{}()]+?)\s*\b(\w+)\s*;", text):
        out.setdefault(m.group(2), " ".join(m.group(1).split()))
    return out


BASE_CLASSES = {
    "int": "i32", "unsigned int": "i32", "unsigned": "i32", "int32_t": "i32", "uint32_t": "i32",
    "size_t": "i64", "unsigned long long": "i64", "long long": "i64", "unsigned long": "i64",
    "long": "i64", "uint64_t": "i64", "int64_t": "i64",
    "unsigned char": "i8", "signed char": "i8", "char": "i8", "float": "f32", "double": "f64", "enum": "i32",
}


def c_class(decl: str, tdefs: dict, overrides: dict = None) -> str:
    """Class of a C parameter declaration ("const float* x") or type: ptr/i8/i32/i64/f32/?."""
    decl = re.sub(r"\b(const|volatile|struct|enum|restrict|__restrict__)\b", " ", decl)
    if "*" in decl or "[" in decl:
        return "ptr"
    words = decl.split()
    # drop the parameter name, if any
    if len(words) > 1 and " ".join(words) not in BASE_CLASSES and words[-1] not in tdefs:
        words = words[:-1]
    t = " ".join(words)
    for _ in range(10):
        if overrides and t in overrides:
            return overrides[t]
        if t in BASE_CLASSES:
            return BASE_CLASSES[t]
        if t not in tdefs:
            return f"?{t}"
        t = tdefs[t]
        if t in ("enum", "struct"):
            return "i32" if t == "enum" else "struct"
        if "*" in t:
            return "ptr"
        t = " ".join(re.sub(r"\b(const|volatile|struct|enum)\b", " ", t).split())
    return f"?{t}"


def ctype_class(t) -> str:
    if t in (ctypes.c_void_p, ctypes.c_char_p) or (
            isinstance(t, type) and issubclass(t, (ctypes._Pointer, ctypes.Array))):
        return "ptr"
    if t is ctypes.c_float:
        return "f32"
    if t is ctypes.c_double:
        return "f64"
    return {1: "i8", 2: "i16", 4: "i32", 8: "i64"}[ctypes.sizeof(t)]


def check_prototypes(table, vendor: str, protos: dict, aliases: dict, tdefs: dict,
                     overrides: dict = None) -> tuple[list, int]:
    """Compare every table row of ``vendor`` with the header; (problems, rows checked)."""
    from mlx_amd.runtime.driver.table import symbols

    problems, checked = [], 0
    for entry in table:
        for sym in symbols(entry, vendor):
            names = [n for n in protos if n == sym or aliases.get(n) == sym]
            if not names:
                problems.append(f"{entry.name}: no prototype for {sym} in the headers")
                continue
            ret, params = protos[names[0]]
            want = [c_class(p, tdefs, overrides) for p in params]
            have = [ctype_class(t) for t in entry.argtypes]
            want_ret, have_ret = c_class(ret, tdefs, overrides), ctype_class(entry.restype)
            checked += 1
            if want != have or want_ret != have_ret:
                problems.append(f"{entry.name} ({sym}): header {want_ret} ({', '.join(want)}) "
                                f"from {ret} {names[0]}({', '.join(params)}); "
                                f"table {have_ret} ({', '.join(have)})")
    return problems, checked


# --- compiled checks of constants and struct offsets -------------------------------------

def compile_and_print(exprs: dict, includes: list, cflags: list, workdir: str, lang: str = "c") -> dict:
    """Compile a C (or C++) program printing each expression as a long long: {key: value}."""
    names = ((os.environ.get("CC"), "clang-21", "clang", "cc", "gcc") if lang == "c"
             else (os.environ.get("CXX"), "clang++-21", "clang++", "c++", "g++"))
    cc = next((c for c in names if c and shutil.which(c)), None)
    if cc is None:
        raise RuntimeError("no C compiler found (set CC)")
    lines = [f"#include <{h}>" for h in ["stdio.h", "stddef.h"] + includes]
    lines.append("int main(void) {")
    for key, expr in exprs.items():
        lines.append(f'  printf("%s %lld\\n", "{key}", (long long)(size_t)({expr}));')
    lines.append("  return 0;\n}")
    src, exe = os.path.join(workdir, "consts.c"), os.path.join(workdir, "consts")
    with open(src, "w") as f:
        f.write("\n".join(lines) + "\n")
    r = subprocess.run([cc, "-x", "c" if lang == "c" else "c++", *cflags, src, "-o", exe],
                       capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{cc} failed:\n{r.stderr[-3000:]}")
    out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in (line.split() for line in out.splitlines())}


def hip_expected_constants(hip, older: bool = False) -> tuple[dict, dict]:
    """(C expression per key, value hip.py assumes per key). ``older``: a ROCm 5.x header set,
    where the versioned properties entry point does not exist and the R0000 layout is the
    plain ``hipDeviceProp_t``."""
    exprs, want = {}, {}
    for field, (enum, value) in hip.ATTRIBUTES.items():
        exprs[enum], want[enum] = enum, value
    for name, value in hip.CONSTANTS.items():
        exprs[name], want[name] = name, value
    struct, fields, size = hip.KERNEL_NODE_PARAMS    # the graph executor's node parameters
    for _, (cfield, off) in fields.items():
        key = f"offsetof({struct},{cfield})"
        exprs[key], want[key] = f"offsetof({struct}, {cfield})", off
    exprs[f"sizeof({struct})"], want[f"sizeof({struct})"] = f"sizeof({struct})", size
    for fn, (struct, arch_at, size) in hip.PROPS_LAYOUTS.items():
        if older:
            if fn.endswith("R0600"):
                continue
            struct = "hipDeviceProp_t"
        exprs[f"offsetof({struct},name)"], want[f"offsetof({struct},name)"] = f"offsetof({struct}, name)", 0
        key = f"offsetof({struct},gcnArchName)"
        exprs[key], want[key] = f"offsetof({struct}, gcnArchName)", arch_at
        exprs[f"sizeof({struct})"], want[f"sizeof({struct})"] = f"sizeof({struct})", size
        if size > hip.PROPS_BUFFER:
            want[f"sizeof({struct}) <= PROPS_BUFFER"] = True
    return exprs, want


def blas_expected_constants(lt) -> tuple[dict, dict]:
    """(C++ expression, value lt.py assumes) for hipBLASLt's enums and structs."""
    k = lt.VENDORS["hip"]
    exprs, want = {}, {}
    names = {
        "dtype": {dt: {"float32": "HIP_R_32F", "float64": "HIP_R_64F", "float16": "HIP_R_16F",
                       "complex64": "HIP_C_32F", "bfloat16": "HIP_R_16BF"}[dt] for dt in k["dtype"]},
        "compute": {"32F": "HIPBLAS_COMPUTE_32F", "64F": "HIPBLAS_COMPUTE_64F"},
        "op": {"N": "HIPBLAS_OP_N", "T": "HIPBLAS_OP_T"},
        "desc": {a: f"HIPBLASLT_MATMUL_DESC_{a}" for a in k["desc"]},
        "layout": {a: f"HIPBLASLT_MATRIX_LAYOUT_{a}" for a in k["layout"]},
        "pref": {a: f"HIPBLASLT_MATMUL_PREF_{a}" for a in k["pref"]},
        "status": {v: n for v, n in ((v, n) for v, n in k["status"].items())},
    }
    for group, m in names.items():
        for key, cname in m.items():
            value = key if group == "status" else k[group][key]
            exprs[cname], want[cname] = cname, value
    res = "hipblasLtMatmulHeuristicResult_t"
    for key, expr, value in (("algo_bytes", "sizeof(hipblasLtMatmulAlgo_t)", k["algo_bytes"]),
                             ("result_bytes", f"sizeof({res})", k["result_bytes"]),
                             ("ws_at", f"offsetof({res}, workspaceSize)", k["ws_at"]),
                             ("state_at", f"offsetof({res}, state)", k["state_at"])):
        exprs[expr.replace(" ", "")], want[expr.replace(" ", "")] = expr, value
    return exprs, want


def rocblas_expected_constants(rb) -> tuple[dict, dict]:
    exprs, want = {}, {}
    tn = {"float16": "f16_r", "float32": "f32_r", "float64": "f64_r", "complex64": "f32_c", "bfloat16": "bf16_r"}
    for dt, v in rb.DTYPE.items():
        exprs[f"rocblas_datatype_{tn[dt]}"], want[f"rocblas_datatype_{tn[dt]}"] = f"rocblas_datatype_{tn[dt]}", v
    for key, v in (("rocblas_operation_none", rb.OP["N"]), ("rocblas_operation_transpose", rb.OP["T"]),
                   ("rocblas_gemm_algo_standard", rb.GEMM_ALGO_STANDARD)):
        exprs[key], want[key] = key, v
    for v, n in rb.STATUS.items():
        exprs[n], want[n] = n, v
    # the integer widths the rows assume (32-bit ints, 64-bit strides: an LP64 build)
    for t, size in (("rocblas_int", 4), ("rocblas_stride", 8)):
        exprs[f"sizeof({t})"], want[f"sizeof({t})"] = f"sizeof({t})", size
    return exprs, want


def check_blas(include: str, no_compile: bool, require_rocblas: bool) -> list:
    """Section 5: the hipBLASLt and rocBLAS rows of runtime/blas/table.py."""
    from mlx_amd.runtime.blas import lt, rocblas as rb, table as bt
    problems = []
    hip_text = read_header([os.path.join(include, "hip", h) for h in ("library_types.h", "hip_runtime_api.h")
                            if os.path.exists(os.path.join(include, "hip", h))])
    for library, header_dir, header, status_t, consts, package in (
            ("lt", "hipblaslt", "hipblaslt.h", r"hipblasStatus_t", blas_expected_constants(lt), "libhipblaslt-dev"),
            ("rocblas", "rocblas", "rocblas.h", r"rocblas_status|const\s+char\s*\*",
             rocblas_expected_constants(rb), "librocblas-dev")):
        rows = bt.rows(library, "hip")
        hdir = os.path.join(include, header_dir)
        try:
            lib = bt.load(library, "hip")
        except Exception as e:
            msg = f"{library}: library not loadable ({str(e).splitlines()[0]}); install {package}"
            if library == "rocblas" and not require_rocblas:
                print(f"NOTE: {msg}: rocBLAS rows not checked")
                continue
            problems.append(msg)
            continue
        missing = [f"{s} ({e.name})" for e in rows for s in bt.symbols(e, "hip") if not hasattr(lib._cdll, s)]
        problems += [f"missing {library} symbol: {m}" for m in missing]
        n = sum(len(bt.symbols(e, "hip")) for e in rows)
        print(f"{library} symbols: {n - len(missing)}/{n} resolved in {lib.path}")
        if not os.path.exists(os.path.join(hdir, header)):
            msg = f"{library}: no {hdir}/{header}; install {package}"
            if library == "rocblas" and not require_rocblas:
                print(f"NOTE: {msg}")
                continue
            problems.append(msg)
            continue
        extra = [os.path.join(include, "hipblas-common", "hipblas-common.h")]
        # rocblas.h only includes internal/*.h, where the declarations are
        headers = sorted(os.path.join(d, h) for d, _, hs in os.walk(hdir) for h in hs if h.endswith(".h"))
        text = read_header(headers + [p for p in extra if os.path.exists(p)]) + hip_text
        # rocBLAS's ILP64 typedefs sit in an `#if defined(rocblas_ILP64)` branch that the
        # library is not built with (LP64: rocblas_int is 32-bit; the compiled check below
        # measures it): drop that branch before reading typedefs
        text = re.sub(r"#if\s+defined\(rocblas_ILP64\).*?#else", "", text, flags=re.S)
        tdefs = typedefs(text)
        # hipblasLt handles and descriptors are pointers to opaque structs
        protos = prototypes(text, status_t)
        bad, checked = check_prototypes(rows, "hip", protos, macro_aliases(text), tdefs)
        problems += bad
        print(f"{library} prototypes: {checked - len(bad)}/{checked} match {hdir}/**/*.h")
        if no_compile:
            continue
        exprs, want = consts
        with tempfile.TemporaryDirectory() as tmp:
            try:
                got = compile_and_print(exprs, [f"{header_dir}/{header}"],
                                        ["-D__HIP_PLATFORM_AMD__", f"-I{include}", "-w"], tmp, lang="c++")
            except (RuntimeError, subprocess.CalledProcessError) as e:
                problems.append(f"{library} constant check could not run: {e}")
                continue
        bad = [f"{k}: blas has {want[k]}, the headers say {got.get(k)}" for k in want if got.get(k) != want[k]]
        problems += bad
        print(f"{library} constants/offsets: {len(want) - len(bad)}/{len(want)} match")
    return problems


def check_library(label: str, T, include: str, headers: list, status_t: str, over: dict,
                  want: dict, compile_header: str, package: str, no_compile: bool) -> list:
    """One vendor library's HIP rows (``T``: its table module): every symbol exported, every
    prototype as the headers declare it, and the constants ``want`` ({C expression: value})
    as the compiler computes them from ``compile_header``."""
    problems = []
    try:
        lib = T.load("hip")
    except Exception as e:
        return [f"{label}: library not loadable ({str(e).splitlines()[0]}); install {package}"]
    rows = T.rows_for("hip")
    missing = [f"{s} ({e.name})" for e in rows for s in T.symbols(e, "hip") if not hasattr(lib._cdll, s)]
    problems += [f"missing {label} symbol: {m}" for m in missing]
    n = sum(len(T.symbols(e, "hip")) for e in rows)
    print(f"{label} symbols: {n - len(missing)}/{n} resolved in {lib.path}")
    if not headers or not os.path.exists(headers[0]):
        return problems + [f"{label}: no {headers[0] if headers else 'header'}; install {package}"]
    text = read_header(headers + [os.path.join(include, "hip", h) for h in ("library_types.h", "hip_runtime_api.h")
                                  if os.path.exists(os.path.join(include, "hip", h))])
    bad, checked = check_prototypes(rows, "hip", prototypes(text, status_t), macro_aliases(text), typedefs(text), over)
    problems += bad
    print(f"{label} prototypes: {checked - len(bad)}/{checked} match {os.path.dirname(headers[0])}")
    if no_compile:
        return problems
    with tempfile.TemporaryDirectory() as tmp:
        try:
            got = compile_and_print({k: k for k in want}, [compile_header],
                                    ["-D__HIP_PLATFORM_AMD__", f"-I{include}", "-w"], tmp, lang="c++")
        except (RuntimeError, subprocess.CalledProcessError) as e:
            return problems + [f"{label} constant check could not run: {e}"]
    bad = [f"{k}: the {label} table has {want[k]}, the header says {got.get(k)}" for k in want if got.get(k) != want[k]]
    problems += bad
    print(f"{label} constants: {len(want) - len(bad)}/{len(want)} match")
    return problems


def check_fft(include: str, no_compile: bool) -> list:
    """Section 6: the hipFFT rows of runtime/fft/table.py (handles bound as pointers)."""
    T = importlib.import_module("mlx_amd.runtime.fft.table")
    want = {f"HIPFFT_{k.upper()}": v for k, v in T.TYPES.items()}
    want.update({"HIPFFT_FORWARD": T.DIRECTION["forward"], "HIPFFT_BACKWARD": T.DIRECTION["inverse"],
                 "sizeof(hipfftHandle)": 8})
    want.update({name: code for code, name in T.STATUS["hip"].items()})
    # hipfft.h makes the handle an int under __HIP_PLATFORM_NVIDIA__ and a pointer on AMD
    return check_library("hipfft", T, include, [os.path.join(include, "hipfft", "hipfft.h")], r"hipfftResult",
                         {"hipfftHandle": "ptr", "long long int": "i64"}, want, "hipfft/hipfft.h",
                         "libhipfft-dev", no_compile)


def check_solver(include: str, no_compile: bool) -> list:
    """Section 7: the hipSOLVER rows and enums of runtime/solver/table.py."""
    T = importlib.import_module("mlx_amd.runtime.solver.table")
    hdir = os.path.join(include, "hipsolver")
    headers = [os.path.join(hdir, "hipsolver.h")] + sorted(
        os.path.join(d, h) for d, _, hs in os.walk(hdir) for h in hs if h.endswith(".h") and h != "hipsolver.h")
    want = {cname: v for cname, v in T.ENUMS["hip"].values()}
    want.update({name: code for code, name in T.STATUS["hip"].items()})
    return check_library("hipsolver", T, include, headers, r"hipsolverStatus_t", {"hipsolverHandle_t": "ptr"},
                         want, "hipsolver/hipsolver.h", "libhipsolver-dev", no_compile)


def check_libraries() -> list:
    """Load each AMD target's helper libraries from the built kernels (section 8)."""
    import json
    import lzma
    import tempfile

    kdir = os.path.join(REPO, "mlx_amd", "kernels")
    try:
        man = json.load(open(os.path.join(kdir, "manifest.json")))
    except (OSError, ValueError):
        print("libraries: no built kernels (run build_kernels.py), nothing to load")
        return []
    abi_src = open(os.path.join(REPO, "mlx_amd", "runtime", "sortlib.py")).read()
    abi = int(re.search(r"^ABI = (\d+)", abi_src, re.M).group(1))
    problems, loaded = [], 0
    libs = {t: v for t, v in (man.get("libraries") or {}).items() if t.startswith("gfx")}
    for t, entries in sorted(libs.items()):
        for name, e in sorted(entries.items()):
            image = lzma.decompress(open(os.path.join(kdir, e["file"]), "rb").read())
            with tempfile.NamedTemporaryFile(suffix=".so") as f:
                f.write(image)
                f.flush()
                try:
                    lib = ctypes.CDLL(f.name, mode=os.RTLD_NOW)
                except OSError as err:
                    problems.append(f"{t}/{name} does not load: {err}")
                    continue
            if name == "sortlib":
                lib.mlxa_sortlib_abi.restype = ctypes.c_int
                got = lib.mlxa_sortlib_abi()
                if got != abi:
                    problems.append(f"{t}/{name}: ABI {got}, runtime/sortlib.py binds {abi}")
                    continue
            loaded += 1
    total = sum(len(v) for v in libs.values())
    print(f"libraries: {loaded}/{total} helper libraries load")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--include", default="/usr/include", help="folder holding hip/hip_runtime_api.h")
    ap.add_argument("--no-compile", action="store_true", help="skip the compiled constant/offset check")
    ap.add_argument("--require-rocblas", action="store_true", help="fail when rocBLAS is not installed")
    ap.add_argument("--libraries", choices=("require", "report"), default="require",
                    help="helper libraries that do not load: fail (default) or only report")
    ap.add_argument("--no-blas", action="store_true",
                    help="HIP only (a ROCm without hipBLASLt, e.g. Debian trixie's ROCm 5.7)")
    args = ap.parse_args(argv)

    drv_pkg = import_driver_package()
    from mlx_amd.runtime.driver import hip as hipmod
    from mlx_amd.runtime.driver.table import BY_NAME, HIP_OLDER_FALLBACKS, TABLE, symbols
    assert "mlx.core" not in sys.modules, "the driver package must not import mlx"
    problems: list = []

    # 1. library and symbols
    try:
        drv = hipmod.HipDriver()
    except drv_pkg.DriverUnavailable as e:
        print(f"FAIL: {e}\n  tried:\n    " + "\n    ".join(e.tried))
        return 1
    print(f"library: {drv.library_path}")
    print(f"runtime {drv.runtime_version()}, driver {drv.driver_version()}")
    cdll = drv.lib._cdll
    wanted = [(e.name, s) for e in TABLE for s in symbols(e, "hip")]
    absent = [(n, s) for n, s in wanted if not hasattr(cdll, s)]
    older = [(n, s) for n, s in absent if n in HIP_OLDER_FALLBACKS
             and all(hasattr(cdll, f) for f in symbols(BY_NAME[HIP_OLDER_FALLBACKS[n]], "hip"))]
    for n, s in older:
        print(f"NOTE: {s} ({n}) is not in this older runtime; the driver uses "
              f"{HIP_OLDER_FALLBACKS[n]} there")
    missing = [f"{s} ({n})" for n, s in absent if (n, s) not in older]
    problems += [f"missing symbol: {m}" for m in missing]
    print(f"symbols: {len(wanted) - len(absent)}/{len(wanted)} HIP symbols resolved"
          + (f", {len(older)} absent with their older-runtime fallback" if older else ""))

    # 2. prototypes
    hdir = os.path.join(args.include, "hip")
    text = read_header([os.path.join(hdir, h) for h in sorted(os.listdir(hdir)) if h.endswith(".h")])
    protos = prototypes(text, r"hipError_t|const\s+char\s*\*")
    rows = [e for e in TABLE if e.name not in {n for n, _ in older}]
    bad, checked = check_prototypes(rows, "hip", protos, macro_aliases(text), typedefs(text))
    problems += bad
    print(f"prototypes: {checked - len(bad)}/{checked} match {hdir}/*.h")

    # 3. constants and hipDeviceProp_t offsets, computed by the C compiler
    if not args.no_compile:
        exprs, want = hip_expected_constants(hipmod, older=bool(older))
        with tempfile.TemporaryDirectory() as tmp:
            try:
                heads = ["hip/hip_runtime_api.h"] + (["hip/hip_deprecated.h"] if os.path.exists(
                    os.path.join(hdir, "hip_deprecated.h")) else [])    # ROCm 6 split it out
                got = compile_and_print(exprs, heads,
                                        ["-D__HIP_PLATFORM_AMD__", f"-I{args.include}"], tmp)
            except (RuntimeError, subprocess.CalledProcessError) as e:
                problems.append(f"constant check could not run: {e}")
                got = None
        if got is not None:
            bad = [f"{k}: hip.py has {want[k]}, the headers say {got.get(k)}"
                   for k in want if got.get(k) != want[k]]
            problems += bad
            print(f"constants/offsets: {len(want) - len(bad)}/{len(want)} match")

    # 4. behaviour without a GPU
    try:
        n = drv.device_count()
        print(f"device_count: {n}")
        name, _ = drv.error_string(hipmod.ERROR_NO_DEVICE)
        if name != "hipErrorNoDevice":
            problems.append(f"error_string({hipmod.ERROR_NO_DEVICE}) names {name!r}, not hipErrorNoDevice")
        if n == 0:
            try:
                drv.malloc(16)
                problems.append("malloc succeeded with no device")
            except drv_pkg.HipError as e:
                print(f"no device, a call fails cleanly: {e}")
        else:
            p = drv.properties(0)
            print(f"device 0: {p.name} {p.arch_full} wave{p.wave_size} {p.compute_units} CUs")
    except drv_pkg.DriverError as e:
        problems.append(f"device query raised {e}")

    # 5. GEMM libraries
    if not args.no_blas:
        problems += check_blas(args.include, args.no_compile, args.require_rocblas)
        problems += check_fft(args.include, args.no_compile)
        problems += check_solver(args.include, args.no_compile)

    # 8. our helper libraries
    lib_problems = check_libraries()
    if args.libraries == "require":
        problems += lib_problems
    for p in lib_problems if args.libraries == "report" else ():
        print(f"NOTE: {p}")

    for p in problems:
        print(f"FAIL: {p}")
    print("OK" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
