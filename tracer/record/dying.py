"""A traced process that a fatal signal struck but that its ptrace tracer holds, named.

Frida's recovery of a child held at its fork sometimes faults inside Frida's own code (Frida's
bug: scripts/frida_fork_repro.py shows it without ada, about 1 child in 200 here and 1 in 30 in
the emulated arm64 machine), and the child then stays stopped under ptrace, for ever: a parent
waiting for it waits for ever, and so does the recording, which waits for the parent. Until
this watch, nothing said why.

Linux marks each thread a fatal signal struck (PF_SIGNALED in /proc/PID/task/TID/stat): the
process will not run again, but it ends only when its tracer lets it. Neither SIGKILL (a
thread stopped at its exit event ignores it) nor ada can make a tracer let go, so ada names the
process and its tracer once it has been held STUCK_S, and what ends it: the tracer (Frida's, in
ada's own process, goes with ada: Ctrl-C). A core being written (not a tracing stop) is not
named. Local Linux processes only: /proc is ada's own.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

from .leaving import tracer_of

PF_SIGNALED = 0x400  # include/linux/sched.h: "killed by a signal"
STUCK_S = 10.0  # a tracer that handles a fatal signal does so within milliseconds


def thread_states(pid: int, proc: Path = Path("/proc")) -> dict[int, tuple[str, int]]:
    """{tid: (state letter, flags)} for each thread of `pid`, from task/TID/stat; empty when
    it is gone or unreadable (the command name may hold spaces and parentheses)."""
    states = {}
    try:
        for task in (proc / str(pid) / "task").iterdir():
            stat = (task / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            states[int(task.name)] = (fields[0], int(fields[6]))
    except (OSError, ValueError, IndexError):
        return {}
    return states


def held_dying(pid: int, proc: Path = Path("/proc")) -> int | None:
    """The tracer (a thread id) of `pid` if a fatal signal struck one of its threads and that
    thread is in a tracing stop; else None (also when it is gone or unreadable)."""
    tracer = tracer_of(pid, proc)
    if tracer and any(state == "t" and flags & PF_SIGNALED
                      for state, flags in thread_states(pid, proc).values()):
        return tracer
    return None


def held_by_frida(pid: int, proc: Path = Path("/proc")) -> int | None:
    """The tracer (a thread id) of `pid` if it is Frida's, in ada's own process, and one of
    `pid`'s threads is in a tracing stop; else None. Frida's injector holds a process for
    milliseconds; a fault inside Frida's agent can leave it held in the stop that delivers the
    signal, where no fatal signal has struck yet (no PF_SIGNALED): seen twice in the arm64
    guest, a `forks` parent faulting at frida-agent-64.so+0x3ee31c."""
    tracer = tracer_of(pid, proc)
    if tracer and process_of(tracer, proc) == os.getpid() and \
            any(state == "t" for state, _ in thread_states(pid, proc).values()):
        return tracer
    return None


def children_of(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """`pid`'s children, from each of its threads' task/TID/children (Linux 3.5+, with
    CONFIG_PROC_CHILDREN); empty when none can be read."""
    children: list[int] = []
    try:
        for task in (proc / str(pid) / "task").iterdir():
            children.extend(int(c) for c in (task / "children").read_text().split())
    except (OSError, ValueError):
        pass
    return children


def process_of(tid: int, proc: Path) -> int | None:
    """The process (Tgid) thread `tid` belongs to; None when it cannot be read."""
    try:
        for line in (proc / str(tid) / "status").read_text().splitlines():
            if line.startswith("Tgid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def describe_tracer(tracer: int, proc: Path = Path("/proc")) -> str:
    """Who a tracer thread is: Frida's, in ada's own process, or another process's."""
    try:
        status = dict(line.split(":\t", 1) for line in
                      (proc / str(tracer) / "status").read_text().splitlines() if ":\t" in line)
        tgid, name = int(status["Tgid"]), status["Name"].strip()
    except (OSError, ValueError, KeyError):
        return f"thread {tracer}, gone since"
    if tgid == os.getpid():
        return (f"Frida, in ada itself (thread {tracer}); Frida's recovery of a forked child can "
                "crash this way (scripts/frida_fork_repro.py): ada's end lets it go (Ctrl-C; a "
                "second one quits at once)")
    return f"process {tgid} ({name}): it ends when that process lets it go or ends"


class DyingWatch:
    """Says, once each, which traced processes, or children of theirs, held_dying or
    held_by_frida has found held for STUCK_S. The children: one held at its fork that
    crashed in Frida's recovery before Frida announced it is no traced process yet, and its
    parent waits for it (seen in the arm64 guest: a `forks` child held 120 s, unnamed)."""

    def __init__(self, warn: Callable[[str], None], stuck_s: float = STUCK_S,
                 proc: Path = Path("/proc")) -> None:
        self.warn = warn
        self.stuck_s = stuck_s
        self.proc = proc  # where procfs is (tests lay out their own)
        self._since: dict[int, float] = {}  # pid -> first seen held dying
        self._named: set[int] = set()

    def check(self, pids: list[int]) -> None:
        """Look at `pids` and their children (each time the recording loop wakes)."""
        now = time.monotonic()
        traced = set(pids)
        unannounced = {c for pid in pids for c in children_of(pid, self.proc)} - traced
        for pid in [*pids, *sorted(unannounced)]:
            if pid in self._named:
                continue
            tracer = held_dying(pid, self.proc)
            struck = tracer is not None
            if tracer is None:
                tracer = held_by_frida(pid, self.proc)
            if tracer is None:
                self._since.pop(pid, None)
                continue
            since = self._since.setdefault(pid, now)
            if now - since < self.stuck_s:
                continue
            self._named.add(pid)
            what = "was struck by a fatal signal but has not ended" if struck else \
                "is held in a tracing stop (a fault inside Frida's agent, when seen)"
            if pid in unannounced:
                what = f"(a child of a traced process, not announced by Frida) {what}"
            self.warn(f"pid {pid} {what}: its tracer has held it stopped for "
                      f"{now - since:.0f} s, and whatever waits for it (its parent, this "
                      f"recording) waits on. The tracer is {describe_tracer(tracer, self.proc)}")
