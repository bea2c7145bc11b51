// Primitive identification and parameters.
//
// typeid() of a polymorphic object reads the RTTI through the vtable, so it
// names classes that libmlx keeps hidden; dynamic_cast / typeid(Class) would
// need their typeinfo symbols, which are not exported. Once typeid has named
// the exact class, static_cast is valid and the inline state() accessor of the
// shipped header reads the parameters.
#include <cxxabi.h>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <variant>

#include "bridge.h"
#include "fast.h"
#include "mlx/fast_primitives.h"

namespace mlx_amd {

const char* dtype_name(mx::Dtype d) {
  using V = mx::Dtype::Val;
  switch (d.val()) {
    case V::bool_: return "bool";
    case V::uint8: return "uint8";
    case V::uint16: return "uint16";
    case V::uint32: return "uint32";
    case V::uint64: return "uint64";
    case V::int8: return "int8";
    case V::int16: return "int16";
    case V::int32: return "int32";
    case V::int64: return "int64";
    case V::float16: return "float16";
    case V::float32: return "float32";
    case V::float64: return "float64";
    case V::bfloat16: return "bfloat16";
    case V::complex64: return "complex64";
  }
  return "unknown";
}

namespace {

template <typename T> struct is_seq : std::false_type {};
template <typename T, typename A> struct is_seq<std::vector<T, A>> : std::true_type {};
template <typename T, size_t N, typename A>
struct is_seq<mx::SmallVector<T, N, A>> : std::true_type {};
template <typename T> struct is_tuple_like : std::false_type {};
template <typename A, typename B> struct is_tuple_like<std::pair<A, B>> : std::true_type {};
template <typename... A> struct is_tuple_like<std::tuple<A...>> : std::true_type {};
template <typename T> struct is_optional : std::false_type {};
template <typename T> struct is_optional<std::optional<T>> : std::true_type {};
template <typename T> struct is_variant : std::false_type {};
template <typename... A> struct is_variant<std::variant<A...>> : std::true_type {};

// Parameters as plain Python values: Dtype as its MLX name, sequences and
// tuples as tuples, enums as ints, nullptr/monostate (unused slots of the
// fast:: primitives) as None.
template <typename T>
nb::object to_py(const T& v) {
  using U = std::decay_t<T>;
  if constexpr (std::is_same_v<U, bool>) {
    return nb::bool_(v);
  } else if constexpr (std::is_enum_v<U>) {
    return nb::int_(static_cast<long long>(v));
  } else if constexpr (std::is_integral_v<U>) {
    return nb::int_(v);
  } else if constexpr (std::is_floating_point_v<U>) {
    return nb::float_(static_cast<double>(v));
  } else if constexpr (std::is_same_v<U, mx::Dtype>) {
    return nb::str(dtype_name(v));
  } else if constexpr (std::is_same_v<U, std::string>) {
    return nb::str(v.c_str(), v.size());
  } else if constexpr (std::is_same_v<U, std::nullptr_t> ||
                       std::is_same_v<U, std::monostate>) {
    return nb::none();
  } else if constexpr (is_seq<U>::value) {
    if constexpr (std::is_integral_v<typename U::value_type> &&
                  !std::is_same_v<typename U::value_type, bool>) {
      return int_tuple(v);
    } else {
      nb::list l;
      for (const auto& x : v) l.append(to_py(x));
      return nb::tuple(l);
    }
  } else if constexpr (is_tuple_like<U>::value) {
    return std::apply(
        [](const auto&... xs) { return nb::object(nb::make_tuple(to_py(xs)...)); }, v);
  } else if constexpr (is_optional<U>::value) {
    return v ? to_py(*v) : nb::none();
  } else if constexpr (is_variant<U>::value) {
    return std::visit([](const auto& x) { return to_py(x); }, v);
  } else {
    static_assert(sizeof(U) == 0, "no Python conversion for this parameter type");
  }
}

template <typename P>
nb::object params_of(mx::Primitive& p) {
  return to_py(static_cast<P&>(p).state());
}

struct Entry {
  nb::object (*params)(mx::Primitive&);
  ViewKind view;
};

}  // namespace

// Compiled: its fused tape as plain data (src/bridge/compiled.cpp).
nb::object compiled_params(mx::Primitive& p);

namespace {

// Every class of primitives.h / fast_primitives.h with a state() accessor,
// plus the view primitives without one. Keyed by the demangled name without
// "mlx::core::". (fast::CustomKernel is Metal-only and left out.)
const std::unordered_map<std::string, Entry>& table() {
  static const auto* t = [] {
    auto* m = new std::unordered_map<std::string, Entry>();
#define P(C) (*m)[#C] = Entry{&params_of<mx::C>, ViewKind::None};
#define PV(C, K) (*m)[#C] = Entry{&params_of<mx::C>, ViewKind::K};
#define V(C, K) (*m)[#C] = Entry{nullptr, ViewKind::K};
    P(AddMM) P(Arange) P(ArgPartition) P(ArgReduce) P(ArgSort) P(AsType)
    P(BitwiseBinary) P(BlockMaskedMM) P(GatherMM) P(Concatenate)
    P(Convolution) P(Equal) P(FFT) P(Gather) P(GatherAxis) P(Hadamard) P(Log)
    P(NumberOfElements) P(Pad) P(Partition) P(QuantizedMatmul) P(QQMatmul)
    P(GatherQMM) P(GatherQQMM) P(RandomBits) P(Reduce) P(Scan) P(Scatter)
    P(ScatterAxis) P(SliceUpdate) P(DynamicSlice) P(DynamicSliceUpdate)
    P(Softmax) P(SearchSorted) P(Sort) P(Sqrt) P(SVD) P(Inverse) P(Cholesky)
    P(Eig) P(Eigh)
    P(fast::RMSNorm) P(fast::RMSNormVJP) P(fast::CrossEntropy)
    P(fast::CrossEntropyVJP) P(fast::LayerNorm) P(fast::LayerNormVJP)
    P(fast::RoPE) P(fast::ScaledDotProductAttention)
    P(fast::ScaledDotProductAttentionVJP) P(fast::ConvertFP8)
    P(fast::GatedDeltaUpdate) P(fast::GatedDeltaUpdateVJP) P(fast::Quantize)
    PV(Reshape, Reshape) PV(Flatten, Reshape) PV(Unflatten, Reshape)
    PV(Transpose, Transpose) PV(Broadcast, Broadcast)
    PV(BroadcastAxes, Broadcast) PV(Slice, Slice) PV(ExpandDims, ExpandDims)
    PV(Squeeze, Squeeze) PV(AsStrided, AsStrided) PV(Split, Split)
    PV(View, DtypeView)
    V(Copy, Share) V(StopGradient, Share) V(Depends, Depends)
    V(CustomTransforms, CustomTransforms) V(Contiguous, Contiguous)
    (*m)["Compiled"] = Entry{&compiled_params, ViewKind::None};
    // ours (fast.h): mx.fast.* while mlx_amd is enabled
    (*m)["mlx_amd::RMSNorm"] = Entry{&params_of<RMSNorm>, ViewKind::None};
    (*m)["mlx_amd::LayerNorm"] = Entry{&params_of<LayerNorm>, ViewKind::None};
    (*m)["mlx_amd::RoPE"] = Entry{&params_of<RoPE>, ViewKind::None};
    (*m)["mlx_amd::SDPA"] = Entry{&params_of<SDPA>, ViewKind::None};
    (*m)["mlx_amd::Dequantize"] = Entry{&params_of<Dequantize>, ViewKind::None};
#undef P
#undef PV
#undef V
    return m;
  }();
  return *t;
}

}  // namespace

std::string demangled_name(mx::Primitive& p) {
  const char* mangled = typeid(p).name();
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string out = (status == 0 && d) ? std::string(d) : std::string(mangled);
  std::free(d);
  return out;
}

const PrimInfo& prim_info(mx::Primitive& p) {
  // Only touched with the GIL held (Graph construction), so no extra lock.
  static auto* cache = new std::unordered_map<const std::type_info*, PrimInfo>();
  // A direct-mapped front for the map: a graph walk asks once per node, mostly for the
  // same few classes, and the map's lookup (a division by its bucket count) was a tenth
  // of the walk. Entries point into the map, whose elements never move or die.
  constexpr size_t kFront = 64;
  static const std::type_info* front_key[kFront] = {};
  static const PrimInfo* front_val[kFront] = {};
  const std::type_info* ti = &typeid(p);
  size_t f = (reinterpret_cast<uintptr_t>(ti) >> 4) % kFront;
  if (front_key[f] == ti) return *front_val[f];
  auto it = cache->find(ti);
  if (it != cache->end()) {
    front_key[f] = ti;
    front_val[f] = &it->second;
    return it->second;
  }
  std::string name = demangled_name(p);
  const std::string ns = "mlx::core::";
  if (name.rfind(ns, 0) == 0) {
    name = name.substr(ns.size());
  }
  PyObject* s = PyUnicode_FromStringAndSize(name.data(), name.size());
  if (!s) throw nb::python_error();
  PyUnicode_InternInPlace(&s);
  PrimInfo info{nb::steal<nb::str>(s), name, nullptr, ViewKind::None, ti->hash_code()};
  auto e = table().find(name);
  if (e != table().end()) {
    info.params = e->second.params;
    info.view = e->second.view;
  }
  // The cache is never freed, so the interned names outlive every Graph.
  return cache->emplace(ti, std::move(info)).first->second;
}

}  // namespace mlx_amd
