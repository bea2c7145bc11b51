// gemm family: the portable tiled GEMM, for what the vendor libraries refuse (a dtype
// or arch they lack, a missing library) and as the twin the GPU suite checks them
// against. Any element strides for A and B (no copies), 64-bit offsets, fp32
// accumulation for the 16-bit floats, fp64 for float64, complex for complex64.
// 64x64 output tile per block of 256 threads (4x4 per thread), k in steps of 16
// through shared memory. Correct first; the vendor libraries are the fast path.
#include "mlxa/gemm_args.h"
#include "mlxa/types.h"

namespace mlxa {

constexpr int kTileM = 64, kTileN = 64, kTileK = 16, kGemmThreads = 256;

// accumulator arithmetic: a real compute type, or complex64 as (re, im) floats
template <typename C> MLXA_DEVICE C acc_zero() { return C(0); }
template <> MLXA_DEVICE complex64 acc_zero<complex64>() { return complex64{0.0f, 0.0f}; }
template <typename C> MLXA_DEVICE void acc_madd(C& c, C x, C y) { c += x * y; }
MLXA_DEVICE void acc_madd(complex64& c, complex64 x, complex64 y) {
  c.real += x.real * y.real - x.imag * y.imag;
  c.imag += x.real * y.imag + x.imag * y.real;
}
template <typename T> MLXA_DEVICE compute_t<T> acc_load(T v) { return widen(v); }
MLXA_DEVICE complex64 acc_load(complex64 v) { return v; }

template <typename T, typename C>
MLXA_DEVICE T acc_store(C acc, double alpha, double beta, const T* old) {
  if constexpr (std::is_same_v<T, complex64>) {
    const float al = (float)alpha, be = (float)beta;
    complex64 r{al * acc.real, al * acc.imag};
    if (beta != 0.0) { r.real += be * old->real; r.imag += be * old->imag; }
    return r;
  } else {
    C r = (C)alpha * acc;
    if (beta != 0.0) r += (C)beta * acc_load(*old);
    return cast<T>(r);
  }
}

template <typename T>
MLXA_DEVICE void gemm_tiled(const GemmArgs& g) {
  using C = std::conditional_t<std::is_same_v<T, complex64>, complex64, compute_t<T>>;
  __shared__ C As[kTileK][kTileM + 1];
  __shared__ C Bs[kTileK][kTileN + 1];
  const T* A = (const T*)g.a + (long long)blockIdx.z * g.a_bs;
  const T* B = (const T*)g.b + (long long)blockIdx.z * g.b_bs;
  T* D = (T*)g.d + (long long)blockIdx.z * g.d_bs;
  const T* Cm = (const T*)g.c + (long long)blockIdx.z * g.c_bs;
  const long long m0 = (long long)blockIdx.y * kTileM, n0 = (long long)blockIdx.x * kTileN;
  const int t = threadIdx.x, tr = t / 16, tc = t % 16;
  C acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = acc_zero<C>();
  for (long long k0 = 0; k0 < g.k; k0 += kTileK) {
    // 1024 elements of each tile, 4 per thread
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int idx = t + e * kGemmThreads;
      const int kk = idx / kTileM, mm = idx % kTileM;   // A tile: kTileK x kTileM
      const long long gm = m0 + mm, gk = k0 + kk;
      As[kk][mm] = (gm < g.m && gk < g.k) ? acc_load(A[gm * g.a_rs + gk * g.a_cs]) : acc_zero<C>();
      const int kb = idx / kTileN, nn = idx % kTileN;   // B tile: kTileK x kTileN
      const long long gn = n0 + nn, gkb = k0 + kb;
      Bs[kb][nn] = (gn < g.n && gkb < g.k) ? acc_load(B[gkb * g.b_rs + gn * g.b_cs]) : acc_zero<C>();
    }
    sync_block();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      C av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) { av[i] = As[kk][tr + 16 * i]; bv[i] = Bs[kk][tc + 16 * i]; }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc_madd(acc[i][j], av[i], bv[j]);
    }
    sync_block();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const long long gm = m0 + tr + 16 * i;
    if (gm >= g.m) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const long long gn = n0 + tc + 16 * j;
      if (gn >= g.n) continue;
      D[gm * g.ldd + gn] = acc_store<T>(acc[i][j], g.alpha, g.beta, Cm + gm * g.c_rs + gn * g.c_cs);
    }
  }
}

}  // namespace mlxa

#define MLXA_GEMM_TILED(name, T) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::kGemmThreads) name(GemmArgs g) { mlxa::gemm_tiled<T>(g); }

#include "gemm.inc"
