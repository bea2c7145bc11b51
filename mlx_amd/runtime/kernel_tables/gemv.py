"""gemv family (hip_kernels/gemv.hip): two rows per wave, both wave widths.
Names: gemv_rows_<dtype>_<dtype>_w32 / _w64, and gemv_rmsrows_... (x made by an Add + RMSNorm
prologue). Standard library only (loaded by path)."""

DTYPES = ("float32", "float16", "bfloat16")
WAVES = (32, 64)


def name(kt, dtype, wave):
    return kt.kernel_name("gemv", "rows", None, dtype, dtype) + f"_w{wave}"


def rms_name(kt, dtype, wave):
    return kt.kernel_name("gemv", "rmsrows", None, dtype, dtype) + f"_w{wave}"


def entries(kt):
    for dt in DTYPES:
        for w in WAVES:
            n = name(kt, dt, w)
            yield n, f"MLXA_GEMV({n}, {kt.CTYPES[dt]}, {w})"
            n = rms_name(kt, dt, w)
            yield n, f"MLXA_GEMV_N({n}, {kt.CTYPES[dt]}, {w})"
