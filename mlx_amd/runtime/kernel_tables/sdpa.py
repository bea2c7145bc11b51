"""Kernel table of the sdpa family (hip_kernels/sdpa.hip). Loaded by path by
kernel_table.py (standard library only).

Names:
  sdpa_decode_d<D>_r<R>_<dtype>   decode, head dim D (= value dim), R query rows per block
  sdpa_decode_mma_d<D>_<dtype>    decode on the matrix unit (mlxa/mma.h), 16-bit dtypes, 16 rows
  sdpa_flash_d<D>_<dtype>         flash prefill, head dim D (= value dim), tiles flash_config
  sdpa_flash_mma_d<D>_<dtype>     flash prefill on the matrix unit (mlxa/mma.h), 16-bit dtypes
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


FLASH_SHARED = 48 << 10    # static shared memory a CUDA kernel may declare (AMD: 64 KiB LDS)
FLASH_ACC = 32             # O accumulators per thread at most (registers)
FLASH_TILES = ((4, 4), (4, 3), (4, 2), (2, 2), (2, 1), (1, 1))   # (RQ, KQ), largest first
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4}


def flash_config(dtype, d):
    """(RQ, KQ) of the flash kernel: query tile 16 RQ rows, key tile 16 KQ rows, the largest
    whose Q, K (padded rows) and V tiles fit FLASH_SHARED; None: no flash kernel."""
    isz = ITEMSIZE[dtype]
    pitch = d + 16 // isz
    for rq, kq in FLASH_TILES:
        shared = (16 * rq * pitch + 16 * kq * pitch + 16 * kq * d) * isz
        if shared <= FLASH_SHARED and rq * (d // 16) <= FLASH_ACC:
            return rq, kq
    return None


def flash(dtype, d):
    return f"sdpa_flash_d{int(d)}_{dtype}"


MMA_DTYPES = ("float16", "bfloat16")
MMA_HEAD_DIMS = (64, 80, 96, 128)   # 256: the O accumulators and Q operands outgrow the registers
MMA_WAVES = 4                       # mlxa::sdpa::kMmaWaves: 16 query rows each


def flash_mma(dtype, d):
    return f"sdpa_flash_mma_d{int(d)}_{dtype}"


def decode_mma(dtype, d):
    return f"sdpa_decode_mma_d{int(d)}_{dtype}"


DECODE_MMA_WAVES = 2                # mlxa::sdpa::kDecodeMmaWaves
DECODE_MMA_ROWS = 16                # query rows of a kv head per block (one matrix tile)


def decode_mma_block(backend):
    """Threads per block of the matrix-unit decode kernel (its waves are the backend's own)."""
    return DECODE_MMA_WAVES * (64 if backend == "mfma" else 32)


def flash_mma_rows():
    """Query rows per block of the matrix-unit kernel."""
    return 16 * MMA_WAVES


def flash_mma_block(backend):
    """Threads per block: MMA_WAVES of the backend's own wave (MFMA's is 64 lanes; the
    others 32), whatever wave width the rest of the launchers emulate."""
    return MMA_WAVES * (64 if backend == "mfma" else 32)


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
        for d in HEAD_DIMS:
            cfg = flash_config(dt, d)
            if cfg:
                yield flash(dt, d), f"MLXA_SDPA_FLASH({flash(dt, d)}, {ct}, {d}, {cfg[0]}, {cfg[1]})"
        if dt in MMA_DTYPES:
            for d in MMA_HEAD_DIMS:
                yield flash_mma(dt, d), f"MLXA_SDPA_FLASH_MMA({flash_mma(dt, d)}, {ct}, {d})"
                yield decode_mma(dt, d), f"MLXA_SDPA_DECODE_MMA({decode_mma(dt, d)}, {ct}, {d})"
        for w in WAVES:
            yield rows(dt, w), f"MLXA_SDPA_ROWS({rows(dt, w)}, {ct}, {w})"
    for kind, ct in SCATTER.items():
        yield scatter(kind), f"MLXA_SDPA_SCATTER({scatter(kind)}, {ct})"
