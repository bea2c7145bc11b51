// Zero-copy views with the layout (strides, offset, data_size, flags) that
// MLX's own CPU backend gives the same primitive, so that kernels, MLX's
// fallback and MLX's later reads see exactly what plain MLX would produce.
// check_contiguity is inline in the shipped backend/common/utils.h; the
// non-inline helpers (prepare_reshape, ...) are not exported, so their rules
// are re-implemented here.
#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

#include "bridge.h"
#include "mlx/allocator.h"
#include "mlx/backend/common/utils.h"

namespace mlx_amd {

namespace {

// MLX allocates an empty buffer for empty results of broadcast and slice.
void empty_result(mx::array& out) {
  out.set_data(mx::allocator::malloc(0));
}

// Merge neighbouring axes that walk memory as one (size-1 axes skipped),
// never making one axis longer than INT32_MAX elements, like MLX does.
void collapse(const mx::array& in, mx::Shape& shape, mx::Strides& strides) {
  for (size_t i = 0; i < in.ndim(); ++i) {
    auto n = in.shape(i);
    auto st = in.strides()[i];
    if (n == 1) continue;
    if (!shape.empty() && st * n == strides.back() &&
        static_cast<int64_t>(shape.back()) * n <= INT32_MAX) {
      shape.back() *= n;
      strides.back() = st;
    } else {
      shape.push_back(n);
      strides.push_back(st);
    }
  }
  if (shape.empty()) {
    shape.push_back(1);
    strides.push_back(1);
  }
}

bool reshape_view(const mx::array& in, mx::array& out) {
  mx::Strides st;
  if (in.size() == 0 || in.flags().row_contiguous) {
    st = out.strides();  // row-major strides of the output shape
  } else if (in.ndim() == 0) {
    st = mx::Strides(out.ndim(), 0);
  } else {
    // Each output axis must be carved out of one collapsed input axis;
    // otherwise the input's strides cannot express the new shape: copy.
    mx::Shape cs;
    mx::Strides cst;
    collapse(in, cs, cst);
    size_t j = 0;
    for (size_t i = 0; i < out.ndim(); ++i) {
      auto n = out.shape(i);
      if (j < cs.size() && cs[j] % n == 0) {
        cs[j] /= n;
        st.push_back(static_cast<int64_t>(cs[j]) * cst[j]);
        if (cs[j] == 1) ++j;
      } else if (n == 1 && !st.empty()) {
        st.push_back(st.back());
      } else {
        return false;
      }
    }
  }
  auto flags = in.flags();
  if (flags.row_contiguous) {
    // A row-contiguous reshape into a vector shape is col-contiguous too.
    size_t mx_dim = out.ndim() ? *std::max_element(out.shape().begin(),
                                                  out.shape().end())
                               : 1;
    flags.col_contiguous = out.size() <= 1 || out.size() == mx_dim;
  } else {
    // Otherwise the new strides decide (as MLX 0.32.4 does, checked against
    // it by tests/bridge/test_views.py).
    auto [_, rc, cc] = mx::check_contiguity(out.shape(), st);
    flags.row_contiguous = rc;
    flags.col_contiguous = cc;
  }
  out.copy_shared_buffer(in, st, flags, in.data_size());
  return true;
}

void transpose_view(const mx::array& in, mx::array& out,
                    const std::vector<int>& axes) {
  mx::Strides st(out.ndim(), 0);
  for (size_t i = 0; i < axes.size(); ++i) st[i] = in.strides()[axes[i]];
  auto flags = in.flags();
  // Only a gap-free, unbroadcast input keeps exact row/col information.
  if (flags.contiguous && in.data_size() == in.size()) {
    auto [_, rc, cc] = mx::check_contiguity(out.shape(), st);
    flags.row_contiguous = rc;
    flags.col_contiguous = cc;
  }
  out.copy_shared_buffer(in, st, flags, in.data_size());
}

void broadcast_view(const mx::array& in, mx::array& out) {
  if (out.size() == 0) {
    empty_result(out);
    return;
  }
  mx::Strides st(out.ndim(), 0);
  int diff = static_cast<int>(out.ndim()) - static_cast<int>(in.ndim());
  for (int i = static_cast<int>(in.ndim()) - 1; i >= 0; --i) {
    st[i + diff] = in.shape(i) == 1 ? 0 : in.strides()[i];
  }
  auto flags = in.flags();
  if (out.size() > in.size()) {
    flags.row_contiguous = flags.col_contiguous = false;
  }
  out.copy_shared_buffer(in, st, flags, in.data_size());
}

void slice_view(const mx::array& in, mx::array& out, const mx::Shape& start,
                const mx::Shape& step) {
  if (out.size() == 0) {
    empty_result(out);
    return;
  }
  int64_t offset = 0;
  mx::Strides st(in.ndim(), 0);
  for (size_t i = 0; i < in.ndim(); ++i) {
    offset += static_cast<int64_t>(start[i]) * in.strides()[i];
    st[i] = in.strides()[i] * step[i];
  }
  strided_view(in, out, st, offset);
}

void expand_dims_view(const mx::array& in, mx::array& out,
                      const std::vector<int>& axes) {
  auto st = in.strides();
  for (auto ax : axes) st.insert(st.begin() + ax, 1);
  out.copy_shared_buffer(in, st, in.flags(), in.data_size());
}

void squeeze_view(const mx::array& in, mx::array& out,
                  const std::vector<int>& axes) {
  mx::Strides st;
  size_t j = 0;
  for (size_t i = 0; i < in.ndim(); ++i) {
    if (j < axes.size() && static_cast<int>(i) == axes[j]) {
      ++j;
    } else {
      st.push_back(in.strides()[i]);
    }
  }
  out.copy_shared_buffer(in, st, in.flags(), in.data_size());
}

bool as_strided_view(const mx::array& in, mx::array& out, const mx::Strides& st,
                     size_t offset) {
  // MLX's as_strided feeds a flattened (row-contiguous) input; anything else
  // is left to eval_cpu, which does what MLX does with it.
  if (!in.flags().row_contiguous) return false;
  strided_view(in, out, st, static_cast<int64_t>(offset));
  return true;
}

void split_views(const mx::array& in, std::vector<mx::array>& outs,
                 const mx::Shape& indices, int axis) {
  // Each piece is a slice along `axis` with the input's strides.
  for (size_t i = 0; i < outs.size(); ++i) {
    int64_t start = i == 0 ? 0 : indices[i - 1];
    strided_view(in, outs[i], in.strides(), start * in.strides()[axis]);
  }
}

bool dtype_view(const mx::array& in, mx::array& out) {
  size_t ib = in.itemsize(), ob = out.itemsize();
  bool last_unit = in.ndim() > 0 && in.strides().back() == 1;
  if (!(ib == ob || (ob < ib && last_unit) || in.flags().row_contiguous)) {
    return false;  // MLX copies into a fresh buffer here
  }
  auto st = in.strides();
  for (int i = 0; i + 1 < static_cast<int>(st.size()); ++i) {
    st[i] = st[i] * static_cast<int64_t>(ib) / static_cast<int64_t>(ob);
  }
  if (ob < ib && !st.empty()) st.back() = 1;
  auto flags = in.flags();
  if (ib != ob) {
    auto [_, rc, cc] = mx::check_contiguity(out.shape(), st);
    flags.row_contiguous = rc;
    flags.col_contiguous = cc;
  }
  out.copy_shared_buffer(in, st, flags, in.data_size() * ib / ob);
  return true;
}

}  // namespace

void strided_view(const mx::array& in, mx::array& out,
                  const mx::Strides& st, int64_t offset_elems) {
  // data_size: the span of elements the view addresses.
  auto [lo, hi] = element_span(out.shape(), st);
  size_t data_size = out.size() == 0 ? 0 : static_cast<size_t>(hi - lo + 1);
  auto [nb_size, rc, cc] = mx::check_contiguity(out.shape(), st);
  auto flags = in.flags();
  flags.row_contiguous = rc;
  flags.col_contiguous = cc;
  flags.contiguous = rc || cc || (flags.contiguous && nb_size == data_size);
  out.copy_shared_buffer(in, st, flags, data_size, offset_elems);
}

bool apply_view(ViewKind kind, mx::Primitive& prim,
                const std::vector<mx::array>& inputs,
                std::vector<mx::array>& outputs) {
  const auto& in = inputs.at(0);
  auto& out = outputs.at(0);
  switch (kind) {
    case ViewKind::None:
      return false;
    case ViewKind::Reshape:
      return reshape_view(in, out);
    case ViewKind::Transpose:
      transpose_view(in, out, static_cast<mx::Transpose&>(prim).state());
      return true;
    case ViewKind::Broadcast:
      broadcast_view(in, out);
      return true;
    case ViewKind::Slice: {
      auto [start, end, step] = static_cast<mx::Slice&>(prim).state();
      slice_view(in, out, start, step);
      return true;
    }
    case ViewKind::ExpandDims:
      expand_dims_view(in, out, static_cast<mx::ExpandDims&>(prim).state());
      return true;
    case ViewKind::Squeeze:
      squeeze_view(in, out, static_cast<mx::Squeeze&>(prim).state());
      return true;
    case ViewKind::AsStrided: {
      auto [shape, st, off] = static_cast<mx::AsStrided&>(prim).state();
      return as_strided_view(in, out, st, off);
    }
    case ViewKind::Share:  // Copy, StopGradient: MLX shares the buffer
      out.copy_shared_buffer(in);
      return true;
    case ViewKind::Depends:
      for (size_t i = 0; i < outputs.size(); ++i) {
        outputs[i].copy_shared_buffer(inputs.at(i));
      }
      return true;
    case ViewKind::CustomTransforms: {
      // The last len(outputs) inputs are the forward results.
      size_t first = inputs.size() - outputs.size();
      for (size_t i = 0; i < outputs.size(); ++i) {
        outputs[i].copy_shared_buffer(inputs.at(first + i));
      }
      return true;
    }
    case ViewKind::Split: {
      auto [indices, axis] = static_cast<mx::Split&>(prim).state();
      split_views(in, outputs, indices, axis);
      return true;
    }
    case ViewKind::DtypeView:
      return dtype_view(in, out);
    case ViewKind::Contiguous:
      // Row-contiguous input without much slack: MLX shares it. (The
      // col-major variant depends on a private flag: left to the copy path.)
      if (in.flags().row_contiguous &&
          in.buffer_size() <= out.nbytes() + 16384) {
        out.copy_shared_buffer(in);
        return true;
      }
      return false;
  }
  return false;
}

}  // namespace mlx_amd
