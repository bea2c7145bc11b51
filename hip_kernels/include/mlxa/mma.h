// Wave-level 16 x 16 x 16 matrix tiles on the GPU's matrix unit: one interface, one backend
// per target, chosen here at compile time (kernels never test a vendor macro):
//
//   NVIDIA (sm_80+)      mma.sync m16n8k16, operands through ldmatrix      wave 32
//                        (also the kernel emulator at wave 32: the same layouts, modelled)
//   CDNA (MFMA)          v_mfma_f32_16x16x16{f16,bf16_1k}                   wave 64
//   RDNA3 (gfx11 WMMA)   v_wmma_f32_16x16x16_{f16,bf16}, wave32 operands    wave 32
//   RDNA4 (gfx12 WMMA)   the gfx12 forms (half-size operands per lane)       wave 32
//
// The interface is what attention needs: a score tile S = Q K^T (16 queries x 16 keys; K's
// operand loaded with the product, or apart with load_k where several Q tiles share it) and
// an output tile O += P V (16 queries x 16 value columns), both float32 accumulators in one
// layout `Acc`: element e of a lane is query row `query(slot(e))`, column `col(e)`. `reduce`
// combines a value across the lanes that hold the same query rows, which is all a softmax
// over the keys needs. Q, K and V are read from shared memory, rows `ld` elements apart.
//
// The AMD backends compute S^T = K Q^T and O^T = V^T P^T: their accumulator layout is the
// transpose of their first operand's, so that way P leaves the score tile already laid out
// as the operand of the next product (no trip through shared memory). kKeys bounds the key
// tile by what a backend's registers afford: gfx11 repeats each operand in both halves of
// the wave, and 32 keys at head dim 128 already spilled there.
//
// Only the NVIDIA backend runs anywhere in this project's testing (on the H200, and modelled in
// the kernel emulator). The AMD
// ones compile for their archs in CI; their lane layouts follow AMD's ISA documents and
// are checked at first use on a real device against the portable twin (ops/sdpa.py).
#pragma once

#include "platform.h"
#include "types.h"

#if (MLXA_PLATFORM_NVIDIA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800) || \
    (MLXA_PLATFORM_EMU && MLXA_EMU_WAVE == 32)
#define MLXA_MMA_SYNC 1
#else
#define MLXA_MMA_SYNC 0
#endif
#if defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__) || \
    defined(__gfx950__) || defined(__gfx9_4_generic__)
#define MLXA_MFMA_BF16_1K 1   // gfx908's bf16 MFMA takes k = 8 per step: no bf16 tiles there
#else
#define MLXA_MFMA_BF16_1K 0
#endif

// Which backend serves each 16-bit dtype here (0 none, 1 mma_sync, 2 mfma, 3 wmma, 4 wmma
// gfx12); the host twin is kernel_table.matrix_tiles.
#if MLXA_MMA_SYNC
#define MLXA_TILES_F16 1
#define MLXA_TILES_BF16 1
#elif MLXA_PLATFORM_AMD && MLXA_HAS_MFMA
#define MLXA_TILES_F16 2
#define MLXA_TILES_BF16 (MLXA_MFMA_BF16_1K ? 2 : 0)
#elif MLXA_PLATFORM_AMD && MLXA_WMMA_GFX12
#define MLXA_TILES_F16 4
#define MLXA_TILES_BF16 4
#elif MLXA_PLATFORM_AMD && MLXA_HAS_WMMA
#define MLXA_TILES_F16 3
#define MLXA_TILES_BF16 3
#else
#define MLXA_TILES_F16 0
#define MLXA_TILES_BF16 0
#endif

namespace mlxa::mma {

// The 16-bit pattern of float f stored as T (half or bfloat16).
template <typename T> MLXA_DEVICE unsigned short bits16(float f);
template <> MLXA_DEVICE unsigned short bits16<half>(float f) { return to_half(f).bits; }
template <> MLXA_DEVICE unsigned short bits16<bfloat16>(float f) { return to_bfloat16(f).bits; }

// No matrix unit for T on this target: kernels test kAvailable and never call the rest.
template <typename T, typename Enable = void>
struct Tiles {
  static constexpr bool kAvailable = false;
  static constexpr int kWave = 32, kNS = 1, kSlots = 1, kKeys = 16;
  struct Acc { float v[1]; };
  struct Q {};
  struct K {};
  struct P {};
  MLXA_DEVICE static void load_q(Q&, const T*, int, int) {}
  MLXA_DEVICE static void load_k(K&, const T*, int, int) {}
  MLXA_DEVICE static void qk(Acc&, const Q&, const K&) {}
  MLXA_DEVICE static void qk(Acc&, const Q&, const T*, int, int) {}
  MLXA_DEVICE static P pack(const Acc&, int) { return P{}; }
  MLXA_DEVICE static void pv(Acc&, const P&, const T*, int, int) {}
  MLXA_DEVICE static constexpr int slot(int) { return 0; }
  MLXA_DEVICE static int query(int, int) { return 0; }
  MLXA_DEVICE static int col(int, int) { return 0; }
  template <class Op> MLXA_DEVICE static float reduce(float x, Op) { return x; }
};

#if MLXA_MMA_SYNC
// ---- NVIDIA: two m16n8k16 products per 16 x 16 tile ------------------------------------
// Lane l: g = l / 4, t = l % 4. Accumulator element e (8): n-half e / 4, row g + 8 ((e / 2) % 2),
// column 8 (e / 4) + 2 t + e % 2. The accumulator of S is, register for register, the A
// operand of P V (rows g / g + 8, keys 2t.. and 8 + 2t..).
template <typename T> MLXA_DEVICE void mma16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1);
#if MLXA_PLATFORM_EMU
// The kernel emulator's model of the instructions below, from PTX's fragment layouts (g = lane / 4,
// t = lane % 4; a 32-bit register holds two 16-bit elements, the lower column in its low half):
//   A (16 x 16): register (r / 8) + 2 (k / 8) of lane 4 (r % 8) + (k % 8) / 2, half k % 2
//   B (16 x 8):  register k / 8 of lane 4 n + (k % 8) / 2, half k % 2
//   C (16 x 8):  c[i] of lane 4 (r % 8) + n / 2: r = g + 8 (i / 2), n = 2 t + i % 2
// Products of 16-bit values are exact in float; they are summed in k order.
template <typename T> MLXA_DEVICE float half_of(uint32_t r, int h) { return to_float(T{(unsigned short)(r >> (16 * h))}); }
template <typename T>
MLXA_DEVICE void mma16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  struct Frag { uint32_t a[4], b[2]; };
  Frag all[32];
  mlxa_emu::all_gather(Frag{{a[0], a[1], a[2], a[3]}, {b0, b1}}, all);
  const int lane = mlxa_emu::g.cur->lane, g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    const int r = g + 8 * (i / 2), n = 2 * t + i % 2;
    float acc = c[i];
    for (int k = 0; k < 16; ++k) {
      const float x = half_of<T>(all[4 * (r % 8) + (k % 8) / 2].a[r / 8 + 2 * (k / 8)], k % 2);
      const float y = half_of<T>(all[4 * n + (k % 8) / 2].b[k / 8], k % 2);
      acc += x * y;
    }
    c[i] = acc;
  }
}
// ldmatrix .x4: lane l addresses row l % 8 of matrix l / 8; register i of lane l receives
// matrix i's row l / 4, columns 2 (l % 4) and + 1 (.trans: column l / 4 of rows 2 (l % 4), + 1).
template <bool kTrans>
MLXA_DEVICE void ldmatrix4_model(uint32_t* r, const void* p) {
  const unsigned short* rows[32];
  mlxa_emu::all_gather((const unsigned short*)p, rows);
  const int l = mlxa_emu::g.cur->lane;
  for (int i = 0; i < 4; ++i) {
    unsigned lo, hi;
    if (kTrans) {
      lo = rows[8 * i + 2 * (l % 4)][l / 4];
      hi = rows[8 * i + 2 * (l % 4) + 1][l / 4];
    } else {
      lo = rows[8 * i + l / 4][2 * (l % 4)];
      hi = rows[8 * i + l / 4][2 * (l % 4) + 1];
    }
    r[i] = lo | (hi << 16);
  }
}
MLXA_DEVICE void ldmatrix4(uint32_t* r, const void* p) { ldmatrix4_model<false>(r, p); }
MLXA_DEVICE void ldmatrix4_trans(uint32_t* r, const void* p) { ldmatrix4_model<true>(r, p); }
#else
template <> MLXA_DEVICE void mma16816<half>(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> MLXA_DEVICE void mma16816<bfloat16>(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8 x 8 matrices of 16-bit elements; lane l gives the address of row l % 8 of matrix l / 8.
MLXA_DEVICE void ldmatrix4(uint32_t* r, const void* p) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
MLXA_DEVICE void ldmatrix4_trans(uint32_t* r, const void* p) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
#endif  // MLXA_PLATFORM_EMU

template <typename T>
struct Tiles<T, std::enable_if_t<std::is_same_v<T, half> || std::is_same_v<T, bfloat16>>> {
  static constexpr bool kAvailable = true;
  static constexpr int kWave = 32, kNS = 8, kSlots = 2, kKeys = 64;
  struct Acc { float v[8]; };
  struct Q { uint32_t r[4]; };
  struct K { uint32_t r[4]; };
  struct P { uint32_t r[4]; };
  // A operand (16 rows x 16 k, row-major): matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15)
  MLXA_DEVICE static void load_q(Q& q, const T* p, int ld, int lane) {
    const int m = lane / 8;
    ldmatrix4(q.r, p + ((lane % 8) + 8 * (m % 2)) * ld + 8 * (m / 2));
  }
  // B = K^T from K rows (key x d): matrices (keys 0-7 | 8-15) x (d 0-7 | 8-15)
  MLXA_DEVICE static void load_k(K& k, const T* p, int ld, int lane) {
    const int m = lane / 8;
    ldmatrix4(k.r, p + ((lane % 8) + 8 * (m / 2)) * ld + 8 * (m % 2));
  }
  MLXA_DEVICE static void qk(Acc& s, const Q& q, const K& k) {
    mma16816<T>(s.v, q.r, k.r[0], k.r[1]);
    mma16816<T>(s.v + 4, q.r, k.r[2], k.r[3]);
  }
  MLXA_DEVICE static void qk(Acc& s, const Q& q, const T* k, int ld, int lane) {
    K f;
    load_k(f, k, ld, lane);
    qk(s, q, f);
  }
  // round to nearest even in one instruction (P is finite: no NaN rule to keep)
  MLXA_DEVICE static uint32_t pack2(float lo, float hi) {
#if MLXA_PLATFORM_EMU
    return (uint32_t)bits16<T>(lo) | ((uint32_t)bits16<T>(hi) << 16);
#else
    uint32_t r;
    if constexpr (std::is_same_v<T, bfloat16>)
      asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else
      asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#endif
  }
  MLXA_DEVICE static P pack(const Acc& s, int) {
    return P{{pack2(s.v[0], s.v[1]), pack2(s.v[2], s.v[3]), pack2(s.v[4], s.v[5]), pack2(s.v[6], s.v[7])}};
  }
  // B = V (key x d rows), transposed on load: matrices (keys 0-7 | 8-15) x (d 0-7 | 8-15)
  MLXA_DEVICE static void pv(Acc& o, const P& p, const T* v, int ld, int lane) {
    const int m = lane / 8;
    uint32_t b[4];
    ldmatrix4_trans(b, v + ((lane % 8) + 8 * (m % 2)) * ld + 8 * (m / 2));
    mma16816<T>(o.v, p.r, b[0], b[1]);
    mma16816<T>(o.v + 4, p.r, b[2], b[3]);
  }
  MLXA_DEVICE static constexpr int slot(int e) { return (e / 2) % 2; }
  MLXA_DEVICE static int query(int s, int lane) { return lane / 4 + 8 * s; }
  MLXA_DEVICE static int col(int e, int lane) { return 8 * (e / 4) + 2 * (lane % 4) + e % 2; }
  template <class Op> MLXA_DEVICE static float reduce(float x, Op op) {
    x = op(x, shfl_xor(x, 1));
    return op(x, shfl_xor(x, 2));
  }
};
#endif  // MLXA_MMA_SYNC

#if MLXA_PLATFORM_AMD
typedef float f32x4 __attribute__((ext_vector_type(4)));
typedef float f32x8 __attribute__((ext_vector_type(8)));
typedef short i16x4 __attribute__((ext_vector_type(4)));
typedef short i16x8 __attribute__((ext_vector_type(8)));
typedef short i16x16 __attribute__((ext_vector_type(16)));
typedef _Float16 f16x4 __attribute__((ext_vector_type(4)));
typedef _Float16 f16x8 __attribute__((ext_vector_type(8)));
typedef _Float16 f16x16 __attribute__((ext_vector_type(16)));

// N 16-bit elements at p (8-byte aligned or better) as a short vector.
template <int N, typename V>
MLXA_DEVICE V lds_vec(const void* p) { return *(const V*)p; }

// CDNA's MFMA (G = 4, wave 64) and RDNA4's WMMA (G = 8, wave 32) share one lane layout: lane l
// holds row (or column) l % 16 and k (or m) G (l / 16) .. G (l / 16) + G - 1 of every operand and
// result. With A = K and B = Q^T, D = S^T: lane l holds query l % 16, keys G (l / 16) + e, which
// is B's layout for P^T in O^T = V^T P^T, whose D holds query l % 16, d G (l / 16) + e.
template <typename T, int G, int WAVE, class Op>
struct GroupedTiles {
  typedef short IV __attribute__((ext_vector_type(G)));
  typedef float FV __attribute__((ext_vector_type(G)));
  static constexpr bool kAvailable = true;
  static constexpr int kWave = WAVE, kNS = G, kSlots = 1, kKeys = 64;
  struct Acc { float v[G]; };
  struct Q { IV r; };
  struct K { IV r; };
  struct P { IV r; };
  MLXA_DEVICE static void mma(Acc& acc, IV a, IV b) {
    FV c;
#pragma unroll
    for (int e = 0; e < G; ++e) c[e] = acc.v[e];
    c = Op::mma(a, b, c);
#pragma unroll
    for (int e = 0; e < G; ++e) acc.v[e] = c[e];
  }
  MLXA_DEVICE static const IV& group(const T* p, int ld, int lane) {
    return *(const IV*)(p + (lane % 16) * ld + G * (lane / 16));
  }
  MLXA_DEVICE static void load_q(Q& q, const T* p, int ld, int lane) { q.r = group(p, ld, lane); }
  MLXA_DEVICE static void load_k(K& k, const T* p, int ld, int lane) { k.r = group(p, ld, lane); }
  MLXA_DEVICE static void qk(Acc& s, const Q& q, const K& k) { mma(s, k.r, q.r); }
  MLXA_DEVICE static void qk(Acc& s, const Q& q, const T* k, int ld, int lane) { mma(s, group(k, ld, lane), q.r); }
  MLXA_DEVICE static P pack(const Acc& s, int) {
    P p;
#pragma unroll
    for (int e = 0; e < G; ++e) p.r[e] = (short)bits16<T>(s.v[e]);
    return p;
  }
  // A = V^T: row d = l % 16, k = keys G (l / 16) .. (a column of V: G 16-bit reads)
  MLXA_DEVICE static void pv(Acc& o, const P& p, const T* v, int ld, int lane) {
    const unsigned short* vs = (const unsigned short*)v + (G * (lane / 16)) * ld + lane % 16;
    IV a;
#pragma unroll
    for (int e = 0; e < G; ++e) a[e] = (short)vs[e * ld];
    mma(o, a, p.r);
  }
  MLXA_DEVICE static constexpr int slot(int) { return 0; }
  MLXA_DEVICE static int query(int, int lane) { return lane % 16; }
  MLXA_DEVICE static int col(int e, int lane) { return G * (lane / 16) + e; }
  template <class Op2> MLXA_DEVICE static float reduce(float x, Op2 op) {
#pragma unroll
    for (int o = 16; o < WAVE; o <<= 1) x = op(x, shfl_xor(x, o));
    return x;
  }
};


#endif  // MLXA_PLATFORM_AMD

#if MLXA_PLATFORM_AMD && MLXA_HAS_MFMA
// ---- CDNA: v_mfma_f32_16x16x16, wave 64: GroupedTiles with G = 4 ---------------------------
// A (m x k): row l % 16, k 4 (l / 16) + e; B (k x n): column l % 16, same k; D: column l % 16,
// rows 4 (l / 16) + e.
template <typename T>
struct MfmaOps;
template <> struct MfmaOps<half> {
  static constexpr bool kOk = true;
  MLXA_DEVICE static f32x4 mma(i16x4 a, i16x4 b, f32x4 c) {
    return __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(f16x4, a), __builtin_bit_cast(f16x4, b), c, 0, 0, 0);
  }
};
template <> struct MfmaOps<bfloat16> {
  static constexpr bool kOk = MLXA_MFMA_BF16_1K;
  MLXA_DEVICE static f32x4 mma(i16x4 a, i16x4 b, f32x4 c) {
#if MLXA_MFMA_BF16_1K
    return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0);
#else
    return c;
#endif
  }
};

template <typename T>
struct Tiles<T, std::enable_if_t<(std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) && MfmaOps<T>::kOk>>
    : GroupedTiles<T, 4, 64, MfmaOps<T>> {};
#endif  // MFMA

#if MLXA_PLATFORM_AMD && MLXA_HAS_WMMA && !MLXA_WMMA_GFX12
// ---- RDNA3: v_wmma_f32_16x16x16, wave 32 ---------------------------------------------------
// Lane l: c = l % 16, h = l / 16. A: row c, all 16 k (lanes 16-31 repeat 0-15); B: column c,
// all 16 k; D: column c, rows 2e + h (e < 8). D = S^T: query c, keys 2e + h; B for P^T needs all
// 16 keys of query c, so each lane swaps the other parity with lane l ^ 16.
template <typename T> MLXA_DEVICE f32x8 wmma11(i16x16 a, i16x16 b, f32x8 c);
template <> MLXA_DEVICE f32x8 wmma11<half>(i16x16 a, i16x16 b, f32x8 c) {
  return __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(__builtin_bit_cast(f16x16, a), __builtin_bit_cast(f16x16, b), c);
}
template <> MLXA_DEVICE f32x8 wmma11<bfloat16>(i16x16 a, i16x16 b, f32x8 c) {
  return __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(a, b, c);
}

template <typename T>
struct Tiles<T, std::enable_if_t<std::is_same_v<T, half> || std::is_same_v<T, bfloat16>>> {
  static constexpr bool kAvailable = true;
  static constexpr int kWave = 32, kNS = 8, kSlots = 1, kKeys = 16;
  struct Acc { float v[8]; };
  struct Q { i16x16 r; };
  struct K { i16x16 r; };
  struct P { i16x16 r; };
  MLXA_DEVICE static i16x16 row16(const T* p) {
    const i16x8 lo = lds_vec<8, i16x8>(p), hi = lds_vec<8, i16x8>(p + 8);
    return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  }
  MLXA_DEVICE static void load_q(Q& q, const T* p, int ld, int lane) { q.r = row16(p + (lane % 16) * ld); }
  MLXA_DEVICE static void load_k(K& k, const T* p, int ld, int lane) { k.r = row16(p + (lane % 16) * ld); }
  MLXA_DEVICE static void qk(Acc& s, const Q& q, const K& k) {
    f32x8 c;
#pragma unroll
    for (int e = 0; e < 8; ++e) c[e] = s.v[e];
    c = wmma11<T>(k.r, q.r, c);
#pragma unroll
    for (int e = 0; e < 8; ++e) s.v[e] = c[e];
  }
  MLXA_DEVICE static void qk(Acc& s, const Q& q, const T* k, int ld, int lane) {
    K f;
    load_k(f, k, ld, lane);
    qk(s, q, f);
  }
  MLXA_DEVICE static P pack(const Acc& s, int lane) {
    const int h = lane / 16;
    P p;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const short mine = (short)bits16<T>(s.v[e]);
      const short other = (short)shfl_xor((int)mine, 16);
      p.r[2 * e] = h ? other : mine;
      p.r[2 * e + 1] = h ? mine : other;
    }
    return p;
  }
  MLXA_DEVICE static void pv(Acc& o, const P& p, const T* v, int ld, int lane) {
    const unsigned short* vs = (const unsigned short*)v + lane % 16;
    i16x16 a;
#pragma unroll
    for (int e = 0; e < 16; ++e) a[e] = (short)vs[e * ld];
    f32x8 c;
#pragma unroll
    for (int e = 0; e < 8; ++e) c[e] = o.v[e];
    c = wmma11<T>(a, p.r, c);
#pragma unroll
    for (int e = 0; e < 8; ++e) o.v[e] = c[e];
  }
  MLXA_DEVICE static constexpr int slot(int) { return 0; }
  MLXA_DEVICE static int query(int, int lane) { return lane % 16; }
  MLXA_DEVICE static int col(int e, int lane) { return 2 * e + lane / 16; }
  template <class Op> MLXA_DEVICE static float reduce(float x, Op op) { return op(x, shfl_xor(x, 16)); }
};
#endif  // gfx11 WMMA

#if MLXA_PLATFORM_AMD && MLXA_WMMA_GFX12
// ---- RDNA4: v_wmma_f32_16x16x16 (gfx12 forms), wave 32: GroupedTiles with G = 8 ------------
// A: row l % 16, k 8 (l / 16) + e; B: column l % 16, same k; D: column l % 16, rows 8 (l / 16) + e.
template <typename T> struct Wmma12Ops;
template <> struct Wmma12Ops<half> {
  MLXA_DEVICE static f32x8 mma(i16x8 a, i16x8 b, f32x8 c) {
    return __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(__builtin_bit_cast(f16x8, a), __builtin_bit_cast(f16x8, b), c);
  }
};
template <> struct Wmma12Ops<bfloat16> {
  MLXA_DEVICE static f32x8 mma(i16x8 a, i16x8 b, f32x8 c) {
    return __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12(a, b, c);
  }
};

template <typename T>
struct Tiles<T, std::enable_if_t<std::is_same_v<T, half> || std::is_same_v<T, bfloat16>>>
    : GroupedTiles<T, 8, 32, Wmma12Ops<T>> {};
#endif  // gfx12 WMMA

}  // namespace mlxa::mma
