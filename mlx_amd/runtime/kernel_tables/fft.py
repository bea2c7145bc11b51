"""Kernel table of the fft family (hip_kernels/fft.hip): the scaling of inverse transforms
and the Hermitian clean-up before a complex-to-real transform; the transforms themselves
are the vendor library's. Standard library only (loaded by path)."""

BLOCK = 256                       # mlxa::kFftBlock
SCALE = "fft_scale_float32"       # x *= s over floats (complex64 as float pairs)
HERMITIAN = "fft_hermitian_complex64"


def entries(kt):
    yield SCALE, f"MLXA_FFT_SCALE({SCALE})"
    yield HERMITIAN, f"MLXA_FFT_HERMITIAN({HERMITIAN})"
