"""Kernel table of the linalg family (hip_kernels/linalg.hip): the elementwise steps
around the solver library's factorizations. Loaded by path (standard library only).

Names: ``linalg_tri_<dt>_<dt>`` (clear one triangle of each matrix in place) and
``linalg_eye_<dt>_<dt>`` (identity matrices), ``linalg_diag_<dt>_<dt>`` (the first zero
diagonal entry of each matrix: a singular triangular matrix's error code),
``linalg_lupiv_int32_uint32`` (an LU's row swaps as MLX's pivots and permutation).
"""

DTYPES = ("float32", "float64")
FUNCS = ("tri", "eye", "diag")
LUPIV = "linalg_lupiv_int32_uint32"    # LU row swaps -> MLX's pivots and row permutation


def kernel(kt, fn, dtype):
    return kt.kernel_name("linalg", fn, None, dtype, dtype)


def entries(kt):
    for fn in FUNCS:
        for dt in DTYPES:
            name = kernel(kt, fn, dt)
            yield name, f"MLXA_LINALG({name}, {fn}, {kt.CTYPES[dt]})"
    yield LUPIV, f"MLXA_LINALG({LUPIV}, lupiv, int32_t)"
