// masked_mm family: the block masks of BlockMaskedMM (mlx_amd/runtime/ops/masked_mm.py).
// A block mask has one entry per block x block tile of a matrix (the last row and column
// of tiles may be partial); `bmask` writes y = x with each tile kept, zeroed (a false bool
// entry: even NaN and inf become 0, as in MLX) or scaled by the entry (a mask of x's own
// dtype, rounded to it like MLX's CPU), into a row-contiguous y. x takes any strides; the
// mask its own; both batch over up to 4 dims (the mask's batch strides may be 0). The
// operand masks run before the GEMM on copies of A and B, the output mask after it, in
// place on D (y == x, element for element). (The argument struct lives here: one kernel
// reads it.)
#include "mlxa/platform.h"
#include "mlxa/types.h"

#define MLXA_MMASK_BATCH 4

extern "C" {
// packed by mlx_amd/runtime/ops/masked_mm.py (three pointers, then struct "<7q2i12q")
struct BlockMaskArgs {
  const void* x;
  const void* mask;
  void* y;
  int64_t rows;
  int64_t cols;
  int64_t block;
  int64_t x_rs;         // elements between rows / columns of x, and of the mask's tiles
  int64_t x_cs;
  int64_t m_rs;
  int64_t m_cs;
  int32_t nb;           // batch dims (row-major over shape)
  int32_t bool_mask;    // 1: a bool mask (keep or zero); 0: a mask of x's dtype (scale)
  int64_t shape[MLXA_MMASK_BATCH];
  int64_t x_bs[MLXA_MMASK_BATCH];
  int64_t m_bs[MLXA_MMASK_BATCH];
};
}

namespace mlxa::mmask {

constexpr int kThreads = 256;

// one thread per element of y, grid-stride; 64-bit indices (batches of large matrices)
template <typename T>
MLXA_DEVICE void bmask(const BlockMaskArgs& p) {
  const long long per = p.rows * p.cols;
  long long total = per;
  for (int d = 0; d < p.nb; ++d) total *= p.shape[d];
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (long long)gridDim.x * blockDim.x) {
    long long b = e / per;
    const long long rc = e - b * per, r = rc / p.cols, c = rc - r * p.cols;
    long long xo = 0, mo = 0;
    for (int d = p.nb - 1; d >= 0; --d) {
      const long long i = b % p.shape[d];
      b /= p.shape[d];
      xo += i * p.x_bs[d];
      mo += i * p.m_bs[d];
    }
    mo += (r / p.block) * p.m_rs + (c / p.block) * p.m_cs;
    const T v = ((const T*)p.x)[xo + r * p.x_rs + c * p.x_cs];
    T out;
    if (p.bool_mask) {
      out = ((const bool*)p.mask)[mo] ? v : cast<T>(0.0f);
    } else {
      out = cast<T>(widen(v) * widen(((const T*)p.mask)[mo]));
    }
    ((T*)p.y)[e] = out;
  }
}

}  // namespace mlxa::mmask

#define MLXA_BMASK(name, T) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::mmask::kThreads) name(BlockMaskArgs a) { mlxa::mmask::bmask<T>(a); }

#include "masked_mm.inc"
