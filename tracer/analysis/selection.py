"""Which calls of a session a reading command shows: threads, -F, -N and a time window.

CallFilter is what report, replay and graph share: the threads it selects, and each thread's
calls chunk by chunk (calls.thread_call_chunks: a chunk holds whole call trees, so the filters
apply chunk by chunk) with the filters applied.

Function names come from the manifest's symbols (SessionReader.symbol_names; a hex function_id
when a session has none).
-D and -t keep the calls less deep than a depth, or at least as long as a duration (a call's
children are deeper and no longer, so whole subtrees go).
`within` (-F) keeps the calls of the named functions and everything they call; `hide` (-N)
drops the named functions' calls and everything they call, and charges their time to the
caller's self time, as if the caller had done the work itself.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import partial
from typing import Callable, Iterator, TypeVar

import numpy as np

from ada.atf.reader import ThreadReader
from ada.atf.session import SessionReader

from ..errors import TracerError
from . import calls as C
from .calls import Calls
from .debuginfo import demangle

T = TypeVar("T")


def module_names(session: SessionReader) -> dict[int, str]:
    """module_id -> module name, from the manifest."""
    out: dict[int, str] = {}
    for m in (session.manifest or {}).get("modules") or []:
        if isinstance(m, dict) and isinstance(m.get("module_id"), int):
            out[m["module_id"]] = str(m.get("name"))
    return out


def process_of(session: SessionReader) -> tuple[int, str]:
    """(pid, process name) from the manifest (the directory's pid_N, if it has none)."""
    process = (session.manifest or {}).get("process") or {}
    pid = process.get("pid")
    if not isinstance(pid, int):
        name = session.path.name
        pid = int(name[4:]) if name.startswith("pid_") and name[4:].isdigit() else 0
    return pid, str(process.get("name") or f"pid {pid}")


def function_names(session: SessionReader) -> dict[int, str]:
    """function_id -> the name people read: the manifest's symbol, C++ names demangled."""
    return {fid: demangle(name) for fid, name in session.symbol_names().items()}


def label(names: dict[int, str], fid: int) -> str:
    return names.get(fid) or f"0x{fid:016x}"


def matching_ids(calls: Calls, names: dict[int, str], patterns: list[str]) -> np.ndarray:
    """The function_ids among `calls` whose name matches any glob of `patterns`."""
    ids = np.unique(calls["function_id"])
    return np.array([f for f in ids.tolist()
                     if any(fnmatchcase(label(names, f), p) for p in patterns)], dtype=np.uint64)


def _spread_down(calls: Calls, marked: np.ndarray) -> np.ndarray:
    """Marks carried from each call to everything it calls (parents come before children)."""
    out = marked.copy()
    depth = calls["depth"].astype(np.int64)
    parent = calls["parent"]
    for d in np.unique(depth):
        rows = np.flatnonzero((depth == d) & (parent >= 0))
        out[rows] |= out[parent[rows]]
    return out


def subset(calls: Calls, keep: np.ndarray) -> Calls:
    """The rows where `keep` is True, their `parent` renumbered (-1 where it is not kept)."""
    rows = np.flatnonzero(keep)
    remap = np.full(len(calls), -1, dtype=np.int64)
    remap[rows] = np.arange(len(rows))
    out = calls[rows]
    out["parent"] = np.where(out["parent"] >= 0, remap[np.maximum(out["parent"], 0)], -1)
    return out


def within(calls: Calls, ids: np.ndarray) -> Calls:
    """-F: the calls of these functions and their descendants."""
    return subset(calls, _spread_down(calls, np.isin(calls["function_id"], ids)))


def hide(calls: Calls, ids: np.ndarray) -> Calls:
    """-N: without these functions' calls and their descendants; their time is the caller's."""
    hidden = _spread_down(calls, np.isin(calls["function_id"], ids))
    top = np.flatnonzero(hidden & (calls["parent"] >= 0))
    top = top[~hidden[calls["parent"][top]]]
    out = calls.copy()
    np.add.at(out["self_ns"], out["parent"][top], out["duration_ns"][top])
    return subset(out, ~hidden)


def in_window(calls: Calls, start_ns: int | None, end_ns: int | None) -> Calls:
    """The calls that start within [start_ns, end_ns]."""
    if start_ns is None and end_ns is None:
        return calls
    keep = np.ones(len(calls), dtype=bool)
    if start_ns is not None:
        keep &= calls["start_ns"] >= start_ns
    if end_ns is not None:
        keep &= calls["start_ns"] <= end_ns
    return subset(calls, keep)


@dataclass
class CallFilter:
    tids: list[int] = field(default_factory=list)  # OS thread ids; empty: every thread
    within: list[str] = field(default_factory=list)  # -F globs
    hide: list[str] = field(default_factory=list)  # -N globs
    start_ns: int | None = None
    end_ns: int | None = None
    max_depth: int | None = None  # -D: only calls less than this deep
    min_duration_ns: int | None = None  # -t: only calls at least this long

    def threads(self, session: SessionReader) -> list[ThreadReader]:
        """The selected threads; TracerError for a tid or an -F that the session lacks."""
        threads = session.threads
        if self.tids:
            threads = [t for t in threads if t.thread_id in set(self.tids)]
            if not threads:
                raise TracerError(f"no thread with tid {', '.join(map(str, self.tids))} in "
                                  f"{session.path}")
        if self.within:
            known = list(function_names(session).values())
            if known and not any(fnmatchcase(n, p) for n in known for p in self.within):
                raise TracerError(f"-F {' '.join(self.within)}: no function of the session "
                                  "matches")
        return threads

    def chunk(self, thread: ThreadReader, a: int, b: int, names: dict[int, str]) -> Calls:
        """The calls of one chunk (calls.chunk_bounds), the filters applied."""
        return self.apply(C.chunk_calls(thread, a, b), names)

    def apply(self, calls: Calls, names: dict[int, str]) -> Calls:
        """The calls of a chunk that pass the filters."""
        if self.hide:
            calls = hide(calls, matching_ids(calls, names, self.hide))
        if self.within:
            calls = within(calls, matching_ids(calls, names, self.within))
        calls = in_window(calls, self.start_ns, self.end_ns)
        if self.max_depth is None and self.min_duration_ns is None:
            return calls
        keep = np.ones(len(calls), dtype=bool)
        if self.max_depth is not None:
            keep &= calls["depth"] < self.max_depth
        if self.min_duration_ns is not None:
            keep &= calls["duration_ns"] >= self.min_duration_ns
        return subset(calls, keep)

    def map(self, session: SessionReader, work: Callable[[Calls], T]
            ) -> list[tuple[ThreadReader, list[T]]]:
        """`work` on every selected chunk's calls, on every core at once (numpy lets go of the
        GIL for the heavy part): each selected thread with its chunks' results, in order."""
        names = function_names(session)
        threads = self.threads(session)
        jobs = [(t, a, b) for t in threads for a, b in C.chunk_bounds(t)]
        out: dict[int, tuple[ThreadReader, list[T]]] = {t.id: (t, []) for t in threads}
        workers = max(1, min(len(jobs), os.cpu_count() or 1))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = pool.map(lambda job: work(self.chunk(*job, names)), jobs)
            for (t, _, _), result in zip(jobs, results):
                out[t.id][1].append(result)
        return list(out.values())

    def each(self, session: SessionReader, work: Callable[[ThreadReader, Calls], T]
             ) -> Iterator[tuple[ThreadReader, int, T]]:
        """(thread, events in the chunk, `work` on the chunk's calls), thread after thread,
        chunk after chunk, the next chunks worked on by other cores meanwhile."""
        names = function_names(session)
        jobs = [(t, a, b) for t in self.threads(session) for a, b in C.chunk_bounds(t)]
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            results = ahead([partial(lambda t, a, b: work(t, self.chunk(t, a, b, names)),
                                     t, a, b) for t, a, b in jobs], pool)
            for (t, a, b), result in zip(jobs, results):
                yield t, b - a, result


def ahead(work: list[Callable[[], T]], pool: ThreadPoolExecutor, depth: int = 2
          ) -> Iterator[T]:
    """The results of `work` in order, at most `depth` of them being made ahead of need."""
    pending: deque[Future] = deque(pool.submit(fn) for fn in work[:depth])
    rest = iter(work[depth:])
    while pending:
        done = pending.popleft()
        following = next(rest, None)
        if following is not None:
            pending.append(pool.submit(following))
        yield done.result()
