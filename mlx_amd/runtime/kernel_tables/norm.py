"""Kernel table of the norm family (hip_kernels/norm.hip): RMS norm and layer norm over
the last axis. Loaded by path by kernel_table.py (standard library only).

Names: ``norm_<layout>_<op>_<x dtype>_<out dtype>_w<W>``; op ``rms`` or ``ln``, or
``rmsadd`` (a residual add and the RMS norm of its sum, layout ``r`` only) or ``rmstwin``
(two RMS norms in one launch, layout ``r`` only); layout
``r`` (row in registers, REG_GROUPS 16-byte groups per thread) or ``l`` (looped).
Weight and bias come in the output dtype (the bridge casts them, as MLX does).
"""

# (x dtype, output dtype): the output is x's dtype, or float32 from a float32 weight
PAIRS = (("float32", "float32"), ("float16", "float16"), ("bfloat16", "bfloat16"),
         ("float16", "float32"), ("bfloat16", "float32"))
OPS = {"rms": "false", "ln": "true"}
LAYOUTS = ("r", "l")
REG_GROUPS = 4
WAVES = (32, 64)


def kernel(kt, layout, op, x, o, wave):
    return kt.kernel_name("norm", layout, op, x, o) + f"_w{int(wave)}"


# the residual add and its RMS norm in one pass (x, r, out in one dtype; row in registers)
ADD_DTYPES = ("float32", "float16", "bfloat16")


def add_kernel(kt, dt, wave):
    return kt.kernel_name("norm", "r", "rmsadd", dt, dt) + f"_w{int(wave)}"


# two RMS norms in one launch (an attention's q and k norms: Qwen 3, Gemma 3), row layout
def twin_kernel(kt, dt, wave):
    return kt.kernel_name("norm", "r", "rmstwin", dt, dt) + f"_w{int(wave)}"


def entries(kt):
    for dt in ADD_DTYPES:
        for w in WAVES:
            name = twin_kernel(kt, dt, w)
            yield name, f"MLXA_NORM_TWIN({name}, {kt.CTYPES[dt]}, {kt.CTYPES[dt]}, {w}, {REG_GROUPS}, false)"
    for dt in ADD_DTYPES:
        for w in WAVES:
            name = add_kernel(kt, dt, w)
            yield name, f"MLXA_NORM_ADD({name}, {kt.CTYPES[dt]}, {w}, {REG_GROUPS})"
    for op, ln in OPS.items():
        for layout in LAYOUTS:
            k = REG_GROUPS if layout == "r" else 0
            for x, o in PAIRS:
                for w in WAVES:
                    name = kernel(kt, layout, op, x, o, w)
                    yield name, f"MLXA_NORM({name}, {kt.CTYPES[x]}, {kt.CTYPES[o]}, {w}, {k}, {ln})"
