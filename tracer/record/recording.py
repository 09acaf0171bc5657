"""One recording: the traced process and, by default, the processes it forks or execs.

Each process has its own Recorder (its agent, rings, drain and pid_<N>/ directory), all in one
session directory. Frida holds each child of a traced process at its fork, without the parent's
hooks (child gating, enabled by every Recorder), and a traced process at its exec. This follows
each one (attach, hook, then let it run) or, with follow_children off, lets it run untraced.
The recording ends when every traced process has ended, or when asked (Ctrl-C, SIGTERM,
--duration) whatever the processes are doing; every Recorder then unhooks its process, so no
process keeps ada's hooks once ada is gone. A child that a process forked just before it ended
may be announced by Frida only after that end: the recording waits for it (ANNOUNCE_WAIT_S).
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import frida

from ..errors import TracerError
from .dying import DyingWatch
from .frida_errors import FRIDA_ERRORS
from .held import HeldChild, HeldChildren, settle
from .options import ProcessPlace, Target, TraceOptions
from .pipeline import RecordingStatus
from .recorder import Recorder, RecordingResult

# How long the recording waits, once a traced process has ended, for Frida to announce a child
# that process forked and left alive (Recorder.unannounced_children). A held child is
# announced only once it has recovered from its fork, and that recovery goes through Frida's
# host: milliseconds here, seconds under emulation, where it came after the parent's end.
ANNOUNCE_WAIT_S = 15.0


class Recording:
    def __init__(self, device: frida.core.Device, target: Target, options: TraceOptions,
                 warn: Callable[[str], None] = lambda m: None,
                 info: Callable[[str], None] = lambda m: None,
                 on_attached: Callable[[frida.core.Session], None] = lambda s: None) -> None:
        self.device = device
        self.target = target
        self.options = options
        self.warn = warn
        self.info = info
        self.on_attached = on_attached
        self.main: Recorder | None = None
        self.recorders: list[Recorder] = []  # every process traced, in the order it started
        self.results: list[RecordingResult] = []  # in the order the processes ended
        self.stop_reason: str | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()  # a stop was asked or a child is held
        self._held: queue.SimpleQueue[HeldChild] = queue.SimpleQueue()
        self._execs: dict[int, int] = {}  # pid -> execs Frida announced (images after the first)
        self._let_go_children = HeldChildren(device)  # children left untraced (see held.py)
        self._announced: set[int] = set()  # pids Frida has announced (followed or let go)
        # ADA_TEST_UNHEARD_FORKS=N (tests only): the first N fork children Frida announces are
        # let go unseen, as if Frida had not announced them (it now and then does not: see
        # Recorder.children_untraced), to show that ada still counts them
        self._unheard_forks = int(os.environ.get("ADA_TEST_UNHEARD_FORKS") or 0)
        self._unannounced_since: dict[Recorder, float] = {}  # ended, since: see below
        # Traced processes a tracer holds dying for ever are named (dying.py); local Linux only.
        self._dying = DyingWatch(self.warn) if device.type == "local" and \
            sys.platform.startswith("linux") else None
        self.t0 = time.monotonic()

    # --- any thread ---------------------------------------------------------------

    def request_stop(self, reason: str) -> None:
        if not self._stop.is_set():
            self.stop_reason = reason
            self._stop.set()
            self._wake.set()

    def trigger_now(self, kind: str) -> None:
        """A trigger from the person at the terminal: every traced process's flight recorder."""
        for recorder in list(self.recorders):
            recorder.trigger_now(kind)

    def _on_child_added(self, child: Any) -> None:
        """Frida's thread: a child held at its fork or exec; handled by the recording loop.
        ADA_TEST_CHILD_ADDED_DELAY_S (tests only) hands it over that much later, as a slow
        machine does (the emulated arm64 one): the parent may end first."""
        announced = HeldChild(child, time.monotonic())
        delay = float(os.environ.get("ADA_TEST_CHILD_ADDED_DELAY_S") or 0)
        if delay > 0:
            timer = threading.Timer(delay, self._hand_over_child, (announced,))
            timer.daemon = True
            timer.start()
        else:
            self._hand_over_child(announced)

    def _hand_over_child(self, held: HeldChild) -> None:
        self._held.put(held)
        self._wake.set()

    # --- the recording ------------------------------------------------------------

    def prepare(self) -> None:
        """Attach to (or spawn) the target and hook it. Raises TracerError."""
        self.device.on("child-added", self._on_child_added)
        self.main = Recorder(self.device, self.target, self.options, self.warn, self.info,
                             self.on_attached, wake=self._wake.set)
        try:
            self.main.prepare()
        except BaseException:
            self.device.off("child-added", self._on_child_added)
            raise
        self.recorders.append(self.main)

    def record(self, progress: Callable[[RecordingStatus], None] | None = None,
               interval_s: float = 0.5) -> RecordingResult:
        """Record until every traced process has ended or a stop is asked; the target's result."""
        assert self.main is not None
        self.t0 = time.monotonic()
        self.main.start()
        live = [self.main]
        deadline = None if self.options.duration_s is None else self.t0 + self.options.duration_s
        last_progress = 0.0
        try:
            while live:
                timeout = interval_s if deadline is None else \
                    max(0.0, min(interval_s, deadline - time.monotonic()))
                self._wake.wait(timeout)
                self._wake.clear()
                if deadline is not None and time.monotonic() >= deadline:
                    self.request_stop("duration")
                self._take_held(live)
                self._let_go_children.close_recovered()
                if self._dying is not None:  # ended or not: a parent may be waiting for it
                    self._dying.check([r.pid for r in self.recorders if r.pid is not None])
                for recorder in list(live):
                    if self._stop.is_set():
                        recorder.request_stop(self.stop_reason or "interrupted")
                    if recorder.check() and not self._children_unannounced(recorder):
                        live.remove(recorder)
                        self.results.append(recorder.stop(self._let_go_still_held))
                if progress is not None and time.monotonic() - last_progress >= interval_s:
                    last_progress = time.monotonic()
                    progress(self.progress())
        finally:  # whatever failed, no process is left hooked or held
            self._stop_all(live)
            self._release_held()
            self._let_go_children.close_recovered(wait=True)
            self.device.off("child-added", self._on_child_added)
        return next(r for r in self.results if r.path == self.main_path)

    def _stop_all(self, live: list[Recorder]) -> None:
        """After a failure in the loop: stop what still records (their errors are secondary)."""
        for recorder in live:
            recorder.request_stop(f"error: {self.stop_reason or 'ada failed'}")
            try:
                self.results.append(recorder.stop())
            except Exception as e:  # noqa: BLE001 - the first failure is the one raised
                self.warn(f"pid {recorder.pid}: could not stop cleanly: {e}")

    @property
    def main_path(self) -> Path:
        """The target's process directory (its first image's)."""
        assert self.main is not None and self.main.pipeline is not None
        return self.main.pipeline.path

    def _take_held(self, live: list[Recorder]) -> None:
        """Follow (or let go) every child Frida holds for us."""
        while True:
            try:
                child = self._held.get_nowait()
            except queue.Empty:
                return
            if self._unheard_forks > 0 and child.origin == "fork":
                self._unheard_forks -= 1
                self._let_go_children.let_go(child)
                continue
            self._announced.add(child.pid)
            if child.origin == "exec":
                self._execs[child.pid] = self._execs.get(child.pid, 0) + 1
            parent = self._tracer_of(child.parent_pid, child.pid)
            if parent is None:  # not a process of this recording
                self._let_go_children.let_go(child)
                continue
            follow = self.options.follow_children and not self._stop.is_set()
            listed = any(c["pid"] == child.pid for c in parent.children)  # still held at a stop
            if child.origin != "exec" and not listed:  # an exec is the same process
                parent.children.append({"pid": child.pid, "origin": child.origin,
                                        "followed": follow})
            if not follow:
                self._let_go_children.let_go(child)
                continue
            recorder = self._follow(child)
            if recorder is not None:
                live.append(recorder)

    def _children_unannounced(self, recorder: Recorder) -> bool:
        """Whether an ended process left children Frida has not announced yet: its directory
        waits for them (its manifest lists its children), as long as they live, for at most
        ANNOUNCE_WAIT_S; an image that exec'd waits so for its new image, which Frida holds
        (else the recording could end first, and with it the held process). Looked at again
        each time the loop wakes."""
        children = [pid for pid in recorder.unannounced_children() if pid not in self._announced]
        new_image = self._new_image_unannounced(recorder)
        if recorder not in self._unannounced_since:
            self._unannounced_since[recorder] = time.monotonic()
            if children:
                self.info(f"pid {recorder.pid} ended with {len(children)} child(ren) Frida has "
                          f"not announced yet ({', '.join(map(str, children))}): waiting")
            if new_image:
                self.info(f"pid {recorder.pid} exec'd; Frida has not announced its new image "
                          "yet: waiting")
        if new_image:
            children.append(recorder.pid)
        alive = self._alive(children)
        if not alive:
            return False  # none asked, they ended before Frida announced them, or no device
        if time.monotonic() - self._unannounced_since[recorder] < ANNOUNCE_WAIT_S:
            return True
        if new_image and recorder.pid in alive:
            alive.remove(recorder.pid)
            self.warn(f"the new image of pid {recorder.pid} was not announced by Frida within "
                      f"{ANNOUNCE_WAIT_S:.0f} s of its exec: it runs untraced")
        if alive:
            self.warn(f"child(ren) {', '.join(map(str, alive))} of pid {recorder.pid} not "
                      f"announced by Frida within {ANNOUNCE_WAIT_S:.0f} s of its end: they run "
                      "untraced")
        self._announced.update(alive)  # not waited for again
        return False

    def _let_go_still_held(self, recorder: Recorder) -> None:
        """Before ada detaches from a process it stopped that goes on: the children it had
        forked that Frida still held then (its manifest lists them, not followed) are waited
        for, as long as they live and at most ANNOUNCE_WAIT_S, and let go as Frida announces
        them (held.py). Left held, Frida releases them as the parent's session closes, with
        none open on them: the release that can hang a child at its fork."""
        waiting = set(recorder.unannounced_children()) - self._announced
        if not waiting:
            return
        self.info(f"pid {recorder.pid}: waiting for Frida to announce {len(waiting)} child(ren) "
                  f"it held at their fork as the recording stopped "
                  f"({', '.join(map(str, sorted(waiting)))}), to let them run untraced")
        deadline = time.monotonic() + ANNOUNCE_WAIT_S
        while True:
            self._take_held([])  # the stop is set: each is let go, none followed
            waiting -= self._announced
            alive = self._alive(waiting)
            if not alive:
                return
            if time.monotonic() >= deadline:
                self.warn(f"child(ren) {', '.join(map(str, alive))} held at their fork were not "
                          f"announced by Frida within {ANNOUNCE_WAIT_S:.0f} s of the stop: "
                          "Frida lets them go as ada leaves")
                return
            self._wake.wait(0.1)
            self._wake.clear()

    def _alive(self, pids: set[int] | list[int]) -> list[int]:
        """Those of `pids` that still run; none where the device is gone."""
        if not pids:
            return []
        try:
            return [p.pid for p in self.device.enumerate_processes(pids=list(pids))]
        except FRIDA_ERRORS:
            return []

    def _new_image_unannounced(self, recorder: Recorder) -> bool:
        """Whether `recorder`'s process exec'd while Frida held it at its exec, and Frida has
        not announced the new image yet (announced, it is followed or let go)."""
        if recorder.stop_reason != "exec" or not recorder.holds_children:
            return False
        image = [r for r in self.recorders if r.pid == recorder.pid].index(recorder)
        return self._execs.get(recorder.pid, 0) <= image

    def _tracer_of(self, pid: int, child: int) -> Recorder | None:
        """The Recorder of a pid whose image forked `child`: the one whose handover named it
        as still held (a parent that forks and then execs at once: Frida may announce the
        child after the new image's Recorder exists), else the newest (an exec'd image has
        one per image)."""
        images = [r for r in reversed(self.recorders) if r.pid == pid]
        return next((r for r in images if child in r.unannounced_children()),
                    images[0] if images else None)

    def _follow(self, child: HeldChild) -> Recorder | None:
        """Attach to a held child, hook it and let it run; None (it runs untraced) on failure."""
        process_dir = None
        if child.origin == "exec":
            process_dir = f"pid_{child.pid}_exec{self._execs[child.pid]}"
        place = ProcessPlace(session_dir=self.main_path.parent, process_dir=process_dir,
                             parent_pid=child.parent_pid if child.origin != "exec" else None,
                             origin=child.origin, gated=True)
        prefix = f"pid {child.pid}: "
        recorder = Recorder(self.device, Target("pid", child.pid), self.options,
                            lambda m: self.warn(prefix + m), lambda m: self.info(prefix + m),
                            self.on_attached, place=place, wake=self._wake.set)
        try:
            recorder.prepare()  # on failure it lets the child go (Recorder._abandon)
        except TracerError as e:
            self.warn(f"cannot follow {child.origin} child {child.pid}: {e}; it runs untraced")
            return None
        if child.origin == "fork":
            settle(child.announced_at)  # see held.py
        recorder.start()
        self.recorders.append(recorder)
        what = "the new image of" if child.origin == "exec" else f"{child.origin} child"
        self.info(f"recording {what} pid {child.pid}")
        return recorder

    def _release_held(self) -> None:
        """Children held after the recording ended run on, untraced."""
        while True:
            try:
                child = self._held.get_nowait()
                self._let_go_children.let_go(child)
            except queue.Empty:
                return

    def progress(self) -> RecordingStatus:
        """The status line's figures, summed over every traced process."""
        parts = [r.progress() for r in self.recorders]
        total = RecordingStatus(time.monotonic() - self.t0, 0, 0, 0)
        for p in parts:
            total.events += p.events
            total.threads += p.threads
            total.drops += p.drops
            total.detail_bytes += p.detail_bytes
            total.windows += p.windows
            total.truncated_ns += p.truncated_ns
            total.wait_ns += p.wait_ns
            total.undelivered = None if total.undelivered is None or p.undelivered is None \
                else total.undelivered + p.undelivered
            if p.transport_bytes_per_s is not None:
                total.transport_bytes_per_s = (total.transport_bytes_per_s or 0.0) \
                    + p.transport_bytes_per_s
        total.processes = len(parts)
        return total
