"""gemv family (hip_kernels/gemv.hip): two rows per wave, both wave widths.
Names: gemv_rows_<dtype>_<dtype>_w32 / _w64. Standard library only (loaded by path)."""

DTYPES = ("float32", "float16", "bfloat16")
WAVES = (32, 64)


def name(kt, dtype, wave):
    return kt.kernel_name("gemv", "rows", None, dtype, dtype) + f"_w{wave}"


def entries(kt):
    for dt in DTYPES:
        for w in WAVES:
            n = name(kt, dt, w)
            yield n, f"MLXA_GEMV({n}, {kt.CTYPES[dt]}, {w})"
