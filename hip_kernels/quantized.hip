// quantized family: MLX's packed weights (mx.quantize) in matmuls and (de)quantization.
//
// Packing (every mode): the values of a row form one little-endian bit stream, value i at
// bit i * bits (MLX's 3/5/6-bit byte packs are exactly that stream), so a chunk of CV
// values (32; 16 for nvfp4, whose groups are 16) is CV * bits / 32 whole 32-bit words.
// Decoding is a functor of (mode, bits): affine q * scale + bias (scale/bias in x's
// dtype), mxfp4/nvfp4 e2m1 values, mxfp8 e4m3 values, times an e8m0 (mx*) or e4m3
// (nvfp4) scale byte per group.
//
//   qmv       decode (M <= 8 rows of x): memory bound on w. Each wave (or 2-4 waves
//             splitting k, for long rows) owns kQmvRows output rows of one row of x;
//             every lane streams whole chunks of those rows (16-byte loads where the
//             layout allows), kQmvSteps chunks per row with all their loads issued
//             before any arithmetic, dequantizes in registers, accumulates in float, and
//             the wave reduces. One load of x serves all the rows. Optional uint32 index
//             arrays pick x's and w's batch per output batch (GatherQMM).
//   qmv_h2    the same for 2/4/8-bit affine w and 16-bit x on packed half-precision math:
//             x staged once per block in shared memory as half2 pairs, ~2.7 issued
//             instructions a weight instead of ~7 (details at the kernel). qmv_h2n: x made
//             by a residual add + RMS norm in each block first (one launch fewer).
//   qmv_mma   the same product for 4-bit affine w and 16-bit x on the matrix unit (NVIDIA
//             mma.sync, CDNA MFMA, RDNA4 WMMA; only mma.sync has run): a wave owns 16
//             rows, the quantized values go into the A operand in one logic instruction
//             per two, x rows are B's columns (read only by the lanes that hold B), and a
//             second MMA with an all-ones A gives each group's sum of x for the biases.
//   dequant   w -> a row-contiguous array of x's dtype (prefill: a GEMM follows).
//   quantize  affine quantization, one thread per group, MLX's CPU arithmetic in float.
//   fp8       fast::ConvertFP8 (float <-> e4m3 bytes) with MLX's CPU rounding.
//   qdq       QQMatmul's x quantized to an fp mode and back (MLX's CPU arithmetic); the
//             product is then qmv or the prefill path on that x.
#include "mlxa/mma.h"
#include "mlxa/norm_prologue.h"
#include "mlxa/quantized_args.h"
#include "mlxa/types.h"
#include "mlxa/wave.h"

namespace mlxa {
namespace q {

enum Mode { kAffine = 0, kMxfp4 = 1, kMxfp8 = 2, kNvfp4 = 3 };

// (a & mask) | bits in one instruction: nvcc emits an AND and an OR when both are constants
// (its LOP3 takes one immediate; seen in qmv's SASS, where qmv still has the two); AMD's
// compiler picks v_and_or_b32 from the plain expression.
MLXA_DEVICE uint32_t and_or(uint32_t a, uint32_t mask, uint32_t bits) {
#if MLXA_PLATFORM_NVIDIA
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(mask), "r"(bits));
  return d;
#else
  return (a & mask) | bits;
#endif
}

constexpr int kQmvWaves = 4;     // waves per block
constexpr int kQmvRows = 4;      // output rows per wave
constexpr int kQmvSteps = 1;     // chunks per lane and row in flight (2 measured slower on the H200:
                                 // twice the registers, half the resident waves)
constexpr int kBlock = 256;      // dequant / quantize threads per block

// e2m1: sign, 2 exponent bits (bias 1), 1 mantissa bit; exact in float.
MLXA_DEVICE float fp4_value(uint32_t q) {
  const uint32_t e = (q >> 1) & 3u, m = q & 1u;
  const float v = e ? uint_as_float(((e + 126u) << 23) | (m << 22)) : 0.5f * (float)m;
  return (q & 8u) ? -v : v;
}

// e4m3 (fn: no infinities, S.1111.111 is NaN); exact in float.
MLXA_DEVICE float fp8_value(uint32_t q) {
  const uint32_t e = (q >> 3) & 15u, m = q & 7u;
  float v;
  if (e == 0) v = (float)m * 0.001953125f;   // subnormal: m * 2^-9
  else if (e == 15 && m == 7) v = uint_as_float(0x7fc00000u);
  else v = uint_as_float(((e + 120u) << 23) | (m << 20));
  return (q & 0x80u) ? -v : v;
}

// e8m0: 2^(s - 127); MLX reads s == 0 as the bfloat16 subnormal 2^-127 and 255 as inf.
MLXA_DEVICE float e8m0_value(uint32_t s) { return uint_as_float(s == 0 ? 0x00400000u : (s << 23)); }

// An integer below 2^16 as float without the (quarter-rate on NVIDIA) converter: 2^23 + q
// as bits, minus 2^23, both exact.
MLXA_DEVICE float u16_to_float(uint32_t q) { return uint_as_float(0x4b000000u | q) - 8388608.0f; }

// s * q + b rounded twice, never contracted: what MLX's dequantize computes in float32
// (so an exactly cancelling zero point stays exactly 0).
MLXA_DEVICE float affine_weight(float s, float q, float b) { return __fadd_rn(__fmul_rn(s, q), b); }

// One weight as mx.dequantize gives it in T: MLX's CPU build multiplies and adds in T, so a
// 16-bit product is rounded to T before the bias is added (both in float: exact for these
// widths, then one rounding each; float32 is affine_weight itself).
template <typename T>
MLXA_DEVICE float dequant_weight(float s, float q, float b) {
  if constexpr (sizeof(T) == 4) return affine_weight(s, q, b);
  else return __fadd_rn((float)widen(cast<T>(__fmul_rn(s, q))), b);
}

template <typename T, int Mode>
using scale_t = std::conditional_t<Mode == kAffine, T, uint8_t>;

template <int Mode, int B>
struct Fmt {
  static_assert(Mode == kAffine ? (B >= 2 && B <= 8 && B != 7) : (B == (Mode == kMxfp8 ? 8 : 4)),
                "unsupported quantization format");
  static constexpr int CV = Mode == kNvfp4 ? 16 : 32;   // values per chunk
  static constexpr int CW = CV * B / 32;                 // 32-bit words per chunk
  static constexpr bool kBias = Mode == kAffine;
  MLXA_DEVICE static float value(uint32_t q) {
    if constexpr (Mode == kAffine) return u16_to_float(q);
    else if constexpr (Mode == kMxfp8) return fp8_value(q);
    else return fp4_value(q);
  }
  template <typename S>
  MLXA_DEVICE static float scale(S s) {
    if constexpr (Mode == kAffine) return (float)widen(s);
    else if constexpr (Mode == kNvfp4) return fp8_value(s);
    else return e8m0_value(s);
  }
};

// Value i of a chunk held in words d (i is a constant once the caller's loop unrolls).
template <int B>
MLXA_DEVICE uint32_t bits_at(const uint32_t* d, int i) {
  const int bit = i * B, wi = bit >> 5, sh = bit & 31;
  uint32_t v = d[wi] >> sh;
  if (sh + B > 32) v |= d[wi + 1] << (32 - sh);
  return v & ((1u << B) - 1u);
}

// Power-of-two widths: value i sits at bit shift_in_half(i) of a 16-bit half of its word;
// masking it in place (no shift) gives q * 2^shift, so x is pre-scaled by 2^-shift
// (exact) and the product is exactly x * q.
template <int B>
constexpr int shift_in_half(int i) { return (32 % B == 0) ? ((i % (32 / B)) % (16 / B)) * B : 0; }

// sum_i xs[i] * q_i over one chunk (xs pre-scaled as above); 3 operations per value.
template <int B, int CV>
MLXA_DEVICE float affine_dot(const uint32_t* d, const float* xs) {
  float acc = 0.0f;
  if constexpr (32 % B == 0) {
    constexpr int PW = 32 / B, PH = 16 / B;
    constexpr uint32_t mask = (1u << B) - 1u;
#pragma unroll
    for (int j = 0; j < CV / PW; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t u = h ? d[j] >> 16 : d[j];
#pragma unroll
        for (int t = 0; t < PH; ++t)
          acc = fmaf(xs[j * PW + h * PH + t], u16_to_float(u & (mask << (t * B))), acc);
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < CV; ++i) acc = fmaf(xs[i], u16_to_float(bits_at<B>(d, i)), acc);
  }
  return acc;
}

// Alignment the vector path of a chunk of CW words needs (bytes).
template <int CW>
constexpr int chunk_align() { return CW % 4 == 0 ? 16 : (CW % 2 == 0 ? 8 : 4); }

template <int CW>
MLXA_DEVICE void load_words(uint32_t* d, const uint32_t* p, bool vec) {
  if constexpr (CW % 4 == 0) {
    if (vec) {
#pragma unroll
      for (int j = 0; j < CW / 4; ++j) {
        const Vec<uint32_t, 4> v = ((const Vec<uint32_t, 4>*)p)[j];
#pragma unroll
        for (int t = 0; t < 4; ++t) d[4 * j + t] = v.v[t];
      }
      return;
    }
  } else if constexpr (CW % 2 == 0) {
    if (vec) {
#pragma unroll
      for (int j = 0; j < CW / 2; ++j) {
        const Vec<uint32_t, 2> v = ((const Vec<uint32_t, 2>*)p)[j];
        d[2 * j] = v.v[0];
        d[2 * j + 1] = v.v[1];
      }
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < CW; ++j) d[j] = p[j];
}

// Offset of flat batch index i over a row-major shape with the given strides (batch
// counts fit 32 bits: the plan checks; 64-bit division would cost ~100 instructions).
MLXA_DEVICE long long batch_loc(unsigned i, int nd, const int64_t* shape, const int64_t* str) {
  long long off = 0;
  for (int d = nd - 1; d >= 0; --d) {
    const unsigned s = (unsigned)shape[d];
    off += (long long)(i % s) * str[d];
    i /= s;
  }
  return off;
}

MLXA_DEVICE bool aligned(const void* p, int bytes) { return ((unsigned long long)p % (unsigned)bytes) == 0; }

// Batch b's operands: x (row 0), w, scales, biases (GatherQMM: lhs/rhs pick the batches).
template <typename T, typename S>
struct QmvBatch {
  const T* x;
  const uint32_t* w;
  const S* s;
  const T* b;
};

template <typename T, typename S, bool kBias>
MLXA_DEVICE QmvBatch<T, S> qmv_batch(const QmvArgs& a, long long b) {
  long long xi = b, wi = b;
  if (a.gather) {
    xi = ((const uint32_t*)a.lhs)[batch_loc((unsigned)b, a.nb, a.out_shape, a.lhs_str)];
    xi = xi < a.x_count ? xi : a.x_count - 1;   // MLX does not check; never read outside x
    wi = ((const uint32_t*)a.rhs)[batch_loc((unsigned)b, a.nb, a.out_shape, a.rhs_str)];
    wi = wi < a.w_count ? wi : a.w_count - 1;
  }
  return {(const T*)a.x + batch_loc((unsigned)xi, a.x_nb, a.x_shape, a.x_str),
          (const uint32_t*)a.w + batch_loc((unsigned)wi, a.w_nb, a.w_shape, a.w_str),
          (const S*)a.scales + batch_loc((unsigned)wi, a.w_nb, a.w_shape, a.s_str),
          kBias ? (const T*)a.biases + batch_loc((unsigned)wi, a.w_nb, a.w_shape, a.b_str) : nullptr};
}

// sum over one chunk of x times its dequantized values, one term per row r < R: the
// words wd[r], scale sc[r] and bias bi[r] of each row, x's CV values at xf.
template <typename T, int B, int Mode, int R>
MLXA_DEVICE void qmv_chunk(float* acc, const uint32_t (*wd)[Fmt<Mode, B>::CW], const float* sc, const float* bi,
                           const float* xf, const uint32_t* const* wre, const T* xre) {
  using F = Fmt<Mode, B>;
  constexpr int CV = F::CV;
  if constexpr (F::kBias) {
    // sum x (s q + b) = s sum x q + b sum x
    float sx = 0.0f, xs[CV];
#pragma unroll
    for (int i = 0; i < CV; ++i) {
      sx += xf[i];
      xs[i] = xf[i] * (1.0f / (float)(1u << shift_in_half<B>(i)));
    }
    float part[R];
#pragma unroll
    for (int r = 0; r < R; ++r) part[r] = fmaf(sc[r], affine_dot<B, CV>(wd[r], xs), bi[r] * sx);
    if (!(fabsf(sx) <= 3.4028234663852886e38f)) {
      // an infinite or NaN x: MLX multiplies x by each dequantized weight, so inf * 0
      // never arises from q == 0; take its order of operations for this chunk
      // (rare: re-read from memory rather than index registers at run time)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float e = 0.0f;
#pragma unroll 1
        for (int i = 0; i < CV; ++i)
          e += (float)widen(xre[i]) * affine_weight(sc[r], F::value(bits_at<B>(wre[r], i)), bi[r]);
        part[r] = e;
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] += part[r];
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float d = 0.0f;
#pragma unroll
      for (int i = 0; i < CV; ++i) d = fmaf(xf[i], F::value(bits_at<B>(wd[r], i)), d);
      acc[r] += sc[r] * d;
    }
  }
}

// Where one batch's operands of qmv live.
template <typename T, typename S>
struct QmvRows {
  const uint32_t* w;
  const S* s;
  const T* b;
  const T* x;
  long long w_row, s_row, b_row;
  int gshift;
  bool wvec, xvec;
};

// U chunks of one lane, c, c + step, ...: every load (words, scales, biases of each of the
// R rows rn[r], and x) first, then the sums into acc.
template <typename T, int B, int Mode, int R, int U, typename S>
MLXA_DEVICE void qmv_steps(float* acc, const QmvRows<T, S>& q, const long long* rn, long long c0, long long step) {
  using F = Fmt<Mode, B>;
  constexpr int CV = F::CV, CW = F::CW, XV = 16 / sizeof(T);
  using Xv = Vec<T, XV>;
  uint32_t wd[U][R][CW];
  S sr[U][R];
  T br[U][R];
  T xr[U][CV];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const long long c = c0 + u * step, g = (c * CV) >> q.gshift;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      load_words<CW>(wd[u][r], q.w + rn[r] * q.w_row + c * CW, q.wvec);
      sr[u][r] = q.s[rn[r] * q.s_row + g];
      if constexpr (F::kBias) br[u][r] = q.b[rn[r] * q.b_row + g];
    }
    bool done = false;
    if constexpr (CV % XV == 0) {
      if (q.xvec) {
#pragma unroll
        for (int j = 0; j < CV / XV; ++j) {
          const Xv v = ((const Xv*)(q.x + c * CV))[j];
#pragma unroll
          for (int t = 0; t < XV; ++t) xr[u][j * XV + t] = v.v[t];
        }
        done = true;
      }
    }
    if (!done) {
#pragma unroll
      for (int i = 0; i < CV; ++i) xr[u][i] = q.x[c * CV + i];
    }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const long long c = c0 + u * step;
    float sc[R], bi[R], xf[CV];
    const uint32_t* wre[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      sc[r] = F::scale(sr[u][r]);
      bi[r] = F::kBias ? (float)widen(br[u][r]) : 0.0f;
      wre[r] = q.w + rn[r] * q.w_row + c * CW;
    }
#pragma unroll
    for (int i = 0; i < CV; ++i) xf[i] = (float)widen(xr[u][i]);
    qmv_chunk<T, B, Mode, R>(acc, wd[u], sc, bi, xf, wre, q.x + c * CV);
  }
}

template <typename T, int B, int Mode, int W, int R = kQmvRows, int U = kQmvSteps>
MLXA_DEVICE void qmv(const QmvArgs& a) {
  using F = Fmt<Mode, B>;
  using S = scale_t<T, Mode>;
  constexpr int CV = F::CV, CW = F::CW, XV = 16 / sizeof(T);
  const int lane = wave_lane<W>();
  // blockIdx.x = row block * M + m: the M blocks sharing rows of w run side by side, so
  // the rows they read again come from cache
  const unsigned M = (unsigned)a.m;
  const unsigned m = blockIdx.x % M;
  // ksplit waves share a row group (long rows, few rows: more loads in flight)
  const int ks = a.ksplit, wave = wave_index<W>();
  const int kpart = wave % ks;
  const long long row0 = ((long long)(blockIdx.x / M) * (kQmvWaves / ks) + wave / ks) * R;
  __shared__ float partial[kQmvWaves][R];
  const long long N = a.n;
  const long long chunks = a.k / CV;
  const int gshift = a.group_shift;
  const long long step = (long long)W * ks;
  for (long long b = blockIdx.y; b < a.batch; b += gridDim.y) {
    const QmvBatch<T, S> q = qmv_batch<T, S, F::kBias>(a, b);
    const T* xb = q.x + m * a.x_row;
    const uint32_t* wb = q.w;
    const S* sb = q.s;
    const T* bb = q.b;
    const bool wvec = a.w_vec && aligned(wb, chunk_align<CW>());
    const bool xvec = a.x_vec && aligned(xb, 16) && CV % XV == 0;
    // rows past the end read the last row (valid memory); their sums are never stored
    long long rn[R];
#pragma unroll
    for (int r = 0; r < R; ++r) rn[r] = row0 + r < N ? row0 + r : N - 1;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    // full groups of U chunks (no bounds checks: the loads stay ahead of the arithmetic),
    // then the rest one chunk at a time
    const QmvRows<T, S> rows{wb, sb, bb, xb, a.w_row, a.s_row, a.b_row, gshift, wvec, xvec};
    long long c = lane + (long long)kpart * W;
#pragma unroll 1
    for (; c + (U - 1) * step < chunks; c += step * U) qmv_steps<T, B, Mode, R, U>(acc, rows, rn, c, step);
#pragma unroll 1
    for (; c < chunks; c += step) qmv_steps<T, B, Mode, R, 1>(acc, rows, rn, c, step);
    float v[R];
#pragma unroll
    for (int r = 0; r < R; ++r) v[r] = wave_reduce<W>(acc[r], [](float p, float q) { return p + q; });
    if (ks > 1) {
      if (lane == 0) {
#pragma unroll
        for (int r = 0; r < R; ++r) partial[wave][r] = v[r];
      }
      sync_block();
      if (kpart == 0 && lane == 0) {
#pragma unroll
        for (int r = 0; r < R; ++r)
          for (int j = 1; j < ks; ++j) v[r] += partial[wave + j][r];
      }
      sync_block();   // partial is reused by the next batch
    }
    if (kpart == 0 && lane == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (row0 + r < N) ((T*)a.out)[(b * M + m) * N + row0 + r] = cast<T>(v[r]);
    }
  }
}

// ---- qmv_h2: 2/4/8-bit affine w and 16-bit x on packed half-precision math --------------
//
// qmv spends ~7 issued instructions a weight (mask, magic, subtract and FMA in float, plus
// x's conversion once per row group); on the H200 that keeps it at 0.3-0.45 of the copy
// bandwidth, limited by the ALU, not by memory (benchmarks/results/qmv_matrix_unit-h200.txt).
// Here a value costs half of one and_or (two values become the half2 1024 + q * 2^s), half
// an HSUB2 (minus 1024, exact) and half an HFMA2 against x. For that, each block first
// writes its row of x into shared memory once, as the half2 pairs the masks produce (values
// i and i + 16/B of a word, each pre-scaled by 2^-s, exact), times a power of two per chunk
// of 32 values that keeps the half sums far from overflow (chunk max in [2^E, 2^(E+1)):
// 16 products of q < 2^B stay below 2^15). Per row and chunk the two half2 sums (8 products
// each) go to float once: scale * sum / 2^k + bias * sum x, the rest of the sum in float.
// Precision: x, q and 2^-s are exact in half; each product rounds to 11 bits and each half
// sum of 16 terms adds ~2^-12 relative to its terms, below the 16-bit output's own rounding.
// Non-finite x (any chunk) sends the whole block through qmv's float path instead.
// The weight loads of the next chunk are in flight while the current one is summed, and the
// first ones while x is staged. Launched with 72 bytes of dynamic shared memory per chunk
// of k; k at most ~18k values (the launcher checks) and affine modes of 2, 4, 8 bits only.
// A grid smaller than the row blocks (the launcher: two blocks per compute unit) has each
// block loop over row blocks with x staged once; the row blocks may span sibling matrices
// times the same x (quantized_args.h: QmvSibs), each block reading its matrix's operands. Measured on the H200 (tools/qmv_mma.cu,
// 4-bit g64 bf16, share of the copy bandwidth): 8b head 0.47 -> 0.77, gate/up 0.37 -> 0.47,
// down 0.37 -> 0.49 against qmv; small matrices (<10 MB) stay latency-bound near qmv.
// 256 threads a block at either width: 8 or 4 row groups (a 512-thread block left CDNA two
// per SIMD, 256 VGPRs, and its float16 variants spilled); two resident blocks per SM on NVIDIA
// (<= 128 registers)
constexpr int kQmvH2Threads = 256;
// chunks of loads a lane keeps: two (one in flight while one is summed) measured best on the
// H200; AMD's compiler needs ~30 more VGPRs for the ring than nvcc and spilled the 4-bit
// bfloat16 kernel on gfx1100, so there one (loads, then sums; its occupancy hides latency)
constexpr int kQmvH2Stages = MLXA_PLATFORM_NVIDIA ? 2 : 1;
template <int W>
constexpr int qmv_h2_groups = kQmvH2Threads / W;

template <int B>
struct H2Fmt {
  static_assert(B == 2 || B == 4 || B == 8, "qmv_h2 takes 2, 4 or 8 bits");
  static constexpr int CW = B;            // 32-bit words per chunk of 32 values
  static constexpr int PB = 8 / B;        // values per byte: one sub-word's masks
  static constexpr int PH = 16 / B;       // values per 16-bit half of a word
  static constexpr int PW = 16 / B;       // half2 pairs per word (two sub-words of PB)
  static constexpr int E = B == 2 ? 8 : (B == 4 ? 6 : 2);
  static constexpr int R = B == 8 ? 2 : 4;   // rows per wave (registers: two chunks in flight)
};

MLXA_DEVICE __half2 h2_from_bits(uint32_t u) {
  __half2 h;
  __builtin_memcpy(&h, &u, 4);
  return h;
}
MLXA_DEVICE uint32_t h2_to_bits(__half2 h) {
  uint32_t u;
  __builtin_memcpy(&u, &h, 4);
  return u;
}

// A chunk's w words, scale and bias for each of R rows.
template <typename T, int B, int R>
struct H2Load {
  uint32_t w[R][B];
  T s[R], b[R];
};

// Each row's offsets from its batch's w, scales and biases (32-bit: the launcher checks).
template <int R>
struct H2Rows {
  uint32_t w[R], s[R], b[R];
};

template <typename T, int B, int R>
MLXA_DEVICE void qmv_h2_load(H2Load<T, B, R>& L, const QmvRows<T, T>& q, const H2Rows<R>& o, uint32_t c) {
  const uint32_t g = (c * 32u) >> q.gshift;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    load_words<B>(L.w[r], q.w + (o.w[r] + c * B), true);   // unaligned w takes the float path
    L.s[r] = q.s[o.s[r] + g];
    L.b[r] = q.b[o.b[r] + g];
  }
}

// acc[r] += chunk c of row r, x's half2 pairs from shared memory (xs: 4 runs of nch uint4,
// then nch float2 of (sum x, 2^-k)).
template <typename T, int B, int R>
MLXA_DEVICE void qmv_h2_sum(float* acc, const H2Load<T, B, R>& L, const Vec<uint32_t, 4>* xs, uint32_t nch,
                            uint32_t c) {
  using H = H2Fmt<B>;
  uint32_t xh[16];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const Vec<uint32_t, 4> v = xs[j * nch + c];
#pragma unroll
    for (int t = 0; t < 4; ++t) xh[4 * j + t] = v.v[t];
  }
  const Vec<float, 2> mt = ((const Vec<float, 2>*)(xs + 4 * nch))[c];
  const __half2 k1024 = h2_from_bits(0x64006400u);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    __half2 a0 = h2_from_bits(0u), a1 = h2_from_bits(0u);
#pragma unroll
    for (int j = 0; j < B; ++j) {
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const uint32_t u = s ? L.w[r][j] >> 8 : L.w[r][j];
#pragma unroll
        for (int t = 0; t < H::PB; ++t) {
          const int p = j * H::PW + s * H::PB + t;
          constexpr uint32_t m = (1u << B) - 1u;
          const uint32_t mask = (m << (t * B)) | (m << (t * B + 16));
          const __half2 h = __hsub2(h2_from_bits(and_or(u, mask, 0x64006400u)), k1024);
          if (p & 1) a1 = __hfma2(h, h2_from_bits(xh[p]), a1);
          else a0 = __hfma2(h, h2_from_bits(xh[p]), a0);
        }
      }
    }
    const __half2 a = __hadd2(a0, a1);
    const float d = (__low2float(a) + __high2float(a)) * mt.v[1];
    acc[r] += fmaf((float)widen(L.s[r]), d, (float)widen(L.b[r]) * mt.v[0]);
  }
}

// Chunk c of x (32 values at xc) as floats (xvec: in 16-byte loads).
template <typename T>
MLXA_DEVICE void qmv_h2_read(float* v, const T* xc, bool xvec) {
  constexpr int XV = 16 / sizeof(T);
  if (xvec) {
#pragma unroll
    for (int j = 0; j < 32 / XV; ++j) {
      const Vec<T, XV> q = ((const Vec<T, XV>*)xc)[j];
#pragma unroll
      for (int t = 0; t < XV; ++t) v[j * XV + t] = (float)widen(q.v[t]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = (float)widen(xc[i]);
  }
}

// 1/(1+e^|x|) on the side that cannot overflow: the generated kernels' sigmoid (compiled.py's
// sigmoid_f), so the fused SwiGLU rounds exactly as the Compiled node it replaces.
MLXA_DEVICE float glu_sigmoid(float x) {
  const float y = 1.0f / (1.0f + expf(fabsf(x)));
  return x < 0.0f ? y : 1.0f - y;
}

// silu(g) * u of two T values rounded to T after each op as mlx-lm's compiled swiglu rounds
// them (the sigmoid, g times it, that times u): the Compiled node qmv_h2's GLU epilogue replaces.
template <typename T>
MLXA_DEVICE T glu_of(T g, T u) {
  const float gf = (float)widen(g);
  const float sl = (float)widen(cast<T>(gf * (float)widen(cast<T>(glu_sigmoid(gf)))));
  return cast<T>(sl * (float)widen(u));
}

// Stage chunk c of x (its 32 values in v) as H2Fmt's half2 pairs; false if x there is not finite.
template <int B>
MLXA_DEVICE bool qmv_h2_stage(Vec<uint32_t, 4>* xs, uint32_t nch, uint32_t c, const float* v) {
  using H = H2Fmt<B>;
  float mx = 0.0f, sx = 0.0f;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    mx = fmaxf(mx, fabsf(v[i]));
    sx += v[i];
  }
  // mx * 2^k in [2^E, 2^(E+1)); a subnormal max lands lower (still exact); clamped so 2^k is finite
  const int ex = (int)((float_as_uint(mx) >> 23) & 255u);
  const int k = mx > 0.0f ? min(H::E + 127 - max(ex, 1), 120) : 0;
  const float sc = ldexpf(1.0f, k);
  uint32_t h[16];
#pragma unroll
  for (int p = 0; p < 16; ++p) {
    const int j = p / H::PW, s = (p % H::PW) / H::PB, t = p % H::PB;
    const int lo = j * (32 / B) + s * H::PB + t;
    const float f = sc * (1.0f / (float)(1u << (t * B)));
    h[p] = h2_to_bits(__floats2half2_rn(v[lo] * f, v[lo + H::PH] * f));
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) xs[j * nch + c] = Vec<uint32_t, 4>{{h[4 * j], h[4 * j + 1], h[4 * j + 2], h[4 * j + 3]}};
  ((Vec<float, 2>*)(xs + 4 * nch))[c] = Vec<float, 2>{{sx, ldexpf(1.0f, -k)}};
  return fabsf(sx) <= 3.4028234663852886e38f;
}

MLXA_DYNAMIC_SHARED(qmv_h2_x, Vec<uint32_t, 4>);

// Bytes of qmv_h2's dynamic shared memory before the prologue's row (16-byte aligned).
MLXA_DEVICE uint32_t qmv_h2_pro_offset(uint32_t nch) { return (nch * 72u + 15u) & ~15u; }

// The matrix (QmvArgs' or a sibling's) that row block rb of qmv_h2 belongs to: its operands,
// its first global row and its rows. Siblings start on a row-block boundary (the launcher).
template <typename T>
struct H2Seg {
  const uint32_t* w;
  const T* s;
  const T* b;
  T* out;
  long long first, rows;
};

// Where qmv_h2's x comes from: read (QmvArgs' x), or the RMS norm prologue's row in shared
// memory (mlxa/norm_prologue.h: qmv_h2n; m == 1, batch 1).
enum : int { kPlainX = 0, kRmsX = 1 };
// Glu: the GLU epilogue (quantized_args.h: QmvGlu; qmv_h2g, qmv_h2ng): the matrix and its one
// sibling are an MLP's gate and up of equal rows; a block takes row block j of both, one after
// the other, and also stores silu(gate) * up of its rows (the swiglu node after them).
template <typename T, int B, int W, int Pro = kPlainX, int R = H2Fmt<B>::R, int NW = qmv_h2_groups<W>,
          int S = kQmvH2Stages, bool Glu = false>
MLXA_DEVICE void qmv_h2(const QmvSibs& sib, const QmvArgs& a, const QmvSibRows& sr, const RmsPro* pro = nullptr,
                        const RmsProShape* ps = nullptr, T* glu_out = nullptr) {
  const int lane = wave_lane<W>(), wave = wave_index<W>();
  const unsigned M = (unsigned)a.m;
  const unsigned m = blockIdx.x % M;
  const int ks = a.ksplit, kpart = wave % ks;
  __shared__ float partial[NW][R];
  __shared__ int bad;
  Vec<uint32_t, 4>* xs = qmv_h2_x;
  const long long N0 = a.n, N1 = sr.rows[0], N2 = sr.rows[1];
  const uint32_t nch = (uint32_t)(a.k / 32), step = (uint32_t)(W * ks), last = nch - 1;
  // blocks of (NW / ks) * R rows; a grid smaller than that loops over them, staging x once
  const long long block_rows = (long long)(NW / ks) * R;
  const long long nrb = (N0 + block_rows - 1) / block_rows + (N1 + block_rows - 1) / block_rows +
                        (N2 + block_rows - 1) / block_rows;
  const long long nblk = gridDim.x / M;
  // row blocks (Glu: the gate's, each with the up's of the same rows), every nblk-th a block
  const long long nunits = Glu ? (N0 + block_rows - 1) / block_rows : nrb;
  const uint32_t c0 = (uint32_t)(lane + kpart * W);
  for (long long b = blockIdx.y; b < a.batch; b += gridDim.y) {
    const QmvBatch<T, T> q = qmv_batch<T, T, true>(a, b);
    // the prologue's y in shared memory (a generic pointer: qmv's float path reads it too)
    T* ys = (T*)((char*)xs + qmv_h2_pro_offset(nch));
    const T* xb = Pro == kRmsX ? ys : q.x + m * a.x_row;
    const bool xvec = Pro == kRmsX || (a.x_vec && aligned(xb, 16));
    // a ring of S chunks' loads: S - 1 in flight while one is summed (indices are constants
    // once the stage loop unrolls, so the ring stays in registers)
    H2Load<T, B, R> L[S];
    bool staged = false;
#pragma unroll 1
    for (long long u = blockIdx.x / M; u < nunits; u += nblk) {
      const long long e1 = (N0 + block_rows - 1) / block_rows * block_rows;
      const long long e2 = e1 + (N1 + block_rows - 1) / block_rows * block_rows;
      float vg[R];   // (Glu) the gate's sums of the row block
#pragma unroll 1
      for (int mat = 0; mat < (Glu ? 2 : 1); ++mat) {
        // the unit's first row over the three matrices (Glu: the gate's, then the up's)
        const long long grow = u * block_rows + (mat ? e1 : 0);
        const H2Seg<T> sg = grow < e1 ? H2Seg<T>{q.w, q.s, q.b, (T*)a.out + (b * M + m) * N0, 0, N0}
                          : grow < e2 ? H2Seg<T>{(const uint32_t*)sib.w[0], (const T*)sib.scales[0],
                                                 (const T*)sib.biases[0], (T*)sib.out[0] + m * N1, e1, N1}
                                      : H2Seg<T>{(const uint32_t*)sib.w[1], (const T*)sib.scales[1],
                                                 (const T*)sib.biases[1], (T*)sib.out[1] + m * N2, e2, N2};
        const long long N = sg.rows;
        const bool wvec = a.w_vec && aligned(sg.w, chunk_align<B>());
        const QmvRows<T, T> rows{sg.w, sg.s, sg.b, xb, a.w_row, a.s_row, a.b_row, a.group_shift, wvec, xvec};
        const long long row0 = grow - sg.first + (long long)(wave / ks) * R;
        // rows past the end read the last row (valid memory); their sums are never stored
        H2Rows<R> o;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const uint32_t n = (uint32_t)(row0 + r < N ? row0 + r : N - 1);
          o.w[r] = n * (uint32_t)a.w_row;
          o.s[r] = n * (uint32_t)a.s_row;
          o.b[r] = n * (uint32_t)a.b_row;
        }
#pragma unroll
        for (int st = 0; st < S - 1; ++st) {
          const uint32_t cs = c0 + st * step;
          qmv_h2_load<T, B, R>(L[st], rows, o, cs < nch ? cs : last);
        }
        if (!staged) {   // the first row block's loads fly while x is made (Pro) and staged
          if constexpr (Pro == kRmsX) rms_prologue<T, W>(ys, *pro, *ps, nch * 32u);
          if (threadIdx.x == 0) bad = 0;
          sync_block();
          bool fin = true;
          for (uint32_t i = threadIdx.x; i < nch; i += blockDim.x) {
            float v[32];
            qmv_h2_read<T>(v, xb + i * 32, xvec);
            fin &= qmv_h2_stage<B>(xs, nch, i, v);
          }
          if (!fin) bad = 1;
          sync_block();
          staged = true;
        }
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = 0.0f;
        if (bad || !wvec) {
          // qmv's float path, RF rows a pass (AMD: one, the rare path's registers would
          // otherwise set the kernel's and spill on gfx1151/gfx12)
          constexpr int RF = MLXA_PLATFORM_NVIDIA ? R : 1;
#pragma unroll
          for (int r0 = 0; r0 < R; r0 += RF) {
            long long rn[RF];
            float part[RF];
#pragma unroll
            for (int j = 0; j < RF; ++j) {
              rn[j] = row0 + r0 + j < N ? row0 + r0 + j : N - 1;
              part[j] = 0.0f;
            }
#pragma unroll 1
            for (long long c = c0; c < nch; c += step) qmv_steps<T, B, kAffine, RF, 1>(part, rows, rn, c, step);
#pragma unroll
            for (int j = 0; j < RF; ++j) acc[r0 + j] = part[j];
          }
        } else {
          uint32_t c = c0;
#pragma unroll 1
          while (c < nch) {
#pragma unroll
            for (int st = 0; st < S; ++st) {
              // past the end: reload the last chunk (cached; a branch kept the old stage live
              // and spilled)
              const uint32_t cn = c + (S - 1) * step;
              qmv_h2_load<T, B, R>(L[(st + S - 1) % S], rows, o, cn < nch ? cn : last);
              qmv_h2_sum<T, B, R>(acc, L[st], xs, nch, c);
              c += step;
              if (c >= nch) break;
            }
          }
        }
        float v[R];
#pragma unroll
        for (int r = 0; r < R; ++r) v[r] = wave_reduce<W>(acc[r], [](float p, float q) { return p + q; });
        if (ks > 1) {
          if (lane == 0) {
#pragma unroll
            for (int r = 0; r < R; ++r) partial[wave][r] = v[r];
          }
          sync_block();
          if (kpart == 0 && lane == 0) {
#pragma unroll
            for (int r = 0; r < R; ++r)
              for (int j = 1; j < ks; ++j) v[r] += partial[wave + j][r];
          }
          sync_block();   // partial is reused by the next row block
        }
        if (kpart == 0 && lane == 0) {
#pragma unroll
          for (int r = 0; r < R; ++r)
            if (row0 + r < N) sg.out[row0 + r] = cast<T>(v[r]);
        }
        if constexpr (Glu) {
          if (mat == 0) {
#pragma unroll
            for (int r = 0; r < R; ++r) vg[r] = v[r];
          } else if (kpart == 0 && lane == 0) {
#pragma unroll
            for (int r = 0; r < R; ++r)
              if (row0 + r < N) glu_out[(b * M + m) * N0 + row0 + r] = glu_of<T>(cast<T>(vg[r]), cast<T>(v[r]));
          }
        }
      }
    }
    sync_block();   // x is staged again for the next batch
  }
}

// ---- qmv on the matrix unit: 4-bit affine w, 16-bit x (M <= 8 rows) -----------------------
//
// A 16 x 16 tile of w (rows x k) is the A operand, x's rows are B's columns, D holds rows x
// rows of x. Any one-to-one map of a group's k onto an MMA's k serves as long as A and B agree,
// so each lane takes a contiguous part of each group of its row(s) and the pairs (i, i + 4) of
// values that one mask extracts from a word. The product runs on 128 + q (bfloat16: the value
// straight from the mask; the 128 * sum x it adds is taken off with the biases) or on q itself
// (float16: 1024 + q minus 1024, exact). A second MMA with an all-ones A gives every group's sum
// of x. Two backends: NVIDIA's m16n8k16 fragments and the grouped layout (mma.h's
// GroupedTiles) of CDNA's MFMA and RDNA4's WMMA; RDNA3's WMMA (whole rows a lane, repeated in
// both halves of the wave) has none yet, nor has any arch without a 16-bit matrix unit.
constexpr int kQmvMmaWaves = 4;      // waves per block: 4 / ksplit tiles of 16 rows
constexpr int kQmvMmaStage = 256;    // k a multiple of this (the NVIDIA backend's loads)
constexpr int kMmaWave = mma::Tiles<half>::kWave;                  // the wave of this target's tiles
constexpr int kQmvMmaThreads = kQmvMmaWaves * kMmaWave;
#if MLXA_MMA_SYNC
#define MLXA_QMV_MMA_NV 1
#define MLXA_QMV_MMA_GROUPED 0
#elif MLXA_PLATFORM_AMD && (MLXA_HAS_MFMA || MLXA_WMMA_GFX12)
#define MLXA_QMV_MMA_NV 0
#define MLXA_QMV_MMA_GROUPED 1
#else
#define MLXA_QMV_MMA_NV 0
#define MLXA_QMV_MMA_GROUPED 0
#endif

// Two 4-bit values of a word, already shifted to bits 0 and 16, as two 16-bit A values:
// 128 + q in bfloat16 (the caller takes 128 * sum x off), q in float16.
template <typename T>
MLXA_DEVICE uint32_t qmv_a_pair(uint32_t v) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    return and_or(v, 0x000F000Fu, 0x43004300u);
  } else {
    const uint32_t h = and_or(v, 0x000F000Fu, 0x64006400u);   // 1024 + q, twice
#if MLXA_PLATFORM_NVIDIA
    uint32_t r;
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(h), "r"(0x64006400u));
    return r;
#elif MLXA_PLATFORM_EMU
    const float lo = to_float(half{(unsigned short)h}) - 1024.0f, hi = to_float(half{(unsigned short)(h >> 16)}) - 1024.0f;
    return (uint32_t)to_half(lo).bits | ((uint32_t)to_half(hi).bits << 16);
#else
    typedef _Float16 f16x2 __attribute__((ext_vector_type(2)));
    const f16x2 d = __builtin_bit_cast(f16x2, h) - (f16x2){(_Float16)1024.0f, (_Float16)1024.0f};
    return __builtin_bit_cast(uint32_t, d);
#endif
  }
}

// The bias term's coefficient of a group: b, less 128 s where A held 128 + q.
template <typename T>
MLXA_DEVICE float qmv_bias(float s, float b) {
  return std::is_same_v<T, bfloat16> ? fmaf(-128.f, s, b) : b;
}

// One sum in MLX's order of operations (x times each dequantized weight): row n of w against
// row m of x over k0 .. k1, by one lane, serially. For a base address off the fast path's
// alignment (a view at an odd offset) and for x holding an infinity or NaN (inf * 0 must not
// arise from q == 0): rare, slow, and light on registers.
template <typename T, int GS>
MLXA_DEVICE float qmv_mlx_order(const QmvArgs& a, const QmvBatch<T, T>& q, long long n, int m, long long k0,
                                long long k1) {
  n = n < a.n ? n : a.n - 1;
  const T* x = q.x + m * a.x_row;
  const uint32_t* w = q.w + n * a.w_row;
  float sum = 0.0f;
#pragma unroll 1
  for (long long k = k0; k < k1; ++k) {
    const float s = (float)widen(q.s[n * a.s_row + k / GS]), b = (float)widen(q.b[n * a.b_row + k / GS]);
    sum += (float)widen(x[k]) * affine_weight(s, u16_to_float((w[k / 8] >> (4 * (k % 8))) & 15u), b);
  }
  return sum;
}

// Sums of the block's waves that split k (ksplit), then the stores: a lane's sum ``sl`` of NS
// is tile row ``row(sl)`` and row ``col(sl)`` of x.
template <typename T, int NS, class Row, class Col>
MLXA_DEVICE void qmv_mma_store(const QmvArgs& a, float (*red)[16][8], const float* acc, int wave, int part, int ks,
                               long long n0, long long b, Row row, Col col) {
  const int M = (int)a.m;
  if (ks > 1) {
#pragma unroll
    for (int sl = 0; sl < NS; ++sl)
      if (col(sl) < 8) red[wave][row(sl)][col(sl)] = acc[sl];
    sync_block();
  }
  if (part == 0) {
#pragma unroll
    for (int sl = 0; sl < NS; ++sl) {
      const long long n = n0 + row(sl);
      const int m = col(sl);
      if (n < a.n && m < M) {
        float v = acc[sl];
        for (int j = 1; j < ks; ++j) v += red[wave + j][row(sl)][m];
        ((T*)a.out)[(b * M + m) * a.n + n] = cast<T>(v);
      }
    }
  }
  if (ks > 1) sync_block();   // red is reused by the next batch
}

#if MLXA_QMV_MMA_NV
// Value hi (0: low half, 1: high) of a word of two 16-bit scales or biases.
MLXA_DEVICE float half_of(uint32_t w, int hi, bool bf) {
  const unsigned short v = (unsigned short)(hi ? w >> 16 : w);
  return bf ? to_float(bfloat16{v}) : to_float(half{v});
}

template <typename T, int G>
struct QmvMmaStage {
  static constexpr int GPS = kQmvMmaStage / G, SW = (GPS + 1) / 2;
  uint32_t w0[8], w1[8];                 // rows g, g + 8: G / 32 words of each group
  uint32_t s0[SW], s1[SW], b0[SW], b1[SW];
};

// N words at p, in 16-byte (or 8-byte) loads where N allows: the kernel checked the alignment.
template <int N>
MLXA_DEVICE void load_u32(uint32_t* d, const uint32_t* p) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int j = 0; j < N / 4; ++j) {
      const Vec<uint32_t, 4> v = ((const Vec<uint32_t, 4>*)p)[j];
#pragma unroll
      for (int e = 0; e < 4; ++e) d[4 * j + e] = v.v[e];
    }
  } else if constexpr (N == 2) {
    const Vec<uint32_t, 2> v = *(const Vec<uint32_t, 2>*)p;
    d[0] = v.v[0];
    d[1] = v.v[1];
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) d[j] = p[j];
  }
}

// Where a lane's rows live in one batch, and its place in the fragments.
template <typename T>
struct QmvMmaRows {
  const uint32_t* w0;
  const uint32_t* w1;
  const unsigned short* s0;
  const unsigned short* s1;
  const unsigned short* b0;
  const unsigned short* b1;
  const T* x;           // row g of x (quad g < M), else row 0
  int g, t, M;
};

template <typename T, int G>
MLXA_DEVICE void qmv_mma_load(QmvMmaStage<T, G>& st, const QmvMmaRows<T>& r, int stage) {
  using St = QmvMmaStage<T, G>;
  constexpr int WPG = G / 32;
#pragma unroll
  for (int j = 0; j < St::GPS; ++j) {
    const int off = stage * 32 + j * (G / 8) + r.t * WPG;
    load_u32<WPG>(st.w0 + j * WPG, r.w0 + off);
    load_u32<WPG>(st.w1 + j * WPG, r.w1 + off);
  }
  const int so = stage * St::GPS;   // a stage's scales and biases: SW words of pairs of 16-bit values
  load_u32<St::SW>(st.s0, (const uint32_t*)(r.s0 + so));
  load_u32<St::SW>(st.s1, (const uint32_t*)(r.s1 + so));
  load_u32<St::SW>(st.b0, (const uint32_t*)(r.b0 + so));
  load_u32<St::SW>(st.b1, (const uint32_t*)(r.b1 + so));
}

// acc[i][c] += the stage's groups for rows g + 8 i and x row 2t + c.
template <typename T, int G>
MLXA_DEVICE void qmv_mma_stage(float (&acc)[2][2], bool& bad, const QmvMmaStage<T, G>& st, const QmvMmaRows<T>& r,
                               int stage) {
  using St = QmvMmaStage<T, G>;
  constexpr int WPG = G / 32, XW = G / 8;   // words of a lane's x quarter (G / 4 values)
  constexpr bool kBf = std::is_same_v<T, bfloat16>;
  const uint32_t ones[4] = {kBf ? 0x3F803F80u : 0x3C003C00u, kBf ? 0x3F803F80u : 0x3C003C00u,
                            kBf ? 0x3F803F80u : 0x3C003C00u, kBf ? 0x3F803F80u : 0x3C003C00u};
#pragma unroll
  for (int j = 0; j < St::GPS; ++j) {
    const long long k0 = (long long)stage * kQmvMmaStage + j * G;   // the group's first k
    uint32_t xv[XW];
    if (r.g < r.M) {
      load_u32<XW>(xv, (const uint32_t*)(r.x + k0 + r.t * (G / 4)));
    } else {
#pragma unroll
      for (int e = 0; e < XW; ++e) xv[e] = 0u;
    }
    float d[4] = {0.f, 0.f, 0.f, 0.f}, e[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int wi = 0; wi < WPG; ++wi) {
      const uint32_t u0 = st.w0[j * WPG + wi], u1 = st.w1[j * WPG + wi];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t A[4] = {qmv_a_pair<T>(u0 >> (8 * h)), qmv_a_pair<T>(u1 >> (8 * h)),
                               qmv_a_pair<T>(u0 >> (8 * h + 4)), qmv_a_pair<T>(u1 >> (8 * h + 4))};
        // x at the same k: values 8 wi + 2h + {0, 4} (b0) and + {1, 5} (b1) of the quarter
        const uint32_t lo = xv[4 * wi + h], hi = xv[4 * wi + h + 2];
        const uint32_t B0 = __byte_perm(lo, hi, 0x5410), B1 = __byte_perm(lo, hi, 0x7632);
        mma::mma16816<T>(d, A, B0, B1);
        mma::mma16816<T>(e, ones, B0, B1);
      }
    }
    const float s0 = half_of(st.s0[j / 2], j & 1, kBf), s1 = half_of(st.s1[j / 2], j & 1, kBf);
    const float b0 = half_of(st.b0[j / 2], j & 1, kBf), b1 = half_of(st.b1[j / 2], j & 1, kBf);
    const float e0 = kBf ? fmaf(-128.f, s0, b0) : b0, e1 = kBf ? fmaf(-128.f, s1, b1) : b1;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      acc[0][c] += fmaf(s0, d[c], e0 * e[c]);
      acc[1][c] += fmaf(s1, d[2 + c], e1 * e[2 + c]);
    }
    // an infinite or NaN x: the caller redoes the tile in MLX's order
    bad |= !(fabsf(e[0]) <= 3.4028234663852886e38f) || !(fabsf(e[1]) <= 3.4028234663852886e38f);
  }
}

// A lane's stages s_begin .. s_end - 1: two register sets, the next stage's loads in flight
// while this one is multiplied.
template <typename T, int G>
MLXA_DEVICE bool qmv_mma_rows(float (&acc)[2][2], const QmvMmaRows<T>& r, int s_begin, int s_end) {
  QmvMmaStage<T, G> sa, sb;
  bool bad = false;
  if (s_begin < s_end) qmv_mma_load<T, G>(sa, r, s_begin);
#pragma unroll 1
  for (int st = s_begin; st < s_end; st += 2) {
    if (st + 1 < s_end) qmv_mma_load<T, G>(sb, r, st + 1);
    qmv_mma_stage<T, G>(acc, bad, sa, r, st);
    if (st + 1 >= s_end) break;
    if (st + 2 < s_end) qmv_mma_load<T, G>(sa, r, st + 2);
    qmv_mma_stage<T, G>(acc, bad, sb, r, st + 1);
  }
  return bad;
}

#endif  // MLXA_QMV_MMA_NV

#if MLXA_QMV_MMA_GROUPED
// ---- the grouped layout (CDNA MFMA: G = 4 on its wide waves; RDNA4 WMMA: G = 8) -----------
// Lane l holds A's row l % 16 and B's column l % 16 at k G (l / 16) .. + G - 1 of an MMA, and
// D's column l % 16 at rows G (l / 16) + e. The W / 16 lanes of one row split each group of it
// into contiguous parts of GS / 2 / (W / 16) bytes; an MMA takes G / 2 pairs of one part.
#if MLXA_HAS_MFMA
template <typename T> using QmvOps = mma::MfmaOps<T>;
template <typename T> constexpr bool kQmvGroupedOk = mma::MfmaOps<T>::kOk;   // gfx908: no bfloat16
constexpr int kQmvG = 4;
#else
template <typename T> using QmvOps = mma::Wmma12Ops<T>;
template <typename T> constexpr bool kQmvGroupedOk = true;
constexpr int kQmvG = 8;
#endif

template <typename T, int GS>
MLXA_DEVICE void qmv_mma_grouped(const QmvArgs& a) {
  constexpr int G = kQmvG, W = kMmaWave, Q = W / 16;
  constexpr int LW = GS / 8 / Q;          // words of a row's group a lane holds
  constexpr int LX = 8 * LW;              // values of x at the same k
  constexpr bool kBf = std::is_same_v<T, bfloat16>;
  typedef short IV __attribute__((ext_vector_type(G)));
  typedef float FV __attribute__((ext_vector_type(G)));
  static_assert(LW >= 1 && (GS / 16) * G / 2 == 4 * LW, "an MMA takes G / 2 pairs of a lane's words");
  const int lane = (int)threadIdx.x % W, wave = (int)threadIdx.x / W;
  const int c = lane % 16, qq = lane / 16;
  const int ks = a.ksplit, part = wave % ks;
  const long long n0 = ((long long)blockIdx.x * (kQmvMmaWaves / ks) + wave / ks) * 16;
  const long long N = a.n;
  const int M = (int)a.m;
  const int groups = (int)(a.k / GS), per = (groups + ks - 1) / ks;
  const int g_begin = part * per, g_end = min(g_begin + per, groups);
  __shared__ float red[kQmvMmaWaves][16][8];
  IV ones;
#pragma unroll
  for (int e = 0; e < G; ++e) ones[e] = (short)(kBf ? 0x3F80 : 0x3C00);
  for (long long b = blockIdx.y; b < a.batch; b += gridDim.y) {
    const QmvBatch<T, T> q = qmv_batch<T, T, true>(a, b);
    const uint32_t* wr = q.w + (n0 + c < N ? n0 + c : N - 1) * a.w_row + qq * LW;   // A's row, this lane's part
    const T* xr = q.x + (c < M ? c : 0) * a.x_row + qq * LX;                       // B's column
    long long rd[G];                                                               // D's rows
#pragma unroll
    for (int e = 0; e < G; ++e) rd[e] = n0 + G * qq + e < N ? n0 + G * qq + e : N - 1;
    FV acc;
#pragma unroll
    for (int e = 0; e < G; ++e) acc[e] = 0.f;
    // x is read as pairs of values; a base off that takes the slow path (uniform: the wave's
    // MMAs need every lane, so no lane leaves the loop early either)
    const bool unaligned = !(a.x_vec && aligned(q.x, 4));
    bool bad = unaligned;
#pragma unroll 1
    for (int gi = g_begin; gi < (unaligned ? g_begin : g_end); ++gi) {
      uint32_t u[LW], xv[LX / 2];
#pragma unroll
      for (int j = 0; j < LW; ++j) u[j] = wr[(long long)gi * (GS / 8) + j];
#pragma unroll
      for (int j = 0; j < LX / 2; ++j) xv[j] = c < M ? ((const uint32_t*)(xr + (long long)gi * GS))[j] : 0u;
      FV d, e1;
#pragma unroll
      for (int e = 0; e < G; ++e) d[e] = e1[e] = 0.f;
#pragma unroll
      for (int mi = 0; mi < GS / 16; ++mi) {
        IV av, bv;
#pragma unroll
        for (int e = 0; e < G; e += 2) {
          const int pi = (mi * G + e) / 2, wi = pi / 4, p = pi % 4;   // pair p of word wi: values p, p + 4
          const uint32_t ap = qmv_a_pair<T>(u[wi] >> (4 * p));
          const uint32_t lo = xv[4 * wi + p / 2], hi = xv[4 * wi + p / 2 + 2];
          const uint32_t bp = (p & 1) ? ((lo >> 16) | (hi & 0xFFFF0000u)) : ((lo & 0xFFFFu) | (hi << 16));
          av[e] = (short)(ap & 0xFFFFu);
          av[e + 1] = (short)(ap >> 16);
          bv[e] = (short)(bp & 0xFFFFu);
          bv[e + 1] = (short)(bp >> 16);
        }
        d = QmvOps<T>::mma(av, bv, d);
        e1 = QmvOps<T>::mma(ones, bv, e1);
      }
#pragma unroll
      for (int e = 0; e < G; ++e) {
        const float s = (float)widen(q.s[rd[e] * a.s_row + gi]), bi = (float)widen(q.b[rd[e] * a.b_row + gi]);
        acc[e] += fmaf(s, d[e], qmv_bias<T>(s, bi) * e1[e]);
      }
      bad |= !(fabsf(e1[0]) <= 3.4028234663852886e38f);   // an infinity or NaN in x
    }
    float out[G];
#pragma unroll
    for (int e = 0; e < G; ++e) out[e] = acc[e];
    if (bad && c < M) {   // an infinity or NaN in this column of x, or x not aligned for its reads
#pragma unroll 1
      for (int e = 0; e < G; ++e) out[e] = qmv_mlx_order<T, GS>(a, q, n0 + G * qq + e, c, (long long)g_begin * GS,
                                                                 (long long)g_end * GS);
    }
    qmv_mma_store<T, G>(a, red, out, wave, part, ks, n0, b, [&](int sl) { return G * qq + sl; },
                     [&](int) { return c; });
  }
}
#endif  // MLXA_QMV_MMA_GROUPED

template <typename T, int G>
MLXA_DEVICE void qmv_mma(const QmvArgs& a) {
#if MLXA_QMV_MMA_GROUPED
  if constexpr (kQmvGroupedOk<T>) qmv_mma_grouped<T, G>(a);
  else trap();   // gfx908 has no bfloat16 MFMA of this shape: the launcher never takes it there
#elif !MLXA_QMV_MMA_NV
  trap();   // no backend on this target: the launcher never takes this kernel here
#else
  const int lane = (int)threadIdx.x % kMmaWave, wave = (int)threadIdx.x / kMmaWave;
  const int g = lane >> 2, t = lane & 3;
  const int ks = a.ksplit, part = wave % ks;
  const long long n0 = ((long long)blockIdx.x * (kQmvMmaWaves / ks) + wave / ks) * 16;
  const long long N = a.n;
  const int M = (int)a.m;
  const int stages = (int)(a.k / kQmvMmaStage), per = (stages + ks - 1) / ks;
  const int s_begin = part * per, s_end = min(s_begin + per, stages);
  __shared__ float red[kQmvMmaWaves][16][8];
  for (long long b = blockIdx.y; b < a.batch; b += gridDim.y) {
    const QmvBatch<T, T> q = qmv_batch<T, T, true>(a, b);
    const long long r0 = min(n0 + g, N - 1), r1 = min(n0 + g + 8, N - 1);
    QmvMmaRows<T> r{q.w + r0 * a.w_row, q.w + r1 * a.w_row,
                    (const unsigned short*)(q.s + r0 * a.s_row), (const unsigned short*)(q.s + r1 * a.s_row),
                    (const unsigned short*)(q.b + r0 * a.b_row), (const unsigned short*)(q.b + r1 * a.b_row),
                    q.x + (g < M ? g : 0) * a.x_row, g, t, M};
    // vector loads (w: G / 8 bytes, x: 16, a stage's scales: 512 / G) where strides (plan)
    // and base addresses allow
    const bool vec = a.w_vec && a.x_vec && aligned(q.w, G / 8) && aligned(q.x, 16) && aligned(q.s, 512 / G) &&
                     aligned(q.b, 512 / G);
    float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
    const bool bad = vec ? qmv_mma_rows<T, G>(acc, r, s_begin, s_end) : true;
    float out[4] = {acc[0][0], acc[0][1], acc[1][0], acc[1][1]};   // slot 2 i + c: row g + 8 i, column 2 t + c
    if (bad) {   // a base off the loads' alignment, or an infinity or NaN in x: MLX's order
#pragma unroll 1
      for (int sl = 0; sl < 4; ++sl)
        if (2 * t + (sl & 1) < M)
          out[sl] = qmv_mlx_order<T, G>(a, q, n0 + g + 8 * (sl >> 1), 2 * t + (sl & 1),
                                        (long long)s_begin * kQmvMmaStage, (long long)s_end * kQmvMmaStage);
    }
    qmv_mma_store<T, 4>(a, red, out, wave, part, ks, n0, b, [&](int sl) { return g + 8 * (sl >> 1); },
                     [&](int sl) { return 2 * t + (sl & 1); });
  }
#endif
}

template <typename T, int B, int Mode>
MLXA_DEVICE void dequant(const DequantArgs& a) {
  using F = Fmt<Mode, B>;
  using S = scale_t<T, Mode>;
  constexpr int CV = F::CV, CW = F::CW, V = 16 / sizeof(T);
  const unsigned cpr = (unsigned)(a.cols / CV), rows = (unsigned)a.rows;
  const int gshift = a.group_shift;
  // chunk counts fit 32 bits (the plan checks): 32-bit division
#pragma unroll 1
  for (unsigned idx = (unsigned)global_thread(); idx < (unsigned)a.total_chunks; idx += (unsigned)grid_threads()) {
    const unsigned row = idx / cpr, c = idx - row * cpr;
    const unsigned bt = row / rows, r = row - bt * rows;
    const uint32_t* wp = (const uint32_t*)a.w + batch_loc(bt, a.nb, a.shape, a.w_str) + r * a.w_row + (long long)c * CW;
    const long long g = ((long long)c * CV) >> gshift;
    const float s = F::scale(((const S*)a.scales)[batch_loc(bt, a.nb, a.shape, a.s_str) + r * a.s_row + g]);
    const float bias =
        F::kBias ? (float)widen(((const T*)a.biases)[batch_loc(bt, a.nb, a.shape, a.b_str) + r * a.b_row + g]) : 0.0f;
    uint32_t wd[CW];
    load_words<CW>(wd, wp, false);
    // the output is row-contiguous in a fresh buffer and cols % CV == 0: 16-byte stores
    Vec<T, V>* op = (Vec<T, V>*)((T*)a.out + (long long)row * a.cols + (long long)c * CV);
#pragma unroll
    for (int j = 0; j < CV / V; ++j) {
      Vec<T, V> v;
#pragma unroll
      for (int t = 0; t < V; ++t) {
        const float q = F::value(bits_at<B>(wd, j * V + t));
        v.v[t] = cast<T>(F::kBias ? dequant_weight<T>(s, q, bias) : s * q);
      }
      op[j] = v;
    }
  }
}

// MLX's affine quantization of one group, float arithmetic in MLX's order (std::max/min
// spelled out so NaN and signed-zero handling match).
template <typename T, int B>
MLXA_DEVICE void quantize(const QuantizeArgs& a) {
  const int gs = a.group_size;
  const float n_bins = (float)((1 << B) - 1);
  const float eps = 1e-7f;
  for (long long gi = global_thread(); gi < a.groups; gi += grid_threads()) {
    const T* w = (const T*)a.w + gi * gs;
    float w_max = -__int_as_float(0x7f800000), w_min = __int_as_float(0x7f800000);
    for (int j = 0; j < gs; ++j) {
      const float v = (float)widen(w[j]);
      w_max = (w_max < v) ? v : w_max;
      w_min = (v < w_min) ? v : w_min;
    }
    const bool mask = fabsf(w_min) > fabsf(w_max);
    float scale = (w_max - w_min) / n_bins;
    scale = (scale < eps) ? eps : scale;
    scale = mask ? scale : -scale;
    const float edge = mask ? w_min : w_max;
    const float q0 = rintf(edge / scale);
    float bias = 0.0f;
    if (q0 != 0.0f) {
      scale = edge / q0;
      bias = edge;
    }
    uint32_t* out = (uint32_t*)a.wq + gi * (gs * B / 32);
    unsigned long long pend = 0;
    int nbits = 0, wo = 0;
    for (int j = 0; j < gs; ++j) {
      float e = rintf(((float)widen(w[j]) - bias) / scale);
      e = (e < 0.0f) ? 0.0f : e;
      e = (n_bins < e) ? n_bins : e;
      pend |= (unsigned long long)(uint32_t)e << nbits;
      nbits += B;
      if (nbits >= 32) {
        out[wo++] = (uint32_t)pend;
        pend >>= 32;
        nbits -= 32;
      }
    }
    ((T*)a.scales)[gi] = cast<T>(scale);
    ((T*)a.biases)[gi] = cast<T>(bias);
  }
}

// float -> e4m3 as MLX's CPU rounds it: to nearest even, subnormals through a float add
// of 2^14, everything from 464 up (and inf, NaN) saturating to 448 (0x7E), sign kept.
MLXA_DEVICE uint8_t to_e4m3(float f) {
  uint32_t bits = float_as_uint(f);
  const uint32_t sign = bits & 0x80000000u;
  bits ^= sign;
  uint32_t r;
  if (bits >= (543u << 21)) {
    r = 0x7eu;
  } else if (bits < (121u << 23)) {
    r = (float_as_uint(__fadd_rn(uint_as_float(bits), uint_as_float(141u << 23))) - (141u << 23)) & 0xffu;
  } else {
    r = ((bits + (uint32_t)(-(120 << 23)) + 0x7ffffu + ((bits >> 20) & 1u)) >> 20) & 0xffu;
  }
  return (uint8_t)(r | (sign >> 24));
}

// e4m3 -> float through MLX's float16 construction (NaN payload included), times 256.
MLXA_DEVICE float from_e4m3(uint32_t x) {
  const uint32_t v = x & 127u;
  const uint32_t u = (v << 7) | (((v + 1u) >> 7) << 14) | ((x & 128u) << 8);
  return to_float(half{(unsigned short)u}) * 256.0f;
}

template <typename T>
MLXA_DEVICE void to_fp8(const Fp8Args& a) {
#pragma unroll 1
  for (long long i = global_thread(); i < a.n; i += grid_threads())
    ((uint8_t*)a.out)[i] = to_e4m3((float)widen(((const T*)a.in)[i]));
}

template <typename T>
MLXA_DEVICE void from_fp8(const Fp8Args& a) {
#pragma unroll 1
  for (long long i = global_thread(); i < a.n; i += grid_threads())
    ((T*)a.out)[i] = cast<T>(from_e4m3(((const uint8_t*)a.in)[i]));
}

// ---- QQMatmul's x: an fp mode's quantization and dequantization in one pass ------------
// As MLX's CPU QQMatmul prepares x (its fp_quantize_dequantize): per group the scale
// max|x| / 6 (4-bit values) or / 448 (e4m3 values), NaN left out of the max as std::max
// leaves it, kept in the mode's scale format (e4m3 for nvfp4, e8m0 = 2^round(log2 s) for the
// mx modes, rounded up); each value divided by it, rounded to the value format (e2m1 by MLX's
// thresholds, e4m3 by to_e4m3), times the scale in float, rounded to x's dtype.

// float -> e2m1 code with MLX's CPU thresholds (ties to the even code); NaN -> 6 (0x7)
MLXA_DEVICE uint32_t to_e2m1(float x) {
  if (x != x) return 7u;
  const uint32_t sign = (float_as_uint(x) >> 28) & 8u;
  const float a = fabsf(x);
  const uint32_t b = a > 5.0f ? 7u : a >= 3.5f ? 6u : a > 2.5f ? 5u : a >= 1.75f ? 4u
                   : a > 1.25f ? 3u : a >= 0.75f ? 2u : a > 0.25f ? 1u : 0u;
  return b | sign;
}

// float -> e8m0 byte as MLX's CPU QQMatmul: non-finite 255, else 2^round(log2 s) clamped to
// 2^+-127 (0 gives the smallest), one step up where that is below s, so the group's largest
// value never saturates: the smallest power of two >= s (log2's last bit cannot move it)
MLXA_DEVICE uint32_t to_e8m0_up(float s) {
  if ((float_as_uint(s) & 0x7f800000u) == 0x7f800000u) return 255u;
  if (s < 0.0f) return 0u;
  int n = s == 0.0f ? -127 : (int)roundf(log2f(s));
  n = n < -127 ? -127 : (n > 127 ? 127 : n);
  uint32_t e = (uint32_t)(n + 127);
  if (e < 254u && e8m0_value(e) < s) ++e;
  return e;
}

template <typename T, int Mode>
MLXA_DEVICE void qdq(const QdqArgs& a) {
  static_assert(Mode != kAffine, "qdq takes the fp modes");
  constexpr int G = Mode == kNvfp4 ? 16 : 32;
#pragma unroll 1
  for (long long gi = global_thread(); gi < a.groups; gi += grid_threads()) {
    const T* x = (const T*)a.x + gi * G;
    T* o = (T*)a.out + gi * G;
    float m = uint_as_float(0xff800000u);
    for (int j = 0; j < G; ++j) {
      const float v = fabsf((float)widen(x[j]));
      m = m < v ? v : m;
    }
    float s = m / (Mode == kMxfp8 ? 448.0f : 6.0f);
    s = Mode == kNvfp4 ? from_e4m3(to_e4m3(s)) : e8m0_value(to_e8m0_up(s));
    for (int j = 0; j < G; ++j) {
      const float e = s == 0.0f ? 0.0f : (float)widen(x[j]) / s;
      const float q = Mode == kMxfp8 ? from_e4m3(to_e4m3(e)) : fp4_value(to_e2m1(e));
      o[j] = cast<T>(s * q);
    }
  }
}

}  // namespace q
}  // namespace mlxa

#define MLXA_QMV(name, T, B, MODE, W)                                         \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::q::kQmvWaves * W) name(QmvArgs a) { \
    MLXA_WAVE_KERNEL_BODY(W, mlxa::q::qmv<T, B, MODE, W>(a))                    \
  }
#define MLXA_QMV_H2(name, T, B, W)                                                      \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS_MIN(mlxa::q::kQmvH2Threads, 2)                     \
  name(QmvSibs s, QmvArgs a, QmvSibRows r) {                                             \
    MLXA_WAVE_KERNEL_BODY(W, mlxa::q::qmv_h2<T, B, W>(s, a, r))                          \
  }
#define MLXA_QMV_H2N(name, T, B, W)                                                     \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS_MIN(mlxa::q::kQmvH2Threads, 2)                     \
  name(RmsPro p, QmvSibs s, QmvArgs a, QmvSibRows r, RmsProShape ps) {                   \
    MLXA_WAVE_KERNEL_BODY(W, (mlxa::q::qmv_h2<T, B, W, mlxa::q::kRmsX>(s, a, r, &p, &ps)))  \
  }
#define MLXA_QMV_H2G(name, T, B, W)                                                      \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS_MIN(mlxa::q::kQmvH2Threads, 2)                     \
  name(QmvGlu g, QmvSibs s, QmvArgs a, QmvSibRows r) {                                   \
    MLXA_WAVE_KERNEL_BODY(W, (mlxa::q::qmv_h2<T, B, W, mlxa::q::kPlainX, mlxa::q::H2Fmt<B>::R,      \
                                             mlxa::q::qmv_h2_groups<W>, mlxa::q::kQmvH2Stages,   \
                                             true>(s, a, r, nullptr, nullptr, (T*)g.out)))              \
  }
#define MLXA_QMV_H2NG(name, T, B, W)                                                     \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS_MIN(mlxa::q::kQmvH2Threads, 2)                     \
  name(RmsPro p, QmvGlu g, QmvSibs s, QmvArgs a, QmvSibRows r, RmsProShape ps) {         \
    MLXA_WAVE_KERNEL_BODY(W, (mlxa::q::qmv_h2<T, B, W, mlxa::q::kRmsX, mlxa::q::H2Fmt<B>::R,        \
                                             mlxa::q::qmv_h2_groups<W>, mlxa::q::kQmvH2Stages,   \
                                             true>(s, a, r, &p, &ps, (T*)g.out)))               \
  }
#define MLXA_QMV_MMA(name, T, G)                                                           \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::q::kQmvMmaThreads) name(QmvArgs a) { mlxa::q::qmv_mma<T, G>(a); }
#define MLXA_QDEQUANT(name, T, B, MODE) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::q::kBlock) name(DequantArgs a) { mlxa::q::dequant<T, B, MODE>(a); }
#define MLXA_QUANTIZE(name, T, B) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::q::kBlock) name(QuantizeArgs a) { mlxa::q::quantize<T, B>(a); }

#define MLXA_TO_FP8(name, T) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::q::kBlock) name(Fp8Args a) { mlxa::q::to_fp8<T>(a); }
#define MLXA_FROM_FP8(name, T) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::q::kBlock) name(Fp8Args a) { mlxa::q::from_fp8<T>(a); }
#define MLXA_QDQ(name, T, MODE) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::q::kBlock) name(QdqArgs a) { mlxa::q::qdq<T, MODE>(a); }

#include "quantized.inc"
