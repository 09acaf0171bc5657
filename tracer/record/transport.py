"""How the drain reaches the rings: mapped shared memory, or pulled over Frida's channel.

Local device: the region is a /dev/shm file mapped here (rings.SharedRegion); the drain
reads it in place and `sync()` has nothing to do.

Anywhere the host cannot map the target's memory (USB, -H, a remote frida-server, or
--transport rpc): the agent keeps the same region in its own memory, and RpcMirror keeps a local
copy of it. Each `sync()` is one `pull` RPC: it hands the agent the tails the drain has consumed
(the back-pressure producers wait on) and the slots it freed, and copies back the header, the
slot controls and the new ring bytes, placed where they sit in the region. The drain then
reads the mirror exactly as it reads a local mapping, so the files cannot depend on the
transport.
"""

from __future__ import annotations

import mmap
import sys
import threading
import time
from typing import Any, Callable

import frida
import numpy as np

from ada.atf.format import INDEX_EVENT_SIZE

from ..errors import TracerError
from .frida_errors import FRIDA_ERRORS, describe_frida_error
from .answer import Answers, NoAnswer
from .protocol import beat
from .rings import SLOT_SIZE, SLOTS_OFFSET, RegionGeometry, RingReader

# What one `pull` returns (built by pull() in agent/ada_transport.js, handed PULL_FORMAT):
# PULL_PREFIX {u32 magic, u32 segments, u32 registered slots, u32 segment table capacity}, the
# header page and the registered slots' controls as they sit in the region, the segment table,
# then the ring bytes each segment names (lane 0 index, 1 detail; start is the ring cursor).
PULL_PREFIX = np.dtype([("magic", "<u4"), ("segments", "<u4"), ("registered", "<u4"),
                        ("capacity", "<u4")])
SEGMENT = np.dtype([("slot", "<u4"), ("lane", "<u4"), ("start", "<u8"), ("length", "<u8"),
                    ("offset", "<u8")])
PULL_MAGIC = 0x50414441  # "ADAP"
PULL_FORMAT = {"magic": PULL_MAGIC,
               "prefixBytes": PULL_PREFIX.itemsize,
               "prefix": {name: PULL_PREFIX.fields[name][1] for name in PULL_PREFIX.names},
               "segmentBytes": SEGMENT.itemsize,
               "segment": {name: SEGMENT.fields[name][1] for name in SEGMENT.names}}
DEFAULT_BUDGET = 16 << 20
# One pull is sized to take about this long at the link's measured rate (on a slow link, 2 MB/s
# to an emulated arm64 machine, a 16 MB pull took 8 s). Producers waiting for room trust the
# host while its beats come (beat_by_message, and each pull).
PULL_SECONDS = 0.25
RATE_SAMPLE_BYTES = 256 << 10  # pulls smaller than this say more about latency than the link


def resolve_transport(choice: str, device: frida.core.Device) -> str:
    """auto: shared memory on the local device (the host can map the target), RPC elsewhere."""
    local = device.type == "local"
    if choice == "auto":
        return "shm" if local else "rpc"
    if choice == "shm" and not local:
        raise TracerError(f"--transport shm needs the local device; this host cannot map the "
                          f"memory of a {device.type} device (use --transport rpc or auto)")
    return choice


def beat_by_message(script: Any) -> Callable[[], None]:
    """The rpc transport's heartbeat (drain.Heartbeat beats with it): a message the agent
    answers by renewing its beat, so that threads waiting for room do not take a slow pull
    for a host gone. Silent once the script is gone: the drain finds that out itself."""
    def post_beat() -> None:
        try:
            script.post(beat())
        except FRIDA_ERRORS:
            pass
    return post_beat


def lazy_zeros(size: int) -> np.ndarray:
    """`size` zero bytes, backed only where written: anonymous memory mapped without a swap
    reservation, so a region larger than this machine's free memory (1024 threads' rings are
    5 GiB with the detail lane) still maps where np.zeros is refused by the kernel's
    overcommit check (a 4 GiB arm64 machine refused it)."""
    # Python 3.11's mmap module has no MAP_NORESERVE: Linux's value (x86_64 and arm64 alike)
    noreserve = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | noreserve
    try:
        return np.frombuffer(mmap.mmap(-1, size, flags=flags), dtype=np.uint8)
    except (OSError, ValueError) as e:
        raise TracerError(f"cannot map {size / (1 << 30):.1f} GiB for the rpc transport's copy "
                          f"of the rings ({e}): lower --max-threads, --ring-kb or "
                          f"--detail-ring-kb") from None


class RpcMirror:
    """The RPC transport: a local mirror of the agent's ring region."""

    def __init__(self, script: Any, geometry: RegionGeometry, answers: Answers,
                 budget: int = DEFAULT_BUDGET) -> None:
        self.script = script
        self.answers = answers  # a stopped target's pull is given up as the recording ends
        self.g = geometry
        self.buf = lazy_zeros(geometry.size)
        self.reader = RingReader(self.buf, geometry)
        self.reader.on_free = self._freed_slot
        # A slot's detail records go whole or wait: a pull must have room for a full detail ring.
        self.floor = geometry.detail_capacity + (1 << 20)
        self.budget = max(budget, self.floor)  # the most one pull asks for
        self.link_rate: float | None = None  # bytes/s of the recent pulls that measured it
        self._pushed: dict[int, tuple[int, int]] = {}
        self._freed: list[int] = []  # slots the drain freed, for the agent to free in turn
        self.bytes = 0
        self.pulls = 0
        self.started = time.monotonic()
        self.lost: str | None = None
        self._final: list[bytes] = []
        self._final_lock = threading.Lock()
        self.handover_bytes = 0  # what the agent's handovers carried (see summary)

    def queue_final(self, data: bytes) -> None:
        """The agent's last buffer, sent as the target exits (from Frida's message thread)."""
        with self._final_lock:
            self._final.append(data)
            self.handover_bytes += len(data)

    def _freed_slot(self, slot: int) -> None:
        self._freed.append(slot)
        self._pushed.pop(slot, None)  # the slot's next thread starts its cursors at 0

    def _tails_to_push(self) -> list[int]:
        out: list[int] = []
        for slot in range(self.reader.registered):
            tails = (self.reader.slot(slot, "tail"), self.reader.slot(slot, "detail_tail"))
            if self._pushed.get(slot, (0, 0)) != tails:
                out.extend((slot, *tails))
                self._pushed[slot] = tails
        return out

    def sync(self) -> int:
        """One pull; returns the ring bytes received (0 once the connection is gone)."""
        with self._final_lock:
            finals, self._final = self._final, []
        received = sum(self._apply(np.frombuffer(d, dtype=np.uint8)) for d in finals)
        if finals or self.lost is not None:
            return received
        freed, self._freed = self._freed, []
        started = time.monotonic()
        tails, budget = self._tails_to_push(), self.next_budget()
        try:
            data = self.answers.ask("pull", lambda: self.script.exports_sync.pull(tails, budget,
                                                                                   freed))
        except NoAnswer as e:
            self.lost = str(e)
            return 0
        except FRIDA_ERRORS as e:
            self.lost = describe_frida_error(e)
            return 0
        self._measure(len(data), time.monotonic() - started)
        return self._apply(np.frombuffer(data, dtype=np.uint8))

    def next_budget(self) -> int:
        """Bytes the next pull may carry: what the link moves in PULL_SECONDS, between the
        floor (a detail ring and 1 MiB) and the budget."""
        if self.link_rate is None:
            return self.budget
        return int(min(self.budget, max(self.floor, self.link_rate * PULL_SECONDS)))

    def _measure(self, size: int, seconds: float) -> None:
        if size >= RATE_SAMPLE_BYTES and seconds > 0:
            rate = size / seconds
            self.link_rate = rate if self.link_rate is None else (self.link_rate + rate) / 2

    def _apply(self, raw: np.ndarray) -> int:
        """Place one pull's bytes where they sit in the region; returns the ring bytes placed."""
        prefix = raw[:PULL_PREFIX.itemsize].view(PULL_PREFIX)[0]
        magic, nseg = int(prefix["magic"]), int(prefix["segments"])
        if magic != PULL_MAGIC:
            raise RuntimeError(f"pull returned magic 0x{magic:08x}, expected 0x{PULL_MAGIC:08x}")
        controls = SLOTS_OFFSET + int(prefix["registered"]) * SLOT_SIZE
        self.buf[:controls] = raw[PULL_PREFIX.itemsize:PULL_PREFIX.itemsize + controls]
        table_at = PULL_PREFIX.itemsize + controls
        segments = raw[table_at:table_at + nseg * SEGMENT.itemsize].view(SEGMENT)
        received = 0
        for seg in segments.tolist():
            slot, lane, start, length, offset = seg
            if lane == 0:
                size = self.g.index_capacity * INDEX_EVENT_SIZE
                base = self.g.index_rings_offset + slot * size
            else:
                size = self.g.detail_capacity
                base = self.g.detail_rings_offset + slot * size
            pos = start % size
            first = min(length, size - pos)
            self.buf[base + pos:base + pos + first] = raw[offset:offset + first]
            if first < length:
                self.buf[base:base + length - first] = raw[offset + first:offset + length]
            received += length
        self.bytes += received
        self.pulls += 1
        return received

    def summary(self) -> dict[str, Any]:
        """The manifest's "transport" details: what was pulled, how fast, a lost link, and
        the bytes the agent's last message carried as the target ended (handed over, they
        are applied as one more pull): a target's end that loses events then says whether
        they reached the host at all."""
        return {"pulls": self.pulls, "bytes": self.bytes,
                "mb_per_s": round(self.throughput() / 1e6, 2), "last_error": self.lost,
                "handover_bytes": self.handover_bytes}

    def throughput(self) -> float:
        """Ring bytes pulled per second since the start."""
        elapsed = time.monotonic() - self.started
        return self.bytes / elapsed if elapsed > 0 else 0.0
