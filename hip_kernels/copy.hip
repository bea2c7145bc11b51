// Copy family: dtype conversion (MLX's AsType) and strided -> row-contiguous copies
// (Copy, Contiguous, non-viewable reshapes). The conversion rules are mlxa::cast.
#include "mlxa/elementwise.h"

// Every kernel is mlxa::op::Identity through unary_v / unary_g (elementwise.h).
#include "copy.inc"
