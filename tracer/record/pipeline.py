"""The parts one recording's events flow through, built from the options and the agent's facts.

    agent's rings (SharedRegion mapped here, or the RpcMirror pulled over Frida)
        -> Drain -> SessionWriter (index.atf, detail.atf of each thread)
                 -> detail sink (AlwaysDetailSink for --detail, WindowDetailSink for the
                    flight recorder), which persists detail through the same writers

Built in two steps, because each needs what the one before found: `Pipeline(options,
transport)` lays out the ring region (and creates it in shared memory) before the agent is
loaded, `init_agent` hands the agent its configuration and checks the layout it compiled, and
`connect` builds the writer, the sink and the drain once the agent's facts (arch, clock) are
known. The Recorder owns the Frida side (attach, hook, stop); this module owns the data's way.
"""

from __future__ import annotations

import datetime as _dt
from importlib import resources
from typing import Any, Callable

from ada.atf.format import ARCH_ARM64, ARCH_X86_64
from ada.atf.writer import SessionWriter

from .detail_io import go_direct_policy
from .detail_sinks import AlwaysDetailSink, DetailSink, WindowDetailSink
from .drain import Drain
from .options import ProcessPlace, TraceOptions
from .rings import (DETAIL_MODE_CODES, POLICY_DROP, POLICY_WAIT, RegionGeometry,
                    RegionSpaceError, RingReader, SharedRegion, check_layout, clock_ns)
from .transport import PULL_FORMAT, RpcMirror

ARCH_CODES = {"x64": ARCH_X86_64, "arm64": ARCH_ARM64}


AGENT_SCRIPTS = ("ada_messages.js", "ada_selection.js", "ada_inline_x64.js", "ada_platform.js",
                 "ada_hooking.js", "ada_transport.js", "ada_ending.js",
                 "ada_agent.js")  # one script, in order
HOT_PATH_SOURCES = ("ada_layout.h", "ada_platform.c", "ada_control.c", "ada_rings.c",
                    "ada_interceptor.c", "ada_inline.c", "ada_watch.c")  # one C source, in order


def agent_sources() -> tuple[str, str]:
    """The agent's JavaScript (its files joined into one script) and the C hot path it
    compiles (its files joined into one translation unit, so nothing is lost to inlining);
    both from agent/."""
    pkg = resources.files("ada.agent")

    def joined(names: tuple[str, ...]) -> str:
        return "\n".join(pkg.joinpath(name).read_text(encoding="utf-8") for name in names)

    return joined(AGENT_SCRIPTS), joined(HOT_PATH_SOURCES)


class Pipeline:
    """Ring region -> drain -> writers and detail sink, for one recording."""

    def __init__(self, options: TraceOptions, transport: str,
                 info: Callable[[str], None] = lambda m: None) -> None:
        self.options = o = options
        self.transport = transport  # "shm" or "rpc"
        detail_capacity = o.detail_ring_bytes if o.detail != "off" else 0
        self.geometry = RegionGeometry(o.max_threads, o.ring_events, detail_capacity)
        self.region: SharedRegion | None = None
        if transport == "shm":
            try:
                self.region = SharedRegion(self.geometry)
            except RegionSpaceError as e:
                if o.transport == "shm":  # asked for by name
                    raise
                info(f"{e}: the rings go over Frida's channel instead (the rpc transport)")
                self.transport = "rpc"
        self.mirror: RpcMirror | None = None
        self.writer: SessionWriter | None = None
        self.sink: DetailSink | None = None
        self.flight: WindowDetailSink | None = None  # the sink, when it is the flight recorder
        self.drain: Drain | None = None

    def init_agent(self, api: Any, toolchain: str) -> dict[str, Any]:
        """Configure the loaded agent (it compiles the hot path and maps the region); returns
        its facts. Raises TracerError if the compiled layout is not the host's."""
        o, g = self.options, self.geometry
        _, c_source = agent_sources()
        facts = api.init({
            "source": c_source, "toolchain": toolchain, "clockSource": o.clock_source,
            "hookEngine": o.hook_engine,
            "shmPath": str(self.region.path) if self.region else None, "regionSize": g.size,
            "maxThreads": o.max_threads, "indexCapacity": o.ring_events,
            "detailCapacity": g.detail_capacity, "detailMode": DETAIL_MODE_CODES[o.detail],
            "stackBytes": o.stack_bytes, "triggerGapNs": str(int(o.trigger_gap_ms * 1e6)),
            "policy": POLICY_DROP if o.on_full == "drop" else POLICY_WAIT,
            "heartbeatNs": str(clock_ns()), "stallNs": str(int(o.stall_s * 1e9)),
            "indexRingsOffset": str(g.index_rings_offset),
            "detailRingsOffset": str(g.detail_rings_offset), "pull": PULL_FORMAT,
        })
        check_layout(facts["layout"])
        if self.region is not None:
            self.region.unlink()  # both sides have it mapped: nothing outlives them in /dev/shm
        return facts

    def connect(self, script: Any, facts: dict[str, Any], *, pid: int, os_id: int,
                started: _dt.datetime, place: ProcessPlace,
                on_function_trigger: Callable[[int, int, int], None]) -> None:
        """Build the writer, the detail sink and the drain (not started yet)."""
        o = self.options
        self.writer = SessionWriter(o.output, pid, arch=ARCH_CODES[facts["arch"]], os_id=os_id,
                                    clock_type=facts["clockType"], started=started,
                                    detail_go_direct=go_direct_policy(o.detail_io),
                                    session_dir=place.session_dir,
                                    process_dir=place.process_dir)
        if o.detail == "always":
            self.sink = AlwaysDetailSink()
        elif o.detail == "window":
            self.sink = self.flight = WindowDetailSink(
                int(o.pre_roll_ms * 1e6), int(o.post_roll_ms * 1e6), o.pre_roll_buffer_mb << 20)
        if self.region is not None:
            rings = RingReader(self.region.buf, self.geometry)
        else:
            self.mirror = RpcMirror(script, self.geometry)
            rings = self.mirror.reader
        self.drain = Drain(rings, self.writer, self.sink,
                           on_function_trigger if self.flight else None,
                           self.mirror.sync if self.mirror else None)

    def finish(self) -> None:
        """Tell the producers to stop waiting, then drain what is left (the writers stay open)."""
        assert self.drain is not None
        self.drain.rings.set_stop()
        self.drain.finish()

    def close(self) -> None:
        """Remove the region's file in shared memory if a failed start left it (mappings of
        it stay valid)."""
        if self.region is not None:
            self.region.unlink()
