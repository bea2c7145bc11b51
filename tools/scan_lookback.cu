// Experiment, not part of the package (written in session 11, not yet run): one long row of
// float32, inclusive cumsum, in a single pass with decoupled look-back, against CUB's
// DeviceScan::InclusiveSum and the device copy in the same run. The package's scan takes two
// passes for few long rows (chunk totals, then each chunk from the totals before it) and reached
// 0.33 of the copy bandwidth on 2^26 elements (results/row_kernels-h200.txt); one pass moves 8
// bytes an element instead of 12.
//
// Each block takes the next tile (an atomic ticket, so every tile's predecessors are running or
// done: no deadlock whatever order the hardware starts blocks in), scans it like scan.hip's row
// kernel (K 16-byte groups per lane, wave scans with a running carry, wave totals through shared
// memory), publishes the tile's total as "aggregate", and its first wave looks back over the
// tiles before it, a wave-width window at a time: it waits for every tile of the window to have
// published, sums the aggregates back to the nearest tile that published its "inclusive" prefix,
// and publishes its own inclusive prefix. A status is one 64-bit word (flag << 32 | value bits),
// so a reader never sees a flag without its value. Porting to scan.hip: 64-bit values (float64,
// int64, logaddexp states) need a 128-bit status or a flag written after a fence.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 tools/scan_lookback.cu -o /tmp/scan_lookback
//   /tmp/scan_lookback [log2 n, default 26]
#include <cub/cub.cuh>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

constexpr int BLOCK = 256, W = 32, K = 4, V = 4;
constexpr int TILE = BLOCK * K * V;              // 4096 elements
constexpr unsigned FULL = 0xffffffffu;
constexpr unsigned long long AGG = 1, INC = 2;   // flags; 0: not published yet

__device__ __forceinline__ unsigned long long pack(unsigned long long flag, float v) {
  return (flag << 32) | __float_as_uint(v);
}

__device__ __forceinline__ float wave_inclusive(float x, int lane) {
#pragma unroll
  for (int d = 1; d < W; d <<= 1) {
    const float y = __shfl_up_sync(FULL, x, d);
    if (lane >= d) x += y;
  }
  return x;
}

__global__ void __launch_bounds__(BLOCK) scan_lookback(const float* in, float* out, long long n,
                                                       unsigned long long* status, unsigned* ticket) {
  __shared__ unsigned tile_s;
  __shared__ float wtot[BLOCK / W];
  __shared__ float prefix_s;
  if (threadIdx.x == 0) tile_s = atomicAdd(ticket, 1u);
  __syncthreads();
  const long long tile = tile_s;
  const int lane = threadIdx.x % W, wi = threadIdx.x / W;
  const long long w0 = tile * TILE + (long long)wi * W * K * V;

  float x[K][V];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const long long p = w0 + (long long)(k * W + lane) * V;
    if (p + V <= n) {
      const float4 q = *(const float4*)(in + p);
      x[k][0] = q.x, x[k][1] = q.y, x[k][2] = q.z, x[k][3] = q.w;
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) x[k][j] = p + j < n ? in[p + j] : 0.0f;
    }
  }
  float pre[K], wc = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
#pragma unroll
    for (int j = 1; j < V; ++j) x[k][j] += x[k][j - 1];
    const float inc = wave_inclusive(x[k][V - 1], lane);
    const float exc = __shfl_up_sync(FULL, inc, 1);
    pre[k] = wc + (lane == 0 ? 0.0f : exc);
    wc += __shfl_sync(FULL, inc, W - 1);
  }
  if (lane == W - 1) wtot[wi] = wc;
  __syncthreads();
  float before = 0.0f, agg = 0.0f;
#pragma unroll
  for (int i = 0; i < BLOCK / W; ++i) {
    if (i < wi) before += wtot[i];
    agg += wtot[i];
  }

  if (wi == 0) {
    if (tile == 0) {
      if (lane == 0) {
        atomicExch(&status[0], pack(INC, agg));
        prefix_s = 0.0f;
      }
    } else {
      if (lane == 0) atomicExch(&status[tile], pack(AGG, agg));
      float excl = 0.0f;
      for (long long look = tile - 1;; look -= W) {
        const long long idx = look - lane;   // lane 0: the nearest predecessor
        unsigned long long s = idx >= 0 ? *(volatile unsigned long long*)&status[idx] : pack(INC, 0.0f);
        while (__any_sync(FULL, (s >> 32) == 0)) {
          if ((s >> 32) == 0) s = *(volatile unsigned long long*)&status[idx];
        }
        const unsigned incl = __ballot_sync(FULL, (s >> 32) == INC);
        const int stop = incl ? __ffs(incl) - 1 : W - 1;   // lanes 0..stop count
        float v = lane <= stop ? __uint_as_float((unsigned)s) : 0.0f;
#pragma unroll
        for (int d = W / 2; d > 0; d >>= 1) v += __shfl_xor_sync(FULL, v, d);
        excl += v;
        if (incl) break;
      }
      if (lane == 0) {
        atomicExch(&status[tile], pack(INC, excl + agg));
        prefix_s = excl;
      }
    }
  }
  __syncthreads();
  const float base = prefix_s + before;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const long long p = w0 + (long long)(k * W + lane) * V;
    const float b = base + pre[k];
    if (p + V <= n) {
      *(float4*)(out + p) = make_float4(b + x[k][0], b + x[k][1], b + x[k][2], b + x[k][3]);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (p + j < n) out[p + j] = b + x[k][j];
    }
  }
}

template <typename F>
static float time_ms(F f, int reps = 20) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  f();   // warm-up
  CK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) f();
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms = 0.0f;
  CK(cudaEventElapsedTime(&ms, a, b));
  return ms / reps;
}

int main(int argc, char** argv) {
  const int lg = argc > 1 ? std::atoi(argv[1]) : 26;
  const long long n = 1ll << lg;
  const long long tiles = (n + TILE - 1) / TILE;
  std::vector<float> h(n);
  unsigned r = 12345u;
  for (auto& v : h) {
    r = r * 1664525u + 1013904223u;
    v = (float)((r >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
  float *in, *out, *ref;
  unsigned long long* status;
  unsigned* ticket;
  CK(cudaMalloc(&in, n * 4));
  CK(cudaMalloc(&out, n * 4));
  CK(cudaMalloc(&ref, n * 4));
  CK(cudaMalloc(&status, tiles * 8));
  CK(cudaMalloc(&ticket, 4));
  CK(cudaMemcpy(in, h.data(), n * 4, cudaMemcpyHostToDevice));

  auto ours = [&] {
    CK(cudaMemsetAsync(status, 0, tiles * 8));
    CK(cudaMemsetAsync(ticket, 0, 4));
    scan_lookback<<<(unsigned)tiles, BLOCK>>>(in, out, n, status, ticket);
  };
  size_t temp_bytes = 0;
  CK(cub::DeviceScan::InclusiveSum(nullptr, temp_bytes, in, ref, n));
  void* temp;
  CK(cudaMalloc(&temp, temp_bytes));
  auto cub_scan = [&] { CK(cub::DeviceScan::InclusiveSum(temp, temp_bytes, in, ref, n)); };
  auto copy = [&] { CK(cudaMemcpyAsync(out, in, n * 4, cudaMemcpyDeviceToDevice)); };

  // correctness against a float64 running sum (and CUB's float32 result beside it)
  ours();
  cub_scan();
  CK(cudaDeviceSynchronize());
  CK(cudaGetLastError());
  std::vector<float> got(n), theirs(n);
  CK(cudaMemcpy(got.data(), out, n * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(theirs.data(), ref, n * 4, cudaMemcpyDeviceToHost));
  double acc = 0.0, worst_ours = 0.0, worst_cub = 0.0, mag = 0.0;
  for (long long i = 0; i < n; ++i) {
    acc += h[i];
    mag = std::max(mag, std::fabs(acc));
    worst_ours = std::max(worst_ours, std::fabs(got[i] - acc));
    worst_cub = std::max(worst_cub, std::fabs(theirs[i] - acc));
  }
  std::printf("n = 2^%d: largest error against float64, ours %.3g, CUB %.3g (running sums up to %.3g)\n",
              lg, worst_ours, worst_cub, mag);

  const float t_copy = time_ms(copy), t_ours = time_ms(ours), t_cub = time_ms(cub_scan);
  const double bytes = 8.0 * n;
  std::printf("copy %.1f GB/s; lookback scan %.1f GB/s (%.2f of copy, %.2fx CUB); CUB %.1f GB/s (%.2f of copy)\n",
              bytes / t_copy / 1e6, bytes / t_ours / 1e6, t_copy / t_ours, t_cub / t_ours,
              bytes / t_cub / 1e6, t_copy / t_cub);
  return worst_ours <= 4.0 * std::max(worst_cub, 1e-3) ? 0 : 1;
}
