"""`mlx-amd run`: an unmodified program runs with mlx-amd enabled, with its own argv, its
exit status and its own options (--help included) passed through."""

import os
import subprocess
import sys
import textwrap

import pytest


def mlx_amd_run(*args, tmp_path):
    env = dict(os.environ, MLX_AMD_DRIVER="host")
    return subprocess.run([sys.executable, "-m", "mlx_amd", "run", *args], env=env, cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def program(tmp_path):
    p = tmp_path / "prog.py"
    p.write_text(textwrap.dedent("""
        import sys
        import mlx.core as mx
        import mlx_amd
        print("enabled", mlx_amd.is_enabled(), sys.argv[1:], int(mx.sum(mx.arange(10)).item()))
        sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    """))
    return str(p)


def test_script_argv_and_exit_status(program, tmp_path):
    p = mlx_amd_run(program, "3", "--flag", tmp_path=tmp_path)
    assert p.returncode == 3, p.stderr
    assert p.stdout.strip() == "enabled True ['3', '--flag'] 45"


def test_module_gets_its_own_options(tmp_path):
    p = mlx_amd_run("-m", "json.tool", "--help", tmp_path=tmp_path)
    assert p.returncode == 0 and "json.tool" in p.stdout, p.stdout + p.stderr


def test_missing_script_is_a_clear_error(tmp_path):
    p = mlx_amd_run(str(tmp_path / "nope.py"), tmp_path=tmp_path)
    assert p.returncode == 2 and "no such file" in p.stderr
