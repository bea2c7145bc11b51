"""Kernel table of the hadamard family (hip_kernels/hadamard.hip): one pass of the
Hadamard transform, templated on the odd factor m. Loaded by path (standard library only).

Names: ``hadamard_m<m>_<in>_<out>``. (T, T) runs a single pass; (T, float32) the first of
several passes and (float32, T) the last (float32 in between, 16-bit types rounded once).
"""

MS = (1, 12, 20, 28)
DTYPES = ("float32", "float16", "bfloat16")
PAIRS = tuple((d, d) for d in DTYPES) + tuple(
    p for d in DTYPES[1:] for p in ((d, "float32"), ("float32", d)))


def kernel(kt, m, in_dtype, out_dtype):
    return kt.kernel_name("hadamard", f"m{int(m)}", None, in_dtype, out_dtype)


def entries(kt):
    for m in MS:
        for i, o in PAIRS:
            name = kernel(kt, m, i, o)
            yield name, f"MLXA_HADAMARD({name}, {kt.CTYPES[i]}, {kt.CTYPES[o]}, {m})"
