"""held.py's bookkeeping of the children ada lets go, without Frida: a session whose closing
never ends (Frida stuck on another process) must not hold the recording loop."""

from __future__ import annotations

import threading
import time

from ada.tracer.record import held
from ada.tracer.record.held import HeldChildren


class StuckSession:
    """A session whose detach() waits until released (as Frida's did, stuck on the parent)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.detaching = threading.Event()

    def detach(self) -> None:
        self.detaching.set()
        self.release.wait(3)  # bounded: the old code, which waited here, fails rather than hangs


def test_a_stuck_close_does_not_hold_the_loop(monkeypatch):
    monkeypatch.setattr(held, "CLOSE_WAIT_S", 0.3)
    children = HeldChildren(device=None)  # type: ignore[arg-type]
    session = StuckSession()
    children._open.append((time.monotonic() - held.RECOVERY_S, session))
    t = time.monotonic()
    children.close_recovered()
    assert time.monotonic() - t < 0.2  # returned while the close still waits
    assert session.detaching.wait(5)
    assert children._open == []
    t = time.monotonic()
    children.close_recovered(wait=True)  # ada's end: waits CLOSE_WAIT_S at most
    assert 0.25 <= time.monotonic() - t < 2
    session.release.set()


def test_settle_waits_out_the_rest_of_its_time():
    announced = time.monotonic()
    held.settle(announced)
    assert time.monotonic() - announced >= held.SETTLE_S
    t = time.monotonic()
    held.settle(announced)  # already old enough: no wait
    assert time.monotonic() - t < 0.05
