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


@app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run_command(ctx: typer.Context,
                module: Optional[str] = typer.Option(None, "-m", help="run a module, like python -m"),
                require_gpu: bool = typer.Option(False, "--require-gpu",
                                                 help="fail (exit 2) instead of running on plain MLX without a GPU path")):
    """Run an MLX program (a script or, with -m, a module) with mlx-amd enabled, unmodified."""
    from .run import run

    args = list(ctx.args)
    if module is None:
        if not args:
            typer.echo("mlx-amd run: give a script or -m module", err=True)
            raise typer.Exit(2)
        target, args = args[0], args[1:]
    else:
        target = module
    raise typer.Exit(run(target, args, module is not None, require_gpu))


def _run_argv(argv: list) -> int:
    """`run`'s own parsing: everything after the script or module belongs to the program
    (its --help too), which a generic option parser would take for itself."""
    from .run import run

    require_gpu = False
    while argv and argv[0] == "--require-gpu":
        require_gpu, argv = True, argv[1:]
    if argv[:1] == ["-m"] and len(argv) >= 2:
        return run(argv[1], argv[2:], True, require_gpu)
    if argv and not argv[0].startswith("-"):
        return run(argv[0], argv[1:], False, require_gpu)
    return -1


def main() -> None:
    import sys

    if sys.argv[1:2] == ["run"]:
        rc = _run_argv(sys.argv[2:])
        if rc >= 0:
            raise SystemExit(rc)
    app(prog_name="mlx-amd")
