// A recorded evaluation of one graph shape, replayed from native code.
//
// Python plans a graph node by node; the second time a graph with the same
// structure (fingerprint) is seen it records what it did per node into a
// Program. Later evaluations of that structure run through Graph::replay: per
// node, native code checks that the primitive (is_equivalent) and the input
// layouts are the recorded ones, makes views, takes output buffers Python
// allocated in bulk, resolves addresses and launches the recorded kernels.
// Anything that differs or is unknown (a parameter that changed, an input
// buffer without a device address, a CPU-fallback node) goes back to Python
// for that node only, through a callback. Python keeps every decision (plans,
// memory, residency); native code only executes them.
#pragma once

#include <typeinfo>
#include <unordered_map>

#include "bridge.h"
#include "graphexec.h"

namespace mlx_amd {

struct PRef {
  char kind;       // 'i' input, 'o' output, 't' temporary (arena offset), 'z' zeroed scratch
  int32_t index;
  int64_t offset;  // bytes
};

// A BLAS-Lt matmul the replay calls itself (cublasLtMatmul and hipblasLtMatmul take the
// same parameters), per job D = alpha op(A) op(B) + beta C with C = D. Everything but
// the addresses was set up by Python (blas/lt.py: LtEngine.native): the library's
// handle, descriptors and heuristic algorithm, which its engine keeps until it closes
// (then *alive turns 0 and the step's Python callback serves again).
struct PLibCall {
  uintptr_t fn = 0, handle = 0, desc = 0, la = 0, lb = 0, lc = 0, ws = 0;
  size_t ws_size = 0;
  std::string alpha, beta, algo;   // scale-type bytes; the algorithm's opaque bytes
  uintptr_t align[3] = {1, 1, 1};  // A, B, C/D: alignment the algorithm was chosen for
  const int32_t* alive = nullptr;
  int operand[3] = {0, 1, 2};      // which of the step's refs are A, B and C/D
  std::vector<int64_t> jobs;       // (A, B, D) byte offsets per job from those
  nb::object keep;                 // the engine (owns *alive and the descriptors)
  // 0, the library's status, or -1: an address is less aligned than recorded (or the
  // engine closed) and nothing ran
  int call(const std::vector<uintptr_t>& ptrs, uintptr_t stream) const;
};

struct PStep {
  // a kernel launch (callback empty), a Python callable taking the resolved
  // addresses (memsets, vendor-library calls), or a library call made natively (lib,
  // with the callable as its fallback)
  uintptr_t function = 0;
  unsigned grid[3] = {0, 0, 0}, block[3] = {1, 1, 1};
  unsigned shared_mem = 0;
  std::vector<PRef> refs;
  std::string tail;
  nb::object callback;
  std::shared_ptr<PLibCall> lib;
  int32_t init_out = -1;  // >= 0: runs only when that output was not donated
};

struct PLayout {
  mx::Shape shape;
  mx::Strides strides;
  mx::Dtype dtype = mx::float32;
  size_t data_size = 0;
  bool row = false, col = false, contig = false;
};

// Sibling: a node whose outputs a GPU node earlier in the graph computes with its own
// (PNode::siblings), in one plan; it runs in Python only when that one did not.
enum class PKind : uint8_t { Python, View, Gpu, Sibling };

struct PNode {
  PKind kind = PKind::Python;
  const std::type_info* type = nullptr;
  std::shared_ptr<mx::Primitive> prim;   // the recorded one, for is_equivalent
  std::vector<PLayout> ins;
  std::vector<mx::Shape> out_shapes;
  std::vector<mx::Dtype> out_dtypes;   // is_equivalent may ignore them (ConvertFP8 does)
  std::vector<size_t> out_nbytes;
  std::vector<uintptr_t> last_dev;   // per output: the fresh device buffer of the last replay
  std::vector<std::pair<int32_t, int32_t>> donate;   // (output, input)
  std::vector<std::pair<int64_t, int64_t>> written;  // per output; (-1,-1): all
  std::vector<PStep> steps;
  // Sibling nodes this GPU node's steps also compute (later nodes of the same kind on the
  // same input: an attention's q/k/v matvecs); the steps' references count their inputs
  // and outputs after the node's own, in this order
  std::vector<int64_t> siblings;
  // Plan.rebind: (input shapes, input strides) -> [(grid, tail)] per main step, or None
  nb::object rebind;
  nb::object name;                                   // primitive name, for stats
};

class Program {
 public:
  Program(uint64_t fingerprint, size_t num_nodes)
      : fingerprint_(fingerprint), nodes_(num_nodes) {}
  uint64_t fingerprint() const { return fingerprint_; }
  size_t num_nodes() const { return nodes_.size(); }
  // outputs that may need a fresh buffer, and their byte sizes
  nb::list buffer_sizes() const;
  size_t arena_bytes() const { return arena_; }
  // the runtime's zeroed scratch ('z' references: counters a kernel leaves at zero)
  uintptr_t zero_base() const { return zero_base_; }
  void set_zero_base(uintptr_t p) { zero_base_ = p; }
  void set_gpu(int64_t n, nb::tuple out_nbytes, nb::list donate, nb::list written,
               nb::list steps, int64_t temp_bytes, nb::object rebind);
  // node n (recorded as GPU) also computes `siblings` (recorded as kind 3); before set_gpu
  void set_siblings(int64_t n, const std::vector<int64_t>& siblings);
  // stats: (name, kind) per node, kind "view" / "gpu" / "python"
  nb::list kinds() const;
  PNode& at(int64_t n, const char* what);
  const PNode& peek(size_t n) const { return nodes_[n]; }   // unchecked, for prefetching
  GraphState& graph() { return *graph_; }
  const std::shared_ptr<GraphState>& graph_ptr() const { return graph_; }

  // Device addresses of the resident leaves (weights, caches) Python resolved at
  // earlier replays, so a replay resolves only the others: key -> (host data pointer,
  // buffer bytes, device address). Python forgets every key whose device copy went away or
  // went stale (runtime/residency.py keeps the log), before each replay.
  struct Leaf {
    uintptr_t host;
    size_t nbytes;
    uintptr_t dev;
  };
  void cache_leaves(nb::list entries);   // [(key, host, nbytes, dev)]
  void forget_leaves(nb::list keys);
  void clear_leaves() { leaves_.clear(); }
  size_t cached_leaves() const { return leaves_.size(); }
  const Leaf* cached_leaf(uintptr_t key, uintptr_t host, size_t nbytes) const {
    auto it = leaves_.find(key);
    return it != leaves_.end() && it->second.host == host && it->second.nbytes == nbytes ? &it->second
                                                                                            : nullptr;
  }

 private:
  uint64_t fingerprint_;
  std::vector<PNode> nodes_;
  size_t arena_ = 0;
  uintptr_t zero_base_ = 0;
  // its launches as CUDA/HIP graphs (graphexec.h); shared with the launch thread's jobs,
  // which may still issue a segment after the program is dropped
  std::shared_ptr<GraphState> graph_ = std::make_shared<GraphState>();
  std::unordered_map<uintptr_t, Leaf> leaves_;
};

// Device copies of small constant leaves, keyed by their bytes. MLX makes a fresh
// scalar array for every `x * 2.0` (an optimizer makes several per parameter and
// step), so a repeated step brings new buffers with the same few values each time:
// a replay finds their device copy here (Graph::leaves) instead of handing each one
// to Python for an upload and a record. Owned by the residency manager, which
// uploads the misses into its constant slabs and clears this before it frees them.
class ConstCache {
 public:
  // what counts as a small constant (Python reads both: ConstCache.MAX_BYTES / MAX_ELEMENTS)
  static constexpr size_t kMaxBytes = 256;
  static constexpr size_t kMaxElements = 64;
  static bool small(size_t ndim, size_t size, size_t nbytes) {
    return ndim <= 1 && size <= kMaxElements && nbytes > 0 && nbytes <= kMaxBytes;
  }
  const uintptr_t* find(const char* data, size_t n) const {
    auto it = dev_.find(std::string(data, n));
    return it == dev_.end() ? nullptr : &it->second;
  }
  void add(nb::list entries);   // [(bytes, device address)]
  void clear() { dev_.clear(); }
  size_t size() const { return dev_.size(); }

 private:
  std::unordered_map<std::string, uintptr_t> dev_;
};

}  // namespace mlx_amd
