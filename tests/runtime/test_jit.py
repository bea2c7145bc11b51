"""runtime/jit.py without a GPU: cache keys, the on-disk cache's integrity rules,
concurrent writers and permissions; the compiler is a stand-in."""

import os
import stat
import subprocess
import sys
import textwrap
import types

import pytest

from mlx_amd.runtime import jit

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FakeCompiler:
    vendor = "cuda"

    def __init__(self, version="nvrtc 13.0"):
        self.calls = 0
        self._v = version

    def version(self):
        return self._v

    def compile(self, source, name, options):
        self.calls += 1
        return b"IMAGE:" + name.encode() + b":" + source.encode()


PROPS = types.SimpleNamespace(arch="sm_90")


def image(cache, comp, source="k", name="k"):
    opts = jit.options_for(PROPS, "nvidia")
    key = jit.cache_key(source, opts, PROPS.arch, comp.version())
    return cache.image(key, lambda: comp.compile(source, name, opts)), key


def test_cache_key_depends_on_every_part():
    base = ("src", ("-a",), "sm_90", "nvrtc 13.0")
    k = jit.cache_key(*base)
    assert len(k) == 32 and k == jit.cache_key(*base)
    for i, other in enumerate(("src2", ("-b",), "sm_80", "nvrtc 12.8")):
        args = list(base)
        args[i] = other
        assert jit.cache_key(*args) != k
    # parts are length-prefixed: moving a character between fields changes the key
    assert jit.cache_key("ab", ("c",), "x", "y") != jit.cache_key("a", ("bc",), "x", "y")


def test_options_per_platform():
    assert jit.options_for(PROPS, "nvidia")[0] == "--gpu-architecture=sm_90"
    amd = jit.options_for(types.SimpleNamespace(arch="gfx942"), "amd")
    assert amd[0] == "--offload-arch=gfx942"


def test_memory_then_disk(tmp_path):
    comp = FakeCompiler()
    c1 = jit.Cache(tmp_path / "jit")
    img, key = image(c1, comp)
    assert comp.calls == 1 and img.startswith(b"IMAGE:")
    assert image(c1, comp)[0] == img and comp.calls == 1 and c1.stats["memory_hits"] == 1
    c2 = jit.Cache(tmp_path / "jit")          # a new process: the disk entry is used
    assert image(c2, comp)[0] == img and comp.calls == 1 and c2.stats["disk_hits"] == 1
    assert jit.decode_entry(c2.path(key).read_bytes(), key) == img


def test_directory_and_entry_permissions(tmp_path):
    d = tmp_path / "cache" / "mlx-amd" / "jit"
    c = jit.Cache(d)
    _, key = image(c, FakeCompiler())
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert stat.S_IMODE(c.path(key).stat().st_mode) == 0o600
    # a folder of ours that others could write to is tightened before use
    d2 = tmp_path / "loose"
    d2.mkdir(mode=0o777)
    os.chmod(d2, 0o777)
    image(jit.Cache(d2), FakeCompiler())
    assert stat.S_IMODE(d2.stat().st_mode) == 0o700


def test_default_location(monkeypatch, tmp_path):
    monkeypatch.delenv("MLX_AMD_JIT_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert jit.cache_dir() == tmp_path / "mlx-amd" / "jit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert jit.cache_dir() == tmp_path / "home" / ".cache" / "mlx-amd" / "jit"
    monkeypatch.setenv("MLX_AMD_JIT_CACHE", "off")
    assert jit.cache_dir() is None


@pytest.mark.parametrize("damage", ["truncated", "flipped", "foreign", "empty", "garbage", "longer"])
def test_bad_entries_are_recompiled(tmp_path, damage):
    comp = FakeCompiler()
    d = tmp_path / "jit"
    img, key = image(jit.Cache(d), comp)
    p = jit.Cache(d).path(key)
    data = p.read_bytes()
    if damage == "truncated":
        data = data[:-3]
    elif damage == "flipped":
        data = data[:-1] + bytes([data[-1] ^ 1])
    elif damage == "foreign":   # an intact entry of another key
        data = jit.encode_entry(b"\x01" * 32, b"EVIL")
    elif damage == "empty":
        data = b""
    elif damage == "garbage":
        data = os.urandom(200)
    else:
        data = data + b"tail"
    p.write_bytes(data)
    c = jit.Cache(d)
    got, _ = image(c, comp)
    assert got == img and comp.calls == 2 and c.stats["rejected"] == 1
    assert jit.decode_entry(p.read_bytes(), key) == img     # rewritten intact


def test_header_fields():
    key = b"k" * 32
    e = jit.encode_entry(key, b"abc")
    assert e.startswith(jit.MAGIC) and jit.decode_entry(e, key) == b"abc"
    assert jit.decode_entry(e, b"x" * 32) is None


def test_no_temporaries_left_and_memory_only(tmp_path, monkeypatch):
    c = jit.Cache(tmp_path / "jit")
    for i in range(5):
        image(c, FakeCompiler(), source=f"s{i}")
    assert sorted(p.suffix for p in (tmp_path / "jit").iterdir()) == [".bin"] * 5
    monkeypatch.setenv("MLX_AMD_JIT_CACHE", "off")
    m = jit.Cache()
    comp = FakeCompiler()
    image(m, comp)
    image(m, comp)
    assert m.directory is None and comp.calls == 1


def test_compile_errors_propagate_and_cache_nothing(tmp_path):
    class Bad(FakeCompiler):
        def compile(self, *a):
            raise jit.JitError("bad source")
    c = jit.Cache(tmp_path / "jit")
    with pytest.raises(jit.JitError):
        image(c, Bad())
    assert not list((tmp_path / "jit").glob("*.bin")) and not c.memory


WRITER = textwrap.dedent("""
    import sys, types
    sys.path.insert(0, {repo!r})
    from mlx_amd.runtime import jit
    class Comp:
        def version(self): return "nvrtc 13.0"
        def compile(self, source, name, options): return (source * 5000).encode()
    props = types.SimpleNamespace(arch="sm_90")
    opts = jit.options_for(props, "nvidia")
    for i in range(60):
        src = "src%d" % (i % 6)
        key = jit.cache_key(src, opts, "sm_90", "nvrtc 13.0")
        c = jit.Cache({d!r})          # fresh each time: read the disk, write when bad
        c.memory.clear()
        img = c.image(key, lambda: Comp().compile(src, "k", opts))
        assert img == (src * 5000).encode(), "bad image read"
    print("ok", c.stats["rejected"])
""")


def test_concurrent_writers_two_processes(tmp_path):
    d = str(tmp_path / "jit")
    code = WRITER.format(repo=REPO, d=d)
    env = dict(os.environ, MLX_AMD_AUTO="0")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
        # a reader never saw half an entry (os.replace): nothing was rejected
        assert out.split() == [b"ok", b"0"], out
    files = os.listdir(d)
    assert sorted(files) == sorted(f for f in files if f.endswith(".bin")) and len(files) == 6


def test_missing_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(jit, "_compilers", {})
    monkeypatch.setenv("MLX_AMD_RTC_PATH", "/nonexistent/libnvrtc.so.99")
    with pytest.raises(jit.JitUnavailable, match="MLX_AMD_RTC_PATH"):
        jit.compiler_for("nvidia")
    with pytest.raises(jit.JitUnavailable):
        jit.compiler_for("host")


def test_table_rows_name_both_vendors():
    for e in jit.TABLE:
        assert e.hip.startswith("hiprtc") and e.cuda.startswith("nvrtc"), e


def test_function_loads_once_per_driver(monkeypatch, tmp_path):
    comp = FakeCompiler()
    monkeypatch.setattr(jit, "compiler_for", lambda platform: comp)
    jit.set_cache(jit.Cache(tmp_path / "jit"))

    class Drv:
        platform = "nvidia"
        loads = 0

        def module_load_data(self, image):
            Drv.loads += 1
            return ("module", image)

        def module_get_function(self, module, name):
            return ("fn", name, module[1])

    try:
        d = Drv()
        f1 = jit.function(d, PROPS, "source", "k_c")
        f2 = jit.function(d, PROPS, "source", "k_g")   # same module, other kernel
        assert jit.function(d, PROPS, "source", "k_c") is f1
        assert f1[1] == "k_c" and f2[1] == "k_g" and Drv.loads == 1 and comp.calls == 1
    finally:
        jit.set_cache(None)
