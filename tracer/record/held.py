"""Letting a child that Frida holds at its fork run on untraced, without the hang Frida's own
release can cause.

Children ada does not follow are mostly not held at all (recorder.py, _hold_children): this
is for those that are, the children of a recording that has stopped, and every child where
the hot path cannot tell a child from its parent (no MADV_WIPEONFORK).

Frida's host unloads its agent from a held child that it resumes with no session open, and it
does so at once, as it answers the child's request to go on. That unload can overtake the
child's recovery from its fork, which then never ends: the child waits in fork() forever
(frida-core 17: host-session-service.vala's try_resume_child starts unload_and_destroy when no
session is open; the agent's finish_recovery_from_fork is left waiting for its answer, and the
agent's thread waits in _g_dbus_shutdown). Seen about 1 run in 15 when ada held every child.
So ada opens a session of its own on such a child before it resumes it, and closes it once
the child has had time to recover (RECOVERY_S): the unload then finds a child that runs as usual.
An exec'd image is not held this way (its agent is gone with the old image): it is only resumed.

A fork child resumed as soon as Frida announces it can also be lost: Frida alone
(scripts/frida_fork_repro.py, a session opened on each child, then resumed at once) hung in
runs 2 to 7 of 60 children, the child stopped by Frida's ptrace after a fault in Frida's
agent, three of its threads spinning; and ada letting every child go that way (held where
the hot path cannot tell a child, ADA_TEST_NO_WIPEONFORK=1) lost 3 runs of 14, the parent
stopped so. Held SETTLE_S after its announcement, before it is resumed: no run hung in 30,
Frida alone and ada alike (x86_64); the emulated arm64 machine still lost a parent so in its
one run (docs/platforms.md). A child ada follows is held about as long anyway (its agent
loads first), and is settled the same way before it is resumed (recording.py, _follow).
Closing a let-go child's session waited without end in those lost runs (Frida stuck on the
parent), and the recording loop with it: it is closed on a thread of its own.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import frida

from .frida_errors import FRIDA_ERRORS

# How long a released child keeps ada's session: its recovery takes well under a millisecond
# once resumed; this leaves room for a loaded machine.
RECOVERY_S = 0.5
# How long after Frida announced a fork child it is held, at least, before it is resumed (see
# the module's doc)
SETTLE_S = 0.1
# At ada's end, how long the sessions' closing is waited for, at most
CLOSE_WAIT_S = 5.0


def settle(announced_at: float) -> None:
    """Wait until a fork child announced at `announced_at` (time.monotonic()) may be resumed."""
    left = announced_at + SETTLE_S - time.monotonic()
    if left > 0:
        time.sleep(left)


@dataclass(frozen=True)
class HeldChild:
    """A process Frida holds for ada (a frida Child), and when Frida announced it."""

    child: Any
    announced_at: float  # time.monotonic()

    @property
    def pid(self) -> int:
        return self.child.pid

    @property
    def origin(self) -> str:
        return self.child.origin

    @property
    def parent_pid(self) -> int:
        return self.child.parent_pid


class HeldChildren:
    """The fork children ada has let go, each with the session it still holds on it."""

    def __init__(self, device: frida.core.Device) -> None:
        self.device = device
        self._open: list[tuple[float, Any]] = []  # (resumed at, session), oldest first
        self._closing: list[threading.Thread] = []

    def let_go(self, held: HeldChild) -> None:
        """Let a held process run untraced (one that has died already is no error)."""
        pid, session = held.pid, None
        if held.origin == "fork":
            try:
                session = self.device.attach(pid)
            except FRIDA_ERRORS:
                session = None  # gone already, or not attachable: resuming is all that is left
            settle(held.announced_at)
        try:
            self.device.resume(pid)
        except FRIDA_ERRORS:
            pass  # gone already
        if session is not None:
            self._open.append((time.monotonic(), session))

    def close_recovered(self, wait: bool = False) -> None:
        """Close the sessions of children resumed RECOVERY_S ago; with wait, all of them,
        waiting for the youngest to reach that age (ada is leaving)."""
        keep = []
        for resumed, session in self._open:
            age = time.monotonic() - resumed
            if age < RECOVERY_S and wait:
                time.sleep(RECOVERY_S - age)
            elif age < RECOVERY_S:
                keep.append((resumed, session))
                continue
            self._closing.append(release(session))
        self._open = keep
        self._closing = [t for t in self._closing if t.is_alive()]
        if wait:
            deadline = time.monotonic() + CLOSE_WAIT_S
            for closing in self._closing:
                closing.join(max(0.0, deadline - time.monotonic()))


def release(session: Any) -> threading.Thread:
    """Close ada's session on a released child (it may have ended since), on a thread of its
    own (returned): a close that Frida never ends must not hold the caller (the module's doc)."""

    def close() -> None:
        try:
            session.detach()
        except FRIDA_ERRORS:
            pass

    closing = threading.Thread(target=close, daemon=True, name="ada-let-go")
    closing.start()
    return closing


def resume_and_release(device: frida.core.Device, pid: int, session: Any) -> None:
    """Resume a held child on which ada holds `session`, and close it once the child has
    recovered from its fork (waits RECOVERY_S: for a child whose follow failed)."""
    try:
        device.resume(pid)
    except FRIDA_ERRORS:
        pass
    time.sleep(RECOVERY_S)
    release(session)
