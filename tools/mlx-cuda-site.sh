#!/usr/bin/env bash
# The reference engine on the offline H200: MLX's own CUDA backend (mlx-cuda-13==0.32.4),
# installed into its own site folder next to ours, for benchmarks/llm_vs_mlx_cuda.py.
#
#   tools/mlx-cuda-site.sh STASH WHEELS SITE
#     STASH   folder holding mlxc.part-* (the mlx-cuda-13 wheel split into <= 45 MB parts:
#             one transfer to the device is limited, so the parts come in separate calls
#             while the machine stays warm) and `sha` (sha256sum of the whole wheel)
#     WHEELS  folder with the mlx (cp312) and mlx-lm wheels (.whl/)
#     SITE    where to install (e.g. /tmp/mlxcuda); then run with PYTHONPATH=SITE and
#             CUDA_HOME=/usr/local/cuda (headers for its JIT)
# Here, before: pip download --no-deps --only-binary=:all: --python-version 3.12
#   --implementation cp --platform manylinux_2_35_x86_64 mlx-cuda-13==0.32.4;
#   split -b 45M <wheel> mlxc.part-; sha256sum <wheel> > sha
set -euo pipefail
STASH=$1 WHEELS=$2 SITE=$3
W=mlx_cuda_13-0.32.4-py3-none-manylinux_2_35_x86_64.whl
cat "$STASH"/mlxc.part-* > "$STASH/$W"
(cd "$STASH" && sha256sum -c sha)
python3 -m pip install -q --no-index --no-deps --target "$SITE" "$STASH/$W" "$WHEELS"/mlx-0.32.4-*.whl \
  "$WHEELS"/mlx_lm-*.whl
# libmlx looks for the CUDA runtime libraries in $ORIGIN/../../nvidia/*/lib: the image's
ln -sfn "$(python3 -c 'import site; print(site.getsitepackages()[0])')/nvidia" "$SITE/nvidia"
echo "mlx-cuda-13 in $SITE"
