"""The kernel table: every kernel variant we compile, by family.

One table drives both sides: ``build_kernels.py`` (which loads this file by path, so it
uses the standard library only) writes ``instantiation_source(family)`` next to
``hip_kernels/<family>.hip`` as ``<family>.inc``, and the launchers look kernels up
with ``kernel_name``/``has_kernel``.

Names are ``<family>_<layout>_<op>_<in>_<out>[_i64]`` with MLX's dtype names; ``_i64``
marks the 64-bit-index variant of a strided kernel (chosen when 32 bits cannot hold an
element index or offset). Copy kernels have no op: ``copy_<layout>_<in>_<out>[_i64]``.
"""

from __future__ import annotations

import functools
import os
import sys
import types

# MLX dtype name -> the C++ type the kernels store it as.
CTYPES = {
    "bool": "bool",
    "uint8": "uint8_t",
    "uint16": "uint16_t",
    "uint32": "uint32_t",
    "uint64": "uint64_t",
    "int8": "int8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
    "float16": "mlxa::half",
    "bfloat16": "mlxa::bfloat16",
    "float32": "float",
    "float64": "double",
    "complex64": "mlxa::complex64",
}

ELEMENTWISE_BLOCK = 256   # threads per block for every elementwise kernel (MLXA_BLOCK_MAX)
MAX_DIMS = 8              # MLXA_MAX_DIMS: collapsed dimensions a strided kernel takes

UINTS = ("uint8", "uint16", "uint32", "uint64")
SINTS = ("int8", "int16", "int32", "int64")
INTS = UINTS + SINTS
FLOATS = ("float32", "float16", "bfloat16", "float64")
REAL = ("bool",) + INTS + FLOATS
C64 = ("complex64",)

# The unsigned type of the same size: kernels whose bits do not depend on signedness
# (or on bool vs uint8) are instantiated for it only and serve every dtype of that size.
SIZED = {"bool": "uint8", "uint8": "uint8", "int8": "uint8", "uint16": "uint16", "int16": "uint16",
         "float16": "uint16", "bfloat16": "uint16", "uint32": "uint32", "int32": "uint32",
         "float32": "uint32", "uint64": "uint64", "int64": "uint64", "float64": "uint64",
         "complex64": "uint64"}

# op -> (functor in mlxa::op, kernel input dtypes, output dtype or None for the input's)
UNARY = {
    "abs": ("Abs", SINTS + FLOATS, None),
    # MLX 0.32.4: Abs of complex64 is complex64 (|z|, 0); mx.abs casts it to float32 after
    "abs_c": ("Abs", C64, None),
    "negative": ("Negative", UINTS + FLOATS + C64, None),
    "square": ("Square", UINTS + FLOATS + C64, None),
    "sign": ("Sign", INTS + FLOATS + C64, None),
    **{op: (fn, FLOATS + C64, None) for op, fn in (
        ("exp", "Exp"), ("log", "Log"), ("log1p", "Log1p"), ("log2", "Log2"), ("log10", "Log10"),
        ("sqrt", "Sqrt"), ("rsqrt", "Rsqrt"), ("sin", "Sin"), ("cos", "Cos"), ("tan", "Tan"),
        ("tanh", "Tanh"), ("sinh", "Sinh"), ("cosh", "Cosh"), ("round", "Round"))},
    **{op: (fn, FLOATS, None) for op, fn in (
        ("expm1", "Expm1"), ("arcsin", "ArcSin"), ("arccos", "ArcCos"), ("arctan", "ArcTan"),
        ("arcsinh", "ArcSinh"), ("arccosh", "ArcCosh"), ("arctanh", "ArcTanh"),
        ("sigmoid", "Sigmoid"), ("erf", "Erf"), ("erfinv", "ErfInv"), ("floor", "Floor"),
        ("ceil", "Ceil"))},
    "logical_not": ("LogicalNot", ("bool",), None),
    "bitwise_invert": ("BitwiseInvert", UINTS, None),
    "conjugate": ("Conjugate", C64, None),
    "real": ("Real", C64, "float32"),
    "imag": ("Imag", C64, "float32"),
}
# (op, dtype) pairs MLX evaluates that are the identity: planned as a same-size copy
UNARY_IDENTITY = {
    "abs": ("bool",) + UINTS, "square": ("bool",), "sign": ("bool",),
    "floor": ("bool",) + INTS, "ceil": ("bool",) + INTS, "round": ("bool",) + INTS,
}
# ops whose integer kernels are shared by size (SIZED)
UNARY_SIZED = frozenset({"negative", "square", "bitwise_invert"})

_ORDERED = REAL + C64
# op -> (functor, kernel input dtypes, output dtype or None for "same as input")
BINARY = {
    "add": ("Add", ("bool",) + UINTS + FLOATS + C64, None),
    "subtract": ("Subtract", ("bool",) + UINTS + FLOATS + C64, None),
    "multiply": ("Multiply", ("bool",) + UINTS + FLOATS + C64, None),
    "divide": ("Divide", FLOATS + C64, None),
    "floor_divide": ("FloorDivide", ("bool",) + INTS + ("float32", "float64"), None),
    # float16/bfloat16: MLX floors the quotient rounded to 16 bits
    "floor_divide_r": ("FloorDivideR", ("float16", "bfloat16"), None),
    "maximum": ("Maximum", REAL + C64, None),
    "minimum": ("Minimum", REAL + C64, None),
    "power": ("Power", REAL, None),
    "remainder": ("Remainder", REAL, None),
    "arctan2": ("ArcTan2", FLOATS, None),
    "logaddexp": ("LogAddExp", FLOATS, None),
    "equal": ("Equal", UINTS + FLOATS + C64, "bool"),
    "not_equal": ("NotEqual", UINTS + FLOATS + C64, "bool"),
    "less": ("Less", INTS + FLOATS + C64, "bool"),
    "less_equal": ("LessEqual", INTS + FLOATS + C64, "bool"),
    "greater": ("Greater", INTS + FLOATS + C64, "bool"),
    "greater_equal": ("GreaterEqual", INTS + FLOATS + C64, "bool"),
    "logical_and": ("LogicalAnd", ("bool",), "bool"),
    "logical_or": ("LogicalOr", ("bool",), "bool"),
    "bitwise_and": ("BitwiseAnd", UINTS, None),
    "bitwise_or": ("BitwiseOr", UINTS, None),
    "bitwise_xor": ("BitwiseXor", UINTS, None),
    "left_shift": ("LeftShift", UINTS, None),
    "right_shift": ("RightShift", INTS, None),
}
# ops whose kernels serve other dtypes of the same size: op -> dtypes that map by SIZED
BINARY_SIZED = {
    "add": INTS, "subtract": INTS, "multiply": INTS,
    "equal": ("bool",) + INTS, "not_equal": ("bool",) + INTS,
    "bitwise_and": ("bool",) + INTS, "bitwise_or": ("bool",) + INTS, "bitwise_xor": ("bool",) + INTS,
    "left_shift": INTS,
    # bool orders like uint8 (0 < 1)
    "less": ("bool",), "less_equal": ("bool",), "greater": ("bool",), "greater_equal": ("bool",),
}
DIVMOD_DTYPES = REAL

# Scalar-broadcast contiguous layouts (sv, vs) exist for the common dtypes only; the
# others (and ss everywhere) take the strided kernel with zero strides.
SCALAR_LAYOUT_DTYPES = frozenset({"float32", "float16", "bfloat16", "uint32", "int32", "uint64",
                                  "int64", "bool"})

ALL_DTYPES = tuple(CTYPES)
# copy: contiguous conversions for every pair; strided and transposed conversions for
# the common dtypes (others: a same-size strided copy into a temporary, then the
# contiguous conversion); same-dtype copies are one kernel per element size.
COPY_DTYPES = ALL_DTYPES
COPY_STRIDED_DTYPES = ("bool", "uint8", "uint32", "int32", "int64", "float16", "bfloat16", "float32")
COPY_SIZES = ("uint8", "uint16", "uint32", "uint64")

UNARY_LAYOUTS = ("v", "g")
BINARY_LAYOUTS = ("sv", "vs", "vv", "g")
_SCALAR_FLAGS = {"sv": ("true", "false"), "vs": ("false", "true"), "vv": ("false", "false")}


def unary_kernel_dtype(op: str, dtype: str):
    """The kernel input dtype that computes ``op`` on ``dtype``, or None."""
    entry = UNARY.get(op)
    if entry is None:
        return None
    kd = SIZED[dtype] if op in UNARY_SIZED and dtype in INTS else dtype
    return kd if kd in entry[1] else None


def binary_kernel_dtype(op: str, dtype: str):
    entry = BINARY.get(op)
    if entry is None:
        return None
    kd = SIZED[dtype] if dtype in BINARY_SIZED.get(op, ()) else dtype
    return kd if kd in entry[1] else None


def copy_kernel_dtypes(src: str, dst: str):
    """(kernel source, kernel destination) dtypes for a conversion or copy."""
    if src == dst:
        return SIZED[src], SIZED[src]
    return src, dst


SMOKE_KERNELS = ("smoke_axpy_float32", "smoke_spin")   # written out in smoke.hip; no generated variants


_TABLE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel_tables")


@functools.lru_cache(maxsize=None)
def _family_tables() -> dict:
    """Tables of the other families: ``kernel_tables/<family>.py``, each stdlib-only with
    ``entries(kt)`` yielding (kernel name, instantiation line); ``kt`` is this module.
    Loaded by path (like this file is by build_kernels.py), never imported as a package."""
    out = {}
    if os.path.isdir(_TABLE_DIR):
        for fn in sorted(os.listdir(_TABLE_DIR)):
            if not fn.endswith(".py") or fn.startswith("_"):
                continue
            fam = fn[:-3]
            path = os.path.join(_TABLE_DIR, fn)
            mod = types.ModuleType(f"_mlx_amd_kernel_table_{fam}")
            mod.__file__ = path
            with open(path) as f:
                exec(compile(f.read(), path, "exec"), mod.__dict__)
            if not callable(getattr(mod, "entries", None)):
                raise KeyError(f"{path} defines no entries(kt)")
            out[fam] = mod
    return out


def table(family: str):
    """The table module of a family from ``kernel_tables/`` (its constants: dtypes, ops)."""
    try:
        return _family_tables()[family]
    except KeyError:
        raise KeyError(f"no kernel table for family {family!r}; known: {', '.join(families())}") from None


def families() -> list[str]:
    return ["smoke", "unary", "binary", "copy"] + list(_family_tables())


def kernel_name(family: str, layout: str, op: str | None, in_dtype: str, out_dtype: str,
                large: bool = False) -> str:
    parts = [family, layout] + ([op] if op else []) + [in_dtype, out_dtype]
    return "_".join(parts) + ("_i64" if large else "")


def _entries(family: str):
    """(name, instantiation line) for every kernel of a generated family."""
    if family == "unary":
        for op, (fn, dtypes, out) in UNARY.items():
            for dt in dtypes:
                yield from _unary_like(family, op, f"mlxa::op::{fn}", dt, out or dt)
    elif family == "copy":
        for sz in COPY_SIZES:
            yield from _unary_like(family, None, "mlxa::op::Identity", sz, sz, large=True)
            name = kernel_name(family, "t", None, sz, sz)
            yield name, f"MLXA_COPY_T({name}, {CTYPES[sz]}, {CTYPES[sz]})"
        for src in COPY_DTYPES:
            for dst in COPY_DTYPES:
                if src == dst:
                    continue
                strided = src in COPY_STRIDED_DTYPES and dst in COPY_STRIDED_DTYPES
                yield from _unary_like(family, None, "mlxa::op::Identity", src, dst, strided=strided)
                if strided:
                    name = kernel_name(family, "t", None, src, dst)
                    yield name, f"MLXA_COPY_T({name}, {CTYPES[src]}, {CTYPES[dst]})"
    elif family == "binary":
        for op, (fn, dtypes, out) in BINARY.items():
            for dt in dtypes:
                o = out or dt
                ci, co = CTYPES[dt], CTYPES[o]
                functor = f"mlxa::op::{fn}<{ci}>" if fn == "FloorDivideR" else f"mlxa::op::{fn}"
                for lay, (sa, sb) in _SCALAR_FLAGS.items():
                    if lay != "vv" and dt not in SCALAR_LAYOUT_DTYPES:
                        continue
                    name = kernel_name(family, lay, op, dt, o)
                    yield name, f"MLXA_BINARY_V({name}, {functor}, {ci}, {co}, {sa}, {sb})"
                name = kernel_name(family, "g", op, dt, o)
                yield name, f"MLXA_BINARY_G({name}, {functor}, {ci}, {co}, int32_t)"
        for dt in DIVMOD_DTYPES:
            for lay, macro in (("vv", "MLXA_DIVMOD_V"), ("g", "MLXA_DIVMOD_G")):
                name = kernel_name(family, lay, "divmod", dt, dt)
                yield name, f"{macro}({name}, {CTYPES[dt]})"
    elif family in _family_tables():
        yield from _family_tables()[family].entries(sys.modules[__name__])
    elif family != "smoke":
        raise KeyError(f"unknown kernel family {family!r}; known: {', '.join(families())}")


def _unary_like(family, op, functor, src, dst, strided=True, large=False):
    """The contiguous kernel, and the 32-bit strided one (``strided``); the 64-bit strided
    variant exists only for same-size copies (``large``): every other kernel reaches
    larger arrays through such a copy into a contiguous temporary."""
    ci, co = CTYPES[src], CTYPES[dst]
    name = kernel_name(family, "v", op, src, dst)
    yield name, f"MLXA_UNARY_V({name}, {functor}, {ci}, {co})"
    if strided:
        name = kernel_name(family, "g", op, src, dst)
        yield name, f"MLXA_UNARY_G({name}, {functor}, {ci}, {co}, int32_t)"
    if large:
        name = kernel_name(family, "g", op, src, dst, True)
        yield name, f"MLXA_UNARY_G({name}, {functor}, {ci}, {co}, int64_t)"


@functools.lru_cache(maxsize=None)
def _names(family: str) -> tuple:
    if family == "smoke":
        return SMOKE_KERNELS
    return tuple(name for name, _ in _entries(family))


def kernel_names(family: str) -> list[str]:
    return list(_names(family))


@functools.lru_cache(maxsize=None)
def _name_set(family: str) -> frozenset:
    return frozenset(_names(family))


def has_kernel(family: str, name: str) -> bool:
    return name in _name_set(family)


def instantiation_source(family: str) -> str:
    """Text of the generated ``<family>.inc``: one extern "C" kernel per line."""
    lines = [line for _, line in _entries(family)]
    if not lines:
        return ""
    head = f"// Generated from mlx_amd/runtime/kernel_table.py for {family}.hip; do not edit.\n"
    return head + "\n".join(lines) + "\n"


# Host twins of platform.h's named capabilities (by gfx arch name).
_MFMA_ARCHS = ("gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950", "gfx9-4-generic")


def has_mfma(arch: str) -> bool:
    return arch.split(":")[0] in _MFMA_ARCHS


def has_wmma(arch: str) -> bool:
    a = arch.split(":")[0]
    return a.startswith("gfx11") or a.startswith("gfx12")


def matrix_tiles(arch: str, dtype: str):
    """The backend of mlxa/mma.h for 16-bit ``dtype`` tiles on ``arch``: "mma_sync" (NVIDIA
    sm_80+, and the kernel emulator's emu32), "mfma" (CDNA; bfloat16 from gfx90a), "wmma" (gfx11), "wmma_gfx12", or None."""
    if dtype not in ("float16", "bfloat16"):
        return None
    a = arch.split(":")[0]
    if a == "emu32":       # the kernel emulator models mma.sync's layouts at wave 32
        return "mma_sync"
    if a.startswith("sm_"):
        return "mma_sync" if a[3:].isdigit() and int(a[3:]) >= 80 else None
    if has_mfma(a):
        return None if dtype == "bfloat16" and a == "gfx908" else "mfma"
    if a.startswith("gfx12"):
        return "wmma_gfx12"
    if a.startswith("gfx11"):
        return "wmma"
    return None
