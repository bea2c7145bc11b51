// Hadamard family: mx.hadamard_transform along the last axis, n = m * 2^k with m in
// {1, 12, 20, 28}. A block loads C lines of a pass into shared memory as float, runs
// the radix-2 butterflies in MLX's order (stride 1, 2, 4, ... on the low index bits),
// then the m-point stage (sums over k in order, starting from 0), and stores with the
// scale. Long rows are split into passes over bit ranges of the index (low bits
// first), so every element sees the same float32 operations in the same order as
// MLX's CPU loop: float32 results match it exactly. float16/bfloat16 are widened once,
// transformed in float32 (passes in between go through a float32 buffer) and rounded
// once on store (MLX's CPU rounds to the 16-bit type after every stage).
#include "mlxa/hadamard_args.h"
#include "mlxa/platform.h"
#include "mlxa/types.h"

namespace mlxa::had {

constexpr int kThreads = 256;
constexpr int kSmem = 8704;   // floats: C * (R + 1) <= this (the launcher keeps it so)

template <typename Tin, typename Tout, int M>
MLXA_DEVICE void pass(const HadamardArgs& a) {
  __shared__ float buf[kSmem];
  const int C = a.C, P = a.P, R = M * P, LS = R + 1;   // +1: column-order accesses spread banks
  const long long l0 = (long long)blockIdx.x * C;
  const int nlines = (int)((a.lines - l0) < C ? (a.lines - l0) : C);
  const int total = nlines * R;
  const bool line_major = a.S == 1;   // then r runs contiguous in memory
  const Tin* in = (const Tin*)a.in;
  Tout* out = (Tout*)a.out;

  // element (line c, index r) -> (input offset, output offset)
  auto locate = [&](int c, int r, long long& io, long long& oo) {
    const long long l = l0 + c;
    const long long g = l / a.S, s = l - g * a.S;
    const long long row = g / a.gpr;
    const long long j = (g - row * a.gpr) * (long long)R * a.S + (long long)r * a.S + s;
    long long rem = row, off = 0;
    for (int d = 0; d < a.nd; ++d) {
      const long long q = rem / a.in_shape[d];
      off += (rem - q * a.in_shape[d]) * a.in_strides[d];
      rem = q;
    }
    io = off + j * a.in_elem;
    oo = row * a.n + j;
  };

  for (int e = threadIdx.x; e < total; e += kThreads) {
    const int c = line_major ? e / R : e % nlines;
    const int r = line_major ? e - c * R : e / nlines;
    long long io, oo;
    locate(c, r, io, oo);
    buf[c * LS + r] = (float)widen(in[io]);
  }
  sync_block();

  const int half_p = P >> 1;
  const int pairs = nlines * M * half_p;
  for (int h = 1; h < P; h <<= 1) {
    for (int q = threadIdx.x; q < pairs; q += kThreads) {
      const int c = q / (M * half_p);
      const int rest = q - c * (M * half_p);
      const int k = rest / half_p;
      const int i = rest - k * half_p;
      const int lo = i & (h - 1);
      const int j = ((i - lo) << 1) + lo;
      float* p = buf + c * LS + k * P + j;
      const float x = p[0], y = p[h];
      p[0] = x + y;
      p[h] = x - y;
    }
    sync_block();
  }

  if constexpr (M > 1) {
    // each thread owns one (line, p) column of the m x P line: reads and writes only it
    for (int q = threadIdx.x; q < nlines * P; q += kThreads) {
      const int c = q / P, p = q - c * P;
      float* col = buf + c * LS + p;
      float v[M];
#pragma unroll
      for (int k = 0; k < M; ++k) v[k] = col[k * P];
      // rows one at a time (unrolling them too makes wave32 targets spill)
#pragma unroll 1
      for (int j = 0; j < M; ++j) {
        const uint32_t bits = a.hm[j];
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < M; ++k) acc = ((bits >> k) & 1u) ? acc + v[k] : acc - v[k];
        col[j * P] = acc;
      }
    }
    sync_block();
  }

  const float scale = a.scale;
  for (int e = threadIdx.x; e < total; e += kThreads) {
    const int c = line_major ? e / R : e % nlines;
    const int r = line_major ? e - c * R : e / nlines;
    long long io, oo;
    locate(c, r, io, oo);
    out[oo] = cast<Tout>(buf[c * LS + r] * scale);
  }
}

}  // namespace mlxa::had

#define MLXA_HADAMARD(name, Tin, Tout, M)                                    \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(mlxa::had::kThreads) name(HadamardArgs a) { \
    mlxa::had::pass<Tin, Tout, M>(a);                                          \
  }

#include "hadamard.inc"
