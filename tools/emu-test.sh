#!/usr/bin/env bash
# The GPU suite on the kernel emulator, on a machine without a GPU (docs/architecture.md,
# "The kernel emulator"): builds the emulator's kernels (build_kernels.py --target emu, into
# build/emu-kernels; cached like every target), then runs the GPU tests with MLX_AMD_DRIVER=emu
# at wave 32 (graph replays once more with graphs on), and the wave-dependent families and the
# emulator's own tests natively at wave 64.
# Left out: `vendor` tests (vendor libraries: none on the emulator) and `large` ones (minutes
# each there; they run on GPUs). Extra arguments go to every pytest run.
#
#   tools/emu-test.sh                 # PYTHON (default .venv/bin/python) with mlx_amd installed
#   PYTHON=python3 tools/emu-test.sh -x
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
KDIR=$(realpath -m "${MLX_AMD_EMU_KERNEL_DIR:-build/emu-kernels}")   # absolute: tests start subprocesses
"$PY" build_kernels.py --target emu --out-dir "$KDIR" -j "$(nproc)" >/dev/null
"$PY" build_kernels.py check --out-dir "$KDIR"
export MLX_AMD_DRIVER=emu MLX_AMD_KERNEL_DIR="$KDIR"
# The emulator runs a launch on one core: tests spread over every core (pytest-xdist, in the
# test extras) take the CI run from ~11 to ~7 minutes on two cores.
# At most one worker per 4 GiB available: each is its own emulated device (memory taken lazily).
NW=$(nproc)
MEM_GIB=$(awk '/^MemAvailable:/ {print int($2 / 1048576)}' /proc/meminfo 2>/dev/null || echo 0)
if (( MEM_GIB / 4 < NW )); then NW=$(( MEM_GIB / 4 )); fi
XD=()
if (( NW > 1 )) && "$PY" -c "import xdist" 2>/dev/null; then XD=(-n "$NW"); fi
MARK="gpu and not vendor and not large"
echo "== kernel emulator, wave 32: pytest -m '$MARK' tests"
MLX_AMD_EMU_WAVE=32 "$PY" -P -m pytest -q -p no:cacheprovider -m "$MARK" "${XD[@]}" tests "$@"
echo "== kernel emulator, wave 32, graphs on (MLX_AMD_GRAPHS=1: through the self-test, as on AMD)"
MLX_AMD_EMU_WAVE=32 MLX_AMD_GRAPHS=1 "$PY" -P -m pytest -q -p no:cacheprovider -m "$MARK" \
  tests/runtime/test_graphs_gpu.py tests/runtime/test_replay_gpu.py tests/runtime/test_siblings_gpu.py -k "not eager" "${XD[@]}" "$@"
# (the tests' w32 variants would run at the device's 64 again: -k leaves them out)
# (attention: its kernels are written for 32-lane groups, and a 64-wide wave holds two of them,
# which the SDPA decode combine once got wrong; quantized: qmv_h2's wave-width template)
echo "== kernel emulator, wave 64: the wave-dependent families"
MLX_AMD_EMU_WAVE=64 "$PY" -P -m pytest -q -p no:cacheprovider -m "$MARK or not gpu" -k "not w32" \
  tests/ops/test_reduce_gpu.py tests/ops/test_scan_gpu.py tests/ops/test_sort_gpu.py \
  tests/ops/test_softmax_gpu.py tests/ops/test_norm_gpu.py tests/ops/test_sdpa_gpu.py \
  tests/ops/test_quantized_gpu.py tests/driver/test_emu.py "${XD[@]}" "$@"
