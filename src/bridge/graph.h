// The Graph: one C++ walk of MLX's unevaluated graph, then per-node services
// for the Python evaluator (views, buffers, fallback, completion).
#pragma once

#include "bridge.h"
#include "replay.h"

namespace mlx_amd {

class Outputs;   // pool.h

class Graph {
 public:
  // async: refuse tracers the way mx.async_eval does
  explicit Graph(const std::vector<mx::array>& outputs, bool async = false);
  ~Graph() { release(); }

  nb::list nodes();
  nb::list arrays();
  // one node's row of nodes() / one slot's row of arrays(), without the tables
  nb::tuple node(int64_t n);
  nb::tuple meta(int64_t s);
  // the structure: primitive classes, topology, leaves (not shapes or params)
  uint64_t fingerprint() const { return fingerprint_; }
  nb::tuple outputs() const;
  size_t num_nodes() const { return nodes_.size(); }
  size_t num_slots() const { return slots_.size(); }

  nb::object info(int64_t slot);
  // A GPU node's plan-cache key (bytes: per input dtype, shape, strides, data size,
  // row/contiguous flags, leafness; per output dtype, shape, leafness), its inputs' info
  // rows and item sizes, in one call; None when an input has no data.
  nb::object node_key(int64_t node);
  // try_view, record (with a program) and finish in one call: False when MLX would copy
  // (nothing done), else True or the freed tokens (drain_freed).
  nb::object view_node(int64_t node, Program* prog);
  // view_node for node `from` and the nodes after it, until a node that is no view, one MLX
  // would copy, or one already finished (Python takes that one): (its index, freed tokens
  // or None). A first sighting's views (half its nodes) cost ~1 us each through Python.
  nb::tuple run_views(int64_t from, Program* prog);
  // views run_views made, per primitive name, since the last call
  nb::list view_counts();
  void attach(int64_t slot, uintptr_t host_ptr, int64_t token);
  void view(int64_t out_slot, int64_t in_slot, const mx::Strides& strides,
            int64_t offset_elems);
  bool try_view(int64_t node);
  void share(int64_t out_slot, int64_t in_slot);
  bool donatable(int64_t slot);
  void eval_cpu(int64_t node);
  void finish(int64_t node);
  int64_t watch(int64_t slot);
  void release();

  // replay.cpp: recording and replaying a Program
  void record(Program& prog, int64_t node, int kind);
  // whether node n is computed (a replay may have made a view early, natively)
  bool finished(int64_t n) {
    if (n < 0 || n >= static_cast<int64_t>(nodes_.size())) node_at(n, "finished");   // raises
    return nodes_[n].finished;
  }
  // leaves with data; with a program, only those its leaf cache does not hold (the
  // cached ones are kept for the next replay)
  nb::list leaves(Program* prog, ConstCache* consts);
  nb::dict leaf_hits() const;
  nb::tuple replay(Program& prog, nb::dict leaf_dev, Outputs& outputs,
                   uintptr_t arena, uintptr_t entry, intptr_t param_end,
                   uintptr_t stream, nb::callable node_cb,
                   nb::callable error_cb, bool graphs, bool threaded);

 private:
  // replay: make the view producing `slot` now (and the views it reads), as the program
  // recorded them; false if one is not a recorded view or cannot be made
  bool early_view(Program& prog, int64_t slot, int depth);

  // Index lists kept inline up to a few entries: a walk made two or three heap lists
  // per node (inputs, outputs, consumers), and their allocation and freeing were a third
  // of the walk's and the release's time on a decode step.
  using Ids = mx::SmallVector<uint32_t, 4>;

  struct Slot {
    std::optional<mx::array> arr;
    int32_t producer = -1;           // node index, -1 for a leaf
    uint32_t unfinished_uses = 0;    // consumers not yet finished
    uint32_t held_refs = 0;          // input references in undetached consumers
    Ids consumers;                   // distinct node indices
    bool output = false;
  };
  struct Node {
    const PrimInfo* prim;
    // prefetch hints for a replay (Graph::replay), taken at the walk and never read
    // through: output 0's ArrayDesc and its primitive
    const void* desc_addr = nullptr;
    const void* prim_addr = nullptr;
    Ids inputs;                      // slot per input, duplicates kept
    Ids outputs;                     // slot per output, primitive order
    bool finished = false;
    bool detached = false;
  };

  std::vector<std::pair<uintptr_t, uintptr_t>> cached_dev_;   // leaves(prog) hits: (key, device)
  std::vector<uint32_t> leaf_ids_;     // leaves(): the leaf slots, in order
  std::vector<mx::array> view_outs_;   // try_view's outputs, empty between calls

  uint32_t add_slot(const mx::array& a, int32_t producer);
  void build_nodes();
  void build_arrays();
  nb::tuple node_row(const Node& node);
  nb::tuple slot_row(const Slot& sl);
  Slot& slot_at(int64_t s, const char* what);
  mx::array& array_at(int64_t s, const char* what);
  Node& node_at(int64_t n, const char* what);
  // An output of an unfinished node that may receive data.
  mx::array& writable(int64_t s, const char* what);
  void inputs_ready(const Node& node, int64_t n, const char* what);
  void drop(uint32_t s);

  static std::vector<Slot>& spare_slots();
  static std::vector<Node>& spare_nodes();

  std::vector<Slot> slots_;
  std::vector<Node> nodes_;
  std::vector<uint32_t> outputs_;
  std::vector<std::pair<const PrimInfo*, int64_t>> view_counts_;
  nb::object nodes_cache_, arrays_cache_;
  uint64_t fingerprint_ = 0;
};

}  // namespace mlx_amd
