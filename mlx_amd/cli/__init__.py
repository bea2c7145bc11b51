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


@app.command("bench")
def bench_command(shapes: str = typer.Option("llama-1b", help="model shapes, comma-separated: "
                                              "tiny, llama-1b, llama-8b, qwen3-0.6b"),
                  tokens: int = typer.Option(64, help="decode tokens per model"),
                  plain_tokens: int = typer.Option(4, help="tokens of the plain-MLX (CPU) reference; 0 skips it"),
                  as_json: Optional[str] = typer.Option(None, "--json", help="write the results here"),
                  chart: Optional[str] = typer.Option(None, "--chart", help="a PNG chart here (needs matplotlib)")):
    """The standard LLM set on this machine: prefill and decode tokens/s of random-weight models
    through mlx-lm's own loop, against the bandwidth bound and plain MLX in the same run."""
    import os

    from ..bench import Bench, chart as make_chart, llm_decode

    b = Bench("llm_decode")
    out_dir = os.path.dirname(os.path.abspath(as_json)) if as_json else None
    llm_decode(b, [s.strip() for s in shapes.split(",") if s.strip()], tokens, plain_tokens,
               out_dir=None, progress=lambda m: typer.echo(m, err=True))
    if as_json:
        path = b.write(out_dir)
        os.replace(path, as_json)
        typer.echo(f"wrote {as_json}", err=True)
    if chart:
        typer.echo(f"wrote {chart}" if make_chart(b.rows, chart)
                   else "no chart: matplotlib is not installed", err=True)


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
