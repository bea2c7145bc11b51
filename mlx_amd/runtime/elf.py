"""A small ELF64 reader for our kernel files (stdlib only).

It answers the questions build_kernels.py's check and the kernel loader ask
about an AMD code object or an NVIDIA cubin: which symbols (kernels) it
defines, and for AMD which gfx target and code-object version it was built
for. It reads the ELF header, the section headers and ``.symtab``/``.dynsym``;
nothing else. It never imports mlx or ctypes, so build tools can load it by
file path.
"""

from __future__ import annotations

import dataclasses
import os
import re
import struct
from typing import Optional, Union

__all__ = [
    "ElfError", "Symbol", "ElfFile", "AmdTarget", "read", "amd_target",
    "kernel_names", "ptx_entries", "AMD_MACH", "EM_AMDGPU", "EM_CUDA",
]

EM_CUDA = 190
EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64

# EF_AMDGPU_MACH (e_flags & 0xff) for the targets we build, from LLVM's
# AMDGPUUsage "AMDGPU ELF Header" table.
AMD_MACH = {
    "gfx908": 0x030, "gfx90a": 0x03F, "gfx942": 0x04C, "gfx950": 0x04F,
    "gfx1030": 0x036,
    "gfx1100": 0x041, "gfx1101": 0x046, "gfx1102": 0x047,
    "gfx1150": 0x043, "gfx1151": 0x04A,
    "gfx1200": 0x048, "gfx1201": 0x04E,
    "gfx9-4-generic": 0x05F, "gfx11-generic": 0x054, "gfx12-generic": 0x059,
}
_MACH_NAME = {v: k for k, v in AMD_MACH.items()}
_EF_AMDGPU_MACH = 0x0FF
# Code object v4+: 2-bit feature settings.
_XNACK_SHIFT, _SRAMECC_SHIFT = 8, 10
_FEATURE = {0: None, 1: "any", 2: "off", 3: "on"}  # None: target does not support it
_GENERIC_SHIFT = 24
# e_ident[EI_ABIVERSION] for ELFOSABI_AMDGPU_HSA: 0 -> v2 ... 4 -> v6.
_ABI_TO_CO_VERSION = {0: 2, 1: 3, 2: 4, 3: 5, 4: 6}
# st_other bit nvcc sets on __global__ entry points in a cubin.
_STO_CUDA_ENTRY = 0x10

_SYM_TYPES = {0: "NOTYPE", 1: "OBJECT", 2: "FUNC", 3: "SECTION", 4: "FILE",
              5: "COMMON", 6: "TLS", 10: "GNU_IFUNC"}
_SYM_BINDS = {0: "LOCAL", 1: "GLOBAL", 2: "WEAK", 10: "GNU_UNIQUE"}
_SHT_SYMTAB, _SHT_DYNSYM, _SHT_NOBITS = 2, 11, 8


class ElfError(ValueError):
    """The bytes are not an ELF64 little-endian file we can read; names what is wrong."""


@dataclasses.dataclass(frozen=True)
class Symbol:
    name: str
    type: str          # "FUNC", "OBJECT", ...
    bind: str          # "GLOBAL", "LOCAL", "WEAK"
    defined: bool      # st_shndx != SHN_UNDEF
    size: int
    other: int         # st_other (visibility; vendor bits such as CUDA's entry flag)
    table: str         # ".symtab" or ".dynsym"


@dataclasses.dataclass(frozen=True)
class AmdTarget:
    arch: Optional[str]          # "gfx1100"; None for a machine value we do not build
    mach: int                    # raw EF_AMDGPU_MACH
    code_object_version: Optional[int]
    xnack: Optional[str]         # "any" / "on" / "off"; None when the target has no such feature
    sramecc: Optional[str]
    generic_version: int         # 0 for specific targets


@dataclasses.dataclass(frozen=True)
class ElfFile:
    machine: int
    osabi: int
    abi_version: int
    flags: int
    type: int
    symbols: tuple

    @property
    def vendor(self) -> str:
        return {EM_AMDGPU: "amd", EM_CUDA: "nvidia"}.get(self.machine, "other")


def _bytes(src: Union[bytes, bytearray, memoryview, str, os.PathLike]) -> bytes:
    if isinstance(src, (bytes, bytearray, memoryview)):
        return bytes(src)
    with open(src, "rb") as f:
        return f.read()


def read(src) -> ElfFile:
    """Parse the header and symbol tables of an ELF64 little-endian file (bytes or a path)."""
    data = _bytes(src)
    what = src if isinstance(src, (str, os.PathLike)) else f"{len(data)}-byte image"
    if data[:4] != b"\x7fELF":
        hint = " (a clang offload bundle: build with --no-gpu-bundle-output)" \
            if data.startswith(b"__CLANG_OFFLOAD_BUNDLE__") else ""
        raise ElfError(f"{what}: not an ELF file{hint}")
    if len(data) < 64:
        raise ElfError(f"{what}: truncated ELF header ({len(data)} bytes)")
    if data[4] != 2 or data[5] != 1:
        raise ElfError(f"{what}: only ELF64 little-endian is supported "
                       f"(class {data[4]}, data encoding {data[5]})")
    osabi, abi_version = data[7], data[8]
    (e_type, e_machine, _ver, _entry, _phoff, e_shoff, e_flags, _ehsize, _phentsize,
     _phnum, e_shentsize, e_shnum, e_shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", data, 16)

    def section(i):
        off = e_shoff + i * e_shentsize
        if e_shentsize < 64 or off + 64 > len(data):
            raise ElfError(f"{what}: section header {i} lies outside the file")
        # name, type, flags, addr, offset, size, link, info, addralign, entsize
        return struct.unpack_from("<IIQQQQIIQQ", data, off)

    def body(sh):
        off, size = sh[4], sh[5]
        if sh[1] == _SHT_NOBITS:
            return b""
        if off + size > len(data):
            raise ElfError(f"{what}: section data at {off}+{size} lies outside the file")
        return data[off:off + size]

    def cstr(blob, at):
        if at >= len(blob):
            raise ElfError(f"{what}: string offset {at} outside its string table")
        end = blob.find(b"\0", at)
        return blob[at:end if end >= 0 else len(blob)].decode("utf-8", "replace")

    shdrs = [section(i) for i in range(e_shnum)] if e_shoff else []
    shstr = body(shdrs[e_shstrndx]) if 0 < e_shstrndx < len(shdrs) else b""
    symbols = []
    for sh in shdrs:
        if sh[1] not in (_SHT_SYMTAB, _SHT_DYNSYM):
            continue
        table = cstr(shstr, sh[0]) if shstr else (".symtab" if sh[1] == _SHT_SYMTAB else ".dynsym")
        if sh[6] >= len(shdrs):
            raise ElfError(f"{what}: symbol table {table} links to missing section {sh[6]}")
        strtab = body(shdrs[sh[6]])
        blob, entsize = body(sh), sh[9] or 24
        if entsize < 24:
            raise ElfError(f"{what}: symbol table {table} has entry size {entsize}")
        for off in range(entsize, len(blob) - 23, entsize):  # entry 0 is the null symbol
            st_name, st_info, st_other, st_shndx, _value, st_size = struct.unpack_from("<IBBHQQ", blob, off)
            symbols.append(Symbol(
                name=cstr(strtab, st_name), type=_SYM_TYPES.get(st_info & 0xF, str(st_info & 0xF)),
                bind=_SYM_BINDS.get(st_info >> 4, str(st_info >> 4)), defined=st_shndx != 0,
                size=st_size, other=st_other, table=table))
    return ElfFile(machine=e_machine, osabi=osabi, abi_version=abi_version, flags=e_flags,
                   type=e_type, symbols=tuple(symbols))


def amd_target(elf: ElfFile) -> AmdTarget:
    """The gfx target, code-object version and feature settings an AMD code object was built for."""
    if elf.machine != EM_AMDGPU:
        raise ElfError(f"not an AMD GPU code object (e_machine {elf.machine}, expected {EM_AMDGPU})")
    co = _ABI_TO_CO_VERSION.get(elf.abi_version) if elf.osabi == ELFOSABI_AMDGPU_HSA else None
    mach = elf.flags & _EF_AMDGPU_MACH
    v4 = co is not None and co >= 4
    return AmdTarget(
        arch=_MACH_NAME.get(mach), mach=mach, code_object_version=co,
        xnack=_FEATURE[(elf.flags >> _XNACK_SHIFT) & 3] if v4 else None,
        sramecc=_FEATURE[(elf.flags >> _SRAMECC_SHIFT) & 3] if v4 else None,
        generic_version=(elf.flags >> _GENERIC_SHIFT) & 0xFF if co and co >= 6 else 0)


def kernel_names(elf: ElfFile) -> set:
    """Names of the kernels (launchable entry points) an object defines.

    AMD: a global function with a ``<name>.kd`` kernel descriptor beside it.
    NVIDIA: a global function nvcc flagged as an entry point. Other machines:
    every defined global function.
    """
    funcs = {s.name for s in elf.symbols
             if s.defined and s.type == "FUNC" and s.bind in ("GLOBAL", "WEAK")
             and (elf.machine != EM_CUDA or s.other & _STO_CUDA_ENTRY)}
    if elf.machine == EM_AMDGPU:
        kds = {s.name[:-3] for s in elf.symbols if s.defined and s.name.endswith(".kd")}
        return funcs & kds
    return funcs


_PTX_ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([A-Za-z_$%][\w$%]*)\s*\(", re.M)


def ptx_entries(text: Union[str, bytes]) -> set:
    """Kernel names a PTX module exports (its ``.visible .entry`` directives)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return set(_PTX_ENTRY.findall(text))
