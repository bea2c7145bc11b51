#!/usr/bin/env bash
# The GPU test recipe, the same every session: on a machine with a GPU (the NVIDIA
# H200 test machine, through the CUDA driver; or an AMD GPU through HIP) build the
# kernels for it, install the package, run `pytest -m gpu`, then the benchmarks.
#
#   tools/gpu-test.sh [pytest args…]          e.g. tools/gpu-test.sh -x -k evaluator
#   MLX_AMD_SKIP_TESTS=1 / MLX_AMD_SKIP_BENCH=1 / MLX_AMD_SKIP_EXAMPLES=1 leave out the
#   tests / the benchmarks / the two examples (a lease short of device time)
#   MLX_AMD_PREBUILT=1 uses (and checks) the kernels already in mlx_amd/kernels, e.g. sm_90
#   cubins built on a CPU machine with the same nvcc and carried over (saves ~2 minutes);
#   MLX_AMD_PREBUILT_TARGET=sm_90 first trims the manifest to that one target, so only
#   mlx_amd/kernels/sm_90 and manifest.json need to travel (the AMD objects are ~20 MB)
#   (e.g. to set up and then profile: MLX_AMD_SKIP_TESTS=1 MLX_AMD_SKIP_BENCH=1 tools/gpu-test.sh && ncu …)
#
# Offline machines: put the wheels the image lacks in .whl/ (mlx, mlx-cpu for the
# machine's Python, nanobind==3.0.1); they are installed into $MLX_AMD_SITE first.
# Results and logs go to $OUT (the device tool's folder) when set, else ./gpu-out.
# MLX_AMD_PACK=1 packs them into one gpu-out.tgz there at the end (the device tool brings
# back only a few files per call).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
SITE=${MLX_AMD_SITE:-/tmp/mlx-amd-site}
OUTDIR=${OUT:-$REPO/gpu-out}
mkdir -p "$SITE" "$OUTDIR"
PY=${PYTHON:-python3}
t0=$SECONDS
step() { printf '\n== %s (t=%ds)\n' "$*" $((SECONDS - t0)); }

if compgen -G ".whl/*.whl" >/dev/null; then
  step "wheels from .whl/"
  $PY -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" .whl/*.whl
fi
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}

if [[ ${MLX_AMD_DRIVER:-} == hip ]] || { [[ -z ${MLX_AMD_DRIVER:-} ]] && command -v hipcc >/dev/null; }; then
  TARGET=amd
else
  TARGET=nvidia; export MLX_AMD_DRIVER=${MLX_AMD_DRIVER:-cuda}
fi
if [[ -n ${MLX_AMD_PREBUILT:-} ]]; then
  # kernels built elsewhere (same sources, same compiler) and carried here: only verify them
  step "kernels ($TARGET): prebuilt, checking"
  if [[ -n ${MLX_AMD_PREBUILT_TARGET:-} ]]; then
    $PY - "$MLX_AMD_PREBUILT_TARGET" <<'PY'
import json, sys
p, keep = "mlx_amd/kernels/manifest.json", sys.argv[1]
m = json.load(open(p))
if keep not in m["targets"]:
    sys.exit(f"MLX_AMD_PREBUILT_TARGET={keep}: the manifest has no such target ({sorted(m['targets'])})")
m["targets"] = {keep: m["targets"][keep]}
json.dump(m, open(p, "w"), indent=1)
PY
  fi
  $PY build_kernels.py check
else
  step "kernels ($TARGET)"
  $PY build_kernels.py --target "$TARGET" -j "$(nproc)"
fi

step "package (bridge against the installed mlx wheel)"
$PY -m pip install -q --no-index --no-deps --no-build-isolation --upgrade --target "$SITE" \
  --config-settings=cmake.define.CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" . 2>&1 | tail -20

step "mlx-amd info"
(cd /tmp && $PY -m mlx_amd info --json | tee "$OUTDIR/info.json")

rc=0
if [[ -z ${MLX_AMD_SKIP_TESTS:-} ]]; then
step "pytest -m gpu"
set +e
# Run from /tmp so the source tree does not shadow the installed package.
(cd /tmp && $PY -m pytest -c "$REPO/pyproject.toml" --rootdir "$REPO" -m gpu -q \
  --junitxml="$OUTDIR/gpu-tests.xml" "$@" "$REPO/tests" 2>&1 | tee "$OUTDIR/gpu-tests.log")
rc=$?  # pipefail: pytest's status
set -e
fi

if [[ -z ${MLX_AMD_SKIP_EXAMPLES:-} ]]; then
step "example: unmodified mlx.nn training loop (mlx_amd enabled on import)"
(cd /tmp && MLX_AMD_AUTO=1 $PY "$REPO/examples/train_mlp.py" 2>&1 | tee "$OUTDIR/train_mlp.txt") || rc=1

step "example: LoRA fine-tuning with mlx-lm's own trainer, against plain MLX"
(cd /tmp && $PY "$REPO/examples/lora.py" --compare 2>&1 | grep -v "^  .*[░█]" | tee "$OUTDIR/lora.txt") || rc=1
fi

if [[ -z ${MLX_AMD_SKIP_BENCH:-} ]]; then
  for b in benchmarks/*.py; do
    [[ $b == benchmarks/harness.py ]] && continue
    step "benchmark $b"
    (cd /tmp && $PY "$REPO/$b" --out "$OUTDIR") || echo "benchmark $b failed"
  done
fi
step "done: pytest exit $rc"
if [[ -n ${MLX_AMD_PACK:-} ]]; then
  tmp=$(mktemp -d)
  (cd "$OUTDIR" && tar czf "$tmp/gpu-out.tgz" --exclude=gpu-out.tgz . && find . -mindepth 1 -delete)
  mv "$tmp/gpu-out.tgz" "$OUTDIR/" && rmdir "$tmp"
fi
exit "$rc"
