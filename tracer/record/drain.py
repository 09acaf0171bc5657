"""The drain thread: the only owner of the ATF writers.

Each pass copies every thread's new index events out of its ring into that
thread's ThreadWriter (straight from the mapping, no per-event work), then
hands the room back to the producer by advancing the ring's tail. thread_N is
ring slot N, so N is the thread's registration order.

With the detail lane on, each pass then moves every thread's new detail
records to the detail sink (detail_sinks.py: every record for --detail, or the
flight recorder's windows), and lets it persist what it can: index first,
detail second, always.

When the agent times events with raw TSC ticks, the drain rewrites them as
CLOCK_BOOTTIME ns in the ring itself (clock.py) before a writer or sink sees
them: one place for the conversion, whatever reads the events after.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ada.atf import format as F
from ada.atf.records import Walk, gather, scatter, walk_records
from ada.atf.writer import SessionWriter, ThreadWriter

from .clock import TickClock
from .detail_sinks import DetailSink
from .rings import RingReader, clock_ns

IDLE_SLEEP_S = 0.0005
DETAIL_TIMESTAMP = F.detail_event_header_dtype(F.REVISION_1).fields["timestamp"][1]


@dataclass
class DrainStats:
    events: int = 0
    threads: int = 0
    drops: list[int] = field(default_factory=list)  # per slot, as the producers count them
    detail_drops: list[int] = field(default_factory=list)
    detail_bytes: int = 0
    triggers_lost: int = 0

    @property
    def total_drops(self) -> int:
        return sum(self.drops)


class Drain(threading.Thread):
    """Polls the rings until stopped; `finish()` drains what is left and stops."""

    def __init__(self, rings: RingReader, writer: SessionWriter,
                 sink: DetailSink | None = None,
                 on_trigger: Callable[[int, int, int], None] | None = None,
                 sync: Callable[[], int] | None = None) -> None:
        super().__init__(name="ada-drain", daemon=True)
        self.rings = rings
        self.sync = sync  # the RPC transport refreshes the mirror the rings are read from
        self.clock: TickClock | None = None  # raw-tick timestamps: see _clock_ready
        self.writer = writer  # the session's; thread_writers are what it made, one per slot
        self.sink = sink
        self.on_trigger = on_trigger
        self.thread_writers: list[ThreadWriter] = []
        self.tails: list[int] = []
        self.detail_tails: list[int] = []
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
        """One pass over every ring; returns 0 when nothing at all moved."""
        rings = self.rings
        pulled = self.sync() if self.sync is not None else 0
        rings.heartbeat()
        if not self._clock_ready():
            return pulled
        clock = self.clock
        registered = rings.registered
        while len(self.thread_writers) < registered and rings.active(len(self.thread_writers)):
            slot = len(self.thread_writers)
            self.thread_writers.append(self.writer.add_thread(rings.tid(slot)))
            self.tails.append(0)
            self.detail_tails.append(0)
            self.stats.drops.append(0)
            self.stats.detail_drops.append(0)
        moved = 0
        for slot, thread_writer in enumerate(self.thread_writers):
            head = rings.head(slot)
            tail = self.tails[slot]
            if head != tail:
                for part in rings.events(slot, tail, head):
                    if clock is not None:
                        clock.convert(part["timestamp_ns"])
                    thread_writer.append_index(part)
                self.tails[slot] = head
                rings.set_tail(slot, head)
                moved += head - tail
            self.stats.drops[slot] = rings.drops(slot)
        self.stats.events += moved
        self.stats.threads = len(self.thread_writers)
        if self.sink is not None:
            moved += self._drain_detail()
        return moved + pulled

    def _drain_detail(self) -> int:
        rings = self.rings
        fed = []
        for slot in range(len(self.thread_writers)):
            head, tail = rings.detail_head(slot), self.detail_tails[slot]
            if head != tail:
                for piece in rings.detail_pieces(slot, tail, head):
                    walk = walk_records(piece, 0, len(piece))
                    if walk.problem is not None or walk.end != len(piece):
                        raise RuntimeError(f"malformed detail records from thread slot {slot} "
                                           f"at byte {walk.problem_offset}: {walk.problem}")
                    if self.clock is not None:
                        self._convert_detail(piece, walk)
                    self.sink.feed(slot, piece, walk)
                fed.append((slot, head, head - tail))
            self.stats.detail_drops[slot] = rings.detail_drops(slot)
        if self.on_trigger is not None:
            triggers, lost = rings.take_triggers()
            self.stats.triggers_lost += lost
            for ts, fid, tid in triggers:
                self.on_trigger(ts, fid, tid)
        self.sink.settle(self.thread_writers, clock_ns())
        # Only now may producers reuse the bytes the sink was fed (it may have read them in place).
        for slot, head, size in fed:
            self.detail_tails[slot] = head
            rings.set_detail_tail(slot, head)
            self.stats.detail_bytes += size
        return len(fed)

    def _clock_ready(self) -> bool:
        """With raw-tick timestamps, follow the agent's clock pairs; False until the first one.

        The agent publishes its pairs before it hooks anything, so no event waits for them.
        Timestamps are converted in the ring itself, before a writer or sink sees them.
        """
        rings = self.rings
        if self.clock is None and not rings.clock_in_ticks:
            return True
        pair = rings.clock_pair()
        if pair is None:
            return self.clock is not None
        if self.clock is None:
            self.clock = TickClock(*rings.clock_base(), *pair)
        else:
            self.clock.observe(*pair)
        return True

    def _convert_detail(self, piece: np.ndarray, walk: Walk) -> None:
        ts = gather(piece, walk.offsets, DETAIL_TIMESTAMP, "<u8", walk.stride)
        self.clock.convert(ts)
        scatter(piece, walk.offsets, DETAIL_TIMESTAMP, ts, walk.stride)

    def waits(self) -> list[tuple[int, int]]:
        """Per thread: how often its producer found a ring full and waited, and for how long (ns).

        Read on demand (status line, manifest), not on every pass."""
        return [self.rings.waits(slot) for slot in range(len(self.thread_writers))]

    def summary(self) -> dict[str, Any]:
        """What the drain saw, for the manifest: per thread, the losses and waits, the clock."""
        rings, stats = self.rings, self.stats
        waits = self.waits()
        threads = [{"id": slot, "tid": w.thread_id, "has_detail": w.detail_count > 0,
                    "index_events": w.index_count, "detail_events": w.detail_count,
                    "drops": stats.drops[slot], "detail_drops": stats.detail_drops[slot],
                    "waits": waits[slot][0], "wait_ms": round(waits[slot][1] / 1e6, 3),
                    "detail_direct_from": w.detail_direct_from}
                   for slot, w in enumerate(self.thread_writers)]
        ranges = [r for r in (w.index_time_range for w in self.thread_writers) if r is not None]
        return {
            "events": stats.events, "threads": threads,
            "time_range": [min(r[0] for r in ranges), max(r[1] for r in ranges)] if ranges
            else None,
            "index_drops": stats.total_drops, "waits": sum(n for n, _ in waits),
            "wait_ms": round(sum(ns for _, ns in waits) / 1e6, 3),
            "overflow_threads": rings.overflow_threads, "overflow_events": rings.overflow_events,
            "detail_bytes": stats.detail_bytes, "detail_drops": sum(stats.detail_drops),
            "triggers_coalesced": rings.triggers_coalesced, "triggers_lost": stats.triggers_lost,
            "clock": self.clock.summary() if self.clock is not None else {"hot_path": "os"},
        }

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
        if self.sink is not None:
            self.sink.finish(self.thread_writers, clock_ns())
