"""Kernels compiled at run time: NVRTC (the NVIDIA test GPU) and hipRTC (AMD).

``function(driver, props, source, name)`` returns a launchable function handle for the
``extern "C"`` kernel ``name`` of ``source``, compiling it at most once per
(source, options, arch, compiler version):

* an in-memory cache of images and of loaded functions (per driver),
* an on-disk cache in ``$MLX_AMD_JIT_CACHE``, else ``$XDG_CACHE_HOME/mlx-amd/jit``, else
  ``~/.cache/mlx-amd/jit`` (folders created 0700, entries 0600). Every entry carries a
  header with its own key and the sha256 of its image; an entry whose header, key,
  length or digest does not check out (truncated, corrupt, foreign) is recompiled and
  overwritten, never loaded. Writers write a temporary file and ``os.replace`` it, so a
  concurrent reader sees the old entry or the new one, never half of one.
  ``MLX_AMD_JIT_CACHE=off`` keeps everything in memory.

Generated sources are self-contained (no #include): NVRTC ships no C/C++ standard
headers without a CUDA toolkit, and hipRTC's built-in ``std`` lacks the ``_v``/``_t``
aliases our headers use and clashes with the system's ``<type_traits>``.

Both compilers are bound from ONE declarative table in the style of
``driver/table.py``: (name, hipRTC symbol, NVRTC symbol, restype, argtypes).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

from .driver.table import Entry, Library, open_library

P = ctypes.c_void_p
S = ctypes.c_char_p
I = ctypes.c_int
Z = ctypes.c_size_t
pP = ctypes.POINTER(ctypes.c_void_p)
pS = ctypes.POINTER(ctypes.c_char_p)
pZ = ctypes.POINTER(ctypes.c_size_t)
pI = ctypes.POINTER(ctypes.c_int)

TABLE: tuple = tuple(Entry(*row) for row in (
    ("version",          "hiprtcVersion",           "nvrtcVersion",           I, (pI, pI)),
    ("error_string",     "hiprtcGetErrorString",    "nvrtcGetErrorString",    S, (I,)),
    ("create_program",   "hiprtcCreateProgram",     "nvrtcCreateProgram",     I, (pP, S, S, I, pS, pS)),
    ("compile_program",  "hiprtcCompileProgram",    "nvrtcCompileProgram",    I, (P, I, pS)),
    ("get_log_size",     "hiprtcGetProgramLogSize", "nvrtcGetProgramLogSize", I, (P, pZ)),
    ("get_log",          "hiprtcGetProgramLog",     "nvrtcGetProgramLog",     I, (P, S)),
    ("get_code_size",    "hiprtcGetCodeSize",       "nvrtcGetCUBINSize",      I, (P, pZ)),
    ("get_code",         "hiprtcGetCode",           "nvrtcGetCUBIN",          I, (P, S)),
    ("destroy_program",  "hiprtcDestroyProgram",    "nvrtcDestroyProgram",    I, (pP,)),
))
BY_NAME = {e.name: e for e in TABLE}

FORMAT = 1                      # bump when the entry layout or the key recipe changes
MAGIC = b"MLXAJIT\x01"
_HEADER = struct.Struct("<8s32s32sQ")   # magic, key, sha256(image), len(image)


class JitError(RuntimeError):
    """The run-time compiler is missing or rejected a source (the log is in the message)."""


class JitUnavailable(JitError):
    pass


# ------------------------------------------------------------------ compilers
def _site_dirs(*parts) -> list:
    out = []
    for p in sys.path:
        d = os.path.join(p, *parts)
        if os.path.isdir(d):
            out.append(d)
    return out


def _nvrtc_dirs() -> list:
    dirs = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            dirs.append(os.path.join(os.environ[var], "lib64"))
    dirs.append("/usr/local/cuda/lib64")
    # pip wheels: nvidia-cuda-nvrtc (CUDA 13 lays out nvidia/cu13/lib, CUDA 12 nvidia/cuda_nvrtc/lib)
    return dirs + _site_dirs("nvidia", "cu13", "lib") + _site_dirs("nvidia", "cuda_nvrtc", "lib")


def _hiprtc_dirs() -> list:
    dirs = []
    for var in ("ROCM_PATH", "HIP_PATH"):
        if os.environ.get(var):
            dirs.append(os.path.join(os.environ[var], "lib"))
    return dirs + ["/opt/rocm/lib"]


class Compiler:
    """One run-time compiler library, bound lazily from ``TABLE``."""

    def __init__(self, vendor: str, cdll, path: str):
        self.vendor, self.path = vendor, path
        self._lib = Library(cdll, vendor, path, BY_NAME, lambda msg, tried=(): JitUnavailable(msg))
        self._version: Optional[str] = None

    def _fn(self, name):
        return getattr(self._lib, name)

    def _check(self, status, call):
        if status:
            msg = self._fn("error_string")(status)
            raise JitError(f"{call} -> {status}: {msg.decode() if msg else 'unknown error'}")

    def version(self) -> str:
        if self._version is None:
            a, b = ctypes.c_int(), ctypes.c_int()
            self._check(self._fn("version")(ctypes.byref(a), ctypes.byref(b)), "version")
            self._version = f"{'hiprtc' if self.vendor == 'hip' else 'nvrtc'} {a.value}.{b.value}"
        return self._version

    def compile(self, source: str, name: str, options: tuple) -> bytes:
        prog = ctypes.c_void_p()
        self._check(self._fn("create_program")(ctypes.byref(prog), source.encode(), f"{name}.cu".encode(),
                                               0, None, None), "create_program")
        try:
            opts = (ctypes.c_char_p * max(1, len(options)))(*[o.encode() for o in options])
            status = self._fn("compile_program")(prog, len(options), opts)
            if status:
                n = ctypes.c_size_t()
                self._fn("get_log_size")(prog, ctypes.byref(n))
                log = ctypes.create_string_buffer(n.value + 1)
                self._fn("get_log")(prog, log)
                raise JitError(f"{self.version()} could not compile {name} ({' '.join(options)}):\n"
                               f"{log.value.decode(errors='replace')}")
            n = ctypes.c_size_t()
            self._check(self._fn("get_code_size")(prog, ctypes.byref(n)), "get_code_size")
            buf = ctypes.create_string_buffer(n.value)
            self._check(self._fn("get_code")(prog, buf), "get_code")
            return buf.raw
        finally:
            self._fn("destroy_program")(ctypes.byref(prog))


_compilers: dict = {}
_lock = threading.RLock()


def compiler_for(platform: str) -> Compiler:
    """The compiler for a driver platform ("nvidia" or "amd"); ``MLX_AMD_RTC_PATH`` names
    the library file explicitly."""
    with _lock:
        if platform in _compilers:
            return _compilers[platform]
        if platform == "nvidia":
            vendor, names, dirs = "cuda", ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"), _nvrtc_dirs()
        elif platform == "amd":
            vendor, names, dirs = "hip", ("libhiprtc.so.6", "libhiprtc.so.7", "libhiprtc.so"), _hiprtc_dirs()
        else:
            raise JitUnavailable(f"no run-time compiler for platform {platform!r}")
        explicit = os.environ.get("MLX_AMD_RTC_PATH")
        if explicit:
            dirs, names = [os.path.dirname(explicit) or "."], (os.path.basename(explicit),)
        cdll, path, tried = open_library(dirs, names)
        if cdll is None:
            raise JitUnavailable(f"no {names[0]} found (set MLX_AMD_RTC_PATH); tried: " + "; ".join(tried))
        _compilers[platform] = Compiler(vendor, cdll, path)
        return _compilers[platform]


def options_for(props, platform: str) -> tuple:
    """Compile options per platform, from the device's arch."""
    if platform == "nvidia":
        return (f"--gpu-architecture={props.arch}", "-std=c++17")
    # no xnack/sramecc suffix: the code object loads in either mode (as build_kernels.py)
    return (f"--offload-arch={props.arch}", "-std=c++17", "-O3")


# ------------------------------------------------------------------ cache
def cache_dir() -> Optional[Path]:
    v = os.environ.get("MLX_AMD_JIT_CACHE")
    if v and v.lower() in ("0", "off", "none", "no"):
        return None
    if v:
        return Path(v)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mlx-amd" / "jit"


def cache_key(source: str, options: tuple, arch: str, compiler_version: str) -> bytes:
    h = hashlib.sha256()
    for part in (f"mlx-amd jit {FORMAT}", compiler_version, arch, "\0".join(options), source):
        b = part.encode()
        h.update(struct.pack("<Q", len(b)))
        h.update(b)
    return h.digest()


def encode_entry(key: bytes, image: bytes) -> bytes:
    return _HEADER.pack(MAGIC, key, hashlib.sha256(image).digest(), len(image)) + image


def decode_entry(data: bytes, key: bytes) -> Optional[bytes]:
    """The image of a cache entry, or None when it is not a whole, intact entry for key."""
    if len(data) < _HEADER.size:
        return None
    magic, k, digest, n = _HEADER.unpack_from(data)
    image = data[_HEADER.size:]
    if magic != MAGIC or k != key or n != len(image) or hashlib.sha256(image).digest() != digest:
        return None
    return image


class Cache:
    """Images by key: memory first, then the disk folder (None: memory only)."""

    def __init__(self, directory: Optional[os.PathLike] = None, use_disk: bool = True):
        self.directory = Path(directory) if directory is not None else (cache_dir() if use_disk else None)
        self.memory: dict = {}
        self.stats = {"compiles": 0, "memory_hits": 0, "disk_hits": 0, "rejected": 0,
                      "write_errors": 0, "compile_seconds": 0.0, "last_compile_seconds": 0.0}
        self._lock = threading.RLock()
        self._dir_ok: Optional[bool] = None

    def _ensure_dir(self) -> bool:
        if self._dir_ok is None:
            self._dir_ok = False
            if self.directory is not None:
                try:
                    self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
                    st = self.directory.stat()
                    # only a folder of ours that nobody else may write into
                    if st.st_uid == os.getuid():
                        if st.st_mode & 0o077:
                            os.chmod(self.directory, 0o700)
                        self._dir_ok = True
                except OSError:
                    pass
        return self._dir_ok

    def path(self, key: bytes) -> Optional[Path]:
        return None if self.directory is None else self.directory / (key.hex() + ".bin")

    def _read(self, key: bytes) -> Optional[bytes]:
        p = self.path(key)
        if p is None or not self._ensure_dir():
            return None
        try:
            data = p.read_bytes()
        except OSError:
            return None
        image = decode_entry(data, key)
        if image is None:
            self.stats["rejected"] += 1
        return image

    def _write(self, key: bytes, image: bytes) -> None:
        p = self.path(key)
        if p is None or not self._ensure_dir():
            return
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=p.name + ".", suffix=".tmp", dir=self.directory)
            with os.fdopen(fd, "wb") as f:
                f.write(encode_entry(key, image))
            os.chmod(tmp, 0o600)
            os.replace(tmp, p)
            tmp = None
        except OSError:
            self.stats["write_errors"] += 1
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

    def image(self, key: bytes, build) -> bytes:
        """The image for key; ``build()`` makes it when neither cache has an intact one."""
        with self._lock:
            img = self.memory.get(key)
            if img is not None:
                self.stats["memory_hits"] += 1
                return img
            img = self._read(key)
            if img is not None:
                self.stats["disk_hits"] += 1
            else:
                t = time.perf_counter()
                img = build()
                dt = time.perf_counter() - t
                self.stats["compiles"] += 1
                self.stats["compile_seconds"] += dt
                self.stats["last_compile_seconds"] = dt
                self._write(key, img)
            self.memory[key] = img
            return img


_cache: Optional[Cache] = None
_functions: dict = {}     # (id(driver), key, name) -> (driver, function handle)
_modules: dict = {}       # (id(driver), key) -> (driver, module handle)


def cache() -> Cache:
    global _cache
    with _lock:
        if _cache is None:
            _cache = Cache()
        return _cache


def set_cache(c: Optional[Cache]) -> None:
    """Replace the process cache (tests; None: a fresh default one on next use)."""
    global _cache
    with _lock:
        _cache = c
        _functions.clear()
        _modules.clear()


def compile_image(platform: str, props, source: str, name: str, compiler: Optional[Compiler] = None) -> bytes:
    comp = compiler or compiler_for(platform)
    opts = options_for(props, platform)
    key = cache_key(source, opts, props.arch, comp.version())
    return cache().image(key, lambda: comp.compile(source, name, opts))


def function(driver, props, source: str, name: str):
    """A launchable handle of kernel ``name`` in ``source`` for ``driver``'s device."""
    comp = compiler_for(driver.platform)
    opts = options_for(props, driver.platform)
    key = cache_key(source, opts, props.arch, comp.version())
    fkey = (id(driver), key, name)
    with _lock:
        hit = _functions.get(fkey)
        if hit is not None and hit[0] is driver:
            return hit[1]
        mod = _modules.get(fkey[:2])
        if mod is None or mod[0] is not driver:
            image = cache().image(key, lambda: comp.compile(source, name, opts))
            mod = _modules[fkey[:2]] = (driver, driver.module_load_data(image))
        fn = driver.module_get_function(mod[1], name)
        _functions[fkey] = (driver, fn)
        return fn
