#!/usr/bin/env bash
# mlx-amd against MLX-CUDA in alternating rounds (benchmarks/llm_vs_mlx_cuda.py --round), on the
# GPU machine after tools/gpu-test.sh installed the package and tools/mlx-cuda-site.sh MLX-CUDA:
#
#   tools/llm-compare.sh ROUNDS PART_DIR OUT_DIR [benchmark flags: --shapes … --quant … --runs …]
#
# Each round runs MLX-CUDA, then ours, each in its own process; --combine then takes the median
# over rounds. Environment: MLX_CUDA_SITE (default /tmp/mlxcuda), MLX_AMD_SITE (/tmp/mlx-amd-site),
# MLX_AMD_SRC (a copy of the package for MLX-CUDA's process to import mlx_amd.llm from).
set -euo pipefail
ROUNDS=$1 PART=$2 OUTD=$3; shift 3
REPO=$(cd "$(dirname "$0")/.." && pwd)
B="python3 $REPO/benchmarks/llm_vs_mlx_cuda.py"
CUDA_SITE=${MLX_CUDA_SITE:-/tmp/mlxcuda} SITE=${MLX_AMD_SITE:-/tmp/mlx-amd-site} SRC=${MLX_AMD_SRC:-/tmp/src}
mkdir -p "$PART" "$OUTD"
for ((r = 0; r < ROUNDS; r++)); do
  CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONPATH=$CUDA_SITE:$SRC $B --engine mlx-cuda --part "$PART" --round $r "$@"
  PYTHONPATH=$SITE MLX_AMD_DRIVER=${MLX_AMD_DRIVER:-cuda} $B --engine ours --part "$PART" --round $r "$@"
done
PYTHONPATH=$SITE $B --combine "$PART" --out "$OUTD"
