// Random family: RandomBits, bit for bit what MLX's CPU build produces (threefry2x32
// with 20 rounds over the counter layout described in mlxa/random_args.h).
#include "mlxa/platform.h"
#include "mlxa/random_args.h"

namespace mlxa::rnd {

MLXA_DEVICE uint32_t rotl(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

// Four rounds of one group, rotation amounts of group parity P.
template <int P>
MLXA_DEVICE void four_rounds(uint32_t& x0, uint32_t& x1) {
  constexpr int r0 = P ? 17 : 13, r1 = P ? 29 : 15, r2 = P ? 16 : 26, r3 = P ? 24 : 6;
  x0 += x1; x1 = rotl(x1, r0); x1 ^= x0;
  x0 += x1; x1 = rotl(x1, r1); x1 ^= x0;
  x0 += x1; x1 = rotl(x1, r2); x1 ^= x0;
  x0 += x1; x1 = rotl(x1, r3); x1 ^= x0;
}

// threefry2x32 of counter (x0, x1) under key (k0, k1), in place.
MLXA_DEVICE void threefry(uint32_t k0, uint32_t k1, uint32_t& x0, uint32_t& x1) {
  const uint32_t k2 = k0 ^ k1 ^ 0x1BD11BDAu;
  x0 += k0; x1 += k1;
  four_rounds<0>(x0, x1); x0 += k1; x1 += k2 + 1u;
  four_rounds<1>(x0, x1); x0 += k2; x1 += k0 + 2u;
  four_rounds<0>(x0, x1); x0 += k0; x1 += k1 + 3u;
  four_rounds<1>(x0, x1); x0 += k1; x1 += k2 + 4u;
  four_rounds<0>(x0, x1); x0 += k2; x1 += k0 + 5u;
}

MLXA_DEVICE int64_t key_offset(const RandomBitsArgs& a, int64_t flat) {
  int64_t off = 0;
  for (int d = 0; d < a.key_ndim; ++d) {
    const int64_t n = a.key_shape[d];
    off += (flat % n) * a.key_strides[d];
    flat /= n;
  }
  return off;
}

// Word w of key i's run; the run's last word may be partial and runs of a width-1/2
// output need not start on a 4-byte boundary, so those go out byte by byte (little
// endian, as the CPU build's memcpy of the word).
MLXA_DEVICE void put_word(const RandomBitsArgs& a, int64_t run, uint32_t w, uint32_t v) {
  const int64_t pos = run + 4 * (int64_t)w;
  const int64_t left = a.bytes_per_key - 4 * (int64_t)w;
  uint8_t* p = a.out + pos;
  if (left >= 4 && (((uintptr_t)p) & 3u) == 0) {
    *reinterpret_cast<uint32_t*>(p) = v;
  } else {
    const int nb = left >= 4 ? 4 : (int)left;
    for (int b = 0; b < nb; ++b) p[b] = (uint8_t)(v >> (8 * b));
  }
}

MLXA_DEVICE void random_bits(const RandomBitsArgs& a) {
  const int64_t per_key = (int64_t)a.half + a.odd;
  for (int64_t t = global_thread(); t < a.total; t += grid_threads()) {
    const int64_t i = t / per_key;
    const uint32_t j = (uint32_t)(t - i * per_key);
    const uint32_t k0 = a.keys[key_offset(a, 2 * i)];
    const uint32_t k1 = a.keys[key_offset(a, 2 * i + 1)];
    const int64_t run = i * a.bytes_per_key;
    if (j < a.half) {
      uint32_t x0 = j, x1 = a.half + a.odd + j;
      threefry(k0, k1, x0, x1);
      put_word(a, run, j, x0);
      put_word(a, run, a.half + a.odd + j, x1);
    } else {
      uint32_t x0 = a.half, x1 = 0;
      threefry(k0, k1, x0, x1);
      put_word(a, run, a.half, x0);
    }
  }
}

}  // namespace mlxa::rnd

#define MLXA_RANDOM_BITS(name) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(256) name(RandomBitsArgs a) { mlxa::rnd::random_bits(a); }

#include "random.inc"
