"""Kernel table of the sdpa family (hip_kernels/sdpa.hip). Loaded by path by
kernel_table.py (standard library only).

Names:
  sdpa_decode_d<D>_r<R>_<dtype>   decode, head dim D (= value dim), R query rows per block
  sdpa_combine_<dtype>            split-K combine of the decode partials
  sdpa_rows_<dtype>_w<W>          prefill softmax of a score chunk, in place
  sdpa_scatter_<u16|u32|v16>      a prefill chunk's output into (B, Hq, Lq, Dv)
"""

DTYPES = ("float16", "bfloat16", "float32")
HEAD_DIMS = (64, 80, 96, 128, 256)
ROWS = (4,)
WAVES = (32, 64)
SCATTER = {"u16": "uint16_t", "u32": "uint32_t", "v16": "mlxa::sdpa::vec16"}


def decode(dtype, d, r):
    return f"sdpa_decode_d{int(d)}_r{int(r)}_{dtype}"


def combine(dtype):
    return f"sdpa_combine_{dtype}"


def rows(dtype, wave):
    return f"sdpa_rows_{dtype}_w{int(wave)}"


def scatter(kind):
    return f"sdpa_scatter_{kind}"


def entries(kt):
    for dt in DTYPES:
        ct = kt.CTYPES[dt]
        for d in HEAD_DIMS:
            for r in ROWS:
                yield decode(dt, d, r), f"MLXA_SDPA_DECODE({decode(dt, d, r)}, {ct}, {d}, {r})"
        yield combine(dt), f"MLXA_SDPA_COMBINE({combine(dt)}, {ct})"
        for w in WAVES:
            yield rows(dt, w), f"MLXA_SDPA_ROWS({rows(dt, w)}, {ct}, {w})"
    for kind, ct in SCATTER.items():
        yield scatter(kind), f"MLXA_SDPA_SCATTER({scatter(kind)}, {ct})"
