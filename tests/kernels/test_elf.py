"""mlx_amd/runtime/elf.py on objects compiled here: an nvcc cubin always, AMD code objects in the ROCm chroot."""

import os
import shutil
import struct
import subprocess

import pytest

from mlx_amd.runtime import elf

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLCHAIN = os.path.join(REPO, "tools", "rocm-toolchain.sh")
CHROOT = os.environ.get("ROCM_CHROOT", "/var/cache/rocm-sid-root")

# Compiles unchanged as CUDA (nvcc -x cu) and HIP (hipcc -x hip).
SOURCE = r"""
#ifdef __HIP__
#include <hip/hip_runtime.h>
#endif
template <typename T> __device__ void scale(T* x, T a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
extern "C" __device__ __noinline__ float twice(float v) { return 2.0f * v; }
extern "C" {
__global__ void k_scale_f32(float* x, float a, int n) { scale<float>(x, a, n); }
__global__ void k_scale_f64(double* x, double a, int n) { scale<double>(x, a, n); }
__global__ void k_twice(float* x) { x[threadIdx.x] = twice(x[threadIdx.x]); }
}
"""
C_KERNELS = {"k_scale_f32", "k_scale_f64", "k_twice"}


def _nvcc():
    for c in [shutil.which("nvcc"), *sorted(__import__("glob").glob("/usr/local/cuda*/bin/nvcc"))]:
        if c and os.access(c, os.X_OK):
            return c
    pytest.skip("nvcc not found (PATH, /usr/local/cuda*/bin): cannot build a cubin to parse")


@pytest.fixture(scope="module")
def cuda_objects(tmp_path_factory):
    d = tmp_path_factory.mktemp("elf_cuda")
    (d / "k.cu").write_text(SOURCE)
    nvcc = _nvcc()
    for argv in ([nvcc, "-cubin", "-arch=sm_90", "-o", str(d / "k.cubin"), str(d / "k.cu")],
                 [nvcc, "-ptx", "-arch=compute_90", "-o", str(d / "k.ptx"), str(d / "k.cu")]):
        r = subprocess.run(argv, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    return (d / "k.cubin").read_bytes(), (d / "k.ptx").read_text()


def test_cubin_symbols_and_kernels(cuda_objects):
    cubin, ptx = cuda_objects
    f = elf.read(cubin)
    assert f.machine == elf.EM_CUDA and f.vendor == "nvidia"
    kernels = elf.kernel_names(f)
    assert C_KERNELS <= kernels
    assert "twice" not in kernels                      # a device function is not an entry point
    assert kernels == C_KERNELS                        # the device template is not one either
    funcs = {s.name for s in f.symbols if s.type == "FUNC"}
    assert C_KERNELS <= funcs
    assert all(s.table == ".symtab" for s in f.symbols)
    # Two independent views of the same compile agree: ELF entry symbols and PTX .entry lines.
    assert elf.ptx_entries(ptx) == kernels


def test_reads_from_a_path(cuda_objects, tmp_path):
    p = tmp_path / "k.cubin"
    p.write_bytes(cuda_objects[0])
    assert elf.read(p).symbols == elf.read(cuda_objects[0]).symbols
    assert elf.read(str(p)).flags == elf.read(cuda_objects[0]).flags


def test_amd_target_rejects_a_cubin(cuda_objects):
    with pytest.raises(elf.ElfError, match="not an AMD GPU code object"):
        elf.amd_target(elf.read(cuda_objects[0]))


@pytest.mark.parametrize("bad, msg", [
    (b"", "not an ELF file"),
    (b"MZ\x90\x00" + bytes(100), "not an ELF file"),
    (b"__CLANG_OFFLOAD_BUNDLE__" + bytes(64), "--no-gpu-bundle-output"),
    (b"\x7fELF\x02\x01", "truncated ELF header"),
    (b"\x7fELF\x01\x01\x01" + bytes(60), "only ELF64 little-endian"),
    (b"\x7fELF\x02\x02\x01" + bytes(60), "only ELF64 little-endian"),
])
def test_malformed_input_raises_elf_error(bad, msg):
    with pytest.raises(elf.ElfError, match=msg):
        elf.read(bad)


def test_truncated_and_corrupted_objects_raise_not_crash(cuda_objects):
    cubin = cuda_objects[0]
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    with pytest.raises(elf.ElfError, match="outside the file"):
        elf.read(cubin[:shoff + 10])             # section headers cut off
    # Every truncation either parses or raises ElfError: never another exception.
    for n in range(64, len(cubin), max(1, len(cubin) // 97)):
        try:
            elf.read(cubin[:n])
        except elf.ElfError:
            pass
    bad = bytearray(cubin)
    struct.pack_into("<Q", bad, 0x28, len(cubin) * 4)   # e_shoff far past the end
    with pytest.raises(elf.ElfError):
        elf.read(bytes(bad))


def test_ptx_entries_parses_directives():
    text = ".version 8.0\n.target sm_90\n.visible .entry a_1(\n.param .u64 p)\n{}\n" \
           ".func (.param .b32 r) helper(\n)\n.entry b$2 (\n)\n"
    assert elf.ptx_entries(text) == {"a_1", "b$2"}
    assert elf.ptx_entries(text.encode()) == {"a_1", "b$2"}


# ----------------------------------------------------------------------------- AMD (ROCm chroot)

def _rocm_available():
    if not os.path.exists(TOOLCHAIN):
        pytest.skip(f"{TOOLCHAIN} is missing")
    if not os.path.isfile(os.path.join(CHROOT, ".rocm-toolchain-bootstrap")):
        pytest.skip(f"no ROCm toolchain chroot at {CHROOT} (create it: {TOOLCHAIN} setup; or set ROCM_CHROOT)")
    if os.geteuid() != 0:
        pytest.skip("the ROCm toolchain chroot needs root")


def _chroot(d, script):
    r = subprocess.run(["bash", TOOLCHAIN, "run", str(d), "sh", "-c", script],
                       capture_output=True, text=True, env={**os.environ, "ROCM_CHROOT": CHROOT}, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


AMD_CASES = [("gfx90a", 5), ("gfx1100", 5), ("gfx11-generic", 6)]


@pytest.fixture(scope="module")
def amd_objects(tmp_path_factory):
    _rocm_available()
    d = tmp_path_factory.mktemp("elf_amd")
    (d / "k.hip").write_text(SOURCE)
    cmds = []
    for arch, co in AMD_CASES:
        cmds.append(f"hipcc -x hip --cuda-device-only --no-gpu-bundle-output --offload-arch={arch} "
                    f"-mcode-object-version={co} -O3 -o {arch}.co k.hip")
        cmds.append(f"llvm-readelf-21 --symbols {arch}.co > {arch}.syms")
    _chroot(d, " && ".join(cmds))
    return {arch: ((d / f"{arch}.co").read_bytes(), (d / f"{arch}.syms").read_text()) for arch, _ in AMD_CASES}


@pytest.mark.rocm
@pytest.mark.parametrize("arch, co", AMD_CASES)
def test_amd_code_object(amd_objects, arch, co):
    data, readelf_out = amd_objects[arch]
    f = elf.read(data)
    assert f.vendor == "amd"
    t = elf.amd_target(f)
    assert t.arch == arch and t.code_object_version == co
    # CDNA has xnack/sramecc (built as "any"); RDNA has neither.
    assert (t.xnack, t.sramecc) == (("any", "any") if arch.startswith("gfx9") else (None, None))
    assert (t.generic_version > 0) == arch.endswith("-generic")
    kernels = elf.kernel_names(f)
    assert C_KERNELS <= kernels and "twice" not in kernels
    # Same names as LLVM's own reader: every defined global symbol it lists.
    theirs = {line.split()[-1] for line in readelf_out.splitlines()
              if " GLOBAL " in line and " UND " not in line}
    ours = {s.name for s in f.symbols if s.bind == "GLOBAL" and s.defined}
    assert theirs and ours == theirs
