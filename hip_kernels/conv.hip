// Convolution family: the im2col step of MLX's Convolution primitive. The GEMM that
// follows goes through the matmul family (vendor BLAS or our portable kernel); see
// mlx_amd/runtime/ops/conv.py for the plan.
//
// Gathering patches moves bits, so kernels exist per element size. Work items are runs
// of `vec` consecutive channels of one tap of one output position; the planner proves
// 16-byte runs possible (unit channel stride, strides and cg multiples of vec) and the
// kernel also checks the input address, since arrays may start at any element.
#include "mlxa/platform.h"
#include "mlxa/conv_args.h"

namespace mlxa {
namespace conv {

struct alignas(16) Bytes16 {
  uint32_t w[4];
};

template <typename T>
MLXA_DEVICE void im2col(const ConvArgs& a) {
  constexpr int V = 16 / sizeof(T);
  const T* in = (const T*)a.in;
  T* out = (T*)a.patches;
  const int vec = a.vec;
  const bool wide = vec == V && ((uintptr_t)in & 15) == 0;
  const int64_t cgv = a.cg / vec;
  for (int64_t w = global_thread<int64_t>(); w < a.n_work; w += grid_threads<int64_t>()) {
    int64_t t = w / cgv;
    const int64_t c = (w - t * cgv) * vec;
    const int64_t k = t % a.ktot;
    t /= a.ktot;
    const int64_t p = t % a.positions;
    const int64_t g = t / a.positions;
    // output position -> (n, o0, o1, o2); tap -> (k0, k1, k2)
    int64_t pos = a.p0 + p;
    int64_t o[MLXA_CONV_DIMS], kk[MLXA_CONV_DIMS];
    int64_t kr = k;
#pragma unroll
    for (int d = MLXA_CONV_DIMS - 1; d >= 0; --d) {
      o[d] = pos % a.out_spatial[d];
      pos /= a.out_spatial[d];
      kk[d] = kr % a.kernel[d];
      kr /= a.kernel[d];
    }
    int64_t off = pos * a.in_strides[0] + (g * a.cg + c) * a.in_strides[1 + MLXA_CONV_DIMS];
    bool inside = true;
#pragma unroll
    for (int d = 0; d < MLXA_CONV_DIMS; ++d) {
      const int64_t tap = a.flip ? a.kernel[d] - 1 - kk[d] : kk[d];
      // position in the input dilated by idil and padded by pad_lo in front
      const int64_t q = o[d] * a.stride[d] + tap * a.kdil[d] - a.pad_lo[d];
      const int64_t qi = q / a.idil[d];
      inside = inside && q >= 0 && qi * a.idil[d] == q && qi < a.in_spatial[d];
      off += qi * a.in_strides[1 + d];
    }
    T* dst = out + w * vec;
    if (wide) {
      Bytes16 v{};
      if (inside) v = *(const Bytes16*)(in + off);
      *(Bytes16*)dst = v;
    } else {
      const int64_t cs = a.in_strides[1 + MLXA_CONV_DIMS];
      for (int j = 0; j < vec; ++j) dst[j] = inside ? in[off + j * cs] : T(0);
    }
  }
}

}  // namespace conv
}  // namespace mlxa

#define MLXA_CONV_BLOCK 256   // kernel_tables/conv.py BLOCK
#define MLXA_IM2COL(name, T) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_CONV_BLOCK) name(ConvArgs a) { mlxa::conv::im2col<T>(a); }

#include "conv.inc"
