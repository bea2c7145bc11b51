"""Kernel table of the masked_mm family (hip_kernels/masked_mm.hip): block masks for
BlockMaskedMM, one kernel per dtype (a bool mask or one of that dtype, chosen at run time).
Names: ``masked_mm_bmask_<dt>_<dt>``. Loaded by path (standard library only)."""

DTYPES = ("float16", "bfloat16", "float32", "float64")


def kernel(kt, dtype):
    return kt.kernel_name("masked_mm", "bmask", None, dtype, dtype)


def entries(kt):
    for dt in DTYPES:
        name = kernel(kt, dt)
        yield name, f"MLXA_BMASK({name}, {kt.CTYPES[dt]})"
