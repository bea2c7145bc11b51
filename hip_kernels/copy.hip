// Copy family: dtype conversion (MLX's AsType) and strided -> row-contiguous copies
// (Copy, Contiguous, non-viewable reshapes). The conversion rules are mlxa::cast.
#include "mlxa/elementwise.h"

namespace mlxa {

// Transposes: a strided copy reads an input that is contiguous along the output's rows
// with one element per 32-byte sector (10-20% of the copy roofline on the H200). A
// 32x32 tile goes through shared memory instead, so reads walk the input's contiguous
// direction and writes the output's. Needs blockDim.x a multiple of 32, nothing else:
// the tile shape does not depend on the wave size.
constexpr int kTile = 32;

template <typename In, typename Out>
MLXA_DEVICE void copy_t(const CopyTArgs& a) {
  __shared__ Out tile[kTile][kTile + 1];  // +1: column reads hit distinct banks
  const int64_t R = a.rows, C = a.cols;
  const int64_t tiles_c = (C + kTile - 1) / kTile;
  const int64_t per_batch = ((R + kTile - 1) / kTile) * tiles_c;
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile, passes = blockDim.x / kTile;
  for (int64_t t = blockIdx.x; t < per_batch * a.batch; t += gridDim.x) {
    const int64_t b = t / per_batch, rem = t % per_batch;
    const int64_t r0 = rem / tiles_c * kTile, c0 = rem % tiles_c * kTile;
    const In* in = (const In*)a.in + b * a.in_batch_stride;
    for (int k = ty; k < kTile; k += passes) {  // consecutive threads: consecutive rows
      const int64_t r = r0 + tx, c = c0 + k;
      if (r < R && c < C) tile[k][tx] = apply<op::Identity, Out>(in[r * a.in_row_stride + c * a.in_col_stride]);
    }
    __syncthreads();
    Out* out = (Out*)a.out + b * R * C;
    for (int k = ty; k < kTile; k += passes) {  // consecutive threads: consecutive columns
      const int64_t r = r0 + k, c = c0 + tx;
      if (r < R && c < C) out[r * C + c] = tile[tx][k];
    }
    __syncthreads();
  }
}

}  // namespace mlxa

#define MLXA_COPY_T(name, In, Out) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_BLOCK_MAX) name(CopyTArgs a) { mlxa::copy_t<In, Out>(a); }

// Every other kernel is mlxa::op::Identity through unary_v / unary_g (elementwise.h).
#include "copy.inc"
