// Argument struct of the random family (hip_kernels/random.hip), passed by value.
// Plain C, fixed-width fields, padding written out: tests/ops/test_random_plans.py
// checks sizeof/offsetof against the Python packer in mlx_amd/runtime/ops/random.py.
#pragma once

#include <stdint.h>

#define MLXA_RANDOM_MAX_DIMS 8

extern "C" {

// RandomBits: out holds num_keys runs of bytes_per_key bytes, one run per key. A run is
// `words` 32-bit words (the last one possibly partial) filled by threefry2x32 hashes:
// hash j < half fills words j and half + odd + j; with odd words, hash `half` fills
// word `half` with its first result. Thread t computes hash t % (half + odd) of key
// t / (half + odd). Keys: element 2i and 2i+1 (row-major) of a uint32 array laid out by
// key_shape/key_strides (collapsed dims, innermost first, strides in elements).
struct RandomBitsArgs {
  const uint32_t* keys;
  uint8_t* out;
  int64_t num_keys;
  int64_t bytes_per_key;
  int64_t total;                                // num_keys * (half + odd) hashes
  int64_t key_strides[MLXA_RANDOM_MAX_DIMS];
  int32_t key_shape[MLXA_RANDOM_MAX_DIMS];
  int32_t key_ndim;
  uint32_t half;
  uint32_t odd;
  uint32_t pad_;
};

}  // extern "C"
