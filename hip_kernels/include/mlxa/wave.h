// Operations over a logical wave of W lanes, W a compile-time 32 or 64.
//
// Kernels that depend on the wave width take W as a template parameter and are
// instantiated for both widths under names ending in _w32 / _w64; the launcher picks
// device.wave_size (MLX_AMD_WAVE=64 forces the 64-wide variants on a 32-wide GPU).
//   native    W equals the hardware width: shuffles and ballots of the hardware.
//   emulated  W = 64 on the 32-wide NVIDIA test GPU (and the 32-wide kernel emulator,
//             emu32; emu64 runs W = 64 natively): two consecutive warps act as one
//             wave, exchanging through shared memory with a 64-thread named barrier. This
//             runs CDNA's 64-lane code paths (lane arithmetic, 64-bit ballots, two-level
//             combines) on the H200. It does not prove: lockstep behaviour of a real
//             wave64 (code that relies on implicit convergence would pass here), AMD's DPP
//             or LDS timing, or register/LDS pressure of a real wave64.
//   neither   (W = 32 on wave64 CDNA, W = 64 on wave32 RDNA) is never launched; those
//             kernels compile to a trap so every target exports the same names.
// Blocks are multiples of W; emulated kernels use at most 15 logical waves per block
// (barrier ids 1..15), i.e. blocks of at most 960 threads; launchers use <= 512.
#pragma once

#include "platform.h"

namespace mlxa {

#ifdef MLXA_WAVE_SIZE
constexpr int kHardwareWave = MLXA_WAVE_SIZE;
#else
constexpr int kHardwareWave = 0;   // host pass: no device code is generated
#endif

template <int W> constexpr bool wave_native = (W == kHardwareWave);
template <int W> constexpr bool wave_emulated =
    ((MLXA_PLATFORM_NVIDIA || MLXA_PLATFORM_EMU) && W == 64 && kHardwareWave == 32);
template <int W> constexpr bool wave_supported = wave_native<W> || wave_emulated<W>;

template <int W> MLXA_DEVICE int wave_lane() { return (int)threadIdx.x % W; }
template <int W> MLXA_DEVICE int wave_index() { return (int)threadIdx.x / W; }
template <int W> MLXA_DEVICE int waves_per_block() { return (int)blockDim.x / W; }

// All lanes of the logical wave meet here; shared memory written before is visible after.
template <int W>
MLXA_DEVICE void wave_barrier() {
  if constexpr (wave_emulated<W>) named_barrier(1 + wave_index<W>(), W);
  else sync_wave();
}

namespace detail {
// Per-type exchange buffer of the emulated wave: one row of W slots per logical wave.
template <typename T, int W>
MLXA_DEVICE T* wave_slots() {
  __shared__ T slots[15 * W];
  return slots + wave_index<W>() * W;
}
}  // namespace detail

// v of lane `src` (0 <= src < W), to every lane.
template <int W, typename T>
MLXA_DEVICE T wave_shfl(T v, int src) {
  if constexpr (wave_native<W>) {
    return shfl(v, src, W);
  } else {
    T* s = detail::wave_slots<T, W>();
    wave_barrier<W>();             // earlier readers of the slots are done
    s[wave_lane<W>()] = v;
    wave_barrier<W>();
    return s[src & (W - 1)];
  }
}

template <int W, typename T>
MLXA_DEVICE T wave_shfl_xor(T v, int mask) {
  if constexpr (wave_native<W>) return shfl_xor(v, mask, W);
  else return wave_shfl<W>(v, wave_lane<W>() ^ mask);
}

// Lane i gets lane i - d's value (lanes below d keep their own).
template <int W, typename T>
MLXA_DEVICE T wave_shfl_up(T v, int d) {
  if constexpr (wave_native<W>) return shfl_up(v, (unsigned)d, W);
  else {
    const int l = wave_lane<W>();
    T r = wave_shfl<W>(v, l >= d ? l - d : l);
    return r;
  }
}

// Lane i gets lane i + d's value (lanes at W - d and above keep their own).
template <int W, typename T>
MLXA_DEVICE T wave_shfl_down(T v, int d) {
  if constexpr (wave_native<W>) return shfl_down(v, (unsigned)d, W);
  else {
    const int l = wave_lane<W>();
    return wave_shfl<W>(v, l + d < W ? l + d : l);
  }
}

// Bit i set when lane i's predicate holds (W bits; bit 0 is lane 0).
template <int W>
MLXA_DEVICE unsigned long long wave_ballot(bool p) {
  if constexpr (wave_native<W>) {
    return ballot(p) & (W == 64 ? ~0ull : 0xffffffffull);
  } else {
    unsigned long long* s = detail::wave_slots<unsigned long long, W>();
    const unsigned long long half = ballot(p) & 0xffffffffull;   // this warp's 32 lanes
    const int l = wave_lane<W>();
    wave_barrier<W>();
    if ((l & 31) == 0) s[l >> 5] = half;
    wave_barrier<W>();
    return s[0] | (s[1] << 32);
  }
}

// op over all W lanes; every lane gets the result. op must be associative and
// commutative (combination order differs between the native and emulated paths).
template <int W, typename T, typename Op>
MLXA_DEVICE T wave_reduce(T v, Op op) {
  if constexpr (wave_native<W>) {
#pragma unroll
    for (int m = W / 2; m > 0; m >>= 1) v = op(v, shfl_xor(v, m, W));
    return v;
  } else {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) v = op(v, shfl_xor(v, m, 32));   // within each warp
    T* s = detail::wave_slots<T, W>();
    const int l = wave_lane<W>();
    wave_barrier<W>();
    if ((l & 31) == 0) s[l >> 5] = v;
    wave_barrier<W>();
    return op(s[0], s[1]);
  }
}

// Inclusive scan over the lanes in lane order (lane 0 first); op associative.
template <int W, typename T, typename Op>
MLXA_DEVICE T wave_inclusive_scan(T v, Op op) {
  constexpr int H = wave_native<W> ? W : 32;   // width of the hardware part
  const int l = wave_lane<W>();
#pragma unroll
  for (int d = 1; d < H; d <<= 1) {
    const T u = shfl_up(v, (unsigned)d, H);
    if ((l % H) >= d) v = op(u, v);
  }
  if constexpr (!wave_native<W>) {
    T* s = detail::wave_slots<T, W>();
    wave_barrier<W>();
    if (l == 31) s[0] = v;               // total of the lower warp
    wave_barrier<W>();
    if (l >= 32) v = op(s[0], v);
  }
  return v;
}

// op over the whole block (blockDim.x a multiple of W, at most 32 waves); every thread
// gets the result. `scratch` holds one T per wave; the block synchronises twice.
template <int W, typename T, typename Op>
MLXA_DEVICE T block_reduce(T v, Op op, T* scratch) {
  v = wave_reduce<W>(v, op);
  const int nw = waves_per_block<W>();
  if (nw == 1) return v;
  if (wave_lane<W>() == 0) scratch[wave_index<W>()] = v;
  sync_block();
  T r = scratch[0];
  for (int i = 1; i < nw; ++i) r = op(r, scratch[i]);
  sync_block();                          // scratch may be reused by the caller
  return r;
}

}  // namespace mlxa

// Exported kernels of width-dependent families: the body on targets that run width W,
// a trap elsewhere (same symbol on every target; the launcher never picks it there).
#define MLXA_WAVE_KERNEL_BODY(W, ...)                 \
  if constexpr (mlxa::wave_supported<W>) {            \
    __VA_ARGS__;                                      \
  } else {                                            \
    __builtin_trap();                                 \
  }
