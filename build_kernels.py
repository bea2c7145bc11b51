#!/usr/bin/env python3
"""Compile hip_kernels/*.hip into the kernel files mlx-amd loads at run time.

    python build_kernels.py                      # every target, incremental, -j nproc
    python build_kernels.py --arch gfx1100,gfx942
    python build_kernels.py --target nvidia      # sm_90 cubin + compute_90 PTX only
    python build_kernels.py --list               # targets, families, what is stale
    python build_kernels.py check                # verify the built files against the table
    python build_kernels.py report --markdown docs/kernel-resources.md --json FILE
    python build_kernels.py --clean

Output: ``mlx_amd/kernels/<target>/<family>.{co,cubin,ptx}.xz`` and
``mlx_amd/kernels/manifest.json`` (see ``write_manifest``). Every file is stored
xz-compressed (lzma preset 6: code objects, cubins and PTX shrink 15-30x, and a
4 MB object decompresses in ~25 ms, once per family and process); the manifest
records the sha256 of the stored file and of the decompressed image, and the
loader checks the image against it. Stdlib only; it loads
``mlx_amd/runtime/kernel_table.py`` and ``mlx_amd/runtime/elf.py`` by file path, so
it never imports mlx.

Targets and the code-object rule (README material):

* AMD: one code object per (family, arch) for gfx908 gfx90a gfx942 gfx950 gfx1030
  gfx1100 gfx1101 gfx1102 gfx1150 gfx1151 gfx1200 gfx1201, built device-only with
  ``--no-gpu-bundle-output`` (a plain ELF that ``hipModuleLoadData`` takes and
  that ``elf.py`` can read) and ``-mcode-object-version=5``: v5 is what ROCm 6.0
  emits by default and every ROCm 6.x/7.x runtime loads it; pinning it keeps a
  newer compiler's default from silently dropping older runtimes. No xnack/sramecc
  setting is given, so the objects ("any") load whichever mode the GPU runs in.
* Generic targets (gfx9-4-generic, gfx11-generic, gfx12-generic; ``--generic``
  or naming them in ``--arch``) are off by default: they need code object v6,
  which the ROCm 6.0-era runtimes predate (generic targets arrived with LLVM 19),
  and they give up arch-specific tuning. The loader uses one only when no exact
  arch was built for the GPU; it fails with a message naming the generic target
  when the runtime cannot load it.
* NVIDIA (the test GPU): ``sm_90`` cubin plus ``compute_90`` PTX from the same
  sources with nvcc ``-x cu``; the PTX lets a newer GPU JIT the kernels.

Toolchains: hipcc on PATH, under $ROCM_PATH or /opt/rocm; otherwise Debian's ROCm
in the chroot of ``tools/rocm-toolchain.sh`` (``--rocm-chroot``, $ROCM_CHROOT,
default /var/cache/rocm-sid-root; needs root), entered once per build: all AMD
compiles of a build run there as one batch. nvcc from PATH, $CUDA_HOME or
/usr/local/cuda*/bin.

Check (``check``, and after every build for its own targets): the manifest agrees
with the kernel table, every file decompresses to its recorded image, the image
exports every kernel and is built for the right arch and code-object version, and
no AMD kernel uses scratch (private segment, dynamic stack, VGPR spills), exceeds
the arch's LDS or workgroup limit, or runs at a wave width other than the arch's
(see ``AMD_ARCH_LIMITS``). ``report`` summarises registers, LDS, scratch and the
implied occupancy per family and arch.

Incremental: an output is rebuilt only when its key changes: the family's source,
the headers under hip_kernels/include it includes (transitively), the generated
``<family>.inc``, the compiler version or the flags. Keys live in ``build/kernels/stamps``; ``--cache-dir`` (or
$MLX_AMD_KERNEL_CACHE) adds a content-addressed store outside the clone, so CI
restores unchanged objects into a clean clone without compiling.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import fcntl
import glob
import hashlib
import json
import lzma
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOOLCHAIN_SH = HERE / "tools" / "rocm-toolchain.sh"
DEFAULT_CHROOT = "/var/cache/rocm-sid-root"
CHROOT_STAMP = ".rocm-toolchain-bootstrap"  # written by rocm-toolchain.sh once bootstrapped

AMD_ARCHS = ("gfx908", "gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101",
             "gfx1102", "gfx1150", "gfx1151", "gfx1200", "gfx1201")
GENERIC_ARCHS = ("gfx9-4-generic", "gfx11-generic", "gfx12-generic")
NVIDIA_TARGETS = ("sm_90",)
# The kernel emulator (hip_kernels/include/mlxa/emu.h): the same sources as x86-64 shared
# objects for the CPU, one per wave width; what CI runs the GPU suite on.
EMU_TARGETS = ("emu32", "emu64")
# 2: files stored xz-compressed, entries carry image_sha256/image_size (v1: plain files).
MANIFEST_VERSION = 2
COMPRESSION = "xz"
COMPRESSED_SUFFIX = ".xz"
XZ_PRESET = 6  # 8 MiB dictionary: 9/9e save < 2% more on our objects and cost 2-3x the time
# Bump when the build rules change in a way the flags below do not show.
RULES_VERSION = 1

AMD_FLAGS = ["-x", "hip", "--cuda-device-only", "--no-gpu-bundle-output", "-O3", "-std=c++17"]
# clang's HIP treats constexpr functions as host+device; this makes nvcc agree, so the
# same sources need no __host__ __device__ on every constexpr helper.
# A warning fails the build, in both nvcc steps (tests/kernels/test_sources.py relies on it
# instead of compiling every family a second time).
NVCC_WERROR = ["--Werror", "all-warnings"]
NVCC_FLAGS = ["-x", "cu", "-O3", "-std=c++17", "--expt-relaxed-constexpr", *NVCC_WERROR]
# -O1: the emulator's speed comes from few context switches, not from code quality, and
# -O1 compiles the 23 families in about a minute per width on two cores. No contraction:
# the results should be the source's arithmetic, compared with MLX's CPU.
EMU_FLAGS = ["-x", "c++", "-std=c++17", "-O1", "-fPIC", "-shared", "-fvisibility=hidden",
             "-ffp-contract=off", "-w"]
# Helper libraries (hip_kernels/lib/<name>.hip): host code around a vendor primitives
# library's device-wide algorithms (hipCUB/rocPRIM on AMD, CUB on NVIDIA), one shared
# library per GPU target, loaded with ctypes (runtime/modules.py: Modules.library). None
# for the emulator or the generic AMD targets: their users keep our own kernels.
LIBRARIES = ("sortlib",)
# rocPRIM 6.4 (Debian's) refuses these archs (its atomics header has no gfx950 case)
LIBRARY_SKIP = {"sortlib": ("gfx950",)}
LIB_AMD_FLAGS = ["-x", "hip", "-O3", "-std=c++17", "-fPIC", "-shared"]
LIB_NVCC_FLAGS = ["-x", "cu", "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", *NVCC_WERROR]
ERROR_LINES = 40  # compiler output shown per failure; the full text goes to build/kernels/logs


class BuildError(RuntimeError):
    """A build or check failed; the message says what and how (command, compiler output)."""


# --------------------------------------------------------------------------- targets

def kind_of(target: str) -> str:
    if re.fullmatch(r"gfx[0-9a-f]+(-[0-9]+)*(-generic)?", target):
        return "amd"
    if re.fullmatch(r"sm_[0-9]+[a-z]?", target):
        return "nvidia"
    if target in EMU_TARGETS:
        return "emu"
    raise BuildError(f"unknown target {target!r}: expected an AMD arch like gfx1100 "
                     f"(or gfx11-generic), an NVIDIA one like sm_90, or emu32/emu64 (the kernel emulator)")


def amd_code_object_version(arch: str) -> int:
    return 6 if arch.endswith("-generic") else 5


def outputs_for(family: str, target: str) -> dict:
    """{role: path relative to the kernel dir} of one (family, target): the stored,
    compressed files; ``compiled_name`` gives the compiler's name for each."""
    if kind_of(target) == "amd":
        return {"file": f"{target}/{family}.co{COMPRESSED_SUFFIX}"}
    if kind_of(target) == "emu":
        return {"file": f"{target}/{family}.so{COMPRESSED_SUFFIX}"}
    return {"file": f"{target}/{family}.cubin{COMPRESSED_SUFFIX}",
            "ptx": f"{target}/{family}.ptx{COMPRESSED_SUFFIX}"}


def library_targets(name: str, targets) -> list:
    """The targets among ``targets`` that get helper library ``name``."""
    return [t for t in targets if kind_of(t) in ("amd", "nvidia") and not t.endswith("-generic")
            and t not in LIBRARY_SKIP.get(name, ())]


def library_outputs(name: str, target: str) -> dict:
    return {"file": f"{target}/{name}.so{COMPRESSED_SUFFIX}"}


def library_argv(target: str, name: str, src: Path, include_dirs: list, out_dir: Path) -> list:
    inc = [a for d in include_dirs for a in ("-I", str(d))]
    out = str(out_dir / compiled_name(library_outputs(name, target)["file"]))
    if kind_of(target) == "amd":
        return [LIB_AMD_FLAGS + [f"--offload-arch={target}"] + inc + ["-o", out, str(src)]]
    return [LIB_NVCC_FLAGS + [f"-arch=sm_{target.split('_', 1)[1]}"] + inc + ["-o", out, str(src)]]


def compiled_name(rel: str) -> str:
    """The file name the compiler writes for a stored output (``gfx942/unary.co.xz`` -> ``unary.co``)."""
    name = Path(rel).name
    return name[:-len(COMPRESSED_SUFFIX)] if name.endswith(COMPRESSED_SUFFIX) else name


def parse_gpu_archs(text: str) -> list:
    """gfx names in amdgpu-arch's or rocminfo's output, once each, in order; feature suffixes
    (gfx90a:sramecc+:xnack-) dropped. rocminfo also lists the CPU agents, which have no gfx name."""
    return list(dict.fromkeys(m.group(1) for m in re.finditer(r"\b(gfx[0-9a-f]+)(?::[a-z]+[+-])*(?![0-9a-z])", text)))


def parse_compute_caps(text: str) -> list:
    """sm_XY targets from `nvidia-smi --query-gpu=compute_cap --format=csv,noheader` lines."""
    return list(dict.fromkeys("sm_" + m.group(1) + m.group(2) for m in re.finditer(r"^\s*(\d+)\.(\d+)\s*$", text, re.M)))


def _tool_output(argv: list) -> str:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return r.stdout if r.returncode == 0 else ""


def detect_gpus() -> tuple:
    """(supported targets, other GPUs found) on this machine, for ``--arch auto``: AMD GPUs
    through ROCm's amdgpu-arch (rocminfo where it is missing), NVIDIA ones through
    nvidia-smi."""
    bases = [b for b in (os.environ.get("ROCM_PATH"), os.environ.get("HIP_PATH"), "/opt/rocm") if b]
    found = []
    for tool in ("amdgpu-arch", "rocminfo"):
        cands = [shutil.which(tool)] + [os.path.join(b, d, tool) for b in bases for d in ("llvm/bin", "bin")]
        exe = next((c for c in cands if c and os.access(c, os.X_OK)), None)
        if exe:
            found = parse_gpu_archs(_tool_output([exe]))
            if found:
                break
    smi = shutil.which("nvidia-smi")
    if smi:
        found += parse_compute_caps(_tool_output([smi, "--query-gpu=compute_cap", "--format=csv,noheader"]))
    known = set(AMD_ARCHS) | set(NVIDIA_TARGETS)
    return [t for t in found if t in known], [t for t in found if t not in known]


def select_targets(arch: str | None, target: str, generic: bool) -> list:
    if target not in ("amd", "nvidia", "emu", "all"):
        raise BuildError(f"--target must be amd, nvidia, emu or all, not {target!r}")
    if arch == "auto":
        # this machine's GPUs (pip install's kernel build); none is not an error there
        chosen, other = detect_gpus()
        if other:
            print(f"build_kernels: no kernels for {', '.join(other)} (supported: "
                  f"{', '.join(AMD_ARCHS + NVIDIA_TARGETS)}); name a target with --arch or MLX_AMD_ARCHS",
                  file=sys.stderr)
        return [t for t in chosen if target == "all" or kind_of(t) == target]
    if arch:
        names = [a.strip() for a in arch.split(",") if a.strip()]
        if not names:
            raise BuildError("--arch is empty")
        for n in names:
            kind_of(n)
        chosen = [n for n in dict.fromkeys(names) if target == "all" or kind_of(n) == target]
        if not chosen:
            raise BuildError(f"--arch {arch} has no {target} target")
        return chosen
    chosen = []
    if target in ("amd", "all"):
        chosen += list(AMD_ARCHS) + (list(GENERIC_ARCHS) if generic else [])
    if target in ("nvidia", "all"):
        chosen += list(NVIDIA_TARGETS)
    if target == "emu":   # not in "all": the emulator is a test target, not a GPU
        chosen += list(EMU_TARGETS)
    return chosen


def compile_argv(target: str, family: str, src: Path, include_dirs: list, out_dir: Path) -> list:
    """Commands (compiler argv without the compiler itself) producing outputs_for() in out_dir."""
    inc = [a for d in include_dirs for a in ("-I", str(d))]
    outs = outputs_for(family, target)
    if kind_of(target) == "amd":
        flags = AMD_FLAGS + [f"--offload-arch={target}",
                             f"-mcode-object-version={amd_code_object_version(target)}"]
        return [flags + inc + ["-o", str(out_dir / compiled_name(outs["file"])), str(src)]]
    if kind_of(target) == "emu":   # src: the family's emulator wrapper (Project.emu_wrapper)
        return [EMU_FLAGS + [f"-DMLXA_EMU_WAVE={target[3:]}"] + inc
                + ["-o", str(out_dir / compiled_name(outs["file"])), str(src)]]
    # PTX first, then the cubin from that PTX: nvcc's own pipeline (front end -> PTX ->
    # ptxas) run once instead of twice; the cubin is identical to a direct -cubin build.
    sm = target.split("_", 1)[1]
    ptx = str(out_dir / compiled_name(outs["ptx"]))
    return [NVCC_FLAGS + [f"-arch=compute_{sm}", "-ptx"] + inc + ["-o", ptx, str(src)],
            ["-O3", f"-arch=sm_{sm}", "-cubin", *NVCC_WERROR, "-o", str(out_dir / compiled_name(outs["file"])), ptx]]


def flag_signature(target: str, make_argv=None) -> list:
    """The path-free part of the commands (compile_argv's, or a library's ``make_argv``), for
    the rebuild key."""
    return [[a for a in argv if not a.startswith("/")]
            for argv in (make_argv or compile_argv)(target, "F", Path("/s"), [Path("/i")], Path("/o"))]


# --------------------------------------------------------------------------- helpers

_QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def sha256_bytes(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def sha256_file(p: Path) -> str:
    return sha256_bytes(p.read_bytes())


def compress(image: bytes) -> bytes:
    return lzma.compress(image, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=XZ_PRESET)


def decompress(data: bytes) -> bytes:
    """The image of a stored file; BuildError when it is not a whole xz stream."""
    try:
        d = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
        image = d.decompress(data)
    except lzma.LZMAError as e:
        raise BuildError(f"does not decompress ({e})") from None
    if not d.eof or d.unused_data:
        raise BuildError("does not decompress (truncated xz stream)" if not d.eof
                         else "does not decompress (bytes after the xz stream)")
    return image


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o644)  # mkstemp makes 0600; these files ship in the wheel
    os.replace(tmp, path)


def load_by_path(name: str, path: Path):
    """Import one file as a module without importing its package (mlx_amd/__init__ imports mlx).

    The source is compiled afresh (no __pycache__), so a table edited within the same
    second as the last build is never read from stale bytecode.
    """
    mod = types.ModuleType(name)
    mod.__file__ = str(path)
    sys.modules[name] = mod  # dataclasses look the module up while a class is built
    try:
        exec(compile(Path(path).read_text(), str(path), "exec"), mod.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


elf = load_by_path("_mlx_amd_build_elf", HERE / "mlx_amd" / "runtime" / "elf.py")


# Runs inside the chroot (its python3) or on the host: executes compile jobs in
# parallel and writes their results; stdlib only and version-neutral on purpose.
_RUNNER = r"""
import concurrent.futures, json, subprocess, sys, time
jobs = json.load(open(sys.argv[1])); n = int(sys.argv[3]); done = [0]
def run(job):
    t0 = time.time()
    for argv in job["cmds"]:
        try:
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            rc, out = p.returncode, p.stdout.decode("utf-8", "replace")
        except OSError as e:
            rc, out = 127, str(e)
        if rc:
            break
    res = {"id": job["id"], "rc": rc, "cmd": argv, "output": out, "seconds": time.time() - t0}
    done[0] += 1
    sys.stderr.write("  [%d/%d] %s %s %.1fs\n" % (done[0], len(jobs), job["id"], "FAILED" if rc else "ok", res["seconds"]))
    sys.stderr.flush()
    return res
with concurrent.futures.ThreadPoolExecutor(max(1, n)) as ex:
    results = list(ex.map(run, jobs))
json.dump(results, open(sys.argv[2], "w"))
"""


# --------------------------------------------------------------------------- toolchains

@dataclass
class Toolchain:
    kind: str                      # "amd" / "nvidia"
    compiler: str                  # path of hipcc / nvcc (inside the chroot when chroot is set)
    chroot: str | None = None      # run through tools/rocm-toolchain.sh with this ROCM_CHROOT
    _version: str | None = None

    def wrap(self, root: Path, argv: list) -> tuple[list, dict]:
        """argv as run on the host, and its environment."""
        env = dict(os.environ)
        if not self.chroot:
            return argv, env
        env["ROCM_CHROOT"] = self.chroot
        return ["bash", str(TOOLCHAIN_SH), "run", str(root)] + argv, env

    def version(self, root: Path) -> str:
        if self._version is None:
            argv, env = self.wrap(root, [self.compiler, "--version"])
            p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            out = p.stdout.decode("utf-8", "replace")
            if p.returncode:
                raise BuildError(f"`{' '.join(argv)}` failed ({p.returncode}):\n{out.strip()}")
            keep = [l.strip() for l in out.splitlines()
                    if re.search(r"HIP version|clang version|release \d|^Build ", l.strip())]
            self._version = "; ".join(keep) or out.strip().splitlines()[0]   # g++: its first line
        return self._version

    def describe(self) -> str:
        return f"{self.compiler} (in chroot {self.chroot})" if self.chroot else self.compiler


def _chroot_ready(path: str) -> bool:
    return os.path.isfile(os.path.join(path, CHROOT_STAMP))


def find_amd(rocm_chroot: str | None) -> Toolchain:
    """hipcc on this machine, else the Debian ROCm chroot; --rocm-chroot forces the chroot."""
    if rocm_chroot is None:
        cands = [shutil.which("hipcc")]
        for base in (os.environ.get("ROCM_PATH"), os.environ.get("HIP_PATH"), "/opt/rocm"):
            if base:
                cands.append(os.path.join(base, "bin", "hipcc"))
        for c in cands:
            if c and os.access(c, os.X_OK):
                return Toolchain("amd", c)
    path = rocm_chroot or os.environ.get("ROCM_CHROOT") or DEFAULT_CHROOT
    if _chroot_ready(path):
        if os.geteuid() != 0:
            raise BuildError(f"the ROCm chroot at {path} needs root to enter (chroot, mounts): "
                             f"run as root, or install ROCm so that hipcc is on PATH")
        return Toolchain("amd", "hipcc", chroot=path)
    raise BuildError("no AMD toolchain: hipcc is not on PATH or in /opt/rocm/bin, and there is no "
                     f"ROCm chroot at {path} (create it with `sudo tools/rocm-toolchain.sh setup`); "
                     "or build only the NVIDIA target with --target nvidia")


def find_emu() -> Toolchain:
    for c in (os.environ.get("CXX"), shutil.which("g++"), shutil.which("c++"), shutil.which("clang++")):
        if c and os.access(c, os.X_OK):
            return Toolchain("emu", c)
    raise BuildError("no C++ compiler for the kernel emulator targets: install g++ or set CXX")


def find_nvidia() -> Toolchain:
    cands = [shutil.which("nvcc")]
    if os.environ.get("CUDA_HOME"):
        cands.append(os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc"))
    cands += sorted(glob.glob("/usr/local/cuda*/bin/nvcc"), reverse=True)
    for c in cands:
        if c and os.access(c, os.X_OK):
            return Toolchain("nvidia", c)
    raise BuildError("no NVIDIA toolchain: nvcc is not on PATH, in $CUDA_HOME/bin or /usr/local/cuda*/bin; "
                     "install the CUDA toolkit or build only AMD targets with --target amd")


# --------------------------------------------------------------------------- project

@dataclass
class Project:
    root: Path
    out_dir: Path
    cache_dir: Path | None = None
    jobs: int = 1
    rocm_chroot: str | None = None
    verbose: bool = True
    require_libraries: bool = False    # a helper library that does not compile fails the build
    _toolchains: dict = field(default_factory=dict)

    @property
    def src_dir(self) -> Path: return self.root / "hip_kernels"
    @property
    def include_dir(self) -> Path: return self.src_dir / "include"
    @property
    def build_dir(self) -> Path: return self.root / "build" / "kernels"
    @property
    def gen_dir(self) -> Path: return self.build_dir / "gen"
    @property
    def table_path(self) -> Path: return self.root / "mlx_amd" / "runtime" / "kernel_table.py"
    @property
    def manifest_path(self) -> Path: return self.out_dir / "manifest.json"

    def log(self, msg: str) -> None:
        if self.verbose:
            print(msg, flush=True)

    # --- the kernel table (optional: families without an entry take their names from the object)
    def table(self):
        if not hasattr(self, "_table"):
            self._table = None
            if self.table_path.is_file():
                try:
                    self._table = load_by_path(f"_mlx_amd_kernel_table_{id(self)}", self.table_path)
                except Exception as e:
                    raise BuildError(f"cannot load {self.table_path}: {type(e).__name__}: {e}") from e
        return self._table

    def _ask_table(self, fn: str, *args):
        """Call a kernel_table function; its failures become BuildErrors naming the call."""
        try:
            return getattr(self.table(), fn)(*args)
        except BuildError:
            raise
        except Exception as e:
            call = f"kernel_table.{fn}({', '.join(map(repr, args))})"
            raise BuildError(f"{call} failed: {type(e).__name__}: {e}") from e

    def table_families(self) -> list:
        return list(self._ask_table("families")) if self.table() else []

    def table_kernels(self, family: str):
        """The table's kernel names for a family, or None when the table does not list it."""
        if family not in self.table_families():
            return None
        return list(self._ask_table("kernel_names", family))

    def families(self) -> list:
        found = sorted(p.stem for p in self.src_dir.glob("*.hip"))
        missing = [f for f in self.table_families() if f not in found]
        if missing:
            raise BuildError(f"kernel_table.families() lists {missing} but {self.src_dir} has no "
                             + ", ".join(f"{m}.hip" for m in missing))
        if not found:
            raise BuildError(f"no kernel sources: {self.src_dir}/*.hip matched nothing")
        return found

    def instantiation(self, family: str) -> str:
        if family not in self.table_families():
            return ""
        text = self._ask_table("instantiation_source", family)
        if not isinstance(text, str):
            raise BuildError(f"kernel_table.instantiation_source({family!r}) returned "
                             f"{type(text).__name__}, expected str")
        return text

    def write_generated(self, families: list) -> dict:
        """Write <family>.inc where changed; {family: sha256 of its text}."""
        shas = {}
        for fam in families:
            data = self.instantiation(fam).encode()
            shas[fam] = sha256_bytes(data)
            p = self.gen_dir / f"{fam}.inc"
            if not p.is_file() or p.read_bytes() != data:
                write_atomic(p, data)
        return shas

    def emu_wrapper(self, family: str) -> Path:
        """The emulator's translation unit of a family: its source, then one launch entry per
        kernel of the table (mlxa/emu.h), written where changed."""
        names = self.table_kernels(family)
        if names is None:
            names = self.emu_kernels_from_source(family)
        text = (f'#include "{family}.hip"\n' + "".join(f"MLXA_EMU_ENTRY({n})\n" for n in names)
                + "MLXA_EMU_MODULE_INFO\n").encode()
        p = self.gen_dir / f"{family}.emu.cpp"
        if not p.is_file() or p.read_bytes() != text:
            write_atomic(p, text)
        return p

    def emu_kernels_from_source(self, family: str) -> list:
        """Kernel names of a family the table does not list (smoke): its MLXA_GLOBAL definitions."""
        src = (self.src_dir / f"{family}.hip").read_text()
        return sorted(set(re.findall(r"MLXA_GLOBAL\s+void\s+(?:MLXA_LAUNCH_BOUNDS(?:_MIN)?\([^)]*\)\s+)?(\w+)\s*\(", src)))

    def header_digest(self) -> str:
        """Every header under hip_kernels/include."""
        return self._digest(p for p in self.include_dir.rglob("*") if p.is_file()) \
            if self.include_dir.is_dir() else hashlib.sha256().hexdigest()

    def _digest(self, paths) -> str:
        h = hashlib.sha256()
        for p in sorted(paths):
            h.update(str(p.relative_to(self.include_dir)).encode() + b"\0")
            h.update(sha256_file(p).encode())
        return h.hexdigest()

    def library_source(self, name: str) -> Path:
        return self.src_dir / "lib" / f"{name}.hip"

    def family_header_digest(self, family: str) -> str:
        return self.header_digest_of(self.src_dir / f"{family}.hip")

    def header_digest_of(self, source: Path) -> str:
        """The headers under hip_kernels/include that ``source`` reaches through quoted
        #includes, transitively (every #include counts, whatever #if it sits under). A
        generated .inc is keyed on its own; a quoted include found nowhere here makes every
        header count, so a dependency is never missed."""
        found, stack = set(), [source]
        while stack:
            f = stack.pop()
            for name in _QUOTED_INCLUDE.findall(f.read_text(errors="replace")):
                if name.endswith(".inc") and "/" not in name:
                    continue
                for base in (f.parent, self.include_dir):
                    cand = (base / name).resolve()
                    if cand.is_file():
                        break
                else:
                    return self.header_digest()
                if cand not in found and self.include_dir.resolve() in cand.parents:
                    found.add(cand)
                    stack.append(cand)
        inc = self.include_dir.resolve()
        return self._digest(self.include_dir / p.relative_to(inc) for p in found)

    def toolchain(self, kind: str) -> Toolchain:
        if kind not in self._toolchains:
            self._toolchains[kind] = {"amd": lambda: find_amd(self.rocm_chroot), "nvidia": find_nvidia,
                                      "emu": find_emu}[kind]()
        return self._toolchains[kind]

    def stamp_path(self, family: str, target: str) -> Path:
        return self.build_dir / "stamps" / target / f"{family}.json"

    def read_raw_manifest(self) -> dict:
        """The manifest as stored, whatever its version ({} when there is none)."""
        if not self.manifest_path.is_file():
            return {}
        try:
            m = json.loads(self.manifest_path.read_text())
        except ValueError as e:
            raise BuildError(f"{self.manifest_path} is not valid JSON ({e}); run with --clean") from e
        if not isinstance(m, dict):
            raise BuildError(f"{self.manifest_path} is not a JSON object; run with --clean")
        return m

    def read_manifest(self) -> dict:
        """The manifest when it has this script's format, else {} (older ones are rebuilt)."""
        m = self.read_raw_manifest()
        return m if m.get("version") == MANIFEST_VERSION else {}

    def outdated_manifest(self) -> str | None:
        """Why the manifest on disk cannot be used as it is (another version), or None."""
        m = self.read_raw_manifest()
        if not m or m.get("version") == MANIFEST_VERSION:
            return None
        return (f"{self.manifest_path} is manifest version {m.get('version')!r}, this build_kernels.py "
                f"writes version {MANIFEST_VERSION} (compressed kernel files): rebuild with "
                f"`python build_kernels.py` (or --arch for the targets you need)")


@dataclass
class Unit:
    """One (family, target): its rebuild key and where its files go."""
    family: str
    target: str
    key: str
    outputs: dict                  # role -> path relative to out_dir
    library: bool = False          # a helper library (LIBRARIES), not a kernel family

    @property
    def kind(self) -> str: return kind_of(self.target)
    @property
    def id(self) -> str: return f"{self.target}/{self.family}"


@dataclass
class Report:
    built: list = field(default_factory=list)        # unit ids compiled now
    cached: list = field(default_factory=list)       # restored from --cache-dir
    up_to_date: list = field(default_factory=list)
    failed: list = field(default_factory=list)
    seconds: dict = field(default_factory=dict)      # target -> summed compile seconds
    batch_seconds: dict = field(default_factory=dict)  # kind -> wall seconds of its batch
    problems: list = field(default_factory=list)     # check findings


def plan(proj: Project, targets: list) -> list:
    families = proj.families()
    inc = proj.write_generated(families)
    headers = {fam: proj.family_header_digest(fam) for fam in families}
    units = []
    for t in targets:
        tc = proj.toolchain(kind_of(t))
        version = tc.version(proj.root)
        for fam in families:
            extra = {"wrapper": sha256_file(proj.emu_wrapper(fam))} if kind_of(t) == "emu" else {}
            key = sha256_bytes(json.dumps({
                "rules": RULES_VERSION, "target": t, "source": sha256_file(proj.src_dir / f"{fam}.hip"),
                "headers": headers[fam], "inc": inc[fam], "compiler": version, "flags": flag_signature(t),
                **extra}, sort_keys=True).encode())
            units.append(Unit(fam, t, key, outputs_for(fam, t)))
    for name in LIBRARIES:
        src = proj.library_source(name)
        if not src.is_file():   # a project without it (the build tests' tiny tree)
            continue
        for t in library_targets(name, targets):
            version = proj.toolchain(kind_of(t)).version(proj.root)
            key = sha256_bytes(json.dumps({
                "rules": RULES_VERSION, "library": name, "target": t, "source": sha256_file(src),
                "headers": proj.header_digest_of(src), "compiler": version,
                "flags": flag_signature(t, library_argv)},
                sort_keys=True).encode())
            units.append(Unit(name, t, key, library_outputs(name, t), library=True))
    return units


def _read_stamp(proj: Project, u: Unit) -> dict:
    try:
        stamp = json.loads(proj.stamp_path(u.family, u.target).read_text())
    except (OSError, ValueError):
        return {}
    return stamp if isinstance(stamp, dict) else {}


def _fresh(proj: Project, u: Unit) -> bool:
    stamp = _read_stamp(proj, u)
    if stamp.get("key") != u.key:
        return False
    for rel in u.outputs.values():
        p = proj.out_dir / rel
        if not p.is_file() or sha256_file(p) != stamp.get("files", {}).get(rel) \
                or rel not in stamp.get("images", {}):
            return False
    return True


def _install(proj: Project, u: Unit, images: dict, stored: dict) -> None:
    """images / stored: role -> decompressed / compressed bytes. Write the stored files, then
    the stamp (so a crash in between reads as stale); the stamp also keeps each image's
    sha256 and size for the manifest."""
    shas, infos = {}, {}
    for role, rel in u.outputs.items():
        write_atomic(proj.out_dir / rel, stored[role])
        shas[rel] = sha256_bytes(stored[role])
        infos[rel] = {"sha256": sha256_bytes(images[role]), "size": len(images[role])}
    write_atomic(proj.stamp_path(u.family, u.target),
                 json.dumps({"key": u.key, "files": shas, "images": infos}, indent=1).encode())


def _cache_entry(proj: Project, u: Unit) -> Path | None:
    return proj.cache_dir / u.key[:2] / u.key if proj.cache_dir else None


def _from_cache(proj: Project, u: Unit) -> bool:
    """Restore a unit from --cache-dir. Entries hold the stored (compressed) files; an entry
    written by an older build_kernels.py holds the compiler's plain files instead: those are
    compressed here and the compressed files added to the entry."""
    d = _cache_entry(proj, u)
    if d is None or not d.is_dir():
        return False
    images, stored = {}, {}
    try:
        for role, rel in u.outputs.items():
            p = d / Path(rel).name
            if p.is_file():
                stored[role] = p.read_bytes()
                images[role] = decompress(stored[role])
            else:
                images[role] = (d / compiled_name(rel)).read_bytes()
                stored[role] = compress(images[role])
                write_atomic(p, stored[role])
    except (OSError, BuildError):  # unreadable or damaged entry: compile instead
        return False
    _install(proj, u, images, stored)
    return True


def _to_cache(proj: Project, u: Unit, stored: dict) -> None:
    d = _cache_entry(proj, u)
    if d is None or d.is_dir():
        return
    tmp = Path(tempfile.mkdtemp(dir=proj.cache_dir, prefix=".incoming-"))
    for role, rel in u.outputs.items():
        (tmp / Path(rel).name).write_bytes(stored[role])
    d.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, d)
    except OSError:  # another build stored it first
        shutil.rmtree(tmp, ignore_errors=True)


def _run_batch(proj: Project, kind: str, units: list, report: Report) -> list:
    """Compile units of one toolchain in one runner process; returns error texts."""
    tc = proj.toolchain(kind)
    work = proj.build_dir / "work" / kind
    shutil.rmtree(work, ignore_errors=True)
    incs = [proj.include_dir, proj.gen_dir] + ([proj.src_dir] if kind == "emu" else [])
    jobs = []
    for u in units:
        (work / u.target).mkdir(parents=True, exist_ok=True)
        if u.library:
            argv = library_argv(u.target, u.family, proj.library_source(u.family), incs, work / u.target)
        else:
            src = proj.emu_wrapper(u.family) if kind == "emu" else proj.src_dir / f"{u.family}.hip"
            argv = compile_argv(u.target, u.family, src, incs, work / u.target)
        cmds = [[tc.compiler] + a for a in argv]
        jobs.append({"id": u.id, "cmds": cmds})
    jobs_file, results_file = work / "jobs.json", work / "results.json"
    jobs_file.write_text(json.dumps(jobs))
    py = "python3" if tc.chroot else sys.executable
    argv, env = tc.wrap(proj.root, [py, "-c", _RUNNER, str(jobs_file), str(results_file), str(proj.jobs)])
    proj.log(f"{kind}: compiling {len(jobs)} object(s) with {tc.describe()}, -j{proj.jobs}")
    t0 = time.time()
    p = subprocess.run(argv, env=env, stdout=None if proj.verbose else subprocess.DEVNULL,
                       stderr=None if proj.verbose else subprocess.PIPE)
    report.batch_seconds[kind] = time.time() - t0
    if p.returncode or not results_file.is_file():
        detail = (p.stderr or b"").decode("utf-8", "replace").strip() if not proj.verbose else ""
        raise BuildError(f"the {kind} compile batch failed to run (exit {p.returncode}): "
                         f"{' '.join(argv[:6])} ...\n{detail}".rstrip())
    by_id = {u.id: u for u in units}
    errors = []
    for r in json.loads(results_file.read_text()):
        u = by_id[r["id"]]
        report.seconds[u.target] = report.seconds.get(u.target, 0.0) + r["seconds"]
        if r["rc"]:
            report.failed.append(u.id)
            log = proj.build_dir / "logs" / u.target / f"{u.family}.log"
            write_atomic(log, f"$ {' '.join(r['cmd'])}\n{r['output']}".encode())
            out = r["output"].rstrip().splitlines()
            more = f"\n  | ... {len(out) - ERROR_LINES} more lines in {log}" if len(out) > ERROR_LINES else ""
            errors.append(f"{u.id}: compiler exit {r['rc']}\n  command: {' '.join(r['cmd'])}\n"
                          + "\n".join("  | " + l for l in out[:ERROR_LINES]) + more)
            continue
        report.built.append(u.id)
    # Compress what compiled, proj.jobs units at a time (lzma releases the GIL while it works),
    # installing each as it is done so that only a few images are in memory at once.
    def squeeze(u):
        images = {role: (work / u.target / compiled_name(rel)).read_bytes() for role, rel in u.outputs.items()}
        return u, images, {role: compress(img) for role, img in images.items()}

    with concurrent.futures.ThreadPoolExecutor(max(1, proj.jobs)) as ex:
        futures = [ex.submit(squeeze, by_id[i]) for i in report.built if i in by_id]
        for f in concurrent.futures.as_completed(futures):
            u, images, stored = f.result()
            _install(proj, u, images, stored)
            _to_cache(proj, u, stored)
    return errors


def build(proj: Project, targets: list) -> Report:
    proj.build_dir.mkdir(parents=True, exist_ok=True)
    with open(proj.build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two builds of one tree would share work/ and stamps/
        return _build(proj, targets)


def _build(proj: Project, targets: list) -> Report:
    report = Report()
    units = plan(proj, targets)
    todo = []
    for u in units:
        if _fresh(proj, u):
            report.up_to_date.append(u.id)
        elif _from_cache(proj, u):
            report.cached.append(u.id)
        else:
            todo.append(u)
    errors = []
    for kind in ("amd", "nvidia", "emu"):
        batch = [u for u in todo if u.kind == kind]
        if batch:
            errors += _run_batch(proj, kind, batch, report)
    failed = set(report.failed)
    write_manifest(proj, [u for u in units if u.id not in failed], [u for u in units if u.id in failed])
    if not proj.require_libraries:
        # optional: e.g. an install-time build on a ROCm without hipCUB/rocPRIM headers
        for u in units:
            if u.library and u.id in failed:
                errors = [e for e in errors if not e.startswith(u.id + ":")]
                proj.log(f"note: helper library {u.id} did not compile (build/kernels/logs/{u.target}/"
                         f"{u.family}.log); what it does runs on our own kernels")
    if errors:
        raise BuildError(f"{len(errors)} compile(s) failed:\n" + "\n".join(errors))
    # This run vouches for its own targets; others kept in the manifest only get a note.
    report.problems = check(proj, set(targets), proj.require_libraries)
    if report.problems:
        raise BuildError("built kernels fail the check:\n  " + "\n  ".join(report.problems))
    others = sorted({p.split("/")[0].split(":")[0] for p in check(proj)} - set(targets))
    if others:
        proj.log(f"note: kept targets {', '.join(others)} are stale or damaged "
                 f"(`python build_kernels.py check` says why; rebuild them with --arch)")
    return report


def _image_info(proj: Project, u: Unit, rel: str) -> dict:
    """{"sha256", "size"} of a stored file's image: from the unit's stamp, which _fresh or
    _install just vouched for; decompressed again only if the stamp lacks it."""
    info = _read_stamp(proj, u).get("images", {}).get(rel)
    if not info:
        image = decompress((proj.out_dir / rel).read_bytes())
        info = {"sha256": sha256_bytes(image), "size": len(image)}
    return info


def _drop_outdated(proj: Project, raw: dict) -> None:
    """Remove the files an older-format manifest listed (plain .co/.cubin/.ptx), so that they
    do not linger in the package beside their compressed successors."""
    base = proj.out_dir.resolve()
    gone = 0
    for entry in (raw.get("targets") or {}).values():
        for e in (entry.get("families") or {}).values() if isinstance(entry, dict) else ():
            for role in ("file", "ptx"):
                rel = e.get(role) if isinstance(e, dict) else None
                if not isinstance(rel, str) or rel.endswith(COMPRESSED_SUFFIX):
                    continue
                p = (proj.out_dir / rel).resolve()
                if base in p.parents and p.is_file():
                    p.unlink()
                    gone += 1
    proj.log(f"note: {proj.manifest_path} was manifest version {raw.get('version')!r} (another "
             f"build_kernels.py; version 1 kept uncompressed files): removed its {gone} uncompressed "
             f"file(s); targets not built in this run must be rebuilt (python build_kernels.py --arch ...)")


def write_manifest(proj: Project, good: list, failed: list) -> dict:
    """Manifest over what is on disk: this run's units plus other targets' still-valid entries.

    {"version": 2, "compression": "xz", "sources": {family: sha256},
     "compilers": {"amd": ..., "nvidia": ...},
     "targets": {target: {"kind": "amd"|"nvidia", "families": {family: {
         "file": rel path of the stored (compressed) file, "sha256": of that file,
         "image_sha256": of the decompressed image, "image_size": its bytes,
         "kernels": [names],
         ("ptx", "ptx_sha256", "ptx_image_sha256", "ptx_image_size": the same for the PTX, NVIDIA)}}}},
     "libraries": {target: {library: {"file", "sha256", "image_sha256", "image_size"}}}}
    """
    raw = proj.read_raw_manifest()
    if raw and raw.get("version") != MANIFEST_VERSION:
        _drop_outdated(proj, raw)
    old = proj.read_manifest()
    families = proj.families()
    man = {"version": MANIFEST_VERSION, "compression": COMPRESSION,
           "sources": {f: sha256_file(proj.src_dir / f"{f}.hip") for f in families},
           "compilers": dict(old.get("compilers", {})), "targets": {}, "libraries": {}}
    fresh_targets = {u.target for u in good} | {u.target for u in failed}
    for t, libs in (old.get("libraries") or {}).items():
        keep = {n: e for n, e in libs.items() if t not in fresh_targets and n in LIBRARIES
                and ("missing" in e or (proj.out_dir / e["file"]).is_file()
                     and sha256_file(proj.out_dir / e["file"]) == e["sha256"])}
        if keep:
            man["libraries"][t] = keep
    # Keep other targets' entries only while their files are intact and the family still exists.
    for t, entry in old.get("targets", {}).items():
        if t in fresh_targets:
            continue
        fams = {f: e for f, e in entry.get("families", {}).items()
                if f in families and all((proj.out_dir / e[r]).is_file() and sha256_file(proj.out_dir / e[r]) == e[h]
                                         for r, h in (("file", "sha256"), ("ptx", "ptx_sha256")) if r in e)}
        if fams:
            man["targets"][t] = {"kind": entry.get("kind", kind_of(t)), "families": fams}
    for u in good:
        man["compilers"][u.kind] = proj.toolchain(u.kind).version(proj.root)
        if u.library:
            rel = u.outputs["file"]
            info = _image_info(proj, u, rel)
            man["libraries"].setdefault(u.target, {})[u.family] = {
                "file": rel, "sha256": sha256_file(proj.out_dir / rel),
                "image_sha256": info["sha256"], "image_size": info["size"]}
            continue
        e = {}
        for role, prefix in (("file", ""), ("ptx", "ptx_")):
            if role not in u.outputs:
                continue
            rel = u.outputs[role]
            info = _image_info(proj, u, rel)
            e.update({role: rel, f"{prefix}sha256": sha256_file(proj.out_dir / rel),
                      f"{prefix}image_sha256": info["sha256"], f"{prefix}image_size": info["size"]})
        kernels = proj.table_kernels(u.family)
        if kernels is None:  # not in the table (e.g. smoke): the object says what it exports
            kernels = sorted(elf.kernel_names(elf.read(decompress((proj.out_dir / u.outputs["file"]).read_bytes()))))
        e["kernels"] = sorted(kernels)
        man["targets"].setdefault(u.target, {"kind": u.kind, "families": {}})["families"][u.family] = e
    for u in failed:  # never leave an object the manifest no longer vouches for
        if u.library:
            man["libraries"].setdefault(u.target, {})[u.family] = {"missing": "did not compile"}
        for rel in u.outputs.values():
            (proj.out_dir / rel).unlink(missing_ok=True)
        proj.stamp_path(u.family, u.target).unlink(missing_ok=True)
    man["targets"] = dict(sorted(man["targets"].items()))
    man["libraries"] = {t: dict(sorted(v.items())) for t, v in sorted(man["libraries"].items())
                        if t in man["targets"]}
    # a compiler only for the kinds of targets still present (a stray emu build once left its own)
    kinds = {t["kind"] for t in man["targets"].values()}
    man["compilers"] = {k: v for k, v in sorted(man["compilers"].items()) if k in kinds}
    for t in man["targets"].values():
        t["families"] = dict(sorted(t["families"].items()))
    write_atomic(proj.manifest_path, (json.dumps(man, indent=1) + "\n").encode())
    return man


# --------------------------------------------------------------------------- check

def _names(names, limit: int = 6) -> str:
    names = sorted(names)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more

def _checked_image(proj: Project, where: str, e: dict, role: str, problems: list):
    """The decompressed image of a built file (role "file" or "ptx"), or None with the problem
    recorded when it is missing or damaged; a stored-file sha256 that differs from the
    manifest's is recorded too (the image is still checked: it says what is wrong inside)."""
    prefix = "" if role == "file" else "ptx_"
    rel = e[role]
    path = proj.out_dir / rel
    if not path.is_file():
        problems.append(f"{where}: file {rel} is missing")
        return None
    data = path.read_bytes()
    if sha256_bytes(data) != e.get(f"{prefix}sha256"):
        problems.append(f"{where}: {rel} does not match its manifest sha256")
    try:
        image = decompress(data)
    except BuildError as err:
        problems.append(f"{where}: {rel} {err}")
        return None
    if sha256_bytes(image) != e.get(f"{prefix}image_sha256") or len(image) != e.get(f"{prefix}image_size"):
        problems.append(f"{where}: {rel} decompresses to an image that does not match its manifest "
                        f"image_sha256/image_size")
    return image


# --- AMD resource limits ------------------------------------------------------------------
#
# Per-arch numbers, as LLVM's AMDGPU backend models them (llvm/lib/Target/AMDGPU/Utils/
# AMDGPUBaseInfo.cpp: getTotalNumVGPRs, getVGPRAllocGranule, getMaxWavesPerEU,
# getAddressableLocalMemorySize, getLocalMemorySize, getEUsPerCU; feature sets from
# AMDGPU.td; AMDGPUUsage "AMDGPU Processors" and the LDS granularity table):
#   gfx908           wave64, 256 arch VGPRs per lane (AGPRs are a separate 256-file; the
#                    metadata's .vgpr_count is max(VGPR, AGPR)), granule 4, 10 waves/SIMD
#   gfx90a gfx942    wave64, 512 unified VGPRs+AGPRs per lane, granule 8, 8 waves/SIMD
#   gfx950           as gfx942, but 160 KiB (163840 B) of LDS per CU / workgroup
#   gfx1030 gfx1102 gfx1150
#                    wave32, 1024 VGPRs per lane, granule 16, 16 waves/SIMD
#   gfx1100 gfx1101 gfx1151 gfx1200 gfx1201
#                    wave32, 1536 VGPRs ("1.5x VGPRs" / GFX11FullVGPRs), granule 24, 16 waves/SIMD
#   LDS: 64 KiB per workgroup on every arch but gfx950; a gfx9 CU holds 64 KiB for its 4 SIMDs,
#   a gfx10+ WGP (HIP runs WGP mode) 128 KiB for its 4 SIMD32s. Workgroups: at most 1024 items.
# The generic targets take the numbers of the smallest member they must run on.

@dataclass(frozen=True)
class AmdArch:
    wave: int                 # wavefront size as we build (gfx9: 64; gfx10+: hipcc's default 32)
    vgprs: int                # VGPRs per lane one SIMD holds at that wave size
    granule: int              # VGPR allocation granule
    max_waves: int            # waves per SIMD
    lds: int                  # LDS one workgroup may allocate, bytes
    lds_shared: int           # LDS of the unit whose SIMDs a workgroup shares (CU / WGP)
    simds: int = 4            # SIMDs of that unit
    max_workgroup: int = 1024


_CDNA2 = AmdArch(wave=64, vgprs=512, granule=8, max_waves=8, lds=65536, lds_shared=65536)
_RDNA = AmdArch(wave=32, vgprs=1024, granule=16, max_waves=16, lds=65536, lds_shared=131072)
_RDNA_1_5X = AmdArch(wave=32, vgprs=1536, granule=24, max_waves=16, lds=65536, lds_shared=131072)
AMD_ARCH_LIMITS = {
    "gfx908": AmdArch(wave=64, vgprs=256, granule=4, max_waves=10, lds=65536, lds_shared=65536),
    "gfx90a": _CDNA2, "gfx942": _CDNA2,
    "gfx950": AmdArch(wave=64, vgprs=512, granule=8, max_waves=8, lds=163840, lds_shared=163840),
    "gfx1030": _RDNA, "gfx1102": _RDNA, "gfx1150": _RDNA,
    "gfx1100": _RDNA_1_5X, "gfx1101": _RDNA_1_5X, "gfx1151": _RDNA_1_5X,
    "gfx1200": _RDNA_1_5X, "gfx1201": _RDNA_1_5X,
    "gfx9-4-generic": _CDNA2, "gfx11-generic": _RDNA, "gfx12-generic": _RDNA_1_5X,
}


def is_stub(name: str, wave: int) -> bool:
    """A wave-width variant the arch never runs: MLXA_WAVE_KERNEL_BODY compiles it to a trap."""
    m = re.search(r"_w(32|64)$", name)
    return bool(m) and int(m.group(1)) != wave


def occupancy(arch: AmdArch, k) -> dict:
    """Waves per SIMD that a kernel's VGPRs and its LDS allow (``k``: an elf.AmdKernel).

    VGPRs: the SIMD's VGPR file over the count rounded up to the granule (LLVM's
    getNumWavesPerEUWithNumVGPRs). LDS: the workgroups whose static LDS fits in the CU/WGP,
    each of max_flat_workgroup_size items, spread over its SIMDs (the kernel's declared
    workgroup bound stands in for the launch size, as in LLVM). SGPRs do not limit on gfx10+
    and not below 800/102 on gfx9; the barrier and wave-slot limits are left out.
    """
    if k.vgprs < arch.granule:
        by_vgpr = arch.max_waves
    else:
        rounded = -(-k.vgprs // arch.granule) * arch.granule
        by_vgpr = min(max(arch.vgprs // rounded, 1), arch.max_waves)
    by_lds = arch.max_waves
    if k.lds:
        groups = arch.lds_shared // k.lds
        per_group = -(-(k.max_workgroup_size or arch.max_workgroup) // arch.wave)
        by_lds = 0 if groups == 0 else min(arch.max_waves, max(1, groups * per_group // arch.simds))
    return {"waves": min(by_vgpr, by_lds), "by_vgpr": by_vgpr, "by_lds": by_lds}


# Known scratch users, found by the first full check (2026-12-01) and not yet fixed: they
# stay correct (scratch is private memory) but slower; listed here by name so that any
# other kernel that starts using scratch fails the check. (op, family) -> reason.
KNOWN_SCRATCH = {
    "indexing_gather_uint8_uint8", "indexing_gather_uint16_uint16", "indexing_gather_uint32_uint32",
    "indexing_gather_uint64_uint64",        # per-axis index arrays held in a local array
    "binary_g_power_bool_bool", "binary_g_remainder_bool_bool",   # gfx950 only
}
# (arch, kernel) known to spill VGPRs to scratch; kept small and named, each with a reason.
KNOWN_SPILLS = {
    # mxfp8 decode for float16 x on RDNA2: 34 VGPRs spill at the 256 limit (RDNA3/CDNA and
    # the other dtypes do not); a rare combination, left until it can be measured there
    ("gfx1030", "quantized_qmv_mxfp8_float16_float16_w32"),
}


def resource_problems(target: str, kernels: dict) -> list:
    """What the check refuses in an AMD code object's kernels (``{name: elf.AmdKernel}``), one
    line per kind of problem, naming the kernels. SGPR spills are not among them: they go to
    VGPR lanes, not to memory (when they do not, the private segment shows it)."""
    arch = AMD_ARCH_LIMITS.get(target)
    found = {}

    def add(what, name, detail):
        found.setdefault(what, []).append(f"{name} ({detail})")

    for name, k in sorted(kernels.items()):
        stub = arch is not None and is_stub(name, arch.wave)
        if not stub:
            known_spill = (target, name) in KNOWN_SPILLS
            if k.scratch and name not in KNOWN_SCRATCH and not known_spill:
                if os.environ.get("MLX_AMD_STRICT_RESOURCES", "1") != "0":
                    add("use scratch (private segment)", name, f"{k.scratch} B per work-item")
                else:   # MLX_AMD_STRICT_RESOURCES=0: reported, not refused (while fixing one)
                    print(f"check: warning: {target}/{name} uses scratch ({k.scratch} B per work-item)",
                          file=sys.stderr)
            if k.vgpr_spills and not known_spill:
                add("spill VGPRs", name, f"{k.vgpr_spills}")
            if k.dynamic_stack:
                add("have a dynamic call stack (scratch sized at run time)", name, "uses_dynamic_stack")
        if arch is None:
            continue
        if k.wavefront_size != arch.wave:
            add(f"run at a wave width other than {target}'s {arch.wave}", name, f"wave{k.wavefront_size}")
        if k.lds > arch.lds:
            add(f"need more LDS than {target}'s {arch.lds // 1024} KiB per workgroup", name, f"{k.lds} B")
        if k.max_workgroup_size is not None and k.max_workgroup_size > arch.max_workgroup:
            add(f"allow workgroups over {arch.max_workgroup} work-items", name, f"{k.max_workgroup_size}")
    return [f"{len(v)} kernel(s) {what}: {_names(v, 4)}" for what, v in found.items()]


def check(proj: Project, targets=None, require_libraries: bool = False) -> list:
    """Problems with the built kernels (all, or those of ``targets``), one line each naming
    target, family and what is wrong."""
    outdated = proj.outdated_manifest()
    if outdated:
        return [outdated]
    man = proj.read_manifest()
    if not man:
        return [f"no manifest at {proj.manifest_path}: run python build_kernels.py"]
    problems = []
    families = set(man.get("sources", {}))
    for t, entry in man.get("targets", {}).items():
        if targets is not None and t not in targets:
            continue
        missing_fams = sorted(families - set(entry.get("families", {})))
        if missing_fams:
            problems.append(f"{t}: no object for famil{'y' if len(missing_fams) == 1 else 'ies'} "
                            + ", ".join(missing_fams))
        for fam, e in entry.get("families", {}).items():
            where = f"{t}/{fam}"
            expected = proj.table_kernels(fam)
            listed = list(e.get("kernels", []))
            if expected is not None and sorted(listed) != sorted(expected):
                extra, lacking = sorted(set(listed) - set(expected)), sorted(set(expected) - set(listed))
                problems.append(f"{where}: manifest kernel list differs from kernel_table.kernel_names"
                                f"({fam!r}) (stale build?): missing [{_names(lacking)}], extra [{_names(extra)}]")
            want = set(expected if expected is not None else listed)
            data = _checked_image(proj, where, e, "file", problems)
            if data is None:
                continue
            try:
                obj = elf.read(data)
                have = elf.kernel_names(obj)
            except elf.ElfError as err:
                problems.append(f"{where}: {err}")
                continue
            if sorted(want - have):
                problems.append(f"{where}: missing kernels in {e['file']}: {_names(want - have)}")
            if kind_of(t) == "amd":
                at = elf.amd_target(obj)
                if t in elf.AMD_MACH and at.arch != t:
                    problems.append(f"{where}: {e['file']} is built for {at.arch or hex(at.mach)}, not {t}")
                if at.code_object_version != amd_code_object_version(t):
                    problems.append(f"{where}: code object v{at.code_object_version}, "
                                    f"expected v{amd_code_object_version(t)}")
                try:
                    kernels = elf.amd_kernels(obj)
                except elf.ElfError as err:
                    problems.append(f"{where}: {e['file']}: {err}")
                else:
                    if sorted(have - set(kernels)):
                        problems.append(f"{where}: kernels without metadata in {e['file']}: "
                                        f"{_names(have - set(kernels))}")
                    problems += [f"{where}: {p}" for p in resource_problems(t, kernels)]
            elif kind_of(t) == "emu":
                if obj.machine != elf.EM_X86_64:
                    problems.append(f"{where}: {e['file']} is not an x86-64 emulator module")
            elif obj.machine != elf.EM_CUDA:
                problems.append(f"{where}: {e['file']} is not a CUDA cubin")
            if "ptx" in e:
                ptx = _checked_image(proj, where, e, "ptx", problems)
                if ptx is None:
                    continue
                lacking = sorted(want - elf.ptx_entries(ptx))
                if lacking:
                    problems.append(f"{where}: missing kernels in {e['ptx']}: {_names(lacking)}")
        problems += _check_libraries(proj, man, t, require_libraries)
    return problems


# what each helper library must export (runtime/modules.py binds them)
LIBRARY_SYMBOLS = {"sortlib": (b"mlxa_sortlib_abi", b"mlxa_sort_pairs")}


def _check_libraries(proj: Project, man: dict, t: str, require: bool) -> list:
    """A target's helper libraries: present where they are built, intact, x86-64 shared
    objects exporting their entry points. One that did not compile is a problem only when
    ``require`` (CI); installs may lack the vendor headers."""
    problems = []
    libs = (man.get("libraries") or {}).get(t, {})
    for name in LIBRARIES:
        where = f"{t}/{name}"
        e = libs.get(name)
        if e is None:
            if library_targets(name, [t]) and proj.library_source(name).is_file():
                problems.append(f"{where}: helper library not built (rebuild this target)")
            continue
        if "missing" in e:
            if require:
                problems.append(f"{where}: helper library {e['missing']}")
            continue
        image = _checked_image(proj, where, e, "file", problems)
        if image is None:
            continue
        # ELF64, little-endian, ET_DYN (3), EM_X86_64 (62)
        if image[:6] != b"\x7fELF\x02\x01" or image[16:18] != b"\x03\x00" or image[18:20] != b"\x3e\x00":
            problems.append(f"{where}: {e['file']} is not an x86-64 shared library")
            continue
        lacking = [sym.decode() for sym in LIBRARY_SYMBOLS.get(name, ()) if sym + b"\x00" not in image]
        if lacking:
            problems.append(f"{where}: {e['file']} does not export {', '.join(lacking)}")
    return problems


# --------------------------------------------------------------------------- report

def _stats(values: list) -> dict:
    return {"max": max(values), "median": statistics.median_low(values)} if values else {"max": 0, "median": 0}


def report(proj: Project) -> dict:
    """Per target and family: kernel count, registers, LDS, scratch, occupancy and file sizes,
    read from the built (decompressed) objects. AMD trap stubs (wave widths the arch never runs)
    are counted apart and left out of the statistics."""
    outdated = proj.outdated_manifest()
    if outdated:
        raise BuildError(outdated)
    man = proj.read_manifest()
    if not man:
        raise BuildError(f"no manifest at {proj.manifest_path}: run python build_kernels.py")
    out = {"report_version": 1, "manifest_version": man.get("version"), "compression": man.get("compression"),
           "compilers": man.get("compilers", {}),
           "limits": {t: dataclasses.asdict(AMD_ARCH_LIMITS[t]) for t in man.get("targets", {})
                      if t in AMD_ARCH_LIMITS},
           "targets": {}}
    total = {"stored_bytes": 0, "image_bytes": 0}
    for t, entry in man.get("targets", {}).items():
        tgt = {"kind": entry.get("kind", kind_of(t)), "families": {}, "stored_bytes": 0, "image_bytes": 0}
        arch = AMD_ARCH_LIMITS.get(t)
        for fam, e in entry.get("families", {}).items():
            roles = [r for r in ("file", "ptx") if r in e]
            try:
                stored = sum((proj.out_dir / e[r]).stat().st_size for r in roles)
            except OSError as err:
                raise BuildError(f"{t}/{fam}: {err}; run check") from None
            image_bytes = sum(e.get("image_size" if r == "file" else "ptx_image_size", 0) for r in roles)
            row = {"kernels": len(e.get("kernels", [])), "stored_bytes": stored, "image_bytes": image_bytes}
            if tgt["kind"] == "amd":
                try:
                    ks = elf.amd_kernels(elf.read(decompress((proj.out_dir / e["file"]).read_bytes())))
                except (OSError, BuildError, elf.ElfError) as err:
                    raise BuildError(f"{t}/{fam}: cannot read {e['file']}: {err}; run check") from None
                real = [k for n, k in ks.items() if not (arch and is_stub(n, arch.wave))]
                occ = [occupancy(arch, k) for k in real] if arch else []
                row.update(
                    kernels=len(real), stubs=len(ks) - len(real),
                    vgprs=_stats([k.vgprs for k in real]), sgprs=_stats([k.sgprs for k in real]),
                    agprs_max=max((k.agprs for k in real), default=0),
                    lds=_stats([k.lds for k in real]), scratch_max=max((k.scratch for k in real), default=0),
                    vgpr_spill_kernels=sum(1 for k in real if k.vgpr_spills),
                    sgpr_spill_kernels=sum(1 for k in real if k.sgpr_spills),
                    max_workgroup_size=max((k.max_workgroup_size or 0 for k in real), default=0),
                    occupancy={"min": min((o["waves"] for o in occ), default=None),
                               "median": statistics.median_low([o["waves"] for o in occ]) if occ else None,
                               "lds_limited_kernels": sum(1 for o in occ if o["by_lds"] < o["by_vgpr"])})
            tgt["families"][fam] = row
            tgt["stored_bytes"] += stored
            tgt["image_bytes"] += image_bytes
        for name, e in (man.get("libraries") or {}).get(t, {}).items():
            if "file" not in e:
                continue
            try:
                stored = (proj.out_dir / e["file"]).stat().st_size
            except OSError as err:
                raise BuildError(f"{t}/{name}: {err}; run check") from None
            tgt.setdefault("libraries", {})[name] = {"stored_bytes": stored, "image_bytes": e.get("image_size", 0)}
            tgt["stored_bytes"] += stored
            tgt["image_bytes"] += e.get("image_size", 0)
        total["stored_bytes"] += tgt["stored_bytes"]
        total["image_bytes"] += tgt["image_bytes"]
        out["targets"][t] = tgt
    out["total"] = total
    return out


def _kib(n: int) -> str:
    return f"{n / 1024:,.0f}"


def report_markdown(rep: dict) -> str:
    """The report as the markdown page docs/kernel-resources.md."""
    L = ["# Kernel resources", "",
         "Generated by `python build_kernels.py report --markdown docs/kernel-resources.md` from the "
         "built code objects (the `NT_AMDGPU_METADATA` note of each AMD object; sizes from "
         "`mlx_amd/kernels/manifest.json`). Do not edit by hand.", ""]
    for kind, ver in sorted(rep.get("compilers", {}).items()):
        L.append(f"- {kind} compiler: {ver}")
    L += ["",
          "Columns: kernels (trap stubs of wave widths the arch never runs are counted apart and "
          "left out of the statistics); VGPRs, SGPRs and static LDS per workgroup as max / median; "
          "scratch = the largest private segment (the check refuses any); SGPR-spill = kernels "
          "spilling SGPRs into VGPR lanes (no memory); occupancy = waves per SIMD that VGPRs and "
          "LDS allow, min / median (LDS for a workgroup of the kernel's max_flat_workgroup_size); "
          "stored / image = compressed and decompressed KiB.", ""]
    if rep.get("limits"):
        L += ["## Arch limits used", "",
              "| arch | wave | VGPRs per SIMD lane | granule | max waves/SIMD | LDS per workgroup | LDS per CU/WGP |",
              "|---|---|---|---|---|---|---|"]
        for t, a in rep["limits"].items():
            L.append(f"| {t} | {a['wave']} | {a['vgprs']} | {a['granule']} | {a['max_waves']} | "
                     f"{a['lds'] // 1024} KiB | {a['lds_shared'] // 1024} KiB |")
        L.append("")
    for t, tgt in rep["targets"].items():
        L += [f"## {t}", ""]
        if tgt["kind"] == "amd":
            L += ["| family | kernels | stubs | VGPRs | SGPRs | AGPRs max | LDS B | scratch B | SGPR-spill | "
                  "occupancy | stored KiB | image KiB |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for fam, r in tgt["families"].items():
                occ = r["occupancy"]
                occ_s = "-" if occ["min"] is None else f"{occ['min']} / {occ['median']}"
                L.append(f"| {fam} | {r['kernels']} | {r['stubs']} | {r['vgprs']['max']} / {r['vgprs']['median']} | "
                         f"{r['sgprs']['max']} / {r['sgprs']['median']} | {r['agprs_max']} | "
                         f"{r['lds']['max']} / {r['lds']['median']} | {r['scratch_max']} | "
                         f"{r['sgpr_spill_kernels']} | {occ_s} | {_kib(r['stored_bytes'])} | {_kib(r['image_bytes'])} |")
        else:
            L += ["| family | kernels | stored KiB | image KiB |", "|---|---|---|---|"]
            for fam, r in tgt["families"].items():
                L.append(f"| {fam} | {r['kernels']} | {_kib(r['stored_bytes'])} | {_kib(r['image_bytes'])} |")
        for name, r in tgt.get("libraries", {}).items():
            L += ["", f"Helper library {name}: {_kib(r['stored_bytes'])} KiB stored, {_kib(r['image_bytes'])} KiB as loaded."]
        L += ["", f"{t}: {_kib(tgt['stored_bytes'])} KiB stored, {_kib(tgt['image_bytes'])} KiB decompressed.", ""]
    tot = rep["total"]
    L.append(f"All targets: {_kib(tot['stored_bytes'])} KiB stored, {_kib(tot['image_bytes'])} KiB decompressed.")
    return "\n".join(L) + "\n"


# --------------------------------------------------------------------------- list / clean

def list_status(proj: Project, targets: list) -> str:
    lines = [f"sources: {proj.src_dir}", f"output:  {proj.out_dir}"]
    families = proj.families()
    listed = set(proj.table_families())
    lines.append("families: " + ", ".join(f if f in listed else f"{f} (not in kernel_table)" for f in families))
    units = {}
    for kind in dict.fromkeys(kind_of(t) for t in targets):
        try:
            tc = proj.toolchain(kind)
            lines.append(f"{kind} compiler: {tc.describe()}: {tc.version(proj.root)}")
        except BuildError as e:
            lines.append(f"{kind} compiler: unavailable: {e}")
    for t in targets:
        try:
            units[t] = [u for u in plan(proj, [t])]
        except BuildError:
            units[t] = None
    for t in targets:
        if units[t] is None:
            lines.append(f"  {t:16s} (no toolchain)")
            continue
        stale = [u.family for u in units[t] if not _fresh(proj, u)]
        state = "up to date" if not stale else "to build: " + ", ".join(stale)
        lines.append(f"  {t:16s} {state}")
    return "\n".join(lines)


def clean(proj: Project, targets: list | None) -> None:
    """Remove built files (all, or only the given targets); the --cache-dir store is kept."""
    if targets is None:
        for d in (proj.out_dir.iterdir() if proj.out_dir.is_dir() else []):
            try:
                is_target = d.is_dir() and bool(kind_of(d.name))
            except BuildError:  # not a target directory: not ours to remove
                is_target = False
            if is_target:
                shutil.rmtree(d)
        proj.manifest_path.unlink(missing_ok=True)
        shutil.rmtree(proj.build_dir, ignore_errors=True)
        return
    for t in targets:
        shutil.rmtree(proj.out_dir / t, ignore_errors=True)
        shutil.rmtree(proj.build_dir / "stamps" / t, ignore_errors=True)
    man = proj.read_manifest()
    if man:
        for t in targets:
            man.get("targets", {}).pop(t, None)
            man.get("libraries", {}).pop(t, None)
        write_atomic(proj.manifest_path, (json.dumps(man, indent=1) + "\n").encode())


# --------------------------------------------------------------------------- CLI

def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="build_kernels.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", nargs="?", choices=("build", "check", "report"), default="build",
                    help="build (default), check the built kernels (table, files, AMD resources), "
                         "or report their registers, LDS, scratch, occupancy and sizes")
    ap.add_argument("--arch", help="comma-separated targets, e.g. gfx1100,gfx942 or sm_90; "
                                   "auto: this machine's GPUs (amdgpu-arch/rocminfo, nvidia-smi)")
    ap.add_argument("--target", default="all", choices=("amd", "nvidia", "emu", "all"))
    ap.add_argument("--generic", action="store_true",
                    help="also build " + ", ".join(GENERIC_ARCHS) + " (code object v6, newer runtimes only)")
    ap.add_argument("-j", "--jobs", type=int, default=len(os.sched_getaffinity(0)),
                    help="parallel compiles (default: the CPUs this process may use)")
    ap.add_argument("--cache-dir", default=os.environ.get("MLX_AMD_KERNEL_CACHE") or None,
                    help="content-addressed object cache outside the clone (env MLX_AMD_KERNEL_CACHE)")
    ap.add_argument("--rocm-chroot", nargs="?", const=os.environ.get("ROCM_CHROOT") or DEFAULT_CHROOT,
                    help="compile AMD targets in this tools/rocm-toolchain.sh chroot even if hipcc is installed")
    ap.add_argument("--root", default=str(HERE), help=argparse.SUPPRESS)  # tests build tiny projects
    ap.add_argument("--out-dir", help="default: <root>/mlx_amd/kernels")
    ap.add_argument("--list", action="store_true", help="show families, targets and what is stale")
    ap.add_argument("--clean", action="store_true", help="remove built kernels (the cache dir is kept)")
    ap.add_argument("--json", metavar="FILE", help="report: also write the report as JSON")
    ap.add_argument("--markdown", metavar="FILE", help="report: also write the report as markdown")
    ap.add_argument("-q", "--quiet", action="store_true")
    ap.add_argument("--require-libraries", action="store_true",
                    help="a helper library (hip_kernels/lib) that does not compile is an error, not a note (CI)")
    return ap


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    root = Path(args.root).resolve()
    proj = Project(root=root, out_dir=Path(args.out_dir).resolve() if args.out_dir else root / "mlx_amd" / "kernels",
                   cache_dir=Path(args.cache_dir).resolve() if args.cache_dir else None,
                   jobs=max(1, args.jobs), rocm_chroot=args.rocm_chroot, verbose=not args.quiet,
                   require_libraries=args.require_libraries)
    try:
        if args.jobs < 1:
            raise BuildError("-j must be at least 1")
        targets = select_targets(args.arch, args.target, args.generic)
        if args.arch == "auto" and not targets and args.command == "build":
            proj.log("build_kernels: --arch auto found no supported GPU on this machine: nothing built")
            return 0
        if args.clean:
            clean(proj, targets if (args.arch or args.target != "all") else None)
            proj.log("cleaned " + ("all targets" if not (args.arch or args.target != "all") else ", ".join(targets)))
            return 0
        if args.list:
            print(list_status(proj, targets))
            return 0
        if args.command == "report":
            rep = report(proj)
            md = report_markdown(rep)
            if args.json:
                write_atomic(Path(args.json), (json.dumps(rep, indent=1) + "\n").encode())
            if args.markdown:
                write_atomic(Path(args.markdown), md.encode())
            if not (args.json or args.markdown) or not args.quiet:
                print(md, end="")
            return 0
        if args.command == "check":
            problems = check(proj, require_libraries=args.require_libraries)
            for p in problems:
                print(f"check: {p}", file=sys.stderr)
            if not problems:
                proj.log(f"check: {proj.manifest_path} and every object in it are consistent")
            return 1 if problems else 0
        if proj.cache_dir:
            proj.cache_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        rep = build(proj, targets)
        proj.log(_summary(rep, time.time() - t0))
        return 0
    except BuildError as e:
        print(f"build_kernels.py: error: {e}", file=sys.stderr)
        return 1


def _summary(rep: Report, wall: float) -> str:
    lines = [f"built {len(rep.built)}, from cache {len(rep.cached)}, up to date {len(rep.up_to_date)}"
             f" in {wall:.1f}s"]
    for kind, s in rep.batch_seconds.items():
        lines.append(f"  {kind} batch wall time {s:.1f}s")
    for t, s in sorted(rep.seconds.items()):
        n = sum(1 for i in rep.built if i.startswith(t + "/"))
        lines.append(f"  {t:16s} {s:7.1f}s compile time over {n} object(s)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
