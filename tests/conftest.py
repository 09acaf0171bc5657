"""Shared test setup: helper modules on sys.path, and real target programs built with gcc."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))


@pytest.fixture(scope="session")
def target_bin(tmp_path_factory):
    """build(name) -> path of tests/targets/<name>.c compiled with gcc (exported symbols)."""
    out = tmp_path_factory.mktemp("targets")
    built: dict[str, Path] = {}
    if shutil.which("gcc") is None:
        pytest.fail("gcc is required to build the test targets")

    def build(name: str) -> Path:
        if name not in built:
            exe = out / name
            subprocess.run(["gcc", "-O1", "-g", "-rdynamic", "-pthread", "-o", str(exe),
                            str(TESTS / "targets" / f"{name}.c")], check=True)
            built[name] = exe
        return built[name]

    return build
