"""Kernel table of the reduce family (hip_kernels/reduce.hip); standard library only.

Names: ``reduce_<layout>_<op>_<in>_<out>[_w32|_w64]``; layouts ``row``, ``argrow``,
``argsplit`` and ``argpairs`` depend on the wave width (both widths are instantiated), ``col``, ``argcol`` and the
sequential ``seq``/``argseq`` (complex min/max/arg*) do not.

Inputs are grouped where the bits suffice (the launcher maps MLX's dtypes onto these):
sum/prod of uint32/int32 and uint64/int64 share a kernel (wrapping arithmetic gives the
same bits), bool sums as uint8, and/or read every dtype as unsigned bits of its size with
a run-time mask, min/max of bool are and/or.
"""

WAVES = (32, 64)

# op -> functor in mlxa::red
OPS = {"sum": "Sum", "prod": "Prod", "max": "Max", "min": "Min", "and": "And", "or": "Or"}

# accumulator dtype per (op class, kernel input dtype); the partials of a split are stored in it
_SUM_ACC = {"uint8": "int32", "uint16": "int32", "int8": "int32", "int16": "int32", "int32": "int32",
            "int64": "int64", "float16": "float32", "bfloat16": "float32", "float32": "float32",
            "float64": "float64", "complex64": "complex64"}
_MINMAX = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
           "float16", "bfloat16", "float32", "float64")
_BITS = ("uint8", "uint16", "uint32", "uint64")


def _sum_out(dt):
    return {"float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "float64": "float64",
            "complex64": "complex64", "int64": "int64"}.get(dt, "int32")


def acc_dtype(op: str, kin: str) -> str:
    if op in ("sum", "prod"):
        return _SUM_ACC[kin]
    if op in ("and", "or"):
        return "bool"
    return "float32" if kin in ("float16", "bfloat16") else kin


def reduce_kernels():
    """(op, kernel in dtype, kernel out dtype) of every Reduce kernel (row and col)."""
    out = []
    for op in ("sum", "prod"):
        out += [(op, dt, _sum_out(dt)) for dt in _SUM_ACC]
    for op in ("max", "min"):
        out += [(op, dt, dt) for dt in _MINMAX]
    for op in ("and", "or"):
        out += [(op, dt, "bool") for dt in _BITS]
    return out


# second pass of a split reduction over float partials of a 16-bit float reduction (row only)
FINISH_KERNELS = [(op, "float32", o) for op in ("sum", "prod", "max", "min") for o in ("float16", "bfloat16")]

ARG_OPS = {"argmin": "false", "argmax": "true"}
ARG_DTYPES = _MINMAX
# few long rows split in two passes (argsplit, argpairs): the float types of an LLM's logits
ARG_SPLIT_DTYPES = ("float32", "float16", "bfloat16")


def name(kt, layout, op, kin, kout, wave=None):
    n = kt.kernel_name("reduce", layout, op, kin, kout)
    return n + (f"_w{wave}" if wave else "")


def entries(kt):
    C = kt.CTYPES
    for op, kin, kout in reduce_kernels() + FINISH_KERNELS:
        acc = C[acc_dtype(op, kin)]
        fn = OPS[op]
        for w in WAVES:
            n = name(kt, "row", op, kin, kout, w)
            yield n, f"MLXA_REDUCE_ROW({n}, {w}, {fn}, {C[kin]}, {acc}, {C[kout]})"
    for op, kin, kout in reduce_kernels():
        n = name(kt, "col", op, kin, kout)
        yield n, f"MLXA_REDUCE_COL({n}, {OPS[op]}, {C[kin]}, {C[acc_dtype(op, kin)]}, {C[kout]})"
    for op, is_max in (("min", "false"), ("max", "true")):
        n = name(kt, "seq", op, "complex64", "complex64")
        yield n, f"MLXA_REDUCE_SEQ_COMPLEX({n}, {is_max})"
    for op, is_max in ARG_OPS.items():
        for dt in ARG_DTYPES:
            for w in WAVES:
                n = name(kt, "argrow", op, dt, "uint32", w)
                yield n, f"MLXA_ARG_ROW({n}, {w}, {is_max}, {C[dt]})"
            n = name(kt, "argcol", op, dt, "uint32")
            yield n, f"MLXA_ARG_COL({n}, {is_max}, {C[dt]})"
        for dt in ARG_SPLIT_DTYPES:
            for w in WAVES:
                n = name(kt, "argsplit", op, dt, "uint32", w)
                yield n, f"MLXA_ARG_SPLIT({n}, {w}, {is_max}, {C[dt]})"
                n = name(kt, "argpairs", op, dt, "uint32", w)
                yield n, f"MLXA_ARG_PAIRS({n}, {w}, {is_max}, {C[dt]})"
        n = name(kt, "argseq", op, "complex64", "uint32")
        yield n, f"MLXA_ARG_SEQ_COMPLEX({n}, {is_max})"
