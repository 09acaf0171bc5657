"""How the drain reaches the rings: mapped shared memory, or pulled over Frida's channel.

Local device: the region is a /dev/shm file mapped here (tracer.rings.SharedRegion); the drain
reads it in place and `sync()` has nothing to do.

Anywhere the host cannot map the target's memory (USB, -H, a remote frida-server, or
--transport rpc): the agent keeps the same region in its own memory, and RpcMirror keeps a local
copy of it. Each `sync()` is one `pull` RPC: it hands the agent the tails the drain has consumed
(the back-pressure producers wait on) and copies back the header, the slot controls and the new
ring bytes, placed where they sit in the region. The drain then reads the mirror exactly as it
reads a local mapping, so the files cannot depend on the transport.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from .errors import FRIDA_ERRORS, describe_frida_error
from .rings import (HEADER_SIZE, S_DETAIL_TAIL, S_TAIL, SLOT_SIZE, RegionGeometry, RingReader)

PULL_MAGIC = 0x50414441  # "ADAP"
PULL_PREFIX = 16
SEGMENT = np.dtype([("slot", "<u4"), ("lane", "<u4"), ("start", "<u8"), ("length", "<u8"),
                    ("offset", "<u8")])
DEFAULT_BUDGET = 16 << 20


class RpcMirror:
    """The RPC transport: a local mirror of the agent's ring region."""

    def __init__(self, script: Any, geometry: RegionGeometry, budget: int = DEFAULT_BUDGET) -> None:
        self.script = script
        self.g = geometry
        # np.zeros maps pages lazily: only the parts of rings actually used take memory.
        self.buf = np.zeros(geometry.size, dtype=np.uint8)
        self.reader = RingReader(self.buf, geometry)
        self.budget = max(budget, geometry.detail_capacity + (1 << 20))
        self._u64 = self.buf[:HEADER_SIZE + geometry.max_threads * SLOT_SIZE].view("<u8")
        self._pushed: dict[int, tuple[int, int]] = {}
        self.bytes = 0
        self.pulls = 0
        self.started = time.monotonic()
        self.lost: str | None = None
        self._final: list[bytes] = []
        self._final_lock = threading.Lock()

    def queue_final(self, data: bytes) -> None:
        """The agent's last buffer, sent as the target exits (from Frida's message thread)."""
        with self._final_lock:
            self._final.append(data)

    def _tails_to_push(self) -> list[int]:
        out: list[int] = []
        for slot in range(self.reader.registered):
            base = (HEADER_SIZE + slot * SLOT_SIZE) // 8
            tails = (int(self._u64[base + S_TAIL // 8]), int(self._u64[base + S_DETAIL_TAIL // 8]))
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
        try:
            data = self.script.exports_sync.pull(self._tails_to_push(), self.budget)
        except FRIDA_ERRORS as e:
            self.lost = describe_frida_error(e)
            return 0
        return self._apply(np.frombuffer(data, dtype=np.uint8))

    def _apply(self, raw: np.ndarray) -> int:
        magic, nseg, registered, max_segments = (int(x) for x in raw[:16].view("<u4"))
        if magic != PULL_MAGIC:
            raise RuntimeError(f"pull returned magic 0x{magic:08x}, expected 0x{PULL_MAGIC:08x}")
        controls = HEADER_SIZE + registered * SLOT_SIZE
        self.buf[:controls] = raw[PULL_PREFIX:PULL_PREFIX + controls]
        table_at = PULL_PREFIX + controls
        segments = raw[table_at:table_at + nseg * SEGMENT.itemsize].view(SEGMENT)
        received = 0
        for seg in segments.tolist():
            slot, lane, start, length, offset = seg
            if lane == 0:
                size = self.g.index_capacity * 32
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

    def throughput(self) -> float:
        """Ring bytes pulled per second since the start."""
        elapsed = time.monotonic() - self.started
        return self.bytes / elapsed if elapsed > 0 else 0.0
