"""Kernel modules: finds the built kernel files for the running device and loads them.

``build_kernels.py`` writes ``mlx_amd/kernels/<target>/<family>.{co,cubin,ptx}.xz`` and a
``manifest.json`` (version 2) naming every family's file, the sha256 of its
decompressed image and its kernel list. ``Modules`` picks one target for the device,
loads each family's module on first use (once: decompressed, checked against the
manifest, handed to the driver), and hands out function handles cached by
``(family, name)``.

Target choice:
  AMD     the exact arch (``props.arch``, e.g. gfx1100), else a generic target that
          covers it (gfx11-generic, ...) when one was built. Objects are built with
          no xnack/sramecc setting, so they load in either mode.
  NVIDIA  a cubin for ``props.arch`` (sm_90), else a cubin of the same major version
          and a lower minor (binary compatible), else the newest PTX not newer than
          the device, which the driver compiles on load.
``MLX_AMD_KERNEL_DIR`` points the loader at another kernel directory.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import re
import threading
from pathlib import Path
from typing import Optional

from . import elf

DEFAULT_KERNEL_DIR = Path(__file__).resolve().parent.parent / "kernels"
MANIFEST_VERSION = 2          # build_kernels.py's; 1 was uncompressed files
COMPRESSIONS = ("xz",)

# Generic AMD targets and the archs whose runtimes can run them (LLVM AMDGPUUsage).
GENERIC_TARGETS = {
    "gfx9-4-generic": ("gfx940", "gfx941", "gfx942", "gfx950"),
    "gfx11-generic": ("gfx1100", "gfx1101", "gfx1102", "gfx1103",
                      "gfx1150", "gfx1151", "gfx1152", "gfx1153"),
    "gfx12-generic": ("gfx1200", "gfx1201"),
}


class KernelsUnavailable(RuntimeError):
    """No usable kernels for this device; ``targets`` lists what this build carries."""

    def __init__(self, message: str, arch: str = "", targets=()):
        self.arch, self.targets = arch, list(targets)
        super().__init__(message)


class KernelNotFound(LookupError):
    """A family or kernel name the built kernels do not have."""

    def __str__(self):  # LookupError would show the repr of the message
        return str(self.args[0]) if self.args else ""


def kernel_dir() -> Path:
    return Path(os.environ.get("MLX_AMD_KERNEL_DIR") or DEFAULT_KERNEL_DIR)


def _sm(arch: str) -> Optional[tuple]:
    m = re.fullmatch(r"sm_(\d+)(\d)", arch)  # sm_90 -> (9, 0); sm_100 -> (10, 0)
    return (int(m.group(1)), int(m.group(2))) if m else None


def verified_image(stored: bytes, want: Optional[str]) -> bytes:
    """The decompressed image of a stored (xz) kernel file; ValueError saying what is wrong
    when it does not decompress or its sha256 is not ``want`` (the manifest's: the image's
    own hash is the authority, the xz stream's CRC catches most damage first)."""
    try:
        dec = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
        data = dec.decompress(stored)
        if not dec.eof or dec.unused_data:
            raise lzma.LZMAError("truncated stream" if not dec.eof else "bytes after the stream")
    except lzma.LZMAError as err:
        raise ValueError(f"does not decompress ({err}): damaged") from None
    if not want or hashlib.sha256(data).hexdigest() != want:
        raise ValueError("does not match manifest.json (stale or damaged)")
    return data


class Modules:
    """Lazy, cached kernel loading for one device of one driver."""

    def __init__(self, driver, props, directory: Optional[os.PathLike] = None):
        self.driver, self.props = driver, props
        self.directory = Path(directory) if directory is not None else kernel_dir()
        self._manifest: Optional[dict] = None
        self._choice: Optional[tuple] = None      # (target, "file" | "ptx")
        self._modules: dict = {}                  # family -> module handle
        self._functions: dict = {}                # (family, name) -> function handle
        self._lock = threading.RLock()

    # --- what was built ------------------------------------------------------
    def manifest(self) -> dict:
        if self._manifest is None:
            path = self.directory / "manifest.json"
            try:
                m = json.loads(path.read_text())
            except FileNotFoundError:
                raise KernelsUnavailable(
                    f"no kernels built: {path} does not exist; reinstall from the checkout with ROCm's "
                    f"hipcc present (`pip install -v .` builds them for this machine's GPUs) or with "
                    f"`MLX_AMD_ARCHS={self.props.arch} pip install -v .`, or build them in the checkout "
                    f"with `python build_kernels.py --arch {self.props.arch}` and point MLX_AMD_KERNEL_DIR "
                    f"at its mlx_amd/kernels", self.props.arch) from None
            except (OSError, ValueError) as e:
                raise KernelsUnavailable(f"no kernels: cannot read {path}: {e}", self.props.arch) from e
            if not isinstance(m, dict):
                raise KernelsUnavailable(f"no kernels: {path} is not a JSON object; rebuild with "
                                         f"build_kernels.py", self.props.arch)
            if m.get("version") == 1:
                raise KernelsUnavailable(
                    f"no kernels: {path} is manifest version 1, written by an older build_kernels.py "
                    f"(uncompressed kernel files); this mlx-amd reads version {MANIFEST_VERSION}: rebuild "
                    f"with `python build_kernels.py` (or `--arch {self.props.arch}` for this GPU only)",
                    self.props.arch)
            if m.get("version") != MANIFEST_VERSION or not isinstance(m.get("targets"), dict) \
                    or m.get("compression") not in COMPRESSIONS:
                raise KernelsUnavailable(f"no kernels: {path} has an unknown format "
                                         f"(version {m.get('version')!r}, compression {m.get('compression')!r}); "
                                         f"rebuild with build_kernels.py", self.props.arch)
            self._manifest = m
        return self._manifest

    def available(self) -> list:
        """Targets this build carries (empty when nothing was built)."""
        try:
            return sorted(self.manifest()["targets"])
        except KernelsUnavailable:
            return []

    def _select(self) -> tuple:
        targets = self.manifest()["targets"]
        arch, platform = self.props.arch, getattr(self.driver, "platform", "")
        kinds = {t: e.get("kind") for t, e in targets.items()}
        if platform == "amd":
            if kinds.get(arch) == "amd":
                return arch, "file"
            for generic, members in GENERIC_TARGETS.items():
                if arch in members and kinds.get(generic) == "amd":
                    return generic, "file"
        elif platform == "emu":
            if kinds.get(arch) == "emu":
                return arch, "file"
        elif platform == "nvidia" and _sm(arch):
            major, minor = _sm(arch)
            cubins = sorted((_sm(t), t) for t, k in kinds.items()
                            if k == "nvidia" and _sm(t) and _sm(t)[0] == major and _sm(t)[1] <= minor)
            if cubins:
                return cubins[-1][1], "file"
            ptx = sorted((_sm(t), t) for t, k in kinds.items()
                         if k == "nvidia" and _sm(t) and _sm(t) <= (major, minor)
                         and all("ptx" in e for e in targets[t]["families"].values()))
            if ptx:
                return ptx[-1][1], "ptx"
        built = ", ".join(sorted(targets)) or "none"
        raise KernelsUnavailable(
            f"no kernels for {arch} ({self.props.name}) through the {platform or 'unknown'} driver: "
            f"this build carries {built}; build them for this GPU with "
            f"`python build_kernels.py --arch {arch}` from a source checkout, or point "
            f"MLX_AMD_KERNEL_DIR at a directory that has them", arch, sorted(targets))

    def target(self) -> str:
        """The kernel target used for this device; raises KernelsUnavailable when none fits."""
        with self._lock:
            if self._choice is None:
                self._choice = self._select()
            return self._choice[0]

    def families(self) -> list:
        return sorted(self.manifest()["targets"][self.target()]["families"])

    def kernel_names(self, family: str) -> list:
        return list(self._entry(family)["kernels"])

    def _entry(self, family: str) -> dict:
        t = self.target()
        fams = self.manifest()["targets"][t]["families"]
        if family not in fams:
            raise KernelNotFound(f"no kernel family {family!r} for target {t} "
                                 f"(built families: {', '.join(sorted(fams))})")
        return fams[family]

    # --- loading ---------------------------------------------------------------
    def _image(self, family: str) -> bytes:
        e = self._entry(family)
        target, role = self._choice
        rel = e[role]
        path = self.directory / rel
        rebuild = f"rebuild with `python build_kernels.py --arch {target}`"
        try:
            stored = path.read_bytes()
        except OSError as err:
            raise KernelsUnavailable(f"kernel file {path} for {family} on {target} cannot be read: {err}; "
                                     f"{rebuild}", self.props.arch, self.available()) from err
        try:
            data = verified_image(stored, e.get("image_sha256" if role == "file" else "ptx_image_sha256"))
        except ValueError as err:
            raise KernelsUnavailable(f"kernel file {path} {err}; {rebuild}", self.props.arch,
                                     self.available()) from None
        if role == "ptx":
            return data + b"\0"  # the driver reads PTX as a NUL-terminated string
        if self.driver.platform == "amd" and target in elf.AMD_MACH:
            # A wrong-arch object fails in hipModuleLoadData with a vague "no binary"; say which.
            try:
                built_for = elf.amd_target(elf.read(data)).arch
            except elf.ElfError as err:
                raise KernelsUnavailable(f"kernel file {path}: {err}", self.props.arch, self.available()) from err
            if built_for != target:
                raise KernelsUnavailable(f"kernel file {path} is built for {built_for}, not {target}; "
                                         f"rebuild with `python build_kernels.py --arch {target}`",
                                         self.props.arch, self.available())
        return data

    def module(self, family: str):
        """The loaded module of a family (loaded on first use)."""
        with self._lock:
            mod = self._modules.get(family)
            if mod is None:
                image = self._image(family)
                try:
                    mod = self.driver.module_load_data(image)
                except Exception as err:
                    hint = (" (generic targets need a runtime that loads code object v6)"
                            if self.target() in GENERIC_TARGETS else "")
                    raise KernelsUnavailable(f"loading kernel family {family} for {self.target()} "
                                             f"failed: {err}{hint}", self.props.arch, self.available()) from err
                self._modules[family] = mod
            return mod

    def function(self, family: str, name: str):
        """Function handle for kernel ``name`` of ``family``; cached."""
        key = (family, name)
        fn = self._functions.get(key)
        if fn is not None:
            return fn
        with self._lock:
            fn = self._functions.get(key)
            if fn is None:
                if name not in self._entry(family)["kernels"]:
                    raise KernelNotFound(f"no kernel {name!r} in family {family!r} for target {self.target()}"
                                         f"; if kernel_table.py gained it, rebuild with "
                                         f"`python build_kernels.py --arch {self.target()}`")
                mod = self.module(family)
                try:
                    fn = self.driver.module_get_function(mod, name)
                except Exception as err:
                    raise KernelNotFound(f"kernel {name!r} of family {family!r} is listed in manifest.json "
                                         f"but the {self.target()} module does not export it: {err}") from err
                self._functions[key] = fn
            return fn

    def close(self) -> None:
        """Unload every module (function handles become invalid)."""
        with self._lock:
            mods, self._modules, self._functions = self._modules, {}, {}
        for mod in mods.values():
            try:
                self.driver.module_unload(mod)
            except Exception:  # interpreter shutdown or a lost device: nothing left to free
                pass


# --- helper libraries ------------------------------------------------------------------------
# build_kernels.py's LIBRARIES: a shared library per GPU target (<target>/<name>.so.xz, listed
# under the manifest's "libraries"), loaded with ctypes. Optional by design: a build, target
# or host without one keeps our own kernels for what it would do.
LIBRARIES_ENV = "MLX_AMD_LIBRARIES"     # "none": never load a helper library

_libraries: dict = {}                   # (kernel dir, name, arch) -> (CDLL or None, reason)
_libraries_lock = threading.Lock()
_library_fds: list = []                 # in-memory files of the loaded libraries


def library(name: str, arch: str):
    """``(ctypes.CDLL or None, reason)`` for helper library ``name`` built for ``arch``;
    loaded once per process (decompressed, checked against the manifest's image hash, and
    dlopen'ed from an anonymous in-memory file: nothing is written to disk)."""
    if os.environ.get(LIBRARIES_ENV, "").lower() == "none":
        return None, f"{LIBRARIES_ENV}=none"
    key = (str(kernel_dir()), name, arch)
    with _libraries_lock:
        if key not in _libraries:
            _libraries[key] = _load_library(kernel_dir(), name, arch)
        return _libraries[key]


def _load_library(directory: Path, name: str, arch: str):
    import ctypes

    try:
        man = json.loads((directory / "manifest.json").read_text())
        e = ((man.get("libraries") or {}).get(arch) or {}).get(name)
    except (OSError, ValueError, AttributeError) as err:
        return None, f"no manifest: {err}"
    if not e or "file" not in e:
        return None, f"this build has no {name} for {arch}" + (f" ({e['missing']})" if e else "")
    path = directory / e["file"]
    try:
        image = verified_image(path.read_bytes(), e.get("image_sha256"))
    except (OSError, ValueError) as err:
        return None, f"{path} {err}"
    try:
        fd = os.memfd_create(f"mlx-amd-{name}", os.MFD_CLOEXEC)
    except (AttributeError, OSError) as err:
        return None, f"no in-memory file for {name}: {err}"
    try:
        with open(fd, "wb", closefd=False) as f:
            f.write(image)
        # the file stays open for the process: dlopen knows a library by its path, and a
        # reused descriptor number would hand back the library loaded under it before
        lib = ctypes.CDLL(f"/proc/self/fd/{fd}")
        _library_fds.append(fd)
        return lib, ""
    except OSError as err:   # e.g. the vendor runtime it links against is missing
        os.close(fd)
        return None, f"{name} for {arch} does not load: {err}"

