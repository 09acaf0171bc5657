"""The session's small tables as numpy columns (functions, threads, the decoded arguments) and
the time window of the events: what sql.py shows as views and exports/parquet.py writes as
files, made in one place so the two agree.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ada.atf.format import DETAIL_FUNCTION_CALL
from ada.atf.reader import ThreadReader
from ada.atf.session import SessionReader

from .arguments import Decoder
from ..symbols.names import demangle
from .filters import CallFilter, function_names, label, module_names

# view -> (what it holds, its columns); the columns are checked against the views by a test.
VIEWS: dict[str, tuple[str, list[str]]] = {
    "events": ("every index event of every thread",
               ["thread", "tid", "seq", "timestamp_ns", "function_id", "name", "kind", "depth",
                "detail_seq"]),
    "calls": ("every CALL paired with its RETURN (the calls table `ada report` counts)",
              ["call", "thread", "tid", "function_id", "name", "start_ns", "end_ns",
               "duration_ns", "self_ns", "depth", "parent", "call_seq", "return_seq",
               "open", "no_call", "left"]),
    "functions": ("every hooked function of the manifest (name demangled; symbol as linked)",
                  ["function_id", "name", "symbol", "module", "address"]),
    "threads": ("every thread", ["thread", "tid", "events", "first_ns", "last_ns"]),
    "args": ("the arguments (position 1...) and return values (arg 'return') the detail lane "
             "recorded, named and decoded by debug information (raw registers without it)",
             ["thread", "tid", "seq", "timestamp_ns", "function_id", "name", "position", "arg",
              "value"]),
}


def functions(session: SessionReader) -> dict[str, np.ndarray]:
    """Every function of the manifest's symbols, by function_id ascending (the first entry of
    an id that appears twice)."""
    modules = module_names(session)
    rows: dict[int, tuple[str, str | None, int | None]] = {}
    for s in session.manifest.symbols if session.manifest is not None else []:
        rows.setdefault(s.function_id, (s.name, modules.get(s.module_id), s.address))
    ids = sorted(rows)

    def text(value: Any) -> Any:
        return None if value is None else value if isinstance(value, str) else f"0x{value:x}"
    return {"function_id": np.array(ids, dtype=np.uint64),
            "name": np.array([demangle(rows[f][0]) for f in ids], dtype=object),
            "symbol": np.array([rows[f][0] for f in ids], dtype=object),
            "module": np.array([text(rows[f][1]) for f in ids], dtype=object),
            "address": np.array([text(rows[f][2]) for f in ids], dtype=object)}


def threads(selected: list[ThreadReader]) -> dict[str, np.ndarray]:
    ranges = [t.index.time_range() or (0, 0) for t in selected]
    return {"thread": np.array([t.id for t in selected], dtype=np.uint32),
            "tid": np.array([t.thread_id for t in selected], dtype=np.uint64),
            "events": np.array([len(t) for t in selected], dtype=np.uint64),
            "first_ns": np.array([r[0] for r in ranges], dtype=np.uint64),
            "last_ns": np.array([r[1] for r in ranges], dtype=np.uint64)}


def event_window(thread: ThreadReader, selection: CallFilter) -> tuple[int, int]:
    """[a, b): the index_seqs of a thread's events within the selection's time window."""
    ev = thread.index.events
    ts = ev["timestamp_ns"]
    a = 0 if selection.start_ns is None else int(np.searchsorted(ts, selection.start_ns, "left"))
    b = len(ev) if selection.end_ns is None else int(np.searchsorted(ts, selection.end_ns,
                                                                       "right"))
    return a, max(a, b)


def args(session: SessionReader, selected: list[ThreadReader], decoder: Decoder | None
         ) -> dict[str, np.ndarray]:
    """A row per argument and per return value of every function record of the detail lanes,
    decoded (the detail lane is sparse: decoded one record at a time). Empty without a
    decoder."""
    rows: dict[str, list] = {name: [] for name in VIEWS["args"][1]}
    names = function_names(session)
    for t in selected if decoder is not None else []:
        if t.detail is None:
            continue
        for event in t.detail:
            if not event.is_function:
                continue
            fid = event.function_id
            if event.event_type == DETAIL_FUNCTION_CALL:
                values = list(enumerate(decoder.call_values(fid, event)[0], start=1))
            else:
                value = decoder.return_text(fid, event)
                values = [] if value is None else [(None, ("return", value))]
            for position, (arg, text) in values:
                for key, v in (("thread", t.id), ("tid", t.thread_id),
                               ("seq", event.index_seq), ("timestamp_ns", event.timestamp_ns),
                               ("function_id", fid), ("name", label(names, fid)),
                               ("position", position), ("arg", arg), ("value", text)):
                    rows[key].append(v)
    types = {"thread": np.uint32, "tid": np.uint64, "seq": np.uint64,
             "timestamp_ns": np.uint64, "function_id": np.uint64}
    return {k: np.array(v, dtype=types.get(k, object)) for k, v in rows.items()}
