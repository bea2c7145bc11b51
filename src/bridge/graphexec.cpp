// Replayed launches as one CUDA/HIP graph (graphexec.h).
#include "graphexec.h"
#include "launcher.h"

#include <chrono>
#include <cstring>

#include <nanobind/stl/string.h>

namespace mlx_amd {

namespace {

struct GraphApi {
  bool ready = false, alive = false;
  int (*create)(void**, unsigned) = nullptr;
  int (*destroy)(void*) = nullptr;
  int (*add_kernel_node)(void**, void*, void* const*, size_t, const void*) = nullptr;
  int (*instantiate)(void**, void*, unsigned long long) = nullptr;
  int (*launch)(void*, void*) = nullptr;
  int (*set_params)(void*, void*, const void*) = nullptr;
  int (*exec_destroy)(void*) = nullptr;
  // the kernel-node parameter struct: size and field offsets (vendor-specific)
  size_t size = 0, func = 0, grid = 0, block = 0, shared = 0, kparams = 0, extra = 0;
};

GraphApi& api() {
  static auto* a = new GraphApi();   // leaked: Programs may die after static destruction
  return *a;
}

struct Counters {
  int64_t launches = 0, builds = 0, updates = 0, eager = 0, failures = 0;
  // host time in the driver's graph calls (ns): what a replayed step pays for its graph
  int64_t build_ns = 0, update_ns = 0, launch_ns = 0;
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}
Counters& counters() {
  static Counters c;
  return c;
}

// The parameter struct for one launch; `extra` and `size` must outlive the driver call.
struct Packed {
  std::vector<char> bytes;
  void* extra[5];
  size_t size;
  Packed(const LaunchRec& r, intptr_t param_end) : bytes(api().size, 0) {
    auto& a = api();
    size = r.args.size();
    extra[0] = reinterpret_cast<void*>(1);   // LAUNCH_PARAM_BUFFER_POINTER (both vendors)
    extra[1] = const_cast<char*>(r.args.data());
    extra[2] = reinterpret_cast<void*>(2);   // LAUNCH_PARAM_BUFFER_SIZE
    extra[3] = &size;
    extra[4] = reinterpret_cast<void*>(param_end);
    void* ex = size ? extra : nullptr;
    void* kp = nullptr;
    std::memcpy(bytes.data() + a.func, &r.function, sizeof(void*));
    std::memcpy(bytes.data() + a.grid, r.grid, 3 * sizeof(unsigned));
    std::memcpy(bytes.data() + a.block, r.block, 3 * sizeof(unsigned));
    std::memcpy(bytes.data() + a.shared, &r.shared_mem, sizeof(unsigned));
    std::memcpy(bytes.data() + a.kparams, &kp, sizeof(void*));
    std::memcpy(bytes.data() + a.extra, &ex, sizeof(void*));
  }
};

int build(GraphSegment& s, const std::vector<LaunchRec>& recs, intptr_t param_end) {
  auto& a = api();
  void* g = nullptr;
  if (int st = a.create(&g, 0)) return st;
  s.graph = reinterpret_cast<uintptr_t>(g);
  s.nodes.clear();
  void* prev = nullptr;
  for (auto& r : recs) {
    Packed p(r, param_end);
    void* node = nullptr;
    if (int st = a.add_kernel_node(&node, g, prev ? &prev : nullptr, prev ? 1 : 0, p.bytes.data())) {
      return st;
    }
    s.nodes.push_back(reinterpret_cast<uintptr_t>(node));
    prev = node;
  }
  void* exec = nullptr;
  if (int st = a.instantiate(&exec, g, 0)) return st;
  s.exec = reinterpret_cast<uintptr_t>(exec);
  return 0;
}

}  // namespace

bool LaunchRec::same_as(const LaunchRec& o) const {
  return function == o.function && shared_mem == o.shared_mem &&
         std::memcmp(grid, o.grid, sizeof grid) == 0 && std::memcmp(block, o.block, sizeof block) == 0 &&
         args == o.args;
}

void GraphSegment::release() {
  auto& a = api();
  if (a.alive) {
    if (exec) a.exec_destroy(reinterpret_cast<void*>(exec));
    if (graph) a.destroy(reinterpret_cast<void*>(graph));
  }
  exec = graph = 0;
  nodes.clear();
  current.clear();
}

GraphSegment::~GraphSegment() { release(); }

void GraphState::release() {
  launcher_quiesce();   // the launch thread may be issuing one of them (a no-op on it)
  segments.clear();
}

bool GraphState::has_graph() const {
  for (auto& s : segments) {
    if (s->exec) return true;
  }
  return false;
}

GraphSegment& GraphState::segment(size_t k) {
  while (segments.size() <= k) segments.push_back(std::make_unique<GraphSegment>());
  return *segments[k];
}

namespace {
int g_graph_after = 0;
size_t g_segment_first = 256, g_segment_most = 2048;
}

int graph_after() { return g_graph_after; }

size_t segment_launches(size_t k) {
  size_t n = g_segment_first;
  while (k-- > 0 && n < g_segment_most) n *= 2;
  return n < g_segment_most ? n : g_segment_most;
}

bool GraphState::wanted() {
  if (off) return false;
  if (has_graph() || eager_replays >= g_graph_after) return true;
  ++eager_replays;
  return false;
}

bool graph_api_ready() { return api().ready && api().alive; }

int launch_eager(const std::vector<LaunchRec>& recs, size_t from, uintptr_t entry,
                 intptr_t param_end, uintptr_t stream, size_t* failed) {
  for (size_t i = from; i < recs.size(); ++i) {
    auto& r = recs[i];
    int st = launch_blob(entry, param_end, r.function, r.grid, r.block, r.shared_mem, stream,
                         r.args.data(), r.args.size());
    if (st) {
      *failed = i;
      return st;
    }
  }
  return 0;
}

int graph_run(GraphState& state, size_t k, std::vector<LaunchRec>& recs, uintptr_t entry,
              intptr_t param_end, uintptr_t stream, const char** what) {
  auto& a = api();
  auto& c = counters();
  GraphSegment& s = state.segment(k);
  auto eager = [&]() {
    ++c.eager;
    size_t failed = 0;
    *what = "kernel launch";
    return launch_eager(recs, 0, entry, param_end, stream, &failed);
  };
  if (state.off || s.off || recs.empty()) return eager();
  bool same = s.exec != 0 && s.current.size() == recs.size();
  for (size_t i = 0; same && i < recs.size(); ++i) same = s.current[i].function == recs[i].function;
  if (!same) {
    if (s.exec && ++s.rebuilds_in_a_row > 3) {   // the sequence keeps changing: not worth it
      s.release();
      s.off = true;
      return eager();
    }
    s.release();
    const int64_t t0 = now_ns();
    const bool failed = build(s, recs, param_end);
    c.build_ns += now_ns() - t0;
    if (failed) {
      ++c.failures;
      state.release();
      state.off = true;
      return eager();
    }
    ++c.builds;
    s.current = recs;
  } else {
    s.rebuilds_in_a_row = 0;
    const int64_t t0 = now_ns();
    struct Charge {   // also when an update fails
      Counters& c;
      int64_t t0;
      ~Charge() { c.update_ns += now_ns() - t0; }
    } charge{c, t0};
    for (size_t i = 0; i < recs.size(); ++i) {
      if (s.current[i].same_as(recs[i])) continue;
      Packed p(recs[i], param_end);
      if (a.set_params(reinterpret_cast<void*>(s.exec), reinterpret_cast<void*>(s.nodes[i]),
                       p.bytes.data())) {
        ++c.failures;   // the graph no longer matches its records: drop them all
        state.release();
        state.off = true;
        return eager();
      }
      ++c.updates;
      s.current[i] = recs[i];
    }
  }
  ++c.launches;
  *what = "graph launch";
  const int64_t t0 = now_ns();
  const int st = a.launch(reinterpret_cast<void*>(s.exec), reinterpret_cast<void*>(stream));
  c.launch_ns += now_ns() - t0;
  return st;
}

void register_graphexec(nb::module_& m) {
  using namespace nb::literals;
  m.def("set_graph_api", [](nb::dict entries, nb::dict layout) {
    auto& a = api();
    auto fn = [&](const char* k) { return nb::cast<uintptr_t>(entries[k]); };
    a.create = reinterpret_cast<decltype(a.create)>(fn("graph_create"));
    a.destroy = reinterpret_cast<decltype(a.destroy)>(fn("graph_destroy"));
    a.add_kernel_node = reinterpret_cast<decltype(a.add_kernel_node)>(fn("graph_add_kernel_node"));
    a.instantiate = reinterpret_cast<decltype(a.instantiate)>(fn("graph_instantiate"));
    a.launch = reinterpret_cast<decltype(a.launch)>(fn("graph_launch"));
    a.set_params = reinterpret_cast<decltype(a.set_params)>(fn("graph_exec_kernel_node_set_params"));
    a.exec_destroy = reinterpret_cast<decltype(a.exec_destroy)>(fn("graph_exec_destroy"));
    auto off = [&](const char* k) { return nb::cast<size_t>(layout[k]); };
    a.size = off("size");
    a.func = off("func");
    a.grid = off("grid");
    a.block = off("block");
    a.shared = off("shared_mem");
    a.kparams = off("kernel_params");
    a.extra = off("extra");
    for (size_t o : {a.func, a.kparams, a.extra}) {
      if (o + sizeof(void*) > a.size) throw nb::value_error("set_graph_api: a pointer field lies outside the struct");
    }
    for (size_t o : {a.grid, a.block}) {
      if (o + 3 * sizeof(unsigned) > a.size) throw nb::value_error("set_graph_api: a dim3 field lies outside the struct");
    }
    if (a.shared + sizeof(unsigned) > a.size) throw nb::value_error("set_graph_api: shared_mem lies outside the struct");
    a.ready = a.alive = true;
  }, "entries"_a, "layout"_a,
  "driver entry points (addresses) of the graph calls and the kernel-node parameter "
  "struct layout (size and field offsets), from the driver table");
  m.def("graph_api_shutdown", []() { api().alive = false; },
        "the driver is going away: programs dropped later leak their graphs instead of "
        "calling into it");
  m.def("set_graph_after", [](int n) {
    if (n < 0) throw nb::value_error("set_graph_after: expected a count >= 0");
    g_graph_after = n;
  }, "n"_a, "replays of a program that launch eagerly before it is built into a graph");
  m.def("graph_after", &graph_after);
  m.def("set_graph_segments", [](size_t first, size_t most) {
    if (first < 1 || most < first) throw nb::value_error("set_graph_segments: expected 1 <= first <= most");
    g_segment_first = first;
    g_segment_most = most;
  }, "first"_a, "most"_a,
  "launches in a program's first graph segment; each next one doubles, up to `most`");
  m.def("graph_segments", []() { return nb::make_tuple(g_segment_first, g_segment_most); });
  m.def("graph_stats", []() {
    auto& c = counters();
    nb::dict d;
    d["launches"] = c.launches;
    d["builds"] = c.builds;
    d["node_updates"] = c.updates;
    d["eager_replays"] = c.eager;
    d["failures"] = c.failures;
    d["build_ns"] = c.build_ns;
    d["update_ns"] = c.update_ns;
    d["launch_ns"] = c.launch_ns;
    return d;
  }, "process-wide counts: graph launches, graph builds, kernel nodes updated, replays "
     "that launched eagerly after all, graphs dropped after a failed driver call; and the "
     "host time spent building graphs, updating their nodes and launching them (ns)");
}

}  // namespace mlx_amd
