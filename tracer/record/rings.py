"""The ring region shared with the agent: its layout, and the consumer side of each ring.

The layout is defined by agent/ada_layout.h (see the comment at its top). Its ada_layout()
reports, by name, every field the host or the agent's JavaScript touches; the JavaScript takes
its offsets from that report, and `check_layout` compares the whole report with the mirror
declared here (LAYOUT), so the three cannot drift apart silently.

Local device: on Linux the region is a memfd the agent creates in the target (memory, not a
file: a small /dev/shm, Docker's 64 MiB, does not limit it), which this process maps through
/proc/PID/fd (MemfdRegion). Elsewhere, or where the target cannot make one, it is a file in
/dev/shm (mode 0600, unique name), mapped by the agent and by this process, and unlinked as soon
as both have it (SharedRegion). Either way nothing is left behind whatever becomes of either
process, and the rings survive a crash of the target. The header and slot controls are reserved when the file is made, each
thread's rings as the thread first claims a slot (ada_reserve_rings): a page that
cannot be backed would kill the target with SIGBUS, a failed reservation only
leaves that thread unrecorded, and counted.
"""

from __future__ import annotations

import mmap
import os
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ada.atf.format import (DETAIL_EVENT_HEADER_SIZE, INDEX_EVENT, INDEX_EVENT_SIZE,
                            packed_dtype)
from ada.atf.records import walk_records

from ..errors import TracerError


# RegionHeader (agent/ada_layout.h): the fields the host or the agent's JavaScript touch.
REGION_HEADER = packed_dtype([
    ("max_threads", "<u4", 12), ("index_capacity", "<u4", 16), ("detail_capacity", "<u4", 20),
    ("registered", "<u4", 24), ("overflow_threads", "<u4", 28), ("overflow_events", "<u8", 32),
    ("policy", "<u4", 40), ("stop", "<u4", 44), ("heartbeat_ns", "<u8", 48),
    ("stall_ns", "<u8", 56), ("index_rings_offset", "<u8", 64),
    ("detail_rings_offset", "<u8", 72), ("region_size", "<u8", 80), ("detail_mode", "<u4", 88),
    ("stack_bytes", "<u4", 92), ("trigger_tail", "<u4", 100), ("triggers_coalesced", "<u4", 104),
    ("trigger_gap_ns", "<u8", 112), ("clock_seq", "<u4", 128), ("clock_ticks", "<u4", 132),
    ("clock_base_ticks", "<u8", 136), ("clock_base_ns", "<u8", 144),
    ("clock_pair_ticks", "<u8", 152), ("clock_pair_ns", "<u8", 160),
    ("unbacked_threads", "<u4", 108), ("unwound_calls", "<u8", 168),
    ("terminate_tid", "<u4", 176), ("terminate_depth", "<u4", 180),
    ("terminate_fid", "<u8", 184), ("skipped_events", "<u8", 192), ("trap_calls", "<u8", 200),
    ("forks", "<u4", 208), ("exec_pending", "<u4", 212), ("paused_spawns", "<u4", 216),
    ("drain_asleep", "<u4", 220), ("drain_wakes", "<u4", 224)],
    232)
# SlotControl: one per thread slot. Producer and consumer cursors sit on their own cache lines.
SLOT_CONTROL = packed_dtype([
    ("state", "<u4", 0), ("tid", "<u4", 4), ("detail_head", "<u8", 8), ("detail_drops", "<u8", 16),
    ("head", "<u8", 64), ("drops", "<u8", 72), ("waits", "<u8", 80), ("wait_ns", "<u8", 88),
    ("tail", "<u8", 128), ("detail_tail", "<u8", 136), ("claims", "<u4", 192),
    ("releases", "<u4", 196), ("generation", "<u4", 200)], 256)
# TriggerEntry: {u64 timestamp_ns, u64 function_id, u32 tid, u32 commit, u64 reserved}
TRIGGER_ENTRY = packed_dtype([("timestamp_ns", "<u8", 0), ("function_id", "<u8", 8),
                             ("tid", "<u4", 16), ("commit", "<u4", 20)], 32)
SLOTS_OFFSET = 4096  # SlotControl[max_threads] follows the header page
TRIGGERS_OFFSET, TRIGGER_SLOTS = 1024, 64  # TriggerEntry[64], in the header page
FORKS_OFFSET, FORK_SLOTS = 3072, 256  # u32 pids of children forked (ada_on_fork), header page
SLOT_SIZE = SLOT_CONTROL.itemsize
# slot.state: a live thread holds the slot (ACTIVE); it has exited (ENDED: drain, then free it);
# the host freed it (FREE: a later thread may claim it). 0: never used.
SLOT_ACTIVE, SLOT_ENDED, SLOT_FREE = 1, 2, 3

POLICY_WAIT, POLICY_DROP = 0, 1  # header.policy (--on-full)
DETAIL_MODE_CODES = {"off": 0, "always": 1, "window": 2}  # header.detail_mode


def _layout() -> dict[str, int]:
    """The names and values ada_layout() must report (agent-private entries, agent.*, aside)."""
    out = {"region.slots_offset": SLOTS_OFFSET, "region.triggers_offset": TRIGGERS_OFFSET,
           "region.trigger_slots": TRIGGER_SLOTS, "region.forks_offset": FORKS_OFFSET,
           "region.fork_slots": FORK_SLOTS, "const.slot_active": SLOT_ACTIVE,
           "const.slot_ended": SLOT_ENDED, "const.slot_free": SLOT_FREE,
           "const.policy_wait": POLICY_WAIT, "const.policy_drop": POLICY_DROP}
    out.update({f"const.detail_{mode}": code for mode, code in DETAIL_MODE_CODES.items()})
    for struct, dtype in (("header", REGION_HEADER), ("slot", SLOT_CONTROL),
                          ("trigger", TRIGGER_ENTRY), ("event", INDEX_EVENT)):
        out[f"sizeof.{struct}"] = dtype.itemsize
        out.update({f"{struct}.{name}": dtype.fields[name][1] for name in dtype.names})
    return out


LAYOUT = _layout()


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
        return _page_align(SLOTS_OFFSET + self.max_threads * SLOT_SIZE)

    @property
    def detail_rings_offset(self) -> int:
        return _page_align(self.index_rings_offset
                           + self.max_threads * self.index_capacity * INDEX_EVENT_SIZE)

    @property
    def size(self) -> int:
        return _page_align(self.detail_rings_offset + self.max_threads * self.detail_capacity)


def _page_align(n: int) -> int:
    return (n + 4095) & ~4095


def check_layout(reported: dict[str, int]) -> None:
    """Raise, naming every difference, if the compiled agent's layout is not LAYOUT."""
    shared = {k: v for k, v in reported.items() if not k.startswith("agent.")}
    problems = [f"{name}: agent {shared.get(name, 'lacks it')}, "
                f"host {LAYOUT.get(name, 'lacks it')}"
                for name in sorted(set(shared) | set(LAYOUT))
                if shared.get(name) != LAYOUT.get(name)]
    if problems:
        raise TracerError("agent/ada_layout.h and tracer/record/rings.py disagree on the ring "
                          "region: " + "; ".join(problems))


class RegionSpaceError(TracerError):
    """The shared memory has no room for the ring region (the rpc transport needs none)."""


def shm_directory() -> Path:
    return Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())


class SharedRegion:
    """A /dev/shm file holding the ring region, mapped here; unlink() once the agent maps it."""

    def __init__(self, geometry: RegionGeometry) -> None:
        self.geometry = geometry
        base = shm_directory()
        # Room for the controls and one thread's rings at least, or the start is refused.
        controls = geometry.index_rings_offset
        one_thread = (geometry.index_capacity * INDEX_EVENT_SIZE + geometry.detail_capacity)
        free = _free_bytes(base)
        if free is not None and free < controls + one_thread:
            raise RegionSpaceError(
                f"{base} has {_mib(free)} free, the rings need {_mib(controls + one_thread)} "
                f"for one thread ({_mib(one_thread)} per thread)")
        self.path = base / f"ada-{os.getpid()}-{secrets.token_hex(8)}"
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, geometry.size)
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, controls)
            self.map = mmap.mmap(fd, geometry.size, mmap.MAP_SHARED,
                                 mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as e:
            os.close(fd)
            self.unlink()
            raise RegionSpaceError(f"cannot reserve the ring region in {base}: "
                                   f"{e.strerror}") from None
        os.close(fd)
        self.buf = np.frombuffer(self.map, dtype=np.uint8)

    def unlink(self) -> None:
        """Remove the file; the mappings of it stay valid until both processes are gone."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


class MemfdRegion:
    """The region the agent made as a memfd in the target, mapped here through /proc/PID/fd
    (the mapping stays valid whatever becomes of the target)."""

    def __init__(self, geometry: RegionGeometry, pid: int, fd: int) -> None:
        self.geometry = geometry
        self.path = Path(f"/proc/{pid}/fd/{fd}")
        try:
            descriptor = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            raise TracerError(f"cannot open the target's ring region ({self.path}): {e.strerror};"
                              " --transport rpc does without") from None
        try:
            self.map = mmap.mmap(descriptor, geometry.size, mmap.MAP_SHARED,
                                 mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as e:
            raise TracerError(f"cannot map the target's ring region ({self.path}): {e.strerror};"
                              " --transport rpc does without") from None
        finally:
            os.close(descriptor)
        self.buf = np.frombuffer(self.map, dtype=np.uint8)

    def unlink(self) -> None:
        """Nothing to remove: a memfd has no name."""


def _free_bytes(path: Path) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MiB"


def _words(dtype: np.dtype) -> dict[str, tuple[int, int]]:
    """Each field as (word size, word index): its position in a u32 or u64 view."""
    return {name: (dtype.fields[name][0].itemsize, dtype.fields[name][1]
                   // dtype.fields[name][0].itemsize) for name in dtype.names}


_HEADER_WORDS = _words(REGION_HEADER)
_SLOT_WORDS = _words(SLOT_CONTROL)


class RingReader:
    """Consumer side of every ring in a region (the drain thread's view).

    `buf` is the region as a uint8 array: the local mapping, or for the RPC
    transport a copy pulled from the target (see transport.py).
    """

    def __init__(self, buf: np.ndarray, geometry: RegionGeometry) -> None:
        self.buf = buf
        self.g = geometry
        n = geometry.max_threads
        self._u64 = buf[:REGION_HEADER.itemsize].view("<u8")
        self._u32 = buf[:REGION_HEADER.itemsize].view("<u4")
        slots = buf[SLOTS_OFFSET:SLOTS_OFFSET + n * SLOT_SIZE]
        self._slot64 = slots.view("<u8").reshape(n, SLOT_SIZE // 8)
        self._slot32 = slots.view("<u4").reshape(n, SLOT_SIZE // 4)
        self._events = buf[geometry.index_rings_offset:geometry.detail_rings_offset].view(
            INDEX_EVENT)[:n * geometry.index_capacity].reshape(n, geometry.index_capacity)
        self._triggers = buf[TRIGGERS_OFFSET:TRIGGERS_OFFSET
                             + TRIGGER_SLOTS * TRIGGER_ENTRY.itemsize].view(TRIGGER_ENTRY)
        self._trigger_tail = 0
        self.on_free: Callable[[int], None] | None = None  # the RPC mirror tells the agent

    def header(self, name: str) -> int:
        """A RegionHeader field, by name."""
        size, word = _HEADER_WORDS[name]
        return int(self._u64[word]) if size == 8 else int(self._u32[word])

    def _set_header(self, name: str, value: int) -> None:
        size, word = _HEADER_WORDS[name]
        (self._u64 if size == 8 else self._u32)[word] = value

    def slot(self, slot: int, name: str) -> int:
        """A SlotControl field of one thread's slot, by name."""
        size, word = _SLOT_WORDS[name]
        return int(self._slot64[slot, word]) if size == 8 else int(self._slot32[slot, word])

    @property
    def registered(self) -> int:
        return min(self.header("registered"), self.g.max_threads)

    @property
    def overflow_threads(self) -> int:
        return self.header("overflow_threads")

    @property
    def overflow_events(self) -> int:
        return self.header("overflow_events")

    def state(self, slot: int) -> int:
        return self.slot(slot, "state")

    def generation(self, slot: int) -> int:
        """Bumped by each thread that claims the slot: a new value is a new thread."""
        return self.slot(slot, "generation")

    def free_slot(self, slot: int) -> None:
        """Give an ended thread's drained slot back for a later thread (ada_claim_slot)."""
        self._slot64[slot, _SLOT_WORDS["tail"][1]] = 0
        self._slot64[slot, _SLOT_WORDS["detail_tail"][1]] = 0
        self._slot32[slot, _SLOT_WORDS["releases"][1]] += 1
        self._slot32[slot, _SLOT_WORDS["state"][1]] = SLOT_FREE  # last: the claimers look here
        if self.on_free is not None:
            self.on_free(slot)

    def tid(self, slot: int) -> int:
        return self.slot(slot, "tid")

    def head(self, slot: int) -> int:
        return self.slot(slot, "head")

    def drops(self, slot: int) -> int:
        return self.slot(slot, "drops")

    def waits(self, slot: int) -> tuple[int, int]:
        """How often the thread found a ring full and waited for the drain, and for how long."""
        return self.slot(slot, "waits"), self.slot(slot, "wait_ns")

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
        self._slot64[slot, _SLOT_WORDS["tail"][1]] = tail

    # --- detail lane ------------------------------------------------------------

    def detail_head(self, slot: int) -> int:
        return self.slot(slot, "detail_head")

    def detail_drops(self, slot: int) -> int:
        return self.slot(slot, "detail_drops")

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
        head = np.concatenate((first[cut:], second[:DETAIL_EVENT_HEADER_SIZE]))
        length = int(head[:4].view("<u4")[0])
        rest = length - (len(first) - cut)
        if not 0 < rest <= len(second):
            raise RuntimeError(f"detail ring of slot {slot}: a record of {length} bytes does "
                               "not fit where it wraps")
        straddling = np.concatenate((first[cut:], second[:rest]))
        return [p for p in (first[:cut], straddling, second[rest:]) if len(p)]

    def set_detail_tail(self, slot: int, tail: int) -> None:
        self._slot64[slot, _SLOT_WORDS["detail_tail"][1]] = tail

    def forked(self) -> tuple[list[int], int]:
        """The pids of the children forked that the agent kept (the first FORK_SLOTS, in
        order), and how many forks it counted in all (ada_on_fork)."""
        n = self.header("forks")
        pids = self.buf[FORKS_OFFSET:FORKS_OFFSET + 4 * min(n, FORK_SLOTS)].view("<u4")
        return [int(p) for p in pids if p], n

    # --- triggers -----------------------------------------------------------------

    @property
    def triggers_coalesced(self) -> int:
        return self.header("triggers_coalesced")

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
        self._set_header("trigger_tail", pos)
        return taken, lost

    # --- clock (raw-tick timestamps, see clock.py) -----------------------------------

    @property
    def clock_in_ticks(self) -> bool:
        return self.header("clock_ticks") == 1

    def clock_base(self) -> tuple[int, int]:
        """The agent's start-up (ticks, ns) pair."""
        return self.header("clock_base_ticks"), self.header("clock_base_ns")

    def clock_pair(self) -> tuple[int, int] | None:
        """The agent's latest (ticks, ns) pair, or None while it is being rewritten.

        A sequence lock: the agent makes clock_seq odd, writes, makes it even. x86_64 (the
        only raw-tick platform) keeps loads in order, so seq, pair, seq is a consistent read.
        """
        seq = self.header("clock_seq")
        if seq & 1:
            return None
        pair = self.header("clock_pair_ticks"), self.header("clock_pair_ns")
        return pair if self.header("clock_seq") == seq else None

    def heartbeat(self) -> None:
        self._set_header("heartbeat_ns", clock_ns())

