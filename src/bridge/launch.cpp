// Kernel launches from native code: the driver's launch entry point
// (hipModuleLaunchKernel / cuLaunchKernel, the same prototype) is resolved once
// by the Python driver table and handed over by address, so there is one
// binding; this only saves the ctypes call (about 2 us of host time a launch).
#include <chrono>
#include <cstdint>
#include <utility>

#include "bridge.h"

namespace mlx_amd {

namespace {
using LaunchFn = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, unsigned, void*, void**, void**);
}  // namespace

int native_launch(uintptr_t entry, intptr_t param_end, uintptr_t function,
                  unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                  unsigned bz, unsigned shared_mem, uintptr_t stream,
                  const nb::bytes& args) {
  return launch_repeat(entry, param_end, function, gx, gy, gz, bx, by, bz, shared_mem,
                       stream, args, 1)
      .first;
}

std::pair<int, double> launch_repeat(uintptr_t entry, intptr_t param_end, uintptr_t function,
                                     unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                     unsigned by, unsigned bz, unsigned shared_mem,
                                     uintptr_t stream, const nb::bytes& args, int64_t count) {
  // The argument blob goes through the vendors' "extra" mechanism: BUFFER_POINTER
  // (1), BUFFER_SIZE (2), END (0 on CUDA, 3 on HIP: passed in).
  size_t size = args.size();
  void* extra[5] = {reinterpret_cast<void*>(1), const_cast<char*>(args.c_str()),
                    reinterpret_cast<void*>(2), &size,
                    reinterpret_cast<void*>(param_end)};
  auto fn = reinterpret_cast<LaunchFn>(entry);
  auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  for (int64_t i = 0; i < count && status == 0; ++i) {
    status = fn(reinterpret_cast<void*>(function), gx, gy, gz, bx, by, bz, shared_mem,
                reinterpret_cast<void*>(stream), nullptr, size ? extra : nullptr);
  }
  std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  return {status, dt.count()};
}

}  // namespace mlx_amd
