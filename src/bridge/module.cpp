// mlx_amd._bridge: nanobind module. Built with NB_STATIC + NB_DOMAIN mlx and
// the nanobind release of the mlx wheel (3.0.x), so mx.array objects arrive
// here as mlx::core::array handles sharing the graph with Python.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <string>

#include "fast.h"
#include "pool.h"
#include "graph.h"
#include "launcher.h"
#include "mlx/version.h"

namespace nb = nanobind;
using namespace nb::literals;
namespace mx = mlx::core;
using mlx_amd::Graph;

#define MLXA_STR2(x) #x
#define MLXA_STR(x) MLXA_STR2(x)

static const char* kCompiledMlx = MLXA_STR(MLX_VERSION_MAJOR) "." MLXA_STR(
    MLX_VERSION_MINOR) "." MLXA_STR(MLX_VERSION_PATCH);
static const char* kNanobind = MLXA_STR(NB_VERSION_MAJOR) "." MLXA_STR(
    NB_VERSION_MINOR) "." MLXA_STR(NB_VERSION_PATCH);
// The only MLX whose class layouts and inline state() accessors we read.
static const char* kPinnedMlx = "0.32.4";

NB_MODULE(_bridge, m) {
  m.doc() = "mlx-amd's bridge into MLX's lazy graph (see mlx_amd.runtime.bridge)";

  const char* runtime = mx::version();
  if (std::strcmp(runtime, kCompiledMlx) != 0 ||
      std::strcmp(runtime, kPinnedMlx) != 0) {
    throw nb::import_error(
        (std::string("mlx_amd._bridge: loaded libmlx is MLX ") + runtime +
         ", the bridge was compiled against MLX " + kCompiledMlx +
         " and supports only MLX " + kPinnedMlx)
            .c_str());
  }

  m.def("versions", []() {
    nb::dict d;
    d["mlx_runtime"] = mx::version();
    d["mlx_compiled"] = kCompiledMlx;
    d["nanobind"] = kNanobind;
    return d;
  }, "MLX version of the loaded libmlx, MLX version compiled against, nanobind version.");

  m.def("probe", [](const mx::array&) { return true; }, "a"_a,
        "True when an mx.array converts (same nanobind ABI and domain as mlx.core); "
        "TypeError otherwise.");

  m.def("buffer_info", [](const mx::array& a) { return mlx_amd::buffer_info(a); },
        "a"_a, "Graph.info()'s tuple for a plain mx.array, or None without data.");

  m.def("drain_freed", &mlx_amd::drain_freed,
        "Tokens of attached buffers whose MLX Data died since the last call.");
  m.def("live", &mlx_amd::live_buffers,
        "(count, bytes) of attached buffers not yet freed.");
  m.def("expired", &mlx_amd::expired_keys,
        "Keys of watched buffers whose Data died since the last call (each once).");

  m.def("launch", &mlx_amd::native_launch, "entry"_a, "param_end"_a, "function"_a,
        "gx"_a, "gy"_a, "gz"_a, "bx"_a, "by"_a, "bz"_a, "shared_mem"_a, "stream"_a,
        "args"_a,
        "Launch a kernel through the driver entry point at `entry`; returns its status.");
  m.def("launch_refs", &mlx_amd::launch_refs, "entry"_a, "param_end"_a, "function"_a,
        "gx"_a, "gy"_a, "gz"_a, "bx"_a, "by"_a, "bz"_a, "shared_mem"_a, "stream"_a,
        "tail"_a, "refs"_a, "in_ptrs"_a, "out_ptrs"_a,
        "Launch with the argument struct built here: pointers from refs (int64 triples "
        "is_output, index, offset; empty: inputs then the first output), then tail.");
  m.def("launch_repeat", &mlx_amd::launch_repeat, "entry"_a, "param_end"_a, "function"_a,
        "gx"_a, "gy"_a, "gz"_a, "bx"_a, "by"_a, "bz"_a, "shared_mem"_a, "stream"_a,
        "args"_a, "count"_a,
        "The same launch `count` times from native code: (status, seconds), the driver's "
        "own cost of a launch.");

  mlx_amd::register_fast(m);
  mlx_amd::register_pool(m);
  mlx_amd::register_graphexec(m);
  mlx_amd::register_launcher(m);

  nb::class_<Graph>(m, "Graph",
                    "One walk of the unevaluated graph behind `outputs`.")
      .def(nb::init<const std::vector<mx::array>&, bool>(), "outputs"_a,
           "async_"_a = false)
      .def_prop_ro("nodes", &Graph::nodes,
                   "[(prim, params, input slots, output slots)] in topological order")
      .def_prop_ro("arrays", &Graph::arrays, "[(shape, dtype, is_leaf)] per slot")
      .def_prop_ro("outputs", &Graph::outputs, "slot of each given output")
      .def("table", [](Graph& g) { return nb::make_tuple(g.nodes(), g.arrays()); },
           "(nodes, arrays) in one call")
      .def("info", &Graph::info, "slot"_a)
      .def("node_key", &Graph::node_key, "node"_a,
           "(key bytes, [info(s)], [itemsize] per input) of a node; None when an input has no data")
      .def("view_node", &Graph::view_node, "node"_a, "program"_a.none() = nb::none(),
           "try_view, record as a view and finish: False (nothing done), True, or freed tokens")
      .def("run_views", &Graph::run_views, "node"_a, "program"_a.none() = nb::none(),
           "view_node from `node` on while nodes are views MLX would not copy and not finished: "
           "(index of the first node left, freed tokens or None)")
      .def("view_counts", &Graph::view_counts, "[(primitive, views run_views made)] since the last call")
      .def("attach", &Graph::attach, "slot"_a, "host_ptr"_a, "token"_a)
      .def("view",
           [](Graph& g, int64_t out, int64_t in, const std::vector<int64_t>& st,
              int64_t off) {
             g.view(out, in, mx::Strides(st.begin(), st.end()), off);
           },
           "out_slot"_a, "in_slot"_a, "strides"_a, "offset_elems"_a = 0)
      .def("try_view", &Graph::try_view, "node"_a)
      .def("share", &Graph::share, "out_slot"_a, "in_slot"_a)
      .def("donatable", &Graph::donatable, "slot"_a)
      .def("eval_cpu", &Graph::eval_cpu, "node"_a)
      .def(
          "finish",
          [](Graph& g, int64_t n, bool drain) -> nb::object {
            g.finish(n);
            // the evaluator's per-node pair (finish, then drain_freed) in one call
            if (drain && mlx_amd::any_freed()) return nb::cast(mlx_amd::drain_freed());
            return nb::none();
          },
          "node"_a, "drain"_a = false,
          "Mark node n computed; with drain, also return drain_freed()'s tokens (None: none)")
      .def("finished", &Graph::finished, "node"_a, "whether node n is computed")
      .def("watch", &Graph::watch, "slot"_a)
      .def("release", &Graph::release)
      .def("__len__", &Graph::num_nodes)
      .def("node", &Graph::node, "n"_a, "nodes()[n], without building the table")
      .def("meta", &Graph::meta, "slot"_a, "arrays()[slot], without building the table")
      .def_prop_ro("fingerprint", &Graph::fingerprint,
                   "hash of the structure: primitive classes and topology")
      .def("record", &Graph::record, "program"_a, "node"_a, "kind"_a,
           "snapshot node's primitive and input layouts into the program "
           "(kind 0 Python, 1 view, 2 GPU, 3 sibling: computed by an earlier GPU node); "
           "before finish()")
      .def("leaves", &Graph::leaves, "program"_a.none() = nb::none(), "consts"_a.none() = nb::none(),
           "[(slot, key, host_ptr, buffer_nbytes, token, ndim, size, const_nbytes)] per leaf "
           "with data (const_nbytes: the bytes a small MLX-owned constant is cached by, else 0); "
           "with a program, only the leaves its leaf cache does not hold, and with a "
           "ConstCache only the small MLX-owned constants whose bytes it lacks (replay() "
           "adds the others' device addresses)")
      .def("leaf_hits", &Graph::leaf_hits,
           "{key: device address} of the leaves the last leaves() call left out because "
           "its program or ConstCache holds them")
      .def("replay", &Graph::replay, "program"_a, "leaf_dev"_a, "outputs"_a,
           "arena"_a, "entry"_a, "param_end"_a, "stream"_a, "node_cb"_a,
           "error_cb"_a, "graphs"_a = false, "threaded"_a = false,
           "run the graph through a recorded program (src/bridge/replay.h); "
           "returns ([(key, lo, hi)] written, nodes run in Python); fresh output "
           "buffers come from `outputs` (an Outputs table) and stay there until adopted; "
           "graphs: launch through the program's CUDA/HIP graph (graphexec.h); threaded: "
           "post the launches to the launch thread (launcher.h) instead of issuing them");
  nb::class_<mlx_amd::ConstCache>(m, "ConstCache",
                                  "device copies of small constant leaves, by their bytes "
                                  "(src/bridge/replay.h)")
      .def(nb::init<>())
      .def("add", &mlx_amd::ConstCache::add, "entries"_a, "[(bytes, device address)]")
      .def("find", [](const mlx_amd::ConstCache& c, nb::bytes b) -> nb::object {
        const uintptr_t* d = c.find(b.c_str(), b.size());
        return d ? nb::cast(*d) : nb::none();
      }, "value"_a, "the device address of a value's copy, or None")
      .def("clear", &mlx_amd::ConstCache::clear)
      .def("__len__", &mlx_amd::ConstCache::size);
  m.attr("ConstCache").attr("MAX_BYTES") = mlx_amd::ConstCache::kMaxBytes;
  m.attr("ConstCache").attr("MAX_ELEMENTS") = mlx_amd::ConstCache::kMaxElements;
  nb::class_<mlx_amd::Program>(m, "Program", "a recorded evaluation of one graph structure")
      .def(nb::init<uint64_t, size_t>(), "fingerprint"_a, "num_nodes"_a)
      .def_prop_ro("fingerprint", &mlx_amd::Program::fingerprint)
      .def("__len__", &mlx_amd::Program::num_nodes)
      .def("buffer_sizes", &mlx_amd::Program::buffer_sizes)
      .def_prop_ro("arena_bytes", &mlx_amd::Program::arena_bytes)
      .def_prop_rw("zero_base", &mlx_amd::Program::zero_base, &mlx_amd::Program::set_zero_base,
                   "device address of the runtime's zeroed scratch, for 'z' references")
      .def("set_gpu", &mlx_amd::Program::set_gpu, "node"_a, "out_nbytes"_a,
           "donate"_a, "written"_a, "steps"_a, "temp_bytes"_a,
           "rebind"_a = nb::none())
      .def("set_siblings", &mlx_amd::Program::set_siblings, "node"_a, "siblings"_a,
           "GPU node `node` also computes these later nodes (recorded as kind 3) in its "
           "steps, whose references count their inputs and outputs after its own; before set_gpu")
      .def("kinds", &mlx_amd::Program::kinds)
      .def("cache_leaves", &mlx_amd::Program::cache_leaves, "entries"_a,
           "remember [(key, host_ptr, buffer_nbytes, device_ptr)] of resident leaves")
      .def("forget_leaves", &mlx_amd::Program::forget_leaves, "keys"_a)
      .def("clear_leaves", &mlx_amd::Program::clear_leaves)
      .def_prop_ro("cached_leaves", &mlx_amd::Program::cached_leaves)
      .def("release_graph", [](mlx_amd::Program& p) { p.graph().release(); },
           "destroy its CUDA/HIP graphs now (the program stays usable)")
      .def_prop_ro("has_graph", [](mlx_amd::Program& p) { return p.graph().has_graph(); })
      .def_prop_ro("graph_segments", [](mlx_amd::Program& p) {
        size_t n = 0;
        for (auto& s : p.graph().segments) n += s->exec != 0;
        return n;
      }, "its graph segments that hold a graph now")
      .def_prop_ro("graph_off", [](mlx_amd::Program& p) { return p.graph().off; });
}
