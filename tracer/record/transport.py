"""How the drain reaches the rings: mapped shared memory, or pushed over Frida's channel.

Local device: the region is a memfd or /dev/shm file mapped here (rings.MemfdRegion,
SharedRegion); the drain reads it in place and `sync()` has nothing to do.

Anywhere the host cannot map the target's memory (USB, -H, a remote frida-server, or
--transport rpc): the agent keeps the same region in its own memory and pushes what is new
(ada:data: the header, the slot controls and the new ring bytes, placed as they sit in the
region), and RpcMirror keeps a local copy of the region, each `sync()` applying one buffer.
The drain then reads the mirror exactly as it reads a local mapping, so the files cannot
depend on the transport. The host does not call into the agent while the program runs: a
call crossing the channel as the process forks lets Frida kill the child (docs/recording.md,
"Children and exec"). Its beats say what it has received and which slots it freed
(PushAcks): when the agent needs to hear it (half its window pushed), else once a second (the
heartbeat); only as the recording stops does it pull what is left.
"""

from __future__ import annotations

import mmap
import sys
import threading
import time
from collections import deque
from typing import Any

import frida
import numpy as np

from ada.atf.format import INDEX_EVENT_SIZE

from ..errors import TracerError
from .frida_errors import FRIDA_ERRORS, describe_frida_error
from .answer import Answers, NoAnswer
from .protocol import beat
from .rings import SLOT_SIZE, SLOTS_OFFSET, RegionGeometry, RingReader

# What one push (or pull) carries (built by _collect() in agent/ada_transport.js, handed
# PULL_FORMAT): PULL_PREFIX {u32 magic, u32 segments, u32 registered slots, u32 segment table
# capacity}, the header page and the registered slots' controls as they sit in the region, the
# segment table, then the ring bytes each segment names (lane 0 index, 1 detail; start is the
# ring cursor).
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
# Ring bytes one push carries at most (more where a slot's whole detail ring must fit), and
# the bytes and the pushes sent that the host has not acknowledged, at most: on a slow link
# (2 MB/s to the emulated arm64 machine) the window holds the rest back in the rings rather
# than in Frida's queue (and a stop's answer, queued behind it, comes within seconds).
PUSH_BUDGET = 1 << 20
PUSH_WINDOW = 16 << 20
PUSHES_IN_FLIGHT = 256
# Every message into the target is a chance of the fork fault ("Children and exec" in
# docs/recording.md; scripts/frida_fork_repro.py --post-ms: in the emulated arm64 machine a
# post every 100 ms killed 1 child of 120, every 20 ms 12 of 120: the fork gate holds the
# agent's pushes, not these), so the host says what it received only when the agent needs it:
# - as a buffer is applied, once half the window is unacknowledged (in bytes or in pushes), so
#   the agent, pushing the other half meanwhile, never waits on a link that keeps up;
# - as the drain finds nothing new, once a quarter is (it may nap long: each push wakes it);
# - a freed slot: with the next acknowledgement, or on its own FREED_ACK_S after the last
#   message (ACK_GAP_S when the drain finds nothing new);
# - else only the heartbeat's (drain.Heartbeat): every RPC_BEAT_S, or a tenth of the agent's
#   trust (rpc_stall_s, 10 s) if that is less.
RPC_BEAT_S = 1.0
ACK_SHARE = 2
IDLE_ACK_SHARE = 4
ACK_GAP_S = 0.05
FREED_ACK_S = 0.25


def resolve_transport(choice: str, device: frida.core.Device) -> str:
    """auto: shared memory on the local device (the host can map the target), RPC elsewhere."""
    local = device.type == "local"
    if choice == "auto":
        return "shm" if local else "rpc"
    if choice == "shm" and not local:
        raise TracerError(f"--transport shm needs the local device; this host cannot map the "
                          f"memory of a {device.type} device (use --transport rpc or auto)")
    return choice


def push_limits(geometry: RegionGeometry) -> tuple[int, int]:
    """(budget, window): the ring bytes a push carries at most, and the bytes unacknowledged
    at most. A slot's detail records go whole or wait: a push must have room for a full
    detail ring."""
    budget = max(PUSH_BUDGET, geometry.detail_capacity + (1 << 20))
    return budget, max(PUSH_WINDOW, 2 * budget)


class PushAcks:
    """What the host tells the pushing agent (ada:beat): the bytes of its pushes the drain has
    taken (the agent keeps at most `window` bytes and `in_flight` pushes unacknowledged) and
    the slots it freed. Told by the heartbeat (drain.Heartbeat, its own thread) and by the
    drain when owed (RpcMirror.sync); silent once the script is gone: the drain finds that
    out itself. `beats` counts the messages (the manifest's transport.beats)."""

    def __init__(self, script: Any, window: int = PUSH_WINDOW,
                 in_flight: int = PUSHES_IN_FLIGHT) -> None:
        self.script = script
        self.window = window
        self.in_flight = in_flight
        self._lock = threading.Lock()
        self.received = 0  # bytes of pushes applied to the mirror
        self.pushes = 0  # pushes applied
        self.beats = 0  # messages sent into the target
        self._told = (0, 0)  # (received, pushes) as of the last beat
        self._freed: list[int] = []  # slots freed since the last beat
        self._last = 0.0  # time.monotonic() of the last beat

    def took(self, size: int) -> None:
        with self._lock:
            self.received += size
            self.pushes += 1

    def freed(self, slot: int) -> None:
        with self._lock:
            self._freed.append(slot)

    def take_freed(self) -> list[int]:
        with self._lock:
            freed, self._freed = self._freed, []
            return freed

    def beat(self) -> None:
        with self._lock:
            message = beat(self.received, self.pushes, self._freed)
            self._told, self._freed = (self.received, self.pushes), []
            self._last = time.monotonic()
            self.beats += 1
        try:
            self.script.post(message)
        except FRIDA_ERRORS:
            pass

    def keep_alive(self, period: float) -> None:
        """The heartbeat's (drain.Heartbeat, every `period`): a beat unless the drain's last
        acknowledgement went within half of it (any beat renews the agent's trust)."""
        if time.monotonic() - self._last >= period / 2:
            self.beat()

    def ack_if_owed(self, idle: bool = False) -> None:
        """From the drain: a beat if the agent has pushed a share of its window since the
        last (ACK_SHARE as buffers come, IDLE_ACK_SHARE as the drain finds nothing new and
        is about to nap), at least ACK_GAP_S after the last one (waited out when idle), or
        a slot to free (see FREED_ACK_S)."""
        share = IDLE_ACK_SHARE if idle else ACK_SHARE
        with self._lock:
            since = time.monotonic() - self._last
            owed = self.received - self._told[0] >= self.window // share or \
                self.pushes - self._told[1] >= self.in_flight // share
            freed_owed = bool(self._freed) and since >= (ACK_GAP_S if idle else FREED_ACK_S)
        if owed and since < ACK_GAP_S:
            if not idle:
                return  # the next buffer, or the nap's check, tells it
            time.sleep(ACK_GAP_S - since)
        if owed or freed_owed:
            self.beat()


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
    """The RPC transport: a local mirror of the agent's ring region, kept by its pushes."""

    def __init__(self, script: Any, geometry: RegionGeometry, answers: Answers,
                 acks: PushAcks) -> None:
        self.script = script
        self.answers = answers  # a stopped target's last pulls are given up as it ends
        self.acks = acks
        self.g = geometry
        self.buf = lazy_zeros(geometry.size)
        self.reader = RingReader(self.buf, geometry)
        self.reader.on_free = acks.freed
        self.budget, self.window = push_limits(geometry)
        self._queue: deque[tuple[bool, bytes]] = deque()  # (a handover's?, buffer), as they came
        self._lock = threading.Lock()
        self.pulling = False  # the recording stops: what is left is pulled (stop_pushing)
        self.ended = False  # the agent handed its last bytes over: nothing more will come
        self.bytes = 0
        self.pushes = 0
        self.pulls = 0
        self.started = time.monotonic()
        self.lost: str | None = None
        self.handover_bytes = 0  # what the agent's handovers carried (see summary)

    def start(self) -> None:
        """The agent starts pushing (the drain runs)."""
        try:
            self.script.exports_sync.start_pushing(self.budget, self.window, self.acks.in_flight)
        except FRIDA_ERRORS as e:
            self.lost = describe_frida_error(e)

    def take_push(self, data: bytes) -> None:
        """A push from the agent (Frida's message thread)."""
        with self._lock:
            self._queue.append((False, data))

    def queue_final(self, data: bytes) -> None:
        """The agent's last buffer, sent as the target exits (Frida's message thread)."""
        with self._lock:
            self._queue.append((True, data))
            self.handover_bytes += len(data)

    def stop_pushing(self) -> None:
        """The agent stopped pushing (its stop()): from now on the drain pulls what is left."""
        self.pulling = True

    def sync(self) -> int:
        """Apply the next buffer (one at a time: the drain reads each before the next lands
        where it wrote); returns the ring bytes placed, at least 1 for a buffer taken from
        the queue (0: nothing new, and the drain may nap: not with buffers waiting)."""
        with self._lock:
            item = self._queue.popleft() if self._queue else None
        if item is None:
            if not self.pulling:
                self.acks.ack_if_owed(idle=True)
            if not self.pulling or self.ended or self.lost is not None:
                return 0
            data = self._pull()
            return self._apply(np.frombuffer(data, dtype=np.uint8)) if data is not None else 0
        final, data = item
        self.ended = self.ended or final
        received = self._apply(np.frombuffer(data, dtype=np.uint8))
        if not final:
            self.pushes += 1
            self.acks.took(len(data))
            self.acks.ack_if_owed()
        return max(received, 1)

    def _pull(self) -> bytes | None:
        try:
            data = self.answers.ask("pull", lambda: self.script.exports_sync.pull(
                self.budget, self.acks.take_freed()))
        except NoAnswer as e:
            self.lost = str(e)
            return None
        except FRIDA_ERRORS as e:
            self.lost = describe_frida_error(e)
            return None
        self.pulls += 1
        return data

    def _apply(self, raw: np.ndarray) -> int:
        """Place one buffer's bytes where they sit in the region; returns the ring bytes placed."""
        prefix = raw[:PULL_PREFIX.itemsize].view(PULL_PREFIX)[0]
        magic, nseg = int(prefix["magic"]), int(prefix["segments"])
        if magic != PULL_MAGIC:
            raise RuntimeError(f"the agent sent magic 0x{magic:08x}, expected 0x{PULL_MAGIC:08x}")
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
        return received

    def summary(self) -> dict[str, Any]:
        """The manifest's "transport" details: the agent's pushes, the host's pulls as the
        recording stopped, how fast, a lost link, and the bytes the agent's last message
        carried as the target ended (applied as one more buffer): a target's end that loses
        events then says whether they reached the host at all."""
        return {"pushes": self.pushes, "beats": self.acks.beats, "pulls": self.pulls,
                "bytes": self.bytes,
                "mb_per_s": round(self.throughput() / 1e6, 2), "last_error": self.lost,
                "handover_bytes": self.handover_bytes}

    def throughput(self) -> float:
        """Ring bytes received per second since the start."""
        elapsed = time.monotonic() - self.started
        return self.bytes / elapsed if elapsed > 0 else 0.0
