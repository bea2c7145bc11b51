// Recording and replaying Programs (see replay.h).
#include "replay.h"
#include "launcher.h"
#include "pool.h"

#include <stdexcept>
#include <string>
#include <unordered_map>

#include "flatmap.h"
#include "graph.h"

#include <nanobind/stl/string.h>

// A prefetch hint (GCC, Clang); nothing elsewhere
#if defined(__GNUC__)
#define MLXA_PREFETCH(p) __builtin_prefetch(p)
#else
#define MLXA_PREFETCH(p) ((void)0)
#endif

namespace mlx_amd {

namespace {

using LaunchFn = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, unsigned, void*, void**, void**);

PLayout layout_of(const mx::array& a) {
  PLayout l;
  l.shape = a.shape();
  l.strides = a.strides();
  l.dtype = a.dtype();
  l.data_size = a.data_size();
  const auto& f = a.flags();
  l.row = f.row_contiguous;
  l.col = f.col_contiguous;
  l.contig = f.contiguous;
  return l;
}

bool same_layout(const PLayout& l, const mx::array& a) {
  const auto& f = a.flags();
  return l.dtype == a.dtype() && l.data_size == a.data_size() &&
         l.row == bool(f.row_contiguous) && l.col == bool(f.col_contiguous) &&
         l.contig == bool(f.contiguous) && l.shape == a.shape() &&
         l.strides == a.strides();
}

[[noreturn]] void bad(const std::string& msg) { throw nb::value_error(msg.c_str()); }

using LtMatmulFn = int (*)(void*, void*, const void*, const void*, void*, const void*, void*,
                           const void*, const void*, void*, void*, void*, const void*, void*,
                           size_t, void*);

std::string bytes_of(nb::handle h) {
  auto b = nb::cast<nb::bytes>(h);
  return std::string(b.c_str(), b.size());
}

// (fn, handle, desc, la, lb, lc, ws, ws_size, alpha, beta, algo, (align A, B, C/D),
//  alive address, (step ref of A, B, D), jobs [(A, B, D offsets)], keep)
std::shared_ptr<PLibCall> lib_call_of(nb::tuple t) {
  if (t.size() != 16) bad("set_gpu: a native library step takes 16 fields");
  auto c = std::make_shared<PLibCall>();
  uintptr_t* fields[] = {&c->fn, &c->handle, &c->desc, &c->la, &c->lb, &c->lc, &c->ws};
  for (int i = 0; i < 7; ++i) *fields[i] = nb::cast<uintptr_t>(t[i]);
  c->ws_size = nb::cast<size_t>(t[7]);
  c->alpha = bytes_of(t[8]);
  c->beta = bytes_of(t[9]);
  c->algo = bytes_of(t[10]);
  auto al = nb::cast<nb::tuple>(t[11]);
  if (al.size() != 3) bad("set_gpu: a native library step takes 3 alignments");
  for (int i = 0; i < 3; ++i) {
    c->align[i] = nb::cast<uintptr_t>(al[i]);
    if (c->align[i] == 0 || (c->align[i] & (c->align[i] - 1))) bad("set_gpu: an alignment must be a power of two");
  }
  c->alive = reinterpret_cast<const int32_t*>(nb::cast<uintptr_t>(t[12]));
  auto ops = nb::cast<nb::tuple>(t[13]);
  if (ops.size() != 3) bad("set_gpu: a native library step names 3 operands");
  for (int i = 0; i < 3; ++i) {
    c->operand[i] = nb::cast<int>(ops[i]);
    if (c->operand[i] < 0 || c->operand[i] > 2) bad("set_gpu: a native library operand is one of 3 refs");
  }
  for (auto j : nb::cast<nb::list>(t[14])) {
    auto jt = nb::cast<nb::tuple>(j);
    if (jt.size() != 3) bad("set_gpu: a native library job is (A, B, D) offsets");
    for (int i = 0; i < 3; ++i) c->jobs.push_back(nb::cast<int64_t>(jt[i]));
  }
  if (c->fn == 0 || c->alive == nullptr || c->jobs.empty()) bad("set_gpu: an incomplete native library step");
  c->keep = nb::borrow(t[15]);
  return c;
}

// A KV-cache write (SliceUpdate) at another position than the recorded one: same
// reduction, extents and steps, so the recorded steps apply with the output
// reference moved. Returns the move in bytes of `out`'s row-major layout, or
// false when the two differ in anything else.
bool slice_update_shift(const mx::Primitive& rec, const mx::Primitive& cur,
                        const mx::array& out, int64_t* shift) {
  auto [rt0, s0, e0, st0] = static_cast<const mx::SliceUpdate&>(rec).state();
  auto [rt1, s1, e1, st1] = static_cast<const mx::SliceUpdate&>(cur).state();
  if (rt0 != rt1 || st0 != st1 || s0.size() != s1.size() || e0.size() != e1.size() ||
      s0.size() != out.ndim()) {
    return false;
  }
  int64_t elems = 0, stride = 1;
  for (int d = static_cast<int>(out.ndim()) - 1; d >= 0; --d) {
    if (e1[d] - s1[d] != e0[d] - s0[d]) return false;
    elems += static_cast<int64_t>(s1[d] - s0[d]) * stride;
    stride *= out.shape(d);
  }
  *shift = elems * static_cast<int64_t>(out.itemsize());
  return true;
}

}  // namespace

PNode& Program::at(int64_t n, const char* what) {
  if (n < 0 || n >= static_cast<int64_t>(nodes_.size())) {
    throw nb::index_error((std::string(what) + ": node " + std::to_string(n) +
                           " out of range").c_str());
  }
  return nodes_[n];
}

void Program::set_gpu(int64_t n, nb::tuple out_nbytes, nb::list donate,
                      nb::list written, nb::list steps, int64_t temp_bytes,
                      nb::object rebind) {
  auto& pn = at(n, "set_gpu");
  if (pn.kind != PKind::Gpu) bad("set_gpu: node " + std::to_string(n) + " was not recorded as a GPU node");
  // the node's own inputs and outputs, then its siblings'
  size_t n_ins = pn.ins.size(), n_outs = pn.out_shapes.size();
  for (auto f : pn.siblings) {
    n_ins += nodes_[f].ins.size();
    n_outs += nodes_[f].out_shapes.size();
  }
  pn.out_nbytes.clear();
  for (auto o : out_nbytes) pn.out_nbytes.push_back(nb::cast<size_t>(o));
  if (pn.out_nbytes.size() != n_outs) bad("set_gpu: one byte size per output");
  if (!pn.siblings.empty() && !rebind.is_none()) bad("set_gpu: a node with siblings takes no rebind");
  pn.donate.clear();
  for (auto d : donate) {
    // (output, input) over the node's and then its siblings' (twin cache writes donate both)
    auto t = nb::cast<nb::tuple>(d);
    auto oj = nb::cast<int32_t>(t[0]), ii = nb::cast<int32_t>(t[1]);
    if (oj < 0 || static_cast<size_t>(oj) >= n_outs || ii < 0 || static_cast<size_t>(ii) >= n_ins) {
      bad("set_gpu: a donation pair outside the node's inputs and outputs");
    }
    pn.donate.emplace_back(oj, ii);
  }
  pn.written.clear();
  for (auto w : written) {
    if (w.is_none()) {
      pn.written.emplace_back(-1, -1);
    } else {
      auto t = nb::cast<nb::tuple>(w);
      pn.written.emplace_back(nb::cast<int64_t>(t[0]), nb::cast<int64_t>(t[1]));
    }
  }
  if (!pn.written.empty() && pn.written.size() != n_outs) bad("set_gpu: written needs one entry per output");
  pn.steps.clear();
  for (auto so : steps) {
    // ("L", function, grid, block, shared_mem, refs, tail, init_out) or
    // ("C", callable, refs, init_out)
    auto t = nb::cast<nb::tuple>(so);
    PStep st;
    auto kind = nb::cast<std::string>(t[0]);
    nb::handle refs;
    if (kind == "L") {
      st.function = nb::cast<uintptr_t>(t[1]);
      auto g = nb::cast<nb::tuple>(t[2]), b = nb::cast<nb::tuple>(t[3]);
      for (int i = 0; i < 3; ++i) {
        st.grid[i] = nb::cast<unsigned>(g[i]);
        st.block[i] = nb::cast<unsigned>(b[i]);
      }
      st.shared_mem = nb::cast<unsigned>(t[4]);
      refs = t[5];
      auto tail = nb::cast<nb::bytes>(t[6]);
      st.tail.assign(tail.c_str(), tail.size());
      st.init_out = nb::cast<int32_t>(t[7]);
    } else if (kind == "C" || kind == "N") {
      st.callback = nb::borrow(t[1]);
      refs = t[2];
      st.init_out = nb::cast<int32_t>(t[3]);
      if (kind == "N") st.lib = lib_call_of(nb::cast<nb::tuple>(t[4]));
    } else {
      bad("set_gpu: step kind must be 'L', 'C' or 'N', got '" + kind + "'");
    }
    for (auto r : nb::cast<nb::list>(refs)) {
      auto rt = nb::cast<nb::tuple>(r);
      auto k = nb::cast<std::string>(rt[0]);
      PRef ref{k.empty() ? '?' : k[0], nb::cast<int32_t>(rt[1]), nb::cast<int64_t>(rt[2])};
      int32_t lim = ref.kind == 'i' ? static_cast<int32_t>(n_ins)
                  : ref.kind == 'o' ? static_cast<int32_t>(n_outs)
                  : ref.kind == 't' ? INT32_MAX
                  : ref.kind == 'z' ? 1 : -1;   // one zeroed scratch: index 0
      if (ref.index < 0 || ref.index >= lim) bad("set_gpu: bad buffer reference in node " + std::to_string(n));
      st.refs.push_back(ref);
    }
    pn.steps.push_back(std::move(st));
  }
  if (temp_bytes < 0) bad("set_gpu: negative temporary size");
  pn.rebind = rebind.is_none() ? nb::object() : rebind;
  arena_ = std::max(arena_, static_cast<size_t>(temp_bytes));
}

void Program::set_siblings(int64_t n, const std::vector<int64_t>& siblings) {
  auto& pn = at(n, "set_siblings");
  if (pn.kind != PKind::Gpu) bad("set_siblings: node " + std::to_string(n) + " was not recorded as a GPU node");
  for (size_t j = 0; j < siblings.size(); ++j) {
    auto f = siblings[j];
    if (f <= n || (j && f <= siblings[j - 1])) bad("set_siblings: siblings come after the node, in order");
    if (at(f, "set_siblings").kind != PKind::Sibling) {
      bad("set_siblings: node " + std::to_string(f) + " was not recorded as a sibling");
    }
  }
  pn.siblings = siblings;
  pn.out_nbytes.clear();   // set_gpu follows
}

nb::list Program::buffer_sizes() const {
  nb::list out;
  for (auto& pn : nodes_) {
    if (pn.kind != PKind::Gpu) continue;
    for (auto n : pn.out_nbytes) out.append(n);
  }
  return out;
}

nb::list Program::kinds() const {
  nb::list out;
  for (auto& pn : nodes_) {
    const char* k = pn.kind == PKind::Gpu || pn.kind == PKind::Sibling ? "gpu"
                  : pn.kind == PKind::View ? "view" : "python";
    out.append(nb::make_tuple(pn.name, k));
  }
  return out;
}

// ---------------------------------------------------------------------------
void Graph::record(Program& prog, int64_t n, int kind) {
  if (prog.fingerprint() != fingerprint_ || prog.num_nodes() != nodes_.size()) {
    bad("record: the program was made for another graph structure");
  }
  auto& node = node_at(n, "record");
  auto& pn = prog.at(n, "record");
  const mx::array& a = *slots_[node.outputs[0]].arr;
  if (kind < 0 || kind > 3) bad("record: kind is 0 (Python), 1 (view), 2 (GPU) or 3 (sibling)");
  pn.kind = kind == 3 ? PKind::Sibling : kind == 2 ? PKind::Gpu : kind == 1 ? PKind::View : PKind::Python;
  pn.siblings.clear();
  pn.name = node.prim->name;
  pn.type = &typeid(a.primitive());
  pn.prim = a.primitive_ptr();
  pn.rebind = nb::object();   // set_gpu sets it again for a GPU node
  pn.ins.clear();
  for (auto s : node.inputs) pn.ins.push_back(layout_of(*slots_[s].arr));
  pn.out_shapes.clear();
  pn.out_dtypes.clear();
  for (auto s : node.outputs) {
    pn.out_shapes.push_back(slots_[s].arr->shape());
    pn.out_dtypes.push_back(slots_[s].arr->dtype());
  }
  pn.out_nbytes.assign(node.outputs.size(), 0);
}

// The bytes a small constant's kernels can read: its buffer from the start to the end of the
// elements it addresses. Not buffer_size(): MLX's allocator hands out reused blocks larger
// than asked, and their slack bytes made equal values look different to the cache (a fresh
// scalar of each decode step uploaded again whenever it landed in another block).
static size_t addressed_bytes(const mx::array& a, size_t buffer_bytes) {
  const int64_t hi = element_span(a.shape(), a.strides()).second;
  int64_t end = a.offset() + (hi + 1) * static_cast<int64_t>(a.itemsize());
  return end > 0 && static_cast<size_t>(end) < buffer_bytes ? static_cast<size_t>(end) : buffer_bytes;
}

nb::list Graph::leaves(Program* prog, ConstCache* consts) {
  // (slot, key, host data pointer, buffer bytes, token, ndim, size, constant bytes) per leaf
  nb::list out;
  cached_dev_.clear();
  // A decode step has ~750 leaves (weights), each read through two objects that have left
  // the caches since the last step: the array's descriptor and its Data (buffer, size).
  // Each leaf's are requested a few leaves ahead, the descriptor first, then the Data its
  // (by then loaded) descriptor points to. Addresses only: a prefetch never faults.
  leaf_ids_.clear();
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].producer < 0 && slots_[s].arr) leaf_ids_.push_back(static_cast<uint32_t>(s));
  }
  constexpr size_t kDesc = 8, kData = 4;
  const size_t n_leaves = leaf_ids_.size();
  for (size_t i = 0; i < n_leaves && i < kDesc; ++i) {
    const auto* d = reinterpret_cast<const char*>(&slots_[leaf_ids_[i]].arr->shape());
    for (size_t b = 0; b < 256; b += 64) MLXA_PREFETCH(d + b);
  }
  for (size_t i = 0; i < n_leaves; ++i) {
    if (i + kDesc < n_leaves) {
      const auto* d = reinterpret_cast<const char*>(&slots_[leaf_ids_[i + kDesc]].arr->shape());
      for (size_t b = 0; b < 256; b += 64) MLXA_PREFETCH(d + b);
    }
    if (i + kData < n_leaves) MLXA_PREFETCH(slots_[leaf_ids_[i + kData]].arr->data_shared_ptr().get());
    const size_t s = leaf_ids_[i];
    auto& sl = slots_[s];
    const mx::array& a = *sl.arr;
    auto buf = a.buffer();
    uintptr_t key = reinterpret_cast<uintptr_t>(buf.ptr());
    if (!a.data_shared_ptr() || !key) continue;
    uintptr_t host = reinterpret_cast<uintptr_t>(buf.raw_ptr());
    size_t nbytes = a.buffer_size();
    if (prog != nullptr) {
      if (const auto* hit = prog->cached_leaf(key, host, nbytes)) {
        cached_dev_.emplace_back(key, hit->dev);
        continue;
      }
    }
    int64_t token = token_of(buf);
    // a small MLX-owned constant (its host bytes are the truth: kernels never write
    // MLX's buffers) whose value has a device copy already; cbytes: the bytes the cache
    // keys it by (what Python uploads if it is new), 0 when it is no such constant
    size_t cbytes = 0;
    if (token == -1 && a.ndim() <= 1 && a.size() <= ConstCache::kMaxElements) {
      size_t span = addressed_bytes(a, nbytes);
      if (ConstCache::small(a.ndim(), a.size(), span)) {
        cbytes = span;
        if (consts != nullptr) {
          if (const uintptr_t* d = consts->find(reinterpret_cast<const char*>(host), cbytes)) {
            cached_dev_.emplace_back(key, *d);
            continue;
          }
        }
      }
    }
    out.append(nb::make_tuple(s, key, host, nbytes, token, a.ndim(), a.size(), cbytes));
  }
  return out;
}

nb::dict Graph::leaf_hits() const {
  nb::dict d;
  for (auto [k, v] : cached_dev_) d[nb::int_(k)] = nb::int_(v);
  return d;
}

void ConstCache::add(nb::list entries) {
  for (auto e : entries) {
    auto t = nb::cast<nb::tuple>(e);
    auto b = nb::cast<nb::bytes>(t[0]);
    if (b.size() == 0 || b.size() > kMaxBytes) {
      throw nb::value_error("ConstCache.add: a constant of 1 to 256 bytes expected");
    }
    dev_[std::string(b.c_str(), b.size())] = nb::cast<uintptr_t>(t[1]);
  }
}

void Program::cache_leaves(nb::list entries) {
  for (auto e : entries) {
    auto t = nb::cast<nb::tuple>(e);
    leaves_[nb::cast<uintptr_t>(t[0])] =
        Leaf{nb::cast<uintptr_t>(t[1]), nb::cast<size_t>(t[2]), nb::cast<uintptr_t>(t[3])};
  }
}

void Program::forget_leaves(nb::list keys) {
  for (auto k : keys) leaves_.erase(nb::cast<uintptr_t>(k));
}

int PLibCall::call(const std::vector<uintptr_t>& ptrs, uintptr_t stream) const {
  if (ptrs.size() != 3 || *alive == 0) return -1;
  auto at = [&](size_t j, int i) { return ptrs[operand[i]] + static_cast<uintptr_t>(jobs[j + i]); };
  for (size_t j = 0; j < jobs.size(); j += 3) {
    for (int i = 0; i < 3; ++i) {
      if (at(j, i) & (align[i] - 1)) return -1;
    }
  }
  auto f = reinterpret_cast<LtMatmulFn>(fn);
  for (size_t j = 0; j < jobs.size(); j += 3) {
    auto a = reinterpret_cast<const void*>(at(j, 0));
    auto b = reinterpret_cast<const void*>(at(j, 1));
    auto d = reinterpret_cast<void*>(at(j, 2));
    int st = f(reinterpret_cast<void*>(handle), reinterpret_cast<void*>(desc), alpha.data(), a,
               reinterpret_cast<void*>(la), b, reinterpret_cast<void*>(lb), beta.data(), d,
               reinterpret_cast<void*>(lc), d, reinterpret_cast<void*>(lc), algo.data(),
               ws_size ? reinterpret_cast<void*>(ws) : nullptr, ws_size,
               reinterpret_cast<void*>(stream));
    if (st) {
      if (j) bad("replay: a native GEMM failed after " + std::to_string(j / 3) + " of its jobs ran");
      return st;
    }
  }
  return 0;
}

bool Graph::early_view(Program& prog, int64_t slot, int depth) {
  const auto p = slots_[slot].producer;
  if (p < 0 || nodes_[p].finished) return true;
  const auto& vn = nodes_[p];
  const auto& pv = prog.at(p, "replay");
  if (depth > 4 || vn.inputs.size() != 1 || pv.kind != PKind::View ||
      pv.type != &typeid(slots_[vn.outputs[0]].arr->primitive()) ||
      !early_view(prog, vn.inputs[0], depth + 1) || !try_view(p)) {
    return false;
  }
  finish(p);
  return true;
}

nb::tuple Graph::replay(Program& prog, nb::dict leaf_dev, Outputs& outputs,
                        uintptr_t arena, uintptr_t entry, intptr_t param_end,
                        uintptr_t stream, nb::callable node_cb,
                        nb::callable error_cb, bool graphs, bool threaded) {
  if (prog.fingerprint() != fingerprint_ || prog.num_nodes() != nodes_.size()) {
    bad("replay: the program was made for another graph structure");
  }
  // buffer key -> device address of the buffer's host data start
  Scratch<FlatMap<uintptr_t>> dev_scratch;
  FlatMap<uintptr_t>& dev = dev_scratch.get();
  dev.reset(leaf_dev.size() + cached_dev_.size() + 2 * nodes_.size());
  for (auto [k, v] : leaf_dev) dev.emplace(nb::cast<uintptr_t>(k), nb::cast<uintptr_t>(v));
  for (auto [k, v] : cached_dev_) dev.emplace(k, v);   // leaves(prog) found these cached
  nb::list written, python_nodes;
  auto launch = reinterpret_cast<LaunchFn>(entry);
  struct Rebound { unsigned grid[3]; std::string tail; };
  std::vector<Rebound> rebound;   // this node's steps at its current shapes, if rebound
  // Rebind answers of this replay by (rebind callable, input shapes and strides). Nodes
  // with one plan share its callable (plans are cached by signature): an LLM's SDPA
  // layers ask the same question every step, and one Python call answers them all.
  // A rebind is a pure function of its arguments (Plan.rebind), so reuse is exact.
  struct RebindMemo {
    nb::object fn;   // held: its address stays its own while the entry lives
    std::vector<int64_t> key;
    bool none;
    std::vector<Rebound> steps;
  };
  std::vector<RebindMemo> rebind_memo;
  std::vector<int64_t> rebind_key;
  std::vector<uintptr_t> in_ptrs, out_ptrs, ptrs;
  std::vector<int64_t> in_slots, out_slots;   // the node's, then its siblings'
  std::vector<char> donated;
  std::vector<uintptr_t> taken_keys;
  std::vector<int64_t> out_shift;   // per output: bytes its references move (KV writes)
  std::string blob;

  auto address = [&](const mx::array& a, uintptr_t* out) {
    auto buf = a.buffer();
    const uintptr_t* d = dev.find(reinterpret_cast<uintptr_t>(buf.ptr()));
    if (d == nullptr) return false;
    *out = *d + static_cast<uintptr_t>(a.offset());
    return true;
  };
  // With graphs, launches are collected and issued segment by segment as the program's
  // graphs (graphexec.h); anything that must run in order with them on the host side (a
  // callback, a node in Python) first issues what was collected, and the rest of this
  // replay goes eagerly.
  LaunchThread* worker = threaded ? LaunchThread::get() : nullptr;
  if (worker != nullptr && worker->entries().launch != entry) worker = nullptr;
  if (worker != nullptr) worker->wait();   // (the evaluator drained it already: a no-op)
  graphs = graphs && graph_api_ready() && prog.graph().wanted();
  // With the launch thread (launcher.h), launches are collected the same way and posted in
  // batches (a graph segment, or kEagerBatch eager launches) for the worker to issue; what
  // must run in order with them on this thread first posts what was collected and waits.
  std::vector<LaunchRec> pending;
  size_t segment = 0, segment_end = graphs ? segment_launches(0) : 0;
  // eager batches: the first small, so the GPU starts while the host collects the rest
  size_t eager_batch = 8;
  constexpr size_t kEagerBatch = 64;
  auto report = [&](int64_t n, int status, const LaunchRec& r) {
    error_cb(n, status, r.function, nb::make_tuple(r.grid[0], r.grid[1], r.grid[2]),
             nb::make_tuple(r.block[0], r.block[1], r.block[2]),
             nb::bytes(r.args.data(), r.args.size()), r.shared_mem);
    bad("replay: a launch failed and the error callback did not raise");
  };
  auto post_eager = [&]() {
    if (pending.empty()) return;
    LaunchJob j;
    j.kind = LaunchJob::Eager;
    j.recs = std::move(pending);
    j.stream = stream;
    worker->post(std::move(j));
    pending.clear();
    eager_batch = kEagerBatch;
  };
  auto issue_pending = [&]() {
    if (worker != nullptr) {
      // this thread is about to put work on the stream itself: everything posted goes first
      // (a failure there is the evaluator's to raise, at its next drain)
      post_eager();
      worker->wait();
      graphs = false;
      return;
    }
    size_t failed = 0;
    int st = launch_eager(pending, 0, entry, param_end, stream, &failed);
    LaunchRec r;
    if (st) r = pending[failed];
    pending.clear();
    graphs = false;
    if (st) report(-1, st, r);
  };
  auto issue_segment = [&]() {
    if (worker != nullptr) {
      LaunchJob j;
      j.kind = LaunchJob::Segment;
      j.recs = std::move(pending);
      j.state = prog.graph_ptr();
      j.segment = segment;
      j.stream = stream;
      worker->post(std::move(j));
      pending.clear();
      segment_end = segment_launches(++segment);
      return;
    }
    const char* what = "";
    int st = graph_run(prog.graph(), segment, pending, entry, param_end, stream, &what);
    LaunchRec r;
    if (st && std::string(what) == "kernel launch") r = pending[0];
    pending.clear();
    segment_end = segment_launches(++segment);
    if (st) {
      graphs = false;
      error_cb(-1, st, r.function, nb::make_tuple(0, 0, 0), nb::make_tuple(0, 0, 0), nb::bytes("", 0), 0);
      bad("replay: a graph launch failed and the error callback did not raise");
    }
  };
  auto python = [&](int64_t n, bool rerecord) {
    if (graphs || worker != nullptr) issue_pending();
    python_nodes.append(n);
    // runs the node in Python (and finishes it); returns [(key, device address)]
    // of the buffers its outputs now use
    // (the write records so far go first: a CPU fallback reads what they mark stale)
    nb::object r = node_cb(n, written, rerecord);
    written = nb::list();
    for (auto kv : nb::cast<nb::list>(r)) {
      auto t = nb::cast<nb::tuple>(kv);
      dev.set(nb::cast<uintptr_t>(t[0]), nb::cast<uintptr_t>(t[1]));
    }
  };

  // Prefetching. A step's MLX objects (array descriptors, primitives), this graph's
  // tables and this program's per-node records (steps, refs, layouts) are each touched
  // once a step, and by then they have left the caches: their first loads were most of
  // this loop's own time (perf on the dev machine; the H200 host's profile showed the
  // same ~40 % self time here). So each node's are requested a few nodes ahead, in three
  // rounds, each following only pointers the one before brought in. Addresses only: a
  // prefetch never faults, and nothing is read through the walk's hints (desc_addr,
  // prim_addr).
  constexpr int64_t kNear = 2, kMid = 4, kFar = 6;
  const int64_t num_nodes = static_cast<int64_t>(nodes_.size());

  try {
  for (int64_t n = 0; n < static_cast<int64_t>(nodes_.size()); ++n) {
    auto& node = nodes_[n];
    // (inline, not in a helper: GCC drops calls to a function that only prefetches)
    for (int64_t m = n == 0 ? 0 : n + kFar; m <= n + kFar && m < num_nodes; ++m) {
      const auto& nx = nodes_[m];
      const auto* pm = reinterpret_cast<const char*>(&prog.peek(m));
      for (size_t b = 0; b < sizeof(PNode); b += 64) MLXA_PREFETCH(pm + b);
      const auto* desc = static_cast<const char*>(nx.desc_addr);
      MLXA_PREFETCH(desc - 16);   // make_shared's reference counts
      for (size_t b = 64; b < 320; b += 64) MLXA_PREFETCH(desc + b);
      MLXA_PREFETCH(nx.prim_addr);
      MLXA_PREFETCH(nx.outputs.data());
      MLXA_PREFETCH(nx.inputs.data());
    }
    for (int64_t m = n == 0 ? 0 : n + kMid; m <= n + kMid && m < num_nodes; ++m) {
      const auto& nx = nodes_[m];
      MLXA_PREFETCH(&slots_[nx.outputs[0]]);
      for (auto s_in : nx.inputs) MLXA_PREFETCH(&slots_[s_in]);
      const auto& pm = prog.peek(m);
      MLXA_PREFETCH(pm.prim.get());
      MLXA_PREFETCH(pm.ins.data());
      MLXA_PREFETCH(pm.out_shapes.data());
      MLXA_PREFETCH(pm.steps.data());
      // the per-output records the node's output loop reads (each its own heap block: at
      // 10k launches a step each was a miss, the donation check's most of all)
      MLXA_PREFETCH(pm.out_dtypes.data());
      MLXA_PREFETCH(pm.out_nbytes.data());
      MLXA_PREFETCH(pm.last_dev.data());
      MLXA_PREFETCH(pm.donate.data());
      MLXA_PREFETCH(pm.written.data());
    }
    for (int64_t m = n == 0 ? 0 : n + kNear; m <= n + kNear && m < num_nodes; ++m) {
      for (auto s_in : nodes_[m].inputs) {
        if (const auto& in = slots_[s_in].arr) {
          MLXA_PREFETCH(&in->shape());
          MLXA_PREFETCH(&in->data_shared_ptr());
        }
      }
      for (const auto& st : prog.peek(m).steps) {
        MLXA_PREFETCH(st.refs.data());
        MLXA_PREFETCH(st.tail.data());
      }
    }
    auto& pn = prog.at(n, "replay");
    if (node.finished) continue;
    const mx::array& a = *slots_[node.outputs[0]].arr;
    auto& prim = a.primitive();
    // a view runs the node's own primitive (try_view), whatever its parameters: no
    // is_equivalent for it (most of a step's nodes are views)
    if (pn.kind == PKind::View && pn.type == &typeid(prim)) {
      if (try_view(n)) {
        finish(n);
        recycle_freed(outputs);
      } else {
        python(n, false);
      }
      continue;
    }
    if (pn.kind == PKind::Sibling) {
      // the node recorded as computing it did not (it ran in Python, unfused): plan it now
      python(n, pn.type == &typeid(prim));
      continue;
    }
    bool same = pn.kind != PKind::Python && pn.type == &typeid(prim) &&
                (pn.prim.get() == &prim || pn.prim->is_equivalent(prim));
    int64_t shift = 0;   // bytes the node's output references move (a KV write)
    // (by name: libmlx does not export SliceUpdate's type_info)
    if (!same && pn.kind == PKind::Gpu && pn.type == &typeid(prim) &&
        node.prim->cname == "SliceUpdate") {
      same = slice_update_shift(*pn.prim, prim, a, &shift);
    }
    bool outs_same = same;
    for (size_t j = 0; j < node.outputs.size() && outs_same; ++j) {
      const auto& o = *slots_[node.outputs[j]].arr;
      outs_same = pn.out_shapes[j] == o.shape() && pn.out_dtypes[j] == o.dtype();
    }
    bool ins_same = outs_same;
    for (size_t i = 0; i < node.inputs.size() && ins_same; ++i) {
      ins_same = same_layout(pn.ins[i], *slots_[node.inputs[i]].arr);
    }
    // the same node at other input shapes: the plan may rebind its steps (Plan.rebind)
    rebound.clear();
    if (outs_same && !ins_same && pn.kind == PKind::Gpu && pn.rebind.is_valid()) {
      rebind_key.clear();
      for (auto s_in : node.inputs) {
        const auto& in = *slots_[s_in].arr;
        rebind_key.push_back(static_cast<int64_t>(in.ndim()));
        rebind_key.insert(rebind_key.end(), in.shape().begin(), in.shape().end());
        rebind_key.insert(rebind_key.end(), in.strides().begin(), in.strides().end());
      }
      const RebindMemo* hit = nullptr;
      for (const auto& m : rebind_memo) {
        if (m.fn.ptr() == pn.rebind.ptr() && m.key == rebind_key) {
          hit = &m;
          break;
        }
      }
      if (hit == nullptr) {
        nb::list shapes, strides;
        for (auto s_in : node.inputs) {
          const auto& in = *slots_[s_in].arr;
          shapes.append(int_tuple(in.shape()));
          strides.append(int_tuple(in.strides()));
        }
        nb::object r = pn.rebind(shapes, strides);
        RebindMemo m{pn.rebind, rebind_key, r.is_none(), {}};
        if (!m.none) {
          for (auto item : nb::cast<nb::list>(r)) {
            auto t = nb::cast<nb::tuple>(item);
            auto g = nb::cast<nb::tuple>(t[0]);
            auto tail = nb::cast<nb::bytes>(t[1]);
            Rebound rb;
            for (int i = 0; i < 3; ++i) rb.grid[i] = nb::cast<unsigned>(g[i]);
            rb.tail.assign(tail.c_str(), tail.size());
            m.steps.push_back(std::move(rb));
          }
        }
        if (rebind_memo.size() >= 16) rebind_memo.clear();   // a linear search: keep it short
        rebind_memo.push_back(std::move(m));
        hit = &rebind_memo.back();
      }
      if (!hit->none) {
        size_t main_steps = 0;
        for (auto& st : pn.steps) main_steps += st.init_out < 0;
        if (hit->steps.size() != main_steps) bad("replay: a rebind gave the wrong number of steps");
        rebound = hit->steps;
        ins_same = true;
      }
    }
    same = same && outs_same && ins_same;
    in_ptrs.resize(node.inputs.size());
    for (size_t i = 0; i < node.inputs.size() && same; ++i) {
      same = address(*slots_[node.inputs[i]].arr, &in_ptrs[i]);
    }
    // siblings: each still to run, equivalent to its recording, its inputs resolved (their
    // addresses follow the node's own), its outputs after the node's
    in_slots.assign(node.inputs.begin(), node.inputs.end());
    out_slots.assign(node.outputs.begin(), node.outputs.end());
    out_shift.assign(node.outputs.size(), shift);
    for (size_t k = 0; k < pn.siblings.size() && same; ++k) {
      const auto f = pn.siblings[k];
      const auto& fnode = nodes_[f];
      // its inputs may be views still to run (W.T, x reshaped by MLX's matmul at each
      // call): make them now, as recorded
      // (an input the node or an earlier sibling makes, e.g. the Add's sum its RMSNorm reads,
      // the norm's output a chained projection reads, or a view of one still to run, is not
      // resolved: the plan writes it and does not read it as an input; the view runs later)
      const auto made_here = [&](int64_t s) {
        for (;;) {
          const auto p = slots_[s].producer;
          if (p < 0) return false;
          if (p == n || std::find(pn.siblings.begin(), pn.siblings.begin() + k, p) != pn.siblings.begin() + k) {
            return true;
          }
          if (nodes_[p].finished || nodes_[p].inputs.size() != 1 || prog.at(p, "replay").kind != PKind::View) {
            return false;
          }
          s = nodes_[p].inputs[0];
        }
      };
      for (size_t i = 0; i < fnode.inputs.size() && same; ++i) {
        same = made_here(fnode.inputs[i]) || early_view(prog, fnode.inputs[i], 0);
      }
      const auto& pf = prog.at(f, "replay");
      const mx::array& fa = *slots_[fnode.outputs[0]].arr;
      same = same && !fnode.finished && pf.kind == PKind::Sibling && pf.type == &typeid(fa.primitive());
      int64_t fshift = 0;
      if (same && pf.prim.get() != &fa.primitive() && !pf.prim->is_equivalent(fa.primitive())) {
        // a cache write (SliceUpdate: the k/v twin, or the writes chained to q's and k's
        // RoPE) at another position: its output references move by its own shift
        same = fnode.prim->cname == "SliceUpdate" && slice_update_shift(*pf.prim, fa.primitive(), fa, &fshift);
      }
      for (size_t j = 0; j < fnode.outputs.size() && same; ++j) {
        const auto& o = *slots_[fnode.outputs[j]].arr;
        same = pf.out_shapes[j] == o.shape() && pf.out_dtypes[j] == o.dtype();
      }
      for (size_t i = 0; i < fnode.inputs.size() && same; ++i) {
        const auto& in = *slots_[fnode.inputs[i]].arr;
        uintptr_t p = 0;
        same = made_here(fnode.inputs[i]) || (same_layout(pf.ins[i], in) && address(in, &p));
        in_ptrs.push_back(p);
      }
      in_slots.insert(in_slots.end(), fnode.inputs.begin(), fnode.inputs.end());
      out_slots.insert(out_slots.end(), fnode.outputs.begin(), fnode.outputs.end());
      out_shift.insert(out_shift.end(), fnode.outputs.size(), fshift);
    }
    if (!same) {
      // the same kind of GPU node at other shapes or parameters (a KV cache that grew), or
      // with siblings that changed: what Python plans now becomes the recording
      python(n, pn.kind == PKind::Gpu && pn.type == &typeid(prim));
      continue;
    }
    // outputs: take over a donatable input, else a buffer allocated for us
    out_ptrs.assign(out_slots.size(), 0);
    donated.assign(out_slots.size(), 0);
    taken_keys.clear();
    for (size_t j = 0; j < out_slots.size(); ++j) {
      auto s_out = out_slots[j];
      size_t nbytes = pn.out_nbytes[j];
      for (auto [oj, ii] : pn.donate) {
        if (oj != static_cast<int32_t>(j)) continue;
        auto s_in = in_slots[ii];
        const mx::array& in = *slots_[s_in].arr;
        auto buf = in.buffer();
        auto key = reinterpret_cast<uintptr_t>(buf.ptr());
        if (token_of(buf) != -1 && in.buffer_size() == nbytes && in.offset() == 0 &&
            in.flags().row_contiguous && in.data_size() * in.itemsize() == nbytes &&
            std::find(taken_keys.begin(), taken_keys.end(), key) == taken_keys.end() &&
            donatable(s_in)) {
          share(s_out, s_in);
          out_ptrs[j] = in_ptrs[ii];
          donated[j] = 1;
          taken_keys.push_back(key);
          if (outputs.has(static_cast<int64_t>(key))) {
            // made by this replay: adopted as written in full
          } else if (pn.written.empty() || pn.written[j].first < 0) {
            written.append(nb::make_tuple(static_cast<int64_t>(key), -1, -1));
          } else {
            written.append(nb::make_tuple(static_cast<int64_t>(key), pn.written[j].first + out_shift[j],
                                          pn.written[j].second + out_shift[j]));
          }
          break;
        }
      }
      if (!donated[j]) {
        // a fresh pair from the pools; written in full (Residency.adopt marks it so)
        Outputs::Fresh b;
        if (pn.last_dev.size() != out_slots.size()) pn.last_dev.assign(out_slots.size(), 0);
        int64_t key = outputs.take(nbytes, &b, pn.last_dev[j]);
        pn.last_dev[j] = b.dev;
        auto& arr = *slots_[s_out].arr;
        arr.set_data(make_foreign_data(b.host, arr.nbytes(), key));
        dev.set(static_cast<uintptr_t>(key), b.dev);
        out_ptrs[j] = b.dev;
        taken_keys.push_back(static_cast<uintptr_t>(key));
      }
    }
    size_t main_i = 0;
    for (auto& st : pn.steps) {
      const Rebound* rb = nullptr;
      if (st.init_out < 0 && !rebound.empty()) rb = &rebound[main_i++];
      if (st.init_out >= 0 && donated[st.init_out]) continue;
      ptrs.clear();
      for (auto& r : st.refs) {
        uintptr_t base = r.kind == 'i' ? in_ptrs[r.index] : r.kind == 'o' ? out_ptrs[r.index]
                       : r.kind == 'z' ? prog.zero_base() : arena;
        int64_t off = r.offset + (r.kind == 'o' && st.init_out < 0 ? out_shift[r.index] : 0);
        ptrs.push_back(base + static_cast<uintptr_t>(off));
      }
      if (st.callback.is_valid()) {
        if (graphs || worker != nullptr) issue_pending();
        // the library called natively; its Python callable where that cannot serve
        // (less aligned addresses, a closed engine) or failed (it reports the error)
        if (!st.lib || st.lib->call(ptrs, stream) != 0) st.callback(int_tuple(ptrs));
        continue;
      }
      const unsigned* grid = rb ? rb->grid : st.grid;
      if (grid[0] == 0) continue;
      blob.assign(reinterpret_cast<const char*>(ptrs.data()), ptrs.size() * sizeof(uintptr_t));
      blob += rb ? rb->tail : st.tail;
      if (graphs || worker != nullptr) {
        LaunchRec r;
        r.function = st.function;
        std::copy(grid, grid + 3, r.grid);
        std::copy(st.block, st.block + 3, r.block);
        r.shared_mem = st.shared_mem;
        r.args = blob;
        pending.push_back(std::move(r));
        if (graphs) {
          if (pending.size() >= segment_end) issue_segment();
        } else if (pending.size() >= eager_batch) {
          post_eager();
        }
        continue;
      }
      size_t size = blob.size();
      void* extra[5] = {reinterpret_cast<void*>(1), blob.data(), reinterpret_cast<void*>(2), &size,
                        reinterpret_cast<void*>(param_end)};
      int status = launch(reinterpret_cast<void*>(st.function), grid[0], grid[1], grid[2],
                          st.block[0], st.block[1], st.block[2], st.shared_mem,
                          reinterpret_cast<void*>(stream), nullptr, size ? extra : nullptr);
      if (status) {
        error_cb(n, status, st.function, nb::make_tuple(grid[0], grid[1], grid[2]),
                 nb::make_tuple(st.block[0], st.block[1], st.block[2]),
                 nb::bytes(blob.data(), blob.size()), st.shared_mem);
        bad("replay: a launch failed and the error callback did not raise");
      }
    }
    finish(n);
    for (auto f : pn.siblings) {
      // views of what the group made that a sibling reads (a chain's x flattened): made now,
      // before their reader finishes (their input is there; its producer finished first)
      for (auto s_in : nodes_[f].inputs) early_view(prog, s_in, 0);
      finish(f);
    }
    recycle_freed(outputs);   // the intermediates that just died serve the next nodes
  }
  } catch (...) {
    // nodes already finished must not stay without their kernels: issue what was collected
    if (worker != nullptr) {
      post_eager();
      worker->wait();
    } else {
      size_t failed = 0;
      launch_eager(pending, 0, entry, param_end, stream, &failed);
    }
    throw;
  }
  if (graphs && !pending.empty()) {
    issue_segment();
  } else if (worker != nullptr) {
    post_eager();
  }
  return nb::make_tuple(written, python_nodes);
}

}  // namespace mlx_amd
