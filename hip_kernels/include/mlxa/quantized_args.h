// Argument structs of hip_kernels/quantized.hip (packed by mlx_amd/runtime/ops/quantized.py).
// Plain C with fixed-width fields and explicit padding; checked against the packer by
// tests/ops/test_quantized_plans.py.
#pragma once

#include <stdint.h>

#define MLXA_QBATCH 4   // batch dimensions (after collapsing) a quantized kernel takes

extern "C" {

// out[b][m][n] = sum_k x[b][m][k] * dequant(w[b])[n][k] for m < M (M <= 8), n < N.
// Batch b (row-major over out_shape) picks x's batch xi (lhs[b] when gather, else b)
// and w's batch wi (rhs[b] or b); each is decomposed over its own batch shape/strides.
// Rows of x are x_row elements apart (elements along k contiguous); rows of w are w_row
// 32-bit words apart, rows of scales/biases s_row/b_row elements apart.
struct QmvArgs {
  const void* x;
  const void* w;
  const void* scales;
  const void* biases;    // affine only (else unused)
  const void* lhs;       // uint32 per batch (read when gather)
  const void* rhs;       // uint32 per batch (read when gather)
  void* out;
  int64_t m;
  int64_t n;
  int64_t k;
  int64_t batch;         // product of out_shape
  int64_t x_row;
  int64_t w_row;
  int64_t s_row;
  int64_t b_row;
  int64_t x_count;       // batches of x and of w (indices are clamped below these)
  int64_t w_count;
  int32_t group_shift;   // log2(group size)
  int32_t nb;            // dims of out_shape / lhs_str / rhs_str
  int32_t x_nb;          // dims of x_shape / x_str
  int32_t w_nb;          // dims of w_shape / w_str / s_str / b_str
  int32_t x_vec;         // x rows may take 16-byte loads (strides allow; base checked in kernel)
  int32_t w_vec;         // w chunks may take vector loads (strides allow; base checked in kernel)
  int32_t gather;        // lhs/rhs pick the batches of x and w
  int32_t ksplit;        // waves sharing one row group, each over a slice of k (1, 2 or 4)
  int64_t out_shape[MLXA_QBATCH];
  int64_t lhs_str[MLXA_QBATCH];
  int64_t rhs_str[MLXA_QBATCH];
  int64_t x_shape[MLXA_QBATCH];
  int64_t x_str[MLXA_QBATCH];
  int64_t w_shape[MLXA_QBATCH];
  int64_t w_str[MLXA_QBATCH];
  int64_t s_str[MLXA_QBATCH];
  int64_t b_str[MLXA_QBATCH];
};

// qmv_h2's siblings: up to two more matrices that multiply the same x (an attention's k and
// v beside q, an MLP's up beside gate), their rows after the QmvArgs rows in one launch: one
// launch and one staging of x instead of three. The kernel takes (QmvSibs, QmvArgs,
// QmvSibRows) so that every pointer comes first in its parameter buffer. Siblings share
// QmvArgs' m, k, row strides, group and batch 1; rows[i] = 0: no sibling i.
#define MLXA_QSIBS 2
struct QmvSibs {
  const void* w[MLXA_QSIBS];
  const void* scales[MLXA_QSIBS];
  const void* biases[MLXA_QSIBS];
  void* out[MLXA_QSIBS];
};
struct QmvSibRows {
  int64_t rows[MLXA_QSIBS];
};

// qmv_h2n, qmv_h2 with an RMS norm prologue (norm_args.h: RmsPro): the kernel takes (RmsPro,
// QmvSibs, QmvArgs, QmvSibRows, RmsProShape), the pointers first; one row of x, batch 1.

// qmv_h2g / qmv_h2ng, qmv_h2 / qmv_h2n with the GLU epilogue: the kernel takes QmvGlu before
// QmvSibs (after RmsPro); QmvArgs' matrix is an MLP's gate, its one sibling the up of equal
// rows, and out receives silu(gate) * up (the swiglu node after the two projections).
struct QmvGlu {
  void* out;
};

// Dequantize rows of packed w into a row-contiguous (batch, rows, cols) array of the
// compute dtype: chunk c of row r decodes into out[r][c * CV ...]. Batches (row / rows)
// are decomposed over shape/strides (w in words, scales and biases in elements).
struct DequantArgs {
  const void* w;
  const void* scales;
  const void* biases;
  void* out;
  int64_t total_chunks;  // batch * rows * (cols / CV)
  int64_t rows;
  int64_t cols;
  int64_t w_row;
  int64_t s_row;
  int64_t b_row;
  int32_t group_shift;   // log2(group size)
  int32_t nb;
  int64_t shape[MLXA_QBATCH];
  int64_t w_str[MLXA_QBATCH];
  int64_t s_str[MLXA_QBATCH];
  int64_t b_str[MLXA_QBATCH];
};

// Affine quantization of a row-contiguous w (groups of group_size along the last axis):
// packed words, scales and biases of every group, as MLX's CPU computes them.
struct QuantizeArgs {
  const void* w;
  void* wq;
  void* scales;
  void* biases;
  int64_t groups;
  int32_t group_size;
  int32_t pad0;
};

// fast::ConvertFP8 over a row-contiguous array of n elements (e4m3 bytes <-> floats).
struct Fp8Args {
  const void* in;
  void* out;
  int64_t n;
};

// QQMatmul's x quantized to an fp mode and back, groups of 16 (nvfp4) or 32 values of a
// row-contiguous x into a row-contiguous output of its dtype.
struct QdqArgs {
  const void* x;
  void* out;
  int64_t groups;
};

}  // extern "C"
