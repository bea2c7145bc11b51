// Argument struct of hip_kernels/hadamard.hip (packed by mlx_amd/runtime/ops/hadamard.py).
// Plain C, fixed-width fields, explicit padding; checked against the packer by
// tests/ops/test_hadamard_plans.py.
#pragma once

#include <stdint.h>

#define MLXA_HADAMARD_MAX_DIMS 8
#define MLXA_HADAMARD_MAX_M 28

extern "C" {

// One pass of the transform over "lines": R elements S apart inside a transform row of
// n elements. Line l is group g = l / S, column s = l % S; group g is transform row
// g / gpr, and its element r sits at row index (g % gpr) * R * S + r * S + s.
// The pass applies H_m (x) H_P to each line (R = m * P, the H_P part on the low index).
struct HadamardArgs {
  const void* in;
  void* out;
  int64_t lines;
  int64_t S;
  int64_t gpr;
  int64_t n;              // transform row length: the output's row stride
  int64_t in_elem;        // input stride along the transformed axis
  int64_t in_shape[MLXA_HADAMARD_MAX_DIMS];    // transform rows -> input offset,
  int64_t in_strides[MLXA_HADAMARD_MAX_DIMS];  // innermost first
  int32_t nd;
  int32_t P;              // power-of-two part of this pass
  int32_t C;              // lines per block
  float scale;            // applied on store (1 for all but the last pass)
  uint32_t hm[MLXA_HADAMARD_MAX_M];  // bit k of hm[j]: H_m[j][k] is +1
};

}  // extern "C"
