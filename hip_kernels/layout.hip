// Layout family: Select (where), Concatenate and Pad (strided writes into a slab or the
// interior of a row-contiguous output), and Arange. Select, the strided copy and the
// fill move bits only, so they are instantiated per element size (the unsigned type of
// that size); Arange per stored type. Instantiations: kernel_tables/layout.py.
#include "mlxa/elementwise.h"
#include "mlxa/layout_args.h"

namespace mlxa {
namespace layout {

// where(cond, a, b): all three broadcast to the output's (collapsed) shape; cond is
// bool (one byte), read as nonzero like MLX's CPU.
template <typename T, typename IdxT>
MLXA_DEVICE void select(const LayoutSelectArgs& p) {
  const uint8_t* c = (const uint8_t*)p.cond;
  const T* a = (const T*)p.a;
  const T* b = (const T*)p.b;
  T* out = (T*)p.out;
  const int64_t* const strides[3] = {p.cond_strides, p.a_strides, p.b_strides};
  strided_for_each<IdxT, 3>((IdxT)p.n, p.ndim, p.shape, strides, [&](IdxT i, const IdxT (&off)[3]) {
    out[i] = c[off[0]] ? a[off[1]] : b[off[2]];
  });
}

// Strided input -> strided output view; the output view never overlaps itself (a slab
// or interior of a fresh row-contiguous array), so threads write distinct elements.
template <typename T, typename IdxT>
MLXA_DEVICE void copy(const LayoutCopyArgs& p) {
  const T* in = (const T*)p.in;
  T* out = (T*)p.out;
  const int64_t* const strides[2] = {p.in_strides, p.out_strides};
  strided_for_each<IdxT, 2>((IdxT)p.n, p.ndim, p.shape, strides,
                            [&](IdxT, const IdxT (&off)[2]) { out[off[1]] = in[off[0]]; });
}

template <typename T>
MLXA_DEVICE void fill(const LayoutFillArgs& p) {
  const T v = *(const T*)p.value;
  T* out = (T*)p.out;
  const int64_t step = grid_threads<int64_t>();
  for (int64_t i = global_thread<int64_t>(); i < p.n; i += step) out[i] = v;
}

// Integers: start + i*step wrapped to 64 bits, then the low bits (what MLX's sequential
// accumulation in T gives). Floats: computed in double; the planner only sends ranges
// where every value, and so every partial sum of MLX's accumulation, is exact in T.
template <typename T, bool Float>
MLXA_DEVICE void arange(const LayoutArangeArgs& p) {
  T* out = (T*)p.out;
  const int64_t step = grid_threads<int64_t>();
  for (int64_t i = global_thread<int64_t>(); i < p.n; i += step) {
    if constexpr (Float) {
      out[i] = cast<T>(p.fstart + (double)i * p.fstep);
    } else {
      out[i] = (T)((uint64_t)p.istart + (uint64_t)i * (uint64_t)p.istep);
    }
  }
}

}  // namespace layout
}  // namespace mlxa

#define MLXA_LAYOUT_SELECT(name, T, IdxT) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_BLOCK_MAX) name(LayoutSelectArgs a) { mlxa::layout::select<T, IdxT>(a); }
#define MLXA_LAYOUT_COPY(name, T, IdxT) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_BLOCK_MAX) name(LayoutCopyArgs a) { mlxa::layout::copy<T, IdxT>(a); }
#define MLXA_LAYOUT_FILL(name, T) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_BLOCK_MAX) name(LayoutFillArgs a) { mlxa::layout::fill<T>(a); }
#define MLXA_LAYOUT_ARANGE(name, T, Float) \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(MLXA_BLOCK_MAX) name(LayoutArangeArgs a) { mlxa::layout::arange<T, Float>(a); }

#include "layout.inc"
