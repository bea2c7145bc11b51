// Experiment, not part of the package: the 4-bit affine decode matvec (group 64, bfloat16 x,
// one row of x) four ways on the same data, against the device copy bandwidth:
//   package        quantized.hip's portable qmv (R4, k split 1/2/4)
//   h2             quantized.hip's qmv_h2 (packed half math), rows per wave and waves varied
//   package mma    quantized.hip's qmv_mma (the matrix unit: mma.sync m16n8k16)
//   v4             a standalone matrix-unit variant (scales of four groups in one read by the
//                  lanes that use them; ~10% ahead of the package's at large shapes)
//   stream         the portable kernel's loads with XORs for arithmetic (ALL=1): the memory
//                  side's own ceiling for that access pattern
// What was learnt with it (results/qmv_matrix_unit-h200.txt): reading x once per row group
// at 1:1 with w's bytes caps even the arithmetic-free probe at 0.75 of the copy bandwidth;
// nvcc splits (q & mask) | magic into two logic instructions unless told (a third more
// integer work in qmv); fewer instructions or more bytes in flight alone did not move qmv.
//
// Fragments (PTX m16n8k16; g = lane / 4, t = lane % 4): a warp owns 16 rows; per group of 64
// k, lane t of rows g and g + 8 holds 8 bytes (k0 + 16t .. + 16), a quad the group's 32. Word
// u holds nibbles k0 + 16t + 8u + i, i < 8; masking with 0x000F000F after shifts of 0/4/8/12
// pairs nibbles (i, i + 4), an A register's two k of one row. B holds x at the same k, paired
// by byte permutes (column 0: x's row; only quad 0 reads it).
//
//   mkdir -p /tmp/sw && touch /tmp/sw/quantized.inc
//   nvcc -O3 -std=c++17 --expt-relaxed-constexpr -arch=sm_90 -I hip_kernels/include \
//        -I /tmp/sw -I hip_kernels tools/qmv_mma.cu -o /tmp/sw/qmv_mma
//   /tmp/sw/qmv_mma     # weights cycled through 1 GiB (cold L2); SHAPE=i one shape; ALL=1 probe too
//   H2ONLY=1: qmv_h2 rows only. An A/B of qmv_h2 against an older quantized.hip in one run:
//   git show REV:hip_kernels/quantized.hip, cut after "}  // namespace mlxa", rename "namespace q {"
//   and "mlxa::q::" to q_old, and add -DQMV_H2_OLD='"<that file>"' to the build line.
//   Row "h2 S1": one stage, as the AMD build has it. (Session 30 timed two variants for the
//   per-launch cost here, a wave-spread last round and the whole ring loaded before x's staging:
//   within -3 / +8 % of the default, neither a winner; removed, benchmarks/results/qmv_h2_variants-h200.txt.)
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

__device__ __forceinline__ float bf_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf_hi(uint32_t v) { return __uint_as_float(v & 0xFFFF0000u); }

// v4: v1's mapping (x read only by the four lanes that hold B's column 0: x costs an eighth
// of w's bytes instead of twice them), scales and biases of four groups per row in one 8-byte
// read by the lanes that use them, a ring of two stages of four groups of w, FOLD, and the
// ones-MMA for sum(x). The memory-side probe (stream4) put reads of x at 1:1 with w at 0.75
// of the copy bandwidth with no arithmetic at all.
struct St4 { uint2 wa[4], wb[4]; uint2 s0, s1, b0, b1; };
template <int NW, int KS>
__global__ void __launch_bounds__(NW * 32) qmv_mma4(MmaArgs a) {
#if MLXA_MMA_SYNC   // the device pass for sm_80+ (mma.h has the MMA there only)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int tile = blockIdx.x * (NW / KS) + warp / KS, part = warp % KS;
  const int n0 = tile * 16;
  const int quads = a.k / 256, per = (quads + KS - 1) / KS;   // stages of 4 groups
  const int qb = part * per, qe = min(qb + per, quads);
  const int wrow = a.k / 8, srow = a.k / 64;
  const int r0 = min(n0 + g, a.n - 1), r1 = min(n0 + g + 8, a.n - 1);
  const uint32_t* w0 = a.w + (size_t)r0 * wrow + 2 * t + qb * 32;
  const uint32_t* w1 = a.w + (size_t)r1 * wrow + 2 * t + qb * 32;
  const uint2* s0p = reinterpret_cast<const uint2*>(reinterpret_cast<const unsigned short*>(a.s) + (size_t)r0 * srow) + qb;
  const uint2* s1p = reinterpret_cast<const uint2*>(reinterpret_cast<const unsigned short*>(a.s) + (size_t)r1 * srow) + qb;
  const uint2* b0p = reinterpret_cast<const uint2*>(reinterpret_cast<const unsigned short*>(a.b) + (size_t)r0 * srow) + qb;
  const uint2* b1p = reinterpret_cast<const uint2*>(reinterpret_cast<const unsigned short*>(a.b) + (size_t)r1 * srow) + qb;
  const uint4* xq = reinterpret_cast<const uint4*>(a.x + qb * 256 + 16 * t);
  const bool xl = g == 0;
  int ld = 0;
  auto load = [&](St4& st) {
    if (qb + ld < qe) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        st.wa[j] = *reinterpret_cast<const uint2*>(w0 + ld * 32 + j * 8);
        st.wb[j] = *reinterpret_cast<const uint2*>(w1 + ld * 32 + j * 8);
      }
      if (t == 0) {
        st.s0 = s0p[ld]; st.s1 = s1p[ld]; st.b0 = b0p[ld]; st.b1 = b1p[ld];
      }
    }
    ++ld;
  };
  St4 ra, rb;
  load(ra);
  load(rb);
  const uint32_t ones[4] = {0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u};
  float acc0 = 0.f, acc1 = 0.f;
  auto compute = [&](const St4& st, int qi) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint4 xa = make_uint4(0, 0, 0, 0), xb = xa;
      if (xl) {
        xa = xq[(qi * 4 + j) * 8];
        xb = xq[(qi * 4 + j) * 8 + 1];
      }
      const uint32_t xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
      float d[4] = {0.f, 0.f, 0.f, 0.f}, e[4] = {0.f, 0.f, 0.f, 0.f};
      const uint32_t wr0[2] = {st.wa[j].x, st.wa[j].y}, wr1[2] = {st.wb[j].x, st.wb[j].y};
#pragma unroll
      for (int wi = 0; wi < 2; ++wi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int sh0 = 8 * h, sh1 = 8 * h + 4;
          uint32_t A[4];
          A[0] = mlxa::q::and_or(wr0[wi] >> sh0, 0x000F000Fu, 0x43004300u);
          A[1] = mlxa::q::and_or(wr1[wi] >> sh0, 0x000F000Fu, 0x43004300u);
          A[2] = mlxa::q::and_or(wr0[wi] >> sh1, 0x000F000Fu, 0x43004300u);
          A[3] = mlxa::q::and_or(wr1[wi] >> sh1, 0x000F000Fu, 0x43004300u);
          const uint32_t lo = xv[4 * wi + h], hi = xv[4 * wi + h + 2];
          const uint32_t B0 = __byte_perm(lo, hi, 0x5410), B1 = __byte_perm(lo, hi, 0x7632);
          mlxa::mma::mma16816<bf>(d, A, B0, B1);
          mlxa::mma::mma16816<bf>(e, ones, B0, B1);
        }
      }
      const uint32_t sw0 = j < 2 ? st.s0.x : st.s0.y, sw1 = j < 2 ? st.s1.x : st.s1.y;
      const uint32_t bw0 = j < 2 ? st.b0.x : st.b0.y, bw1 = j < 2 ? st.b1.x : st.b1.y;
      const float sc0 = (j & 1) ? bf_hi(sw0) : bf_lo(sw0), sc1 = (j & 1) ? bf_hi(sw1) : bf_lo(sw1);
      const float bi0 = (j & 1) ? bf_hi(bw0) : bf_lo(bw0), bi1 = (j & 1) ? bf_hi(bw1) : bf_lo(bw1);
      acc0 += sc0 * d[0] + fmaf(-128.f, sc0, bi0) * e[0];
      acc1 += sc1 * d[2] + fmaf(-128.f, sc1, bi1) * e[2];
    }
  };
  for (int qi = 0; qb + qi < qe; qi += 2) {
    compute(ra, qi);
    load(ra);
    if (qb + qi + 1 >= qe) break;
    compute(rb, qi + 1);
    load(rb);
  }
  __shared__ float red[NW][16];
  if (t == 0) {
    red[warp][g] = acc0;
    red[warp][g + 8] = acc1;
  }
  __syncthreads();
  if (part == 0 && t == 0) {
    float q0 = 0.f, q1 = 0.f;
    for (int j = 0; j < KS; ++j) {
      q0 += red[warp + j][g];
      q1 += red[warp + j][g + 8];
    }
    if (n0 + g < a.n) a.y[n0 + g] = mlxa::cast<bf>(q0);
    if (n0 + g + 8 < a.n) a.y[n0 + g + 8] = mlxa::cast<bf>(q1);
  }
#endif
}

// The memory side alone: the package qmv's access pattern (4 rows a wave, one 16-byte chunk of
// each row a lane, 32 lanes side by side) with the arithmetic replaced by XORs. WHAT: 0 words
// only, 1 + scales and biases, 2 + x. If this streams near the copy bandwidth, the arithmetic
// and its latency are what hold the real kernel back; if not, the access pattern is.
template <int WHAT, int U>
__global__ void __launch_bounds__(128) stream4(MmaArgs a) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int row0 = (blockIdx.x * 4 + warp) * 4;
  const int chunks = a.k / 32, wrow = a.k / 8, srow = a.k / 64;
  uint32_t acc[4] = {0, 0, 0, 0};
  for (int c = lane; c < chunks; c += 32 * U) {
    uint4 v[U][4];
    unsigned short sv[U][4], bv[U][4];
    uint4 xv[U][4];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int cu = min(c + 32 * u, chunks - 1);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int rn = min(row0 + r, a.n - 1);
        v[u][r] = *reinterpret_cast<const uint4*>(a.w + (size_t)rn * wrow + cu * 4);
        if (WHAT >= 1) {
          sv[u][r] = reinterpret_cast<const unsigned short*>(a.s)[(size_t)rn * srow + cu / 2];
          bv[u][r] = reinterpret_cast<const unsigned short*>(a.b)[(size_t)rn * srow + cu / 2];
        }
      }
      if (WHAT >= 2) {
#pragma unroll
        for (int j = 0; j < 4; ++j) xv[u][j] = reinterpret_cast<const uint4*>(a.x + cu * 32)[j];
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        acc[r] ^= v[u][r].x ^ v[u][r].y ^ v[u][r].z ^ v[u][r].w;
        if (WHAT >= 1) acc[r] ^= sv[u][r] ^ bv[u][r];
        if (WHAT >= 2) acc[r] ^= xv[u][r].x ^ xv[u][r].w;
      }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    uint32_t t = acc[r];
    for (int o = 16; o; o >>= 1) t ^= __shfl_xor_sync(0xffffffffu, t, o);
    if (lane == 0 && row0 + r < a.n) a.y[row0 + r] = bf{(unsigned short)(t & 0x3fff)};
  }
}

// The package's kernels, for the same data.
__global__ void __launch_bounds__(128) qmv_pkg(QmvArgs a) { mlxa::q::qmv<bf, 4, mlxa::q::kAffine, 32>(a); }
__global__ void __launch_bounds__(128) qmv_pkg_mma(QmvArgs a) { mlxa::q::qmv_mma<bf, 64>(a); }

// qmv_h2 (packed half math, x staged in shared memory) with R rows per wave and NW waves a block.
// The sibling structs are kernel arguments, as in the package (a local copy indexed at run time
// would live in local memory).
template <int R, int NW, int S = 2, int MINB = 2>
__global__ void __launch_bounds__(NW * 32, MINB) qmv_h2_k(QmvSibs s, QmvArgs a, QmvSibRows r) {
  mlxa::q::qmv_h2<bf, 4, 32, mlxa::q::kPlainX, R, NW, S>(s, a, r);
}
#ifdef QMV_H2_OLD
// An earlier qmv_h2 for an A/B in one run: QMV_H2_OLD names a copy of an older quantized.hip
// whose namespace q was renamed q_old (and its kernel macros cut).
#include QMV_H2_OLD
template <int R, int NW, int S = 2, int MINB = 2>
__global__ void __launch_bounds__(NW * 32, MINB) qmv_h2_old_k(QmvSibs s, QmvArgs a, QmvSibRows r) {
  mlxa::q_old::qmv_h2<bf, 4, 32, false, R, NW, S>(s, a, r);
}
#endif

int main() {
  size_t pool = 1ull << 30;
  void *pa, *pb;
  float roof = pool_and_roofline(&pa, &pb, pool);
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  struct Shape { int N, K; const char* what; };
  Shape shapes[] = {{4096, 4096, "8b q/o"}, {1024, 4096, "8b k/v"}, {14336, 4096, "8b gate/up"},
                    {4096, 14336, "8b down"}, {2048, 2048, "1b q/o"}, {8192, 2048, "1b gate/up"},
                    {2048, 8192, "1b down"}, {128256, 4096, "8b head"}, {6144, 4096, "8b q+k+v"},
                    {28672, 4096, "8b gate+up"}, {3072, 2048, "1b q+k+v"}, {16384, 2048, "1b gate+up"}};
  bf *x, *y; double* yref;
  CK(cudaMalloc(&x, 32768 * 2)); CK(cudaMalloc(&y, 200000 * 2)); CK(cudaMalloc(&yref, 200000 * 8));
  fill_bf<<<64, 256>>>(x, 32768, 7, 2.0f);
  const char* only = getenv("SHAPE");   // e.g. SHAPE=2: one shape (for ncu)
  int si = -1;
  for (auto& s : shapes) {
    if (only && ++si != atoi(only)) continue;
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
    // the package's kernels, k split over 1, 2 and 4 waves (the planners choose among them)
    // the package's QmvArgs for weight copy i, k split over ks waves
    auto args = [&](int i, int ks) {
      QmvArgs q{};
      q.x = x; q.w = w + (size_t)i * wbytes / 4; q.scales = sc + (size_t)i * gbytes / 2;
      q.biases = bi + (size_t)i * gbytes / 2; q.out = y; q.m = 1; q.n = s.N; q.k = s.K; q.batch = 1;
      q.x_row = s.K; q.w_row = s.K / 8; q.s_row = q.b_row = s.K / 64; q.x_count = q.w_count = 1;
      q.group_shift = 6; q.x_vec = 1; q.w_vec = 1; q.ksplit = ks;
      for (int d = 0; d < MLXA_QBATCH; ++d) q.out_shape[d] = q.x_shape[d] = q.w_shape[d] = 1;
      return q;
    };
    // launch(i, ks) over k splits 1, 2, 4 (the planners choose among them)
    auto sweep = [&](const char* name, auto launch, int ks_max = 4) {
      for (int ks = 1; ks <= ks_max; ks *= 2) {
        Res r = measure([&](int i) { launch(i, ks); }, copies, bytes, y, yref, s.N);
        printf("  %-12s ks%d %8.2f us %7.1f GB/s %.3f roof  err %.1e\n", name, ks, r.us, r.gbs, r.gbs / roof, r.err);
      }
    };
    auto pkg_run = [&](auto kern, int rows_per_block_at_ks1, const char* name) {
      sweep(name, [&](int i, int ks) {
        const int rows = rows_per_block_at_ks1 / ks;
        kern<<<(unsigned)((s.N + rows - 1) / rows), 128>>>(args(i, ks));
      });
    };
    // qmv_h2: NW waves of R rows a block; cap: the grid's most blocks (they loop over the rest)
    // the package's launch: two blocks per SM, each looping over row blocks
    const int cap = 2 * sms;
    auto h2_run = [&](auto kern, int R, int NW, const char* name, int grid_cap = -1, int ks_max = 4) {
      if (grid_cap < 0) grid_cap = cap;
      sweep(name, [&](int i, int ks) {
        const int rows = NW / ks * R;
        kern<<<(unsigned)std::min((s.N + rows - 1) / rows, grid_cap), NW * 32, s.K / 32 * 72>>>(QmvSibs{}, args(i, ks),
                                                                                          QmvSibRows{});
      }, ks_max);
    };
    h2_run(qmv_h2_k<4, 8>, 4, 8, "h2 R4 NW8 P2");
    // one stage, as AMD builds it (kQmvH2Stages): there the first loads wait for x's staging
    h2_run(qmv_h2_k<4, 8, 1>, 4, 8, "h2 S1");
#ifdef QMV_H2_OLD
    h2_run(qmv_h2_old_k<4, 8>, 4, 8, "h2-old R4 NW8 P2");
#endif
    h2_run(qmv_h2_k<4, 8>, 4, 8, "h2 R4 NW8 all", 1 << 30);
    h2_run(qmv_h2_k<4, 8, 2, 1>, 4, 8, "h2 R4 NW8 B1 P2");
    if (getenv("H2ONLY")) continue;
    pkg_run(qmv_pkg, 4 * mlxa::q::kQmvRows, "package");
    pkg_run(qmv_pkg_mma, 4 * 16, "package mma");
    auto own_run = [&](auto kern, int blocks, const char* name) {
      auto run = [&](int i) {
        MmaArgs m{w + (size_t)i * wbytes / 4, sc + (size_t)i * gbytes / 2, bi + (size_t)i * gbytes / 2, x, y, s.N, s.K};
        kern<<<(unsigned)blocks, 128>>>(m);
      };
      Res r = measure(run, copies, bytes, y, yref, s.N);
      printf("  %-16s %8.2f us %7.1f GB/s %.3f roof  err %.1e\n", name, r.us, r.gbs, r.gbs / roof, r.err);
    };
    own_run(qmv_mma4<4, 2>, (s.N + 31) / 32, "v4 KS2");
    own_run(qmv_mma4<4, 4>, (s.N + 15) / 16, "v4 KS4");
    if (getenv("ALL")) {   // the memory side alone (err is meaningless there)
      own_run(stream4<0, 1>, (s.N + 15) / 16, "stream w");
      own_run(stream4<1, 4>, (s.N + 15) / 16, "stream w+s+b");
      own_run(stream4<2, 4>, (s.N + 15) / 16, "stream w+s+b+x");
    }
  }
  return 0;
}
