// fft family: the small elementwise steps around the vendor FFT library (hipFFT on AMD,
// cuFFT on the NVIDIA test GPU), which does the transforms themselves. Grid-stride
// loops; no wave-width dependence.
#include "mlxa/fft_args.h"
#include "mlxa/platform.h"

namespace mlxa {

constexpr int kFftBlock = 256;   // threads per block (mlx_amd/runtime/kernel_tables/fft.py)

MLXA_DEVICE void fft_scale(const FftScaleArgs& a) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const float s = a.scale;
  // buffers are the pool's (256-byte aligned): four floats per load
  const long long nv = a.n / 4;
  float4* v = (float4*)a.x;
  for (long long i = t; i < nv; i += stride) {
    float4 q = v[i];
    q.x *= s;
    q.y *= s;
    q.z *= s;
    q.w *= s;
    v[i] = q;
  }
  float* f = (float*)a.x;
  for (long long i = nv * 4 + t; i < a.n; i += stride) f[i] *= s;
}

MLXA_DEVICE void fft_hermitian(const FftHermitianArgs& a) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  float* f = (float*)a.x;
  for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < a.rows; r += stride) {
    f[2 * (r * a.m) + 1] = 0.0f;
    if (a.zero_last) f[2 * (r * a.m + a.m - 1) + 1] = 0.0f;
  }
}

}  // namespace mlxa

#define MLXA_FFT_SCALE(name) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::kFftBlock) name(FftScaleArgs a) { mlxa::fft_scale(a); }
#define MLXA_FFT_HERMITIAN(name) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::kFftBlock) name(FftHermitianArgs a) { mlxa::fft_hermitian(a); }

#include "fft.inc"
