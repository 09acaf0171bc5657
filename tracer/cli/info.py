"""`ada info SESSION`: what a session holds, from its manifest and its files."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ada.atf.format import ARCH_NAMES, CLOCK_NAMES, OS_NAMES
from ada.atf.manifest import Manifest
from ada.atf.reader import DEGRADED, RECOVERED
from ada.atf.session import SessionReader, process_dirs

from .common import format_duration_ns


def configure(p: argparse.ArgumentParser) -> None:
    """`ada info`'s text and arguments: imported for it alone (cli/__init__.py)."""
    p.description = ("Summarise a session: process, clock, time range, threads, detail, hook "
                     "engine, drops, trigger windows, and whether it was closed cleanly.")
    p.add_argument("session", help="session directory (pid_N, or the session_* above it; "
                   "one of several processes lists them all)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(run=run)


def summarise(session: SessionReader) -> dict[str, Any]:
    manifest = session.manifest or Manifest(session.path, {})
    threads = []
    for t in session.threads:
        entry = manifest.thread(t.id)
        threads.append({
            "id": t.id, "tid": t.thread_id, "index_events": len(t.index),
            "detail_events": len(t.detail) if t.detail else 0,
            "time_range": t.index.time_range(),
            "state": t.state,
            "drops": entry.drops if entry is not None else 0})
    first = session.threads[0].index if session.threads else None
    clock = first.clock_type if first else manifest.clock_type
    rng = session.time_range()
    return {
        "path": str(session.path),
        "process": asdict(manifest.process) if session.manifest is not None else None,
        "device": manifest.device or None,
        "arch": ARCH_NAMES.get(first.arch) if first else None,
        "os": OS_NAMES.get(first.os) if first else None,
        "clock": CLOCK_NAMES.get(clock, clock),
        "clock_hot_path": manifest.clock_hot_path,
        "time_range": rng,
        "duration_ns": (rng[1] - rng[0]) if rng else 0,
        "index_events": session.event_count(),
        "detail_events": sum(t["detail_events"] for t in threads),
        "state": session.state,
        "ended": asdict(manifest.end) if manifest.end is not None else None,
        "detail": manifest.detail or None,
        "triggers": [t.as_dict() for t in manifest.triggers],
        "windows": [w.as_dict() for w in manifest.windows],
        "drops": manifest.drops or None,
        "hooks": manifest.hooks or None,
        "hot_path": manifest.hot_path or None,
        "has_manifest": session.manifest is not None,
        "threads": threads,
    }


def run(args: argparse.Namespace) -> int:
    processes = process_dirs(args.session)
    if len(processes) > 1:  # a session_* directory of several processes: one line each
        listing = [process_line(SessionReader(p)) for p in processes]
        if args.json:
            print(json.dumps({"path": str(args.session), "processes": listing}, indent=2))
        else:
            print_processes(listing)
        return 0
    summary = summarise(SessionReader(args.session))
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print_summary(summary)
    return 0


def process_line(session: SessionReader) -> dict[str, Any]:
    """One process of a recording, in brief (ada info on its own directory says the rest)."""
    manifest = session.manifest or Manifest(session.path, {})
    process = manifest.process
    return {"path": str(session.path), "pid": process.pid,
            "parent_pid": process.parent_pid, "origin": process.origin,
            "name": process.name, "threads": len(session.threads),
            "index_events": session.event_count(),
            "state": session.state, "ended": manifest.end.reason if manifest.end else None,
            "clean": manifest.end.clean if manifest.end else None,
            "children_untraced": process.children_untraced}


def print_processes(listing: list[dict[str, Any]]) -> None:
    print(f"{len(listing)} processes (ada info PROCESS_DIR for one):")
    print(f"  {'pid':>8} {'parent':>8} {'origin':<7} {'threads':>7} {'events':>12}  "
          f"{'ended':<14} {'files':<9} directory")
    for p in listing:
        print(f"  {p['pid'] or '?':>8} {p['parent_pid'] or '-':>8} {p['origin'] or 'target':<7} "
              f"{p['threads']:>7} {p['index_events']:>12}  {p['ended'] or '?':<14} "
              f"{p['state']:<9} {Path(p['path']).name}")
    for p in listing:
        if p["children_untraced"]:
            print(f"pid {p['pid']}: {p['children_untraced']} child(ren) it forked were never "
                  "announced by Frida (died at their fork or ran untraced)")


def print_summary(s: dict[str, Any]) -> None:
    proc = s["process"] or {}
    out = [("session", s["path"])]
    if proc:
        out.append(("process", f"{proc.get('name', '?')} (pid {proc.get('pid', '?')})"))
    if proc.get("children") or proc.get("children_untraced"):
        followed = sum(1 for c in proc.get("children") or [] if c.get("followed"))
        text = f"{len(proc.get('children') or [])} announced by Frida, {followed} followed"
        if proc.get("children_untraced"):
            text += (f"; {proc['children_untraced']} never announced (died at their fork or "
                     f"ran untraced)")
        out.append(("children", text))
    if s["device"]:
        dev = s["device"]
        out.append(("device", dev.get("name", dev) if isinstance(dev, dict) else str(dev)))
    out.append(("platform", f"{s['os'] or '?'} {s['arch'] or '?'}"))
    out.append(("clock", str(s["clock"]) + (" (read as TSC ticks, converted by ada)"
                                            if s["clock_hot_path"] == "tsc" else "")))
    if s["time_range"]:
        a, b = s["time_range"]
        out.append(("time", f"{a} .. {b} ns ({format_duration_ns(b - a)})"))
    else:
        out.append(("time", "no events"))
    out.append(("events", f"{s['index_events']} index, {s['detail_events']} detail"))
    state = s["state"]
    if state == RECOVERED:
        state += " (a writer did not finish; every complete event was kept)"
    elif state == DEGRADED:
        state += (" (a detail lane has a malformed record: it is read up to it; "
                  "`ada verify` says where)")
    out.append(("files", state))
    ended = s["ended"]
    if isinstance(ended, dict):
        text = "cleanly" if ended.get("clean") else "not cleanly"
        if ended.get("reason"):
            text += f" ({ended['reason']})"
        out.append(("ended", text))
    elif not s["has_manifest"]:
        out.append(("manifest", "none (threads found by scanning thread_* directories)"))
    if isinstance(s["detail"], dict):
        d = s["detail"]
        out.append(("detail", ", ".join(f"{k}={v}" for k, v in d.items())))
    if isinstance(s["hooks"], dict):
        out.append(("hooks", ", ".join(f"{k}={v}" for k, v in s["hooks"].items())))
    if isinstance(s["hot_path"], dict):
        out.append(("hot path", ", ".join(f"{k}={v}" for k, v in s["hot_path"].items()
                                          if v is not None)))
    if isinstance(s["drops"], dict):
        out.append(("drops", ", ".join(f"{k}={v}" for k, v in s["drops"].items())))
    width = max(len(k) for k, _ in out)
    for key, value in out:
        print(f"{key:<{width}}  {value}")
    for name in ("triggers", "windows"):
        items = s[name] or []
        if items:
            print(f"{name} ({len(items)}):")
            for item in items:
                print("  " + ", ".join(f"{k}={v}" for k, v in item.items()))
    print(f"threads ({len(s['threads'])}):")
    print(f"  {'id':>4} {'tid':>8} {'index':>12} {'detail':>10} {'drops':>8}  state")
    for t in s["threads"]:
        print(f"  {t['id']:>4} {t['tid']:>8} {t['index_events']:>12} {t['detail_events']:>10} "
              f"{t['drops']:>8}  {t['state']}")
