"""Calls into a target that may never answer.

A process that does not run (stopped by SIGSTOP, Ctrl-Z or a debugger; struck by a fatal
signal its tracer holds, dying.py) runs none of the agent's code, and a Frida call into the
agent (an RPC, a script's unload, a detach) waits for its answer without end. ada stopping a
recording made those calls and waited with them: a recording whose target was stopped never
ended, and Ctrl-C only stopped it by leaving at once (the arm64 guest's thirteenth run held
one for good, its target faulted inside Frida's agent). So ada's calls at the end of a
recording have a bound: a target seen not running for NOT_RUNNING_S, held in a tracing stop
by Frida's own ptrace (in ada) for FRIDA_HELD_S, or silent for ANSWER_S whatever it does, is
given up, with why. Its hooks come out when it runs again: the agent
unloads itself when it finds ada gone (ada_ending.js, dispose).
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Callable, TypeVar

from .dying import describe_tracer, held_by_frida, held_dying, thread_states
from .leaving import tracer_of

ANSWER_S = 120.0  # the slowest stop seen (the emulated arm64 machine) answered in seconds
NOT_RUNNING_S = 2.0  # a process stopped by job control may be continued at once
LOOK_S = 0.1  # between two looks at the process while a call waits
# Frida's injector holds a process for a moment; held this long it faulted inside Frida's agent
# (the arm64 guest's 13th, 15th and 17th runs: held for good). As dying.STUCK_S names it.
FRIDA_HELD_S = 10.0

T = TypeVar("T")


class NoAnswer(Exception):
    """The target did not answer a call within its bound; the message says why."""


def not_running(pid: int | None, proc: Path = Path("/proc")) -> str | None:
    """Why local process `pid` runs no code now, or None when it runs (or cannot be seen:
    gone, not local, or no procfs): a thread of it held dying, or its main thread stopped.
    `proc`: where procfs is (tests lay out their own)."""
    if pid is None or not sys.platform.startswith("linux"):
        return None
    dying = held_dying(pid, proc)
    if dying is not None:
        return ("a fatal signal struck it and its tracer holds it stopped; the tracer is "
                + describe_tracer(dying, proc))
    state = thread_states(pid, proc).get(pid, ("?", 0))[0]  # its main thread's
    if state == "T":
        return "it is stopped (SIGSTOP, Ctrl-Z or a debugger; state T)"
    if state == "t" and held_by_frida(pid, proc) is None:  # Frida's injector: a moment's
        tracer = tracer_of(pid, proc)
        return ("its tracer holds it stopped (state t); the tracer is "
                + (describe_tracer(tracer, proc) if tracer else "unknown"))
    return None


class Answers:
    """One target's calls into its agent, with the bound (see the module's doc) counted from
    the recording's end (`ending`): a call made before that, such as the RPC transport's pull
    that is waiting as the recording ends, waits as long as the target is stopped until then.
    Once one call went unanswered, the rest give up at once."""

    def __init__(self, pid: int | None = None, answer_s: float = ANSWER_S,
                 not_running_s: float = NOT_RUNNING_S, frida_held_s: float = FRIDA_HELD_S,
                 proc: Path = Path("/proc")) -> None:
        self.pid = pid  # local processes only: whose state is looked at while a call waits
        self.answer_s = answer_s
        self.not_running_s = not_running_s
        self.frida_held_s = frida_held_s
        self.proc = proc  # where procfs is (tests lay out their own)
        self.ending = threading.Event()
        self.unanswered: str | None = None  # why a call was given up, once one was

    def ask(self, what: str, call: Callable[[], T]) -> T:
        """call()'s result (or its exception) if it comes in time; else NoAnswer. The call
        runs on a thread of its own, which goes on waiting after a NoAnswer (Frida ends the
        wait when the script or session is destroyed). `what`: the call, for the message."""
        if self.unanswered is not None:
            raise NoAnswer(self.unanswered)
        outcome: dict[str, object] = {}
        done = threading.Event()

        def run() -> None:
            try:
                outcome["value"] = call()
            except BaseException as e:  # noqa: BLE001 - raised again on the caller's thread
                outcome["error"] = e
            finally:
                done.set()

        threading.Thread(target=run, name=f"ada-call-{what}", daemon=True).start()
        # when the ending was first seen; the target seen not running; seen held by Frida
        since = stopped_since = held_since = None
        while not done.wait(LOOK_S):
            if self.unanswered is not None:  # another call gave up
                raise NoAnswer(self.unanswered)
            if not self.ending.is_set():
                continue
            now = time.monotonic()
            since = since or now
            why = not_running(self.pid, self.proc)
            stopped_since = None if why is None else stopped_since or now
            held = why is None and self.pid is not None and sys.platform.startswith("linux") \
                and held_by_frida(self.pid, self.proc) is not None
            held_since = held_since or now if held else None
            if why is not None and now - stopped_since >= self.not_running_s:
                self.unanswered = f"no answer to ada's call ({what}): {why}"
            elif held_since is not None and now - held_since >= self.frida_held_s:
                self.unanswered = (f"no answer to ada's call ({what}): Frida's ptrace, in ada, "
                                   f"has held it in a tracing stop for {now - held_since:.0f} s "
                                   "(a fault inside Frida's agent, when seen)")
            elif now - since >= self.answer_s:
                self.unanswered = f"no answer to ada's call ({what}) in {self.answer_s:g} s"
            if self.unanswered is not None:
                raise NoAnswer(self.unanswered)
        if "error" in outcome:
            raise outcome["error"]  # type: ignore[misc]
        return outcome["value"]  # type: ignore[return-value]
