// Graph walk and per-node services. See graph.h and bridge.py for the API.
#include "graph.h"
#include "flatmap.h"

#include <nanobind/stl/vector.h>   // view_node returns drain_freed()'s tokens

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "mlx/backend/cpu/encoder.h"
#include "mlx/stream.h"

namespace mlx_amd {

// ---------------------------------------------------------------------------
// array::array_desc_ is private and we need its use count for donation. An
// explicit instantiation may name a private member (access checking does not
// apply to its template arguments); the friend it defines hands the member
// pointer out. Legal C++, and independent of the class layout.
namespace {
struct DescTag {};
template <auto M>
struct DescAccess {
  friend auto desc_member(DescTag) { return M; }
};
template struct DescAccess<&mx::array::array_desc_>;
auto desc_member(DescTag);
}  // namespace

long desc_use_count(const mx::array& a) {
  return (a.*desc_member(DescTag{})).use_count();
}

namespace {

nb::object dtype_str(mx::Dtype d) {
  // Interned once; never freed (like MLX's own dtype objects).
  static PyObject* names[16] = {};
  auto i = static_cast<size_t>(d.val());
  if (!names[i]) {
    PyObject* s = PyUnicode_InternFromString(dtype_name(d));
    if (!s) throw nb::python_error();
    names[i] = s;
  }
  return nb::borrow(names[i]);
}

std::string describe(const mx::array& a) {
  std::string s = "(shape (";
  for (size_t i = 0; i < a.ndim(); ++i) {
    s += (i ? ", " : "") + std::to_string(a.shape(i));
  }
  return s + "), " + dtype_name(a.dtype()) + ")";
}

[[noreturn]] void value_error(const std::string& msg) {
  throw nb::value_error(msg.c_str());
}

}  // namespace

// ---------------------------------------------------------------------------
uint32_t Graph::add_slot(const mx::array& a, int32_t producer) {
  slots_.emplace_back();
  slots_.back().arr.emplace(a);
  slots_.back().producer = producer;
  return static_cast<uint32_t>(slots_.size() - 1);
}

// Recent walks' sizes, a high-water mark that decays by 1/8 a walk: a repeated step (a
// decode step is ~780 nodes and ~960 slots) reserves what it needs at once, without a
// rehash or a move of the slots and nodes on the way, also when small walks come between
// its steps (mlx-lm reads each token: a walk of a few slots after every step; following the
// last size alone made every step's table grow from 72 slots again). After a huge graph the
// hint shrinks back within a few dozen small walks. Only a hint, so relaxed.
static std::atomic<size_t> last_slots{1024}, last_nodes{512};
static void remember(std::atomic<size_t>& last, size_t now) {
  size_t was = last.load(std::memory_order_relaxed);
  last.store(std::max(now, was - was / 8), std::memory_order_relaxed);
}

// The slot and node vectors of the last released graph of this thread, kept for the
// next walk (empty, with their capacity): see Scratch in flatmap.h.
std::vector<Graph::Slot>& Graph::spare_slots() {
  thread_local std::vector<Slot> v;
  return v;
}
std::vector<Graph::Node>& Graph::spare_nodes() {
  thread_local std::vector<Node> v;
  return v;
}
template <class T>
static void recycle_take(std::vector<T>& mine, std::vector<T>& spare) {
  mine.swap(spare);   // mine is a new, empty vector: take the spare's storage
}
template <class T>
static void recycle_give(std::vector<T>& mine, std::vector<T>& spare) {
  if (mine.capacity() > spare.capacity()) mine.swap(spare);
  std::vector<T>().swap(mine);   // the smaller of the two is freed
}

Graph::Graph(const std::vector<mx::array>& outputs, bool async) {
  auto hint = [](const std::atomic<size_t>& last) {
    // no low ceiling: past it a 20k-node step grew its vectors by copying (Slot's move is
    // not noexcept) and freed the old buffers, each free of a large chunk consolidating
    // malloc's fast bins: steady replay cost 3.7 us/node at 20k nodes against 1.7 at 2k
    return std::clamp<size_t>(last.load(std::memory_order_relaxed), 64, size_t(1) << 20) * 9 / 8;
  };
  const size_t hint_slots = hint(last_slots);
  Scratch<FlatMap<uint32_t>> ids_scratch;
  FlatMap<uint32_t>& ids = ids_scratch.get();
  ids.reset(hint_slots);
  recycle_take(slots_, spare_slots());
  recycle_take(nodes_, spare_nodes());
  slots_.reserve(hint_slots);
  nodes_.reserve(hint(last_nodes));
  // (slot of the array that carries the primitive, next input to visit)
  std::vector<std::pair<uint32_t, size_t>> stack;

  auto visit = [&](const mx::array& a) -> uint32_t {
    if (const uint32_t* known = ids.find(a.id())) return *known;
    if (a.status() != mx::array::Status::unscheduled) {
      // Evaluated by MLX (or by us earlier): a leaf. It may still be in
      // flight on MLX's CPU stream; wait until its data is readable.
      uint32_t s = add_slot(a, -1);
      ids.emplace(a.id(), s);
      // `available` (weights, earlier results: nearly every leaf) has nothing to wait
      // for, and array::wait() would do nothing: skip releasing the GIL for it
      if (a.status() != mx::array::Status::available) {
        try {
          // without the GIL: the producer may need it (see eval_cpu)
          nb::gil_scoped_release no_gil;
          slots_[s].arr->wait();
        } catch (const std::exception& e) {
          throw std::runtime_error(
              std::string("Graph: waiting for an evaluated input failed: ") +
              e.what());
        }
      }
      if (!slots_[s].arr->data_shared_ptr()) {
        value_error("Graph: evaluated array " + describe(a) + " has no data");
      }
      return s;
    }
    // MLX's own refusals, with its messages, so programs see the same errors.
    if (async && a.is_tracer()) {
      throw std::invalid_argument(
          "[async_eval] Not allowed inside a graph transformation.");
    }
    if (!a.has_primitive()) {
      if (a.is_tracer()) {
        throw std::invalid_argument(
            "[eval] Attempting to eval an array during function "
            "transformations like compile or vmap is not allowed.");
      }
      throw std::runtime_error(
          "[eval] Attempting to eval an array without a primitive " +
          describe(a) + ". If you are compiling a function, make sure all "
          "the inputs and outputs are captured.");
    }
    // All outputs of the primitive get their slots now, so that siblings met
    // later are known; the node itself is emitted in post-order.
    uint32_t self = 0;
    if (a.siblings().empty()) {   // the usual case: no outputs() vector to build
      self = add_slot(a, -2);
      ids.emplace(a.id(), self);
    } else {
      for (const auto& o : a.outputs()) {
        uint32_t s = add_slot(o, -2);
        ids.emplace(o.id(), s);
        if (o.id() == a.id()) self = s;
      }
    }
    stack.emplace_back(self, 0);
    return self;
  };

  for (const auto& o : outputs) {
    uint32_t s = visit(o);
    slots_[s].output = true;
    outputs_.push_back(s);  // one per given output, duplicates included
    while (!stack.empty()) {
      auto& [sid, next] = stack.back();
      const auto& ins = slots_[sid].arr->inputs();
      if (next < ins.size()) {
        visit(ins[next++]);  // may grow `stack`; the reference is re-read
        continue;
      }
      const mx::array& a = *slots_[sid].arr;
      Node node;
      node.prim = &prim_info(a.primitive());
      node.desc_addr = &a.shape();   // the descriptor's first member
      node.prim_addr = &a.primitive();
      node.inputs.reserve(ins.size());
      for (const auto& in : ins) node.inputs.push_back(ids.at(in.id()));
      if (a.siblings().empty()) {
        node.outputs.push_back(sid);
      } else {
        for (const auto& out : a.outputs()) node.outputs.push_back(ids.at(out.id()));
      }
      auto n = static_cast<uint32_t>(nodes_.size());
      for (auto s_out : node.outputs) slots_[s_out].producer = n;
      // Each output's descriptor keeps its own copy of the input list.
      auto copies = static_cast<uint32_t>(node.outputs.size());
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        auto& sl = slots_[node.inputs[i]];
        sl.held_refs += copies;
        if (std::find(node.inputs.begin(), node.inputs.begin() + i,
                      node.inputs[i]) == node.inputs.begin() + i) {
          sl.consumers.push_back(n);
          sl.unfinished_uses += 1;
        }
      }
      nodes_.push_back(std::move(node));
      stack.pop_back();
    }
  }

  // Structure fingerprint (FNV-1a): primitive classes and topology.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  mix(slots_.size());
  for (auto& node : nodes_) {
    mix(node.prim->type_hash);   // cached per type: no second visit of MLX's arrays
    mix(node.inputs.size());
    for (auto s : node.inputs) mix(s);
    mix(node.outputs.size());
  }
  for (auto s : outputs_) mix(s);
  fingerprint_ = h;
  remember(last_slots, slots_.size());
  remember(last_nodes, nodes_.size());
}

// Python views of the table, built on first use (a replayed graph never needs
// them). Thousands of fresh tuples would trigger the cyclic GC for nothing.
nb::tuple Graph::node_row(const Node& node) {
  const mx::array& a = *slots_[node.outputs[0]].arr;
  nb::object params = node.prim->params ? node.prim->params(a.primitive()) : nb::none();
  return nb::make_tuple(node.prim->name, params, int_tuple(node.inputs),
                        int_tuple(node.outputs));
}

nb::tuple Graph::slot_row(const Slot& sl) {
  const mx::array& a = *sl.arr;
  return nb::make_tuple(int_tuple(a.shape()), dtype_str(a.dtype()),
                        nb::bool_(sl.producer < 0));
}

namespace {
// The tables are thousands of tuples and hold no cycles: no collector passes over them.
struct GcPause {
  int was = PyGC_Disable();
  ~GcPause() {
    if (was) PyGC_Enable();
  }
};
}  // namespace

// Built once, before the walk starts (how they are used): rows of nodes already finished
// (detached) and of released slots cannot be rebuilt. Separate, so a first sighting that
// reads slot rows one by one (meta) pays for the node table only.
void Graph::build_nodes() {
  if (nodes_cache_.is_valid()) return;
  GcPause gc_pause;
  nb::list nl;
  for (auto& node : nodes_) {
    if (node.detached) {
      nl.append(nb::none());
      continue;
    }
    nl.append(node_row(node));
  }
  nodes_cache_ = std::move(nl);
}

void Graph::build_arrays() {
  if (arrays_cache_.is_valid()) return;
  GcPause gc_pause;
  nb::list al;
  for (auto& sl : slots_) {
    al.append(sl.arr ? slot_row(sl) : nb::object(nb::none()));
  }
  arrays_cache_ = std::move(al);
}

nb::tuple Graph::node(int64_t n) {
  if (nodes_cache_.is_valid()) return nb::borrow<nb::tuple>(nb::borrow<nb::list>(nodes_cache_)[n]);
  return node_row(node_at(n, "node"));
}

nb::tuple Graph::meta(int64_t s) {
  if (arrays_cache_.is_valid()) return nb::borrow<nb::tuple>(nb::borrow<nb::list>(arrays_cache_)[s]);
  auto& sl = slot_at(s, "meta");
  if (!sl.arr) value_error("meta: slot " + std::to_string(s) + " was released");
  return slot_row(sl);
}

nb::list Graph::nodes() {
  build_nodes();
  return nb::borrow<nb::list>(nodes_cache_);
}
nb::list Graph::arrays() {
  build_arrays();
  return nb::borrow<nb::list>(arrays_cache_);
}
nb::tuple Graph::outputs() const { return int_tuple(outputs_); }

// ---------------------------------------------------------------------------
Graph::Slot& Graph::slot_at(int64_t s, const char* what) {
  if (s < 0 || s >= static_cast<int64_t>(slots_.size())) {
    throw nb::index_error((std::string(what) + ": slot " + std::to_string(s) +
                           " out of range (graph has " +
                           std::to_string(slots_.size()) + " slots)")
                              .c_str());
  }
  return slots_[s];
}

mx::array& Graph::array_at(int64_t s, const char* what) {
  auto& sl = slot_at(s, what);
  if (!sl.arr) {
    value_error(std::string(what) + ": slot " + std::to_string(s) +
                " was released (its last consumer finished, or release())");
  }
  return *sl.arr;
}

Graph::Node& Graph::node_at(int64_t n, const char* what) {
  if (n < 0 || n >= static_cast<int64_t>(nodes_.size())) {
    throw nb::index_error((std::string(what) + ": node " + std::to_string(n) +
                           " out of range (graph has " +
                           std::to_string(nodes_.size()) + " nodes)")
                              .c_str());
  }
  auto& node = nodes_[n];
  if (node.finished) {
    value_error(std::string(what) + ": node " + std::to_string(n) + " (" +
                node.prim->cname + ") is already finished");
  }
  return node;
}

mx::array& Graph::writable(int64_t s, const char* what) {
  auto& a = array_at(s, what);
  auto p = slots_[s].producer;
  // Leaves and finished outputs are visible to MLX and the user: never
  // replace their data.
  if (p < 0 || nodes_[p].finished) {
    value_error(std::string(what) + ": slot " + std::to_string(s) +
                (p < 0 ? " is a leaf" : " belongs to a finished node") +
                "; its data cannot be replaced");
  }
  return a;
}

void Graph::inputs_ready(const Node& node, int64_t n, const char* what) {
  for (auto s : node.inputs) {
    if (!array_at(s, what).data_shared_ptr()) {
      value_error(std::string(what) + ": input slot " + std::to_string(s) +
                  " of node " + std::to_string(n) + " (" +
                  node.prim->cname +
                  ") has no data yet; evaluate its producer first");
    }
  }
}

void Graph::drop(uint32_t s) { slots_[s].arr.reset(); }

// ---------------------------------------------------------------------------
nb::object Graph::info(int64_t slot) {
  return buffer_info(array_at(slot, "info"));
}

nb::object Graph::node_key(int64_t n) {
  auto& node = node_at(n, "node_key");
  std::vector<int64_t> w;
  w.reserve(2 + 24 * (node.inputs.size() + node.outputs.size()));
  w.push_back(static_cast<int64_t>(node.inputs.size()));
  w.push_back(static_cast<int64_t>(node.outputs.size()));
  nb::list infos, itemsizes;
  auto shape_of = [&](const mx::array& a, const Slot& sl) {
    w.push_back(static_cast<int64_t>(a.ndim()));
    w.push_back(static_cast<int64_t>(a.dtype().val()));
    w.push_back(sl.producer < 0);
    for (auto d : a.shape()) w.push_back(d);
  };
  for (auto s : node.inputs) {
    const Slot& sl = slots_[s];
    if (!sl.arr) return nb::none();
    const mx::array& a = *sl.arr;
    nb::object inf = buffer_info(a);
    if (inf.is_none()) return nb::none();   // not computed (yet): the node cannot run here
    infos.append(inf);
    itemsizes.append(a.itemsize());
    shape_of(a, sl);
    for (auto st : a.strides()) w.push_back(st);
    const auto& f = a.flags();
    w.push_back(static_cast<int64_t>(a.data_size()));
    w.push_back((f.row_contiguous ? 1 : 0) | (f.contiguous ? 2 : 0));
  }
  for (auto s : node.outputs) shape_of(*slots_[s].arr, slots_[s]);
  return nb::make_tuple(nb::bytes(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(int64_t)),
                        std::move(infos), std::move(itemsizes));
}

nb::object Graph::view_node(int64_t n, Program* prog) {
  if (!try_view(n)) return nb::bool_(false);
  if (prog != nullptr) record(*prog, n, 1);
  finish(n);
  if (any_freed()) return nb::cast(drain_freed());
  return nb::bool_(true);
}

nb::tuple Graph::run_views(int64_t from, Program* prog) {
  if (from < 0 || from > static_cast<int64_t>(nodes_.size())) node_at(from, "run_views");
  auto n = static_cast<size_t>(from);
  for (; n < nodes_.size(); ++n) {
    auto& node = nodes_[n];
    if (node.finished || node.prim->view == ViewKind::None || !try_view(static_cast<int64_t>(n))) break;
    if (prog != nullptr) record(*prog, static_cast<int64_t>(n), 1);
    finish(static_cast<int64_t>(n));
    // a run is mostly one or two primitive kinds: the last entries are the likely ones
    auto it = std::find_if(view_counts_.rbegin(), view_counts_.rend(),
                           [&](const auto& e) { return e.first == node.prim; });
    if (it != view_counts_.rend()) {
      ++it->second;
    } else {
      view_counts_.emplace_back(node.prim, 1);
    }
  }
  nb::object freed = any_freed() ? nb::cast(drain_freed()) : nb::none();
  return nb::make_tuple(static_cast<int64_t>(n), std::move(freed));
}

nb::list Graph::view_counts() {
  nb::list out;
  for (auto& [prim, c] : view_counts_) out.append(nb::make_tuple(prim->name, c));
  view_counts_.clear();
  return out;
}

void Graph::attach(int64_t slot, uintptr_t host_ptr, int64_t token) {
  auto& a = writable(slot, "attach");
  a.set_data(make_foreign_data(host_ptr, a.nbytes(), token));
}

void Graph::view(int64_t out_slot, int64_t in_slot, const mx::Strides& strides,
                 int64_t offset_elems) {
  auto& out = writable(out_slot, "view");
  auto& in = array_at(in_slot, "view");
  if (!in.data_shared_ptr()) {
    value_error("view: input slot " + std::to_string(in_slot) + " has no data");
  }
  if (strides.size() != out.ndim()) {
    value_error("view: " + std::to_string(strides.size()) +
                " strides given for an output of " + std::to_string(out.ndim()) +
                " dimensions");
  }
  if (out.size() > 0) {
    // Every addressed byte must lie inside the input's buffer.
    auto [lo, hi] = element_span(out.shape(), strides);
    lo += offset_elems;
    hi += offset_elems;
    auto isz = static_cast<int64_t>(out.itemsize());
    int64_t first = in.offset() + lo * isz;
    int64_t end = in.offset() + (hi + 1) * isz;
    int64_t cap = in.buffer().ptr() ? static_cast<int64_t>(in.buffer_size()) : 0;
    if (first < 0 || end > cap) {
      value_error("view: strides/offset address bytes [" +
                  std::to_string(first) + ", " + std::to_string(end) +
                  ") outside the input buffer of " + std::to_string(cap) +
                  " bytes");
    }
  }
  strided_view(in, out, strides, offset_elems);
}

bool Graph::try_view(int64_t n) {
  auto& node = node_at(n, "try_view");
  if (node.prim->view == ViewKind::None) return false;
  inputs_ready(node, n, "try_view");
  auto& a = *slots_[node.outputs[0]].arr;
  // array::outputs() builds a fresh vector per call; a view is mostly one output, and a
  // replay runs hundreds a step: refill one kept vector (emptied again before returning,
  // so it holds no references that donatable() or drop() would see)
  auto& outs = view_outs_;
  if (a.siblings().empty()) {
    outs.assign(1, a);
  } else {
    outs = a.outputs();
  }
  struct Empty {
    std::vector<mx::array>& v;
    ~Empty() { v.clear(); }
  } empty{outs};
  try {
    return apply_view(node.prim->view, a.primitive(), a.inputs(), outs);
  } catch (const std::exception& e) {
    throw std::runtime_error("try_view: " + node.prim->cname +
                             ": " + e.what());
  }
}

void Graph::share(int64_t out_slot, int64_t in_slot) {
  auto& out = writable(out_slot, "share");
  auto& in = array_at(in_slot, "share");
  if (!in.data_shared_ptr()) {
    value_error("share: input slot " + std::to_string(in_slot) + " has no data");
  }
  size_t cap = in.buffer().ptr() ? in.buffer_size() : 0;
  if (in.offset() < 0 || static_cast<size_t>(in.offset()) + out.nbytes() > cap) {
    value_error("share: output of " + std::to_string(out.nbytes()) +
                " bytes does not fit in the input's buffer (" +
                std::to_string(cap) + " bytes, offset " +
                std::to_string(in.offset()) + ")");
  }
  mx::Strides st(out.ndim(), 1);
  for (int i = static_cast<int>(out.ndim()) - 2; i >= 0; --i) {
    st[i] = st[i + 1] * out.shape(i + 1);
  }
  size_t mx_dim = out.ndim() ? *std::max_element(out.shape().begin(),
                                                out.shape().end())
                             : 1;
  mx::array::Flags flags{true, true, out.size() <= 1 || out.size() == mx_dim};
  // copy_shared_buffer's offset is in output elements, added to in's.
  out.copy_shared_buffer(in, st, flags, out.size(), 0);
}

bool Graph::donatable(int64_t slot) {
  // The rule: the slot's array and its buffer are held by nobody but
  //   * this Graph (one reference per slot),
  //   * the input lists of consumer nodes not yet detached (each output of a
  //     consumer keeps its own copy of the list), and
  //   * its siblings, while its producer is not detached;
  // exactly one consumer is still pending (the one about to run) and it is
  // not a tracer; the array is not a graph output; no other array (a view)
  // shares its Data. MLX's own is_donatable() also asks for an
  // allocator-owned buffer, which ours are not.
  auto& sl = slot_at(slot, "donatable");
  if (!sl.arr || sl.output) return false;
  const mx::array& a = *sl.arr;
  const auto& data = a.data_shared_ptr();
  if (!data) return false;
  int pending = 0;
  uint32_t consumer = 0;
  for (auto c : sl.consumers) {
    if (!nodes_[c].detached) {
      ++pending;
      consumer = c;
    }
  }
  if (pending != 1 || nodes_[consumer].finished) return false;
  if (slots_[nodes_[consumer].outputs[0]].arr->is_tracer()) return false;
  long expected = 1 + static_cast<long>(sl.held_refs) +
      static_cast<long>(a.siblings().size());
  return desc_use_count(a) == expected && data.use_count() == 1;
}

void Graph::eval_cpu(int64_t n) {
  auto& node = node_at(n, "eval_cpu");
  inputs_ready(node, n, "eval_cpu");
  auto& a = *slots_[node.outputs[0]].arr;
  auto& prim = a.primitive();
  auto stream = prim.stream();
  std::string name = node.prim->cname;
  if (stream.device != mx::Device::cpu) {
    // No GPU backend exists in the mlx-cpu wheel; such a node cannot occur
    // unless some other libmlx is loaded, and its eval_cpu would use a CPU
    // encoder that does not exist for this stream.
    throw std::runtime_error("eval_cpu: " + name +
                             " is scheduled on a GPU stream; only CPU-stream "
                             "primitives can fall back to MLX's eval_cpu");
  }
  auto outs = a.outputs();
  // MLX's own exception is rethrown as it is (same Python type and message as
  // plain MLX gives for the same program).
  std::exception_ptr error;
  std::vector<mx::array> temporaries;
  {
    // Without the GIL: some CPU kernels call back into Python on MLX's worker
    // threads (mx.load of an .npz reads through a Python file object), and
    // waiting for them while holding the GIL deadlocks. Nothing below touches
    // Python objects.
    nb::gil_scoped_release no_gil;
    try {
      prim.eval_cpu(a.inputs(), outs);
    } catch (...) {
      error = std::current_exception();
    }
    try {
      // As MLX's own CPU eval does: the encoder's temporaries must outlive the
      // dispatched work; we wait for it, then drop them here.
      auto& enc = mx::cpu::get_command_encoder(stream);
      temporaries.swap(enc.temporaries());
      mx::synchronize(stream);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
    temporaries.clear();
  }
  if (error) std::rethrow_exception(error);
  for (auto s : node.outputs) {
    if (!slots_[s].arr->data_shared_ptr()) {
      throw std::runtime_error("eval_cpu: " + name + " left output slot " +
                               std::to_string(s) + " without data");
    }
  }
}

void Graph::finish(int64_t n) {
  auto& node = node_at(n, "finish");
  for (auto s : node.outputs) {
    if (!slots_[s].arr->data_shared_ptr()) {
      value_error("finish: output slot " + std::to_string(s) + " of node " +
                  std::to_string(n) + " (" +
                  node.prim->cname +
                  ") has no data; attach, view, share or eval_cpu it first");
    }
  }
  auto& a = *slots_[node.outputs[0]].arr;
  // Synchronous: the work is complete, so straight to `available`.
  for (auto s : node.outputs) {
    slots_[s].arr->set_status(mx::array::Status::available);
  }
  if (!a.is_tracer()) {
    a.detach();  // drops primitive, inputs and siblings of every output
    node.detached = true;
  }
  node.finished = true;
  auto copies = static_cast<uint32_t>(node.outputs.size());
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    auto s = node.inputs[i];
    auto& sl = slots_[s];
    if (node.detached) sl.held_refs -= copies;
    bool first = std::find(node.inputs.begin(), node.inputs.begin() + i, s) ==
        node.inputs.begin() + i;
    if (first && --sl.unfinished_uses == 0 && !sl.output) drop(s);
  }
  for (auto s : node.outputs) {
    if (slots_[s].consumers.empty() && !slots_[s].output) drop(s);
  }
}

int64_t Graph::watch(int64_t slot) {
  auto& a = array_at(slot, "watch");
  if (!a.data_shared_ptr()) {
    value_error("watch: slot " + std::to_string(slot) + " has no data");
  }
  return watch_data(a.data_shared_ptr());
}

void Graph::release() {
  // the emptied vectors' storage goes to the next walk on this thread (see Scratch)
  nodes_.clear();
  slots_.clear();
  recycle_give(nodes_, spare_nodes());
  recycle_give(slots_, spare_slots());
  outputs_.clear();
  nodes_cache_ = nb::object();
  arrays_cache_ = nb::object();
}

}  // namespace mlx_amd
