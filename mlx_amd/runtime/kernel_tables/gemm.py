"""gemm family (hip_kernels/gemm.hip): the portable tiled GEMM, one kernel per dtype
(not wave-dependent). Names: gemm_tiled_<dtype>_<dtype>. Standard library only."""

DTYPES = ("float32", "float64", "float16", "bfloat16", "complex64")
TILE_M, TILE_N, THREADS = 64, 64, 256   # mlxa::kTileM, kTileN, kGemmThreads


def name(kt, dtype):
    return kt.kernel_name("gemm", "tiled", None, dtype, dtype)


def entries(kt):
    for dt in DTYPES:
        n = name(kt, dt)
        yield n, f"MLXA_GEMM_TILED({n}, {kt.CTYPES[dt]})"
