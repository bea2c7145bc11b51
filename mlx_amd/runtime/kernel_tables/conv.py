"""Kernel table of the conv family (hip_kernels/conv.hip); standard library only.

im2col moves bits: one kernel per element size (2, 4, 8 bytes: float16/bfloat16,
float32, float64). Names: conv_im2col_<uintN>_<uintN>.

conv_mma_<dtype>_m<BM>: the implicit GEMM on the matrix unit (mlxa/mma.h) for the 16-bit
float dtypes, BM output positions by MMA_BN output channels a block (MMA_WAVES waves)."""

BLOCK = 256    # MLXA_CONV_BLOCK
BITS = {2: "uint16", 4: "uint32", 8: "uint64"}

MMA_DTYPES = ("float16", "bfloat16")
MMA_BM = (128, 64)   # position tiles: 64 where 128 leaves the device's units idle
MMA_BN = 64          # mlxa::conv::kConvBN
MMA_BK = 32          # mlxa::conv::kConvBK
MMA_WAVES = 4        # mlxa::conv::kConvWaves


def name(kt, size):
    dt = BITS[size]
    return kt.kernel_name("conv", "im2col", None, dt, dt)


def mma(dtype, bm):
    return f"conv_mma_{dtype}_m{int(bm)}"


def mma_block(backend):
    """Threads per block: MMA_WAVES of the backend's own wave (MFMA's is 64 lanes)."""
    return MMA_WAVES * (64 if backend == "mfma" else 32)


def entries(kt):
    for size, dt in BITS.items():
        n = name(kt, size)
        yield n, f"MLXA_IM2COL({n}, {kt.CTYPES[dt]})"
    for dt in MMA_DTYPES:
        for bm in MMA_BM:
            yield mma(dt, bm), f"MLXA_CONV_MMA({mma(dt, bm)}, {kt.CTYPES[dt]}, {bm})"
