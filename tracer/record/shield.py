"""Frida's injection, shielded from the first Ctrl-C.

A Frida call from Python waits on an event that Ctrl-C interrupts, while the call itself goes
on in Frida's thread. Interrupted in a spawn or an attach, ada went on to exit while Frida's
injector was still at work in the target (ptrace, its loader): in 4 tries of 100 at random
moments of an attach (scripts/ctrl_c_attach.py, x86_64, 2026-11-29), ada died of SIGSEGV, or
the program died, or it kept Frida's agent with no host. So while Frida injects, the first Ctrl-C only asks: the call finishes, and then
the interruption is raised, where undoing the attach is safe (recorder.py, _abandon). A
second Ctrl-C quits at once, as during a stop that cannot finish.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from types import FrameType
from typing import Callable, Iterator


@contextmanager
def shielded(info: Callable[[str], None]) -> Iterator[None]:
    """Run the block with the first SIGINT held back until it ends (then KeyboardInterrupt);
    a second one raises at once. Only on the main thread (where Python takes signals); a
    child's recorder, prepared on another thread, runs the block as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    asked: list[int] = []

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        asked.append(signum)
        if len(asked) > 1:
            raise KeyboardInterrupt
        info("interrupted: Frida's injection finishes first (Ctrl-C again quits at once)")

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if asked:
        raise KeyboardInterrupt
