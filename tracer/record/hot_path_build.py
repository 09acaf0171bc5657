"""The hot path compiled on the host, once, for a target on this machine.

Frida's external toolchain compiles the hot path with gcc -O2 inside the target at every
attach: about 0.7 s of compiler, the largest part of attaching. For a local target (the same
machine, so the same compiler and architecture) ada compiles it here instead, as a shared
library with the flags and headers Frida's own build uses (CModule.builtins), and keeps it
in a cache keyed by everything that goes into it. Each attach after the first sends the
cached library, which CModule loads in about a millisecond (compileHotPath in
agent/ada_platform.js; Frida 17.26 loads such libraries on Linux).

Anything that goes wrong here is a HotPathBuildError: the caller says why and the target
compiles the hot path as before, so this can only make an attach faster.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

# What Frida 17.26's external toolchain runs in the target (seen through a gcc on its PATH):
# gcc -m64 -shared -fPIC -nostdlib -Wall -Werror -O2 -isystem . -isystem capstone -D... module.c
FLAGS = ("-shared", "-fPIC", "-nostdlib", "-Wall", "-Werror", "-O2",
         "-isystem", ".", "-isystem", "capstone")
X86_64_FLAGS = ("-m64",)  # Frida's HAVE_I386 define: ada's x86 is x86_64
COMPILE_TIMEOUT_S = 300  # gcc -O2 of the hot path: 0.7 s here, about 6 s emulated (arm64)
CACHE_ENTRIES = 32  # libraries kept (about 50 KB each), the most recently used


class HotPathBuildError(Exception):
    """The host could not build the hot path (the target compiles it instead)."""


def cache_dir() -> Path:
    """$ADA_CACHE_DIR, else $XDG_CACHE_HOME/ada, else ~/.cache/ada; hot-path/ under it."""
    root = os.environ.get("ADA_CACHE_DIR")
    if root:
        return Path(root) / "hot-path"
    xdg = os.environ.get("XDG_CACHE_HOME")
    try:
        return (Path(xdg) if xdg else Path.home() / ".cache") / "ada" / "hot-path"
    except RuntimeError:  # no $HOME and no passwd entry
        raise HotPathBuildError("no home directory for its cache (set ADA_CACHE_DIR)") from None


@dataclass
class HostBuild:
    library: bytes  # the shared library CModule loads
    how: str        # "host" (compiled now) or "host-cache"
    path: Path      # its cache entry

    def forget(self) -> None:
        """CModule would not load it: the next attach compiles it again."""
        self.path.unlink(missing_ok=True)


def build_for_target(api: Any, config: dict[str, Any], source: str,
                     say: Callable[[str], None]) -> HostBuild | None:
    """The hot path built here for the agent's init; None where the target compiles it (not
    Linux, no gcc here, where the target's own attempt tells what it finds, or this build
    failed: `say` tells why)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    plan = api.hot_path_plan(config)
    if plan is None:
        return None
    try:
        path, how = built(plan["defines"] + source, plan["builtins"], gcc)
        return HostBuild(path.read_bytes(), how, path)
    except (HotPathBuildError, OSError) as e:
        say(f"ada could not build the hot path here ({e}); the target compiles it")
        return None


def built(source: str, builtins: dict[str, Any], gcc: str | None = None) -> tuple[Path, str]:
    """(the library, "host-cache" or "host"): from the cache, else compiled into it by `gcc`
    (else the one on PATH). The key covers the source, Frida's headers and defines, the
    compiler and its flags."""
    gcc = gcc or shutil.which("gcc")
    if gcc is None:
        raise HotPathBuildError("no gcc on PATH")
    flags = compile_flags(builtins["defines"])
    compiler = _run([gcc, "-dumpfullversion", "-dumpmachine"], Path("/"))
    key = hashlib.sha256(json.dumps([source, builtins, gcc, compiler, flags],
                                    sort_keys=True).encode()).hexdigest()[:32]
    root = cache_dir()
    library = root / f"{key}.so"
    if library.exists():
        _check_private(root)
        try:
            os.utime(library)  # recently used: kept by _prune
        except OSError:
            pass
        return library, "host-cache"
    with tempfile.TemporaryDirectory(prefix="ada-hot-path-") as tmp:
        work = Path(tmp)
        _write_headers(work, builtins["headers"])
        (work / "module.c").write_text(source)
        _run([gcc, *flags, "module.c", "-o", "module.so"], work)
        try:
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
            _check_private(root)
            staged = root / f".{key}.{os.getpid()}"
            shutil.copyfile(work / "module.so", staged)
            os.replace(staged, library)  # whole or not there: another ada may build it too
        except OSError as e:
            raise HotPathBuildError(f"cannot write its cache {root}: {e.strerror}") from None
    _prune(root)
    return library, "host"


def _check_private(root: Path) -> None:
    """The cache holds code ada loads into the processes it traces, root's among them: it
    must be this user's alone."""
    st = root.stat()
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise HotPathBuildError(f"its cache {root} is writable by others than this user")


def _prune(root: Path) -> None:
    """Keep the CACHE_ENTRIES most recently used libraries (each ada version, each set of
    defines, makes its own)."""
    try:
        entries = sorted(root.glob("*.so"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[CACHE_ENTRIES:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass  # another ada pruning at the same time


def compile_flags(defines: dict[str, Any]) -> list[str]:
    """gcc's flags for the hot path: Frida's, and its builtin defines (CModule.builtins)."""
    flags = [*(X86_64_FLAGS if defines.get("HAVE_I386") else ()), *FLAGS]
    for name, value in defines.items():
        flags.append(f"-D{name}" if value is True else f"-D{name}={value}")
    return flags


def _write_headers(work: Path, headers: dict[str, str]) -> None:
    for name, text in headers.items():
        path = (work / name).resolve()
        if work.resolve() not in path.parents:
            raise HotPathBuildError(f"a builtin header outside the build: {name}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _run(argv: list[str], cwd: Path) -> str:
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True,
                              timeout=COMPILE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HotPathBuildError(f"{Path(argv[0]).name}: {e}") from None
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or [f"exit {done.returncode}"]
        raise HotPathBuildError(f"{Path(argv[0]).name} failed: {lines[0]}")
    return done.stdout
