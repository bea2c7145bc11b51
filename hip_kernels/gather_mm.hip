// GatherMM family: mx.gather_mm, out[i] = a[lhs[i]] @ b[rhs[i]] (mlx-lm's SwitchGLU for
// unquantized mixture-of-experts). float32/float16/bfloat16, accumulation in float32,
// one rounding on store.
//   rows  decode (M <= 8): one wave per output column n, lanes stride over K reading b's
//         column (contiguous along K when b is a transposed weight: SwitchLinear) and
//         the M rows of a; the wave reduces each of the M sums. 16-byte loads when K is
//         contiguous and aligned, element loads otherwise (chosen per wave).
//   tiled any shape and strides: 64x64 output tiles, 16-deep K steps through shared
//         memory, 4x4 outputs per thread.
// Indices are uint32 (MLX casts them); an index past the last matrix is clamped to it
// (MLX's CPU reads out of bounds there).
#include "mlxa/gather_mm_args.h"
#include "mlxa/types.h"
#include "mlxa/wave.h"

namespace mlxa::gmm {

constexpr int kRowsWaves = 4;   // output columns (waves) per block of the rows kernel
constexpr int kMaxM = 8;        // rows of a the rows kernel takes
constexpr int kTile = 64;       // tiled kernel: output tile edge
constexpr int kDepth = 16;      // tiled kernel: K step
constexpr int kThreads = 256;   // tiled kernel: threads per block

MLXA_DEVICE long long loc(long long i, const int64_t* shape, const int64_t* strides, int nd) {
  long long off = 0;
  for (int d = 0; d < nd; ++d) {
    const long long q = i / shape[d];
    off += (i - q * shape[d]) * strides[d];
    i = q;
  }
  return off;
}

// element offsets of output matrix i's a and b matrices
MLXA_DEVICE void operands(const GatherMMArgs& p, long long i, long long& ao, long long& bo) {
  long long ia = p.lhs[loc(i, p.idx_shape, p.lhs_strides, p.nd_idx)];
  long long ib = p.rhs[loc(i, p.idx_shape, p.rhs_strides, p.nd_idx)];
  ia = ia < p.a_mats ? ia : p.a_mats - 1;
  ib = ib < p.b_mats ? ib : p.b_mats - 1;
  ao = loc(ia, p.a_shape, p.a_strides, p.nd_a);
  bo = loc(ib, p.b_shape, p.b_strides, p.nd_b);
}

template <typename T, int W>
MLXA_DEVICE void rows(const GatherMMArgs& p) {
  constexpr int V = 16 / sizeof(T);
  const long long bx = blockIdx.x;
  const long long i = bx / p.tiles_n;
  const long long n = (bx - i * p.tiles_n) * kRowsWaves + wave_index<W>();
  const int lane = wave_lane<W>();
  const int M = (int)p.M;
  const long long K = p.K;
  long long ao, bo;
  operands(p, i, ao, bo);
  const bool live = n < p.N;
  const T* a = (const T*)p.a + ao;
  const T* b = (const T*)p.b + bo + (live ? n : 0) * p.b_cs;
  float acc[kMaxM];
#pragma unroll
  for (int m = 0; m < kMaxM; ++m) acc[m] = 0.0f;
  if (live) {
    const bool vec = p.b_rs == 1 && p.a_cs == 1 && K % V == 0 && (M == 1 || p.a_rs % V == 0) &&
                     ((unsigned long long)a % 16) == 0 && ((unsigned long long)b % 16) == 0;
    if (vec) {
      using Vt = Vec<T, V>;
      const long long nv = K / V;
      for (long long v = lane; v < nv; v += W) {
        const Vt bv = ((const Vt*)b)[v];
#pragma unroll
        for (int m = 0; m < kMaxM; ++m) {
          if (m < M) {
            const Vt av = ((const Vt*)(a + m * p.a_rs))[v];
#pragma unroll
            for (int j = 0; j < V; ++j) acc[m] += (float)widen(av.v[j]) * (float)widen(bv.v[j]);
          }
        }
      }
    } else {
      for (long long k = lane; k < K; k += W) {
        const float bv = (float)widen(b[k * p.b_rs]);
#pragma unroll
        for (int m = 0; m < kMaxM; ++m)
          if (m < M) acc[m] += (float)widen(a[m * p.a_rs + k * p.a_cs]) * bv;
      }
    }
  }
  // every lane of the wave takes part (an emulated wave synchronises here); M is uniform
  T* out = (T*)p.out + i * p.M * p.N;
#pragma unroll
  for (int m = 0; m < kMaxM; ++m) {
    if (m < M) {
      const float r = wave_reduce<W>(acc[m], [](float x, float y) { return x + y; });
      if (live && lane == 0) out[m * p.N + n] = cast<T>(r);
    }
  }
}

template <typename T>
MLXA_DEVICE void tiled(const GatherMMArgs& p) {
  __shared__ float As[kDepth][kTile + 1];
  __shared__ float Bs[kDepth][kTile + 1];
  const long long bx = blockIdx.x;
  const long long per = p.tiles_n * p.tiles_m;
  const long long i = bx / per;
  const long long t = bx - i * per;
  const long long m0 = (t / p.tiles_n) * kTile, n0 = (t % p.tiles_n) * kTile;
  long long ao, bo;
  operands(p, i, ao, bo);
  const T* a = (const T*)p.a + ao;
  const T* b = (const T*)p.b + bo;
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const bool a_k_fast = p.a_cs == 1;   // walk memory in its contiguous direction
  const bool b_k_fast = p.b_rs == 1 && p.b_cs != 1;
  float acc[4][4];
#pragma unroll
  for (int u = 0; u < 4; ++u)
#pragma unroll
    for (int v = 0; v < 4; ++v) acc[u][v] = 0.0f;

  for (long long k0 = 0; k0 < p.K; k0 += kDepth) {
#pragma unroll
    for (int u = 0; u < (kTile * kDepth) / kThreads; ++u) {
      const int e = tid + u * kThreads;
      const int am = a_k_fast ? e / kDepth : e % kTile, ak = a_k_fast ? e % kDepth : e / kTile;
      const long long gm = m0 + am, gk = k0 + ak;
      As[ak][am] = (gm < p.M && gk < p.K) ? (float)widen(a[gm * p.a_rs + gk * p.a_cs]) : 0.0f;
      const int bn = b_k_fast ? e / kDepth : e % kTile, bk = b_k_fast ? e % kDepth : e / kTile;
      const long long gn = n0 + bn, hk = k0 + bk;
      Bs[bk][bn] = (gn < p.N && hk < p.K) ? (float)widen(b[hk * p.b_rs + gn * p.b_cs]) : 0.0f;
    }
    sync_block();
#pragma unroll
    for (int k = 0; k < kDepth; ++k) {
      float ar[4], br[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) { ar[u] = As[k][ty + 16 * u]; br[u] = Bs[k][tx + 16 * u]; }
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int v = 0; v < 4; ++v) acc[u][v] += ar[u] * br[v];
    }
    sync_block();
  }
  T* out = (T*)p.out + i * p.M * p.N;
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const long long gm = m0 + ty + 16 * u;
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      const long long gn = n0 + tx + 16 * v;
      if (gm < p.M && gn < p.N) out[gm * p.N + gn] = cast<T>(acc[u][v]);
    }
  }
}

}  // namespace mlxa::gmm

#define MLXA_GMM_ROWS(name, T, W)                                                       \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::gmm::kRowsWaves * W) name(GatherMMArgs a) { \
    MLXA_WAVE_KERNEL_BODY(W, mlxa::gmm::rows<T, W>(a))                                  \
  }
#define MLXA_GMM_TILED(name, T)                                                    \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::gmm::kThreads) name(GatherMMArgs a) { \
    mlxa::gmm::tiled<T>(a);                                                        \
  }

#include "gather_mm.inc"
