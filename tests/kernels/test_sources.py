"""The kernel table and the kernel sources agree, without a GPU: names are unique and
well formed, every family file exists and includes its generated .inc, the launchers'
primitive tables name real MLX classes, and every family compiles with nvcc for sm_90
exporting exactly the table's symbols (AMD targets: CI via build_kernels.py; one
wave64 arch is checked here when the ROCm chroot exists)."""

import lzma
import os
import re
import shutil
import subprocess
import sys

import pytest

from mlx_amd.runtime import kernel_table as kt
from mlx_amd.runtime.ops import binary, copy, unary

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(REPO, "hip_kernels")
INCLUDE = os.path.join(SRC, "include")
GENERATED = [f for f in kt.families() if kt.instantiation_source(f)]
_DT = "(bool|u?int(8|16|32|64)|float16|bfloat16|float32|float64|complex64)"
NAME = re.compile(rf"^(unary|binary|copy)_(v|g|t|sv|vs|vv)(_[a-z0-9]+)*_{_DT}_{_DT}(_i64)?$")


def test_names_unique_and_well_formed():
    seen = {}
    for fam in kt.families():
        names = kt.kernel_names(fam)
        assert names, fam
        for n in names:
            assert n not in seen, f"{n} in both {seen.get(n)} and {fam}"
            seen[n] = fam
            assert n.startswith(fam + "_")
            if fam in ("unary", "binary", "copy"):   # other families name their own layouts
                assert NAME.match(n), n
                assert kt.has_kernel(fam, n)


def test_generated_source_matches_names():
    for fam in GENERATED:
        text = kt.instantiation_source(fam)
        defined = re.findall(r"^MLXA_\w+\((\w+)[,)]", text, re.M)
        assert defined == kt.kernel_names(fam)


def test_table_dtypes_and_ops():
    from mlx_amd.runtime.plan import DTYPES
    assert set(kt.CTYPES) == set(DTYPES)   # every MLX dtype has a storage type
    for op, (_, dts, out) in kt.UNARY.items():
        assert set(dts) <= set(kt.CTYPES) and (out is None or out in kt.CTYPES), op
    for op, (_, dts, out) in kt.BINARY.items():
        assert set(dts) <= set(kt.CTYPES) and (out is None or out in kt.CTYPES), op
    # copy: every conversion contiguous, the common ones strided and tiled, and one
    # same-dtype copy per element size (the only 64-bit-index strided kernels)
    n, s = len(kt.COPY_DTYPES), len(kt.COPY_STRIDED_DTYPES)
    assert len(kt.kernel_names("copy")) == n * (n - 1) + 2 * s * (s - 1) + 4 * len(kt.COPY_SIZES)
    large = [k for f in ("unary", "binary", "copy") for k in kt.kernel_names(f) if k.endswith("_i64")]
    assert sorted(large) == sorted(f"copy_g_{d}_{d}_i64" for d in kt.COPY_SIZES)


@pytest.mark.parametrize("family", kt.families())
def test_family_file(family):
    path = os.path.join(SRC, f"{family}.hip")
    text = open(path).read()
    assert '#include "mlxa/' in text
    assert not re.search(r"^\s*#\s*if.*(__HIP_PLATFORM|__CUDACC__|__HIP__|__NVCC__)", text, re.M), \
        "vendor #if in a kernel file: use platform.h"
    assert not re.search(r"\b(32|64)\b.*(warp|wave)|(warp|wave).*\b(32|64)\b", text, re.I)
    if family in GENERATED:
        assert text.rstrip().endswith(f'#include "{family}.inc"')
        # every functor the table names is defined in the family's file or the shared header
        shared = open(os.path.join(INCLUDE, "mlxa", "elementwise.h")).read()
        for fn in set(re.findall(r"mlxa::op::(\w+)", kt.instantiation_source(family))):
            assert re.search(rf"(struct|MLXA_\w+\()\s*{fn}\b", text + shared), fn
    else:
        for name in kt.kernel_names(family):
            assert re.search(rf"MLXA_GLOBAL void {name}\(", text), name


def test_primitive_tables_name_mlx_classes():
    import mlx.core as mx

    hdr = open(os.path.join(os.path.dirname(mx.__file__), "include", "mlx", "primitives.h")).read()
    classes = set(re.findall(r"^class (?:MLX_API )?(\w+)\s*:", hdr, re.M))
    for mod, ops in ((unary, kt.UNARY), (binary, kt.BINARY)):
        for prim, op in mod.PRIMITIVES.items():
            assert prim in classes, prim
            assert op in ops or prim in ("BitwiseBinary", "DivMod"), (prim, op)
    assert {binary.op_for("BitwiseBinary", (k,)) for k in range(5)} <= set(kt.BINARY)
    for prim in copy.PRIMITIVES:
        assert prim in classes, prim
    assert {unary.op_for("Log", (b,)) for b in range(3)} <= set(kt.UNARY)
    assert unary.op_for("Sqrt", (True,)) in kt.UNARY


def _nvcc():
    for c in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc", "/usr/local/cuda-13.0/bin/nvcc"):
        if c and os.path.exists(c):
            return c
    return None


@pytest.fixture(scope="module")
def sm90_kernels(tmp_path_factory):
    """Every family built for sm_90 by build_kernels.py itself (its flags make a warning an
    error), into a fresh directory: from $MLX_AMD_KERNEL_CACHE when the same sources were
    compiled before (CI's kernel step fills it), else compiled here."""
    if _nvcc() is None:
        pytest.skip("nvcc not found (CUDA toolkit needed to compile the sm_90 kernels)")
    out = tmp_path_factory.mktemp("sm90")
    r = subprocess.run([sys.executable, os.path.join(REPO, "build_kernels.py"), "--target", "nvidia",
                        "--out-dir", str(out), "-q"], capture_output=True, text=True)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    return out


@pytest.mark.parametrize("family", kt.families())
def test_compiles_with_nvcc(family, sm90_kernels):
    stored = sm90_kernels / "sm_90" / f"{family}.cubin.xz"
    data = lzma.decompress(stored.read_bytes())
    # extern "C" names appear verbatim in the symbol string table, nothing else exported
    exported = set(re.findall(rb"\.text\.(\w+)\x00", data))
    assert {n.decode() for n in exported} == set(kt.kernel_names(family))


ROCM_CHROOT = os.environ.get("ROCM_CHROOT", "/var/cache/rocm-sid-root")
TOOLCHAIN = os.path.join(REPO, "tools", "rocm-toolchain.sh")


@pytest.mark.rocm
@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_smoke_and_platform_compile_for_amd(arch, tmp_path):
    """platform.h on both wave widths (CDNA wave64, RDNA wave32); the full families are
    compiled for every arch by build_kernels.py in CI."""
    if not (os.path.isdir(os.path.join(ROCM_CHROOT, "usr", "bin")) and os.path.exists(TOOLCHAIN)):
        pytest.skip(f"ROCm chroot not found at {ROCM_CHROOT} (tools/rocm-toolchain.sh setup)")
    if os.geteuid() != 0:
        pytest.skip("the ROCm chroot needs root to enter")
    out = os.path.join(REPO, "build", f"test_smoke_{arch}.co")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    r = subprocess.run([TOOLCHAIN, "run", REPO, "hipcc", "-x", "hip", "--cuda-device-only",
                        "--no-gpu-bundle-output", f"--offload-arch={arch}", "-O3", "-std=c++17",
                        "-I", INCLUDE, os.path.join(SRC, "smoke.hip"), "-o", out],
                       capture_output=True, text=True)
    try:
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        warnings = [line for line in (r.stdout + r.stderr).splitlines()
                    if "warning" in line and "unused-command-line-argument" not in line]
        assert not warnings, "\n".join(warnings)
        assert b"smoke_axpy_float32" in open(out, "rb").read()
    finally:
        if os.path.exists(out):
            os.remove(out)


@pytest.mark.rocm
@pytest.mark.parametrize("arch", ["gfx908", "gfx942", "gfx9-4-generic", "gfx1030", "gfx1100",
                                  "gfx11-generic", "gfx1151", "gfx1201"])
def test_platform_macros_per_arch(arch):
    """MLXA_WAVE_SIZE agrees with the compiler's own wave size for the arch, and the named
    capabilities agree with their host twins in kernel_table."""
    if not (os.path.isdir(os.path.join(ROCM_CHROOT, "usr", "bin")) and os.path.exists(TOOLCHAIN)):
        pytest.skip(f"ROCm chroot not found at {ROCM_CHROOT} (tools/rocm-toolchain.sh setup)")
    if os.geteuid() != 0:
        pytest.skip("the ROCm chroot needs root to enter")
    r = subprocess.run([TOOLCHAIN, "run", REPO, "hipcc", "-x", "hip", "--cuda-device-only",
                        f"--offload-arch={arch}", "-std=c++17", "-E", "-dM", "-I", INCLUDE,
                        "-include", "mlxa/mma.h", os.path.join(SRC, "smoke.hip")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    macros = dict(re.findall(r"^#define (\w+) (.*)$", r.stdout, re.M))
    assert int(macros["MLXA_WAVE_SIZE"]) == int(macros["__AMDGCN_WAVEFRONT_SIZE__"])
    assert macros["MLXA_HAS_MFMA"] == str(int(kt.has_mfma(arch)))
    assert macros["MLXA_HAS_WMMA"] == str(int(kt.has_wmma(arch)))
    assert macros["MLXA_PLATFORM_AMD"] == "1" and macros["MLXA_PLATFORM_NVIDIA"] == "0"
    # the matrix-tile backend per dtype (mlxa/mma.h) against kt.matrix_tiles
    codes = {None: 0, "mma_sync": 1, "mfma": 2, "wmma": 3, "wmma_gfx12": 4}
    for dt, macro in (("float16", "MLXA_TILES_F16"), ("bfloat16", "MLXA_TILES_BF16")):
        v = macros[macro]
        if v.startswith("("):      # (MLXA_MFMA_BF16_1K ? 2 : 0)
            v = "2" if macros["MLXA_MFMA_BF16_1K"] == "1" else "0"
        assert int(v) == codes[kt.matrix_tiles(arch, dt)], (arch, dt, macros[macro])


def test_resource_report_covers_every_family():
    # docs/kernel-resources.md is generated from the built objects (build_kernels.py report);
    # a family added or rebuilt without regenerating it leaves the report silent about it
    import json

    with open(os.path.join(REPO, "docs", "kernel-resources.json")) as f:
        rep = json.load(f)
    fams = set(kt.families())
    for target, entry in rep["targets"].items():
        assert set(entry["families"]) == fams, (
            f"docs/kernel-resources.json, {target}: families {sorted(set(entry['families']) ^ fams)} differ "
            f"from the kernel table; run python build_kernels.py report --markdown docs/kernel-resources.md "
            f"--json docs/kernel-resources.json")
