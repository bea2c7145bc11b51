"""A small ELF64 reader for our kernel files (stdlib only).

It answers the questions build_kernels.py's check and the kernel loader ask
about an AMD code object or an NVIDIA cubin: which symbols (kernels) it
defines, for AMD which gfx target and code-object version it was built for,
and what each AMD kernel uses (registers, LDS, scratch, spills, wave size:
the msgpack document of the ``NT_AMDGPU_METADATA`` note, read by a small
msgpack decoder here). It reads the ELF header, the section headers,
``.symtab``/``.dynsym`` and note sections; nothing else. It never imports mlx
or ctypes, so build tools can load it by file path.
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
    "Note", "AmdKernel", "amd_metadata", "amd_kernels", "msgpack_unpack", "NT_AMDGPU_METADATA",
]

EM_CUDA = 190
EM_X86_64 = 62
EMU_ENTRY = "mlxa_emu_entry_"   # the kernel emulator's exported launch entries (mlxa/emu.h)
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
_SHT_SYMTAB, _SHT_DYNSYM, _SHT_NOTE, _SHT_NOBITS = 2, 11, 7, 8
# AMDGPUUsage "Code Object V3 and Above Note Records": name "AMDGPU", type 32,
# desc = the code object metadata as one msgpack map.
NT_AMDGPU_METADATA = 32


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
class Note:
    name: str          # owner, e.g. "AMDGPU" (without the NUL)
    type: int
    desc: bytes = dataclasses.field(repr=False)


@dataclasses.dataclass(frozen=True)
class ElfFile:
    machine: int
    osabi: int
    abi_version: int
    flags: int
    type: int
    symbols: tuple
    notes: tuple = ()  # Note records of the SHT_NOTE sections, in file order (AMD objects)

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
    symbols, notes = [], []
    for sh in shdrs:
        if sh[1] == _SHT_NOTE:
            if e_machine == EM_AMDGPU:  # only AMD notes are read; other vendors' stay opaque
                notes += _notes(body(sh), what)
            continue
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
                   type=e_type, symbols=tuple(symbols), notes=tuple(notes))


def _notes(blob: bytes, what) -> list:
    """Records of one note section: namesz, descsz, type, then name and desc, each padded to 4."""
    out, at = [], 0
    while at + 12 <= len(blob):
        namesz, descsz, ntype = struct.unpack_from("<III", blob, at)
        name_at = at + 12
        desc_at = name_at + (namesz + 3) // 4 * 4
        end = desc_at + (descsz + 3) // 4 * 4
        if desc_at + descsz > len(blob):
            raise ElfError(f"{what}: note record at {at} (desc {descsz} bytes) runs past its section")
        name = blob[name_at:name_at + namesz].rstrip(b"\0").decode("utf-8", "replace")
        out.append(Note(name, ntype, bytes(blob[desc_at:desc_at + descsz])))
        at = end
    return out


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
    NVIDIA: a global function nvcc flagged as an entry point. The kernel emulator's
    x86-64 modules: ``<name>`` for each ``mlxa_emu_entry_<name>``. Other machines:
    every defined global function.
    """
    funcs = {s.name for s in elf.symbols
             if s.defined and s.type == "FUNC" and s.bind in ("GLOBAL", "WEAK")
             and (elf.machine != EM_CUDA or s.other & _STO_CUDA_ENTRY)}
    if elf.machine == EM_AMDGPU:
        kds = {s.name[:-3] for s in elf.symbols if s.defined and s.name.endswith(".kd")}
        return funcs & kds
    if elf.machine == EM_X86_64 and any(f.startswith(EMU_ENTRY) for f in funcs):
        return {f[len(EMU_ENTRY):] for f in funcs if f.startswith(EMU_ENTRY)}
    return funcs


_PTX_ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([A-Za-z_$%][\w$%]*)\s*\(", re.M)


def ptx_entries(text: Union[str, bytes]) -> set:
    """Kernel names a PTX module exports (its ``.visible .entry`` directives)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return set(_PTX_ENTRY.findall(text))


# --------------------------------------------------------------------------- msgpack

class _Unpacker:
    """Decoder for the msgpack subset LLVM writes (and the rest of the format, for safety).

    Maps become dicts (keys must be hashable: str/int/bool/None/float/bytes), arrays lists,
    bin/ext bytes (ext as ``(type, bytes)``). Every length is checked against the bytes
    left, so damaged input raises ElfError instead of allocating or recursing wildly.
    """

    MAX_DEPTH = 64

    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def _take(self, n: int) -> bytes:
        if n > len(self.data) - self.at:
            raise ElfError(f"msgpack: {n} bytes wanted at offset {self.at}, "
                           f"{len(self.data) - self.at} left (truncated document)")
        b = self.data[self.at:self.at + n]
        self.at += n
        return b

    def _int(self, fmt: str) -> int:
        return struct.unpack(fmt, self._take(struct.calcsize(fmt)))[0]

    def _count(self, n: int, per: int) -> int:
        # each element takes at least `per` bytes: a count beyond what is left is damage
        if n * per > len(self.data) - self.at:
            raise ElfError(f"msgpack: a container of {n} elements at offset {self.at} "
                           f"cannot fit in the {len(self.data) - self.at} bytes left")
        return n

    def value(self, depth: int = 0):
        if depth > self.MAX_DEPTH:
            raise ElfError(f"msgpack: nesting deeper than {self.MAX_DEPTH} at offset {self.at}")
        b = self._take(1)[0]
        if b <= 0x7F:
            return b
        if b >= 0xE0:
            return b - 0x100
        if 0x80 <= b <= 0x8F:
            return self._map(b & 0x0F, depth)
        if 0x90 <= b <= 0x9F:
            return self._array(b & 0x0F, depth)
        if 0xA0 <= b <= 0xBF:
            return self._str(b & 0x1F)
        simple = {0xC0: None, 0xC2: False, 0xC3: True}
        if b in simple:
            return simple[b]
        ints = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
        if b in ints:
            return self._int(ints[b])
        if b == 0xCA:
            return self._int(">f")
        if b == 0xCB:
            return self._int(">d")
        sized = {0xD9: ">B", 0xDA: ">H", 0xDB: ">I"}
        if b in sized:
            return self._str(self._int(sized[b]))
        binary = {0xC4: ">B", 0xC5: ">H", 0xC6: ">I"}
        if b in binary:
            return bytes(self._take(self._int(binary[b])))
        if b in (0xDC, 0xDD):
            return self._array(self._int(">H" if b == 0xDC else ">I"), depth)
        if b in (0xDE, 0xDF):
            return self._map(self._int(">H" if b == 0xDE else ">I"), depth)
        fixext = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
        if b in fixext:
            t = self._int(">b")
            return (t, bytes(self._take(fixext[b])))
        ext = {0xC7: ">B", 0xC8: ">H", 0xC9: ">I"}
        if b in ext:
            n = self._int(ext[b])
            t = self._int(">b")
            return (t, bytes(self._take(n)))
        raise ElfError(f"msgpack: byte 0x{b:02x} at offset {self.at - 1} starts no value (0xc1 is never used)")

    def _str(self, n: int) -> str:
        raw = self._take(n)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ElfError(f"msgpack: string at offset {self.at - n} is not UTF-8: {e}") from None

    def _array(self, n: int, depth: int) -> list:
        return [self.value(depth + 1) for _ in range(self._count(n, 1))]

    def _map(self, n: int, depth: int) -> dict:
        out = {}
        for _ in range(self._count(n, 2)):
            at = self.at
            k = self.value(depth + 1)
            try:
                hash(k)
            except TypeError:
                raise ElfError(f"msgpack: map key at offset {at} is a {type(k).__name__}") from None
            out[k] = self.value(depth + 1)
        return out


def msgpack_unpack(data: Union[bytes, bytearray, memoryview]):
    """The one msgpack value that makes up ``data`` (trailing bytes are an error)."""
    u = _Unpacker(bytes(data))
    v = u.value()
    if u.at != len(u.data):
        raise ElfError(f"msgpack: {len(u.data) - u.at} bytes after the document's end")
    return v


# --------------------------------------------------------------------------- AMD kernel metadata

@dataclasses.dataclass(frozen=True)
class AmdKernel:
    """What the compiler recorded for one kernel (AMDGPUUsage "Code Object V3+ Metadata").

    ``vgprs`` is ``.vgpr_count``: the VGPRs a work-item holds, AGPRs included where the
    compiler folds them in (gfx90a+: arch VGPRs rounded to 4 plus AGPRs; gfx908: the
    larger of the two separate files), i.e. the number occupancy depends on.
    """
    name: str
    vgprs: int
    sgprs: int
    agprs: int                  # 0 where the target has no AGPRs (no .agpr_count)
    lds: int                    # .group_segment_fixed_size: static LDS per workgroup, bytes
    scratch: int                # .private_segment_fixed_size: per work-item, bytes
    vgpr_spills: int
    sgpr_spills: int
    wavefront_size: Optional[int]
    max_workgroup_size: Optional[int]   # .max_flat_workgroup_size
    kernarg_size: int
    dynamic_stack: bool         # .uses_dynamic_stack: scratch sized only at run time
    raw: dict = dataclasses.field(default=None, compare=False, repr=False)


def amd_metadata(elf: ElfFile) -> dict:
    """The code object metadata map (``amdhsa.version``, ``amdhsa.kernels``, ``amdhsa.target``)."""
    if elf.machine != EM_AMDGPU:
        raise ElfError(f"not an AMD GPU code object (e_machine {elf.machine}, expected {EM_AMDGPU})")
    for n in elf.notes:
        if n.name == "AMDGPU" and n.type == NT_AMDGPU_METADATA:
            doc = msgpack_unpack(n.desc)
            if not isinstance(doc, dict):
                raise ElfError(f"AMDGPU metadata is a {type(doc).__name__}, not a map")
            return doc
    raise ElfError("no NT_AMDGPU_METADATA note (code object v2, or not built by the AMDGPU backend)")


def amd_kernels(elf: ElfFile) -> dict:
    """{kernel name: AmdKernel} from the metadata note."""
    kernels = amd_metadata(elf).get("amdhsa.kernels")
    if not isinstance(kernels, list):
        raise ElfError("AMDGPU metadata has no amdhsa.kernels list")

    def num(k: dict, key: str, name: str, default=0):
        v = k.get(key, default)
        if v is not default and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise ElfError(f"AMDGPU metadata of {name}: {key} is {v!r}, not a count")
        return v

    out = {}
    for k in kernels:
        if not isinstance(k, dict) or not isinstance(k.get(".name"), str):
            raise ElfError("AMDGPU metadata: an amdhsa.kernels entry has no .name")
        name = k[".name"]
        out[name] = AmdKernel(
            name=name, vgprs=num(k, ".vgpr_count", name), sgprs=num(k, ".sgpr_count", name),
            agprs=num(k, ".agpr_count", name), lds=num(k, ".group_segment_fixed_size", name),
            scratch=num(k, ".private_segment_fixed_size", name),
            vgpr_spills=num(k, ".vgpr_spill_count", name), sgpr_spills=num(k, ".sgpr_spill_count", name),
            wavefront_size=num(k, ".wavefront_size", name, None),
            max_workgroup_size=num(k, ".max_flat_workgroup_size", name, None),
            kernarg_size=num(k, ".kernarg_segment_size", name),
            dynamic_stack=bool(k.get(".uses_dynamic_stack", False)), raw=k)
    return out
