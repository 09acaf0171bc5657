"""Small C kernels for the loops numpy makes slow: compiled once per machine, loaded with ctypes.

A kernel is one C file beside the module that uses it. It is compiled on first use with the
system's C compiler ($CC, cc or gcc) into the user's cache directory, under a name made from
its source, the platform and the machine, so a changed source or another machine gets its own
build. Every caller has a numpy path that does the same work: without a compiler, or when the
build fails, `load` answers None and the caller uses that. ctypes lets go of the interpreter's
lock for the call.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


@functools.lru_cache(maxsize=None)
def load(source: Path) -> ctypes.CDLL | None:
    """The compiled `source` (a .c file), or None when it cannot be had. Answered once per
    process: the drain asks on every pass, and must not touch the disk for it."""
    if not source.exists():
        return None
    digest = hashlib.sha1(source.read_bytes() + sys.platform.encode() +
                          platform.machine().encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ada"
    library = cache / f"{source.stem}-{digest}.so"
    if not library.exists():
        compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            return None
        try:
            cache.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=cache) as work:
                built = Path(work) / library.name
                done = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(built),
                                       str(source)], capture_output=True, timeout=120)
                if done.returncode != 0:
                    return None
                os.replace(built, library)  # whole or not at all, for a concurrent ada
        except (OSError, subprocess.SubprocessError):
            return None
    try:
        return ctypes.CDLL(str(library))
    except OSError:
        return None
