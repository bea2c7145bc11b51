"""mlx_amd/runtime/elf.py on objects compiled here: an nvcc cubin always, AMD code objects in the ROCm chroot."""

import os
import re
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

# Kernels whose metadata says something: static LDS, scratch (a dynamically indexed private
# array too big for registers), a declared workgroup bound.
RESOURCE_SOURCE = r"""
#include <hip/hip_runtime.h>
extern "C" {
__global__ void r_lds(float* x) {
  __shared__ float t[1024];
  t[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  x[threadIdx.x] = t[1023 - threadIdx.x];
}
__global__ void r_scratch(float* x, int n) {
  float b[512];
  for (int i = 0; i < 512; ++i) b[i] = x[i * n];
  x[threadIdx.x] = b[(threadIdx.x * 7) % 512] + b[n & 511];
}
__global__ __launch_bounds__(128) void r_bounded(float* x) { x[threadIdx.x] += 1.0f; }
}
"""


@pytest.fixture(scope="module")
def amd_objects(tmp_path_factory):
    _rocm_available()
    d = tmp_path_factory.mktemp("elf_amd")
    (d / "k.hip").write_text(SOURCE)
    (d / "r.hip").write_text(RESOURCE_SOURCE)
    cmds = []
    for arch, co in AMD_CASES:
        cmds.append(f"hipcc -x hip --cuda-device-only --no-gpu-bundle-output --offload-arch={arch} "
                    f"-mcode-object-version={co} -O3 -o {arch}.co k.hip")
        cmds.append(f"llvm-readelf-21 --symbols {arch}.co > {arch}.syms")
        cmds.append(f"hipcc -x hip --cuda-device-only --no-gpu-bundle-output --offload-arch={arch} "
                    f"-mcode-object-version={co} -O3 -o {arch}.r.co r.hip")
        cmds.append(f"llvm-readelf-21 --notes {arch}.r.co > {arch}.r.notes")
    _chroot(d, " && ".join(cmds))
    return {arch: ((d / f"{arch}.co").read_bytes(), (d / f"{arch}.syms").read_text(),
                   (d / f"{arch}.r.co").read_bytes(), (d / f"{arch}.r.notes").read_text())
            for arch, _ in AMD_CASES}


@pytest.mark.rocm
@pytest.mark.parametrize("arch, co", AMD_CASES)
def test_amd_code_object(amd_objects, arch, co):
    data, readelf_out = amd_objects[arch][:2]
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



def _readelf_kernels(notes: str) -> dict:
    """{kernel: {key: scalar text}} from llvm-readelf --notes' YAML of the AMDGPU metadata:
    the kernel-level ``.key: value`` lines (4 spaces in, after each ``  - `` item)."""
    kernels, cur, inside = [], None, False
    for line in notes.splitlines():
        if re.match(r"^[a-z]", line):                  # a top-level key: amdhsa.kernels or another
            inside, cur = line.startswith("amdhsa.kernels:"), None
        if not inside:
            continue
        m = re.match(r"^  (- |  )(\.[a-z_]+):\s+(\S.*)$", line)
        if line.startswith("  - "):
            cur = {}
            kernels.append(cur)
        if m and cur is not None:
            cur[m.group(2)] = m.group(3).strip()
    return {k[".name"]: k for k in kernels}


@pytest.mark.rocm
@pytest.mark.parametrize("arch, co", AMD_CASES)
def test_amd_kernel_metadata_matches_llvm_readelf(amd_objects, arch, co):
    f = elf.read(amd_objects[arch][2])
    doc = elf.amd_metadata(f)
    assert doc["amdhsa.target"].startswith(f"amdgcn-amd-amdhsa--{arch}")
    assert doc["amdhsa.version"][0] == 1
    ours = elf.amd_kernels(f)
    theirs = _readelf_kernels(amd_objects[arch][3])
    assert set(ours) == set(theirs) == {"r_lds", "r_scratch", "r_bounded"} == elf.kernel_names(f)
    fields = {".vgpr_count": "vgprs", ".sgpr_count": "sgprs", ".group_segment_fixed_size": "lds",
              ".private_segment_fixed_size": "scratch", ".vgpr_spill_count": "vgpr_spills",
              ".sgpr_spill_count": "sgpr_spills", ".wavefront_size": "wavefront_size",
              ".max_flat_workgroup_size": "max_workgroup_size", ".kernarg_segment_size": "kernarg_size"}
    for name, k in ours.items():
        for key, attr in fields.items():
            assert str(getattr(k, attr)) == theirs[name][key], (name, key)
        assert k.dynamic_stack == (theirs[name][".uses_dynamic_stack"] == "true")
        assert k.raw[".symbol"] == name + ".kd"
        if ".agpr_count" in theirs[name]:           # only targets with AGPRs record them
            assert str(k.agprs) == theirs[name][".agpr_count"]
    wave = 64 if arch.startswith("gfx9") else 32
    assert {k.wavefront_size for k in ours.values()} == {wave}
    assert ours["r_lds"].lds == 4096 and ours["r_lds"].scratch == 0
    assert ours["r_scratch"].scratch >= 2048            # 512 floats live in scratch
    assert ours["r_bounded"].max_workgroup_size == 128 and ours["r_lds"].max_workgroup_size == 1024


# ----------------------------------------------------------------------------- msgpack

def mp(v) -> bytes:
    """A plain msgpack encoder (smallest forms), to test the decoder against."""
    if v is None:
        return b"\xc0"
    if v is True or v is False:
        return b"\xc3" if v else b"\xc2"
    if isinstance(v, int):
        if 0 <= v < 128:
            return bytes([v])
        if -32 <= v < 0:
            return struct.pack("b", v)
        for code, fmt, lo, hi in ((0xCC, ">B", 0, 255), (0xCD, ">H", 0, 65535), (0xCE, ">I", 0, 2**32 - 1),
                                  (0xCF, ">Q", 0, 2**64 - 1), (0xD0, ">b", -128, 127), (0xD1, ">h", -2**15, 2**15 - 1),
                                  (0xD2, ">i", -2**31, 2**31 - 1), (0xD3, ">q", -2**63, 2**63 - 1)):
            if lo <= v <= hi:
                return bytes([code]) + struct.pack(fmt, v)
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str):
        b = v.encode()
        if len(b) < 32:
            return bytes([0xA0 | len(b)]) + b
        return (b"\xd9" + struct.pack(">B", len(b)) if len(b) < 256 else b"\xda" + struct.pack(">H", len(b))) + b
    if isinstance(v, bytes):
        return b"\xc4" + struct.pack(">B", len(v)) + v
    if isinstance(v, list):
        head = bytes([0x90 | len(v)]) if len(v) < 16 else b"\xdc" + struct.pack(">H", len(v))
        return head + b"".join(mp(x) for x in v)
    if isinstance(v, dict):
        head = bytes([0x80 | len(v)]) if len(v) < 16 else b"\xde" + struct.pack(">H", len(v))
        return head + b"".join(mp(k) + mp(x) for k, x in v.items())
    raise TypeError(v)


@pytest.mark.parametrize("value", [
    0, 1, 127, 128, 255, 256, 65535, 65536, 2**32, 2**64 - 1, -1, -32, -33, -128, -129, -2**31 - 1, -2**63,
    None, True, False, 1.5, -0.0, "", "a", "x" * 31, "y" * 32, "z" * 300, "κ", b"\x00\xff",
    [], [1, [2, [3]]], list(range(20)), {}, {"a": 1}, {str(i): i for i in range(20)},
    {".name": "k", ".args": [{".size": 8, ".offset": 0}], ".uses_dynamic_stack": False},
])
def test_msgpack_round_trip(value):
    assert elf.msgpack_unpack(mp(value)) == value


def test_msgpack_long_forms_and_extensions():
    # the 32-bit length forms, float32, and ext values (LLVM does not write them; still decoded)
    assert elf.msgpack_unpack(b"\xdb" + struct.pack(">I", 2) + b"hi") == "hi"
    assert elf.msgpack_unpack(b"\xdd" + struct.pack(">I", 2) + b"\x01\x02") == [1, 2]
    assert elf.msgpack_unpack(b"\xdf" + struct.pack(">I", 1) + b"\xa1k\x07") == {"k": 7}
    assert elf.msgpack_unpack(b"\xc5" + struct.pack(">H", 3) + b"abc") == b"abc"
    assert elf.msgpack_unpack(b"\xca" + struct.pack(">f", 0.25)) == 0.25
    assert elf.msgpack_unpack(b"\xd4\x05\x09") == (5, b"\x09")
    assert elf.msgpack_unpack(b"\xc7\x02\xff\x01\x02") == (-1, b"\x01\x02")
    assert elf.msgpack_unpack(b"\x81\x01\xa1v") == {1: "v"}             # integer keys are allowed


@pytest.mark.parametrize("bad, msg", [
    (b"", "truncated"),
    (b"\xc1", "0xc1"),
    (b"\xa5abc", "truncated"),
    (b"\xcd\x01", "truncated"),
    (b"\x92\x01", "cannot fit"),
    (b"\xdd\xff\xff\xff\xff", "cannot fit"),                            # a 4-billion element array
    (b"\xdf\x7f\xff\xff\xff\x01", "cannot fit"),
    (b"\x01\x02", "after the document"),
    (b"\x91" * 100 + b"\x01", "nesting deeper"),
    (b"\x81\x90\x01", "map key"),                                          # a list as a key
    (b"\xa2\xff\xfe", "not UTF-8"),
])
def test_msgpack_damage_raises_elf_error(bad, msg):
    with pytest.raises(elf.ElfError, match=msg):
        elf.msgpack_unpack(bad)


def test_msgpack_every_truncation_is_an_elf_error():
    doc = mp({"amdhsa.kernels": [{".name": "k" * 40, ".vgpr_count": 300, ".args": [{".size": 2**40}]}],
              "amdhsa.version": [1, 2]})
    for n in range(len(doc)):
        with pytest.raises(elf.ElfError):
            elf.msgpack_unpack(doc[:n])


# ----------------------------------------------------------------------------- metadata notes (synthetic)

def note_elf(notes, machine=elf.EM_AMDGPU):
    """An ELF64 with one SHT_NOTE section holding (name, type, desc) records."""
    blob = b""
    for name, ntype, desc in notes:
        n = name.encode() + b"\0"
        blob += struct.pack("<III", len(n), len(desc), ntype) + n + bytes(-len(n) % 4) + desc + bytes(-len(desc) % 4)
    shstr = b"\0.note\0.shstrtab\0"
    shoff = 64 + len(blob) + len(shstr)
    shoff += -shoff % 8
    header = b"\x7fELF" + bytes([2, 1, 1, elf.ELFOSABI_AMDGPU_HSA, 3]) + bytes(7)
    header += struct.pack("<HHIQQQIHHHHHH", 3, machine, 1, 0, 0, shoff, elf.AMD_MACH["gfx942"], 64, 0, 0, 64, 3, 2)
    sh = [bytes(64),
          struct.pack("<IIQQQQIIQQ", 1, 7, 2, 0, 64, len(blob), 0, 0, 4, 0),
          struct.pack("<IIQQQQIIQQ", 7, 3, 0, 0, 64 + len(blob), len(shstr), 0, 0, 1, 0)]
    data = header + blob + shstr
    return data + bytes(shoff - len(data)) + b"".join(sh)


KERNEL_MD = {".name": "k_a", ".symbol": "k_a.kd", ".vgpr_count": 40, ".sgpr_count": 20, ".agpr_count": 4,
             ".group_segment_fixed_size": 8192, ".private_segment_fixed_size": 16, ".vgpr_spill_count": 2,
             ".sgpr_spill_count": 1, ".wavefront_size": 64, ".max_flat_workgroup_size": 256,
             ".kernarg_segment_size": 24, ".uses_dynamic_stack": True, ".args": [{".size": 8}]}


def test_amd_kernels_from_a_synthetic_note():
    doc = {"amdhsa.version": [1, 2], "amdhsa.target": "amdgcn-amd-amdhsa--gfx942",
           "amdhsa.kernels": [KERNEL_MD, {".name": "k_b", ".wavefront_size": 64}]}
    f = elf.read(note_elf([("GNU", 1, b"abcd"), ("AMDGPU", elf.NT_AMDGPU_METADATA, mp(doc))]))
    assert [(n.name, n.type) for n in f.notes] == [("GNU", 1), ("AMDGPU", 32)]
    assert elf.amd_metadata(f) == doc
    ks = elf.amd_kernels(f)
    a = ks["k_a"]
    assert (a.vgprs, a.sgprs, a.agprs, a.lds, a.scratch, a.vgpr_spills, a.sgpr_spills) == (40, 20, 4, 8192, 16, 2, 1)
    assert (a.wavefront_size, a.max_workgroup_size, a.kernarg_size, a.dynamic_stack) == (64, 256, 24, True)
    assert a.raw[".args"] == [{".size": 8}]
    b = ks["k_b"]                      # absent counts read as 0, absent limits as None
    assert (b.vgprs, b.agprs, b.scratch, b.max_workgroup_size, b.dynamic_stack) == (0, 0, 0, None, False)


@pytest.mark.parametrize("notes, msg", [
    ([], "no NT_AMDGPU_METADATA note"),
    ([("AMD", elf.NT_AMDGPU_METADATA, b"\x80")], "no NT_AMDGPU_METADATA note"),   # wrong owner
    ([("AMDGPU", elf.NT_AMDGPU_METADATA, b"\x91\x01")], "not a map"),
    ([("AMDGPU", elf.NT_AMDGPU_METADATA, mp({"amdhsa.kernels": 3}))], "no amdhsa.kernels list"),
    ([("AMDGPU", elf.NT_AMDGPU_METADATA, mp({"amdhsa.kernels": [{".vgpr_count": 1}]}))], "has no .name"),
    ([("AMDGPU", elf.NT_AMDGPU_METADATA, mp({"amdhsa.kernels": [{".name": "k", ".vgpr_count": "9"}]}))],
     "k: .vgpr_count is '9', not a count"),
    ([("AMDGPU", elf.NT_AMDGPU_METADATA, mp({"amdhsa.kernels": [{".name": "k", ".sgpr_count": -1}]}))],
     "not a count"),
    ([("AMDGPU", elf.NT_AMDGPU_METADATA, b"\x81\xa1")], "cannot fit"),
])
def test_bad_metadata_raises_elf_error(notes, msg):
    with pytest.raises(elf.ElfError, match=msg):
        elf.amd_kernels(elf.read(note_elf(notes)))


def test_truncated_note_section_raises_elf_error():
    data = bytearray(note_elf([("AMDGPU", elf.NT_AMDGPU_METADATA, mp({"amdhsa.kernels": []}))]))
    struct.pack_into("<I", data, 64 + 4, 10_000)       # descsz far past the section
    with pytest.raises(elf.ElfError, match="runs past its section"):
        elf.read(bytes(data))


def test_metadata_of_a_cubin_is_refused(cuda_objects):
    with pytest.raises(elf.ElfError, match="not an AMD GPU code object"):
        elf.amd_kernels(elf.read(cuda_objects[0]))
