// sortlib: the vendor's device-wide radix sort behind one C entry point, for the long
// rows of Sort / ArgSort (runtime/ops/sort.py). hipCUB over rocPRIM on AMD, CUB (its
// NVIDIA twin) on the test GPU; built as a shared library per platform by build_kernels.py
// and loaded lazily with ctypes (runtime/sortlib.py). Our own radix passes (sort.hip)
// remain the path wherever this library is missing or declines.
//
// Keys arrive already mapped to unsigned integers in MLX's order (sort.hip's keys step:
// NaN last, -0.0 == +0.0), so one unsigned instantiation per key size serves every dtype;
// the payload is the raw element bits (Sort) or the source position (ArgSort). LSD radix
// sorts are stable: ties keep input order, as MLX's std::stable_sort does.
#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#include <cub/device/device_radix_sort.cuh>
namespace prim = cub;
typedef cudaStream_t stream_t;
#define MLXA_LIB_OK cudaSuccess
#else
// rocPRIM's headers include <iostream> (for debug printing we never enable); with GCC 13+
// headers that adds a reference to GLIBCXX_3.4.32, which Ubuntu 22.04's libstdc++ lacks.
// The stream declarations without that marker keep the library loadable there.
#include <istream>
#include <ostream>
#define _GLIBCXX_IOSTREAM 1
namespace std {
extern istream cin;
extern ostream cout, cerr, clog;
}  // namespace std
#include <hip/hip_runtime.h>
#include <hipcub/device/device_radix_sort.hpp>
namespace prim = hipcub;
typedef hipStream_t stream_t;
#define MLXA_LIB_OK hipSuccess
#endif

#define MLXA_SORTLIB_ABI 1

namespace {
template <typename K, typename V>
int pairs(void* temp, size_t* temp_bytes, const void* k_in, void* k_out, const void* v_in, void* v_out,
          int n, int end_bit, stream_t s) {
  const auto err = prim::DeviceRadixSort::SortPairs(temp, *temp_bytes, (const K*)k_in, (K*)k_out,
                                                    (const V*)v_in, (V*)v_out, n, 0, end_bit, s);
  return err == MLXA_LIB_OK ? 0 : (int)err;
}
}  // namespace

extern "C" {

int mlxa_sortlib_abi(void) { return MLXA_SORTLIB_ABI; }

// Sorts n (key, value) pairs by the low end_bit bits of the keys. temp == NULL: only
// writes the temporary storage the call needs to *temp_bytes. Returns 0, the platform's
// error code, or -1 for a (key_bytes, value_bytes) pair not instantiated here.
int mlxa_sort_pairs(int key_bytes, int value_bytes, void* temp, size_t* temp_bytes, const void* k_in,
                    void* k_out, const void* v_in, void* v_out, int64_t n, int end_bit, void* stream) {
  if (n < 0 || n > INT32_MAX) return -1;
  const stream_t s = (stream_t)stream;
  const int m = (int)n;
#define MLXA_PAIR(KB, VB, K, V) \
  if (key_bytes == KB && value_bytes == VB) return pairs<K, V>(temp, temp_bytes, k_in, k_out, v_in, v_out, m, end_bit, s);
  MLXA_PAIR(1, 1, uint8_t, uint8_t)
  MLXA_PAIR(2, 2, uint16_t, uint16_t)
  MLXA_PAIR(4, 4, uint32_t, uint32_t)
  MLXA_PAIR(8, 8, uint64_t, uint64_t)
  MLXA_PAIR(1, 4, uint8_t, uint32_t)
  MLXA_PAIR(2, 4, uint16_t, uint32_t)
  MLXA_PAIR(8, 4, uint64_t, uint32_t)
#undef MLXA_PAIR
  return -1;
}

}  // extern "C"
