// mlx_amd::RMSNorm, LayerNorm, RoPE, SDPA: see fast.h.
#include "fast.h"

#include <mutex>
#include <string>
#include <unordered_map>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>

#include <optional>
#include <stdexcept>
#include <typeinfo>
#include <unordered_set>
#include <variant>

#include "mlx/backend/cpu/encoder.h"
#include "mlx/fast.h"
#include "mlx/ops.h"
#include "mlx/transforms.h"

namespace mlx_amd {

namespace {

using namespace nb::literals;

// An available, primitive-less array sharing `in`'s buffer and layout: the
// decomposition is built on these, so evaluating it never touches (detaches,
// re-schedules) the caller's graph, and MLX's donation rules see the extra
// reference and never reuse an input's buffer.
mx::array detached(const mx::array& in) {
  mx::array c(mx::allocator::Data(mx::allocator::Buffer(nullptr),
                                  [](mx::allocator::Buffer) {}),
              in.shape(), in.dtype());
  c.copy_shared_buffer(in);
  return c;
}

// Evaluate the unevaluated part of a small graph by calling each node's eval_cpu
// in topological order on this thread, as MLX's CPU eval does for one node: the
// kernels are dispatched to the stream's worker. The graph and the encoder's
// temporaries are kept alive by a task queued behind those kernels.
void eval_decomposed(const Arrays& outs, mx::Stream s) {
  auto pending = [](const mx::array& a) {
    return a.has_primitive() && a.status() == mx::array::Status::unscheduled;
  };
  Arrays tape;
  std::unordered_set<uintptr_t> seen;
  std::vector<std::pair<mx::array, size_t>> stack;
  for (const auto& root : outs) {
    if (!pending(root) || !seen.insert(root.id()).second) continue;
    stack.emplace_back(root, 0);
    while (!stack.empty()) {
      auto& [a, i] = stack.back();
      if (i < a.inputs().size()) {
        const auto& in = a.inputs()[i++];
        if (pending(in) && seen.insert(in.id()).second) {
          for (const auto& sib : in.siblings()) seen.insert(sib.id());
          stack.emplace_back(in, 0);
        }
        continue;
      }
      tape.push_back(a);
      stack.pop_back();
    }
  }
  for (auto& a : tape) {
    auto outputs = a.outputs();
    a.primitive().eval_cpu(a.inputs(), outputs);
  }
  auto& enc = mx::cpu::get_command_encoder(s);
  enc.dispatch([keep = std::move(tape), temps = std::move(enc.temporaries())]() {});
}

mx::Dtype out_dtype_of(const Arrays& inputs) {
  // weight and bias were cast to the output dtype; without them it is x's
  return inputs.size() > 1 ? inputs[1].dtype() : inputs[0].dtype();
}

template <typename P>
bool same_class(const P& self, const mx::Primitive& other) {
  return typeid(other) == typeid(self);
}

}  // namespace

// ---------------------------------------------------------------- shared
void FastPrimitive::eval_cpu(const Arrays& inputs, Arrays& outputs) {
  auto s = stream();
  Arrays ins;
  ins.reserve(inputs.size());
  for (const auto& in : inputs) ins.push_back(detached(in));
  auto res = decompose(ins, s);
  eval_decomposed(res, s);
  for (size_t i = 0; i < outputs.size(); ++i) {
    outputs[i].copy_shared_buffer(res[i]);
  }
}

void FastPrimitive::eval_gpu(const Arrays&, Arrays&) {
  throw std::runtime_error(std::string("[mlx_amd::") + name() +
                           "] has no MLX GPU implementation (mlx-amd evaluates it)");
}

// The decomposition as a function of the differentiated inputs (``argnums``) alone, the
// others held at their primal values; *dp gets those inputs' primals.
std::function<Arrays(const Arrays&)> FastPrimitive::of_argnums(const Arrays& primals,
                                                              const std::vector<int>& argnums,
                                                              Arrays* dp) {
  for (int a : argnums) dp->push_back(primals[a]);
  auto s = stream();
  return [this, &primals, &argnums, s](const Arrays& d) {
    Arrays all = primals;
    for (size_t i = 0; i < argnums.size(); ++i) all[argnums[i]] = d[i];
    return decompose(all, s);
  };
}

Arrays FastPrimitive::jvp(const Arrays& primals, const Arrays& tangents,
                          const std::vector<int>& argnums) {
  Arrays dp;
  auto fun = of_argnums(primals, argnums, &dp);
  return mx::jvp(fun, dp, tangents).second;
}

Arrays FastPrimitive::vjp(const Arrays& primals, const Arrays& cotangents,
                          const std::vector<int>& argnums, const Arrays&) {
  Arrays dp;
  auto fun = of_argnums(primals, argnums, &dp);
  return mx::vjp(fun, dp, cotangents).second;
}

std::pair<Arrays, std::vector<int>> FastPrimitive::vmap_decomposed(
    const Arrays& inputs, const std::vector<int>& axes) {
  auto s = stream();
  auto fun = [this, s](const Arrays& in) { return decompose(in, s); };
  auto outs = mx::vmap(fun, axes, {0})(inputs);
  return {outs, std::vector<int>(outs.size(), 0)};
}

std::pair<Arrays, std::vector<int>> FastPrimitive::vmap(
    const Arrays& inputs, const std::vector<int>& axes) {
  return vmap_decomposed(inputs, axes);
}

// Batched x, everything else shared: the same fused op on x with the batch axis
// moved to the front (the op works on the last axis, or axis -2 for rope).
static bool only_x_batched(const std::vector<int>& axes) {
  for (size_t i = 1; i < axes.size(); ++i) {
    if (axes[i] >= 0) return false;
  }
  return !axes.empty() && axes[0] >= 0;
}

// ...then: x's batch axis moved to the front, the op `p` (this primitive's twin) applied
static std::pair<Arrays, std::vector<int>> x_batched_first(const Arrays& inputs, int axis,
                                                           mx::Dtype dt,
                                                           std::shared_ptr<mx::Primitive> p,
                                                           mx::Stream s) {
  Arrays in = inputs;
  in[0] = mx::moveaxis(inputs[0], axis, 0, s);
  auto shape = in[0].shape();
  return {{mx::array(shape, dt, std::move(p), in)}, {0}};
}

// ---------------------------------------------------------------- RMSNorm
Arrays RMSNorm::decompose(const Arrays& in, mx::Stream s) const {
  std::optional<mx::array> w;
  if (has_weight_) w = in[1];
  return {mx::fast::rms_norm(in[0], w, eps_, s)};
}

Arrays Dequantize::decompose(const Arrays& in, mx::Stream s) const {
  return {mx::dequantize(in[0], in[1], in[2], group_size_, bits_, "affine", std::nullopt, dtype_, s)};
}

bool Dequantize::is_equivalent(const mx::Primitive& other) const {
  if (!same_class(*this, other)) return false;
  const auto& o = static_cast<const Dequantize&>(other);
  return group_size_ == o.group_size_ && bits_ == o.bits_ && dtype_ == o.dtype_;
}

bool RMSNorm::is_equivalent(const mx::Primitive& other) const {
  if (!same_class(*this, other)) return false;
  const auto& o = static_cast<const RMSNorm&>(other);
  return eps_ == o.eps_ && has_weight_ == o.has_weight_;
}

std::pair<Arrays, std::vector<int>> RMSNorm::vmap(const Arrays& inputs,
                                                  const std::vector<int>& axes) {
  if (!only_x_batched(axes)) return vmap_decomposed(inputs, axes);
  auto s = stream();
  return x_batched_first(inputs, axes[0], out_dtype_of(inputs),
                         std::make_shared<RMSNorm>(s, eps_, has_weight_), s);
}

// ---------------------------------------------------------------- LayerNorm
Arrays LayerNorm::decompose(const Arrays& in, mx::Stream s) const {
  std::optional<mx::array> w, b;
  size_t i = 1;
  if (has_weight_) w = in[i++];
  if (has_bias_) b = in[i++];
  return {mx::fast::layer_norm(in[0], w, b, eps_, s)};
}

bool LayerNorm::is_equivalent(const mx::Primitive& other) const {
  if (!same_class(*this, other)) return false;
  const auto& o = static_cast<const LayerNorm&>(other);
  return eps_ == o.eps_ && has_weight_ == o.has_weight_ && has_bias_ == o.has_bias_;
}

std::pair<Arrays, std::vector<int>> LayerNorm::vmap(const Arrays& inputs,
                                                    const std::vector<int>& axes) {
  if (!only_x_batched(axes)) return vmap_decomposed(inputs, axes);
  auto s = stream();
  return x_batched_first(inputs, axes[0], out_dtype_of(inputs),
                         std::make_shared<LayerNorm>(s, eps_, has_weight_, has_bias_), s);
}

// ---------------------------------------------------------------- RoPE
Arrays RoPE::decompose(const Arrays& in, mx::Stream s) const {
  std::optional<float> base;
  std::optional<mx::array> freqs;
  if (has_freqs_) {
    freqs = in[2];
  } else {
    base = base_;
  }
  return {mx::fast::rope(in[0], dims_, traditional_, base, scale_, in[1], freqs, s)};
}

bool RoPE::is_equivalent(const mx::Primitive& other) const {
  if (!same_class(*this, other)) return false;
  const auto& o = static_cast<const RoPE&>(other);
  return dims_ == o.dims_ && traditional_ == o.traditional_ && base_ == o.base_ &&
         scale_ == o.scale_ && has_freqs_ == o.has_freqs_;
}

std::pair<Arrays, std::vector<int>> RoPE::vmap(const Arrays& inputs,
                                               const std::vector<int>& axes) {
  // a per-batch offset follows x's first axis: moving the vmapped axis in front
  // would change which axis that is
  if (!only_x_batched(axes) || inputs[1].size() != 1) {
    return vmap_decomposed(inputs, axes);
  }
  auto s = stream();
  return x_batched_first(inputs, axes[0], inputs[0].dtype(),
                         std::make_shared<RoPE>(s, dims_, traditional_, base_, scale_, has_freqs_),
                         s);
}

// ---------------------------------------------------------------- SDPA
Arrays SDPA::decompose(const Arrays& in, mx::Stream s) const {
  std::optional<mx::array> mask, sinks;
  size_t i = 3;
  if (mask_mode_ == "array") mask = in[i++];
  if (has_sinks_) sinks = in[i++];
  return {mx::fast::scaled_dot_product_attention(in[0], in[1], in[2], scale_, mask_mode_,
                                                 mask, sinks, false, s)};
}

bool SDPA::is_equivalent(const mx::Primitive& other) const {
  if (!same_class(*this, other)) return false;
  const auto& o = static_cast<const SDPA&>(other);
  return scale_ == o.scale_ && mask_mode_ == o.mask_mode_ && has_sinks_ == o.has_sinks_;
}

// ---------------------------------------------------------------- constructors
// Each first builds MLX's own decomposition on the inputs as given and drops it:
// that validates the arguments with MLX's own errors and gives the output's shape
// and dtype exactly as MLX computes them.
namespace {

mx::Stream current_stream() { return mx::default_stream(mx::default_device()); }

// MLX's own function validates the arguments (its errors, its messages) and gives
// the output's shape and dtype, but it builds the whole decomposition to do so
// (tens of microseconds for rope). Arguments of a kind already validated skip it:
// the key holds everything the checks and the output depend on, except values.
struct Validated {
  std::unordered_map<std::string, std::pair<mx::Shape, mx::Dtype>> seen;
  std::mutex mu;
};
Validated& validated() {
  static auto* v = new Validated();
  return *v;
}
void key_add(std::string& k, const mx::array& a) {
  k += static_cast<char>('0' + static_cast<int>(a.dtype().val()));
  for (auto d : a.shape()) {
    k += std::to_string(d);
    k += ',';
  }
  k += ';';
}
void key_add(std::string& k, const std::optional<mx::array>& a) {
  if (a) key_add(k, *a); else k += "-;";
}
template <typename F>
std::pair<mx::Shape, mx::Dtype> output_of(const std::string& key, F&& reference) {
  auto& v = validated();
  {
    std::lock_guard<std::mutex> lock(v.mu);
    auto it = v.seen.find(key);
    if (it != v.seen.end()) return it->second;
  }
  mx::array ref = reference();   // throws MLX's own error for bad arguments
  std::pair<mx::Shape, mx::Dtype> r{ref.shape(), ref.dtype()};
  std::lock_guard<std::mutex> lock(v.mu);
  if (v.seen.size() > 4096) v.seen.clear();
  v.seen.emplace(key, r);
  return r;
}

mx::array make_rms_norm(const mx::array& x, std::optional<mx::array> w, float eps) {
  auto s = current_stream();
  std::string key = "rms";
  key_add(key, x);
  key_add(key, w);
  auto ref = output_of(key, [&] { return mx::fast::rms_norm(x, w, eps, s); });
  Arrays in{x};
  if (w) in.push_back(mx::astype(*w, ref.second, s));
  return mx::array(ref.first, ref.second,
                   std::make_shared<RMSNorm>(s, eps, w.has_value()), std::move(in));
}

mx::array make_layer_norm(const mx::array& x, std::optional<mx::array> w,
                          std::optional<mx::array> b, float eps) {
  auto s = current_stream();
  std::string key = "ln";
  key_add(key, x);
  key_add(key, w);
  key_add(key, b);
  auto ref = output_of(key, [&] { return mx::fast::layer_norm(x, w, b, eps, s); });
  Arrays in{x};
  if (w) in.push_back(mx::astype(*w, ref.second, s));
  if (b) in.push_back(mx::astype(*b, ref.second, s));
  return mx::array(ref.first, ref.second,
                   std::make_shared<LayerNorm>(s, eps, w.has_value(), b.has_value()),
                   std::move(in));
}

mx::array make_rope(const mx::array& x, int dims, bool traditional,
                    std::optional<float> base, float scale,
                    const std::variant<mx::array, int>& offset,
                    std::optional<mx::array> freqs) {
  auto s = current_stream();
  // a Python int becomes a 0-d int32 array (as MLX does), so that decode steps with
  // different offsets share one graph signature. The last one is kept: a decode step
  // ropes q and k of every layer at one offset, and one leaf instead of 2 per layer spares
  // the evaluator a small constant each (with the GIL held; never destroyed, so no MLX
  // array outlives MLX's allocator at exit)
  static auto* last = new std::optional<std::pair<int, mx::array>>();
  mx::array off = [&] {
    if (std::holds_alternative<mx::array>(offset)) return std::get<mx::array>(offset);
    const int o = std::get<int>(offset);
    if (!*last || (*last)->first != o) last->emplace(o, mx::array(o, mx::int32));
    return (*last)->second;
  }();
  std::string key = "rope" + std::to_string(dims) + (traditional ? "t" : "n") +
                    (base ? "b" : "-");
  key_add(key, x);
  key_add(key, off);
  key_add(key, freqs);
  auto ref = output_of(key, [&] {
    return mx::fast::rope(x, dims, traditional, base, scale, off, freqs, s);
  });
  if (off.dtype() != mx::int32) off = mx::astype(off, mx::int32, s);
  Arrays in{x, off};
  if (freqs) in.push_back(mx::astype(*freqs, mx::float32, s));
  float b = freqs ? 0.0f : *base;
  return mx::array(ref.first, ref.second,
                   std::make_shared<RoPE>(s, dims, traditional, b, scale, freqs.has_value()),
                   std::move(in));
}

mx::array make_dequantize(const mx::array& w, const mx::array& scales, const mx::array& biases,
                          int group_size, int bits, std::optional<mx::Dtype> dtype) {
  auto s = current_stream();
  std::string key = "dq" + std::to_string(group_size) + "," + std::to_string(bits) + "," +
                    (dtype ? std::to_string(static_cast<int>(dtype->val())) : std::string("-"));
  key_add(key, w);
  key_add(key, scales);
  key_add(key, biases);
  auto ref = output_of(key, [&] {
    return mx::dequantize(w, scales, biases, group_size, bits, "affine", std::nullopt, dtype, s);
  });
  return mx::array(ref.first, ref.second, std::make_shared<Dequantize>(s, group_size, bits, ref.second),
                   Arrays{w, scales, biases});
}

mx::array make_sdpa(const mx::array& q, const mx::array& k, const mx::array& v,
                    float scale, const std::string& mask_mode,
                    std::optional<mx::array> mask, std::optional<mx::array> sinks) {
  auto s = current_stream();
  std::string key = "sdpa" + mask_mode + ";";
  key_add(key, q);
  key_add(key, k);
  key_add(key, v);
  key_add(key, mask);
  key_add(key, sinks);
  auto ref = output_of(key, [&] {
    return mx::fast::scaled_dot_product_attention(q, k, v, scale, mask_mode, mask, sinks,
                                                  false, s);
  });
  auto ft = ref.second;
  Arrays in{mx::astype(q, ft, s), mx::astype(k, ft, s), mx::astype(v, ft, s)};
  std::string mode = mask_mode == "causal" ? "causal" : "";
  if (mask) {
    mode = "array";
    auto m = mask->dtype() == mx::bool_ ? *mask : mx::astype(*mask, ft, s);
    auto shape = q.shape();
    shape.back() = k.shape(-2);
    in.push_back(mx::broadcast_to(m, shape, s));
  }
  if (sinks) in.push_back(mx::astype(*sinks, ft, s));
  return mx::array(ref.first, ft,
                   std::make_shared<SDPA>(s, scale, mode, sinks.has_value()),
                   std::move(in));
}

}  // namespace

void register_fast(nb::module_& m) {
  m.def("fast_rms_norm", &make_rms_norm, "x"_a, "weight"_a.none(), "eps"_a,
        "mx.fast.rms_norm as one mlx_amd::RMSNorm node (default stream).");
  m.def("fast_layer_norm", &make_layer_norm, "x"_a, "weight"_a.none(), "bias"_a.none(),
        "eps"_a, "mx.fast.layer_norm as one mlx_amd::LayerNorm node.");
  m.def("fast_rope", &make_rope, "x"_a, "dims"_a, "traditional"_a, "base"_a.none(),
        "scale"_a, "offset"_a, "freqs"_a.none() = nb::none(),
        "mx.fast.rope as one mlx_amd::RoPE node.");
  m.def("fast_sdpa", &make_sdpa, "q"_a, "k"_a, "v"_a, "scale"_a, "mask_mode"_a,
        "mask"_a.none() = nb::none(), "sinks"_a.none() = nb::none(),
        "mx.fast.scaled_dot_product_attention as one mlx_amd::SDPA node.");
  m.def("dequantize", &make_dequantize, "w"_a, "scales"_a, "biases"_a, "group_size"_a, "bits"_a,
        "dtype"_a.none() = nb::none(), "mx.dequantize (affine) as one mlx_amd::Dequantize node.");
}

}  // namespace mlx_amd
