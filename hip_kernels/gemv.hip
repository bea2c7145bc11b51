// gemv family: matrix-vector products (decode: M == 1 or N == 1), bound by reading w once.
// Each wave owns kGemvRows rows: one load of x serves all of them (x would otherwise cost
// as many load instructions as w). Every lane keeps kGemvSteps 16-byte loads per row in
// flight, issued before any arithmetic, and the wave reduces in registers. For few rows
// and long k (a GPU that would sit half idle) ksplit waves of a block share a row group,
// each over every ksplit-th step of k, and combine through shared memory. The 16-byte
// path needs a row base and stride aligned to 16 bytes; anything else (sliced views)
// takes the scalar path, chosen per launch. One launch may also cover sibling matrices
// times the same x (gemv_args.h: GemvSibs), their row blocks after the first matrix's.
// gemv_n: the same with x made by a residual add + RMS norm in each block first (one launch
// fewer; mlxa/norm_prologue.h).
#include "mlxa/gemv_args.h"
#include "mlxa/norm_prologue.h"
#include "mlxa/types.h"
#include "mlxa/wave.h"

namespace mlxa {

constexpr int kGemvWaves = 4;   // waves per block
// rows per wave and 16-byte loads per lane and row in flight: the best of a sweep over
// (1..8) x (2..8) at LLM decode shapes on the H200 (within 3% of the best everywhere)
constexpr int kGemvRows = 2;
constexpr int kGemvSteps = 8;

// U steps of one lane: U 16-byte loads of x and of each of the R rows, then the sums.
template <typename T, int R, int U>
MLXA_DEVICE void gemv_steps(float* acc, const Vec<T, 16 / sizeof(T)>* xv, const T* const* w, long long i,
                            long long step) {
  using Vt = Vec<T, 16 / sizeof(T)>;
  Vt xr[U], wr[U][R];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    xr[u] = xv[i + u * step];
#pragma unroll
    for (int r = 0; r < R; ++r) wr[u][r] = ((const Vt*)w[r])[i + u * step];
  }
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int e = 0; e < 16 / (int)sizeof(T); ++e) {
      const float xf = (float)widen(xr[u].v[e]);
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] = fmaf((float)widen(wr[u][r].v[e]), xf, acc[r]);
    }
}

MLXA_DYNAMIC_SHARED(gemv_xs, Vec<uint32_t, 4>);

// Pro (gemv_n): x made by the RMS norm prologue (mlxa/norm_prologue.h; one row, one batch,
// a.x not read) into dynamic shared memory, k values.
template <typename T, int W, bool Pro = false, int R = kGemvRows, int U = kGemvSteps>
MLXA_DEVICE void gemv(const GemvSibs& sib, const GemvArgs& a, const GemvSibRows& sr, const RmsPro* pro = nullptr,
                      const RmsProShape* ps = nullptr) {
  constexpr int V = 16 / sizeof(T);
  const int lane = wave_lane<W>(), wave = wave_index<W>();
  const int ks = a.ksplit, kpart = wave % ks;
  const long long K = a.k;
  // the matrix of this block: GemvArgs' rows first, then each sibling's (whole blocks each)
  const long long block_rows = (long long)(kGemvWaves / ks) * R;
  const long long nb0 = (a.rows + block_rows - 1) / block_rows, nb1 = (sr.rows[0] + block_rows - 1) / block_rows;
  long long blk = blockIdx.x;
  const T* wm = (const T*)a.w;
  T* ym = (T*)a.y;
  long long N = a.rows;
  if (blk >= nb0) {
    const int j = blk >= nb0 + nb1 ? 1 : 0;
    blk -= j ? nb0 + nb1 : nb0;
    wm = (const T*)sib.w[j];
    ym = (T*)sib.y[j];
    N = sr.rows[j];
  }
  const long long row0 = (blk * (kGemvWaves / ks) + wave / ks) * R;
  const long long bat = blockIdx.y;
  const T* x = (const T*)a.x + bat * a.batch_x;
  if constexpr (Pro) {
    Vec<uint32_t, 4>* xs = gemv_xs;   // (an object on the emulator: converts to the pointer)
    T* ys = (T*)xs;
    rms_prologue<T, W>(ys, *pro, *ps, (uint32_t)K);
    x = ys;
  }
  // rows past the end read the last row (valid memory); their sums are never stored
  const T* w[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    w[r] = wm + bat * a.batch_w + (row0 + r < N ? row0 + r : N - 1) * a.ldw;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  if (row0 < N) {
    const bool vec = a.incx == 1 && K % V == 0 && a.ldw % V == 0 &&
                     ((unsigned long long)wm % 16) == 0 && ((unsigned long long)x % 16) == 0 &&
                     (a.batch_w % V) == 0 && (a.batch_x % V) == 0;
    if (vec) {
      const long long nv = K / V, step = (long long)W * ks;
      const auto* xv = (const Vec<T, V>*)x;
      // full groups of U steps (no bounds checks: the loads stay ahead of the arithmetic),
      // then the rest one step at a time
      long long i = lane + (long long)kpart * W;
#pragma unroll 1
      for (; i + (U - 1) * step < nv; i += step * U) gemv_steps<T, R, U>(acc, xv, w, i, step);
#pragma unroll 1
      for (; i < nv; i += step) gemv_steps<T, R, 1>(acc, xv, w, i, step);
    } else {
#pragma unroll 1
      for (long long i = lane + (long long)kpart * W; i < K; i += (long long)W * ks) {
        const float xf = (float)widen(x[i * a.incx]);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = fmaf((float)widen(w[r][i]), xf, acc[r]);
      }
    }
  }
  // every lane of the wave takes part (an emulated wave synchronises here)
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = wave_reduce<W>(acc[r], [](float p, float q) { return p + q; });
  if (ks > 1) {
    __shared__ float partial[kGemvWaves][R];
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r) partial[wave][r] = acc[r];
    }
    sync_block();
    if (kpart == 0 && lane == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r)
        for (int j = 1; j < ks; ++j) acc[r] += partial[wave + j][r];
    }
  }
  if (kpart == 0 && lane == 0) {
    T* y = ym + bat * a.batch_y;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (row0 + r < N) {
        float v = a.alpha * acc[r];
        if (a.beta != 0.0f) v += a.beta * (float)widen(y[row0 + r]);
        y[row0 + r] = cast<T>(v);
      }
    }
  }
}

}  // namespace mlxa

#define MLXA_GEMV(name, T, W)                                                                   \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::kGemvWaves * W) name(GemvSibs s, GemvArgs a, GemvSibRows r) { \
    MLXA_WAVE_KERNEL_BODY(W, mlxa::gemv<T, W>(s, a, r))                                         \
  }

// (on AMD half the loads in flight: with the prologue's registers the float16 variant spilled on
// gfx1030 at kGemvSteps)
#define MLXA_GEMV_N(name, T, W)                                                                 \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::kGemvWaves * W)                                       \
  name(RmsPro p, GemvSibs s, GemvArgs a, GemvSibRows r, RmsProShape ps) {                         \
    MLXA_WAVE_KERNEL_BODY(W, (mlxa::gemv<T, W, true, mlxa::kGemvRows,                             \
                                         MLXA_PLATFORM_AMD ? mlxa::kGemvSteps / 2 : mlxa::kGemvSteps>( \
                                  s, a, r, &p, &ps)))                                           \
  }

#include "gemv.inc"
