// Variant sweep of the matrix-vector kernels (hip_kernels/gemv.hip, quantized.hip's qmv) at
// LLM decode shapes: GB/s of each (rows per wave R, steps in flight U, k split) against the
// device copy bandwidth measured in the same run, every result checked against a float64
// reference. How kGemvRows/kGemvSteps, kQmvRows/kQmvSteps and plan.ksplit's per_cu were
// chosen (benchmarks/results/matvec_sweep-h200.txt). On the NVIDIA test GPU:
//
//   mkdir -p /tmp/sw && touch /tmp/sw/gemv.inc /tmp/sw/quantized.inc
//   nvcc -O3 -std=c++17 --expt-relaxed-constexpr -arch=sm_90 -I hip_kernels/include \
//        -I /tmp/sw -I hip_kernels tools/matvec_sweep.cu -o /tmp/sw/sweep
//   /tmp/sw/sweep            # kernels back to back;  ISOLATED=1: one launch at a time
//
// (the empty .inc files stand in for the generated instantiation lists).
#include "gemv.hip"
#include "quantized.hip"
#include "matvec_bench.cuh"

template <int R, int U> __global__ void __launch_bounds__(128) gv_new(GemvArgs a) {
  mlxa::gemv<bf, 32, R, U>(GemvSibs{}, a, GemvSibRows{});
}
template <int R, int U> __global__ void __launch_bounds__(128) qv_new(QmvArgs a) { mlxa::q::qmv<bf, 4, mlxa::q::kAffine, 32, R, U>(a); }
template <int R, int U> __global__ void __launch_bounds__(128) qv8_new(QmvArgs a) { mlxa::q::qmv<bf, 8, mlxa::q::kAffine, 32, R, U>(a); }

__global__ void ref_gemv(const bf* w, const bf* x, double* y, long long N, long long K) {
  long long n = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (n >= N) return;
  double s = 0;
  for (long long k = 0; k < K; ++k) s += (double)bf2f(w[n * K + k]) * (double)bf2f(x[k]);
  y[n] = s;
}
typedef void (*GvK)(GemvArgs);
typedef void (*QvK)(QmvArgs);

int main() {
  size_t pool = 1ull << 30;
  void *pa, *pb;
  float roof = pool_and_roofline(&pa, &pb, pool);
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  struct Shape { long long N, K; const char* what; };
  Shape shapes[] = {{4096, 4096, "8b q/o"}, {1024, 4096, "8b k/v"}, {14336, 4096, "8b gate/up"}, {4096, 14336, "8b down"},
                    {128256, 4096, "8b head"}, {2048, 2048, "1b q/o"}, {512, 2048, "1b k/v"}, {8192, 2048, "1b gate/up"},
                    {2048, 8192, "1b down"}, {128256, 2048, "1b head"}, {6144, 4096, "8b q+k+v"},
                    {28672, 4096, "8b gate+up"}, {3072, 2048, "1b q+k+v"}, {16384, 2048, "1b gate+up"}};
  bf *x, *y; double* yref;
  CK(cudaMalloc(&x, 32768 * 2)); CK(cudaMalloc(&y, 200000 * 2 * 8)); CK(cudaMalloc(&yref, 200000 * 8));
  fill_bf<<<64, 256>>>(x, 32768, 7, 2.0f);
  // ---------------- gemv bf16
  for (auto& s : shapes) {
    size_t bytes = (size_t)s.N * s.K * 2;
    int copies = (int)std::min<size_t>(64, pool / bytes);
    if (copies < 1) { printf("skip\n"); continue; }
    bf* w = (bf*)pa;
    fill_bf<<<1024, 256>>>(w, bytes / 2 * copies, 11, 0.2f);
    ref_gemv<<<(s.N + 127) / 128, 128>>>(w, x, yref, s.N, s.K);
    CK(cudaDeviceSynchronize());
    auto args = [&](int i, int ks) {
      GemvArgs a{}; a.w = w + (size_t)i * s.N * s.K; a.x = x; a.y = y; a.rows = s.N; a.k = s.K; a.ldw = s.K; a.incx = 1;
      a.alpha = 1; a.beta = 0; a.ksplit = ks; return a;
    };
    printf("gemv bf16 %lldx%lld (%s) %.1f MB x%d\n", s.N, s.K, s.what, bytes / 1e6, copies);
    struct V { GvK k; int R, U; };
    V vs[] = {{gv_new<1, 4>, 1, 4}, {gv_new<2, 4>, 2, 4}, {gv_new<4, 2>, 4, 2}, {gv_new<4, 4>, 4, 4}, {gv_new<8, 2>, 8, 2}, {gv_new<2, 8>, 2, 8}};
    for (auto& v : vs)
      for (int ks = 1; ks <= 4; ks *= 2) {
        long long grid = (s.N + (4 / ks) * v.R - 1) / ((4 / ks) * v.R);
        Res r = measure([&](int i) { v.k<<<dim3(grid), 128>>>(args(i, ks)); }, copies, bytes, y, yref, s.N);
        printf("  R%d U%d ks%d     %8.2f us %7.1f GB/s %.3f roof  err %.1e\n", v.R, v.U, ks, r.us, r.gbs, r.gbs / roof, r.err);
      }
  }
  // ---------------- qmv affine g64 bf16, 4 and 8 bits
  for (int bits : {4, 8}) {
    for (auto& s : shapes) {
      size_t wbytes = (size_t)s.N * s.K * bits / 8, gbytes = (size_t)s.N * (s.K / 64) * 2;
      size_t bytes = wbytes + 2 * gbytes;
      int copies = (int)std::min<size_t>(64, pool / (wbytes + 2 * gbytes + 4096));
      uint32_t* w = (uint32_t*)pa;
      bf* sc = (bf*)pb;
      bf* bi = sc + gbytes / 2 * copies;
      if ((size_t)2 * gbytes * copies > pool) copies = pool / (2 * gbytes);
      fill_u32<<<1024, 256>>>(w, wbytes / 4 * copies, 5);
      fill_bf<<<1024, 256>>>(sc, gbytes / 2 * copies, 3, 0.02f);
      fill_bf<<<1024, 256>>>(bi, gbytes / 2 * copies, 9, 0.2f);
      ref_qmv<<<(s.N + 127) / 128, 128>>>(w, sc, bi, x, yref, s.N, s.K, bits);
      CK(cudaDeviceSynchronize());
      auto args = [&](int i, int ks) {
        QmvArgs a{};
        a.x = x; a.w = w + (size_t)i * wbytes / 4; a.scales = sc + (size_t)i * gbytes / 2; a.biases = bi + (size_t)i * gbytes / 2;
        a.lhs = a.rhs = nullptr; a.out = y; a.m = 1; a.n = s.N; a.k = s.K; a.batch = 1; a.x_row = s.K;
        a.w_row = s.K * bits / 32; a.s_row = a.b_row = s.K / 64; a.x_count = a.w_count = 1; a.group_shift = 6;
        a.nb = a.x_nb = a.w_nb = 0; a.x_vec = 1; a.w_vec = 1; a.gather = 0; a.ksplit = ks;
        for (int d = 0; d < MLXA_QBATCH; ++d) { a.out_shape[d] = a.x_shape[d] = a.w_shape[d] = 1; }
        return a;
      };
      printf("qmv %d-bit g64 bf16 %lldx%lld (%s) %.1f MB x%d\n", bits, s.N, s.K, s.what, bytes / 1e6, copies);
      struct V { QvK k; int R, U; };
      V v4[] = {{qv_new<4, 1>, 4, 1}, {qv_new<4, 2>, 4, 2}, {qv_new<2, 2>, 2, 2}, {qv_new<2, 4>, 2, 4}, {qv_new<8, 1>, 8, 1}, {qv_new<8, 2>, 8, 2}, {qv_new<1, 4>, 1, 4}};
      V v8[] = {{qv8_new<4, 1>, 4, 1}, {qv8_new<4, 2>, 4, 2}, {qv8_new<2, 2>, 2, 2}, {qv8_new<2, 4>, 2, 4}, {qv8_new<8, 1>, 8, 1}, {qv8_new<8, 2>, 8, 2}, {qv8_new<1, 4>, 1, 4}};
      for (auto& v : (bits == 4 ? v4 : v8))
        for (int ks = 1; ks <= 4; ks *= 2) {
          long long grid = (s.N + (4 / ks) * v.R - 1) / ((4 / ks) * v.R);
          Res r = measure([&](int i) { v.k<<<dim3(grid), 128>>>(args(i, ks)); }, copies, bytes, y, yref, s.N);
          printf("  R%d U%d ks%d     %8.2f us %7.1f GB/s %.3f roof  err %.1e\n", v.R, v.U, ks, r.us, r.gbs, r.gbs / roof, r.err);
        }
    }
  }
  printf("SMs %d\n", sms);
  return 0;
}
