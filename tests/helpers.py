"""One way to run the real `ada` command in tests, showing its output when a test fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_ada(*args: object, timeout: float = 120, check: bool = False,
            **kwargs) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "tracer", *map(str, args)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                             **kwargs)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"timed out: {' '.join(cmd)}\nstdout:\n{e.stdout}\n"
                             f"stderr:\n{e.stderr}") from None
    print(f"$ {' '.join(cmd)}\n[exit {out.returncode}]\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}")
    if check and out.returncode != 0:
        raise AssertionError(f"exit {out.returncode}: {' '.join(cmd)}\n{out.stderr}")
    return out

