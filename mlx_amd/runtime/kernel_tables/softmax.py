"""Kernel table of the softmax family (hip_kernels/softmax.hip): softmax and logsumexp
along the last axis. Loaded by path by kernel_table.py (standard library only).

Names: ``softmax_<layout>_<op>_<dtype>_<dtype>_w<W>`` with layout ``w2``/``w8`` (a wave
per row, 2 or 8 16-byte groups per lane in registers), ``b2``/``b8`` (a block per row,
2 or 8 groups per thread in registers; softmax only: logsumexp reads long rows once
anyway) and ``l`` (a block per row, looped, any length).
"""

DTYPES = ("float16", "bfloat16", "float32", "float64")
WAVES = (32, 64)
# layout -> (mode, groups per thread)
LAYOUTS = {"w2": ("kWave", 2), "w8": ("kWave", 8), "b2": ("kBlock", 2), "b8": ("kBlock", 8), "l": ("kLoop", 0)}
OPS = {"softmax": ("w2", "w8", "b2", "b8", "l"), "logsumexp": ("w2", "w8", "l")}


def kernel(kt, layout, op, dtype, wave):
    return kt.kernel_name("softmax", layout, op, dtype, dtype) + f"_w{int(wave)}"


def entries(kt):
    for op, layouts in OPS.items():
        lse = "true" if op == "logsumexp" else "false"
        for layout in layouts:
            mode, k = LAYOUTS[layout]
            for dt in DTYPES:
                ct = kt.CTYPES[dt]
                for w in WAVES:
                    name = kernel(kt, layout, op, dt, w)
                    if mode == "kLoop":
                        yield name, f"MLXA_SOFTMAX_LOOP({name}, {ct}, {w}, {lse})"
                    else:
                        yield name, f"MLXA_SOFTMAX_REGS({name}, {ct}, {w}, mlxa::smx::{mode}, {k}, {lse})"
