"""Leaving a live local process: the moments after Frida's detach in which it must not exit.

When ada detaches, Frida unloads its agent in the target, and then its injector (in ada's
process) attaches to the target with ptrace for a few milliseconds to clean up after the
agent's thread. A target that exits in that window (from the detach until that cleanup is
over, 5-60 ms here) dies with SIGSEGV or SIGTRAP, or hangs. This is Frida's (17.26.2):
plain Frida does it with an empty script, attach, load, unload, detach, and a program that
exits at once, in 3 of 15 runs, and 4 of 15 when the program waits only for Frida's
threads to end. A program waiting for ada to finish (a script, a test, a person who ends
the program after ada) is in that window if ada returns at once, so ada waits it out
before it returns: until the target's tracer (TracerPid in /proc/PID/status) has changed
and changed back, or for at most LEAVE_CAP_S if the few milliseconds of ptrace were missed
between two looks. A target that exits on its own in that window is not protected.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

LEAVE_CAP_S = 0.3  # the longest wait; the cleanup took at most 60 ms here, on a loaded machine
SETTLE_S = 0.01  # after the cleanup's ptrace detach, for its last steps
POLL_S = 0.0002


def tracer_of(pid: int, proc: Path = Path("/proc")) -> int | None:
    """The thread tracing `pid` (0: none), or None when it cannot be read (gone, or no
    procfs). `proc`: where procfs is (tests lay out their own)."""
    try:
        text = (proc / str(pid) / "status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("TracerPid:"):
            return int(line.split()[1])
    return None


def wait_for_frida_to_leave(pid: int, tracer_before: int | None) -> None:
    """After a detach: wait for Frida's cleanup in `pid` to end (see the module's doc).
    `tracer_before` is tracer_of(pid) read before the detach."""
    if not sys.platform.startswith("linux") or tracer_before is None:
        return
    deadline = time.monotonic() + LEAVE_CAP_S
    seen = False
    while time.monotonic() < deadline:
        tracer = tracer_of(pid)
        if tracer is None:
            return  # the process is gone
        if tracer != tracer_before:
            seen = True
        elif seen:
            time.sleep(SETTLE_S)
            return
        time.sleep(POLL_S)
