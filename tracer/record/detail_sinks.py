"""Detail sinks: where the drain hands each thread's detail records, and what they persist.

Two siblings implement DetailSink, one per detail mode:

- AlwaysDetailSink (--detail): every record is persisted, in the drain's own order (index
  first). The hot path publishes a detail record just before the index event it links to, so
  a pass can see a record whose index event it has not drained yet. Such records wait for the
  next pass: a detail event is never written before its index event, so a killed tracer leaves
  at worst links past the end of a recovered detail.atf (which readers expect), never the
  other way round.
- WindowDetailSink (the flight recorder: --pre-roll-ms/--post-roll-ms): detail captured
  continuously, persisted only around triggers. Every trigger at time T opens the window
  [T - pre_roll, T + post_roll]; overlapping windows merge. `settle()` persists, in each
  thread's order, the records that fall in a window (linking them to their index events after
  the fact) and forgets those that no future trigger can reach (older than now - pre_roll -
  slack). Memory is bounded by `cap_bytes`: past it, the oldest undecided records are evicted,
  and any window that would have covered them is marked truncated by how much of its start was
  lost. Nothing is cut silently.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ada.atf.records import Walk, gather
from ada.atf.writer import ThreadWriter


class DetailSink(Protocol):
    """feed() gets a thread's whole, well-formed records and their walk (offsets relative to
    data); `thread` is its N (thread_N), which indexes the writers settle() is handed.

    data may be a view of the ring, valid until settle() returns: keep only copies.
    holds(thread) says whether records of the thread still wait (its files stay open).
    summary() is the sink's part of the manifest's "detail" object.
    """

    def feed(self, thread: int, data: np.ndarray, walk: Walk) -> None: ...
    def settle(self, writers: list[ThreadWriter], now_ns: int) -> None: ...
    def holds(self, thread: int) -> bool: ...
    def finish(self, writers: list[ThreadWriter], now_ns: int) -> None: ...
    def summary(self) -> dict[str, Any]: ...


class AlwaysDetailSink:
    """--detail: every record, linked as the hot path linked it."""

    def __init__(self) -> None:
        self._queues: dict[int, deque[tuple[np.ndarray, Walk]]] = {}
        self.persisted = 0
        self.unlinked = 0  # records whose index event never came (target died in between)

    def feed(self, thread: int, data: np.ndarray, walk: Walk) -> None:
        if len(walk.offsets):
            self._queues.setdefault(thread, deque()).append((data, walk))

    def holds(self, thread: int) -> bool:
        return bool(self._queues.get(thread))

    def settle(self, writers: list[ThreadWriter], now_ns: int) -> None:
        for thread, queue in self._queues.items():
            self._settle_thread(queue, writers[thread])
            # What waits for its index events may be a view of the ring: keep a copy.
            for i, (data, walk) in enumerate(queue):
                if data.base is not None:
                    queue[i] = (data.copy(), walk)
        self._queues = {thread: queue for thread, queue in self._queues.items() if queue}

    def _settle_thread(self, queue: deque[tuple[np.ndarray, Walk]], writer: ThreadWriter) -> None:
        while queue:
            data, walk = queue[0]
            last = int(gather(data, walk.offsets[-1:], 8, "<u4")[0])
            if last < writer.index_count:  # the usual case: every index event is written
                ready = len(walk.offsets)
            else:
                seqs = gather(data, walk.offsets, 8, "<u4", walk.stride)
                ready = int(np.searchsorted(seqs, writer.index_count, "left"))
            if ready == len(walk.offsets):
                writer.append_detail(data, walk)
                self.persisted += ready
                queue.popleft()
                continue
            if ready:  # the rest waits for its index events (a record or two)
                cut = int(walk.offsets[ready])
                writer.append_detail(data[:cut], Walk(walk.offsets[:ready], cut, None, None,
                                                      walk.stride))
                self.persisted += ready
                queue[0] = (data[cut:], Walk(walk.offsets[ready:] - cut, len(data) - cut, None,
                                             None, walk.stride))
            return

    def finish(self, writers: list[ThreadWriter], now_ns: int) -> None:
        self.settle(writers, now_ns)
        for queue in self._queues.values():
            for _, walk in queue:
                self.unlinked += len(walk.offsets)
        self._queues.clear()

    def summary(self) -> dict[str, Any]:
        return {"unlinked_at_end": self.unlinked}


# Triggers found by the hot path reach the host a little after they happen:
# records this much older than the pre-roll horizon are kept a while longer.
SETTLE_SLACK_NS = 200_000_000


@dataclass
class Window:
    start_ns: int
    end_ns: int
    truncated_ns: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"start_ns": self.start_ns, "end_ns": self.end_ns,
                "truncated": self.truncated_ns > 0, "truncated_ns": self.truncated_ns}


@dataclass
class _Chunk:
    """Detail records of one thread, as drained from its ring in one pass."""

    buf: np.ndarray
    offsets: np.ndarray
    ts: np.ndarray
    seqs: np.ndarray
    stride: int
    pos: int = 0  # records before pos are decided

    @property
    def n(self) -> int:
        return len(self.offsets)

    def records(self, sel: np.ndarray) -> bytes:
        if self.stride:
            return self.buf[:self.n * self.stride].reshape(self.n, self.stride)[sel].tobytes()
        lengths = gather(self.buf, self.offsets, 0, "<u4")
        return b"".join(self.buf[int(self.offsets[i]):int(self.offsets[i]) + int(lengths[i])]
                        .tobytes() for i in sel)


@dataclass
class FlightStats:
    persisted: int = 0
    discarded: int = 0
    evicted: int = 0
    evicted_bytes: int = 0
    buffered_bytes: int = 0
    triggers: list[dict[str, Any]] = field(default_factory=list)


class WindowDetailSink:
    """The flight recorder: records persisted only inside trigger windows."""

    def __init__(self, pre_roll_ns: int, post_roll_ns: int, cap_bytes: int) -> None:
        self.pre = pre_roll_ns
        self.post = post_roll_ns
        self.cap = cap_bytes
        self.windows: list[Window] = []
        self.stats = FlightStats()
        self._queues: dict[int, deque[_Chunk]] = {}
        self._pending: list[dict[str, Any]] = []
        self._scheduled: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._lost_until = -1  # newest timestamp evicted by the cap or discarded as too old

    # --- triggers (any thread) ----------------------------------------------------

    def trigger(self, timestamp_ns: int, kind: str, **details: Any) -> None:
        with self._lock:
            self._pending.append({"kind": kind, "timestamp_ns": timestamp_ns, **details})

    def schedule(self, timestamp_ns: int, kind: str, **details: Any) -> None:
        """A trigger that happens at a known future time (--trigger-at-ms)."""
        with self._lock:
            self._scheduled.append({"kind": kind, "timestamp_ns": timestamp_ns, **details})

    def _take_triggers(self, now_ns: int) -> list[dict[str, Any]]:
        with self._lock:
            due = [t for t in self._scheduled if t["timestamp_ns"] <= now_ns]
            self._scheduled = [t for t in self._scheduled if t["timestamp_ns"] > now_ns]
            taken, self._pending = self._pending + due, []
        return taken

    def _open_window(self, t: int) -> None:
        w = Window(max(0, t - self.pre), t + self.post)
        if w.start_ns <= self._lost_until:  # a late trigger, or the cap ate its pre-roll
            w.truncated_ns = min(self._lost_until, w.end_ns) - w.start_ns + 1
        merged: list[Window] = []
        for old in sorted(self.windows + [w], key=lambda x: x.start_ns):
            if merged and old.start_ns <= merged[-1].end_ns:
                last = merged[-1]
                last.truncated_ns = max(last.truncated_ns, old.truncated_ns)
                last.end_ns = max(last.end_ns, old.end_ns)
            else:
                merged.append(Window(old.start_ns, old.end_ns, old.truncated_ns))
        self.windows = merged

    def _in_windows(self, ts: np.ndarray) -> np.ndarray:
        if not self.windows:
            return np.zeros(len(ts), dtype=bool)
        starts = np.array([w.start_ns for w in self.windows], dtype=np.uint64)
        ends = np.array([w.end_ns for w in self.windows], dtype=np.uint64)
        i = np.searchsorted(starts, ts, "right") - 1
        ok = i >= 0
        result = np.zeros(len(ts), dtype=bool)
        result[ok] = ts[ok] <= ends[i[ok]]
        return result

    # --- records (drain thread) -----------------------------------------------------

    def holds(self, thread: int) -> bool:
        return bool(self._queues.get(thread))

    def feed(self, thread: int, data: np.ndarray, walk: Walk) -> None:
        """Buffer one thread's newly drained detail records (complete, back to back)."""
        if not len(walk.offsets):
            return
        data = data.copy()  # it may be a view of the ring, which producers will reuse
        chunk = _Chunk(data, walk.offsets, gather(data, walk.offsets, 16, "<u8", walk.stride),
                       gather(data, walk.offsets, 8, "<u4", walk.stride).astype(np.int64),
                       walk.stride)
        self._queues.setdefault(thread, deque()).append(chunk)
        self.stats.buffered_bytes += len(data)

    def settle(self, writers: list[ThreadWriter], now_ns: int) -> None:
        """Open windows for new triggers, persist what they cover, forget what they cannot."""
        for t in self._take_triggers(now_ns):
            self.stats.triggers.append(t)
            self._open_window(t["timestamp_ns"])
        horizon = now_ns - self.pre - SETTLE_SLACK_NS
        for thread, queue in self._queues.items():
            self._settle_thread(queue, writers[thread], horizon)
        self._queues = {thread: queue for thread, queue in self._queues.items() if queue}
        self._enforce_cap()

    def _settle_thread(self, queue: deque[_Chunk], writer: ThreadWriter, horizon: int) -> None:
        while queue:
            ch = queue[0]
            ts, seqs = ch.ts[ch.pos:], ch.seqs[ch.pos:]
            in_window = self._in_windows(ts)
            decided = np.where(in_window, seqs < writer.index_count, ts < horizon)
            stop = len(ts) if decided.all() else int(np.argmin(decided))
            keep = np.flatnonzero(in_window[:stop]) + ch.pos
            if len(keep):
                first = writer.detail_count
                # Link first, append second: see ThreadWriter.set_detail_seq.
                writer.set_detail_seqs(ch.seqs[keep], np.arange(first, first + len(keep)))
                writer.append_detail(ch.records(keep))
                self.stats.persisted += len(keep)
            dropped = stop - len(keep)
            if dropped:
                self.stats.discarded += dropped
                self._lost_until = max(self._lost_until, int(ts[:stop][~in_window[:stop]].max()))
            ch.pos += stop
            if ch.pos < ch.n:
                return
            queue.popleft()
            self.stats.buffered_bytes -= len(ch.buf)

    def _enforce_cap(self) -> None:
        """Evict the oldest undecided records until the buffer fits in cap_bytes."""
        while self.stats.buffered_bytes > self.cap:
            fronts = [(q[0].ts[q[0].pos], thread) for thread, q in self._queues.items() if q]
            if not fronts:
                return
            _, thread = min(fronts)
            ch = self._queues[thread].popleft()
            lost_ts = ch.ts[ch.pos:]
            oldest, newest = int(lost_ts.min()), int(lost_ts.max())
            self._lost_until = max(self._lost_until, newest)
            for w in self.windows:
                overlap = min(newest, w.end_ns) - max(oldest, w.start_ns) + 1
                if overlap > 0:
                    w.truncated_ns = min(w.end_ns - w.start_ns + 1, w.truncated_ns + overlap)
            self.stats.evicted += ch.n - ch.pos
            self.stats.evicted_bytes += len(ch.buf)
            self.stats.buffered_bytes -= len(ch.buf)

    def finish(self, writers: list[ThreadWriter], now_ns: int) -> None:
        """At the end of the recording: no future trigger, so everything is decidable."""
        self.settle(writers, now_ns)
        self.settle(writers, now_ns + self.pre + SETTLE_SLACK_NS + 1)

    @property
    def truncated_ns(self) -> int:
        return sum(w.truncated_ns for w in self.windows)

    def summary(self) -> dict[str, Any]:
        """Counts for the manifest's "detail" object, with the triggers and windows themselves."""
        return {"persisted": self.stats.persisted, "discarded": self.stats.discarded,
                "evicted_by_cap": self.stats.evicted, "truncated_ns": self.truncated_ns,
                "triggers": list(self.stats.triggers),
                "windows": [w.to_dict() for w in self.windows]}
