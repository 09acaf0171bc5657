"""FakeAgent: the agent's side of the ring region, played in an ordinary buffer (no Frida).

It writes what the hot path (agent/ada_rings.c) writes, where the layout says
(tracer.record.rings names every field): thread slots, index events at the ring's head,
detail records at the detail head (wrapping), drops, trigger entries committed in order,
clock pairs. And it builds the buffer of the RPC transport's `pull` as agent/ada_transport.js
does. The drain, the detail sinks, the RPC
mirror and the manifest are tested against it, and scripts/bench_drain.py times the drain with it.
"""

from __future__ import annotations

import numpy as np

from ada.atf import format as F
from ada.tracer.record import rings as R
from ada.tracer.record.transport import PULL_MAGIC, PULL_PREFIX, SEGMENT

RECORD_FIXED = F.FUNCTION_RECORD_FIXED_SIZE


def index_events(n: int, *, tid: int, first_ts: int, step_ns: int = 100, function_id: int = 1,
                 detail_seqs: np.ndarray | None = None) -> np.ndarray:
    """n events alternating CALL (depth 0) and RETURN, `step_ns` apart."""
    ev = np.zeros(n, dtype=F.INDEX_EVENT)
    ev["timestamp_ns"] = first_ts + step_ns * np.arange(n, dtype=np.uint64)
    ev["function_id"] = function_id
    ev["thread_id"] = tid
    ev["event_kind"] = np.where(np.arange(n) % 2 == 0, F.EVENT_CALL, F.EVENT_RETURN)
    ev["detail_seq"] = F.NO_DETAIL_SEQ if detail_seqs is None else detail_seqs
    return ev


def detail_records(n: int, *, tid: int, first_seq: int, first_ts: int, step_ns: int = 100,
                   stack_bytes: int = 128, function_id: int = 1) -> np.ndarray:
    """n function records as the hot path writes them, for index_seqs first_seq.. (bytes)."""
    size = RECORD_FIXED + stack_bytes
    rec = np.zeros((n, size), dtype=np.uint8)
    head = rec[:, :F.DETAIL_EVENT_HEADER_SIZE]
    head[:, 0:4].view("<u4")[:, 0] = size
    head[:, 4:6].view("<u2")[:, 0] = np.where(np.arange(n) % 2 == 0, F.DETAIL_FUNCTION_CALL,
                                              F.DETAIL_FUNCTION_RETURN)
    head[:, 8:12].view("<u4")[:, 0] = first_seq + np.arange(n, dtype=np.uint32)
    head[:, 12:16].view("<u4")[:, 0] = tid
    head[:, 16:24].view("<u8")[:, 0] = first_ts + step_ns * np.arange(n, dtype=np.uint64)
    rec[:, 24:32].view("<u8")[:, 0] = function_id
    rec[:, 32:40].view("<u8")[:, 0] = first_seq + np.arange(n, dtype=np.uint64)  # regs[0]
    rec[:, 120:122].view("<u2")[:, 0] = stack_bytes
    return rec.reshape(-1)


def _write_ring(buf: np.ndarray, base: int, size: int, cursor: int, data: np.ndarray) -> None:
    """Copy bytes into the ring of `size` bytes at `base` from `cursor` on, as memcpy would:
    in at most two pieces where it wraps."""
    pos = cursor % size
    first = min(len(data), size - pos)
    buf[base + pos:base + pos + first] = data[:first]
    buf[base:base + len(data) - first] = data[first:]


def _read_ring(buf: np.ndarray, base: int, size: int, cursor: int, length: int) -> bytes:
    pos = cursor % size
    first = min(length, size - pos)
    return buf[base + pos:base + pos + first].tobytes() + buf[base:base + length - first].tobytes()


class FakeAgent:
    """The producer side of a region of `geometry`, in `buf` (fresh zeros by default)."""

    def __init__(self, geometry: R.RegionGeometry, buf: np.ndarray | None = None) -> None:
        self.g = geometry
        self.buf = np.zeros(geometry.size, dtype=np.uint8) if buf is None else buf
        self.reader = R.RingReader(self.buf, geometry)  # the host's view, for the tests
        self.heads: list[int] = []
        self.detail_heads: list[int] = []

    # --- fields, by the layout's names ---------------------------------------------

    def _put(self, offset: int, dtype: np.dtype | str, value: int) -> None:
        dt = np.dtype(dtype)
        self.buf[offset:offset + dt.itemsize].view(dt)[0] = value

    def set_header(self, name: str, value: int) -> None:
        dt, off = R.REGION_HEADER.fields[name][:2]
        self._put(off, dt, value)

    def set_slot(self, slot: int, name: str, value: int) -> None:
        dt, off = R.SLOT_CONTROL.fields[name][:2]
        self._put(R.SLOTS_OFFSET + slot * R.SLOT_SIZE + off, dt, value)

    def tail(self, slot: int) -> int:
        return self.reader.slot(slot, "tail")

    # --- threads and their rings -------------------------------------------------------

    def register(self, tid: int, publish: bool = True) -> int:
        """A thread's first event claims a slot (ada_claim_slot): a fresh one while there are
        any, else one the host freed; the claim bumps the slot's generation. publish=False
        stops short of marking it active, as a thread caught in the middle of registering."""
        registered = self.reader.header("registered")
        if registered < self.g.max_threads:
            slot = registered
            self.heads.append(0)
            self.detail_heads.append(0)
            self.set_header("registered", slot + 1)
        else:
            free = [i for i in range(self.g.max_threads)
                    if self.reader.state(i) == R.SLOT_FREE]
            if not free:
                raise AssertionError("no free slot: the thread would overflow")
            slot = free[0]
            self.heads[slot] = self.detail_heads[slot] = 0
            for name in ("head", "tail", "detail_head", "detail_tail", "drops", "detail_drops",
                         "waits", "wait_ns"):
                self.set_slot(slot, name, 0)
        self.set_slot(slot, "generation", self.reader.generation(slot) + 1)
        self.set_slot(slot, "tid", tid)
        if publish:
            self.set_slot(slot, "state", R.SLOT_ACTIVE)
        return slot

    def end(self, slot: int) -> None:
        """The thread exited (ada_thread_exit): the host may drain and free its slot."""
        self.set_slot(slot, "state", R.SLOT_ENDED)

    def room(self, slot: int) -> int:
        """Events the index ring can take before the producer would have to wait."""
        return self.g.index_capacity - (self.heads[slot] - self.tail(slot))

    def emit(self, slot: int, events: np.ndarray) -> None:
        """Publish index events at the head; the ring must have room (a real producer waits)."""
        if len(events) > self.room(slot):
            raise AssertionError(f"ring of slot {slot} has room for {self.room(slot)} events, "
                                 f"not {len(events)}: the producer would wait")
        size = self.g.index_capacity * F.INDEX_EVENT_SIZE
        _write_ring(self.buf, self.g.index_rings_offset + slot * size, size,
                    self.heads[slot] * F.INDEX_EVENT_SIZE, events.view(np.uint8))
        self.heads[slot] += len(events)
        self.set_slot(slot, "head", self.heads[slot])

    def emit_detail(self, slot: int, records: np.ndarray) -> None:
        """Publish detail records (bytes) at the detail head, wrapping around the ring."""
        cap = self.g.detail_capacity
        used = self.detail_heads[slot] - self.reader.slot(slot, "detail_tail")
        if used + len(records) > cap:
            raise AssertionError(f"detail ring of slot {slot} is full: the producer would wait")
        _write_ring(self.buf, self.g.detail_rings_offset + slot * cap, cap,
                    self.detail_heads[slot], records)
        self.detail_heads[slot] += len(records)
        self.set_slot(slot, "detail_head", self.detail_heads[slot])

    def drop(self, slot: int, lane: str = "index", n: int = 1) -> None:
        """The drop policy gave up n records of a full ring: counted in the slot."""
        name = "drops" if lane == "index" else "detail_drops"
        self.set_slot(slot, name, self.reader.slot(slot, name) + n)

    def trigger(self, position: int, timestamp_ns: int, function_id: int, tid: int) -> None:
        """Commit trigger entry `position` (ada_on_trigger): commit = position + 1, written last."""
        at = R.TRIGGERS_OFFSET + (position % R.TRIGGER_SLOTS) * R.TRIGGER_ENTRY.itemsize
        entry = self.buf[at:at + R.TRIGGER_ENTRY.itemsize].view(R.TRIGGER_ENTRY)
        entry["timestamp_ns"], entry["function_id"], entry["tid"] = timestamp_ns, function_id, tid
        entry["commit"] = position + 1

    def clock_ticks(self, base: tuple[int, int], pair: tuple[int, int]) -> None:
        """Timestamps are raw ticks; the start-up (ticks, ns) pair and the latest one."""
        self.set_header("clock_ticks", 1)
        self.set_header("clock_base_ticks", base[0])
        self.set_header("clock_base_ns", base[1])
        self.set_header("clock_pair_ticks", pair[0])
        self.set_header("clock_pair_ns", pair[1])

    # --- the RPC transport ---------------------------------------------------------------

    def pull(self, budget: int, freed: list[int] = ()) -> bytes:
        """The `pull` RPC of agent/ada_transport.js (the host's, as the recording stops): free
        the slots the host freed, then what collect() gives."""
        for slot in freed:
            self.reader.free_slot(slot)
        return self.collect(budget)

    def collect(self, budget: int) -> bytes:
        """_collect() of agent/ada_transport.js, the same bytes (what each push carries):
        everything produced past the tails, detail whole or not at all, index events as far
        as the budget reaches; the tails move past what it holds."""
        registered = self.reader.registered
        controls = R.SLOTS_OFFSET + registered * R.SLOT_SIZE
        copy = self.buf[:controls].copy()
        segments, data = [], []
        at = PULL_PREFIX.itemsize + controls + 2 * registered * SEGMENT.itemsize
        for slot in range(registered):
            state = self.reader.state(slot)
            if state not in (R.SLOT_ACTIVE, R.SLOT_ENDED):
                continue
            tail, dtail = self.tail(slot), self.reader.slot(slot, "detail_tail")
            dhead = self.detail_heads[slot] if self.g.detail_capacity else 0
            sent = 0
            if dhead > dtail and dhead - dtail <= budget:
                sent = dhead - dtail
                cap = self.g.detail_capacity
                segments.append((slot, 1, dtail, sent, at))
                data.append(_read_ring(self.buf, self.g.detail_rings_offset + slot * cap, cap,
                                       dtail, sent))
                at, budget = at + sent, budget - sent
            ctl = R.SLOTS_OFFSET + slot * R.SLOT_SIZE
            copy[ctl + R.SLOT_CONTROL.fields["detail_head"][1]:][:8].view("<u8")[0] = dtail + sent
            events = max(0, min(self.heads[slot] - tail, budget // F.INDEX_EVENT_SIZE))
            if events:
                size = self.g.index_capacity * F.INDEX_EVENT_SIZE
                start, length = tail * F.INDEX_EVENT_SIZE, events * F.INDEX_EVENT_SIZE
                segments.append((slot, 0, start, length, at))
                data.append(_read_ring(self.buf, self.g.index_rings_offset + slot * size, size,
                                       start, length))
                at += events * F.INDEX_EVENT_SIZE
                budget -= events * F.INDEX_EVENT_SIZE
            copy[ctl + R.SLOT_CONTROL.fields["head"][1]:][:8].view("<u8")[0] = tail + events
            if state == R.SLOT_ENDED and (tail + events < self.heads[slot] or sent < dhead - dtail):
                copy[ctl:ctl + 4].view("<u4")[0] = R.SLOT_ACTIVE  # not all sent: not freeable
            if events or sent:
                self.set_slot(slot, "tail", tail + events)
                self.set_slot(slot, "detail_tail", dtail + sent)
        prefix = np.zeros(1, dtype=PULL_PREFIX)
        prefix["magic"], prefix["segments"] = PULL_MAGIC, len(segments)
        prefix["registered"], prefix["capacity"] = registered, 2 * registered
        table = np.zeros(2 * registered, dtype=SEGMENT)
        for i, seg in enumerate(segments):
            table[i] = seg
        return prefix.tobytes() + copy.tobytes() + table.tobytes() + b"".join(data)
