"""``mlx-amd run``: run an unmodified MLX program with mlx-amd enabled.

    mlx-amd run script.py args...          like `python script.py args...`
    mlx-amd run -m module args...          like `python -m module args...`
                                           (e.g. -m mlx_lm generate --model ... --prompt ...)

The program sees the same sys.argv, __main__ and exit status as under python; mlx-amd is
enabled before its first line, and a missing GPU path is reported on stderr (the program
then runs on plain MLX, unless --require-gpu).
"""

from __future__ import annotations

import os
import runpy
import sys


def run(target: str, args: list, module: bool, require_gpu: bool = False) -> int:
    os.environ["MLX_AMD_AUTO"] = "0"   # enabled here, with its error visible
    import mlx_amd

    try:
        mlx_amd.enable()
    except Exception as e:
        msg = f"mlx-amd: GPU path unavailable ({e})"
        if require_gpu:
            print(msg, file=sys.stderr)
            return 2
        print(msg + "; running on plain MLX", file=sys.stderr)
    sys.argv = [target] + list(args)
    try:
        if module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            if not os.path.isfile(target):
                print(f"mlx-amd run: no such file: {target}", file=sys.stderr)
                return 2
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as e:
        code = e.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    finally:
        if mlx_amd.is_enabled():
            mlx_amd.disable()   # pending work finishes and host copies are written back
    return 0
