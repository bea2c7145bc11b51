// The kernel emulator's device side: what hip_runtime.h / cuda_runtime.h give a kernel file,
// for a plain C++ compiler, so the same kernel sources run on the CPU (platform.h includes
// this when MLXA_EMU_WAVE is defined; build_kernels.py's emu32/emu64 targets).
//
// Why: the GPU suite needs a GPU, and the test GPU is lent for minutes per session. Under the
// emulator (driver "emu", src/emu/driver.cpp) every launcher, plan and kernel runs on any
// machine, CI included, against MLX's CPU results. Each GPU thread is a fiber with its own
// stack; a block's fibers run in one OS thread and switch only at barriers and wave
// operations, so shared memory is a static and atomics need no locks. Blocks run one after
// another in index order.
//
// What it proves: kernel logic, index arithmetic, barriers, wave shuffles/ballots/scans at
// width 32 (emu32, with W=64 kernels through the two-warp emulation as on NVIDIA) and native
// width 64 (emu64, CDNA's code paths), launch geometry and argument packing. A barrier some
// threads never reach is reported as a deadlock, a trap as a launch error.
// At wave 32 the matrix-unit tiles of mma.h run too: NVIDIA's mma.sync m16n8k16 and ldmatrix,
// modelled lane by lane from PTX's fragment layouts, so the NVIDIA tile code paths execute.
// What it does not prove: memory-model races (nothing runs concurrently), blocks that wait for
// a later block, the AMD matrix units (MFMA/WMMA: not modelled), the tensor cores' own
// accumulation order, cp.async overlap, speed, register or LDS limits, the GPU's float
// contraction (no FMA is formed here unless a kernel asks for one).
#pragma once

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmath>
#include <csetjmp>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#ifndef __x86_64__
#error "the kernel emulator's fiber switch is written for x86-64"
#endif

#define MLXA_WAVE_SIZE MLXA_EMU_WAVE

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static   // blocks run one at a time: one copy serves every block

// ---- the launch interface between src/emu/driver.cpp and a kernel module ------------------
extern "C" {
struct MlxaEmuLaunch {
  unsigned grid[3], block[3];
  unsigned shared_bytes;
  void** params;            // cuLaunchKernel's kernelParams, or null
  const void* blob;         // or its CU_LAUNCH_PARAM_BUFFER_POINTER blob (CUDA's layout)
  size_t blob_size;
  char* error;              // filled on failure (NUL-terminated, at most error_size bytes)
  size_t error_size;
};
}

namespace mlxa_emu {

struct Dim3 {
  unsigned x, y, z;
};

enum class Wait : int { kNone, kBlock, kWave, kNamed };

struct Fiber {
  void* sp = nullptr;
  Dim3 tid{0, 0, 0};
  int linear = 0, wave = 0, lane = 0;
  bool runnable = false, done = false;
  Wait wait = Wait::kNone;
  int named_id = 0;
};

constexpr int kMaxThreads = 1024;
constexpr int kMaxWaves = kMaxThreads / MLXA_EMU_WAVE;
constexpr size_t kStackBytes = 256 * 1024;

struct WaveState {
  alignas(16) unsigned char slot[MLXA_EMU_WAVE][16];
  alignas(16) unsigned char wide[MLXA_EMU_WAVE][64];   // all_gather
  int live = 0, arrived = 0;
};

struct State {
  Dim3 block_idx, block_dim, grid_dim;
  Fiber* cur = nullptr;
  void* sched_sp = nullptr;
  Fiber fibers[kMaxThreads];
  WaveState waves[kMaxWaves];
  int nthreads = 0, live = 0, block_arrived = 0;
  int named_arrived[16] = {}, named_count[16] = {};
  char* stacks = nullptr;
  const char* failure = nullptr;   // static text of a trap, set by the failing fiber
  jmp_buf fault;                   // where a trapping fiber leaves the block
};

inline State g;

}  // namespace mlxa_emu

#define threadIdx (::mlxa_emu::g.cur->tid)
#define blockIdx (::mlxa_emu::g.block_idx)
#define blockDim (::mlxa_emu::g.block_dim)
#define gridDim (::mlxa_emu::g.grid_dim)
#define warpSize MLXA_EMU_WAVE

namespace mlxa_emu {
// The launch's dynamic shared memory, seen as an array of T (MLXA_DYNAMIC_SHARED).
inline void* g_dynamic_shared = nullptr;
template <typename T>
struct DynamicShared {
  T& operator[](size_t i) const { return ((T*)g_dynamic_shared)[i]; }
  operator T*() const { return (T*)g_dynamic_shared; }
};
}  // namespace mlxa_emu

// ---- fibers ------------------------------------------------------------------------------
// swap(save, to): store this context's stack pointer in *save and continue on `to`'s stack.
// Callee-saved registers live on each stack; a new fiber's stack starts with zeros for them
// and fiber_entry as the return address.
asm(R"(
  .text
  .p2align 4
  .globl mlxa_emu_swap
  .hidden mlxa_emu_swap
  .type mlxa_emu_swap, @function
mlxa_emu_swap:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size mlxa_emu_swap, .-mlxa_emu_swap
)");
extern "C" void mlxa_emu_swap(void** save, void* to);

namespace mlxa_emu {

// Leave the running fiber for the scheduler; it comes back here when made runnable.
inline void yield() { mlxa_emu_swap(&g.cur->sp, g.sched_sp); }

[[noreturn]] inline void trap(const char* what) {
  g.failure = what;
  longjmp(g.fault, 1);   // the scheduler's frame; the fiber's stack is abandoned
}

inline void release(Wait kind, int which) {
  for (int i = 0; i < g.nthreads; ++i) {
    Fiber& f = g.fibers[i];
    if (f.done || f.wait != kind) continue;
    if (kind == Wait::kWave && f.wave != which) continue;
    if (kind == Wait::kNamed && f.named_id != which) continue;
    f.wait = Wait::kNone;
    f.runnable = true;
  }
}

// Barriers count the threads still running: a thread that returned no longer holds one up
// (as on both vendors' hardware).
inline void check_block_barrier() {
  if (g.block_arrived > 0 && g.block_arrived >= g.live) {
    g.block_arrived = 0;
    release(Wait::kBlock, 0);
  }
}
inline void check_wave_barrier(int w) {
  WaveState& s = g.waves[w];
  if (s.arrived > 0 && s.arrived >= s.live) {
    s.arrived = 0;
    release(Wait::kWave, w);
  }
}

inline void block_barrier() {
  Fiber& f = *g.cur;
  f.wait = Wait::kBlock;
  f.runnable = false;
  ++g.block_arrived;
  check_block_barrier();
  yield();
}

inline void wave_barrier() {
  Fiber& f = *g.cur;
  f.wait = Wait::kWave;
  f.runnable = false;
  ++g.waves[f.wave].arrived;
  check_wave_barrier(f.wave);
  yield();
}

inline void named_barrier(int id, int count) {
  if (id < 1 || id > 15 || count <= 0 || count % 32) trap("named barrier with a bad id or count");
  Fiber& f = *g.cur;
  f.wait = Wait::kNamed;
  f.named_id = id;
  f.runnable = false;
  g.named_count[id] = count;
  if (++g.named_arrived[id] >= count) {
    g.named_arrived[id] = 0;
    release(Wait::kNamed, id);
  }
  yield();
}

// Every lane of the wave deposits v; after the barrier each reads lane src's value.
template <typename T>
inline T exchange(T v, int src_lane) {
  static_assert(sizeof(T) <= 16, "wave exchange of a type wider than 16 bytes");
  WaveState& s = g.waves[g.cur->wave];
  memcpy(s.slot[g.cur->lane], &v, sizeof(T));
  wave_barrier();
  T r;
  memcpy(&r, s.slot[src_lane], sizeof(T));
  wave_barrier();   // nobody overwrites a slot before every lane has read
  return r;
}

// out[l] = lane l's v, for every lane of the wave (the matrix-unit model in mma.h).
template <typename T>
inline void all_gather(const T& v, T* out) {
  static_assert(sizeof(T) <= 64, "all_gather of a type wider than 64 bytes");
  WaveState& s = g.waves[g.cur->wave];
  memcpy(s.wide[g.cur->lane], &v, sizeof(T));
  wave_barrier();
  for (int l = 0; l < MLXA_EMU_WAVE; ++l) memcpy((void*)&out[l], s.wide[l], sizeof(T));
  wave_barrier();
}

inline unsigned long long ballot(bool p) {
  WaveState& s = g.waves[g.cur->wave];
  s.slot[g.cur->lane][0] = p ? 1 : 0;
  wave_barrier();
  unsigned long long m = 0;
  const int base = g.cur->wave * MLXA_EMU_WAVE;
  for (int l = 0; l < MLXA_EMU_WAVE; ++l) {
    const int t = base + l;
    if (t < g.nthreads && !g.fibers[t].done && s.slot[l][0]) m |= 1ull << l;
  }
  wave_barrier();
  return m;
}

[[noreturn]] inline void fiber_entry();

// Set per launch by run(): calls the kernel with this launch's arguments.
inline void (*g_body)(void*) = nullptr;
inline void* g_body_arg = nullptr;

inline void fiber_entry() {
  g_body(g_body_arg);
  Fiber& f = *g.cur;
  f.done = true;
  f.runnable = false;
  --g.live;
  if (f.wave < kMaxWaves) {
    --g.waves[f.wave].live;
    check_wave_barrier(f.wave);
  }
  check_block_barrier();
  mlxa_emu_swap(&f.sp, g.sched_sp);
  __builtin_unreachable();
}

inline void* start_stack(char* stack_base) {
  // swap pops an 8-byte slot of control words, six registers and the return address, so
  // fiber_entry starts with rsp = 8 mod 16, as after a call.
  uintptr_t top = ((uintptr_t)(stack_base + kStackBytes)) & ~(uintptr_t)15;
  void** sp = (void**)(top - 72);
  uint32_t csr[2];
  __asm__ volatile("stmxcsr %0" : "=m"(csr[0]));
  __asm__ volatile("fnstcw %0" : "=m"(*(uint16_t*)&csr[1]));
  memcpy(sp, csr, 8);              // the control words this fiber starts with
  for (int i = 1; i <= 6; ++i) sp[i] = nullptr;
  sp[7] = (void*)&fiber_entry;
  sp[8] = nullptr;                 // fiber_entry never returns
  return sp;
}

inline int format_error(MlxaEmuLaunch* l, const char* fmt, ...);

// Run every block of the launch; 0 on success, else an error text in l->error.
inline int run_grid(MlxaEmuLaunch* l, const char* name, char* stacks) {
  const unsigned bx = l->block[0], by = l->block[1], bz = l->block[2];
  const unsigned long long nt = (unsigned long long)bx * by * bz;
  if (nt == 0 || nt > (unsigned long long)kMaxThreads) {
    format_error(l, "%s: block of %llu threads (1..%d allowed)", name, nt, kMaxThreads);
    return 1;
  }
  g.block_dim = {bx, by, bz};
  g.grid_dim = {l->grid[0], l->grid[1], l->grid[2]};
  g.nthreads = (int)nt;
  static char* dynamic = nullptr;
  static size_t dynamic_cap = 0;
  if (l->shared_bytes > dynamic_cap) {
    free(dynamic);
    dynamic_cap = ((size_t)l->shared_bytes + 63) & ~(size_t)63;
    dynamic = (char*)aligned_alloc(64, dynamic_cap);
    if (!dynamic) {
      dynamic_cap = 0;
      format_error(l, "%s: no host memory for %u bytes of dynamic shared memory", name, l->shared_bytes);
      return 1;
    }
  }
  g_dynamic_shared = dynamic;
  const int nwaves = ((int)nt + MLXA_EMU_WAVE - 1) / MLXA_EMU_WAVE;
  for (unsigned z = 0; z < l->grid[2]; ++z)
    for (unsigned y = 0; y < l->grid[1]; ++y)
      for (unsigned x = 0; x < l->grid[0]; ++x) {
        g.block_idx = {x, y, z};
        if (l->shared_bytes) memset(dynamic, 0xff, l->shared_bytes);   // no block sees another's
        g.live = (int)nt;
        g.block_arrived = 0;
        for (int i = 0; i < 16; ++i) g.named_arrived[i] = 0;
        for (int w = 0; w < nwaves; ++w) {
          g.waves[w].arrived = 0;
          g.waves[w].live = (w + 1) * MLXA_EMU_WAVE <= (int)nt ? MLXA_EMU_WAVE : (int)nt - w * MLXA_EMU_WAVE;
        }
        for (int i = 0; i < (int)nt; ++i) {
          Fiber& f = g.fibers[i];
          f.tid = {(unsigned)i % bx, (unsigned)i / bx % by, (unsigned)i / (bx * by)};
          f.linear = i;
          f.wave = i / MLXA_EMU_WAVE;
          f.lane = i % MLXA_EMU_WAVE;
          f.runnable = true;
          f.done = false;
          f.wait = Wait::kNone;
          f.sp = start_stack(stacks + (size_t)i * kStackBytes);
        }
        if (setjmp(g.fault)) {
          format_error(l, "%s: kernel trapped (%s) in block (%u,%u,%u) thread (%u,%u,%u)", name,
                       g.failure ? g.failure : "trap", x, y, z, g.cur->tid.x, g.cur->tid.y, g.cur->tid.z);
          return 2;
        }
        while (g.live > 0) {
          bool ran = false;
          for (int i = 0; i < (int)nt; ++i) {
            Fiber& f = g.fibers[i];
            if (!f.runnable) continue;
            g.cur = &f;
            mlxa_emu_swap(&g.sched_sp, f.sp);
            ran = true;
          }
          if (!ran) {
            int at_block = 0, at_wave = 0, at_named = 0;
            for (int i = 0; i < (int)nt; ++i) {
              const Fiber& f = g.fibers[i];
              if (f.done) continue;
              at_block += f.wait == Wait::kBlock;
              at_wave += f.wait == Wait::kWave;
              at_named += f.wait == Wait::kNamed;
            }
            format_error(l, "%s: deadlock in block (%u,%u,%u): %d of %llu threads still running, %d wait at a "
                         "block barrier, %d at a wave operation, %d at a named barrier", name, x, y, z, g.live,
                         nt, at_block, at_wave, at_named);
            return 3;
          }
        }
      }
  return 0;
}

// The i-th parameter's offset in a CUDA parameter buffer: each one at its own alignment.
template <typename... A>
struct Layout {
  static constexpr size_t N = sizeof...(A);
  static constexpr size_t sizes[N + 1] = {sizeof(A)..., 0};
  static constexpr size_t aligns[N + 1] = {alignof(A)..., 1};
  static constexpr size_t offset(size_t i) {
    size_t off = 0;
    for (size_t k = 0;; ++k) {
      off = (off + aligns[k] - 1) / aligns[k] * aligns[k];
      if (k == i) return off;
      off += sizes[k];
    }
  }
  static constexpr size_t total() { return N ? offset(N - 1) + sizes[N - 1] : 0; }
};

template <typename... A, size_t... I>
std::tuple<A...> unpack(const MlxaEmuLaunch* l, std::index_sequence<I...>) {
  if (l->params) return std::tuple<A...>{*(const A*)l->params[I]...};
  std::tuple<A...> t;
  ((memcpy(&std::get<I>(t), (const char*)l->blob + Layout<A...>::offset(I), sizeof(A))), ...);
  return t;
}

template <typename... A>
int launch(void (*kernel)(A...), const char* name, MlxaEmuLaunch* l, char* stacks) {
  if (!l->params && (sizeof...(A) > 0) && (!l->blob || l->blob_size < Layout<A...>::total())) {
    format_error(l, "%s: parameter buffer of %zu bytes, the kernel takes %zu", name, l->blob_size,
                 Layout<A...>::total());
    return 4;
  }
  auto args = unpack<A...>(l, std::index_sequence_for<A...>{});
  struct Call {
    void (*kernel)(A...);
    std::tuple<A...>* args;
  } call{kernel, &args};
  g_body = [](void* p) {
    Call* c = (Call*)p;
    std::apply(c->kernel, *c->args);   // each thread gets its own copies, as on a GPU
  };
  g_body_arg = &call;
  return run_grid(l, name, stacks);
}

}  // namespace mlxa_emu

#include <stdarg.h>
#include <stdio.h>

inline int mlxa_emu::format_error(MlxaEmuLaunch* l, const char* fmt, ...) {
  if (!l->error || !l->error_size) return 0;
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(l->error, l->error_size, fmt, ap);
  va_end(ap);
  return n;
}

// One exported entry per kernel (build_kernels.py lists them after the family's source):
// the driver finds `mlxa_emu_entry_<name>` and calls it with the launch and the fiber stacks.
#define MLXA_EMU_ENTRY(name)                                                                        \
  extern "C" __attribute__((visibility("default"))) int mlxa_emu_entry_##name(MlxaEmuLaunch* l,    \
                                                                              char* stacks) {      \
    return ::mlxa_emu::launch(&name, #name, l, stacks);                                            \
  }
// The module's emulated wave width and the size of one fiber stack, for the driver; and the
// driver's way out of a memory fault inside a kernel (its SIGSEGV/SIGBUS handler calls it).
#define MLXA_EMU_MODULE_INFO                                                                        \
  extern "C" __attribute__((visibility("default"))) int mlxa_emu_wave_size() { return MLXA_EMU_WAVE; } \
  extern "C" __attribute__((visibility("default"))) size_t mlxa_emu_stack_bytes() {                \
    return ::mlxa_emu::kStackBytes;                                                                  \
  }                                                                                                  \
  extern "C" __attribute__((visibility("default"))) void mlxa_emu_fault() {                        \
    ::mlxa_emu::trap("memory fault: an address outside every allocation");                         \
  }

// ---- what the GPU headers provide ---------------------------------------------------------
#define __builtin_trap() ::mlxa_emu::trap("__builtin_trap")
#define __trap() ::mlxa_emu::trap("__trap")

inline void __syncthreads() { ::mlxa_emu::block_barrier(); }
inline long long clock64() { return (long long)__builtin_ia32_rdtsc(); }

// CUDA's integer and float min/max overloads, as one template (mixed types: the common type).
template <typename A, typename B>
inline std::common_type_t<A, B> min(A a, B b) { return b < a ? (std::common_type_t<A, B>)b : (std::common_type_t<A, B>)a; }
template <typename A, typename B>
inline std::common_type_t<A, B> max(A a, B b) { return a < b ? (std::common_type_t<A, B>)b : (std::common_type_t<A, B>)a; }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

struct uint2 { unsigned int x, y; };
struct alignas(16) uint4 { unsigned int x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }

template <typename To, typename From>
inline To mlxa_emu_bits(From f) {
  static_assert(sizeof(To) == sizeof(From), "bit cast between sizes");
  To t;
  memcpy(&t, &f, sizeof(To));
  return t;
}
inline unsigned int __float_as_uint(float f) { return mlxa_emu_bits<unsigned int>(f); }
inline float __uint_as_float(unsigned int u) { return mlxa_emu_bits<float>(u); }
inline int __float_as_int(float f) { return mlxa_emu_bits<int>(f); }
inline float __int_as_float(int u) { return mlxa_emu_bits<float>(u); }
inline long long __double_as_longlong(double d) { return mlxa_emu_bits<long long>(d); }
inline double __longlong_as_double(long long u) { return mlxa_emu_bits<double>(u); }

inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }

// erfinv: a rational first guess refined by Newton steps on erf (erf' = 2/sqrt(pi) e^{-x^2}).
inline double mlxa_emu_erfinv(double y) {
  if (!(y > -1.0 && y < 1.0)) {
    if (y == 1.0) return HUGE_VAL;
    if (y == -1.0) return -HUGE_VAL;
    return NAN;
  }
  const double w = -std::log((1.0 - y) * (1.0 + y));
  double x = std::copysign(std::sqrt(w), y) * (w < 5.0 ? 0.8862269254527580 - 0.05 * w / (1.0 + w) : 0.82);
  for (int i = 0; i < 60; ++i) {
    const double dx = (std::erf(x) - y) / (1.1283791670955126 * std::exp(-x * x));
    x -= dx;
    if (std::fabs(dx) <= 1e-17 * std::fabs(x)) break;
  }
  return x;
}
inline float erfinvf(float y) { return (float)mlxa_emu_erfinv((double)y); }
inline double erfinv(double y) { return mlxa_emu_erfinv(y); }

inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned int __brev(unsigned int x) {
  unsigned int r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline unsigned int __umulhi(unsigned int a, unsigned int b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
// CUDA's byte permute: result byte i is byte (s >> 4i) & 7 of the 8 bytes {y:x}.
inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
  const unsigned long long v = ((unsigned long long)y << 32) | x;
  unsigned int r = 0;
  for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}

// Atomics: fibers never run at the same time, so a plain read-modify-write is atomic.
template <typename T> inline T atomicAdd(T* p, T v) { T o = *p; *p = (T)(o + v); return o; }
template <typename T> inline T atomicMax(T* p, T v) { T o = *p; *p = o < v ? v : o; return o; }
template <typename T> inline T atomicMin(T* p, T v) { T o = *p; *p = v < o ? v : o; return o; }
template <typename T> inline T atomicCAS(T* p, T cmp, T v) { T o = *p; if (o == cmp) *p = v; return o; }
template <typename T> inline T atomicExch(T* p, T v) { T o = *p; *p = v; return o; }
template <typename T> inline T atomicOr(T* p, T v) { T o = *p; *p = o | v; return o; }
template <typename T> inline T atomicAnd(T* p, T v) { T o = *p; *p = o & v; return o; }

// ---- float16: storage plus exactly rounded conversions ---------------------------------------
struct __half {
  unsigned short x;
};
struct __half2 {
  __half x, y;
};
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
inline float __half2float(__half h) {
  const unsigned int s = (unsigned)(h.x & 0x8000u) << 16, e = (h.x >> 10) & 0x1fu, m = h.x & 0x3ffu;
  if (e == 0x1f) return __uint_as_float(s | 0x7f800000u | (m << 13));
  if (e) return __uint_as_float(s | ((e + 112) << 23) | (m << 13));
  const float v = (float)m * 0x1p-24f;   // subnormal or zero: exact
  return s ? -v : v;
}
// Round to nearest even, overflow to infinity, NaN kept quiet.
inline __half __float2half_rn(float f) {
  const unsigned int u = __float_as_uint(f), s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return __half{(unsigned short)(s | (a > 0x7f800000u ? 0x7e00u | ((a >> 13) & 0x3ffu) : 0x7c00u))};
  if (a >= 0x477ff000u) return __half{(unsigned short)(s | 0x7c00u)};   // rounds past 65504
  if (a < 0x38800000u) {                                                // below 2^-14: subnormal
    const float v = __uint_as_float(a) * 0x1p24f;                      // exact scale; then RNE
    return __half{(unsigned short)(s | (unsigned)std::nearbyint(v))};
  }
  const unsigned int r = a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u;
  return __half{(unsigned short)(s | (r >> 13))};
}
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__float2half_rn(a), __float2half_rn(b)}; }
inline float __low2float(__half2 h) { return __half2float(h.x); }
inline float __high2float(__half2 h) { return __half2float(h.y); }
// Packed half arithmetic: each lane computed exactly in double (a product of two halves has
// 22 significant bits) and rounded once to half, as the hardware's fused operation does.
// Rounding through float first gives the same half: 24 >= 2 * 11 + 2 bits.
inline __half mlxa_emu_h(double v) { return __float2half_rn((float)v); }
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
  return __half2{mlxa_emu_h((double)__half2float(a.x) * __half2float(b.x) + __half2float(c.x)),
                 mlxa_emu_h((double)__half2float(a.y) * __half2float(b.y) + __half2float(c.y))};
}
inline __half2 __hadd2(__half2 a, __half2 b) {
  return __half2{mlxa_emu_h((double)__half2float(a.x) + __half2float(b.x)),
                 mlxa_emu_h((double)__half2float(a.y) + __half2float(b.y))};
}
inline __half2 __hsub2(__half2 a, __half2 b) {
  return __half2{mlxa_emu_h((double)__half2float(a.x) - __half2float(b.x)),
                 mlxa_emu_h((double)__half2float(a.y) - __half2float(b.y))};
}
