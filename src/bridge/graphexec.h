// A replay's kernel launches as CUDA/HIP graphs (docs/architecture.md, "Graphs").
//
// A replay collects its launches (function, grid, block, shared memory, packed
// arguments) instead of issuing them one by one, in segments (GraphState). When a
// segment's graph has the same launch sequence (same functions), only the nodes
// whose grid or arguments changed get new parameters (graph-exec kernel-node
// update) and the graph is launched once; otherwise it is built again from the
// sequence. A replay that must run something else in order with them midway (a
// vendor-library call, native or through Python; a node planned in Python)
// issues what it collected eagerly and goes on eagerly. The driver entry points
// and the parameter struct layout (CUDA's and HIP's differ) come from the driver
// table in Python (set_graph_api), which CI checks against the vendors' headers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bridge.h"

namespace mlx_amd {

struct LaunchRec {
  uintptr_t function = 0;
  unsigned grid[3] = {0, 0, 0}, block[3] = {1, 1, 1};
  unsigned shared_mem = 0;
  std::string args;   // packed argument buffer
  bool same_as(const LaunchRec& o) const;
};

// One CUDA/HIP graph: a run of consecutive launches of a program.
struct GraphSegment {
  uintptr_t graph = 0, exec = 0;
  std::vector<uintptr_t> nodes;     // kernel nodes, in launch order
  std::vector<LaunchRec> current;   // what each node holds now
  int rebuilds_in_a_row = 0;
  bool off = false;                 // its launch sequence keeps changing: eager
  GraphSegment() = default;
  GraphSegment(const GraphSegment&) = delete;   // it owns its graph (a copy would destroy it twice)
  GraphSegment& operator=(const GraphSegment&) = delete;
  ~GraphSegment();
  void release();
};

// per Program: its launches as graph segments. A replay hands a segment over as soon as it
// has collected segment_launches(k) launches, so the GPU starts on the first ones while the
// host still collects the rest (one graph at the end left the GPU idle for the whole host
// walk: a 10k-kernel step on the H100 spent 5.6 ms in one blocking graph launch after
// ~20 ms of collecting); segments grow geometrically, so a decode step is 1-2 of them.
struct GraphState {
  std::vector<std::unique_ptr<GraphSegment>> segments;
  int eager_replays = 0;            // replays before its first graph (graph_after())
  bool off = false;                 // a driver call failed: the program launches eagerly
  GraphState() = default;
  GraphState(const GraphState&) = delete;   // the graphs are its own (a copy would destroy them twice)
  GraphState& operator=(const GraphState&) = delete;
  // May this replay collect its launches for graphs? Only programs that keep coming back
  // get them (graph_after(): a build costs about two launches saved on the H200).
  bool wanted();
  bool has_graph() const;
  GraphSegment& segment(size_t k);
  void release();
};

bool graph_api_ready();
int graph_after();   // replays of a program that launch eagerly before it gets a graph
size_t segment_launches(size_t k);   // launches in segment k (set_graph_segments)
// Launch `recs` as segment `k` of the program's graphs. Returns 0, or the failing driver
// status (*what names the call). A graph that cannot be built turns the program's graphs
// off and the launches are issued eagerly instead.
int graph_run(GraphState& state, size_t k, std::vector<LaunchRec>& recs, uintptr_t entry,
              intptr_t param_end, uintptr_t stream, const char** what);
// the eager way: each record through the launch entry; 0 or the first failing status
int launch_eager(const std::vector<LaunchRec>& recs, size_t from, uintptr_t entry,
                 intptr_t param_end, uintptr_t stream, size_t* failed);

void register_graphexec(nb::module_& m);

}  // namespace mlx_amd
