// Kernel launches from native code (launch_blob in bridge.h): the driver's launch entry
// point is resolved once by the Python driver table and handed over by address, so there
// is one binding; this only saves the ctypes call (about 2 us of host time a launch).
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "bridge.h"

namespace mlx_amd {

int native_launch(uintptr_t entry, intptr_t param_end, uintptr_t function,
                  unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                  unsigned bz, unsigned shared_mem, uintptr_t stream,
                  const nb::bytes& args) {
  return launch_repeat(entry, param_end, function, gx, gy, gz, bx, by, bz, shared_mem,
                       stream, args, 1)
      .first;
}

int launch_refs(uintptr_t entry, intptr_t param_end, uintptr_t function, unsigned gx,
                unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                unsigned shared_mem, uintptr_t stream, const nb::bytes& tail,
                const nb::bytes& refs, const std::vector<uint64_t>& in_ptrs,
                const std::vector<uint64_t>& out_ptrs) {
  // refs: int64 triples (is_output, index, byte offset); empty: the inputs in order, then
  // the first output. The pointers, then the tail, are the kernel's argument struct.
  const auto* r = reinterpret_cast<const int64_t*>(refs.c_str());
  const size_t nref = refs.size() / (3 * sizeof(int64_t));
  const size_t nptr = nref ? nref : in_ptrs.size() + 1;
  if (!nref && out_ptrs.empty()) throw nb::value_error("launch_refs: no output pointer");
  std::string blob(nptr * sizeof(uint64_t) + tail.size(), '\0');
  auto* p = reinterpret_cast<uint64_t*>(blob.data());
  if (nref) {
    for (size_t i = 0; i < nref; ++i) {
      const auto& v = r[3 * i] ? out_ptrs : in_ptrs;
      const auto k = static_cast<size_t>(r[3 * i + 1]);
      if (k >= v.size()) throw nb::index_error("launch_refs: a reference past the pointers given");
      p[i] = v[k] + static_cast<uint64_t>(r[3 * i + 2]);
    }
  } else {
    std::memcpy(p, in_ptrs.data(), in_ptrs.size() * sizeof(uint64_t));
    p[in_ptrs.size()] = out_ptrs[0];
  }
  std::memcpy(blob.data() + nptr * sizeof(uint64_t), tail.c_str(), tail.size());
  const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  return launch_blob(entry, param_end, function, grid, block, shared_mem, stream, blob.data(),
                     blob.size());
}

std::pair<int, double> launch_repeat(uintptr_t entry, intptr_t param_end, uintptr_t function,
                                     unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                     unsigned by, unsigned bz, unsigned shared_mem,
                                     uintptr_t stream, const nb::bytes& args, int64_t count) {
  const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  for (int64_t i = 0; i < count && status == 0; ++i) {
    status = launch_blob(entry, param_end, function, grid, block, shared_mem, stream,
                         args.c_str(), args.size());
  }
  std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  return {status, dt.count()};
}

}  // namespace mlx_amd
