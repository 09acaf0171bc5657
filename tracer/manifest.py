"""manifest.json: everything a reader needs to know about a session (docs/manifest.md)."""

from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING, Any

import frida

from atf import format as F

from . import __version__

if TYPE_CHECKING:
    from .recorder import Recorder


def build_manifest(rec: "Recorder", *, ended_at: _dt.datetime, clean: bool) -> dict[str, Any]:
    assert rec.writer is not None and rec.drain is not None
    info = rec.agent_info
    drain = rec.drain
    rings = drain.rings
    threads = []
    waits = drain.waits()
    for slot, w in enumerate(drain.writers):
        threads.append({"id": slot, "tid": w.thread_id, "has_detail": w.detail_count > 0,
                        "index_events": w.index_count, "detail_events": w.detail_count,
                        "drops": drain.stats.drops[slot],
                        "detail_drops": drain.stats.detail_drops[slot],
                        "waits": waits[slot][0], "wait_ms": round(waits[slot][1] / 1e6, 3),
                        "detail_direct_from": w.detail_direct_from})
    ranges = [r for r in (w.index_time_range for w in drain.writers) if r is not None]
    modules: dict[int, dict[str, Any]] = {}
    symbols = []
    for f in rec.functions:
        modules.setdefault(f["moduleId"], {
            "module_id": f["moduleId"], "name": f["module"], "path": f["modulePath"],
            "base": f["moduleBase"], "size": f["moduleSize"]})
        symbols.append({"function_id": f["functionId"], "module_id": f["moduleId"],
                        "symbol_index": f["symbolIndex"], "name": f["name"],
                        "address": f["address"]})
    main = info.get("mainModule", {})
    o = rec.options
    return {
        "format": {"name": "ATF", "version": 2, "revision": F.REVISION_1},
        "tool": {"name": "ada", "version": __version__, "frida": frida.__version__},
        "session": {"started_at": rec.started_at.isoformat(timespec="seconds"),
                    "ended_at": ended_at.isoformat(timespec="seconds"),
                    "duration_s": round((ended_at - rec.started_at).total_seconds(), 3)},
        "process": {"pid": rec.pid, "name": main.get("name"), "path": main.get("path"),
                    "arch": F.ARCH_NAMES.get(rec.writer.arch), "os": F.OS_NAMES.get(rec.writer.os_id),
                    "platform": info.get("platform"), "spawned": rec.spawned,
                    "argv": rec.target.value if rec.spawned else None},
        "device": {"id": rec.device.id, "name": rec.device.name, "type": rec.device.type},
        "transport": transport_stats(rec),
        "clock_type": rec.writer.clock_type,
        "clock": F.CLOCK_NAMES.get(rec.writer.clock_type),
        "clock_source": clock_source(rec),
        "hot_path": {"toolchain": info.get("toolchain"),
                     "toolchain_fallback": info.get("toolchainFallback")},
        "time_range": [min(r[0] for r in ranges), max(r[1] for r in ranges)] if ranges else None,
        "threads": threads,
        "drops": {"policy": o.on_full, "index": drain.stats.total_drops,
                  "waits": sum(n for n, _ in waits),
                  "wait_ms": round(sum(ns for _, ns in waits) / 1e6, 3),
                  "overflow_threads": rings.overflow_threads,
                  "overflow_events": rings.overflow_events, "max_threads": o.max_threads},
        "modules": [modules[k] for k in sorted(modules)],
        "symbols": symbols,
        "hook_failures": rec.hook_failures,
        "options": {"selection": o.selection, "duration_s": o.duration_s, "on_full": o.on_full,
                    "max_threads": o.max_threads, "ring_events": o.ring_events,
                    "triggers": o.triggers, "trigger_at_ms": o.trigger_at_ms,
                    "clock_source": o.clock_source, "cmodule_toolchain": o.toolchain},
        "detail": detail_settings(rec),
        "triggers": rec.flight.stats.triggers if rec.flight else [],
        "windows": [w.to_dict() for w in rec.flight.windows] if rec.flight else [],
        "end": {"clean": clean, "reason": rec.stop_reason, "crash": rec.crash},
    }


def clock_source(rec: "Recorder") -> dict[str, Any]:
    """How the hot path read time: the OS clock itself, or TSC ticks converted by the drain."""
    assert rec.drain is not None
    clock = rec.drain.clock
    if clock is None:
        return {"hot_path": "os"}
    return {"hot_path": "tsc", "ns_per_tick": clock.ns_per_tick, "resets": clock.resets}


def detail_settings(rec: "Recorder") -> dict[str, Any]:
    o = rec.options
    assert rec.drain is not None
    if o.detail == "off":
        return {"mode": "off"}
    settings: dict[str, Any] = {
        "mode": o.detail, "stack_bytes": o.stack_bytes, "ring_bytes": o.detail_ring_bytes,
        "io": o.detail_io,
        "captured_bytes": rec.drain.stats.detail_bytes,
        "dropped": sum(rec.drain.stats.detail_drops)}
    if rec.always is not None:
        settings["unlinked_at_end"] = rec.always.unlinked
    if rec.flight is not None:
        f = rec.flight
        settings.update({
            "pre_roll_ms": o.pre_roll_ms, "post_roll_ms": o.post_roll_ms,
            "pre_roll_buffer_mb": o.pre_roll_buffer_mb, "persisted": f.stats.persisted,
            "discarded": f.stats.discarded, "evicted_by_cap": f.stats.evicted,
            "truncated_ns": f.truncated_ns, "trigger_gap_ms": o.trigger_gap_ms,
            "triggers_coalesced": rec.drain.rings.triggers_coalesced,
            "triggers_lost": rec.drain.stats.triggers_lost})
    return settings


def transport_stats(rec: "Recorder") -> dict[str, Any]:
    if rec.mirror is None:
        return {"kind": rec.transport}
    m = rec.mirror
    return {"kind": rec.transport, "pulls": m.pulls, "bytes": m.bytes,
            "mb_per_s": round(m.throughput() / 1e6, 2), "last_error": m.lost}
