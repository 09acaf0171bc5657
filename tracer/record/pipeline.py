"""The parts one recording's events flow through, and their state.

    agent's rings (a MemfdRegion or SharedRegion mapped here, or the RpcMirror pulled over
    Frida)
        -> Drain -> SessionWriter (index.atf, detail.atf of each thread)
                 -> detail sink (AlwaysDetailSink for --detail, WindowDetailSink for the
                    flight recorder), which persists detail through the same writers

Two objects, because the second needs what the agent says once the first configured it:
`RingSpace` lays out the ring region (and creates it in shared memory) before the agent
loads, configures the agent and checks the layout it compiled; `Pipeline` is then built whole
from it and the agent's facts (arch, clock): it starts, reports its status and what it lost,
takes the agent's last rings, stops, and summarises itself for the manifest. The Recorder owns
the Frida side (attach, hook, the agent's messages, stop); this module owns the data's way.
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ada.atf.format import ARCH_ARM64, ARCH_X86_64
from ada.atf.writer import SessionWriter

from ..errors import TracerError
from .answer import Answers
from .lane_io import go_direct_policy
from .detail_sinks import AlwaysDetailSink, DetailSink, WindowDetailSink
from .drain import Drain, Heartbeat
from .hot_path_build import build_for_target
from .ending import TargetEnd
from .nap import LONGEST_RPC_S, FutexNap, Nap
from .options import ProcessPlace, TraceOptions
from .rings import (DETAIL_MODE_CODES, LAYOUT, POLICY_DROP, POLICY_WAIT, RegionGeometry,
                    MemfdRegion, RegionSpaceError, RingReader, SharedRegion, check_layout,
                    clock_ns)
from .transport import PULL_FORMAT, RPC_BEAT_S, PushAcks, RpcMirror, push_limits

ARCH_CODES = {"x64": ARCH_X86_64, "arm64": ARCH_ARM64}


@dataclass
class RecordingStatus:
    """The status line's figures for one process (recording.py sums them over processes)."""

    elapsed_s: float
    events: int
    threads: int
    drops: int
    detail_bytes: int = 0
    windows: int = 0
    truncated_ns: int = 0
    transport_bytes_per_s: float | None = None
    wait_ns: int = 0  # time producers spent waiting for room in full rings (wait policy)
    processes: int = 1  # traced processes (the target, its children, new images after exec)
    undelivered: int | None = 0  # events left in a dead target's rings (None: count unknown)


@dataclass
class Summaries:
    """Each part's summary() for the manifest (tracer/record/manifest.py)."""

    drain: dict[str, Any]
    sink: dict[str, Any] | None  # None without a detail lane
    transport: dict[str, Any] | None  # None for shared memory


class RingSpace:
    """The ring region, laid out before the agent loads: in shared memory when it can be
    mapped here (a memfd the agent makes on Linux, else a /dev/shm file both map), else
    mirrored over Frida's channel."""

    def __init__(self, options: TraceOptions, transport: str,
                 info: Callable[[str], None] = lambda m: None) -> None:
        self.options = o = options
        self.info = info
        self.transport = transport  # "shm" or "rpc"
        detail_capacity = o.detail_ring_bytes if o.detail != "off" else 0
        self.geometry = RegionGeometry(o.max_threads, o.ring_events, detail_capacity)
        self.region: SharedRegion | MemfdRegion | None = None
        self.memfd = transport == "shm" and memfd_wanted()
        self.kind = "rpc"  # where the region ended up: "memfd", "file" or "rpc"
        self.heartbeat: Heartbeat | None = None  # once the agent is configured
        self.acks: PushAcks | None = None  # rpc: what the beats tell the agent
        self.shm_problem = ""  # why /dev/shm could not hold the file region, if it could not
        if transport == "shm":
            try:
                self.region = SharedRegion(self.geometry)
            except RegionSpaceError as e:
                if self.memfd:  # the target's memfd may do without /dev/shm
                    self.shm_problem = str(e)
                elif o.transport == "shm":  # asked for by name
                    raise
                else:
                    info(f"{e}: the rings go over Frida's channel instead (the rpc transport)")
                    self.transport = "rpc"

    def configure_agent(self, script: Any, toolchain: str, hot_path_source: str,
                        pid: int, build_here: bool) -> dict[str, Any]:
        """Configure the loaded agent (it compiles the hot path, or loads the one built here
        when `build_here`, and makes or maps the region); returns its facts, and starts the
        heartbeat. Raises TracerError if the compiled layout is not the host's."""
        o, g = self.options, self.geometry
        config: dict[str, Any] = {
            "toolchain": toolchain, "clockSource": o.clock_source,
            "hookEngine": o.hook_engine, "inlineHook": inline_hook(),
            "inlineVectors": inline_vectors(), "inlineProbe": inline_probe(),
            "holdLingerMs": _test_ms("ADA_TEST_HOLD_LINGER_MS"),
            "holdSleepers": os.environ.get("ADA_TEST_HOLD_SLEEPERS") == "1",
            "memfd": self.memfd, "shmPath": str(self.region.path) if self.region else None,
            "regionSize": g.size,
            "maxThreads": o.max_threads, "indexCapacity": o.ring_events,
            "detailCapacity": g.detail_capacity, "detailMode": DETAIL_MODE_CODES[o.detail],
            "stackBytes": o.stack_bytes, "triggerGapNs": str(int(o.trigger_gap_ms * 1e6)),
            "policy": POLICY_DROP if o.on_full == "drop" else POLICY_WAIT,
            "heartbeatNs": str(clock_ns()),
            "stallNs": str(int((o.stall_s if self.transport == "shm" else o.rpc_stall_s) * 1e9)),
            "indexRingsOffset": str(g.index_rings_offset),
            "detailRingsOffset": str(g.detail_rings_offset), "pull": PULL_FORMAT,
        }
        built = (build_for_target(script.exports_sync, config, hot_path_source, self.info)
                 if build_here else None)
        config["source"] = hot_path_source  # also with a build: if CModule cannot load it
        if built is None:
            facts = script.exports_sync.init(config)
        else:  # the library goes as the call's binary data (an ArrayBuffer in the agent)
            facts = script.exports_sync.init(config, built.library)
            if facts.get("hotPathBuilt") == "host":
                facts["hotPathBuilt"] = built.how
            elif facts.get("hotPathRefused"):
                built.forget()
        check_layout(facts["layout"])
        if self.region is not None:
            self.region.unlink()  # both sides have it mapped: nothing outlives them in /dev/shm
        self.kind = facts.get("region", "file" if self.region is not None else "rpc")
        if self.kind == "memfd":
            self.region = MemfdRegion(self.geometry, pid, int(facts["regionFd"]))
        elif self.kind == "rpc" and self.transport == "shm":
            why = facts.get("regionWhy") or self.shm_problem
            if o.transport == "shm":  # asked for by name
                raise RegionSpaceError(f"no shared ring region: {why}")
            self.info(f"{why}: the rings go over Frida's channel instead (the rpc transport)")
            self.region = None
            self.transport = "rpc"
        if self.region is None:
            self.acks = PushAcks(script, push_limits(g)[1])
            # each beat a message into the target (transport.py): as seldom as the agent's
            # trust allows with a tenth of it to spare
            period = min(RPC_BEAT_S, o.rpc_stall_s / 10)
            self.heartbeat = Heartbeat(functools.partial(self.acks.keep_alive, period), period)
        else:
            self.heartbeat = Heartbeat(RingReader(self.region.buf, g).heartbeat)
        return facts

    def close(self) -> None:
        """Stop the heartbeat (an abandoned start); remove the region's file in shared memory
        if a failed start left it (mappings of it stay valid)."""
        if self.heartbeat is not None:
            self.heartbeat.stop()
        if self.region is not None:
            self.region.unlink()


def memfd_wanted() -> bool:
    """A memfd region on Linux unless ADA_RING_REGION=file asks for the /dev/shm file (the
    fallback, kept testable)."""
    return sys.platform.startswith("linux") and os.environ.get("ADA_RING_REGION") != "file"


def inline_hook() -> str:
    """How the inline engine patches a function: 'jump' (a breakpoint only where no jump
    fits), or 'breakpoint' for every function when ADA_INLINE_HOOK=breakpoint asks (to test
    and measure the last resort on any function)."""
    return "breakpoint" if os.environ.get("ADA_INLINE_HOOK") == "breakpoint" else "jump"


def inline_vectors() -> str:
    """Whether x86_64's inline stubs save xmm0-15: 'auto' (only when the hot path may use
    them: TinyCC's build), or 'save' always when ADA_INLINE_VECTORS=save asks (to measure
    what leaving them out gains: scripts/bench_trace.py --engines-only)."""
    return "save" if os.environ.get("ADA_INLINE_VECTORS") == "save" else "auto"


INLINE_PROBES = ("entry", "redirect", "clock")


def inline_probe() -> str | None:
    """ADA_INLINE_PROBE, measuring only (scripts/bench_trace.py --parts-only): the inline
    engine's hot path stops after its entry stub, its return's redirection, or its clock
    reads, and records nothing (agent/ada_inline.c); None: the whole hot path."""
    probe = os.environ.get("ADA_INLINE_PROBE") or None
    if probe is not None and probe not in INLINE_PROBES:
        raise TracerError(f"ADA_INLINE_PROBE={probe}: expected one of {', '.join(INLINE_PROBES)}")
    return probe


def _test_ms(name: str) -> int:
    """Tests only: a number of milliseconds from the environment (0: none), below 1,000."""
    value = os.environ.get(name) or "0"
    ms = int(value) if value.isdigit() else -1
    if not 0 <= ms < 1000:
        raise TracerError(f"{name}={value}: expected 0 to 999 milliseconds")
    return ms


class Pipeline:
    """Ring region -> drain -> writers and detail sink, for one recording, built whole."""

    def __init__(self, space: RingSpace, script: Any, facts: dict[str, Any], *, pid: int,
                 os_id: int, started: _dt.datetime, place: ProcessPlace,
                 name_trigger: Callable[[int], str | None], answers: Answers) -> None:
        o = space.options
        self.space = space
        self.name_trigger = name_trigger  # a --trigger function's name, by its trigger id
        self.writer = SessionWriter(o.output, pid, arch=ARCH_CODES[facts["arch"]], os_id=os_id,
                                    clock_type=facts["clockType"], started=started,
                                    detail_go_direct=go_direct_policy(o.detail_io),
                                    # a window's index events are patched with their links
                                    index_go_direct=None if o.detail == "window"
                                    else go_direct_policy(o.index_io),
                                    session_dir=place.session_dir,
                                    process_dir=place.process_dir)
        self.sink: DetailSink | None = None
        self.flight: WindowDetailSink | None = None  # the sink, when it is the flight recorder
        if o.detail == "always":
            self.sink = AlwaysDetailSink()
        elif o.detail == "window":
            self.sink = self.flight = WindowDetailSink(
                int(o.pre_roll_ms * 1e6), int(o.post_roll_ms * 1e6), o.pre_roll_buffer_mb << 20)
        self.mirror: RpcMirror | None = None
        if space.region is not None:
            rings = RingReader(space.region.buf, space.geometry)
            nap = FutexNap(space.region.buf, LAYOUT["header.drain_asleep"]) \
                if FutexNap.available() else Nap()  # the agent wakes a futex nap (nap.py)
        else:
            assert space.acks is not None
            self.mirror = RpcMirror(script, space.geometry, answers, space.acks)
            rings = self.mirror.reader
            nap = Nap(LONGEST_RPC_S, LONGEST_RPC_S)  # each push ends it (nap.py)
        self.rings = rings
        self.drain = Drain(rings, self.writer, self.sink,
                           self._function_trigger if self.flight else None,
                           self.mirror.sync if self.mirror else None, space.heartbeat, nap,
                           _test_ms("ADA_TEST_DRAIN_PAUSE_MS") / 1000)

    @property
    def path(self) -> Path:
        """The process directory the files are written in."""
        return self.writer.path

    def file_codes(self) -> tuple[int, int, int]:
        """(arch, os, clock type) as the files' headers say them."""
        return self.writer.arch, self.writer.os_id, self.writer.clock_type

    # --- while recording ----------------------------------------------------------

    def start(self, start_ns: int, trigger_at_ms: list[float]) -> None:
        """Start draining; --trigger-at times count from `start_ns`. Over rpc the agent starts
        pushing now, before a suspended target runs (it may fork at once)."""
        if self.flight is not None:
            for ms in trigger_at_ms:
                self.flight.schedule(start_ns + int(ms * 1e6), "time", at_ms=ms)
        if self.mirror is not None:
            self.mirror.start()
        self.drain.start()

    def _function_trigger(self, timestamp_ns: int, trigger_id: int, tid: int) -> None:
        assert self.flight is not None
        # The name may not be known yet: the trigger can fire before the message saying its
        # module loaded is handled. summaries() names it at the end.
        self.flight.trigger(timestamp_ns, "function", tid=tid,
                            function=self.name_trigger(trigger_id), trigger_id=trigger_id)

    def trigger(self, kind: str) -> None:
        """A trigger from the person at the terminal (SIGUSR1, Enter); none without windows."""
        if self.flight is not None:
            self.flight.trigger(clock_ns(), kind)

    def take_push(self, data: bytes) -> None:
        """Ring bytes the agent pushed (rpc transport): the drain wakes for them."""
        if self.mirror is not None:
            self.mirror.take_push(data)
            self.drain.nap.wake()

    def take_final(self, data: bytes) -> None:
        """The ring bytes a dying target handed over with its last message (rpc transport)."""
        if self.mirror is not None:
            self.mirror.queue_final(data)
            self.drain.nap.wake()

    def failure(self) -> str | None:
        """Why the recording cannot go on (the stop reason), or None."""
        if self.drain.failed.is_set():
            return f"error: {self.drain.error}"
        if self.mirror is not None and self.mirror.lost is not None:
            return f"connection-lost: {self.mirror.lost}"
        return None

    def status(self, elapsed_s: float, undelivered: tuple[int, int] | None) -> RecordingStatus:
        drain, stats, flight = self.drain, self.drain.stats, self.flight
        counts = drain.thread_counts()
        # Dropped: events lost to full rings (drop policy, or a silent drain) and the events of
        # threads that found no free ring (--max-threads).
        drops = (sum(c.drops + c.detail_drops for c in counts)
                 + self.rings.overflow_events + self.rings.header("skipped_events")
                 + (drain.unwritten() if drain.failed.is_set() else 0))
        return RecordingStatus(elapsed_s, stats.events, stats.threads, drops, stats.detail_bytes,
                               len(flight.windows) if flight else 0,
                               flight.truncated_ns if flight else 0,
                               self.mirror.throughput() if self.mirror else None,
                               sum(c.wait_ns for c in counts),
                               undelivered=undelivered[0] if undelivered else None)

    @property
    def events(self) -> int:
        return self.drain.stats.events

    # --- the end --------------------------------------------------------------------

    def stop(self, release: Callable[[], None]) -> None:
        """Drain what is left (over rpc the agent has stopped pushing: pulled), then `release`
        the producers still waiting for room (the writers stay open)."""
        if self.mirror is not None:
            self.mirror.stop_pushing()
        self.drain.finish(release)

    @property
    def error(self) -> BaseException | None:
        """What failed the drain, if anything did."""
        return self.drain.error

    @property
    def clock_resets(self) -> int:
        """How often the time-stamp counter went backwards (raw-tick clocks only)."""
        return self.drain.clock.resets if self.drain.clock is not None else 0

    def finalize(self) -> None:
        """Finish every file (AtfError: what could not be finished reads as recovered)."""
        self.writer.finalize()

    def undelivered(self, end: TargetEnd, stop_reason: str) -> tuple[int, int] | None:
        """(events, detail bytes) left in the target's rings at its end; None: unknown."""
        return end.undelivered(self.drain.shortfall, self.mirror is not None, stop_reason,
                               self.mirror is not None and self.mirror.lost is not None)

    def summaries(self) -> Summaries:
        sink = self.sink.summary() if self.sink is not None else None
        for trigger in (sink or {}).get("triggers", []):
            if "trigger_id" in trigger:
                trigger_id = trigger.pop("trigger_id")
                trigger["function"] = trigger["function"] or self.name_trigger(trigger_id)
        return Summaries(self.drain.summary(), sink,
                         self.mirror.summary() if self.mirror else None)

    def write_manifest(self, manifest: dict[str, Any], *, final: bool = False) -> None:
        self.writer.write_manifest(manifest, final=final)

    def reserve_manifest_room(self, nbytes: int) -> None:
        self.writer.reserve_manifest_room(nbytes)

    def close(self) -> None:
        self.space.close()
