// Shared harness of the matrix-vector experiments (tools/matvec_sweep.cu, tools/qmv_mma.cu):
// the device copy roofline, deterministic fills, a float64 qmv reference and one timing rule
// (200 launches back to back over weight copies cycled through 1 GiB, or with ISOLATED=1 the
// median of 50 single launches), each result checked against the reference. Include after
// the kernel sources (it uses mlxa's bfloat16).
#pragma once
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

using bf = mlxa::bfloat16;

__device__ inline float bf2f(bf v) { return (float)mlxa::widen(v); }

// y[n] = sum_k (s q + b) x in float64, affine, group 64, `bits`-bit values
__global__ void ref_qmv(const uint32_t* w, const bf* sc, const bf* bi, const bf* x, double* y, long long N, long long K, int bits) {
  long long n = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (n >= N) return;
  double s = 0;
  const long long wr = K * bits / 32, gr = K / 64;
  for (long long k = 0; k < K; ++k) {
    long long bit = k * bits;
    uint32_t q = (w[n * wr + bit / 32] >> (bit % 32)) & ((1u << bits) - 1);
    float wv = bf2f(sc[n * gr + k / 64]) * (float)q + bf2f(bi[n * gr + k / 64]);
    s += (double)wv * (double)bf2f(x[k]);
  }
  y[n] = s;
}

static float copy_bw(void* a, void* b, size_t bytes) {
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (int i = 0; i < 3; ++i) CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
  cudaEventRecord(e0);
  for (int i = 0; i < 20; ++i) CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
  cudaEventRecord(e1); cudaEventSynchronize(e1);
  float ms; cudaEventElapsedTime(&ms, e0, e1);
  return 2.0 * bytes * 20 / (ms * 1e-3) / 1e9;
}

// The weight pool every measurement cycles through (1 GiB: nothing stays in the 50 MB L2)
// and the copy roofline measured on it, printed.
static float pool_and_roofline(void** pa, void** pb, size_t pool = 1ull << 30) {
  CK(cudaMalloc(pa, pool)); CK(cudaMalloc(pb, pool));
  float roof = copy_bw(*pa, *pb, 512ull << 20);
  printf("copy roofline %.1f GB/s\n", roof);
  return roof;
}

static std::vector<float> to_host_bf(const bf* d, size_t n) {
  std::vector<uint16_t> h(n); CK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) { uint32_t u = (uint32_t)h[i] << 16; memcpy(&f[i], &u, 4); }
  return f;
}

__global__ void fill_bf(bf* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed; h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
    float v = ((h & 0xffff) / 65536.0f - 0.5f) * scale;
    uint32_t u; memcpy(&u, &v, 4);
    p[i] = bf{(unsigned short)(u >> 16)};
  }
}
__global__ void fill_u32(uint32_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2246822519u ^ seed; h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15; p[i] = h;
  }
}

struct Res { float us, gbs, err; };

// run(i) launches the kernel on weight copy i; y0 is copy 0's output (N values)
template <typename Run>
static Res measure(Run run, int copies, size_t bytes, const bf* y0, const double* yref, long long N) {
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (int i = 0; i < copies; ++i) run(i);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  const int reps = 200;
  cudaEventRecord(e0);
  for (int i = 0; i < reps; ++i) run(i % copies);
  cudaEventRecord(e1); CK(cudaEventSynchronize(e1));
  float ms; cudaEventElapsedTime(&ms, e0, e1);
  float us = ms * 1e3f / reps;
  if (getenv("ISOLATED")) {
    std::vector<float> t;
    for (int i = 0; i < 50; ++i) {
      cudaEventRecord(e0);
      run(i % copies);
      cudaEventRecord(e1); cudaEventSynchronize(e1);
      float m; cudaEventElapsedTime(&m, e0, e1); t.push_back(m * 1e3f);
    }
    std::sort(t.begin(), t.end());
    us = t[t.size() / 2];
  }
  run(0);   // check copy 0's output
  CK(cudaDeviceSynchronize());
  std::vector<float> got = to_host_bf(y0, N);
  std::vector<double> ref(N); CK(cudaMemcpy(ref.data(), yref, N * 8, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (long long i = 0; i < N; ++i) { num = fmax(num, fabs(got[i] - ref[i])); den = fmax(den, fabs(ref[i])); }
  return {us, (float)(bytes / (us * 1e-6) / 1e9), (float)(num / (den + 1e-30))};
}
