"""manifest.json: everything a reader needs to know about a session (docs/manifest.md).

Built from plain data: the facts of the recording (RecordingFacts) and the small summary() each
part of the pipeline hands back (the drain, the detail sink, the RPC mirror). Nothing here
reaches into the parts themselves.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any

from ada.atf.format import ARCH_NAMES, CLOCK_NAMES, OS_NAMES, REVISION_1

from .. import __version__
from .options import Target, TraceOptions


@dataclass
class RecordingFacts:
    """What the recorder knows of the session when it ends."""

    options: TraceOptions
    target: Target
    pid: int | None
    spawned: bool
    device: dict[str, Any]  # id, name, type
    agent: dict[str, Any]  # what the agent's init returned (platform, mainModule, toolchain...)
    arch: int  # ATF codes, as in the files' headers
    os_id: int
    clock_type: int
    transport: str  # "shm" or "rpc"
    frida_version: str
    hooked: dict[str, Any]  # HookedFunctions.snapshot(): functions, failures, unloaded modules
    never_matched: list[str]  # selection items (as typed) that matched no function
    started_at: _dt.datetime
    ended_at: _dt.datetime
    clean: bool
    end_reason: str
    crash: dict[str, Any] | None = None  # signal, address, thread... (agent/ada_ending.js)
    exit_status: int | None = None
    undelivered: tuple[int, int] | None = (0, 0)  # events, detail bytes; None: unknown
    parent_pid: int | None = None  # a followed child: the traced process it forked from
    origin: str | None = None  # None for the target; "fork", "exec", ... for the others
    children: list[dict[str, Any]] | None = None  # {"pid", "origin", "followed"} seen
    children_untraced: int | None = None  # forked but never announced by Frida; None: not counted
    clock_anchors: list[dict[str, Any]] | None = None  # {"at", "clock_ns", "realtime_ns", ...}
    thread_hold: dict[str, int] | None = None  # the agent's ThreadHold.stats (None: no hold)


def build_manifest(facts: RecordingFacts, drain: dict[str, Any], sink: dict[str, Any] | None,
                   transport: dict[str, Any] | None) -> dict[str, Any]:
    """The manifest of a session: `drain`, `sink` and `transport` are the parts' summary()
    (sink None without a detail lane, transport None for shared memory)."""
    o = facts.options
    main = facts.agent.get("mainModule", {})
    sink = sink or {}
    return {
        "format": {"name": "ATF", "version": 2, "revision": REVISION_1},
        "tool": {"name": "ada", "version": __version__, "frida": facts.frida_version},
        "session": {"started_at": facts.started_at.isoformat(timespec="seconds"),
                    "ended_at": facts.ended_at.isoformat(timespec="seconds"),
                    "duration_s": round((facts.ended_at - facts.started_at).total_seconds(), 3)},
        "process": {"pid": facts.pid, "name": main.get("name"), "path": main.get("path"),
                    "arch": ARCH_NAMES.get(facts.arch), "os": OS_NAMES.get(facts.os_id),
                    "platform": facts.agent.get("platform"), "spawned": facts.spawned,
                    "argv": facts.target.value if facts.spawned else None,
                    "parent_pid": facts.parent_pid, "origin": facts.origin,
                    "children": facts.children or [],
                    "children_untraced": facts.children_untraced},
        "device": facts.device,
        "transport": {"kind": facts.transport, **(transport or {}),
                      **({"region": facts.agent.get("region")} if facts.transport == "shm"
                         else {"fork_gate": facts.agent.get("forkGate")})},
        "clock_type": facts.clock_type,
        "clock": CLOCK_NAMES.get(facts.clock_type),
        "clock_source": drain["clock"],
        "clock_anchors": facts.clock_anchors or [],
        "hot_path": {"toolchain": facts.agent.get("toolchain"),
                     "toolchain_fallback": facts.agent.get("toolchainFallback"),
                     "built": facts.agent.get("hotPathBuilt"),
                     "tls_direct": facts.agent.get("tlsDirect")},
        "time_range": drain["time_range"],
        "threads": drain["threads"],
        "drops": {"policy": o.on_full, "index": drain["index_drops"], "waits": drain["waits"],
                  "wait_ms": drain["wait_ms"], "overflow_threads": drain["overflow_threads"],
                  "overflow_events": drain["overflow_events"], "max_threads": o.max_threads,
                  "unbacked_threads": drain.get("unbacked_threads", 0),
                  "unwritten_events": drain.get("unwritten_events", 0),
                  "skipped_events": drain.get("skipped_events", 0)},
        "unwinding": {"unwound_calls": drain.get("unwound_calls", 0),
                      "terminate": drain.get("terminate")},
        **modules_and_symbols(facts.hooked["functions"], facts.hooked["unloaded"]),
        "hook_failures": facts.hooked["failures"],
        "hook_engine": facts.agent.get("hookEngine", o.hook_engine),
        "hook_engine_why": facts.agent.get("hookEngineWhy"),
        "hook_fallbacks": facts.hooked.get("fallbacks", []),
        "hook_aliases": facts.hooked.get("aliases", []),
        "hook_breakpoints": facts.hooked.get("breakpoints", []),
        "hook_late": facts.hooked.get("late", []),
        "hook_writes_awaited": facts.hooked.get("writes_awaited", 0),
        "hook_breakpoint_calls": drain.get("trap_calls", 0),
        "hook_paused_spawns": drain.get("paused_spawns", 0),
        "drain_wakes": drain.get("drain_wakes", 0),
        "thread_hold": thread_hold(facts.thread_hold),
        "never_matched": facts.never_matched,
        "options": {"selection": o.selection, "duration_s": o.duration_s, "on_full": o.on_full,
                    "max_threads": o.max_threads, "ring_events": o.ring_events,
                    "triggers": o.triggers, "trigger_at_ms": o.trigger_at_ms,
                    "clock_source": o.clock_source, "cmodule_toolchain": o.toolchain,
                    "index_io": o.index_io},
        "detail": detail_settings(o, drain, sink),
        "triggers": sink.get("triggers", []),
        "windows": sink.get("windows", []),
        "end": {"clean": facts.clean, "reason": facts.end_reason, "crash": facts.crash,
                "exit_status": facts.exit_status,
                "undelivered_events": facts.undelivered[0] if facts.undelivered else None,
                "undelivered_detail_bytes": facts.undelivered[1] if facts.undelivered
                else None},
    }


def thread_hold(stats: dict[str, int] | None) -> dict[str, int] | None:
    """The agent's counts of its thread holds (ada_code.js, ThreadHold), in the manifest's
    words; None where the agent had no hold (another OS, or every real-time signal taken)."""
    if stats is None:
        return None
    return {"holds": stats.get("holds", 0), "asks": stats.get("asks", 0),
            "threads_not_held": stats.get("notHeld", 0),
            "threads_went_on": stats.get("wentOn", 0),
            "written_around": stats.get("inside", 0), "ms": stats.get("ms", 0),
            "left_inside": stats.get("leftInside", 0),
            "system_calls_cut_short": stats.get("cutShort", 0)}


def modules_and_symbols(functions: list[dict[str, Any]],
                        unloaded: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """`modules` (module_id 0 = the main executable) and `symbols` (function_id "0x%016x"),
    each with when it was hooked (added_ns) and, for a module, its names and when it went."""
    gone = {(u["path"], u["base"]): u["removed_ns"] for u in unloaded}
    modules: dict[int, dict[str, Any]] = {}
    symbols: dict[tuple[str, str], dict[str, Any]] = {}
    for f in functions:
        added = int(f["addedNs"])
        modules.setdefault(f["moduleId"], {
            "module_id": f["moduleId"], "name": f["module"], "path": f["modulePath"],
            "file": f["moduleFile"], "names": f["moduleNames"], "base": f["moduleBase"],
            "size": f["moduleSize"], "added_ns": added,
            "removed_ns": gone.get((f["modulePath"], f["moduleBase"]))})
        symbols.setdefault((f["functionId"], f["address"]), {
            "function_id": f["functionId"], "module_id": f["moduleId"],
            "symbol_index": f["symbolIndex"], "name": f["name"], "address": f["address"],
            "added_ns": added})
    return {"modules": [modules[k] for k in sorted(modules)], "symbols": list(symbols.values())}


def detail_settings(o: TraceOptions, drain: dict[str, Any], sink: dict[str, Any]) -> dict[str, Any]:
    if o.detail == "off":
        return {"mode": "off"}
    settings: dict[str, Any] = {
        "mode": o.detail, "stack_bytes": o.stack_bytes, "ring_bytes": o.detail_ring_bytes,
        "io": o.detail_io, "captured_bytes": drain["detail_bytes"],
        "dropped": drain["detail_drops"]}
    if o.detail == "always":
        settings["unlinked_at_end"] = sink["unlinked_at_end"]
    else:
        settings.update({
            "pre_roll_ms": o.pre_roll_ms, "post_roll_ms": o.post_roll_ms,
            "pre_roll_buffer_mb": o.pre_roll_buffer_mb, "persisted": sink["persisted"],
            "discarded": sink["discarded"], "evicted_by_cap": sink["evicted_by_cap"],
            "truncated_ns": sink["truncated_ns"], "trigger_gap_ms": o.trigger_gap_ms,
            "triggers_coalesced": drain["triggers_coalesced"],
            "triggers_lost": drain["triggers_lost"]})
    return settings
