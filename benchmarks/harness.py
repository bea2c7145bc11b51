"""The benchmarks' shared harness: ``Bench`` lives in the package (``mlx_amd/bench.py``) so
that ``mlx-amd bench`` works from an installed package; the scripts here import it from this
module."""

from mlx_amd.bench import Bench, torch_cuda  # noqa: F401
