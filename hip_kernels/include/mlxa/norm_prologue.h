// The RMS norm prologue of the matrix-vector kernels (norm_args.h: RmsPro): qmv_h2n and
// gemv_n make their x from a residual add and its RMS norm in each block, one launch instead
// of the norm family's norm_r_rmsadd before them.
#pragma once

#include "norm_args.h"
#include "types.h"
#include "wave.h"

namespace mlxa {

// sum = x + r and y = rms_norm(sum) * w of the one row (k values, a multiple of 16 / sizeof(T))
// into ys (shared memory, 16-byte aligned), rounded as the Add and RMSNorm nodes round them
// (norm.hip's norm_add_row: statistics in float, y rounded after the scale and again after
// the weight); block (0, 0) also stores both. Every thread of the block takes part; ys is
// complete for every thread on return. Every block recomputes the row (2k values read from
// L2: less than the separate launch the products would wait for).
template <typename T, int W>
MLXA_DEVICE void rms_prologue(T* ys, const RmsPro& p, const RmsProShape& ps, uint32_t k) {
  constexpr int V = 16 / sizeof(T);
  __shared__ float scratch[32];   // one float a wave (block_reduce)
  const T* x = (const T*)p.x;
  const T* r = (const T*)p.r;
  const T* w = (const T*)p.w;
  const bool store = blockIdx.x == 0 && blockIdx.y == 0;
  const bool vec = (((uintptr_t)x | (uintptr_t)r | (uintptr_t)w | (uintptr_t)p.sum | (uintptr_t)p.out) & 15u) == 0;
  float s = 0.0f;
  for (uint32_t g = threadIdx.x * V; g < k; g += blockDim.x * V) {
    Vec<T, V> xv, rv, h;
    if (vec) {
      xv = *(const Vec<T, V>*)(x + g);
      rv = *(const Vec<T, V>*)(r + g);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) xv.v[j] = x[g + j], rv.v[j] = r[g + j];
    }
#pragma unroll
    for (int j = 0; j < V; ++j) {
      h.v[j] = cast<T>((float)widen(xv.v[j]) + (float)widen(rv.v[j]));
      const float f = (float)widen(h.v[j]);
      s += f * f;
    }
    *(Vec<T, V>*)(ys + g) = h;
    if (store) {
      if (vec) {
        *(Vec<T, V>*)((T*)p.sum + g) = h;
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) ((T*)p.sum)[g + j] = h.v[j];
      }
    }
  }
  const float scale = rsqrtf(block_reduce<W>(s, [](float a, float b) { return a + b; }, scratch) *
                             (1.0f / (float)k) + ps.eps);
  for (uint32_t g = threadIdx.x * V; g < k; g += blockDim.x * V) {   // the groups this thread wrote
    Vec<T, V> y = *(const Vec<T, V>*)(ys + g);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      T v = cast<T>(__fmul_rn((float)widen(y.v[j]), scale));
      if (ps.flags & 1) v = cast<T>(__fmul_rn((float)widen(v), (float)widen(w[g + j])));
      y.v[j] = v;
    }
    *(Vec<T, V>*)(ys + g) = y;
    if (store) {
      if (vec) {
        *(Vec<T, V>*)((T*)p.out + g) = y;
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) ((T*)p.out)[g + j] = y.v[j];
      }
    }
  }
  sync_block();   // readers take other threads' groups
}

}  // namespace mlxa
