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
//   dequant   w -> a row-contiguous array of x's dtype (prefill: a GEMM follows).
//   quantize  affine quantization, one thread per group, MLX's CPU arithmetic in float.
//   fp8       fast::ConvertFP8 (float <-> e4m3 bytes) with MLX's CPU rounding.
#include "mlxa/quantized_args.h"
#include "mlxa/types.h"
#include "mlxa/wave.h"

namespace mlxa {
namespace q {

enum Mode { kAffine = 0, kMxfp4 = 1, kMxfp8 = 2, kNvfp4 = 3 };

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
    long long xi = b, wi = b;
    if (a.gather) {
      xi = ((const uint32_t*)a.lhs)[batch_loc((unsigned)b, a.nb, a.out_shape, a.lhs_str)];
      xi = xi < a.x_count ? xi : a.x_count - 1;   // MLX does not check; never read outside x
      wi = ((const uint32_t*)a.rhs)[batch_loc((unsigned)b, a.nb, a.out_shape, a.rhs_str)];
      wi = wi < a.w_count ? wi : a.w_count - 1;
    }
    const T* xb = (const T*)a.x + batch_loc((unsigned)xi, a.x_nb, a.x_shape, a.x_str) + m * a.x_row;
    const uint32_t* wb = (const uint32_t*)a.w + batch_loc((unsigned)wi, a.w_nb, a.w_shape, a.w_str);
    const S* sb = (const S*)a.scales + batch_loc((unsigned)wi, a.w_nb, a.w_shape, a.s_str);
    const T* bb = F::kBias ? (const T*)a.biases + batch_loc((unsigned)wi, a.w_nb, a.w_shape, a.b_str) : nullptr;
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
        v.v[t] = cast<T>(F::kBias ? affine_weight(s, q, bias) : s * q);
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

}  // namespace q
}  // namespace mlxa

#define MLXA_QMV(name, T, B, MODE, W)                                         \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::q::kQmvWaves * W) name(QmvArgs a) { \
    MLXA_WAVE_KERNEL_BODY(W, mlxa::q::qmv<T, B, MODE, W>(a))                    \
  }
#define MLXA_QDEQUANT(name, T, B, MODE) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::q::kBlock) name(DequantArgs a) { mlxa::q::dequant<T, B, MODE>(a); }
#define MLXA_QUANTIZE(name, T, B) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::q::kBlock) name(QuantizeArgs a) { mlxa::q::quantize<T, B>(a); }

#define MLXA_TO_FP8(name, T) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::q::kBlock) name(Fp8Args a) { mlxa::q::to_fp8<T>(a); }
#define MLXA_FROM_FP8(name, T) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::q::kBlock) name(Fp8Args a) { mlxa::q::from_fp8<T>(a); }

#include "quantized.inc"
