"""The ``mlx-amd`` command line (entry point ``mlx_amd.cli:main``; also ``python -m mlx_amd``).

Subcommands import what they need when they run, so ``mlx-amd info`` loads neither
mlx nor the bridge.
"""

from __future__ import annotations

from typing import Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="mlx-amd: run MLX programs on AMD GPUs through ROCm/HIP.")


@app.callback()
def _root() -> None:
    """mlx-amd: run MLX programs on AMD GPUs through ROCm/HIP."""


@app.command("info")
def info_command(as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
         manifest: Optional[str] = typer.Option(None, "--manifest", hidden=True,
                                                help="kernel manifest to read instead of the installed one")):
    """ROCm/HIP runtime and driver versions, devices (arch, wave size, CUs, memory) and kernel coverage."""
    from .info import run

    raise typer.Exit(run(as_json, manifest))


def main() -> None:
    app(prog_name="mlx-amd")
