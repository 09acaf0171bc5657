"""manifest.json, read once: a typed view of what a session says of itself (docs/manifest.md).

The one place that knows the manifest's keys on the reading side (tracer/record/manifest.py
writes them). Everything that reads a session asks a `Manifest`, never the JSON.

What a reader cannot go on without is checked here and refused with a ManifestError that
names the key (an unreadable file, `threads` that are not a list of unique integer ids). What
only describes the session is read leniently: an entry of the wrong shape is left out and
said in `problems`, which `ada verify` reports, so a damaged description never costs the
events. Older manifests read the same way: rev 1 and rev 2 sessions, and the reference
writer's (`{"threads": [{"id": 0}]}`, `event_count` for `index_events`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from .format import CLOCK_BOOTTIME, CLOCK_NAMES
from .errors import ManifestError
from .reader import open_regular

MANIFEST = "manifest.json"
MANIFEST_MAX_BYTES = 256 << 20  # a manifest past this is not one ada wrote: refused, not read


@dataclass(frozen=True)
class ThreadEntry:
    """One of `threads`: what the writer counted for thread_N (None: not said)."""

    id: int
    tid: int | None = None
    index_events: int | None = None
    detail_events: int | None = None
    has_detail: bool | None = None
    drops: int = 0  # index events its full ring dropped


@dataclass(frozen=True)
class Module:
    """One of `modules`: where a traced function's code came from."""

    module_id: int
    name: str | None = None
    path: str | None = None
    file: str | None = None  # the module's file, symlinks resolved
    base: int = 0
    size: int = 0


@dataclass(frozen=True)
class Symbol:
    """One of `symbols`: a traced function."""

    function_id: int
    name: str
    module_id: int
    address: int | None = None  # where it was in the process


@dataclass(frozen=True)
class Process:
    pid: int | None = None
    name: str | None = None
    path: str | None = None
    arch: str | None = None  # "x86_64", "arm64"
    os: str | None = None  # "linux", "android", "macos", "ios"
    platform: str | None = None  # Frida's Process.platform
    spawned: bool | None = None
    argv: list[str] | None = None  # a spawned target's command line
    parent_pid: int | None = None  # a followed child: the traced process it forked from
    origin: str | None = None  # None for the target; "fork", "exec", ...
    children: list[dict[str, Any]] = field(default_factory=list)
    children_untraced: int | None = None  # forked, never announced by Frida; None: not counted

    @property
    def apple(self) -> bool:
        return self.os in ("macos", "ios", "darwin")


@dataclass(frozen=True)
class End:
    clean: bool | None = None  # None: the manifest does not say
    reason: str | None = None  # "target-exited", "duration", ... ("recording": ada was killed)
    crash: dict[str, Any] | None = None  # signal, type, address, threadId, ...
    exit_status: int | None = None
    undelivered_events: int | None = None  # None: unknown (died without a word)
    undelivered_detail_bytes: int | None = None


@dataclass(frozen=True)
class Trigger:
    """A flight recorder trigger: its kind, when, and what else the recorder said of it."""

    kind: str
    timestamp_ns: int
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "timestamp_ns": self.timestamp_ns, **self.details}


@dataclass(frozen=True)
class Window:
    """A persisted flight recorder window, [start_ns, end_ns]."""

    start_ns: int
    end_ns: int
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"start_ns": self.start_ns, "end_ns": self.end_ns, **self.details}


@dataclass(frozen=True)
class Manifest:
    """What a session's manifest.json says. `document` is the JSON as written (for `ada info
    --json` and for tests that check what the recorder wrote); reading code uses the fields."""

    path: Path
    document: dict[str, Any]
    tool: str | None = None  # "ada" for ada's own sessions
    threads: list[ThreadEntry] | None = None  # None: not listed (threads found by scanning)
    process: Process = field(default_factory=Process)
    clock_type: int | None = None
    clock: str | None = None  # "boottime", "mach_continuous"
    clock_hot_path: str | None = None  # how the hot path read time: "os" or "tsc"
    realtime_anchor: tuple[int, int] | None = None  # (clock ns, CLOCK_REALTIME ns) together
    modules: list[Module] = field(default_factory=list)
    symbols: list[Symbol] = field(default_factory=list)
    end: End | None = None
    triggers: list[Trigger] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    # Described for people (printed key=value by `ada info`), not read by any logic:
    device: dict[str, Any] = field(default_factory=dict)
    drops: dict[str, Any] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    hooks: dict[str, Any] = field(default_factory=dict)  # the engine, and how many functions not
    # through it (by_interceptor_instead), refused or hooked as another's alias
    hot_path: dict[str, Any] = field(default_factory=dict)  # its compiler, and where it was built
    problems: list[str] = field(default_factory=list)  # entries left out, and why

    @property
    def by_ada(self) -> bool:
        return self.tool == "ada"

    def thread(self, thread_id: int) -> ThreadEntry | None:
        """The entry of thread_N, or None: a lookup, so asking for each of many threads
        stays linear."""
        return self._threads_by_id.get(thread_id)

    @cached_property
    def _threads_by_id(self) -> dict[int, ThreadEntry]:
        return {t.id: t for t in self.threads or []}

    def symbol_names(self) -> dict[int, str]:
        """function_id -> name (the first entry of an id listed twice)."""
        names: dict[int, str] = {}
        for s in self.symbols:
            names.setdefault(s.function_id, s.name)
        return names

    def module_names(self) -> dict[int, str]:
        return {m.module_id: str(m.name) for m in self.modules}


def read_manifest(process_dir: Path) -> Manifest | None:
    """The session's manifest, or None when it has none. Raises ManifestError when it cannot
    be read or its `threads` cannot be trusted."""
    path = process_dir / MANIFEST
    if not path.exists():
        return None
    return parse_manifest(_load(path), path)


def _load(path: Path) -> dict[str, Any]:
    try:
        with open(open_regular(path), "rb") as f:
            raw = f.read(MANIFEST_MAX_BYTES + 1)
        if len(raw) > MANIFEST_MAX_BYTES:
            raise ManifestError(f"larger than {MANIFEST_MAX_BYTES >> 20} MiB: not a manifest "
                                "ada wrote", path)
        data = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ManifestError(f"unreadable manifest: {e}", path) from e
    if not isinstance(data, dict):
        raise ManifestError(f"expected a JSON object, found {type(data).__name__}", path)
    return data


def parse_manifest(doc: dict[str, Any], path: Path) -> Manifest:
    """The typed view of a manifest's JSON object (see the module's docstring for what is
    refused and what is left out)."""
    problems: list[str] = []
    tool = _dict(doc, "tool", problems).get("name")
    clock_type = _int(doc.get("clock_type"))
    return Manifest(
        path=path, document=doc, tool=tool if isinstance(tool, str) else None,
        threads=_threads(doc.get("threads"), path),
        process=_process(_dict(doc, "process", problems)),
        clock_type=clock_type, clock=_str(doc.get("clock")),
        clock_hot_path=_str(_dict(doc, "clock_source", problems).get("hot_path")),
        realtime_anchor=_realtime_anchor(doc),
        modules=_entries(doc, "modules", _module, problems),
        symbols=_entries(doc, "symbols", _symbol, problems),
        end=_end(doc.get("end")),
        triggers=_entries(doc, "triggers", _trigger, problems),
        windows=_entries(doc, "windows", _window, problems),
        device=_dict(doc, "device", problems), drops=_dict(doc, "drops", problems),
        detail=_dict(doc, "detail", problems), options=_dict(doc, "options", problems),
        hooks=_hooks(doc), hot_path=_dict(doc, "hot_path", problems), problems=problems)


def _hooks(doc: dict[str, Any]) -> dict[str, Any]:
    """How the functions were hooked, in brief (the lists stay in `document`)."""
    engine = _str(doc.get("hook_engine"))
    if engine is None:
        return {}
    out: dict[str, Any] = {"engine": engine}
    why = _str(doc.get("hook_engine_why"))
    if why:
        out["chosen"] = why
    for key, name in (("hook_fallbacks", "by_interceptor_instead"), ("hook_failures", "refused"),
                      ("hook_aliases", "aliases"), ("hook_breakpoints", "by_breakpoint")):
        items = doc.get(key)
        if isinstance(items, list) and items:
            out[name] = len(items)
    paused = doc.get("hook_paused_spawns")
    if isinstance(paused, int) and paused > 0:
        out["paused_spawns"] = paused
    return out


def _threads(threads: Any, path: Path) -> list[ThreadEntry] | None:
    if threads is None:
        return None
    if not isinstance(threads, list):
        raise ManifestError(f"'threads' must be a list, found {type(threads).__name__}", path)
    entries = []
    for i, e in enumerate(threads):
        tid = e.get("id") if isinstance(e, dict) else None
        if not isinstance(tid, int) or isinstance(tid, bool) or not 0 <= tid < 1 << 31:
            raise ManifestError(f"threads[{i}] needs an integer 'id', found {e!r:.60}", path)
        has = e.get("has_detail")
        entries.append(ThreadEntry(
            id=tid, tid=_int(e.get("tid")),
            index_events=_int(e.get("index_events", e.get("event_count"))),
            detail_events=_int(e.get("detail_events")),
            has_detail=has if isinstance(has, bool) else None,
            drops=_count(e.get("drops"))))
    if len({t.id for t in entries}) != len(entries):
        raise ManifestError("thread ids are not unique", path)
    return entries


def _process(p: dict[str, Any]) -> Process:
    children, argv, spawned = p.get("children"), p.get("argv"), p.get("spawned")
    return Process(pid=_int(p.get("pid")), name=_str(p.get("name")), path=_str(p.get("path")),
                   arch=_str(p.get("arch")), os=_str(p.get("os")),
                   platform=_str(p.get("platform")),
                   spawned=spawned if isinstance(spawned, bool) else None,
                   argv=[str(a) for a in argv] if isinstance(argv, list) else None,
                   parent_pid=_int(p.get("parent_pid")), origin=_str(p.get("origin")),
                   children=[c for c in children if isinstance(c, dict)]
                   if isinstance(children, list) else [],
                   children_untraced=_int(p.get("children_untraced")))


def _module(m: dict[str, Any]) -> Module:
    return Module(module_id=_required_int(m, "module_id"), name=_str(m.get("name")),
                  path=_str(m.get("path")), file=_str(m.get("file")),
                  base=_address(m.get("base")) or 0, size=_int(m.get("size")) or 0)


def _symbol(s: dict[str, Any]) -> Symbol:
    fid = _address(s.get("function_id"))
    name = s.get("name")
    if fid is None or not isinstance(name, str):
        raise ValueError("needs a function_id and a name")
    module_id = _int(s.get("module_id"))
    return Symbol(function_id=fid, name=name,
                  module_id=fid >> 32 if module_id is None else module_id,
                  address=_address(s.get("address")))


def _trigger(t: dict[str, Any]) -> Trigger:
    return Trigger(kind=str(t.get("kind")), timestamp_ns=_required_int(t, "timestamp_ns"),
                   details={k: v for k, v in t.items() if k not in ("kind", "timestamp_ns")})


def _window(w: dict[str, Any]) -> Window:
    return Window(start_ns=_required_int(w, "start_ns"), end_ns=_required_int(w, "end_ns"),
                  details={k: v for k, v in w.items() if k not in ("start_ns", "end_ns")})


def _end(e: Any) -> End | None:
    if not isinstance(e, dict):
        return None
    clean, crash = e.get("clean"), e.get("crash")
    return End(clean=clean if isinstance(clean, bool) else None, reason=_str(e.get("reason")),
               crash=crash if isinstance(crash, dict) else None,
               exit_status=_int(e.get("exit_status")),
               undelivered_events=_int(e.get("undelivered_events")),
               undelivered_detail_bytes=_int(e.get("undelivered_detail_bytes")))


def _realtime_anchor(doc: dict[str, Any]) -> tuple[int, int] | None:
    """The first (clock ns, CLOCK_REALTIME ns) pair, when the recording clock is CLOCK_BOOTTIME
    (the one clock a trace viewer can set beside the wall clock)."""
    if doc.get("clock") != CLOCK_NAMES[CLOCK_BOOTTIME]:
        return None
    anchors = doc.get("clock_anchors")
    for a in anchors if isinstance(anchors, list) else []:
        if isinstance(a, dict):
            clock, real = _int(a.get("clock_ns")), _int(a.get("realtime_ns"))
            if clock is not None and real is not None:
                return clock, real
    return None


def _entries(doc: dict[str, Any], key: str, parse: Any, problems: list[str]) -> list[Any]:
    """A list of objects, each parsed; an entry that does not parse is left out and said."""
    items = doc.get(key)
    if items is None:
        return []
    if not isinstance(items, list):
        problems.append(f"'{key}' must be a list, found {type(items).__name__}: not read")
        return []
    out, bad = [], []
    for i, item in enumerate(items):
        try:
            if not isinstance(item, dict):
                raise ValueError(f"found {type(item).__name__}")
            out.append(parse(item))
        except (KeyError, TypeError, ValueError) as e:
            bad.append(f"{key}[{i}] ({e})")
    if bad:
        more = f" and {len(bad) - 3:,} more" if len(bad) > 3 else ""
        problems.append(f"{len(bad):,} entr{'y' if len(bad) == 1 else 'ies'} of '{key}' left "
                        f"out: {', '.join(bad[:3])}{more}")
    return out


def _dict(doc: dict[str, Any], key: str, problems: list[str]) -> dict[str, Any]:
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(f"'{key}' must be an object, found {type(value).__name__}: not read")
        return {}
    return value


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _count(value: Any) -> int:
    """A count, or the sum of a breakdown of counts ({"index": 3, ...}), 0 when not said."""
    if isinstance(value, dict):
        return sum(v for v in value.values() if _int(v) is not None)
    return _int(value) or 0


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _address(value: Any) -> int | None:
    """An integer, or a hex string ("0x...") as ada writes addresses and function ids."""
    if isinstance(value, str):
        try:
            return int(value, 16)
        except ValueError:
            return None
    return _int(value)


def _required_int(entry: dict[str, Any], key: str) -> int:
    value = _address(entry.get(key))
    if value is None:
        raise ValueError(f"needs an integer '{key}'")
    return value
