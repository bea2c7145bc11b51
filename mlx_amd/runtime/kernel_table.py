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

FLOATS = ("float32", "float16", "bfloat16")
SIGNED = ("int32", "int64")

# op -> (functor in mlxa::op, input dtypes); the output dtype is the input's.
UNARY = {
    "abs": ("Abs", FLOATS + SIGNED),
    "negative": ("Negative", FLOATS + SIGNED),
    "square": ("Square", FLOATS + SIGNED),
    "sign": ("Sign", FLOATS + SIGNED),
    **{op: (fn, FLOATS) for op, fn in (
        ("exp", "Exp"), ("expm1", "Expm1"), ("log", "Log"), ("log1p", "Log1p"),
        ("log2", "Log2"), ("log10", "Log10"), ("sqrt", "Sqrt"), ("rsqrt", "Rsqrt"),
        ("sin", "Sin"), ("cos", "Cos"), ("tan", "Tan"), ("tanh", "Tanh"), ("sinh", "Sinh"),
        ("cosh", "Cosh"), ("arcsin", "ArcSin"), ("arccos", "ArcCos"), ("arctan", "ArcTan"),
        ("arcsinh", "ArcSinh"), ("arccosh", "ArcCosh"), ("arctanh", "ArcTanh"),
        ("sigmoid", "Sigmoid"), ("erf", "Erf"), ("erfinv", "ErfInv"), ("floor", "Floor"),
        ("ceil", "Ceil"), ("round", "Round"))},
    "logical_not": ("LogicalNot", ("bool",)),
}

_ARITH = FLOATS + ("int32",)
# op -> (functor, input dtypes, output dtype or None for "same as input")
BINARY = {
    "add": ("Add", _ARITH + ("int64",), None),
    "subtract": ("Subtract", _ARITH + ("int64",), None),
    "multiply": ("Multiply", _ARITH + ("int64",), None),
    "divide": ("Divide", FLOATS, None),
    # float16/bfloat16: MLX floors the quotient rounded to 16 bits; ours would round in float
    "floor_divide": ("FloorDivide", ("float32", "int32", "int64"), None),
    "maximum": ("Maximum", _ARITH, None),
    "minimum": ("Minimum", _ARITH, None),
    "power": ("Power", _ARITH, None),
    "remainder": ("Remainder", _ARITH, None),
    "arctan2": ("ArcTan2", FLOATS, None),
    "logaddexp": ("LogAddExp", FLOATS, None),
    "equal": ("Equal", _ARITH + ("int64", "bool"), "bool"),
    "not_equal": ("NotEqual", _ARITH + ("bool",), "bool"),
    "less": ("Less", _ARITH, "bool"),
    "less_equal": ("LessEqual", _ARITH, "bool"),
    "greater": ("Greater", _ARITH, "bool"),
    "greater_equal": ("GreaterEqual", _ARITH, "bool"),
    "logical_and": ("LogicalAnd", ("bool",), "bool"),
    "logical_or": ("LogicalOr", ("bool",), "bool"),
}

COPY_DTYPES = ("bool", "uint8", "uint32", "int32", "int64", "float16", "bfloat16", "float32")  # every pair

UNARY_LAYOUTS = ("v", "g")
BINARY_LAYOUTS = ("ss", "sv", "vs", "vv", "g")
_SCALAR_FLAGS = {"ss": ("true", "true"), "sv": ("true", "false"),
                 "vs": ("false", "true"), "vv": ("false", "false")}

SMOKE_KERNELS = ("smoke_axpy_float32",)   # written out in smoke.hip; no generated variants


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
        for op, (fn, dtypes) in UNARY.items():
            for dt in dtypes:
                yield from _unary_like(family, op, f"mlxa::op::{fn}", dt, dt)
    elif family == "copy":
        for src in COPY_DTYPES:
            for dst in COPY_DTYPES:
                yield from _unary_like(family, None, "mlxa::op::Identity", src, dst)
                name = kernel_name(family, "t", None, src, dst)
                yield name, f"MLXA_COPY_T({name}, {CTYPES[src]}, {CTYPES[dst]})"
    elif family == "binary":
        for op, (fn, dtypes, out) in BINARY.items():
            for dt in dtypes:
                o = out or dt
                ci, co = CTYPES[dt], CTYPES[o]
                for lay, (sa, sb) in _SCALAR_FLAGS.items():
                    name = kernel_name(family, lay, op, dt, o)
                    yield name, f"MLXA_BINARY_V({name}, mlxa::op::{fn}, {ci}, {co}, {sa}, {sb})"
                for large, idx in ((False, "int32_t"), (True, "int64_t")):
                    name = kernel_name(family, "g", op, dt, o, large)
                    yield name, f"MLXA_BINARY_G({name}, mlxa::op::{fn}, {ci}, {co}, {idx})"
    elif family in _family_tables():
        yield from _family_tables()[family].entries(sys.modules[__name__])
    elif family != "smoke":
        raise KeyError(f"unknown kernel family {family!r}; known: {', '.join(families())}")


def _unary_like(family, op, functor, src, dst):
    ci, co = CTYPES[src], CTYPES[dst]
    name = kernel_name(family, "v", op, src, dst)
    yield name, f"MLXA_UNARY_V({name}, {functor}, {ci}, {co})"
    for large, idx in ((False, "int32_t"), (True, "int64_t")):
        name = kernel_name(family, "g", op, src, dst, large)
        yield name, f"MLXA_UNARY_G({name}, {functor}, {ci}, {co}, {idx})"


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
