"""Kernel table of the layout family (hip_kernels/layout.hip); standard library only.

Select, the strided-output copy (Concatenate slabs, Pad interiors) and the fill move
bits, so they exist per element size under the unsigned type of that size, with 32-bit
and 64-bit (``_i64``) index variants for the strided ones. Arange is per stored type:
integer outputs by size (wrapping arithmetic keeps the low bits), floats per dtype.
"""

BLOCK = 256   # MLXA_BLOCK_MAX

SIZES = ("uint8", "uint16", "uint32", "uint64")
ARANGE_FLOATS = ("float16", "bfloat16", "float32", "float64")


def name(kt, layout, op, dtype, large=False):
    return kt.kernel_name("layout", layout, op, dtype, dtype, large)


def entries(kt):
    for dt in SIZES:
        c = kt.CTYPES[dt]
        for large, it in ((False, "int32_t"), (True, "int64_t")):
            n = name(kt, "g", "select", dt, large)
            yield n, f"MLXA_LAYOUT_SELECT({n}, {c}, {it})"
            n = name(kt, "g", "copy", dt, large)
            yield n, f"MLXA_LAYOUT_COPY({n}, {c}, {it})"
        n = name(kt, "v", "fill", dt)
        yield n, f"MLXA_LAYOUT_FILL({n}, {c})"
        n = name(kt, "v", "arange", dt)
        yield n, f"MLXA_LAYOUT_ARANGE({n}, {c}, false)"
    for dt in ARANGE_FLOATS:
        n = name(kt, "v", "arange", dt)
        yield n, f"MLXA_LAYOUT_ARANGE({n}, {kt.CTYPES[dt]}, true)"
