// gemv family: matrix-vector products (decode: M == 1 or N == 1). One wave per output
// row; each lane reads 16 bytes of the row per step (four steps in flight), the wave
// reduces in registers. The 16-byte path needs a row base and stride aligned to 16
// bytes; anything else (sliced views) takes the scalar path, chosen per launch.
#include "mlxa/gemv_args.h"
#include "mlxa/types.h"
#include "mlxa/wave.h"

namespace mlxa {

constexpr int kGemvWaves = 4;   // rows (waves) per block

template <typename T, int W>
MLXA_DEVICE void gemv(const GemvArgs& a) {
  constexpr int V = 16 / sizeof(T);
  const long long row = (long long)blockIdx.x * kGemvWaves + wave_index<W>();
  const long long bat = blockIdx.y;
  const int lane = wave_lane<W>();
  const T* w = (const T*)a.w + bat * a.batch_w + (row < a.rows ? row : 0) * a.ldw;
  const T* x = (const T*)a.x + bat * a.batch_x;
  const long long K = a.k;
  float acc = 0.0f;
  if (row < a.rows) {
    const bool vec = a.incx == 1 && K % V == 0 && a.ldw % V == 0 &&
                     ((unsigned long long)a.w % 16) == 0 && ((unsigned long long)a.x % 16) == 0 &&
                     (a.batch_w % V) == 0 && (a.batch_x % V) == 0;
    if (vec) {
      using Vt = Vec<T, V>;
      const Vt* wv = (const Vt*)w;
      const Vt* xv = (const Vt*)x;
      const long long nv = K / V;
      long long i = lane;
      for (; i + 3 * W < nv; i += 4 * W) {
        Vt wr[4], xr[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) { wr[u] = wv[i + u * W]; xr[u] = xv[i + u * W]; }
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
          for (int j = 0; j < V; ++j) acc += (float)widen(wr[u].v[j]) * (float)widen(xr[u].v[j]);
      }
      for (; i < nv; i += W) {
        const Vt wr = wv[i], xr = xv[i];
#pragma unroll
        for (int j = 0; j < V; ++j) acc += (float)widen(wr.v[j]) * (float)widen(xr.v[j]);
      }
    } else {
      for (long long i = lane; i < K; i += W) acc += (float)widen(w[i]) * (float)widen(x[i * a.incx]);
    }
  }
  // every lane of the wave takes part (an emulated wave synchronises here)
  acc = wave_reduce<W>(acc, [](float p, float q) { return p + q; });
  if (row < a.rows && lane == 0) {
    T* y = (T*)a.y + bat * a.batch_y + row;
    float r = a.alpha * acc;
    if (a.beta != 0.0f) r += a.beta * (float)widen(*y);
    *y = cast<T>(r);
  }
}

}  // namespace mlxa

#define MLXA_GEMV(name, T, W)                                                  \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::kGemvWaves * W) name(GemvArgs a) { \
    MLXA_WAVE_KERNEL_BODY(W, mlxa::gemv<T, W>(a))                              \
  }

#include "gemv.inc"
