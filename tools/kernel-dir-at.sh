#!/usr/bin/env bash
# The NVIDIA kernel directory of another revision, for A/Bs of kernel builds in one GPU run:
#
#   tools/kernel-dir-at.sh REV OUTDIR        e.g. tools/kernel-dir-at.sh HEAD~3 .carry/kold
#
# builds REV's hip_kernels for sm_90 (a temporary worktree, this machine's nvcc, the object
# cache of MLX_AMD_KERNEL_CACHE, so only the families that differ compile) into OUTDIR/manifest.json
# and OUTDIR/sm_90. On the GPU machine a process then loads it with MLX_AMD_KERNEL_DIR=OUTDIR
# (tools/sdpa_decode_probe.py, tools/sdpa_prefill_probe.py, alternating with this tree's kernels).
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 REV OUTDIR" >&2; exit 2; }
REPO=$(cd "$(dirname "$0")/.." && pwd)
rev=$1
out=$(mkdir -p "$2" && cd "$2" && pwd)
PY=${PYTHON:-python3}
wt=$(mktemp -d)
trap 'git -C "$REPO" worktree remove --force "$wt" >/dev/null 2>&1 || rm -rf "$wt"' EXIT
git -C "$REPO" worktree add -q --detach "$wt" "$rev"
(cd "$wt" && "$PY" build_kernels.py --target nvidia -j "$(nproc)" --out-dir "$out")
echo "kernels of $(git -C "$REPO" rev-parse --short "$rev") in $out"
