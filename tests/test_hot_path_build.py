"""The hot path ada compiles on the host for a local target (tracer/record/hot_path_build.py):
its code is the code Frida's own external toolchain builds in the target, a trace builds it
once and then takes it from the cache, and a build that fails or that CModule will not load
leaves the compile to the target, saying why, with every call still recorded."""

import os

import frida
import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

from ada.tracer.record.agent_code import agent_sources
from ada.tracer.record import hot_path_build
from ada.tracer.record.hot_path_build import built
from helpers import ada_lines, function_events, run_ada, trace_session as trace

N = 2000  # calls of work() in each recording


@pytest.fixture
def idle_session(target_bin, tmp_path):
    """A Frida session in a real process that waits at its gate; killed after."""
    device = frida.get_local_device()
    pid = device.spawn([str(target_bin("exact_calls")), "1", "0", str(tmp_path / "never")])
    try:
        session = device.attach(pid)
        yield session
        session.detach()
    finally:
        device.kill(pid)


BOTH_BUILDS = """
const addresses = symbols => Object.fromEntries(Object.entries(symbols).map(([k, v]) => [k, ptr(v)]));
rpc.exports.load = (source, symbols, library) => {
  globalThis.theirs = new CModule(source, addresses(symbols), { toolchain: 'external' });
  globalThis.ours = new CModule(library, addresses(symbols));
  return [theirs.ada_layout.toString(), ours.ada_layout.toString()];
};
rpc.exports.read = (address, size) => ptr(address).readByteArray(size);
"""


def test_the_host_build_is_the_code_frida_builds_in_the_target(idle_session, tmp_path,
                                                               monkeypatch):
    """Frida's external toolchain compiles the hot path in the target; ada's build of the same
    source (cached on the host, loaded as a library) must hold the same machine code, byte for
    byte: the same compiler, flags, headers and defines. The code is position-independent, so
    the .text of the two, each where CModule loaded it, compares whole."""
    monkeypatch.setenv("ADA_CACHE_DIR", str(tmp_path / "cache"))
    agent_js, source = agent_sources()
    agent = idle_session.create_script(agent_js, runtime="qjs")
    agent.load()
    plan = agent.exports_sync.hot_path_plan({"clockSource": "auto"})
    library, how = built(plan["defines"] + source, plan["builtins"])
    assert how == "host"
    assert built(plan["defines"] + source, plan["builtins"]) == (library, "host-cache")
    with open(library, "rb") as f:
        elf = ELFFile(f)
        text = elf.get_section_by_name(".text")
        layout = next(s for s in elf.get_section_by_name(".symtab").iter_symbols()
                      if s.name == "ada_layout")
        start, size = text["sh_addr"], text["sh_size"]
        at = layout["st_value"] - start  # ada_layout's place in .text

    symbols = {name: "0x1000" for name in ("ada_state", "ada_memcpy", "ada_clock_gettime")}
    for name in ("pthread_key_create", "pthread_setspecific", "pthread_getspecific",
                 "pthread_key_delete", "mmap", "abort", "sigfillset", "pthread_sigmask",
                 "nanosleep", "syscall", "pthread_self", "pthread_getattr_np",
                 "pthread_attr_getstack", "pthread_attr_destroy", "posix_fallocate", "open",
                 "read", "close"):
        symbols[name] = "0x2000"  # only linked, never called
    both = idle_session.create_script(BOTH_BUILDS, runtime="qjs")
    both.load()
    theirs, ours = (int(a, 16) - at for a in both.exports_sync.load(
        plan["defines"] + source, symbols, library.read_bytes()))
    assert theirs != ours  # two modules, each loaded in its own place
    code = both.exports_sync.read(hex(ours), size)
    assert len(code) == size > 10_000
    assert both.exports_sync.read(hex(theirs), size) == code


def test_a_trace_builds_the_hot_path_once_then_takes_it_from_the_cache(tmp_path, target_bin,
                                                                        monkeypatch):
    monkeypatch.setenv("ADA_CACHE_DIR", str(tmp_path / "cache"))
    for how in ("host", "host-cache"):
        s, out = trace(tmp_path / how, "-f", target_bin("exact_calls"), N,
                       "-i", "exact_calls!work", "--cmodule-toolchain", "external", quiet=False)
        hot_path = s.manifest.document["hot_path"]
        assert (hot_path["built"], hot_path["toolchain"]) == (how, "external")
        assert [len(ev) for ev in function_events(s, "work").values()] == [2 * N]
    assert any("gcc -O2, by ada, cached" in line for line in ada_lines(out.stderr))
    info = run_ada("info", s.path, check=True).stdout.splitlines()
    assert [line for line in info if line.startswith("hot path")] == [
        f"hot path  toolchain=external, built=host-cache, tls_direct={s.manifest.document['hot_path']['tls_direct']}"]
    assert len(list((tmp_path / "cache" / "hot-path").glob("*.so"))) == 1


@pytest.mark.parametrize("cache", ["a file", "writable by all"])
def test_a_failed_host_build_leaves_the_compile_to_the_target(tmp_path, target_bin, cache):
    """A cache that cannot be written (a file where its directory would be), or that others
    could write code into: the trace says why, the target compiles the hot path with gcc as
    before, and every call is there."""
    root = tmp_path / "cache"
    if cache == "a file":
        root.write_text("")
    else:
        (root / "hot-path").mkdir(parents=True)
        (root / "hot-path").chmod(0o777)
    s, out = trace(tmp_path, "-f", target_bin("exact_calls"), N, "-i", "exact_calls!work",
                   "--cmodule-toolchain", "external", quiet=False,
                   env={"ADA_CACHE_DIR": str(root)})
    why = [line for line in ada_lines(out.stderr) if "could not build the hot path" in line]
    expected = "cannot write its cache" if cache == "a file" else "writable by others"
    assert len(why) == 1 and expected in why[0], out.stderr
    assert not list(root.rglob("*.so"))
    assert s.manifest.document["hot_path"]["built"] == "target"
    ev = function_events(s, "work")[0]
    assert len(ev) == 2 * N and np.all(ev["call_depth"] == 0)


def test_a_cached_build_that_cmodule_refuses_is_built_again(tmp_path, target_bin):
    """A damaged cache entry: CModule will not load it; the target compiles the hot path,
    ada says so and drops the entry, and the next trace builds a good one."""
    env = {"ADA_CACHE_DIR": str(tmp_path / "cache")}
    gcc = ("--cmodule-toolchain", "external")
    trace(tmp_path / "first", "-f", target_bin("exact_calls"), N, "-i", "exact_calls!work",
          *gcc, env=env)
    [entry] = (tmp_path / "cache" / "hot-path").glob("*.so")
    entry.write_bytes(b"\x7fELF" + b"\0" * 60)
    s, out = trace(tmp_path / "damaged", "-f", target_bin("exact_calls"), N,
                   "-i", "exact_calls!work", *gcc, quiet=False, env=env)
    assert any("Frida could not load the hot path ada built" in line
               for line in ada_lines(out.stderr)), out.stderr
    assert s.manifest.document["hot_path"]["built"] == "target"
    assert [len(ev) for ev in function_events(s, "work").values()] == [2 * N]
    assert not entry.exists()
    s, _ = trace(tmp_path / "again", "-f", target_bin("exact_calls"), N,
                 "-i", "exact_calls!work", *gcc, env=env)
    assert s.manifest.document["hot_path"]["built"] == "host"


def test_the_cache_keeps_the_most_recently_used_libraries(tmp_path, monkeypatch):
    """Each source and set of defines makes its own library; only the most recent stay."""
    monkeypatch.setenv("ADA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(hot_path_build, "CACHE_ENTRIES", 3)
    builtins = {"defines": {}, "headers": {"glib.h": "typedef int gint;\n"}}
    sources = [f"#include <glib.h>\ngint ada_v{i} (void) {{ return {i}; }}\n" for i in range(4)]
    paths = []
    for i, source in enumerate(sources[:3]):
        path, how = built(source, builtins)
        assert how == "host"
        os.utime(path, (1000 + i, 1000 + i))  # built in this order, a second apart
        paths.append(path)
    assert built(sources[0], builtins) == (paths[0], "host-cache")  # used again: now recent
    newest, _ = built(sources[3], builtins)
    assert sorted((tmp_path / "hot-path").glob("*.so")) == sorted([paths[0], paths[2], newest])
