"""Kernel table of the rope family (hip_kernels/rope.hip). Loaded by path by
kernel_table.py (standard library only). Names: ``rope_g_<dtype>_<dtype>`` (strided
input, both layouts and every option by arguments), ``rope_t_<dtype>_<dtype>`` (two
rotations in one launch: an attention's q and k), ``rope_kv_<dtype>_<dtype>`` (q's and k's
rotations and the k and v cache writes in one launch)."""

DTYPES = ("float32", "float16", "bfloat16")


def kernel(kt, dtype):
    return kt.kernel_name("rope", "g", None, dtype, dtype)


def twin(kt, dtype):
    return kt.kernel_name("rope", "t", None, dtype, dtype)


def kv(kt, dtype):
    return kt.kernel_name("rope", "kv", None, dtype, dtype)


def entries(kt):
    for dt in DTYPES:
        name = kernel(kt, dt)
        yield name, f"MLXA_ROPE({name}, {kt.CTYPES[dt]})"
        name = twin(kt, dt)
        yield name, f"MLXA_ROPE_TWIN({name}, {kt.CTYPES[dt]})"
        name = kv(kt, dt)
        yield name, f"MLXA_ROPE_KV({name}, {kt.CTYPES[dt]})"
