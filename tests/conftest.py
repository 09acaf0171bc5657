"""Shared test setup: helper modules on sys.path, and real target programs built with gcc."""

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))

from helpers import INLINE_MACHINES  # noqa: E402 (helpers is found through the line above)


@pytest.fixture(scope="session")
def target_bin(tmp_path_factory):
    """build(name) -> path of tests/targets/<name>.c compiled with gcc, or <name>.cpp with g++
    (exported symbols)."""
    out = tmp_path_factory.mktemp("targets")
    built: dict[str, Path] = {}
    if shutil.which("gcc") is None:
        pytest.fail("gcc is required to build the test targets")

    def build(name: str) -> Path:
        if name not in built:
            exe = out / name
            source = TESTS / "targets" / f"{name}.c"
            compiler = "gcc"
            if not source.exists():  # a C++ target
                source, compiler = source.with_suffix(".cpp"), "g++"
                if shutil.which("g++") is None:
                    pytest.fail("g++ is required to build tests/targets/*.cpp "
                                "(scripts/test.sh installs it)")
            subprocess.run([compiler, "-O1", "-g", "-rdynamic", "-pthread", "-o", str(exe),
                            str(source)], check=True)
            built[name] = exe
        return built[name]

    return build


@pytest.fixture(scope="session")
def plugin(tmp_path_factory):
    """tests/targets/plugin.c as libplug.so.1.2.3 (soname libplug.so.1) with the symlinks
    libplug.so.1 and libplug.so, plugin_host (dlopens it) and plugin_linked (DT_NEEDED)."""
    out = tmp_path_factory.mktemp("plugin")
    real = out / "libplug.so.1.2.3"
    subprocess.run(["gcc", "-O1", "-g", "-shared", "-fPIC", "-Wl,-soname,libplug.so.1", "-o",
                    str(real), str(TESTS / "targets" / "plugin.c")], check=True)
    (out / "libplug.so.1").symlink_to(real.name)
    (out / "libplug.so").symlink_to("libplug.so.1")
    host = out / "plugin_host"
    subprocess.run(["gcc", "-O1", "-g", "-rdynamic", "-o", str(host),
                    str(TESTS / "targets" / "plugin_host.c"), "-ldl", "-pthread"], check=True)
    linked = out / "plugin_linked"
    subprocess.run(["gcc", "-O1", "-g", "-o", str(linked),
                    str(TESTS / "targets" / "plugin_linked.c"), f"-L{out}", "-lplug",
                    f"-Wl,-rpath,{out}"], check=True)
    return out


@pytest.fixture(params=["frida", "inline"])
def engine(request):
    """`ada trace` arguments for each hook engine: Frida's Interceptor and ada's inline stubs
    (x86_64, arm64). End-to-end recording tests take it, so each runs with both."""
    if request.param == "inline" and platform.machine() not in INLINE_MACHINES:
        pytest.skip(f"the inline engine has no port to {platform.machine()}: it records with "
                    "Frida's Interceptor")
    return ["--hook-engine", request.param]


def pytest_runtest_logreport(report):
    """In the arm64 guest (scripts/arm64-tests.sh) a whole run takes hours and may be cut
    short, which loses the failures pytest keeps for its summary: each is shown as it
    happens. This hook, not makereport: with pytest-xdist only the controller's terminal is
    seen, and it gets each worker's report here."""
    if not (report.failed and os.environ.get("ADA_ARM64_GUEST")):
        return
    terminal = _config.pluginmanager.get_plugin("terminalreporter") if _config else None
    if terminal is not None and not hasattr(_config, "workerinput"):
        terminal.write_line(
            f"\n--- {report.nodeid} failed ({report.when}):\n{report.longreprtext[-8000:]}\n"
            f"--- its output:\n{report.capstdout[-6000:]}{report.capstderr[-2000:]}\n---")


_config = None


def pytest_configure(config):
    global _config
    _config = config
