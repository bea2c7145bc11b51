// Convolution family. Two paths (mlx_amd/runtime/ops/conv.py plans them):
//  - conv_mma: the convolution as one implicit GEMM on the matrix unit (mlxa/mma.h), for the
//    16-bit dtypes: each block stages a tile of output positions' patches straight from the
//    input and a tile of weight rows, never writing the patches to memory;
//  - im2col, then the matmul family's GEMM (vendor BLAS or our portable kernel): every
//    dtype and layout, and the portable twin the matrix-unit kernel is checked against.
//
// Gathering patches moves bits, so kernels exist per element size. Work items are runs
// of `vec` consecutive channels of one tap of one output position; the planner proves
// 16-byte runs possible (unit channel stride, strides and cg multiples of vec) and the
// kernel also checks the input address, since arrays may start at any element.
#include "mlxa/platform.h"
#include "mlxa/types.h"
#include "mlxa/mma.h"
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
  const int64_t cs = a.in_strides[1 + MLXA_CONV_DIMS];
  // a work item is one run of channels of one output position, taken through every tap: the
  // position's decode (64-bit divisions, the costly part when every tap did it) once per ktot
  // runs written, the taps by counters
  for (int64_t w = global_thread<int64_t>(); w < a.n_work; w += grid_threads<int64_t>()) {
    const int64_t t = w / cgv;
    const int64_t c = (w - t * cgv) * vec;
    const int64_t p = t % a.positions;
    const int64_t g = t / a.positions;
    int64_t pos = a.p0 + p;
    int o[MLXA_CONV_DIMS];
#pragma unroll
    for (int d = MLXA_CONV_DIMS - 1; d >= 0; --d) {
      o[d] = (int)(pos % a.win.out_spatial[d]);
      pos /= a.win.out_spatial[d];
    }
    const int64_t base = pos * a.in_strides[0] + (g * a.cg + c) * cs;
    T* dst = out + (t * a.ktot) * a.cg + c;
    int kk[MLXA_CONV_DIMS] = {};
    for (int k = 0; k < a.ktot; ++k, dst += a.cg) {
      int64_t off = base;
      bool inside = true;
#pragma unroll
      for (int d = 0; d < MLXA_CONV_DIMS; ++d) {
        const int tap = a.flip ? a.win.kernel[d] - 1 - kk[d] : kk[d];
        // position in the input dilated by idil and padded by pad_lo in front
        const int64_t q = (int64_t)o[d] * a.win.stride[d] + (int64_t)tap * a.win.kdil[d] - a.win.pad_lo[d];
        const int64_t qi = a.win.idil[d] == 1 ? q : q / a.win.idil[d];
        inside = inside && q >= 0 && qi * a.win.idil[d] == q && qi < a.win.in_spatial[d];
        off += qi * a.in_strides[1 + d];
      }
      if (wide) {
        Bytes16 v{};
        if (inside) v = *(const Bytes16*)(in + off);
        *(Bytes16*)dst = v;
      } else {
        for (int j = 0; j < vec; ++j) dst[j] = inside ? in[off + j * cs] : T(0);
      }
      // the next tap: the last kernel dim counts fastest
#pragma unroll
      for (int d = MLXA_CONV_DIMS - 1; d >= 0; --d) {
        if (++kk[d] < a.win.kernel[d]) break;
        kk[d] = 0;
      }
    }
  }
}

// ---- implicit GEMM on the matrix unit ---------------------------------------------------------
// Block: kConvWaves waves of the tiles' own width, BM output positions x kConvBN output channels
// of one group (grid: position tiles, channel tiles, groups). The GEMM depth runs in chunks of
// kConvBK (a chunk's 8-channel runs may straddle taps; each run lies inside one because cg % 8
// == 0), staged in shared memory kConvStages deep with asynchronous 16-byte copies where the
// target has them (zero-filled outside the input, past kd and past the tile's rows). Wave w owns
// rows [w BM / waves, +BM / waves) x all kConvBN columns: its A operands load once per 16-deep
// step, the weight tile's are read by every wave. The result goes through shared memory so the
// stores are whole 16-byte runs of an output row. Three stages where copies are asynchronous
// (NVIDIA); two elsewhere, where a copy completes in the issuing thread and a third stage only
// halves the workgroups a CU holds (one, at BM = 128 on CDNA).
constexpr int kConvWaves = 4;
constexpr int kConvBN = 64;   // output channels a block
constexpr int kConvBK = 32;   // depth a stage
constexpr int kConvStages = MLXA_PLATFORM_NVIDIA ? 3 : 2;

template <typename T, int BM>
MLXA_DEVICE void conv_mma(const ConvMmaArgs& a) {
  using M = mma::Tiles<T>;
  if constexpr (!M::kAvailable) {
    trap();   // the launcher takes this kernel only where the target has the unit
  } else {
    constexpr int W = M::kWave, NT = kConvWaves * W, BN = kConvBN, BK = kConvBK;
    constexpr int VE = 16 / (int)sizeof(T), NV = BK / VE;
    constexpr int PITCH = BK + VE;     // 16-byte rows; the 8 rows an ldmatrix reads hit distinct banks
    constexpr int STAGE = (BM + BN) * PITCH, OPITCH = BN + VE;
    constexpr int WM = BM / kConvWaves, RT = WM / 16, CT = BN / 16;
    constexpr int RA = BM * NV / NT, RB = BN * NV / NT, RSTEP = NT / NV;
    constexpr int SMEM = kConvStages * STAGE > BM * OPITCH ? kConvStages * STAGE : BM * OPITCH;
    static_assert(WM % 16 == 0 && (BM * NV) % NT == 0 && (BN * NV) % NT == 0 && NT % NV == 0, "tile shape");
    __shared__ Vec<T, VE> smem_v[SMEM / VE];
    T* const sm = (T*)smem_v;
    if ((int)blockDim.x != NT) trap();   // the launcher's block: kConvWaves waves

    const int tid = (int)threadIdx.x, wave = tid / W, lane = tid % W;
    const int64_t m0 = (int64_t)blockIdx.x * BM;
    const int n0 = (int)blockIdx.y * BN, g = (int)blockIdx.z;
    const T* const x = (const T*)a.in;
    const T* const wt = (const T*)a.w;
    const int kv = tid % NV, r0 = tid / NV;   // this thread's 8-channel run and first row

    // this thread's A rows: each window corner's coordinates (o * stride - pad_lo, maybe outside
    // the input) and input offset (group's channel base included); a row past the positions
    // gets a corner every bounds check refuses
    int64_t corner[RA];
    int ob[RA][MLXA_CONV_DIMS];
#pragma unroll
    for (int s = 0; s < RA; ++s) {
      int64_t p = m0 + r0 + s * RSTEP;
      const bool valid = p < a.positions;
      p = valid ? p : 0;
      int64_t off = 0;
#pragma unroll
      for (int d = MLXA_CONV_DIMS - 1; d >= 0; --d) {
        const int o = (int)(p % a.win.out_spatial[d]);
        p /= a.win.out_spatial[d];
        ob[s][d] = o * a.win.stride[d] - a.win.pad_lo[d];
        off += (int64_t)ob[s][d] * a.in_strides[1 + d];
      }
      corner[s] = p * a.in_strides[0] + (int64_t)g * a.cg + off;
      if (!valid) ob[s][0] = -(1 << 30);
    }
    // B rows: output channels n0 + r0 + s * RSTEP of the group
    const T* wrow[RB];
    bool wv[RB];
#pragma unroll
    for (int s = 0; s < RB; ++s) {
      const int co = n0 + r0 + s * RSTEP;
      wv[s] = co < a.cog;
      wrow[s] = wt + (int64_t)(g * a.cog + (wv[s] ? co : 0)) * a.kd;
    }

    // the thread's depth position k = tap * cg + c advances by BK a stage; the tap's offsets
    // (tap * kdil, flipped) change only when the tap does; tc = the tap's input offset + c
    int c = kv * VE, tap = 0, dq[MLXA_CONV_DIMS];
    int64_t tc = 0;
    while (c >= a.cg) c -= a.cg, ++tap;
    auto set_tap = [&]() {
      int t = tap;
      tc = c;
#pragma unroll
      for (int d = MLXA_CONV_DIMS - 1; d >= 0; --d) {
        const int kk = t % a.win.kernel[d];
        t /= a.win.kernel[d];
        dq[d] = (a.flip ? a.win.kernel[d] - 1 - kk : kk) * a.win.kdil[d];
        tc += (int64_t)dq[d] * a.in_strides[1 + d];
      }
    };
    set_tap();
    const int ktot = a.kd / a.cg;

    // 8 elements into shared memory: one asynchronous copy from 16-byte aligned bases (a
    // sliced input may start anywhere), else through registers
    const bool aligned = (((uintptr_t)x | (uintptr_t)wt) & 15u) == 0;
    auto put = [&](T* dst, const T* src, bool zero) {
      if (aligned) {
        copy16_async(dst, src, zero);
      } else {
        Vec<T, VE> v{};
        if (!zero)
#pragma unroll
          for (int j = 0; j < VE; ++j) v.v[j] = src[j];
        *(Vec<T, VE>*)dst = v;
      }
    };
    auto issue = [&](int t) {
      T* sa = sm + (t % kConvStages) * STAGE;
      T* sb = sa + BM * PITCH;
      const bool kin = tap < ktot;
#pragma unroll
      for (int s = 0; s < RA; ++s) {
        T* dst = sa + (r0 + s * RSTEP) * PITCH + kv * VE;
        bool inside = kin;
        if (!a.dilated) {   // the input position is corner + tap: one unsigned compare a dim
#pragma unroll
          for (int d = 0; d < MLXA_CONV_DIMS; ++d) inside = inside && (unsigned)(ob[s][d] + dq[d]) < (unsigned)a.win.in_spatial[d];
          put(dst, inside ? x + corner[s] + tc : x, !inside);
        } else {            // between input-dilated elements: zeros
          int64_t off = corner[s] + tc;
#pragma unroll
          for (int d = 0; d < MLXA_CONV_DIMS; ++d) {
            const int q = ob[s][d] + dq[d];
            const int qi = q / a.win.idil[d];
            inside = inside && q >= 0 && qi * a.win.idil[d] == q && qi < a.win.in_spatial[d];
            off += (int64_t)(qi - q) * a.in_strides[1 + d];
          }
          put(dst, inside ? x + off : x, !inside);
        }
      }
      const int64_t k = (int64_t)tap * a.cg + c;
#pragma unroll
      for (int s = 0; s < RB; ++s) {
        const bool ok = wv[s] && kin;
        put(sb + (r0 + s * RSTEP) * PITCH + kv * VE, ok ? wrow[s] + k : wt, !ok);
      }
      // the next stage's depth
      c += BK;
      tc += BK;
      if (c >= a.cg) {
        while (c >= a.cg) c -= a.cg, ++tap;
        if (tap < ktot) set_tap();
      }
    };

    typename M::Acc acc[RT][CT];
#pragma unroll
    for (int i = 0; i < RT; ++i)
#pragma unroll
      for (int j = 0; j < CT; ++j)
#pragma unroll
        for (int e = 0; e < M::kNS; ++e) acc[i][j].v[e] = 0.0f;

    const int n_k = (a.kd + BK - 1) / BK;
#pragma unroll
    for (int t = 0; t < kConvStages - 1; ++t) {
      if (t < n_k) issue(t);
      copy_async_commit();
    }
    for (int t = 0; t < n_k; ++t) {
      // stage t has landed once at most kConvStages - 2 newer groups are pending; past the
      // barrier every wave is done with stage t - 1, whose buffer takes stage t + kConvStages - 1
      copy_async_wait<kConvStages - 2>();
      sync_block();
      if (t + kConvStages - 1 < n_k) issue(t + kConvStages - 1);
      copy_async_commit();
      const T* sa = sm + (t % kConvStages) * STAGE + wave * WM * PITCH;
      const T* sb = sm + (t % kConvStages) * STAGE + BM * PITCH;
#pragma unroll
      for (int kc = 0; kc < BK / 16; ++kc) {
        typename M::Q q[RT];
#pragma unroll
        for (int i = 0; i < RT; ++i) M::load_q(q[i], sa + 16 * i * PITCH + 16 * kc, PITCH, lane);
#pragma unroll
        for (int j = 0; j < CT; ++j) {   // each weight operand loaded once for the wave's RT row tiles
          typename M::K kf;
          M::load_k(kf, sb + 16 * j * PITCH + 16 * kc, PITCH, lane);
#pragma unroll
          for (int i = 0; i < RT; ++i) M::qk(acc[i][j], q[i], kf);
        }
      }
    }
    copy_async_wait<0>();
    sync_block();   // every wave is past its last operand read: the stages become the output tile

    T* const so = sm;
#pragma unroll
    for (int i = 0; i < RT; ++i)
#pragma unroll
      for (int j = 0; j < CT; ++j)
#pragma unroll
        for (int e = 0; e < M::kNS; ++e)
          so[(wave * WM + 16 * i + M::query(M::slot(e), lane)) * OPITCH + 16 * j + M::col(e, lane)] =
              cast<T>(acc[i][j].v[e]);
    sync_block();
    T* const out = (T*)a.out;
    constexpr int OV = BN / VE;
    for (int i = tid; i < BM * OV; i += NT) {
      const int r = i / OV, cc = (i % OV) * VE;
      const int64_t p = m0 + r;
      const int co = n0 + cc;
      if (p >= a.positions || co >= a.cog) continue;
      T* dst = out + p * a.c_out + (int64_t)g * a.cog + co;
      const T* src = so + r * OPITCH + cc;
      if (a.out_vec && co + VE <= a.cog) {
        *(Vec<T, VE>*)dst = *(const Vec<T, VE>*)src;
      } else {
        for (int j = 0; j < VE && co + j < a.cog; ++j) dst[j] = src[j];
      }
    }
  }
}

}  // namespace conv
}  // namespace mlxa

#define MLXA_CONV_BLOCK 256   // kernel_tables/conv.py BLOCK
#define MLXA_IM2COL(name, T) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_CONV_BLOCK) name(ConvArgs a) { mlxa::conv::im2col<T>(a); }
// kConvWaves waves of the tiles' own width (kernel_tables/conv.py mma_block); NVIDIA:
// three blocks a multiprocessor fit the shared memory of BM = 128, registers capped to match
#if MLXA_PLATFORM_NVIDIA
#define MLXA_CONV_MMA_BOUNDS MLXA_LAUNCH_BOUNDS_MIN(128, 3)
#else
#define MLXA_CONV_MMA_BOUNDS MLXA_LAUNCH_BOUNDS(256)
#endif
#define MLXA_CONV_MMA(name, T, BM) \
  MLXA_GLOBAL void MLXA_CONV_MMA_BOUNDS name(ConvMmaArgs a) { mlxa::conv::conv_mma<T, BM>(a); }

#include "conv.inc"
