// Argument structs of hip_kernels/fft.hip (packed by mlx_amd/runtime/ops/fft.py).
// Plain C with fixed-width fields and explicit padding; checked against the packer by
// tests/ops/test_fft_plans.py.
#pragma once

#include <stdint.h>

extern "C" {

// x[i] *= scale for i < n floats (a complex64 buffer counts two floats per element):
// the 1/n of inverse transforms, which hipFFT and cuFFT leave to the caller.
struct FftScaleArgs {
  void* x;
  int64_t n;
  float scale;
  uint32_t pad;
};

// Row-contiguous complex64 rows of m elements: zero the imaginary part of column 0 and,
// when zero_last, of column m - 1 (the Nyquist bin of an even length). A complex-to-real
// transform reads only the real parts there; the libraries do not promise to.
struct FftHermitianArgs {
  void* x;
  int64_t rows;
  int64_t m;
  int64_t zero_last;
};

}  // extern "C"
