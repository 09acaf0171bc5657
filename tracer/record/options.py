"""What to record and from whom: the plain description the CLI hands to the recorder.

Frida-free: the CLI builds these from its arguments before anything is attached.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LANE_IO = ("auto", "direct", "cached")  # --detail-io, --index-io: see tracer.record.lane_io


@dataclass(frozen=True)
class Target:
    kind: str  # "pid" | "name" | "identifier" | "file"
    value: object

    @property
    def spawns(self) -> bool:
        return self.kind == "file"

    def describe(self) -> str:
        if self.kind == "file":
            return " ".join(self.value)  # type: ignore[arg-type]
        return f"{self.kind} {self.value}"


@dataclass(frozen=True)
class ProcessPlace:
    """Where one process's recording goes, and how the process came to be traced."""

    session_dir: Path | None = None  # shared with the rest of the process tree; None: a new one
    process_dir: str | None = None  # pid_<N> by default; pid_<N>_exec<K> for a new image
    parent_pid: int | None = None  # the traced process it forked from
    origin: str | None = None  # None: the target itself; "fork", "vfork", "spawn" or "exec"
    gated: bool = False  # held by Frida at its fork or exec: resumed once hooked


@dataclass
class TraceOptions:
    selection: list[dict[str, Any]]
    output: Path = Path("ada_traces")
    duration_s: float | None = None
    on_full: str = "wait"  # "wait" (lossless) or "drop"
    max_threads: int = 1024
    ring_events: int = 1 << 15
    # How long a thread waiting for room (a full ring, no free slot) trusts a silent host
    # before it counts its events as dropped (drain.Heartbeat). Over rpc the beats are
    # messages, which a slow or busy link may hold up: it is given longer.
    stall_s: float = 2.0
    rpc_stall_s: float = 10.0
    detail: str = "off"  # "off", "always" (--detail) or "window" (the flight recorder)
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
    hook_engine: str = "auto"  # "auto", "frida" (Frida's Interceptor) or "inline" (ada's stubs)
    detail_io: str = "auto"  # how detail.atf is written: one of LANE_IO
    index_io: str = "auto"  # how index.atf is written: one of LANE_IO (cached in a window)
    follow_children: bool = True  # record forked children and exec'd images (recording.py)
    # Where copies of the target's modules are (--symbols; a phone's libraries): their debug
    # information says which arguments are C strings, captured with the detail lane.
    symbols: list[Path] = field(default_factory=list)
