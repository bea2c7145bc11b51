// mlx_amd._bridge: shared declarations.
//
// The bridge only reads MLX's lazy graph and moves buffers around; it computes
// nothing itself (compute is the runtime's job, or MLX's own eval_cpu).
// It talks to libmlx through exported symbols and the inline code of the
// headers shipped in the mlx wheel; both are pinned to MLX 0.32.4.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>

#include "mlx/array.h"
#include "mlx/primitives.h"

namespace mlx_amd {

namespace mx = mlx::core;
namespace nb = nanobind;

// ---------------------------------------------------------------- buffers
// Layout of MLX's CPU allocator: an 8-byte size header right before the data.
constexpr size_t kHeader = sizeof(size_t);
constexpr uintptr_t kAlign = 256;

// Data wrapping caller memory at host_ptr (header written at host_ptr - 8).
// The deleter only queues `token`: it may run on MLX's worker threads, during
// interpreter shutdown, or after the GPU runtime is gone.
mx::allocator::Data make_foreign_data(uintptr_t host_ptr, size_t nbytes,
                                      int64_t token);
// Token of a buffer we attached, or -1 (keyed by Buffer::ptr()).
int64_t token_of(const mx::allocator::Buffer& b);
std::vector<int64_t> drain_freed();
// Whether drain_freed() has anything to return (one atomic load).
bool any_freed();
std::pair<int64_t, int64_t> live_buffers();

// Weak watch on MLX-allocated Data; expired() reports each dead key once.
int64_t watch_data(const std::shared_ptr<mx::allocator::Data>& d);
std::vector<int64_t> expired_keys();

// (key, data_ptr, offset_bytes, strides, data_size, buffer_nbytes,
//  row_contiguous, col_contiguous, contiguous, ours), or None without data.
nb::object buffer_info(const mx::array& a);

// ---------------------------------------------------------------- primitives
enum class ViewKind : uint8_t {
  None, Reshape, Transpose, Broadcast, Slice, ExpandDims, Squeeze,
  AsStrided, Share, Depends, CustomTransforms, Split, DtypeView, Contiguous,
};

struct PrimInfo {
  nb::str name;                              // interned, without mlx::core::
  std::string cname;                         // the same, for messages
  nb::object (*params)(mx::Primitive&);      // nullptr: no state() accessor
  ViewKind view;
  size_t type_hash;                          // typeid(...).hash_code(), for fingerprints
};

// Per dynamic type, cached by std::type_info address.
const PrimInfo& prim_info(mx::Primitive& p);
std::string demangled_name(mx::Primitive& p);

const char* dtype_name(mx::Dtype d);

// ---------------------------------------------------------------- views
// MLX's flag rules for a strided view (same as a slice of `in`).
void strided_view(const mx::array& in, mx::array& out,
                  const mx::Strides& strides, int64_t offset_elems);
// Compute the zero-copy result of a view primitive the way MLX's CPU backend
// does; false when MLX would copy (or refuse).
bool apply_view(ViewKind kind, mx::Primitive& prim,
                const std::vector<mx::array>& inputs,
                std::vector<mx::array>& outputs);

// ---------------------------------------------------------------- Python helpers
// Plain int tuple from any integer sequence (shape, strides, axes).
template <typename V>
nb::tuple int_tuple(const V& v) {
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(v.size()));
  if (!t) throw nb::python_error();
  Py_ssize_t i = 0;
  for (auto x : v) {
    PyObject* o = PyLong_FromLongLong(static_cast<long long>(x));
    if (!o) {
      Py_DECREF(t);
      throw nb::python_error();
    }
    PyTuple_SET_ITEM(t, i++, o);
  }
  return nb::steal<nb::tuple>(t);
}

// The lowest and highest element offsets, relative to an array's first element, that its
// shape and strides address (negative strides reach below it).
template <class Shape, class Strides>
inline std::pair<int64_t, int64_t> element_span(const Shape& shape, const Strides& strides) {
  int64_t lo = 0, hi = 0;
  for (size_t i = 0; i < strides.size(); ++i) {
    int64_t d = static_cast<int64_t>(strides[i]) * (static_cast<int64_t>(shape[i]) - 1);
    (d > 0 ? hi : lo) += d;
  }
  return {lo, hi};
}

// ---------------------------------------------------------------- launches
// One launch through the driver's entry point (hipModuleLaunchKernel / cuLaunchKernel, one
// prototype) by address, its argument struct as a blob through the vendors' "extra"
// mechanism: BUFFER_POINTER (1), BUFFER_SIZE (2), END (0 on CUDA, 3 on HIP: param_end).
inline int launch_blob(uintptr_t entry, intptr_t param_end, uintptr_t function,
                       const unsigned grid[3], const unsigned block[3], unsigned shared_mem,
                       uintptr_t stream, const char* data, size_t size) {
  using LaunchFn = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, void*, void**, void**);
  void* extra[5] = {reinterpret_cast<void*>(1), const_cast<char*>(data), reinterpret_cast<void*>(2),
                    &size, reinterpret_cast<void*>(param_end)};
  return reinterpret_cast<LaunchFn>(entry)(reinterpret_cast<void*>(function), grid[0], grid[1],
                                           grid[2], block[0], block[1], block[2], shared_mem,
                                           reinterpret_cast<void*>(stream), nullptr,
                                           size ? extra : nullptr);
}
// One kernel launch through the driver's launch entry point (by address); returns
// the driver's status.
int native_launch(uintptr_t entry, intptr_t param_end, uintptr_t function,
                  unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                  unsigned bz, unsigned shared_mem, uintptr_t stream,
                  const nb::bytes& args);
// A launch whose argument struct is pointers resolved here from `refs` (int64 triples:
// is_output, index, byte offset; empty: the inputs, then the first output) and `tail`:
// a first sighting's one-kernel node without packing in Python.
int launch_refs(uintptr_t entry, intptr_t param_end, uintptr_t function, unsigned gx,
                unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                unsigned shared_mem, uintptr_t stream, const nb::bytes& tail,
                const nb::bytes& refs, const std::vector<uint64_t>& in_ptrs,
                const std::vector<uint64_t>& out_ptrs);
// The same launch `count` times back to back (stops at a failure): (status, seconds).
std::pair<int, double> launch_repeat(uintptr_t entry, intptr_t param_end, uintptr_t function,
                                     unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                     unsigned by, unsigned bz, unsigned shared_mem,
                                     uintptr_t stream, const nb::bytes& args, int64_t count);

// ---------------------------------------------------------------- private access
// Use count of array::array_desc_ (private). Reached through the standard
// explicit-instantiation member-pointer technique, see graph.cpp.
long desc_use_count(const mx::array& a);

}  // namespace mlx_amd
