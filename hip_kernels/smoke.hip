// Smoke-test kernel for the driver tests: y = alpha * x + y over n floats.
#include "mlxa/platform.h"

MLXA_GLOBAL void smoke_axpy_float32(SmokeArgs a) {
  for (long long i = mlxa::global_thread(); i < a.n; i += mlxa::grid_threads())
    a.y[i] = a.alpha * a.x[i] + a.y[i];
}

// smoke has no generated variants; build_kernels.py may still write an empty smoke.inc.
#if __has_include("smoke.inc")
#include "smoke.inc"
#endif
