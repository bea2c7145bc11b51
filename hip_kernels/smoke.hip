// Smoke-test kernel for the driver tests (y = alpha * x + y over n floats), and a spin.
#include "mlxa/platform.h"

MLXA_GLOBAL void smoke_axpy_float32(SmokeArgs a) {
  for (long long i = mlxa::global_thread(); i < a.n; i += mlxa::grid_threads())
    a.y[i] = a.alpha * a.x[i] + a.y[i];
}

// One thread busy-waits ~cycles clock ticks. Benchmarks queue the work they time behind
// it, so device events around that work measure the GPU alone, not the host's launches.
MLXA_GLOBAL void smoke_spin(SpinArgs a) {
  const long long t0 = clock64();
  while (clock64() - t0 < a.cycles) {
  }
}

// smoke has no generated variants; build_kernels.py may still write an empty smoke.inc.
#if __has_include("smoke.inc")
#include "smoke.inc"
#endif
