// The fused sub-graph of an mx.compile'd `Compiled` node, as plain Python data.
//
// Compiled has no state() accessor; its inputs_, outputs_, tape_ and
// constant_ids_ are private members declared in the wheel's primitives.h. They
// are reached with the same explicit-instantiation technique graph.cpp uses for
// array::array_desc_ (an explicit instantiation's template arguments are not
// access-checked), so nothing depends on the class layout.
//
// The description (a hashable tuple, the node's `params`):
//   ("tape", inputs, tape, outputs, arrays)
//   inputs   per Compiled input: (array id, is_constant)
//   tape     per tape node: (primitive class, params, input ids, output ids)
//   outputs  array id per Compiled output (node output order)
//   arrays   per array id: (shape, dtype) as MLX's tape holds them
// Array ids number the inputs first (0..n-1), then tape outputs in tape order.
// An input of a tape node that is neither a Compiled input nor an earlier tape
// array gets id -1 (the runtime then leaves the node to MLX's CPU fallback).
// Under shapeless compilation MLX reuses the same Compiled primitive (and tape,
// with the trace's shapes) for every call, so the description does not change
// with the call's shapes; the runtime takes real shapes from the node's inputs.
#include <unordered_map>
#include <unordered_set>

#include "bridge.h"

namespace mlx_amd {

namespace {

template <typename Tag, auto M>
struct CompiledAccess {
  friend auto member(Tag) { return M; }
};

struct InputsTag {};
struct OutputsTag {};
struct TapeTag {};
struct ConstantsTag {};

template struct CompiledAccess<InputsTag, &mx::Compiled::inputs_>;
template struct CompiledAccess<OutputsTag, &mx::Compiled::outputs_>;
template struct CompiledAccess<TapeTag, &mx::Compiled::tape_>;
template struct CompiledAccess<ConstantsTag, &mx::Compiled::constant_ids_>;

auto member(InputsTag);
auto member(OutputsTag);
auto member(TapeTag);
auto member(ConstantsTag);

}  // namespace

nb::object compiled_params(mx::Primitive& p) {
  auto& c = static_cast<mx::Compiled&>(p);
  const std::vector<mx::array>& inputs = c.*member(InputsTag{});
  const std::vector<mx::array>& outputs = c.*member(OutputsTag{});
  const std::vector<mx::array>& tape = c.*member(TapeTag{});
  const std::unordered_set<uintptr_t>& constants = c.*member(ConstantsTag{});

  std::unordered_map<uintptr_t, int64_t> ids;
  nb::list arrays;
  auto add = [&](const mx::array& a) -> int64_t {
    auto it = ids.find(a.id());
    if (it != ids.end()) return it->second;
    auto id = static_cast<int64_t>(ids.size());
    ids.emplace(a.id(), id);
    arrays.append(nb::make_tuple(int_tuple(a.shape()), nb::str(dtype_name(a.dtype()))));
    return id;
  };
  auto find = [&](const mx::array& a) -> int64_t {
    auto it = ids.find(a.id());
    return it == ids.end() ? -1 : it->second;
  };

  nb::list ins;
  for (const auto& a : inputs) {
    int64_t id = add(a);
    ins.append(nb::make_tuple(id, nb::bool_(constants.count(a.id()) != 0)));
  }

  nb::list nodes;
  for (const auto& a : tape) {
    if (!a.has_primitive()) {
      // MLX's tape holds only primitive outputs; anything else is not ours to fuse.
      nodes.append(nb::make_tuple(nb::str("<no primitive>"), nb::none(), nb::tuple(),
                                  nb::make_tuple(add(a))));
      continue;
    }
    std::vector<int64_t> in_ids, out_ids;
    for (const auto& in : a.inputs()) in_ids.push_back(find(in));
    // One tape entry per primitive: its siblings are the other outputs.
    for (const auto& o : a.outputs()) out_ids.push_back(add(o));
    auto& prim = a.primitive();
    const PrimInfo& info = prim_info(prim);
    nb::object params = info.params ? info.params(prim) : nb::none();
    nodes.append(nb::make_tuple(info.name, params, int_tuple(in_ids), int_tuple(out_ids)));
  }

  std::vector<int64_t> out_ids;
  for (const auto& o : outputs) out_ids.push_back(find(o));

  return nb::make_tuple(nb::str("tape"), nb::tuple(ins), nb::tuple(nodes),
                        int_tuple(out_ids), nb::tuple(arrays));
}

}  // namespace mlx_amd
