// The only file where vendor names differ. Kernel files include this and use
// the mlxa:: names below; they never test a vendor macro themselves.
//
// Compiles as HIP (hipcc / clang, __HIP_PLATFORM_AMD__) for AMD GPUs, as CUDA (nvcc -x cu)
// for the NVIDIA test GPU, and as plain C++ for the kernel emulator (MLXA_EMU_WAVE set:
// mlxa/emu.h says what that runs and what it proves).
#pragma once

#include "args.h"

#if defined(MLXA_EMU_WAVE)
#define MLXA_PLATFORM_AMD 0
#define MLXA_PLATFORM_NVIDIA 0
#define MLXA_PLATFORM_EMU 1
#include "emu.h"
#elif defined(__HIP_PLATFORM_AMD__) || defined(__HIP__)
#define MLXA_PLATFORM_AMD 1
#define MLXA_PLATFORM_NVIDIA 0
#define MLXA_PLATFORM_EMU 0
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#elif defined(__CUDACC__)
#define MLXA_PLATFORM_AMD 0
#define MLXA_PLATFORM_NVIDIA 1
#define MLXA_PLATFORM_EMU 0
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#else
#error "mlxa/platform.h needs a GPU compiler (hipcc or nvcc); host code includes mlxa/args.h only"
#endif

// ---- kernel decoration -------------------------------------------------------
// Every exported kernel: C linkage so the Python side finds it by its table name.
#define MLXA_GLOBAL extern "C" __global__
#define MLXA_DEVICE __device__ __forceinline__
#define MLXA_HOST_DEVICE __host__ __device__ __forceinline__
// Only the first argument (max threads per block) means the same on both vendors.
#define MLXA_LAUNCH_BOUNDS(max_threads) __launch_bounds__(max_threads)
// Also at least min_blocks blocks resident per SM on NVIDIA (registers capped at
// 64K / (max_threads * min_blocks)): streaming kernels that hold a row in registers need
// a second block loading while the first computes. AMD's second argument counts waves
// per execution unit instead, so there the compiler keeps its own register choice.
#if MLXA_PLATFORM_NVIDIA
#define MLXA_LAUNCH_BOUNDS_MIN(max_threads, min_blocks) __launch_bounds__(max_threads, min_blocks)
#else
#define MLXA_LAUNCH_BOUNDS_MIN(max_threads, min_blocks) __launch_bounds__(max_threads)
#endif

// ---- wave size ------------------------------------------------------------------
// Runtime: warpSize (32 on RDNA and NVIDIA, 64 on CDNA). Code that needs a constant
// takes the width as a template parameter W, and the launcher picks the instantiation
// from device.wave_size. MLXA_WAVE_SIZE exists only where the compiler knows the target
// (NVIDIA; AMD device passes, from the gfx family, since ROCm deprecates
// __AMDGCN_WAVEFRONT_SIZE and ROCm 7 drops constexpr warpSize); it is undefined in
// hipcc's host pass. Kernels use it only through mlxa::check_wave<W>().
#if MLXA_PLATFORM_NVIDIA
#define MLXA_WAVE_SIZE 32
#elif defined(__GFX9__)
#define MLXA_WAVE_SIZE 64
#elif defined(__GFX10__) || defined(__GFX11__) || defined(__GFX12__)
#define MLXA_WAVE_SIZE 32   // we never build with -mwavefrontsize64
#endif                      // (the emulator's comes from emu.h)

// ---- named capabilities (0/1 on every target; the host twin is in kernel_table.py) --
#if defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__) || \
    defined(__gfx941__) || defined(__gfx942__) || defined(__gfx950__) || defined(__gfx9_4_generic__)
#define MLXA_HAS_MFMA 1
#else
#define MLXA_HAS_MFMA 0
#endif
#if defined(__GFX11__) || defined(__GFX12__)
#define MLXA_HAS_WMMA 1
#else
#define MLXA_HAS_WMMA 0
#endif
#if defined(__GFX12__)
#define MLXA_WMMA_GFX12 1   // gfx12 WMMA takes differently laid-out operands than gfx11
#else
#define MLXA_WMMA_GFX12 0
#endif

namespace mlxa {

// ---- indices --------------------------------------------------------------------
MLXA_DEVICE int thread_x() { return (int)threadIdx.x; }
MLXA_DEVICE int block_x() { return (int)blockIdx.x; }
MLXA_DEVICE int block_dim_x() { return (int)blockDim.x; }
MLXA_DEVICE int grid_dim_x() { return (int)gridDim.x; }
MLXA_DEVICE int wave_size() { return warpSize; }
MLXA_DEVICE int lane_id() { return (int)threadIdx.x % warpSize; }
// Flat global thread index and grid-stride step, in the caller's index type.
template <typename I = long long>
MLXA_DEVICE I global_thread() { return (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; }
template <typename I = long long>
MLXA_DEVICE I grid_threads() { return (I)gridDim.x * (I)blockDim.x; }

// Compile-time guard for kernels templated on the wave width W.
template <int W>
MLXA_DEVICE void check_wave() {
  static_assert(W == 32 || W == 64, "wave width must be 32 or 64");
#ifdef MLXA_WAVE_SIZE
  static_assert(W == MLXA_WAVE_SIZE, "kernel instantiated for the wrong wave width on this target");
#endif
}

MLXA_DEVICE void sync_block() { __syncthreads(); }

// ---- asynchronous 16-byte copies, global -> shared ------------------------------------
// NVIDIA (sm_80+): cp.async, completed in commit groups, so a kernel can load its next tile
// while it computes on this one. Elsewhere a plain copy (the same pipelined code, without the
// overlap). `zero`: write zeros instead of reading (a padding row; src is not read).
#if MLXA_PLATFORM_NVIDIA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
MLXA_DEVICE void copy16_async(void* dst, const void* src, bool zero) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(zero ? 0 : 16) : "memory");
}
MLXA_DEVICE void copy_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> MLXA_DEVICE void copy_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
#else
MLXA_DEVICE void copy16_async(void* dst, const void* src, bool zero) {
  uint4 v = {0u, 0u, 0u, 0u};
  if (!zero) v = *(const uint4*)src;
  *(uint4*)dst = v;
}
MLXA_DEVICE void copy_async_commit() {}
template <int N> MLXA_DEVICE void copy_async_wait() {}
#endif

// The block's dynamic shared memory (the launch's shared-memory bytes), declared at
// namespace scope: MLXA_DYNAMIC_SHARED(buf, float); then buf[i].
#if MLXA_PLATFORM_EMU
#define MLXA_DYNAMIC_SHARED(name, ...) constexpr ::mlxa_emu::DynamicShared<__VA_ARGS__> name {}
#else
#define MLXA_DYNAMIC_SHARED(name, ...) extern __shared__ __VA_ARGS__ name[]
#endif

// Abort the kernel (a launch the host side must never make); the launch then fails.
#if MLXA_PLATFORM_NVIDIA || MLXA_PLATFORM_EMU
MLXA_DEVICE void trap() { __trap(); }
#else
MLXA_DEVICE void trap() { __builtin_trap(); }
#endif

// ---- wave shuffles (whole wave participates; no masks in kernel code) -------------
#if MLXA_PLATFORM_NVIDIA
#define MLXA_FULL_MASK 0xffffffffu
template <typename T> MLXA_DEVICE T shfl(T v, int src, int width = warpSize) { return __shfl_sync(MLXA_FULL_MASK, v, src, width); }
template <typename T> MLXA_DEVICE T shfl_xor(T v, int mask, int width = warpSize) { return __shfl_xor_sync(MLXA_FULL_MASK, v, mask, width); }
template <typename T> MLXA_DEVICE T shfl_down(T v, unsigned d, int width = warpSize) { return __shfl_down_sync(MLXA_FULL_MASK, v, d, width); }
template <typename T> MLXA_DEVICE T shfl_up(T v, unsigned d, int width = warpSize) { return __shfl_up_sync(MLXA_FULL_MASK, v, d, width); }
#undef MLXA_FULL_MASK
#elif MLXA_PLATFORM_EMU
// The hardware's rules within segments of `width` lanes: an index past the segment wraps
// (shfl) or leaves the lane its own value (xor, up, down).
template <typename T> MLXA_DEVICE T shfl(T v, int src, int width = warpSize) {
  const int l = mlxa_emu::g.cur->lane;
  return mlxa_emu::exchange(v, (l & ~(width - 1)) | (src & (width - 1)));
}
template <typename T> MLXA_DEVICE T shfl_xor(T v, int mask, int width = warpSize) {
  const int l = mlxa_emu::g.cur->lane, j = l ^ mask;
  return mlxa_emu::exchange(v, j >= ((l + width) & ~(width - 1)) ? l : j);
}
template <typename T> MLXA_DEVICE T shfl_down(T v, unsigned d, int width = warpSize) {
  const int l = mlxa_emu::g.cur->lane;
  return mlxa_emu::exchange(v, (l & (width - 1)) + (int)d >= width ? l : l + (int)d);
}
template <typename T> MLXA_DEVICE T shfl_up(T v, unsigned d, int width = warpSize) {
  const int l = mlxa_emu::g.cur->lane;
  return mlxa_emu::exchange(v, (l & (width - 1)) < (int)d ? l : l - (int)d);
}
#else
template <typename T> MLXA_DEVICE T shfl(T v, int src, int width = warpSize) { return __shfl(v, src, width); }
template <typename T> MLXA_DEVICE T shfl_xor(T v, int mask, int width = warpSize) { return __shfl_xor(v, mask, width); }
template <typename T> MLXA_DEVICE T shfl_down(T v, unsigned d, int width = warpSize) { return __shfl_down(v, d, width); }
template <typename T> MLXA_DEVICE T shfl_up(T v, unsigned d, int width = warpSize) { return __shfl_up(v, d, width); }
#endif

// ---- ballots and sub-block barriers (used by wave.h only) -------------------------
#if MLXA_PLATFORM_NVIDIA
MLXA_DEVICE unsigned long long ballot(bool p) { return __ballot_sync(0xffffffffu, p); }
MLXA_DEVICE void sync_wave() { __syncwarp(); }
// Barrier over `count` threads (a multiple of 32) that share barrier `id` (1..15; 0 is
// __syncthreads): lets two warps act as one 64-wide logical wave.
MLXA_DEVICE void named_barrier(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
#elif MLXA_PLATFORM_EMU
MLXA_DEVICE unsigned long long ballot(bool p) { return mlxa_emu::ballot(p); }
MLXA_DEVICE void sync_wave() { mlxa_emu::wave_barrier(); }
MLXA_DEVICE void named_barrier(int id, int count) { mlxa_emu::named_barrier(id, count); }
#else
MLXA_DEVICE unsigned long long ballot(bool p) { return __ballot(p); }
MLXA_DEVICE void sync_wave() { __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront"); __builtin_amdgcn_wave_barrier(); __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront"); }
// Never reached on AMD: wave widths there are native (see wave.h).
MLXA_DEVICE void named_barrier(int, int) { __builtin_trap(); }
#endif

// ---- atomics (same spelling on both vendors; wrapped so kernels use one name) ------
template <typename T> MLXA_DEVICE T atomic_add(T* p, T v) { return atomicAdd(p, v); }
template <typename T> MLXA_DEVICE T atomic_max(T* p, T v) { return atomicMax(p, v); }
template <typename T> MLXA_DEVICE T atomic_min(T* p, T v) { return atomicMin(p, v); }
template <typename T> MLXA_DEVICE T atomic_cas(T* p, T cmp, T v) { return atomicCAS(p, cmp, v); }
template <typename T> MLXA_DEVICE T atomic_exch(T* p, T v) { return atomicExch(p, v); }

// Register fence: x keeps its value, but the compiler must assume it changed, so values
// it derived from x before (e.g. 16-bit elements widened to float) are not kept alive
// across the fence; it derives them again after. For kernels that hold packed data in
// registers and make several passes over it under a register cap.
#if MLXA_PLATFORM_NVIDIA
MLXA_DEVICE void reg_fence(unsigned int& x) { asm volatile("" : "+r"(x)); }
#elif MLXA_PLATFORM_EMU
MLXA_DEVICE void reg_fence(unsigned int&) {}
#else
MLXA_DEVICE void reg_fence(unsigned int& x) { __asm__ volatile("" : "+v"(x)); }
#endif

// ---- bit casts ----------------------------------------------------------------------
MLXA_DEVICE unsigned int float_as_uint(float f) { return __float_as_uint(f); }
MLXA_DEVICE float uint_as_float(unsigned int u) { return __uint_as_float(u); }

// ---- 16-bit floats -----------------------------------------------------------------
// Our own storage types (same layout as MLX's float16/bfloat16): arithmetic converts
// to float, so every op computes in float and rounds once on store, like MLX.
struct half {
  unsigned short bits;
};
struct bfloat16 {
  unsigned short bits;
};
// MLX's complex64: two floats, real first (std::complex<float>'s layout).
struct alignas(8) complex64 {
  float real, imag;
};

// Finite values and infinities go through the hardware converters (round to nearest
// even); NaNs are encoded the way MLX's x86 CPU build encodes them (its software
// float16/bfloat16 types), so conversions match it bit for bit: float -> float16 gives
// sign|0x7D00, float16 -> float keeps the payload and sets the quiet bit, and
// float -> bfloat16 gives 0x7FC0.
MLXA_DEVICE float to_float(half h) {
  if ((h.bits & 0x7fffu) > 0x7c00u)
    return uint_as_float(((h.bits & 0x8000u) << 16) | 0x7fc00000u | ((h.bits & 0x3ffu) << 13));
  return __half2float(__ushort_as_half(h.bits));
}
// The hardware conversion alone: NaN stays NaN but its payload is not kept. For kernels
// whose NaN results never carry an input's payload (softmax, reductions to a NaN row).
MLXA_DEVICE float to_float_any_nan(half h) { return __half2float(__ushort_as_half(h.bits)); }
MLXA_DEVICE half to_half(float f) {
  if (f != f) return half{(unsigned short)(((float_as_uint(f) >> 16) & 0x8000u) | 0x7d00u)};
  return half{__half_as_ushort(__float2half_rn(f))};
}

// bfloat16 is the upper half of a float32, rounded to nearest even.
MLXA_DEVICE float to_float(bfloat16 b) { return uint_as_float((unsigned int)b.bits << 16); }
MLXA_DEVICE float to_float_any_nan(bfloat16 b) { return to_float(b); }
// NVIDIA (sm_80+) rounds in one instruction; the bit arithmetic is ~6 integer
// instructions, which made bf16 row kernels (norms) ALU-bound. Same result either way.
MLXA_DEVICE bfloat16 to_bfloat16(float f) {
  if (f != f) return bfloat16{0x7fc0};
#if MLXA_PLATFORM_NVIDIA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return bfloat16{__bfloat16_as_ushort(__float2bfloat16_rn(f))};
#else
  unsigned int u = float_as_uint(f);
  u += 0x7fffu + ((u >> 16) & 1u);
  return bfloat16{(unsigned short)(u >> 16)};
#endif
}

}  // namespace mlxa
