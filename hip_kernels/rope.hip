// Rope family: rotary position embedding (our mlx_amd::RoPE primitive, mx.fast.rope
// while enabled). x is read through its strides (MLX usually hands a transposed view);
// the output is row-contiguous.
//
// Numerics follow MLX's decomposition: position (l + offset) * scale and the angle in
// float32; the default frequencies exp(-i * log(base) / half), given ones 1 / freqs[i];
// cos and sin rounded to x's type, then each product and the difference/sum rounded to
// x's type (float32: plain float32 operations, no fused multiply-add).
#include "mlxa/platform.h"
#include "mlxa/types.h"
#include "mlxa/rope_args.h"

namespace mlxa::rope {

template <typename T> MLXA_DEVICE float rnd(float v) { return (float)widen(cast<T>(v)); }

// One work item: position l, pair (or tail element) j, heads [h0, h0 + head_chunk). The
// angle's exp/cos/sin cost more than the item's memory traffic, so the launcher gives an
// item several heads when there are enough items to fill the GPU without it.
// ``slot``: where the rotation is also written (a KV cache's slot, geometry ``kv``), or null.
template <typename T, class S>
MLXA_DEVICE void rope_items(const void* xp, const void* offset, const void* freqs, void* outp, const S& a,
                            T* slot = nullptr, const RopeKvShape* kv = nullptr) {
  const T* x = (const T*)xp;
  T* out = (T*)outp;
  const int chunks = (a.n_heads + a.head_chunk - 1) / a.head_chunk;
  const int64_t nthreads = grid_threads<int64_t>();
  for (int64_t i = global_thread<int64_t>(); i < a.total; i += nthreads) {
    const int64_t row = i / a.items;
    const int j = (int)(i - row * a.items);
    const int l = (int)(row % a.seq);
    const int64_t bc = row / a.seq;
    const int h0 = (int)(bc % chunks) * a.head_chunk;
    const int64_t bi = bc / chunks;
    const int h1 = min(h0 + a.head_chunk, a.n_heads);
    const T* xb = x + bi * a.stride_b + l * a.stride_l;
    T* ob = out + ((bi * a.n_heads) * a.seq + l) * (int64_t)a.d;
    const int64_t out_head = (int64_t)a.seq * a.d;
    T* sb = slot ? slot + bi * kv->slot_b + l * kv->slot_l : nullptr;
    if (j >= a.half) {   // the tail beyond dims passes through
      const int k = j + a.half;
      for (int h = h0; h < h1; ++h) {
        const T v = xb[h * a.stride_n + k * a.stride_d];
        ob[h * out_head + k] = v;
        if (sb) sb[h * kv->slot_h + k] = v;
      }
      continue;
    }
    const int off = ((const int32_t*)offset)[bi * a.offset_stride];
    const float pos = __fmul_rn((float)l + (float)off, a.scale);
    const float inv = a.has_freqs ? 1.0f / ((const float*)freqs)[j * a.freqs_stride]
                                  : expf(__fmul_rn(-(float)j, a.inv_freq_log));
    const float theta = __fmul_rn(pos, inv);
    const float c = rnd<T>(cosf(theta)), s = rnd<T>(sinf(theta));
    const int i1 = a.traditional ? 2 * j : j;
    const int i2 = a.traditional ? 2 * j + 1 : j + a.half;
#pragma unroll 4
    for (int h = h0; h < h1; ++h) {
      const T* xr = xb + h * a.stride_n;
      T* orow = ob + h * out_head;
      const float x1 = (float)widen(xr[i1 * a.stride_d]), x2 = (float)widen(xr[i2 * a.stride_d]);
      const float o1 = rnd<T>(rnd<T>(__fmul_rn(x1, c)) - rnd<T>(__fmul_rn(x2, s)));
      const float o2 = rnd<T>(rnd<T>(__fmul_rn(x1, s)) + rnd<T>(__fmul_rn(x2, c)));
      orow[i1] = cast<T>(o1);
      orow[i2] = cast<T>(o2);
      if (sb) {
        sb[h * kv->slot_h + i1] = cast<T>(o1);
        sb[h * kv->slot_h + i2] = cast<T>(o2);
      }
    }
  }
}

// v (read through its strides) into its cache slot, one element a thread.
template <typename T>
MLXA_DEVICE void copy_to_slot(const void* vp, void* slotp, const RopeKvShape& c) {
  const T* v = (const T*)vp;
  T* s = (T*)slotp;
  const int64_t nthreads = grid_threads<int64_t>();
  for (int64_t i = global_thread<int64_t>(); i < c.v_total; i += nthreads) {
    int64_t r = i;
    const int e = (int)(r % c.d);
    r /= c.d;
    const int l = (int)(r % c.l);
    r /= c.l;
    const int h = (int)(r % c.h);
    const int64_t b = r / c.h;
    s[b * c.slot_b + h * c.slot_h + l * c.slot_l + e] = v[b * c.v_b + h * c.v_h + l * c.v_l + e * c.v_d];
  }
}

}  // namespace mlxa::rope

#define MLXA_ROPE(name, T)                                                 \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(256) name(RopeArgs a) {              \
    mlxa::rope::rope_items<T>(a.x, a.offset, a.freqs, a.out, a);           \
  }

// Two rotations (blockIdx.y 0: the first, 1: the second), each over the grid's x extent.
// The parameters lay out as a RopeArgs for the first after the second's pointers, then the
// second's shape.
#define MLXA_ROPE_TWIN(name, T)                                                                \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(256) name(const void* x1, const void* offset1,           \
                                                const void* freqs1, void* out1, RopeArgs a,    \
                                                RopeShape b) {                                 \
    if (blockIdx.y == 0) mlxa::rope::rope_items<T>(a.x, a.offset, a.freqs, a.out, a);          \
    else mlxa::rope::rope_items<T>(x1, offset1, freqs1, out1, b);                              \
  }

// An attention's decode-step rotations and cache writes in one launch (blockIdx.y 0: q's
// rotation; 1: k's, written to its output and to the k cache's slot; 2: v into the v cache's
// slot). Pointers: k's four, the k slot, v, the v slot; then q's RopeArgs, k's shape, the
// slots' geometry.
#define MLXA_ROPE_KV(name, T)                                                                  \
  MLXA_GLOBAL void MLXA_LAUNCH_BOUNDS(256) name(const void* x1, const void* offset1,           \
                                                const void* freqs1, void* out1, void* kslot,   \
                                                const void* v, void* vslot, RopeArgs a,        \
                                                RopeShape b, RopeKvShape c) {                  \
    if (blockIdx.y == 0) mlxa::rope::rope_items<T>(a.x, a.offset, a.freqs, a.out, a);          \
    else if (blockIdx.y == 1) mlxa::rope::rope_items<T>(x1, offset1, freqs1, out1, b, (T*)kslot, &c); \
    else mlxa::rope::copy_to_slot<T>(v, vslot, c);                                             \
  }

#include "rope.inc"
