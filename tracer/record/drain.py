"""The drain thread: the only owner of the ATF writers.

Each pass copies every thread's new index events out of its ring into that
thread's ThreadWriter (straight from the mapping, no per-event work), then
hands the room back to the producer by advancing the ring's tail.

Threads and slots: a thread holds a ring slot while it lives. The drain binds
each new holder of a slot (a new generation) to the next thread_N, so N counts
threads in the order the drain finds them; when a thread has ended and its
rings are drained, the drain frees the slot for a later thread, and closes the
thread's files once the detail sink holds none of its records.

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
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ada.atf.format import REVISION_1, detail_event_header_dtype
from ada.atf.records import Walk, gather, scatter, walk_records
from ada.atf.writer import SessionWriter, ThreadWriter

from .clock import TickClock, prepare_conversion
from .detail_sinks import DetailSink
from .nap import IDLE_SLEEP_S, Nap
from .rings import SLOT_ACTIVE, SLOT_ENDED, RingReader, clock_ns

# The drain's pace (Drain.run). It naps after a pass that found nothing, the nap doubling
# from its Nap's first (IDLE_SLEEP_S; over rpc the longest at once) up to its longest
# (nap.py: 100 ms where a producer can wake it, 4 ms where nothing can), and not after a
# pass that moved anything: a program at rest costs ada about 10 wakes a second (it cost
# 2,000, a tenth of a core, at a fixed 0.5 ms), one that runs has the drain it had. (Napping
# also after passes that moved under a sixteenth of a ring cut ada's CPU time a little for a
# program at 2 M events/s, 19-23 % of a core to 16-19 %, and cost the inline engine flat
# out: its waits for the drain rose. docs/recording.md, "The drain's pace".)
BEAT_S = 0.1  # the heartbeat's period over shared memory (see Heartbeat)
DETAIL_TIMESTAMP = detail_event_header_dtype(REVISION_1).fields["timestamp"][1]


class Heartbeat:
    """The host's beat, every `period` (BEAT_S), from the moment the agent is configured until
    the producers are released at the end (Drain.finish): in the shared region's header, or
    over rpc a message the agent answers by renewing its beat (transport.PushAcks, which
    also says what the host received; once a second, as each message into the target is a
    chance of Frida's fork fault). A thread waiting for room (a full ring, no free slot)
    trusts the host for stall_s (2 s; rpc 10 s) after the last beat, then counts its events
    as dropped: so a dead tracer never hangs the target. It beats from a thread of its own,
    not as the drain works: a write that blocks for long (a slow disk; /tmp over 9p in
    the emulated arm64 machine, where 21 events of 160,000 were dropped so) is a drain
    alive, and so is a drain that finds nothing while the agent's pushes are on their way
    over a slow link, its rings full behind them (a test holds pushes back 3.5 s against a
    trust of 1.5 s). And it beats before the drain starts: a running program's threads fill
    their rings from their first hooked call, while the host still writes its first
    manifest; on a loaded machine that gap passed 2 s, and each thread dropped an event at
    its first full ring. It stops at that release, when the drain fails, when the recording
    is abandoned, and with ada's process, which is what stall_s is for."""

    def __init__(self, beat: Callable[[], None], period: float = BEAT_S) -> None:
        self._stopped = threading.Event()
        self.period = period
        beat()
        threading.Thread(target=self._run, args=(beat,), name="ada-heartbeat",
                         daemon=True).start()

    def _run(self, beat: Callable[[], None]) -> None:
        while not self._stopped.wait(self.period):
            beat()

    def stop(self) -> None:
        self._stopped.set()


@dataclass
class DrainStats:
    events: int = 0
    threads: int = 0
    detail_bytes: int = 0
    triggers_lost: int = 0


@dataclass
class ThreadCounts:
    """A thread's losses and waits, as its producer counted them in its slot (kept once the
    slot is freed for another thread)."""

    drops: int = 0
    detail_drops: int = 0
    waits: int = 0
    wait_ns: int = 0
    slot: int = 0
    ended: bool = False


@dataclass
class _Binding:
    """The thread a slot holds now, and how far the drain has read its rings."""

    thread: int  # N of thread_N
    generation: int
    tail: int = 0
    detail_tail: int = 0
    ended: bool = False  # the slot said the thread ended, on a pass before this one


class Drain(threading.Thread):
    """Polls the rings until stopped; `finish()` drains what is left and stops."""

    def __init__(self, rings: RingReader, writer: SessionWriter,
                 sink: DetailSink | None = None,
                 on_trigger: Callable[[int, int, int], None] | None = None,
                 sync: Callable[[], int] | None = None,
                 heartbeat: Heartbeat | None = None, nap: Nap | None = None,
                 pause_s: float = 0.0) -> None:
        super().__init__(name="ada-drain", daemon=True)
        self.nap = nap or Nap()  # between passes (see IDLE_SLEEP_S)
        # Tests only: a pause after each pass that moved something, so that producers outrun
        # the drain on any machine, as they do on a loaded one (ADA_TEST_DRAIN_PAUSE_MS).
        self.pause_s = pause_s
        self.heartbeat = heartbeat  # stopped at the release, or when the drain fails
        self.rings = rings
        self.sync = sync  # the RPC transport refreshes the mirror the rings are read from
        self.clock: TickClock | None = None  # raw-tick timestamps: see _clock_ready
        if rings.clock_in_ticks:
            prepare_conversion()  # its kernel compiled now (once a machine), not mid-pass
        self.writer = writer  # the session's; thread_writers are what it made, one per slot
        self.sink = sink
        self.on_trigger = on_trigger
        self.thread_writers: list[ThreadWriter] = []  # by N of thread_N
        self.counts: list[ThreadCounts] = []  # by N
        self._bindings: dict[int, _Binding] = {}  # by slot
        self._released: dict[int, int] = {}  # by slot: the generation last drained and freed
        self._closing: list[int] = []  # ended threads whose files are still open
        self.stats = DrainStats()
        self.error: BaseException | None = None
        self._stop_requested = threading.Event()
        self.failed = threading.Event()

    def run(self) -> None:
        sleep, longest = 0.0, self.nap.longest_s
        try:
            while not self._stop_requested.is_set():
                moved = self.drain_once()
                if moved:
                    sleep = 0.0
                    if self.pause_s:
                        time.sleep(self.pause_s)
                else:
                    sleep = min(max(2 * sleep, self.nap.first_s), longest)
                    self.nap.sleep(sleep)
        except BaseException as e:  # noqa: BLE001 - reported by the recorder, never lost
            self.error = e
            self.failed.set()
            self._stop_beating()  # a host whose drain failed is gone to the waiting threads

    def _stop_beating(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()

    def drain_once(self) -> int:
        """One pass over every ring; returns 0 when nothing at all moved."""
        rings = self.rings
        pulled = self.sync() if self.sync is not None else 0
        # The heartbeat says the drain is alive: a thread that waits for room (a full ring, no
        # free slot) gives up after stall_s (2 s) of silence. It beats as each step of a pass ends,
        # not once a pass: with thousands of threads ending on a slow machine (the emulated
        # arm64 one), one pass took longer than the 2 s default and threads stopped waiting.
        rings.heartbeat()
        if not self._clock_ready():
            return pulled
        clock = self.clock
        moved = 0
        ended = []
        for slot in range(rings.registered):
            binding = self._bind(slot)
            if binding is None:
                continue
            if rings.state(slot) == SLOT_ENDED:
                ended.append(slot)
            head, tail = rings.head(slot), binding.tail
            if head != tail:
                writer = self.thread_writers[binding.thread]
                for part in rings.events(slot, tail, head):  # two parts where the ring wraps
                    if clock is not None:
                        clock.convert(part["timestamp_ns"])
                    writer.append_index(part)
                    # Counted part by part: when the second write fails (a full disk), the
                    # count, the tail and the file still agree on what was kept.
                    binding.tail += len(part)
                    self.stats.events += len(part)
                rings.set_tail(slot, head)
                moved += head - tail
                rings.heartbeat()  # see the first beat above
            self.counts[binding.thread].drops = rings.drops(slot)
        self.stats.threads = len(self.thread_writers)
        if self.sink is not None:
            moved += self._drain_detail()
        # A slot marked or freed now wants another pass at once (the next one frees it; over
        # rpc the one after tells the agent): the drain does not nap on it.
        return moved + pulled + self._release(ended)

    def _bind(self, slot: int) -> _Binding | None:
        """The slot's current thread, bound to a new thread_N when it is a new one."""
        rings = self.rings
        state = rings.state(slot)
        binding = self._bindings.get(slot)
        if state not in (SLOT_ACTIVE, SLOT_ENDED):
            return binding  # unused, or freed by us (then unbound)
        generation = rings.generation(slot)
        if binding is not None and binding.generation == generation:
            return binding
        if self._released.get(slot) == generation:
            return None  # a stale view of a thread already drained (an RPC copy sent earlier)
        if binding is not None:  # only a freed slot is claimed again, and we free it unbound
            raise RuntimeError(f"thread slot {slot} changed hands before it was drained")
        # Writer and counts first: the status line reads the bindings from another thread.
        thread = len(self.thread_writers)
        self.thread_writers.append(self.writer.add_thread(rings.tid(slot)))
        self.counts.append(ThreadCounts(slot=slot))
        binding = self._bindings[slot] = _Binding(thread, generation)
        return binding

    def _release(self, ended: list[int]) -> int:
        """Free the slots of ended threads once drained; close the threads' files once the
        sink is done with them. Returns the slots it marked or freed."""
        rings = self.rings
        changed = 0
        for slot in ended:
            binding = self._bindings[slot]
            drained = rings.head(slot) == binding.tail and (
                self.sink is None or rings.detail_head(slot) == binding.detail_tail)
            if not (binding.ended and drained):
                changed += not binding.ended
                binding.ended = True  # free it on a later pass: see the producer's last writes
                continue
            changed += 1
            counts = self.counts[binding.thread]
            counts.waits, counts.wait_ns = rings.waits(slot)
            counts.drops, counts.ended = rings.drops(slot), True
            if self.sink is not None:
                counts.detail_drops = rings.detail_drops(slot)
            del self._bindings[slot]
            self._released[slot] = binding.generation
            rings.free_slot(slot)
            self._closing.append(binding.thread)
        still_open = []
        for thread in self._closing:
            if self.sink is not None and self.sink.holds(thread):
                still_open.append(thread)
            else:
                self.thread_writers[thread].finalize()
                rings.heartbeat()
        self._closing = still_open
        return changed

    def _drain_detail(self) -> int:
        rings = self.rings
        fed = []
        for slot, binding in self._bindings.items():
            head, tail = rings.detail_head(slot), binding.detail_tail
            if head != tail:
                for piece in rings.detail_pieces(slot, tail, head):
                    walk = walk_records(piece, 0, len(piece))
                    if walk.problem is not None or walk.end != len(piece):
                        raise RuntimeError(f"malformed detail records from thread slot {slot} "
                                           f"at byte {walk.problem_offset}: {walk.problem}")
                    if self.clock is not None:
                        self._convert_detail(piece, walk)
                    self.sink.feed(binding.thread, piece, walk)
                fed.append((slot, binding, head, head - tail))
            self.counts[binding.thread].detail_drops = rings.detail_drops(slot)
        if self.on_trigger is not None:
            triggers, lost = rings.take_triggers()
            self.stats.triggers_lost += lost
            for ts, fid, tid in triggers:
                self.on_trigger(ts, fid, tid)
        self.sink.settle(self.thread_writers, clock_ns())
        # Only now may producers reuse the bytes the sink was fed (it may have read them in place).
        for slot, binding, head, size in fed:
            binding.detail_tail = head
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

    def thread_counts(self) -> list[ThreadCounts]:
        """Per thread_N: its drops and waits, read from its slot while it holds one.

        Read on demand (status line, manifest), not on every pass, from any thread."""
        for slot, binding in list(self._bindings.items()):  # one step: the drain adds to it
            counts = self.counts[binding.thread]
            counts.waits, counts.wait_ns = self.rings.waits(slot)
            counts.drops = self.rings.drops(slot)  # still counted after a failed drain
            if self.sink is not None:
                counts.detail_drops = self.rings.detail_drops(slot)
        return self.counts

    def unwritten(self) -> int:
        """Index events still in the rings that no writer took: 0 after a finish(), the
        events a failed drain left behind otherwise."""
        return sum(max(0, self.rings.head(slot) - binding.tail)
                   for slot, binding in list(self._bindings.items()))

    def shortfall(self, heads: list[list[Any]]) -> tuple[int, int]:
        """Index events and detail bytes the producers had written (their heads, as the agent
        reported them at the end: [slot, generation, head, detail_head]) that never reached
        the writers."""
        events = detail = 0
        for slot, generation, head, detail_head in heads:
            if self._released.get(slot) == generation:
                continue  # drained and freed
            binding = self._bindings.get(slot)
            tail, detail_tail = (binding.tail, binding.detail_tail) \
                if binding is not None and binding.generation == generation else (0, 0)
            events += max(0, int(head) - tail)
            if self.sink is not None:
                detail += max(0, int(detail_head) - detail_tail)
        return events, detail

    def summary(self) -> dict[str, Any]:
        """What the drain saw, for the manifest: per thread, the losses and waits, the clock."""
        rings, stats = self.rings, self.stats
        counts = self.thread_counts()
        threads = [{"id": n, "tid": w.thread_id, "slot": c.slot, "ended": c.ended,
                    "has_detail": w.detail_count > 0, "index_events": w.index_count,
                    "detail_events": w.detail_count, "drops": c.drops,
                    "detail_drops": c.detail_drops, "waits": c.waits,
                    "wait_ms": round(c.wait_ns / 1e6, 3),
                    "detail_direct_from": w.detail_direct_from,
                    "index_direct_from": w.index_direct_from}
                   for n, (w, c) in enumerate(zip(self.thread_writers, counts))]
        ranges = [r for r in (w.index_time_range for w in self.thread_writers) if r is not None]
        return {
            "events": stats.events, "threads": threads,
            "time_range": [min(r[0] for r in ranges), max(r[1] for r in ranges)] if ranges
            else None,
            "index_drops": sum(c.drops for c in counts),
            "unwritten_events": self.unwritten(),
            "waits": sum(c.waits for c in counts),
            "wait_ms": round(sum(c.wait_ns for c in counts) / 1e6, 3),
            "overflow_threads": rings.overflow_threads, "overflow_events": rings.overflow_events,
            "unbacked_threads": rings.header("unbacked_threads"),
            "unwound_calls": rings.header("unwound_calls"),
            "skipped_events": rings.header("skipped_events"),
            "trap_calls": rings.header("trap_calls"),
            "paused_spawns": rings.header("paused_spawns"),
            "drain_wakes": rings.header("drain_wakes") + self.nap.wakes,
            "forked": rings.forked(),
            "terminate": None if rings.header("terminate_tid") == 0 else {
                "thread_id": rings.header("terminate_tid"),
                "open_calls": rings.header("terminate_depth"),
                "function_id": rings.header("terminate_fid")},
            "detail_bytes": stats.detail_bytes,
            "detail_drops": sum(c.detail_drops for c in counts),
            "triggers_coalesced": rings.triggers_coalesced, "triggers_lost": stats.triggers_lost,
            "clock": self.clock.summary() if self.clock is not None else {"hot_path": "os"},
        }

    def finish(self, release: Callable[[], None], settle_s: float = 0.05) -> None:
        """Stop polling, drain until the rings stay empty for `settle_s`, then `release` the
        producers (the stop flag: a thread that finds its ring full drops from then on) and
        take what they wrote meanwhile.

        Released only now, not as the hooks come out: a thread caught waiting for room then
        (the drain behind, on a loaded machine) would have dropped an event of the recording.
        Released even after a failed drain, so that no thread waits for it. The heartbeat goes
        on until then: over a slow link these last pulls are slow too."""
        self._stop_requested.set()
        self.nap.end()
        if self.is_alive():
            self.join()
        try:
            if self.error is None:
                quiet_since = time.monotonic()
                while time.monotonic() - quiet_since < settle_s:
                    if self.drain_once():
                        quiet_since = time.monotonic()
                    else:
                        time.sleep(IDLE_SLEEP_S)
        finally:
            release()
            self._stop_beating()
        if self.error is not None:
            return
        self.drain_once()
        if self.sink is not None:
            self.sink.finish(self.thread_writers, clock_ns())
