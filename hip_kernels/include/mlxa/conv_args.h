// Argument struct of the conv family (hip_kernels/conv.hip), passed by value. Plain C
// with fixed-width fields and explicit padding, checked field by field against the
// packer in mlx_amd/runtime/ops/conv.py by tests/ops/test_conv_plans.py.
#pragma once

#include <stdint.h>

#define MLXA_CONV_DIMS 3   // spatial dims; 1-D and 2-D convolutions pad with extent-1 dims

extern "C" {

// The window of an output position over the input, per spatial dim: the input's and output's
// extents, the kernel taps, stride, padding in front, and kernel and input dilation.
struct ConvWindow {
  int32_t in_spatial[MLXA_CONV_DIMS];
  int32_t out_spatial[MLXA_CONV_DIMS];
  int32_t kernel[MLXA_CONV_DIMS];
  int32_t stride[MLXA_CONV_DIMS];
  int32_t pad_lo[MLXA_CONV_DIMS];
  int32_t kdil[MLXA_CONV_DIMS];
  int32_t idil[MLXA_CONV_DIMS];
};

// im2col for one chunk of output positions [p0, p0 + positions) (positions run over
// N x output spatial, row-major). Patch element ((g * positions + p) * ktot + k) * cg + c
// holds input channel g * cg + c at the spatial tap k of output position p0 + p, or 0
// where the tap falls into padding or between input-dilated elements.
struct ConvArgs {
  const void* in;
  void* patches;
  int64_t p0;
  int64_t positions;
  int64_t n_work;                        // positions * groups * (cg / vec): each through all ktot taps
  int64_t in_strides[2 + MLXA_CONV_DIMS];  // batch, spatial..., channel (elements)
  ConvWindow win;
  int32_t groups;
  int32_t cg;                            // input channels per group
  int32_t ktot;                          // kernel taps: product of kernel[]
  int32_t vec;                           // channels per work item: 1, or 16 bytes' worth
  int32_t flip;                          // taps in reverse (convolution, not correlation)
};

// The convolution on the matrix unit (implicit GEMM, 16-bit dtypes): out[p, g * cog + co] =
// sum over k < kd of patch(p, k) * w[g * cog + co, k], the patch read straight from the input
// (k = tap * cg + c). The launcher proves 8-element runs: unit channel stride, cg and every
// input stride multiples of 8, the weight row-major (C_out, kd); the kernel checks the bases'
// 16-byte alignment for its asynchronous copies.
struct ConvMmaArgs {
  const void* in;
  const void* w;
  void* out;
  int64_t positions;                     // N x output spatial
  int64_t in_strides[1 + MLXA_CONV_DIMS];  // batch, spatial... (elements; channel stride 1)
  ConvWindow win;
  int32_t cg;                            // input channels per group
  int32_t cog;                           // output channels per group
  int32_t c_out;                         // output row length
  int32_t kd;                            // ktot * cg
  int32_t flip;
  int32_t dilated;                       // some idil > 1
  int32_t out_vec;                       // 16-byte output stores proven
};

}  // extern "C"
