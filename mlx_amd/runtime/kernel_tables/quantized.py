"""quantized family (hip_kernels/quantized.hip). Standard library only (loaded by path).

Formats are (name, MLX mode id, bits): affine with 2, 3, 4, 5, 6, 8 bits, mxfp4, mxfp8,
nvfp4. Names:
  quantized_qmv_<fmt>_<dt>_<dt>_w<32|64>   decode matmul (rows of x <= 8)
  quantized_qmv_h2_a<2|4|8>_<dt>_<dt>_w<32|64>   the same on packed half math (16-bit x)
  quantized_qmv_h2n_a<2|4|8>_<dt>_<dt>_w<32|64>  qmv_h2 with x made by an Add + RMSNorm prologue
  quantized_qmv_h2g_a<2|4|8>_<dt>_<dt>_w<32|64>  qmv_h2 of gate and up, also storing silu(gate) * up
  quantized_qmv_h2ng_a<2|4|8>_<dt>_<dt>_w<32|64> both: the RMS norm prologue and the GLU epilogue
  quantized_qmv_mma_a4_g<gs>_<dt>           the same on the matrix unit (4-bit affine, 16-bit x;
                                            mma.sync, MFMA, gfx12 WMMA: elsewhere its body traps)
  quantized_dequant_<fmt>_<dt>_<dt>               packed w -> dtype
  quantized_quantize_a<bits>_<dt>_<dt>            affine quantization
  quantized_fp8_to_<dt>_uint8 / quantized_fp8_from_uint8_<dt>   fast::ConvertFP8
  quantized_qdq_<fmt>_<dt>_<dt>                   QQMatmul's x: fp quantization and back
"""

DTYPES = ("float32", "float16", "bfloat16")
WAVES = (32, 64)
QMV_MAX_M = 8           # rows of x the decode kernel takes (one block per row and row block)
QMV_WAVES = 4           # mlxa::q::kQmvWaves
QMV_ROWS = 4            # mlxa::q::kQmvRows
BLOCK = 256             # mlxa::q::kBlock
QMV_H2_THREADS = 256    # mlxa::q::kQmvH2Threads: 256 // wave width row groups a block
QMV_H2_ROWS = {2: 4, 4: 4, 8: 2}   # mlxa::q::H2Fmt<B>::R
QMV_H2_DTYPES = ("float16", "bfloat16")
QMV_H2_SMEM_PER_CHUNK = 72          # dynamic shared bytes per 32 values of k (half2 x + sum, scale)
QMV_MMA_WAVES = 4       # mlxa::q::kQmvMmaWaves
QMV_MMA_STAGE = 256     # mlxa::q::kQmvMmaStage (k per stage of mma.sync's loads: K a multiple there)
QMV_MMA_DTYPES = ("float16", "bfloat16")
QMV_MMA_GROUPS = (32, 64, 128)
QMV_MMA_BACKENDS = ("mma_sync", "mfma", "wmma_gfx12")   # kernel_table.matrix_tiles names with a qmv_mma backend
AFFINE_BITS = (2, 3, 4, 5, 6, 8)
MODES = {"affine": 0, "mxfp4": 1, "mxfp8": 2, "nvfp4": 3}
# fmt name -> (mode id, bits, values per chunk)
FORMATS = {**{f"a{b}": (0, b, 32) for b in AFFINE_BITS},
           "mxfp4": (1, 4, 32), "mxfp8": (2, 8, 32), "nvfp4": (3, 4, 16)}


def fmt_name(mode: int, bits: int):
    for name, (m, b, _cv) in FORMATS.items():
        if m == mode and b == bits:
            return name
    return None


def qmv_name(kt, fmt, dt, wave):
    return kt.kernel_name("quantized", "qmv", fmt, dt, dt) + f"_w{wave}"


def qmv_h2_name(kt, bits, dt, wave):
    return kt.kernel_name("quantized", "qmv_h2", f"a{int(bits)}", dt, dt) + f"_w{wave}"


def qmv_h2n_name(kt, bits, dt, wave):
    return kt.kernel_name("quantized", "qmv_h2n", f"a{int(bits)}", dt, dt) + f"_w{wave}"


def qmv_h2g_name(kt, bits, dt, wave):
    return kt.kernel_name("quantized", "qmv_h2g", f"a{int(bits)}", dt, dt) + f"_w{wave}"


def qmv_h2ng_name(kt, bits, dt, wave):
    return kt.kernel_name("quantized", "qmv_h2ng", f"a{int(bits)}", dt, dt) + f"_w{wave}"


def qmv_mma_name(kt, dt, gs):
    return kt.kernel_name("quantized", "qmv_mma", f"a4_g{int(gs)}", dt, dt)


def dequant_name(kt, fmt, dt):
    return kt.kernel_name("quantized", "dequant", fmt, dt, dt)


def quantize_name(kt, bits, dt):
    return kt.kernel_name("quantized", "quantize", f"a{bits}", dt, dt)


def fp8_name(kt, to_fp8, dt):
    return kt.kernel_name("quantized", "fp8", "to" if to_fp8 else "from",
                          dt if to_fp8 else "uint8", "uint8" if to_fp8 else dt)


QDQ_FORMATS = ("mxfp4", "mxfp8", "nvfp4")


def qdq_name(kt, fmt, dt):
    return kt.kernel_name("quantized", "qdq", fmt, dt, dt)


def entries(kt):
    for fmt, (mode, bits, _cv) in FORMATS.items():
        for dt in DTYPES:
            ct = kt.CTYPES[dt]
            for w in WAVES:
                n = qmv_name(kt, fmt, dt, w)
                yield n, f"MLXA_QMV({n}, {ct}, {bits}, {mode}, {w})"
            n = dequant_name(kt, fmt, dt)
            yield n, f"MLXA_QDEQUANT({n}, {ct}, {bits}, {mode})"
    for bits in QMV_H2_ROWS:
        for dt in QMV_H2_DTYPES:
            for w in WAVES:
                n = qmv_h2_name(kt, bits, dt, w)
                yield n, f"MLXA_QMV_H2({n}, {kt.CTYPES[dt]}, {bits}, {w})"
                n = qmv_h2n_name(kt, bits, dt, w)
                yield n, f"MLXA_QMV_H2N({n}, {kt.CTYPES[dt]}, {bits}, {w})"
                n = qmv_h2g_name(kt, bits, dt, w)
                yield n, f"MLXA_QMV_H2G({n}, {kt.CTYPES[dt]}, {bits}, {w})"
                n = qmv_h2ng_name(kt, bits, dt, w)
                yield n, f"MLXA_QMV_H2NG({n}, {kt.CTYPES[dt]}, {bits}, {w})"
    for dt in QMV_MMA_DTYPES:
        for gs in QMV_MMA_GROUPS:
            n = qmv_mma_name(kt, dt, gs)
            yield n, f"MLXA_QMV_MMA({n}, {kt.CTYPES[dt]}, {gs})"
    for bits in AFFINE_BITS:
        for dt in DTYPES:
            n = quantize_name(kt, bits, dt)
            yield n, f"MLXA_QUANTIZE({n}, {kt.CTYPES[dt]}, {bits})"
    for dt in DTYPES:
        n = fp8_name(kt, True, dt)
        yield n, f"MLXA_TO_FP8({n}, {kt.CTYPES[dt]})"
        n = fp8_name(kt, False, dt)
        yield n, f"MLXA_FROM_FP8({n}, {kt.CTYPES[dt]})"
    for fmt in QDQ_FORMATS:
        for dt in DTYPES:
            n = qdq_name(kt, fmt, dt)
            yield n, f"MLXA_QDQ({n}, {kt.CTYPES[dt]}, {FORMATS[fmt][0]})"
