// Our own primitives for MLX's fused fast ops (mx.fast.rms_norm, layer_norm, rope,
// scaled_dot_product_attention). While mlx_amd is enabled, mx.fast.* build arrays
// with these primitives so that the evaluator sees one fused node (demangled names
// mlx_amd::RMSNorm, ...; inputs and state() as in docs: the fast-ops contract).
//
// On the CPU (plain MLX, or the evaluator's fallback) each computes MLX's own
// decomposition of the op (mx::fast::* on a CPU stream builds it), evaluated by
// calling the decomposed nodes' eval_cpu directly: no nested mx::eval, so nothing
// waits inside eval_cpu and MLX's scheduler is never re-entered. Transforms (vjp,
// jvp, vmap) go through MLX's transforms of the same decomposition.
#pragma once

#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bridge.h"

namespace mlx_amd {

using Arrays = std::vector<mx::array>;

class FastPrimitive : public mx::Primitive {
 public:
  explicit FastPrimitive(mx::Stream s) : mx::Primitive(s) {}

  void eval_cpu(const Arrays& inputs, Arrays& outputs) override;
  void eval_gpu(const Arrays& inputs, Arrays& outputs) override;
  Arrays jvp(const Arrays& primals, const Arrays& tangents,
             const std::vector<int>& argnums) override;
  Arrays vjp(const Arrays& primals, const Arrays& cotangents,
             const std::vector<int>& argnums, const Arrays& outputs) override;
  std::pair<Arrays, std::vector<int>> vmap(const Arrays& inputs,
                                           const std::vector<int>& axes) override;

  // MLX's decomposition of the op on stream s (basic ops only on a CPU stream).
  virtual Arrays decompose(const Arrays& inputs, mx::Stream s) const = 0;

 protected:
  std::function<Arrays(const Arrays&)> of_argnums(const Arrays& primals,
                                                  const std::vector<int>& argnums,
                                                  Arrays* dp);
  // vmap through MLX's vmap of the decomposition (outputs batched on axis 0)
  std::pair<Arrays, std::vector<int>> vmap_decomposed(const Arrays& inputs,
                                                      const std::vector<int>& axes);
};

class RMSNorm : public FastPrimitive {
 public:
  RMSNorm(mx::Stream s, float eps, bool has_weight)
      : FastPrimitive(s), eps_(eps), has_weight_(has_weight) {}
  const char* name() const override { return "RMSNorm"; }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const Arrays& inputs) override {
    return {inputs[0].shape()};
  }
  std::pair<Arrays, std::vector<int>> vmap(const Arrays& inputs,
                                           const std::vector<int>& axes) override;
  Arrays decompose(const Arrays& inputs, mx::Stream s) const override;
  auto state() const { return std::make_tuple(eps_, has_weight_); }

 private:
  float eps_;
  bool has_weight_;
};

class LayerNorm : public FastPrimitive {
 public:
  LayerNorm(mx::Stream s, float eps, bool has_weight, bool has_bias)
      : FastPrimitive(s), eps_(eps), has_weight_(has_weight), has_bias_(has_bias) {}
  const char* name() const override { return "LayerNorm"; }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const Arrays& inputs) override {
    return {inputs[0].shape()};
  }
  std::pair<Arrays, std::vector<int>> vmap(const Arrays& inputs,
                                           const std::vector<int>& axes) override;
  Arrays decompose(const Arrays& inputs, mx::Stream s) const override;
  auto state() const { return std::make_tuple(eps_, has_weight_, has_bias_); }

 private:
  float eps_;
  bool has_weight_, has_bias_;
};

class RoPE : public FastPrimitive {
 public:
  RoPE(mx::Stream s, int dims, bool traditional, float base, float scale, bool has_freqs)
      : FastPrimitive(s), dims_(dims), traditional_(traditional), base_(base),
        scale_(scale), has_freqs_(has_freqs) {}
  const char* name() const override { return "RoPE"; }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const Arrays& inputs) override {
    return {inputs[0].shape()};
  }
  std::pair<Arrays, std::vector<int>> vmap(const Arrays& inputs,
                                           const std::vector<int>& axes) override;
  Arrays decompose(const Arrays& inputs, mx::Stream s) const override;
  auto state() const {
    return std::make_tuple(dims_, traditional_, base_, scale_, has_freqs_);
  }

 private:
  int dims_;
  bool traditional_;
  float base_;   // 0.0 when freqs are given
  float scale_;
  bool has_freqs_;
};

class SDPA : public FastPrimitive {
 public:
  SDPA(mx::Stream s, float scale, std::string mask_mode, bool has_sinks)
      : FastPrimitive(s), scale_(scale), mask_mode_(std::move(mask_mode)),
        has_sinks_(has_sinks) {}
  const char* name() const override { return "SDPA"; }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const Arrays& inputs) override {
    const auto& q = inputs[0];
    return {mx::Shape{q.shape(0), q.shape(1), q.shape(2), inputs[2].shape(3)}};
  }
  Arrays decompose(const Arrays& inputs, mx::Stream s) const override;
  auto state() const { return std::make_tuple(scale_, mask_mode_, has_sinks_); }

 private:
  float scale_;
  std::string mask_mode_;  // "", "causal" or "array"
  bool has_sinks_;
};

// mx.dequantize of the affine mode (the CPU wheel builds ~20 shift/mask/concatenate nodes
// for it: a quantized embedding's row every decode step); one node instead, MLX's own
// decomposition on the CPU.
class Dequantize : public FastPrimitive {
 public:
  Dequantize(mx::Stream s, int group_size, int bits, mx::Dtype dtype)
      : FastPrimitive(s), group_size_(group_size), bits_(bits), dtype_(dtype) {}
  const char* name() const override { return "Dequantize"; }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const Arrays& inputs) override {
    auto shape = inputs[0].shape();
    shape.back() = shape.back() * 32 / bits_;
    return {shape};
  }
  Arrays decompose(const Arrays& inputs, mx::Stream s) const override;
  auto state() const { return std::make_tuple(group_size_, bits_); }

 private:
  int group_size_, bits_;
  mx::Dtype dtype_;
};

// fast_rms_norm, fast_layer_norm, fast_rope, fast_sdpa, dequantize on the module
void register_fast(nb::module_& m);

}  // namespace mlx_amd
