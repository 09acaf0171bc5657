"""The drain thread: the only owner of the ATF writers.

Each pass copies every thread's new index events out of its ring into that
thread's ThreadWriter (straight from the mapping, no per-event work), then
hands the room back to the producer by advancing the ring's tail. thread_N is
ring slot N, so N is the thread's registration order.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from atf.writer import SessionWriter, ThreadWriter

from .rings import RingReader

IDLE_SLEEP_S = 0.0005


@dataclass
class DrainStats:
    events: int = 0
    threads: int = 0
    drops: list[int] = field(default_factory=list)  # per slot, as the producers count them

    @property
    def total_drops(self) -> int:
        return sum(self.drops)


class Drain(threading.Thread):
    """Polls the rings until stopped; `finish()` drains what is left and stops."""

    def __init__(self, rings: RingReader, session: SessionWriter) -> None:
        super().__init__(name="ada-drain", daemon=True)
        self.rings = rings
        self.session = session
        self.writers: list[ThreadWriter] = []
        self.tails: list[int] = []
        self.stats = DrainStats()
        self.error: BaseException | None = None
        self._stop_requested = threading.Event()
        self.failed = threading.Event()

    def run(self) -> None:
        try:
            while not self._stop_requested.is_set():
                if self.drain_once() == 0:
                    time.sleep(IDLE_SLEEP_S)
        except BaseException as e:  # noqa: BLE001 - reported by the recorder, never lost
            self.error = e
            self.failed.set()

    def drain_once(self) -> int:
        """One pass over every ring; returns how many events were moved."""
        rings = self.rings
        rings.heartbeat()
        registered = rings.registered
        while len(self.writers) < registered and rings.active(len(self.writers)):
            slot = len(self.writers)
            self.writers.append(self.session.add_thread(rings.tid(slot)))
            self.tails.append(0)
            self.stats.drops.append(0)
        moved = 0
        for slot, writer in enumerate(self.writers):
            head = rings.head(slot)
            tail = self.tails[slot]
            if head != tail:
                for part in rings.events(slot, tail, head):
                    writer.append_index(part)
                self.tails[slot] = head
                rings.set_tail(slot, head)
                moved += head - tail
            self.stats.drops[slot] = rings.drops(slot)
        self.stats.events += moved
        self.stats.threads = len(self.writers)
        return moved

    def finish(self, settle_s: float = 0.05) -> None:
        """Stop polling, then drain until the rings stay empty for `settle_s`."""
        self._stop_requested.set()
        if self.is_alive():
            self.join()
        if self.error is not None:
            return
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < settle_s:
            if self.drain_once():
                quiet_since = time.monotonic()
            else:
                time.sleep(IDLE_SLEEP_S)
