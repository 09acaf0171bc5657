"""The ring region shared with the agent: its layout, and the consumer side of each ring.

The layout is defined by agent/ada_hooks.c (see the comment at its top); this
module mirrors it and `check_layout` compares the mirror with the offsets the
compiled agent reports, so the two cannot drift apart silently.

Local device: the region is a file in /dev/shm (mode 0600, unique name), mapped
by the agent and by this process. Rings survive a crash of the target.
"""

from __future__ import annotations

import mmap
import os
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from atf import format as F
from atf.records import walk_records

HEADER_SIZE = 4096
SLOT_SIZE = 256
SLOT_ACTIVE = 1

# RegionHeader fields the host reads or writes: (offset, dtype). The agent writes the rest
# (geometry, policy, stall limit); agent/ada_hooks.c has the full struct.
H_REGISTERED, H_OVERFLOW_THREADS, H_OVERFLOW_EVENTS = (24, "<u4"), (28, "<u4"), (32, "<u8")
H_STOP, H_HEARTBEAT = (44, "<u4"), (48, "<u8")
H_TRIGGER_HEAD, H_TRIGGER_TAIL, H_TRIGGERS_COALESCED = (96, "<u4"), (100, "<u4"), (104, "<u4")
H_TRIGGER_GAP = (112, "<u8")
H_CLOCK_SEQ, H_CLOCK_TICKS = (128, "<u4"), (132, "<u4")
H_CLOCK_BASE_TICKS, H_CLOCK_BASE_NS = (136, "<u8"), (144, "<u8")
H_CLOCK_PAIR_TICKS, H_CLOCK_PAIR_NS = (152, "<u8"), (160, "<u8")
# SlotControl fields
S_STATE, S_TID, S_DETAIL_HEAD, S_DETAIL_DROPS = 0, 4, 8, 16
S_HEAD, S_DROPS, S_WAITS, S_WAIT_NS, S_TAIL, S_DETAIL_TAIL = 64, 72, 80, 88, 128, 136
# Trigger ring: TriggerEntry {u64 timestamp_ns, u64 function_id, u32 tid, u32 commit, u64 reserved}
TRIGGER_OFFSET, TRIGGER_SLOTS = 1024, 64
TRIGGER_ENTRY = np.dtype([("timestamp_ns", "<u8"), ("function_id", "<u8"), ("tid", "<u4"),
                          ("commit", "<u4"), ("reserved", "<u8")])

# What ada_layout() reports, word by word (see agent/ada_hooks.c).
EXPECTED_LAYOUT = {0: 168, 1: SLOT_SIZE, 2: F.INDEX_EVENT_SIZE, 3: H_REGISTERED[0],
                   4: H_HEARTBEAT[0], 5: S_HEAD, 6: S_TAIL, 7: S_DROPS, 8: H_STOP[0],
                   9: H_OVERFLOW_EVENTS[0], 12: 80, 13: S_DETAIL_HEAD, 14: S_DETAIL_TAIL,
                   15: H_TRIGGER_GAP[0], 16: H_CLOCK_SEQ[0], 17: S_WAIT_NS}

POLICY_WAIT, POLICY_DROP = 0, 1
DETAIL_OFF, DETAIL_ALWAYS, DETAIL_WINDOW = 0, 1, 2


def clock_ns() -> int:
    """The recording clock on this host (CLOCK_BOOTTIME on Linux, as the agent uses)."""
    clk = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)
    return time.clock_gettime_ns(clk)


@dataclass(frozen=True)
class RegionGeometry:
    max_threads: int
    index_capacity: int  # events per ring, power of two
    detail_capacity: int = 0  # bytes per detail ring, power of two or 0

    @property
    def index_rings_offset(self) -> int:
        return _page_align(HEADER_SIZE + self.max_threads * SLOT_SIZE)

    @property
    def detail_rings_offset(self) -> int:
        return _page_align(self.index_rings_offset
                           + self.max_threads * self.index_capacity * F.INDEX_EVENT_SIZE)

    @property
    def size(self) -> int:
        return _page_align(self.detail_rings_offset + self.max_threads * self.detail_capacity)


def _page_align(n: int) -> int:
    return (n + 4095) & ~4095


def check_layout(words: list[int]) -> None:
    """Raise if the compiled agent's structures differ from this mirror."""
    for i, want in EXPECTED_LAYOUT.items():
        if words[i] != want:
            raise RuntimeError(f"agent ring layout word {i} is {words[i]}, host expects {want}: "
                               "agent/ada_hooks.c and tracer/rings.py disagree")


class SharedRegion:
    """A /dev/shm file holding the ring region, mapped here; removed by close()."""

    def __init__(self, geometry: RegionGeometry) -> None:
        self.geometry = geometry
        base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
        self.path = base / f"ada-{os.getpid()}-{secrets.token_hex(8)}"
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, geometry.size)
            self.map = mmap.mmap(fd, geometry.size, mmap.MAP_SHARED,
                                 mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self.buf = np.frombuffer(self.map, dtype=np.uint8)

    def make_readable_by(self, uid: int | None) -> None:
        """Hand the file to the target's user when it runs as someone else (mode stays 0600)."""
        if uid is not None and uid != os.getuid():
            os.chown(self.path, uid, -1)

    def close(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


class RingReader:
    """Consumer side of every ring in a region (the drain thread's view).

    `buf` is the region as a uint8 array: the local mapping, or for the RPC
    transport a copy pulled from the target (see tracer.transport).
    """

    def __init__(self, buf: np.ndarray, geometry: RegionGeometry) -> None:
        self.buf = buf
        self.g = geometry
        self._u64 = buf[:HEADER_SIZE + geometry.max_threads * SLOT_SIZE].view("<u8")
        self._u32 = buf[:HEADER_SIZE + geometry.max_threads * SLOT_SIZE].view("<u4")
        self._events = buf[geometry.index_rings_offset:geometry.detail_rings_offset].view(
            F.INDEX_EVENT)[:geometry.max_threads * geometry.index_capacity].reshape(
            geometry.max_threads, geometry.index_capacity)
        self._triggers = buf[TRIGGER_OFFSET:TRIGGER_OFFSET + TRIGGER_SLOTS * 32].view(
            TRIGGER_ENTRY)
        self._trigger_tail = 0

    def _h32(self, field: tuple[int, str]) -> int:
        return int(self._u32[field[0] // 4])

    def _h64(self, field: tuple[int, str]) -> int:
        return int(self._u64[field[0] // 8])

    @property
    def registered(self) -> int:
        return min(self._h32(H_REGISTERED), self.g.max_threads)

    @property
    def overflow_threads(self) -> int:
        return self._h32(H_OVERFLOW_THREADS)

    @property
    def overflow_events(self) -> int:
        return self._h64(H_OVERFLOW_EVENTS)

    def _slot(self, slot: int, off: int, width: int = 8) -> int:
        pos = HEADER_SIZE + slot * SLOT_SIZE + off
        return int(self._u64[pos // 8]) if width == 8 else int(self._u32[pos // 4])

    def active(self, slot: int) -> bool:
        return self._slot(slot, S_STATE, 4) == SLOT_ACTIVE

    def tid(self, slot: int) -> int:
        return self._slot(slot, S_TID, 4)

    def head(self, slot: int) -> int:
        return self._slot(slot, S_HEAD)

    def drops(self, slot: int) -> int:
        return self._slot(slot, S_DROPS)

    def waits(self, slot: int) -> tuple[int, int]:
        """How often the thread found a ring full and waited for the drain, and for how long."""
        return self._slot(slot, S_WAITS), self._slot(slot, S_WAIT_NS)

    def events(self, slot: int, start: int, end: int) -> list[np.ndarray]:
        """Index events [start, end) of a ring as at most two views (the ring wraps)."""
        cap = self.g.index_capacity
        ring = self._events[slot]
        a, b = start % cap, end % cap
        if end - start == 0:
            return []
        if a < b:
            return [ring[a:b]]
        return [ring[a:], ring[:b]] if b else [ring[a:]]

    def set_tail(self, slot: int, tail: int) -> None:
        self._u64[(HEADER_SIZE + slot * SLOT_SIZE + S_TAIL) // 8] = tail

    # --- detail lane ------------------------------------------------------------

    def detail_head(self, slot: int) -> int:
        return self._slot(slot, S_DETAIL_HEAD)

    def detail_drops(self, slot: int) -> int:
        return self._slot(slot, S_DETAIL_DROPS)

    def detail_pieces(self, slot: int, start: int, end: int) -> list[np.ndarray]:
        """Detail ring bytes [start, end) as back-to-back runs of whole records.

        Views of the ring (valid until the tail passes them), except the one record that
        straddles the end of the ring when they wrap: only that record is copied.
        """
        cap = self.g.detail_capacity
        base = self.g.detail_rings_offset + slot * cap
        a, n = start % cap, end - start
        if a + n <= cap:
            return [self.buf[base + a:base + a + n]]
        first = self.buf[base + a:base + cap]
        second = self.buf[base:base + n - (cap - a)]
        cut = walk_records(first, 0, len(first)).end
        if cut == len(first):
            return [first, second]
        head = np.concatenate((first[cut:], second[:F.DETAIL_EVENT_HEADER_SIZE]))
        length = int(head[:4].view("<u4")[0])
        rest = length - (len(first) - cut)
        if not 0 < rest <= len(second):
            raise RuntimeError(f"detail ring of slot {slot}: a record of {length} bytes does "
                               "not fit where it wraps")
        straddling = np.concatenate((first[cut:], second[:rest]))
        return [p for p in (first[:cut], straddling, second[rest:]) if len(p)]

    def set_detail_tail(self, slot: int, tail: int) -> None:
        self._u64[(HEADER_SIZE + slot * SLOT_SIZE + S_DETAIL_TAIL) // 8] = tail

    # --- triggers -----------------------------------------------------------------

    @property
    def triggers_coalesced(self) -> int:
        return self._h32(H_TRIGGERS_COALESCED)

    def take_triggers(self) -> tuple[list[tuple[int, int, int]], int]:
        """Committed trigger entries since the last call as (timestamp, function_id, tid),
        and how many were overwritten before they could be read."""
        taken, lost = [], 0
        pos = self._trigger_tail
        while True:
            e = self._triggers[pos % TRIGGER_SLOTS]
            commit = int(e["commit"])
            if commit == pos + 1:
                taken.append((int(e["timestamp_ns"]), int(e["function_id"]), int(e["tid"])))
                pos += 1
            elif commit > pos + 1:  # the ring wrapped past an entry never read
                lost += 1
                pos += 1
            else:
                break
        self._trigger_tail = pos
        self._u32[H_TRIGGER_TAIL[0] // 4] = pos
        return taken, lost

    # --- clock (raw-tick timestamps, see tracer.clock) ------------------------------

    @property
    def clock_in_ticks(self) -> bool:
        return self._h32(H_CLOCK_TICKS) == 1

    def clock_base(self) -> tuple[int, int]:
        """The agent's start-up (ticks, ns) pair."""
        return self._h64(H_CLOCK_BASE_TICKS), self._h64(H_CLOCK_BASE_NS)

    def clock_pair(self) -> tuple[int, int] | None:
        """The agent's latest (ticks, ns) pair, or None while it is being rewritten.

        A sequence lock: the agent makes clock_seq odd, writes, makes it even. x86_64 (the
        only raw-tick platform) keeps loads in order, so seq, pair, seq is a consistent read.
        """
        seq = self._h32(H_CLOCK_SEQ)
        if seq & 1:
            return None
        pair = self._h64(H_CLOCK_PAIR_TICKS), self._h64(H_CLOCK_PAIR_NS)
        return pair if self._h32(H_CLOCK_SEQ) == seq else None

    def heartbeat(self) -> None:
        self._u64[H_HEARTBEAT[0] // 8] = clock_ns()

    def set_stop(self) -> None:
        self._u32[H_STOP[0] // 4] = 1
