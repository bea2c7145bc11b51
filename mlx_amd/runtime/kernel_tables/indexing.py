"""Kernel table of the indexing family (hip_kernels/indexing.hip); standard library only.

Copies (gather, take_along_axis, scatter/put_along_axis without reduction, slices) move
bits, so they are instantiated per element size under the unsigned type of that size;
reductions (sum/prod/max/min) per dtype. 64-bit index variants (``_i64``) exist for the
copies; reductions with more than 2^31 elements or offsets go to MLX's CPU.
``slice_twin``: two slice copies in one launch (an attention's k and v cache writes).
"""

BLOCK = 256   # MLXA_IDX_BLOCK
MASKED_THREADS, MASKED_TILE = 256, 4096   # MLXA_MASKED_THREADS, MLXA_MASKED_TILE

# element size -> the storage dtype its copies are instantiated for
BITS = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}

ALL = ("bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
       "float16", "bfloat16", "float32", "float64", "complex64")
# reduction -> (functor in mlxa::idx, dtypes); complex64 has no order (max/min) and MLX's
# complex product is not worth a kernel
REDUCE = {
    "sum": ("Sum", ALL),
    "prod": ("Prod", ALL[:-1]),
    "max": ("Max", ALL[:-1]),
    "min": ("Min", ALL[:-1]),
}
AXIS_REDUCE = ("sum",)    # ScatterAxis reductions


def name(kt, layout, op, dtype, large=False):
    return kt.kernel_name("indexing", layout, op, dtype, dtype, large)


def entries(kt):
    for dt in BITS.values():
        c = kt.CTYPES[dt]
        for large, it in ((False, "int32_t"), (True, "int64_t")):
            n = name(kt, "gather", None, dt, large)
            yield n, f"MLXA_GATHER({n}, {c}, {it})"
            n = name(kt, "gather_axis", None, dt, large)
            yield n, f"MLXA_GATHER_AXIS({n}, {c}, {it})"
            n = name(kt, "scatter", "none", dt, large)
            yield n, f"MLXA_SCATTER({n}, {c}, None, {it})"
            n = name(kt, "scatter_axis", "none", dt, large)
            yield n, f"MLXA_SCATTER_AXIS({n}, {c}, None, {it})"
            n = name(kt, "slice", "none", dt, large)
            yield n, f"MLXA_SLICE({n}, {c}, None, {it})"
            n = name(kt, "slice_twin", "none", dt, large)
            yield n, f"MLXA_SLICE_TWIN({n}, {c}, {it})"
    # MaskedScatter: count and scan do not depend on the data type; the scatter moves bits
    n = name(kt, "masked_count", None, "uint8")
    yield n, f"MLXA_MASKED_COUNT({n})"
    n = name(kt, "masked_scan", None, "uint8")
    yield n, f"MLXA_MASKED_SCAN({n})"
    for dt in BITS.values():
        n = name(kt, "masked_scatter", None, dt)
        yield n, f"MLXA_MASKED_SCATTER({n}, {kt.CTYPES[dt]})"
    for op, (fn, dtypes) in REDUCE.items():
        for dt in dtypes:
            c = kt.CTYPES[dt]
            n = name(kt, "scatter", op, dt)
            yield n, f"MLXA_SCATTER({n}, {c}, {fn}, int32_t)"
            n = name(kt, "slice", op, dt)
            yield n, f"MLXA_SLICE({n}, {c}, {fn}, int32_t)"
            if op in AXIS_REDUCE:
                n = name(kt, "scatter_axis", op, dt)
                yield n, f"MLXA_SCATTER_AXIS({n}, {c}, {fn}, int32_t)"
