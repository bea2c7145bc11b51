"""``python -m mlx_amd info``: the same command line as ``mlx-amd``."""

from mlx_amd.cli import main

main()
