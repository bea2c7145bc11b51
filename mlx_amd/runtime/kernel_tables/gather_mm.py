"""Kernel table of the gather_mm family (hip_kernels/gather_mm.hip). Loaded by path
(standard library only).

Names: ``gather_mm_rows_<dt>_<dt>_w<W>`` (decode, M <= 8, a wave per output column) and
``gather_mm_tiled_<dt>_<dt>`` (any shape and strides, 64x64 tiles).
"""

DTYPES = ("float32", "float16", "bfloat16")
WAVES = (32, 64)


def rows(kt, dtype, wave):
    return kt.kernel_name("gather_mm", "rows", None, dtype, dtype) + f"_w{int(wave)}"


def tiled(kt, dtype):
    return kt.kernel_name("gather_mm", "tiled", None, dtype, dtype)


def entries(kt):
    for dt in DTYPES:
        ct = kt.CTYPES[dt]
        for w in WAVES:
            name = rows(kt, dt, w)
            yield name, f"MLXA_GMM_ROWS({name}, {ct}, {w})"
        name = tiled(kt, dt)
        yield name, f"MLXA_GMM_TILED({name}, {ct})"
