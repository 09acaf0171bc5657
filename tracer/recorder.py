"""Recorder: attach or spawn, hook, drain into ATF files, stop, finalize.

The engine behind `ada trace`, kept apart from the CLI (which only parses,
wires and reports). Data flows one way: C hook -> ring -> Drain -> writers.
Whatever ends a recording (Ctrl-C, SIGTERM, --duration, the target exiting or
crashing, an error) goes through the same stop path, so what was recorded is
always drained, finalized and described in manifest.json.
"""

from __future__ import annotations

import datetime as _dt
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable

import frida

from atf import AtfError
from atf import format as F
from atf.direct import worth_going_direct
from atf.writer import SessionWriter

from .detail import AlwaysDetail
from .devices import Target, find_app_pid
from .drain import Drain
from .errors import FRIDA_ERRORS, TracerError, describe_frida_error
from .flight import FlightRecorder
from .manifest import build_manifest
from .rings import (DETAIL_ALWAYS, DETAIL_OFF, DETAIL_WINDOW, POLICY_DROP, POLICY_WAIT,
                    RegionGeometry, RingReader, SharedRegion, check_layout, clock_ns)
from .transport import RpcMirror

DETAIL_MODES = {"off": DETAIL_OFF, "always": DETAIL_ALWAYS, "window": DETAIL_WINDOW}
# --detail-io: when a thread's detail.atf switches from the page cache to O_DIRECT (atf.direct),
# asked with the bytes it has written so far
DETAIL_IO: dict[str, Callable[[int], bool] | None] = {
    "auto": worth_going_direct, "direct": lambda lane_bytes: True, "cached": None}

ARCH_CODES = {"x64": F.ARCH_X86_64, "arm64": F.ARCH_ARM64}


@dataclass
class TraceOptions:
    selection: list[dict[str, Any]]
    output: Path = Path("ada_traces")
    duration_s: float | None = None
    on_full: str = "wait"  # "wait" (lossless) or "drop"
    max_threads: int = 1024
    ring_events: int = 1 << 15
    stall_s: float = 2.0
    detail: str = "off"  # "off", "always" (--detail) or "window" (flight recorder)
    stack_bytes: int = 128
    detail_ring_bytes: int = 4 << 20
    pre_roll_ms: float = 0.0
    post_roll_ms: float = 0.0
    pre_roll_buffer_mb: int = 256
    triggers: list[dict[str, Any]] = field(default_factory=list)  # --trigger selections
    trigger_at_ms: list[float] = field(default_factory=list)
    trigger_gap_ms: float = 1.0
    transport: str = "auto"  # "auto", "shm" (local mapping) or "rpc" (pulled over Frida)
    clock_source: str = "auto"  # "auto" (raw TSC ticks where the OS clock runs on them) or "os"
    toolchain: str = "auto"  # CModule toolchain: "auto", "internal" (TinyCC) or "external" (gcc)
    detail_io: str = "auto"  # how detail.atf is written: a key of DETAIL_IO


@dataclass
class Progress:
    elapsed_s: float
    events: int
    threads: int
    drops: int
    detail_bytes: int = 0
    windows: int = 0
    truncated_ns: int = 0
    transport_bytes_per_s: float | None = None
    wait_ns: int = 0  # time producers spent waiting for room in full rings (wait policy)


@dataclass
class RecordingResult:
    path: Path
    end_reason: str
    clean: bool
    events: int
    warnings: list[str] = field(default_factory=list)


def agent_sources() -> tuple[str, str]:
    pkg = resources.files("agent")
    return (pkg.joinpath("ada_agent.js").read_text(encoding="utf-8"),
            pkg.joinpath("ada_hooks.c").read_text(encoding="utf-8"))


class Recorder:
    """One recording session of one process."""

    def __init__(self, device: frida.core.Device, target: Target, options: TraceOptions,
                 warn: Callable[[str], None] = lambda m: None,
                 info: Callable[[str], None] = lambda m: None,
                 on_session: Callable[[frida.core.Session], None] = lambda s: None) -> None:
        self.device = device
        self.on_session = on_session  # e.g. --p2p setup, once attached
        self.target = target
        self.options = options
        self.warn = warn
        self.info = info
        self.stop_event = threading.Event()
        self.stop_reason = "interrupted"
        self.crash: str | None = None
        self.pid: int | None = None
        self.spawned = False
        self.session: frida.core.Session | None = None
        self.script: frida.core.Script | None = None
        self.region: SharedRegion | None = None
        self.writer: SessionWriter | None = None
        self.drain: Drain | None = None
        self.agent_info: dict[str, Any] = {}
        self.functions: list[dict[str, Any]] = []
        self.trigger_functions: dict[int, dict[str, Any]] = {}
        self.hook_failures: list[dict[str, Any]] = []
        self.flight: FlightRecorder | None = None
        self.always: AlwaysDetail | None = None
        self.mirror: RpcMirror | None = None
        self.transport = resolve_transport(options.transport, device)
        self.record_start_ns = 0
        self.started_at = _dt.datetime.now()
        self.t0 = time.monotonic()
        self._detached = False

    # --- stop requests (any thread) ----------------------------------------------

    def request_stop(self, reason: str) -> None:
        if not self.stop_event.is_set():
            self.stop_reason = reason
            self.stop_event.set()

    def _on_detached(self, reason: str, crash: Any) -> None:
        self._detached = True
        if crash is not None:
            self.crash = getattr(crash, "summary", str(crash))
            self.request_stop("target-crashed")
        elif reason == "process-terminated":
            self.request_stop("target-exited")
        else:
            self.request_stop(f"detached: {reason}")

    def _on_message(self, message: dict, data: Any) -> None:
        if message.get("type") == "error":
            self.warn(f"agent error: {message.get('description')}")
        elif message.get("type") == "send":
            payload = message.get("payload") or {}
            kind = payload.get("type") if isinstance(payload, dict) else None
            if kind == "agent:warning":
                self.warn(str(payload.get("message")))
            elif kind == "ada:final" and data is not None and self.mirror is not None:
                self.mirror.queue_final(data)

    # --- the recording ------------------------------------------------------------

    def prepare(self) -> None:
        """Attach (spawning first for -f), load the agent, resolve and hook. Raises TracerError."""
        _check_output_dir(self.options.output)
        try:
            self._attach()
            self._load_agent()
        except FRIDA_ERRORS as e:
            message = self._explain(e)  # before _abandon: it kills a spawned target
            self._abandon()
            raise TracerError(message) from None
        except (TracerError, KeyboardInterrupt):
            self._abandon()  # Ctrl-C while attaching leaves no suspended target behind
            raise

    def _attach(self) -> None:
        kind, value = self.target.kind, self.target.value
        if kind == "file":
            argv = list(value)  # type: ignore[arg-type]
            self.pid = self.device.spawn(argv)
            self.spawned = True
        elif kind == "pid":
            self.pid = int(value)  # type: ignore[arg-type]
        elif kind == "identifier":
            self.pid = find_app_pid(self.device, str(value))
        else:
            self.pid = self.device.get_process(str(value)).pid
        self.session = self.device.attach(self.pid)
        self.session.on("detached", self._on_detached)
        self.on_session(self.session)

    def _load_agent(self) -> None:
        js, c_source = agent_sources()
        assert self.session is not None
        self.script = self.session.create_script(js, name="ada-agent", runtime="qjs")
        self.script.on("message", self._on_message)
        self.script.load()
        o = self.options
        detail_capacity = o.detail_ring_bytes if o.detail != "off" else 0
        geometry = RegionGeometry(o.max_threads, o.ring_events, detail_capacity)
        if self.transport == "shm":
            self.region = SharedRegion(geometry)
        config = {
            "source": c_source, "shmPath": str(self.region.path) if self.region else None,
            "regionSize": geometry.size,
            "maxThreads": o.max_threads, "indexCapacity": o.ring_events,
            "detailCapacity": detail_capacity, "detailMode": DETAIL_MODES[o.detail],
            "stackBytes": o.stack_bytes, "triggerGapNs": str(int(o.trigger_gap_ms * 1e6)),
            "clockSource": o.clock_source, "toolchain": resolve_toolchain(o.toolchain, self.device),
            "policy": POLICY_DROP if o.on_full == "drop" else POLICY_WAIT,
            "heartbeatNs": str(clock_ns()), "stallNs": str(int(o.stall_s * 1e9)),
            "indexRingsOffset": str(geometry.index_rings_offset),
            "detailRingsOffset": str(geometry.detail_rings_offset),
        }
        api = self.script.exports_sync
        self.agent_info = api.init(config)
        check_layout(self.agent_info["layout"])
        self._report_toolchain()
        self.functions = api.resolve(o.selection)["functions"]
        if not self.functions:
            raise TracerError("no function matched the selection "
                              f"({_describe_selection(o.selection)})")
        self.info(f"{len(self.functions)} function(s) matched")
        if o.triggers:
            found = api.resolve_triggers(o.triggers)
            if not found:
                raise TracerError("no function matched --trigger "
                                  f"({_describe_selection(o.triggers)})")
            self.trigger_functions = {int(t["triggerId"], 16): t for t in found}
            self.info(f"{len(found)} trigger function(s) matched")
        hooked = api.hook()
        self.hook_failures = hooked["failures"]
        for f in self.hook_failures:
            self.warn(f"cannot hook {f['name']} ({f['module']} {f['address']}): {f['error']}")
        if hooked["hooked"] == 0:
            raise TracerError("none of the matched functions could be hooked")
        self.info(f"hooked {hooked['hooked']} function(s) in pid {self.pid}; recording "
                  f"({self.transport} transport)")
        arch = ARCH_CODES[self.agent_info["arch"]]
        self.writer = SessionWriter(o.output, self.pid or 0, arch=arch,
                                    os_id=_os_code(self.device, self.agent_info),
                                    clock_type=self.agent_info["clockType"],
                                    started=self.started_at,
                                    direct_detail=DETAIL_IO[o.detail_io])
        sink: AlwaysDetail | FlightRecorder | None = None
        if o.detail == "always":
            sink = self.always = AlwaysDetail()
        elif o.detail == "window":
            sink = self.flight = FlightRecorder(int(o.pre_roll_ms * 1e6),
                                                int(o.post_roll_ms * 1e6),
                                                o.pre_roll_buffer_mb << 20)
        if self.region is not None:
            rings = RingReader(self.region.buf, geometry)
        else:
            self.mirror = RpcMirror(self.script, geometry)
            rings = self.mirror.reader
        self.drain = Drain(rings, self.writer, sink,
                           self._on_function_trigger if self.flight else None,
                           self.mirror.sync if self.mirror else None)

    def _on_function_trigger(self, timestamp_ns: int, trigger_id: int, tid: int) -> None:
        assert self.flight is not None
        fn = self.trigger_functions.get(trigger_id, {})
        self.flight.trigger(timestamp_ns, "function", tid=tid, function=fn.get("name"))

    def trigger_now(self, kind: str) -> None:
        """A trigger from the person at the terminal (SIGUSR1, Enter); ignored without windows."""
        if self.flight is not None:
            self.flight.trigger(clock_ns(), kind)

    def record(self, progress: Callable[[Progress], None] | None = None,
               interval_s: float = 0.5) -> RecordingResult:
        """Drain until a stop is requested, then stop and finalize. Returns the result."""
        assert self.drain is not None and self.writer is not None
        self.t0 = time.monotonic()
        self.record_start_ns = clock_ns()
        if self.flight is not None:
            for ms in self.options.trigger_at_ms:
                self.flight.schedule(self.record_start_ns + int(ms * 1e6), "time", at_ms=ms)
        self.drain.start()
        try:
            if self.spawned:
                self.device.resume(self.pid)
        except FRIDA_ERRORS as e:
            self.request_stop(f"error: cannot resume: {describe_frida_error(e)}")
        deadline = None if self.options.duration_s is None else self.t0 + self.options.duration_s
        while not self.stop_event.is_set():
            timeout = interval_s if deadline is None else max(0.0, min(interval_s,
                                                                      deadline - time.monotonic()))
            self.stop_event.wait(timeout)
            if self.drain.failed.is_set():
                self.request_stop(f"error: {self.drain.error}")
            elif self.mirror is not None and self.mirror.lost is not None:
                self.request_stop(f"connection-lost: {self.mirror.lost}")
            elif deadline is not None and time.monotonic() >= deadline:
                self.request_stop("duration")
            if progress is not None:
                progress(self.progress())
        return self._stop()

    def progress(self) -> Progress:
        stats = self.drain.stats if self.drain else None
        if stats is None:
            return Progress(time.monotonic() - self.t0, 0, 0, 0)
        flight = self.flight
        return Progress(time.monotonic() - self.t0, stats.events, stats.threads,
                        stats.total_drops + sum(stats.detail_drops), stats.detail_bytes,
                        len(flight.windows) if flight else 0,
                        flight.truncated_ns if flight else 0,
                        self.mirror.throughput() if self.mirror else None,
                        sum(ns for _, ns in self.drain.waits()))

    def _stop(self) -> RecordingResult:
        """Unhook, drain what is left, finalize files and manifest, detach."""
        assert self.drain is not None and self.writer is not None
        warnings: list[str] = []
        if not self._detached and self.script is not None:
            try:
                self.script.exports_sync.stop()
            except FRIDA_ERRORS as e:
                warnings.append(f"could not unhook cleanly: {describe_frida_error(e)}")
        self.drain.rings.set_stop()
        self.drain.finish()
        error = self.drain.error
        if error is not None:
            self.stop_reason = f"error: {error}"
        if self.drain.clock is not None and self.drain.clock.resets:
            warnings.append(f"the CPU's time-stamp counter went backwards "
                            f"{self.drain.clock.resets} time(s) (a suspend or a VM migration): "
                            "events recorded just before that have unreliable timestamps; "
                            "--clock-source os avoids this")
        ended_at = _dt.datetime.now()
        try:
            self.writer.finalize()
        except AtfError as e:  # what could not be finished reads as recovered, as after a crash
            warnings.append(f"could not finish every file: {e}")
            if error is None:
                self.stop_reason = f"error: {e}"
        clean = self.stop_reason in ("interrupted", "duration", "target-exited", "terminated")
        manifest = build_manifest(self, ended_at=ended_at, clean=clean)
        self.writer.write_manifest(manifest)
        self._detach()
        if self.region is not None:
            self.region.close()
        return RecordingResult(self.writer.path, self.stop_reason, clean, self.drain.stats.events,
                               warnings)

    def _detach(self) -> None:
        try:
            if self.script is not None and not self._detached:
                self.script.unload()
        except FRIDA_ERRORS:
            pass
        try:
            if self.session is not None and not self._detached:
                self.session.detach()
        except FRIDA_ERRORS:
            pass

    def _abandon(self) -> None:
        """Undo a failed prepare(): no hooks left behind, no suspended orphan."""
        self._detach()
        if self.spawned and self.pid is not None:
            try:
                self.device.kill(self.pid)
            except FRIDA_ERRORS:
                pass
        if self.region is not None:
            self.region.close()

    def _report_toolchain(self) -> None:
        info = self.agent_info
        if info["toolchain"] == "external":
            self.info("hot path compiled by the system toolchain (gcc -O2)")
        elif info.get("toolchainFallback"):
            self.info(f"hot path compiled by Frida's TinyCC; the system toolchain could not: "
                      f"{info['toolchainFallback']}")

    def _target_alive(self) -> bool:
        """Is the target still a live process? (False for a zombie: it has exited.)"""
        if self.device.type == "local" and sys.platform.startswith("linux"):
            try:
                with open(f"/proc/{self.pid}/stat", "rb") as f:
                    return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
            except (OSError, IndexError):
                return False
        if self.device.type == "local":
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return False
            except OSError:
                pass
            return True
        try:
            return any(p.pid == self.pid for p in self.device.enumerate_processes())
        except FRIDA_ERRORS:
            return True  # cannot tell: keep frida's own words

    def _explain(self, e: BaseException) -> str:
        text = describe_frida_error(e)
        local = self.device.type == "local"
        if "locked" in text.lower():
            return f"{self.device.name} is locked: unlock it and try again ({text})"
        if isinstance(e, frida.ProcessNotFoundError):
            return f"no such process: {self.target.describe()} ({text})"
        if isinstance(e, frida.ExecutableNotFoundError):
            if not local and self.target.spawns:
                return (f"app '{self.target.value[0]}' is not installed on {self.device.name} "
                        f"(frida-ps -Uai lists the apps): {text}")
            return f"cannot spawn {self.target.describe()}: {text}"
        if isinstance(e, frida.PermissionDeniedError):
            return f"permission denied attaching to {self.target.describe()}: {text}"
        if self._detached or (self.pid is not None and not self._target_alive()):
            return f"the target ({self.target.describe()}) exited during attach ({text})"
        return f"cannot trace {self.target.describe()}: {text}"


def resolve_toolchain(choice: str, device: frida.core.Device) -> str:
    """auto: the system compiler where there can be one (the local device), else TinyCC.

    Phones and remote servers have no compiler for the agent to run, so auto means TinyCC there.
    """
    if choice == "auto":
        return "fallback" if device.type == "local" else "internal"
    return choice


def resolve_transport(choice: str, device: frida.core.Device) -> str:
    """auto: shared memory on the local device (the host can map the target), RPC elsewhere."""
    local = device.type == "local"
    if choice == "auto":
        return "shm" if local else "rpc"
    if choice == "shm" and not local:
        raise TracerError(f"--transport shm needs the local device; this host cannot map the "
                          f"memory of a {device.type} device (use --transport rpc or auto)")
    return choice


def _check_output_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TracerError(f"output directory {path} is not writable: {e.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise TracerError(f"output directory {path} is not writable")


def _os_code(device: frida.core.Device, agent_info: dict[str, Any]) -> int:
    """ATF os code: the agent knows darwin/linux, the device knows iOS or Android."""
    try:
        os_id = device.query_system_parameters().get("os", {}).get("id")
    except FRIDA_ERRORS:
        os_id = None
    if agent_info["platform"] == "darwin":
        return F.OS_IOS if os_id == "ios" else F.OS_MACOS
    return F.OS_ANDROID if os_id == "android" else F.OS_LINUX


def _describe_selection(selection: list[dict[str, Any]]) -> str:
    flags = {("include", "function"): "-i", ("exclude", "function"): "-x",
             ("include", "module"): "-I", ("exclude", "module"): "-X",
             ("include", "offset"): "-a", ("include", "symbol"): "-s",
             ("include", "objc"): "-m", ("exclude", "objc"): "-M"}
    parts = []
    for s in selection:
        flag = flags.get((s["op"], s["kind"]), "?")
        if s["kind"] == "module":
            parts.append(f"{flag} {s['module']}")
        elif s["kind"] == "offset":
            parts.append(f"{flag} {s['module']}!0x{s['offset']:x}")
        else:
            parts.append(f"{flag} {(s['module'] + '!') if s['module'] else ''}{s['pattern']}")
    return " ".join(parts) or "nothing selected"

