"""Kernel table of the conv family (hip_kernels/conv.hip); standard library only.

im2col moves bits: one kernel per element size (2, 4, 8 bytes: float16/bfloat16,
float32, float64). Names: conv_im2col_<uintN>_<uintN>."""

BLOCK = 256    # MLXA_CONV_BLOCK
BITS = {2: "uint16", 4: "uint32", 8: "uint64"}


def name(kt, size):
    dt = BITS[size]
    return kt.kernel_name("conv", "im2col", None, dt, dt)


def entries(kt):
    for size, dt in BITS.items():
        n = name(kt, size)
        yield n, f"MLXA_IM2COL({n}, {kt.CTYPES[dt]})"
