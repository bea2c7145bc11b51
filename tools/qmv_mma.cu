// Experiment, not part of the package: a 4-bit affine qmv (group 64, bfloat16 x, one row of
// x) whose dot products run on the tensor cores (mma.sync m16n8k16 bf16 -> f32), against the
// package's qmv (quantized.hip, R4 U1) on the same data and the device copy bandwidth. The
// question it answers: can the decode matvec get near the bandwidth bound once dequantizing
// costs ~1.5 operations per value instead of the FMA path's ~3.7 (session 6's ncu counters:
// issue slots 42-57% busy, DRAM 21-32%)? If it can, the design ports to AMD's matrix cores
// (MFMA on CDNA, WMMA on RDNA 3/4), each with its own fragment layout.
//
// Why it stays exact: q is an integer below 16, exact in bfloat16 (magic 0x4300 = 128.0:
// (0x4300 | q) is 128 + q, minus 128 in bfloat16 is q); q * x is exact in float32; the MMA
// accumulates in float32. Each MMA covers 16 consecutive k of one quantization group, so the
// group's scale and bias apply after it, as the FMA path does: s * sum(q x) + b * sum(x).
//
// Mapping (PTX ISA m16n8k16 fragments; g = lane / 4, t = lane % 4): a warp owns 16 rows; per
// group of 64 k, lane t of rows g and g + 8 loads 8 bytes (k0 + 16t .. + 16), so a quad reads
// the group's 32 bytes. Word u of them holds nibbles k0 + 16t + 8u + i, i < 8; masking with
// 0x000F000F after shifts of 0/4/8/12 pairs nibbles (i, i + 4) in one 32-bit register, which
// is what an A register holds (two k of one row). MMA (u, h) takes pairs 2h and 2h + 1 of word
// u; B holds the x values of the same k, paired the same way by byte permutes (column 0: x's
// row; the other seven columns are zero for one row of x).
//
//   nvcc -O3 -std=c++17 --expt-relaxed-constexpr -arch=sm_90 -I hip_kernels/include \
//        -I /tmp/sw -I hip_kernels tools/qmv_mma.cu -o /tmp/sw/qmv_mma    (touch /tmp/sw/quantized.inc)
//   /tmp/sw/qmv_mma          # back to back, weights cycled through 1 GiB;  ISOLATED=1: one at a time
#include <cuda_bf16.h>

#include "quantized.hip"
#include "matvec_bench.cuh"

struct MmaArgs {
  const uint32_t* w;      // N rows of K/8 words
  const bf* s;            // N rows of K/64 scales
  const bf* b;            // and biases
  const bf* x;            // K
  bf* y;                  // N
  int n, k;
};

__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// two nibbles (i, i + 4) of a word, already shifted to bits 0 and 16, as bfloat16 q values
__device__ __forceinline__ uint32_t q_pair(uint32_t v) {
  uint32_t m = (v & 0x000F000Fu) | 0x43004300u;      // 128 + q, twice
  __nv_bfloat162 h = *reinterpret_cast<__nv_bfloat162*>(&m);
  const __nv_bfloat162 c = __floats2bfloat162_rn(128.0f, 128.0f);
  h = __hsub2(h, c);                                  // exact: q < 16
  return *reinterpret_cast<uint32_t*>(&h);
}

__device__ __forceinline__ float bf_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf_hi(uint32_t v) { return __uint_as_float(v & 0xFFFF0000u); }

// KS warps of a block split k for one 16-row tile (4 / KS tiles per block); U groups in flight
template <int KS, int U>
__global__ void __launch_bounds__(128) qmv_mma(MmaArgs a) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int tile = blockIdx.x * (4 / KS) + warp / KS, part = warp % KS;
  const int n0 = tile * 16;
  const int groups = a.k / 64, per = groups / KS;
  const int gb = part * per, ge = gb + per;
  const int wrow = a.k / 8, srow = groups;
  const uint32_t* w0 = a.w + (size_t)(n0 + g) * wrow + 2 * t;
  const uint32_t* w1 = w0 + (size_t)8 * wrow;
  const bool xl = g == 0;                             // lanes of B's column 0
  float acc0 = 0.f, acc1 = 0.f;
  for (int gi = gb; gi < ge; gi += U) {
    uint2 wa[U], wb[U];
    uint4 xa[U], xb[U];
    uint32_t sc[U][2], bi[U][2];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int grp = gi + u;
      wa[u] = *reinterpret_cast<const uint2*>(w0 + grp * 8);
      wb[u] = *reinterpret_cast<const uint2*>(w1 + grp * 8);
      if (xl) {
        const uint4* xp = reinterpret_cast<const uint4*>(a.x + grp * 64 + 16 * t);
        xa[u] = xp[0];
        xb[u] = xp[1];
      } else {
        xa[u] = xb[u] = make_uint4(0, 0, 0, 0);
      }
      const unsigned short* sp = reinterpret_cast<const unsigned short*>(a.s);
      const unsigned short* bp = reinterpret_cast<const unsigned short*>(a.b);
      sc[u][0] = sp[(size_t)(n0 + g) * srow + grp];
      sc[u][1] = sp[(size_t)(n0 + g + 8) * srow + grp];
      bi[u][0] = bp[(size_t)(n0 + g) * srow + grp];
      bi[u][1] = bp[(size_t)(n0 + g + 8) * srow + grp];
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      // x of this lane's 16 k as 8 words of two bfloat16 (k offsets 2v, 2v + 1)
      const uint32_t xv[8] = {xa[u].x, xa[u].y, xa[u].z, xa[u].w, xb[u].x, xb[u].y, xb[u].z, xb[u].w};
      float sx = 0.f;
#pragma unroll
      for (int v = 0; v < 8; ++v) sx += bf_lo(xv[v]) + bf_hi(xv[v]);
      sx += __shfl_xor_sync(0xffffffffu, sx, 1);
      sx += __shfl_xor_sync(0xffffffffu, sx, 2);
      sx = __shfl_sync(0xffffffffu, sx, t);             // the group's sum of x (lanes 0-3 hold it)
      float d[4] = {0.f, 0.f, 0.f, 0.f};
      const uint32_t wr0[2] = {wa[u].x, wa[u].y}, wr1[2] = {wb[u].x, wb[u].y};
#pragma unroll
      for (int wi = 0; wi < 2; ++wi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int s0 = 8 * h, s1 = 8 * h + 4;         // shifts of pairs 2h and 2h + 1
          uint32_t A[4];
          A[0] = q_pair(wr0[wi] >> s0);
          A[1] = q_pair(wr1[wi] >> s0);
          A[2] = q_pair(wr0[wi] >> s1);
          A[3] = q_pair(wr1[wi] >> s1);
          // k offsets (within the lane's 16) of A's pairs: (8wi + 2h, +4) and (8wi + 2h + 1, +5)
          const uint32_t lo = xv[4 * wi + h], hi = xv[4 * wi + h + 2];
          const uint32_t B0 = __byte_perm(lo, hi, 0x5410), B1 = __byte_perm(lo, hi, 0x7632);
          mma16816(d, A, B0, B1);
        }
      }
      // column 0 of D: rows g (d[0]) and g + 8 (d[2]) at lanes with t == 0
      acc0 += bf_lo(sc[u][0]) * d[0] + bf_lo(bi[u][0]) * sx;
      acc1 += bf_lo(sc[u][1]) * d[2] + bf_lo(bi[u][1]) * sx;
    }
  }
  __shared__ float red[4][16];
  if (t == 0) {
    red[warp][g] = acc0;
    red[warp][g + 8] = acc1;
  }
  __syncthreads();
  if (part == 0 && t == 0) {
    float r0 = 0.f, r1 = 0.f;
    for (int j = 0; j < KS; ++j) {
      r0 += red[warp + j][g];
      r1 += red[warp + j][g + 8];
    }
    a.y[n0 + g] = mlxa::cast<bf>(r0);
    a.y[n0 + g + 8] = mlxa::cast<bf>(r1);
  }
}

// The package's qmv at its chosen shape, for the same data.
__global__ void __launch_bounds__(128) qmv_pkg(QmvArgs a) { mlxa::q::qmv<bf, 4, mlxa::q::kAffine, 32>(a); }

int main() {
  size_t pool = 1ull << 30;
  void *pa, *pb;
  float roof = pool_and_roofline(&pa, &pb, pool);
  struct Shape { int N, K; const char* what; };
  Shape shapes[] = {{4096, 4096, "8b q/o"}, {1024, 4096, "8b k/v"}, {14336, 4096, "8b gate/up"},
                    {4096, 14336, "8b down"}, {2048, 2048, "1b q/o"}, {8192, 2048, "1b gate/up"},
                    {2048, 8192, "1b down"}, {128256, 4096, "8b head"}};
  bf *x, *y; double* yref;
  CK(cudaMalloc(&x, 32768 * 2)); CK(cudaMalloc(&y, 200000 * 2)); CK(cudaMalloc(&yref, 200000 * 8));
  fill_bf<<<64, 256>>>(x, 32768, 7, 2.0f);
  for (auto& s : shapes) {
    const size_t wbytes = (size_t)s.N * s.K / 2, gbytes = (size_t)s.N * (s.K / 64) * 2;
    const size_t bytes = wbytes + 2 * gbytes;
    int copies = (int)std::min<size_t>(64, pool / (wbytes + 4096));
    copies = (int)std::min<size_t>(copies, pool / (2 * gbytes + 4096));
    uint32_t* w = (uint32_t*)pa;
    bf* sc = (bf*)pb;
    bf* bi = sc + gbytes / 2 * copies;
    fill_u32<<<1024, 256>>>(w, wbytes / 4 * copies, 5);
    fill_bf<<<1024, 256>>>(sc, gbytes / 2 * copies, 3, 0.02f);
    fill_bf<<<1024, 256>>>(bi, gbytes / 2 * copies, 9, 0.2f);
    ref_qmv<<<(s.N + 127) / 128, 128>>>(w, sc, bi, x, yref, s.N, s.K, 4);
    CK(cudaDeviceSynchronize());
    printf("qmv 4-bit g64 bf16 %dx%d (%s) %.1f MB x%d\n", s.N, s.K, s.what, bytes / 1e6, copies);
    // the package's kernel, k split as plan.ksplit would choose among 1/2/4 (all three shown)
    for (int ks = 1; ks <= 4; ks *= 2) {
      auto run = [&](int i) {
        QmvArgs q{};
        q.x = x; q.w = w + (size_t)i * wbytes / 4; q.scales = sc + (size_t)i * gbytes / 2;
        q.biases = bi + (size_t)i * gbytes / 2; q.out = y; q.m = 1; q.n = s.N; q.k = s.K; q.batch = 1;
        q.x_row = s.K; q.w_row = s.K / 8; q.s_row = q.b_row = s.K / 64; q.x_count = q.w_count = 1;
        q.group_shift = 6; q.x_vec = 1; q.w_vec = 1; q.ksplit = ks;
        for (int d = 0; d < MLXA_QBATCH; ++d) q.out_shape[d] = q.x_shape[d] = q.w_shape[d] = 1;
        const long long grid = (s.N + (4 / ks) * mlxa::q::kQmvRows - 1) / ((4 / ks) * mlxa::q::kQmvRows);
        qmv_pkg<<<(unsigned)grid, 128>>>(q);
      };
      Res r = measure(run, copies, bytes, y, yref, s.N);
      printf("  package R%d ks%d   %8.2f us %7.1f GB/s %.3f roof  err %.1e\n", mlxa::q::kQmvRows, ks, r.us, r.gbs,
             r.gbs / roof, r.err);
    }
    auto mma_run = [&](auto kern, int ks, int u) {
      const int groups = s.K / 64;
      if (groups % (ks * u)) return;
      auto run = [&](int i) {
        MmaArgs m{w + (size_t)i * wbytes / 4, sc + (size_t)i * gbytes / 2, bi + (size_t)i * gbytes / 2, x, y, s.N, s.K};
        kern<<<(unsigned)(s.N / 16 / (4 / ks)), 128>>>(m);
      };
      Res r = measure(run, copies, bytes, y, yref, s.N);
      printf("  mma KS%d U%d       %8.2f us %7.1f GB/s %.3f roof  err %.1e\n", ks, u, r.us, r.gbs, r.gbs / roof, r.err);
    };
    mma_run(qmv_mma<1, 2>, 1, 2);
    mma_run(qmv_mma<2, 2>, 2, 2);
    mma_run(qmv_mma<4, 2>, 4, 2);
    mma_run(qmv_mma<4, 4>, 4, 4);
    mma_run(qmv_mma<2, 4>, 2, 4);
  }
  return 0;
}
