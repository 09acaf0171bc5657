"""The calls table: every CALL paired with the event that ended it, read a chunk at a time.

Everything the reading commands show (report, replay, graph, the exports, SQL) comes from here,
so they agree with each other by construction. A thread is read in chunks of a bounded number
of events (CHUNK_EVENTS); each chunk is paired on its own, on any core (pairing.py), and a walk
in order carries the calls still open from one chunk to the next (`ThreadWalk`): memory depends
on the chunk size, the calls open at once and the functions, never on the number of events,
and the work spreads over the cores even when calls stay open for the whole recording.

Pairing follows the order of the events, never the recorded depth alone (pairing.py). A call's
end is its RETURN, or an EXCEPTION (flag LEFT: unwound by an exception or left by a longjmp),
and where events do not nest:

- a call that a RETURN of an outer call passed over was left without returning (flag LEFT, it
  ends at that RETURN);
- a RETURN of a function that is not open had its CALL before the recording or lost (flags
  NO_CALL and ORPHAN: a call from the thread's first event, in nothing, and in no timeline
  view, since it cannot nest with the calls around it); when a thread may begin inside calls (a
  session not recorded by ada, or with events dropped) such RETURNs are found first, and the
  calls they close are the outermost of the thread from its first event on;
- a call still open when the thread's recording ends lasts to its last event (flag OPEN).

Each step of the walk hands out the calls that ended in its chunk (`Step.done`, a Calls table)
and, for the timeline views, every call's begin and end in the order they happened
(`Step.edges`). A call is numbered (`call`) in the order its CALL was recorded; its `parent` is
the number of the call it was made in. Self time is a call's duration minus its children's,
total time counts a recursion once (`nested`: a call made inside another call of the same
function).
"""

from __future__ import annotations

import functools
import os
import weakref
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Iterable, Iterator, TypeVar

import numpy as np

from ada.atf.format import EVENT_EXCEPTION, NO_DETAIL_SEQ
from ada.atf.reader import ThreadReader
from ada.atf.session import SessionReader

from .pairing import Events, Local, Wants, member, mend, new_lows, pair

T = TypeVar("T")

# flags
OPEN = 1  # no RETURN before the thread's recording ended
NO_CALL = 2  # the CALL came before the recording started (or was lost)
LEFT = 4  # left without a RETURN (longjmp, unwinding)
ORPHAN = 8  # a RETURN of a function that was not open: nests in nothing (with NO_CALL)

CHUNK_EVENTS = 1 << 18

# The table's columns, as one record would hold them (Calls keeps them as separate arrays:
# building and filtering contiguous columns is several times faster than a record array).
CALL = np.dtype([
    ("thread", "<u4"),       # N of thread_N
    ("call", "<i8"),         # the call's number in its thread (in the order of its CALL)
    ("function_id", "<u8"),
    ("call_seq", "<i8"),      # index_seq of the CALL (-1: NO_CALL)
    ("return_seq", "<i8"),    # index_seq of the RETURN or EXCEPTION (-1: OPEN, or inferred)
    ("start_ns", "<u8"),
    ("end_ns", "<u8"),
    ("duration_ns", "<u8"),
    ("self_ns", "<u8"),       # duration minus its children's durations
    ("depth", "<u4"),         # calls it was made in
    ("parent", "<i8"),        # `call` of the call it was made in (-1: none, or not selected)
    ("flags", "<u4"),
    ("nested", "?"),          # made inside another call of the same function
])


class Calls:
    """The calls table: one contiguous array per field of CALL, all of one length.

    `calls["name"]` is a column (writable in place); `calls[rows]` (a mask or row numbers) is
    a new table of those rows; `len(calls)` counts the calls."""

    __slots__ = ("columns",)

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        self.columns = columns

    @classmethod
    def zeros(cls, n: int = 0) -> "Calls":
        return cls({name: np.zeros(n, dtype=CALL.fields[name][0]) for name in CALL.names})

    @classmethod
    def concatenate(cls, parts: list["Calls"]) -> "Calls":
        """Tables as one (of the columns they all have: Plan.columns)."""
        parts = [p for p in parts if len(p)] or parts[:1]
        if not parts:
            return cls.zeros()
        if len(parts) == 1:
            return parts[0]
        names = [n for n in parts[0].columns if all(n in p.columns for p in parts)]
        return cls({name: np.concatenate([p.columns[name] for p in parts]) for name in names})

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return self.columns[key]
        return Calls({name: column[key] for name, column in self.columns.items()})

    def __setitem__(self, name: str, value: Any) -> None:
        self.columns[name][...] = value

    def copy(self) -> "Calls":
        return Calls({name: column.copy() for name, column in self.columns.items()})

    def to_records(self) -> np.ndarray:
        """As one CALL record array (for callers that want rows)."""
        out = np.zeros(len(self), dtype=CALL)
        for name, column in self.columns.items():
            out[name] = column
        return out


# --- what a walk computes ---------------------------------------------------------------------

@dataclass
class Filters:
    """Which calls a reading command shows (selection.CallFilter, resolved to function ids).
    A call is selected when it is within a call of `within` (itself included; all calls when
    None), not within a call of `hide`, less deep than `max_depth`, starts inside
    [start_ns, end_ns] and lasts at least `min_duration_ns`. A hidden call's time is its
    caller's self time."""

    within: np.ndarray | None = None  # function ids (uint64, sorted)
    hide: np.ndarray | None = None
    max_depth: int | None = None
    start_ns: int | None = None
    end_ns: int | None = None
    min_duration_ns: int | None = None


@dataclass
class Plan:
    """What a walk hands out besides the calls that ended: the timeline's edges, the call
    paths (one PathTable per root set: None, every call; else the calls within calls of
    those functions), the `nested` column."""

    filters: Filters = field(default_factory=Filters)
    edges: bool = False
    paths: list[PathTable] = field(default_factory=list)
    nested: bool = False  # Calls.nested: a call made inside one of the same function
    done: bool = True  # Step.done: the timeline views (edges) need no table
    columns: tuple[str, ...] | None = None  # of Step.done (None: all of CALL)
    stats: bool = False  # Step.own: report's figures of the chunk's own calls, by the kernel
    leaves: bool = False  # edges say which calls have no selected children (the replay)
    chunk_events: int = CHUNK_EVENTS

    def wants(self) -> Wants:
        """What each chunk's pairing works out for this plan (in _Chunk's order: within,
        hide, then the roots of each PathTable that has some)."""
        f = self.filters
        marks = [m for m in (f.within, f.hide) if m is not None]
        marks += [t.roots for t in self.paths if t.roots is not None]
        return Wants(marks, f.hide, self.nested, self.stats and not self.filtered,
                     any(t.roots is None for t in self.paths))

    @property
    def filtered(self) -> bool:
        f = self.filters
        return any(x is not None for x in (f.within, f.hide, f.max_depth, f.start_ns, f.end_ns,
                                           f.min_duration_ns))

    @property
    def lookahead(self) -> bool:
        """-t selects calls by their duration: a call that spans chunks needs its end
        known at its begin (the timeline's edges, the numbering of the selected calls)."""
        return self.filters.min_duration_ns is not None


class PathTable:
    """Distinct call paths: a path is a root's function followed by the functions called down
    to a call, numbered as they are first met; path p extends `up[p]` (-1: a root) by
    function `function_id[p]`. Calls, total and self time accumulate per path."""

    def __init__(self, roots: np.ndarray | None = None) -> None:
        self.roots = roots  # None: every call's path; else only within calls of these
        self.index: dict[int, int] = {}  # (up + 1) << 24 | function's number -> path
        self.function_number: dict[int, int] = {}
        self.up: list[int] = []
        self.fids: list[int] = []
        self.calls = np.zeros(0, dtype=np.int64)
        self.total_ns = np.zeros(0, dtype=np.int64)
        self.self_ns = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.up)

    def extend(self, up: np.ndarray, fid: np.ndarray) -> np.ndarray:
        """The paths `up` (-1: none) extended by `fid`, made where new."""
        numbers = np.empty(len(fid), dtype=np.int64)
        distinct, which = np.unique(fid, return_inverse=True)
        for i, f in enumerate(distinct.tolist()):
            numbers[which == i] = self.function_number.setdefault(f, len(self.function_number))
        keys, inverse = np.unique((up + 1) << 24 | numbers, return_inverse=True)
        out = np.empty(len(keys), dtype=np.int64)
        for i, key in enumerate(keys.tolist()):
            p = self.index.get(key)
            if p is None:
                p = self.index[key] = len(self.up)
                self.up.append((key >> 24) - 1)
                self.fids.append(int(fid[np.argmax(inverse == i)]))
            out[i] = p
        return out[inverse]

    def path(self, up: int, fid: int) -> int:
        """Path `up` (-1: none) extended by `fid`, made if new."""
        number = self.function_number.setdefault(fid, len(self.function_number))
        key = (up + 1) << 24 | number
        p = self.index.get(key)
        if p is None:
            p = self.index[key] = len(self.up)
            self.up.append(up)
            self.fids.append(fid)
        return p

    def add(self, paths: np.ndarray, duration: np.ndarray, self_ns: np.ndarray) -> None:
        """Count calls (their paths, durations and self times) into the table."""
        keep = paths >= 0
        n = len(self.up)
        grow = n - len(self.calls)
        if grow > 0:
            self.calls, self.total_ns, self.self_ns = (
                np.concatenate((a, np.zeros(grow, dtype=np.int64)))
                for a in (self.calls, self.total_ns, self.self_ns))
        p = paths[keep]
        self.calls += np.bincount(p, minlength=n)
        self.total_ns += np.rint(np.bincount(p, weights=duration[keep], minlength=n)
                                 ).astype(np.int64)
        self.self_ns += np.rint(np.bincount(p, weights=self_ns[keep], minlength=n)
                                ).astype(np.int64)


@dataclass
class Step:
    """One chunk of a thread, walked: its events (all of them, as read), the selected calls
    that ended in it (`done`), their paths (`paths`: one array per Plan.paths, by row of
    `done`), and, when asked, the edges (Plan.edges). `done` and `paths` are put together on
    first use, so a consumer on another core does that work, not the walk."""

    thread: ThreadReader
    a: int
    b: int
    events: Events
    parts: list[Callable[[], tuple["Calls", list[np.ndarray]]]]
    edges: dict[str, np.ndarray] | None = None
    problems: "Problems | None" = None  # on a thread's last step
    # Plan.stats: the figures of the calls that began and ended in the chunk, by function
    # ((function_ids, int64 (5, functions): calls, total, self, min, max)), made when asked;
    # `done` then holds the others
    own: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None
    # the thread's calls numbered so far (their `call` is below this): numbering across
    # threads needs no `done`
    numbered: int = 0
    _made: tuple["Calls", list[np.ndarray]] | None = None

    def _make(self) -> tuple["Calls", list[np.ndarray]]:
        if self._made is None:
            made = [part() for part in self.parts]
            self._made = (Calls.concatenate([c for c, _ in made]),
                          [np.concatenate([p[i] for _, p in made])
                           for i in range(len(made[0][1]))] if made else [])
        return self._made

    @property
    def done(self) -> "Calls":
        return self._make()[0]

    @property
    def paths(self) -> list[np.ndarray]:
        return self._make()[1]


EDGE_FIELDS = ("ts", "function_id", "depth", "end", "leaf", "duration_ns", "flags", "call",
               "seq", "detail", "return_detail")


@dataclass
class Ahead:
    """What a first walk learns of the calls that span chunks, for the second (Plan.lookahead):
    their durations, by the order of their CALLs (ThreadWalk.next_id)."""

    durations: dict[int, int] = field(default_factory=dict)


@dataclass
class Problems:
    """Events that do not nest, counted per thread (the reading commands say so)."""

    inferred_left: int = 0  # calls a RETURN of an outer call passed over
    orphans: int = 0  # RETURNs of a function that was not open (NO_CALL mid-thread)
    outer: int = 0  # calls the thread began inside (NO_CALL from its first event)

    def __bool__(self) -> bool:
        return bool(self.inferred_left or self.orphans)


# --- the open calls carried between chunks ------------------------------------------------

class OpenCalls:
    """The calls open between chunks, outermost first (index = depth), as growable columns."""

    COLUMNS = {"id": np.int64, "kept_id": np.int64, "fid": np.uint64, "start": np.uint64,
               "call_seq": np.int64, "detail": np.uint32, "parent": np.int64,
               "children": np.int64, "flags": np.uint32,
               "nested": bool, "within": bool, "hidden": bool, "kept": bool}

    def __init__(self, paths: int) -> None:
        self.n = 0
        self.c = {name: np.zeros(16, dtype=t) for name, t in self.COLUMNS.items()}
        self.paths = [np.zeros(16, dtype=np.int64) for _ in range(paths)]

    def __getitem__(self, name: str) -> np.ndarray:
        return self.c[name]

    def push(self, values: dict[str, np.ndarray], paths: list[np.ndarray]) -> None:
        k = len(values["id"])
        need = self.n + k
        if need > len(self.c["id"]):
            size = max(need, 2 * len(self.c["id"]))
            for name, column in self.c.items():
                self.c[name] = np.concatenate((column, np.zeros(size - len(column),
                                                                column.dtype)))
            self.paths = [np.concatenate((p, np.zeros(size - len(p), np.int64)))
                          for p in self.paths]
        for name, value in values.items():
            self.c[name][self.n:need] = value
        for column, value in zip(self.paths, paths):
            column[self.n:need] = value
        self.n = need


# --- one thread -------------------------------------------------------------------------------

class ThreadWalk:
    """The walk of one thread: `advance` takes its chunks' Local pairings in order and hands
    out a Step for each; the calls open between chunks are carried in `open`."""

    def __init__(self, thread: ThreadReader, number: int, plan: Plan,
                 outer: list[tuple[int, int, int, int]] | None = None,
                 ahead: Ahead | None = None, learn: bool = False) -> None:
        self.thread, self.number, self.plan = thread, number, plan
        self.filters = plan.filters
        self.ahead = ahead  # what a first walk learnt (Plan.lookahead)
        self.learn = Ahead() if learn else None  # this is the first walk
        ts = thread.index.timestamps
        self.first_ns = int(ts[0]) if len(ts) else 0
        self.last_ns = int(ts[-1]) if len(ts) else 0
        self.open = OpenCalls(len(plan.paths))
        self.next_id = 0
        self.next_kept = 0
        self.problems = Problems()
        self.held: dict[str, np.ndarray] | None = None  # edges not handed out yet
        if outer:
            self._begin_outer(outer)

    # The calls the thread began inside (found by outer_calls): outermost first, from its
    # first event, numbered before every other.
    def _begin_outer(self, outer: list[tuple[int, int, int, int]]) -> None:
        k = len(outer)
        fid = np.array([o[0] for o in reversed(outer)], dtype=np.uint64)
        depth = np.arange(k, dtype=np.int64)
        ids = np.arange(k, dtype=np.int64)
        f = self.filters
        within = _chain_marks(member(fid, f.within)) if f.within is not None else \
            np.ones(k, dtype=bool)
        hidden = _chain_marks(member(fid, f.hide))
        kept = self._kept(~hidden, within, depth, np.full(k, self.first_ns, np.uint64),
                          ids, None)
        kept_id = np.where(kept, self.next_kept + np.cumsum(kept) - 1, -1)
        self.next_kept += int(kept.sum())
        parent = np.where(np.r_[False, kept[:-1]], np.r_[-1, kept_id[:-1]], -1)
        values = {"id": ids, "kept_id": kept_id, "fid": fid,
                  "start": np.full(k, self.first_ns, np.uint64),
                  "call_seq": np.full(k, -1, np.int64),
                  "detail": np.full(k, NO_DETAIL_SEQ, np.uint32), "parent": parent,
                  "children": np.zeros(k, np.int64),
                  "flags": np.full(k, NO_CALL, np.uint32),
                  "nested": _chain_nested(fid), "within": within, "hidden": hidden,
                  "kept": kept}
        paths = []
        for table in self.plan.paths:
            p = np.full(k, -1, dtype=np.int64)
            marks = np.ones(k, bool) if table.roots is None else \
                _chain_marks(member(fid, table.roots))
            up = -1
            for i in range(k):
                if marks[i]:
                    up = int(table.extend(np.array([up]), fid[i:i + 1])[0])
                    p[i] = up
            paths.append(p)
        self.open.push(values, paths)
        self.next_id = k
        self.problems.outer = k
        if self.plan.edges:
            rows = np.flatnonzero(kept)
            self.held = _edge_rows(
                len(rows), ts=np.full(len(rows), self.first_ns, np.uint64), function_id=fid[rows],
                depth=depth[rows], end=False, call=kept_id[rows], seq=-1)

    def _kept(self, visible: np.ndarray, within: np.ndarray, depth: np.ndarray,
              start: np.ndarray, ids: np.ndarray, duration: np.ndarray | None) -> np.ndarray:
        """Which calls the filters select, from what is known at their begin (`duration`
        where known; for the others the first walk's, if there was one)."""
        f = self.filters
        kept = visible & within
        if f.max_depth is not None:
            kept &= depth < f.max_depth
        if f.start_ns is not None:
            kept &= start >= np.uint64(f.start_ns)
        if f.end_ns is not None:
            kept &= start <= np.uint64(f.end_ns)
        if f.min_duration_ns is not None:
            duration = np.full(len(ids), -1, dtype=np.int64) if duration is None \
                else duration.copy()
            if self.ahead is not None:
                unknown = np.flatnonzero(duration < 0)
                for i in unknown.tolist():
                    duration[i] = self.ahead.durations.get(int(ids[i]), 0)
            kept &= (duration < 0) | (duration >= f.min_duration_ns)
        return kept

    def advance(self, local: Local, events: Events, a: int, b: int, last: bool) -> Step:
        """The Step of the next chunk: `local` its pairing (pair(events))."""
        st = self.open
        base = st.n
        n_lead = -local.lowest
        orphans: tuple[Events, np.ndarray] | None = None
        if local.mismatched or n_lead > base or (n_lead and not np.array_equal(
                st["fid"][base - n_lead:base][::-1], local.ev.fid[local.leading])):
            mended, at, depth = mend(local.ev, st["fid"][:base].tolist())
            orphans = (local.ev.take(at), depth)
            self.problems.inferred_left += int(np.count_nonzero(mended.seq < 0))
            self.problems.orphans += len(at)
            local = pair(mended, self.plan.wants())
        parts = _Chunk(self, local, base)
        done: list[Callable[[], tuple[Calls, list[np.ndarray]]]] = []
        own = parts.own_stats if parts.c.stats is not None else None
        if self.plan.done and own is None:
            done.append(parts.pairs)  # made by whoever uses the step
        leading = parts.leading()
        done.append(lambda: leading)
        if orphans is not None and len(orphans[0]):
            made = self._orphan_calls(*orphans)
            done.append(lambda: made)
        parts.push_trailing()
        edges = [parts.edges()] if self.plan.edges else []
        if last:
            table, paths, ends = self._close_open()
            done.append(lambda: (table, paths))
            edges.append(ends)
        self.next_id += len(local.calls)
        step = Step(self.thread, a, b, events, done,
                    self._timeline(edges, last) if self.plan.edges else None,
                    self.problems if last else None, own, self.next_kept)
        # the chunk's pages of the mapped file go once nothing holds the step
        weakref.finalize(step, self.thread.index.release, a, b)
        return step

    def _timeline(self, parts: list[dict[str, np.ndarray]], last: bool
                  ) -> dict[str, np.ndarray]:
        """The step's edges, after those held from before (the begins of the calls the
        thread began inside; with leaves, a begin that could not tell yet). With
        Plan.leaves, `leaf` marks both edges of each call whose end is the very next edge
        after its begin (a call without selected children: the replay writes it on one
        line, with its duration and how it ended); a begin that is the last edge before the
        thread goes on cannot tell yet: it is held for the next step."""
        if self.held is not None:
            parts.insert(0, self.held)
            self.held = None
        e = _concat_edges(parts)
        if not self.plan.leaves:
            return e
        end, call = e["end"], e["call"]
        n = len(end)
        if n and not last and not end[-1]:
            self.held = {k: v[-1:] for k, v in e.items()}
            e = {k: v[:-1] for k, v in e.items()}
            end, call, n = e["end"], e["call"], n - 1
        pair = np.zeros(n, dtype=bool)
        if n > 1:
            pair[:-1] = ~end[:-1] & end[1:] & (call[:-1] == call[1:])
        begins = np.flatnonzero(pair)
        e["leaf"] = pair.copy()
        e["leaf"][begins + 1] = True
        for name, source in (("duration_ns", "duration_ns"), ("flags", "flags"),
                             ("return_detail", "detail")):
            e[name][begins] = e[source][begins + 1]
        return e

    def _orphan_calls(self, ev: Events, depth: np.ndarray) -> tuple[Calls, list[np.ndarray]]:
        """RETURNs of functions that were not open: calls from the thread's first event,
        numbered after the chunk's calls; they nest in nothing."""
        k = len(ev)
        f = self.filters
        within = member(ev.fid, f.within) if f.within is not None else np.ones(k, bool)
        kept = self._kept(~member(ev.fid, f.hide), within, depth,
                          np.full(k, self.first_ns, np.uint64), np.full(k, -1, np.int64),
                          (ev.ts - np.uint64(self.first_ns)).astype(np.int64))
        rows = np.flatnonzero(kept)
        kept_id = self.next_kept + np.arange(len(rows))
        self.next_kept += len(rows)
        dur = ev.ts[rows] - np.uint64(self.first_ns)
        table = _table(self.number, kept_id, ev.fid[rows], np.full(len(rows), -1),
                       ev.seq[rows], np.full(len(rows), self.first_ns, np.uint64), ev.ts[rows],
                       dur, dur, depth[rows], np.full(len(rows), -1),
                       np.full(len(rows), NO_CALL | ORPHAN, np.uint32), np.zeros(len(rows), bool))
        paths = []  # each a root of its own: it was in no call the walk knows
        for t in self.plan.paths:
            fid = ev.fid[rows]
            mine = np.ones(len(rows), bool) if t.roots is None else member(fid, t.roots)
            p = np.full(len(rows), -1, np.int64)
            if mine.any():
                p[mine] = t.extend(np.full(int(mine.sum()), -1, np.int64), fid[mine])
            paths.append(p)
        return table, paths

    def _close_open(self) -> tuple[Calls, list[np.ndarray], dict[str, np.ndarray]]:
        """The calls still open at the thread's last event: OPEN, innermost first; their
        rows, paths and end edges."""
        st = self.open
        idx = np.arange(st.n - 1, -1, -1)
        end = np.full(st.n, self.last_ns, dtype=np.uint64)
        flags = np.full(st.n, OPEN, dtype=np.uint32)
        table, paths, kept = _complete(self, idx, end, np.full(st.n, -1, np.int64), flags)
        rows = idx[kept]
        ends = _edge_rows(len(rows), ts=end[kept], function_id=st["fid"][rows], depth=rows,
                          end=True, duration_ns=table["duration_ns"],
                          flags=OPEN | st["flags"][rows], call=st["kept_id"][rows], seq=-1)
        st.n = 0
        return table, paths, ends


class _Chunk:
    """The calls of one chunk joined with the open calls it begins inside: what depends on
    them (depth, marks inherited, recursion, selection, numbers, parents, paths) on whole
    columns; the rest came with the pairing (pairing.CallColumns)."""

    def __init__(self, walk: ThreadWalk, local: Local, base: int) -> None:
        self.walk, self.local, self.base = walk, local, base
        st, f, c = walk.open, walk.filters, local.c
        assert c is not None
        self.c = c
        k = len(c.fid)
        self.k = k
        self.first_id = walk.next_id
        self.depth = base + c.slot
        marks = iter(c.marked)
        self.within = self._inherit(next(marks), st["within"]) if f.within is not None \
            else None
        self.hidden = self._inherit(next(marks), st["hidden"]) if f.hide is not None else None
        self.path_marks = [self._inherit(next(marks), st.paths[i][:max(base, 1)] >= 0)
                           for i, t in enumerate(walk.plan.paths) if t.roots is not None]
        self.nested = self._nested()
        visible = ~self.hidden if self.hidden is not None else np.ones(k, dtype=bool)
        self.kept = walk._kept(visible, self.within if self.within is not None else visible,
                               self.depth, c.start, self.ids, c.duration)
        self.first_kept = walk.next_kept
        walk.next_kept += int(np.count_nonzero(self.kept))
        # the number of the call each is in, where that is an open call (read now: the open
        # calls change with the next chunk); the chunk's own parents are made when asked
        self.outer = np.flatnonzero(~c.inner & (self.cidx >= 0)) if base else \
            np.zeros(0, np.int64)
        idx = self.cidx[self.outer]
        self.outer_parent = np.where(st["kept"][idx], st["kept_id"][idx], -1)
        self.paths = [self._paths(t, i) for i, t in enumerate(walk.plan.paths)]
        if base:  # the time of the chunk's shown children of the open calls
            slots = np.flatnonzero(c.outer_children)
            st["children"][base - 1 - slots] += c.outer_children[slots]

    @functools.cached_property
    def ids(self) -> np.ndarray:
        """The calls' numbers in their thread, selected or not (ThreadWalk.next_id)."""
        return self.first_id + np.arange(self.k, dtype=np.int64)

    @functools.cached_property
    def remaining(self) -> np.ndarray:
        """The open calls each call is in: [0, remaining)."""
        return self.base + self.c.before

    @functools.cached_property
    def cidx(self) -> np.ndarray:
        """The open call each is in, for those whose parent is not a call of the chunk (-1:
        none, when the chunk begins a thread); 0 for the others (not used)."""
        return np.where(self.c.inner, 0, self.base + self.local.parent)

    @functools.cached_property
    def all_kept(self) -> bool:
        return bool(self.kept.all())

    @functools.cached_property
    def kept_id(self) -> np.ndarray:
        """Numbers of the selected calls (a call not selected has its predecessor's:
        unused)."""
        if self.all_kept:
            return self.first_kept + np.arange(self.k, dtype=np.int64)
        out = np.cumsum(self.kept)
        out += self.first_kept - 1
        return out

    def parent_of(self, rows: np.ndarray) -> np.ndarray:
        """The number of the call each of `rows` (ranks) was made in, if selected, else
        -1."""
        c = self.c
        up = c.prank[rows]
        if self.all_kept:  # a call's number is first_kept + its rank
            parent = np.where(up >= 0, up + self.first_kept, -1)
        else:
            known = up >= 0
            parent = np.full(len(rows), -1, dtype=np.int64)
            inner_up = up[known]
            parent[known] = np.where(self.kept[inner_up], self.kept_id[inner_up], -1)
        if len(self.outer):
            at = np.searchsorted(self.outer, rows)
            at = np.minimum(at, len(self.outer) - 1)
            outer = self.outer[at] == rows
            parent[outer] = self.outer_parent[at[outer]]
        return parent

    def _inherit(self, in_chunk: np.ndarray, carried: np.ndarray) -> np.ndarray:
        """Marks of the chunk's calls (their own, or of a call of the chunk they are in)
        joined with those of the open calls they are in (inherited: the innermost still
        open says)."""
        if not self.base:
            return in_chunk
        r = self.remaining
        return in_chunk | ((r > 0) & carried[np.maximum(r - 1, 0)])

    def _nested(self) -> np.ndarray | None:
        """Made inside another call of the same function: one of the chunk (pairing), or one
        open before it (the outermost of each function among them)."""
        c = self.c
        if c.nested is None:
            return None
        if not self.base or not self.k:
            return c.nested
        st = self.walk.open
        distinct, first = np.unique(st["fid"][:self.base], return_index=True)
        if c.functions is not None and c.fnum is not None:  # by the chunk's function numbers
            at = np.minimum(np.searchsorted(c.functions, distinct), len(c.functions) - 1)
            hit = c.functions[at] == distinct
            if not hit.any():
                return c.nested
            lowest = np.full(len(c.functions), np.iinfo(np.int64).max)
            lowest[at[hit]] = first[hit]
            return c.nested | (lowest[c.fnum] < self.remaining)
        at = np.minimum(np.searchsorted(distinct, c.fid), len(distinct) - 1)
        return c.nested | ((distinct[at] == c.fid) & (first[at] < self.remaining))

    def own_stats(self) -> tuple[np.ndarray, np.ndarray]:
        """The kernel's figures of the chunk's own calls (pairing.CallColumns.stats), less
        the total time of those inside an open call of the same function from before the
        chunk (the kernel saw only the chunk's)."""
        c = self.c
        assert c.stats is not None and c.fnum is not None and c.functions is not None
        stats = c.stats
        if self.nested is not None and self.nested is not c.nested:
            extra = c.closed[(self.nested & ~c.nested)[c.closed]]
            if len(extra):
                stats = stats.copy()
                np.subtract.at(stats[1], c.fnum[extra], c.duration[extra])
        return c.functions, stats

    def _paths(self, table: PathTable, i: int) -> np.ndarray:
        """Each call's path in `table` (-1: none), a depth level at a time (a call's parent
        first). With root functions, a path begins at a call of one of them that is not
        inside another, and only the calls within have one."""
        st, c = self.walk.open, self.c
        k = self.k
        outer_paths = st.paths[i]
        if table.roots is None and c.path is not None:  # numbered by the kernel
            return self._kernel_paths(table, outer_paths)
        out = np.full(k, -1, dtype=np.int64)
        cidx = np.maximum(self.cidx, 0)
        if table.roots is None:
            marks = np.ones(k, dtype=bool)
            root = np.zeros(k, dtype=bool)
        else:
            marks = self.path_marks[sum(1 for t in self.walk.plan.paths[:i]
                                        if t.roots is not None)]
            own = member(c.fid, table.roots)
            parent_marked = np.where(c.inner, marks[np.maximum(c.prank, 0)],
                                     (self.cidx >= 0) & (outer_paths[cidx] >= 0))
            root = own & ~parent_marked
        slot = c.slot - (int(c.slot.min()) if k else 0)  # by depth: a radix sort when small
        order = np.argsort(slot.astype(np.uint16) if k and int(slot.max()) < (1 << 16)
                           else slot, kind="stable")
        d = self.depth[order]
        cuts = np.flatnonzero(np.r_[True, d[1:] != d[:-1], True])
        for s, e in zip(cuts[:-1], cuts[1:]):
            rows = order[s:e]
            rows = rows[marks[rows]]
            if not len(rows):
                continue
            up = np.where(c.inner[rows], out[np.maximum(c.prank[rows], 0)],
                          np.where(self.cidx[rows] >= 0, outer_paths[cidx[rows]], -1))
            out[rows] = table.extend(np.where(root[rows], -1, up), c.fid[rows])
        return out

    def _kernel_paths(self, table: PathTable, outer_paths: np.ndarray) -> np.ndarray:
        """Each call's path in `table`, from the chunk's own numbering of them (pairing.c):
        each of the chunk's paths, in the order met (the one it extends first), is found or
        made in the table once."""
        c = self.c
        assert c.path is not None and c.path_up is not None and c.path_fid is not None
        ups = c.path_up.tolist()
        fids = c.path_fid.tolist()
        where = np.empty(len(ups), dtype=np.int64)
        for j, (up, fid) in enumerate(zip(ups, fids)):
            if up >= 0:
                up = int(where[up])
            else:  # the path of the open call one slot down, if any
                up = int(outer_paths[self.base + up]) if self.base + up >= 0 else -1
            where[j] = table.path(up, fid)
        return where[c.path]

    def pairs(self) -> tuple[Calls, list[np.ndarray]]:
        """The selected calls that began and ended in the chunk (the columns the plan
        asks for)."""
        c, ev = self.c, self.local.ev
        rows = c.closed
        end_at = c.end_at
        if not self.all_kept:
            sel = self.kept[rows]
            rows, end_at = rows[sel], end_at[sel]
        dur = c.duration[rows]
        made = {
            "thread": lambda: np.full(len(rows), self.walk.number, np.uint32),
            "call": lambda: self.kept_id[rows],
            "function_id": lambda: c.fid[rows],
            "call_seq": lambda: ev.seq[self.local.calls[rows]],
            "return_seq": lambda: ev.seq[end_at],
            "start_ns": lambda: c.start[rows],
            "end_ns": lambda: ev.ts[end_at],
            "duration_ns": lambda: dur.view(np.uint64),
            "self_ns": lambda: np.maximum(dur - c.children[rows], 0).view(np.uint64),
            "depth": lambda: self.depth[rows].astype(np.uint32),
            "parent": lambda: self.parent_of(rows),
            "flags": lambda: (ev.kind[end_at] == EVENT_EXCEPTION).astype(np.uint32)
            * np.uint32(LEFT),
            "nested": lambda: self.nested[rows] if self.nested is not None
            else np.zeros(len(rows), bool)}
        names = self.walk.plan.columns or CALL.names
        return Calls({name: made[name]() for name in names}), [p[rows] for p in self.paths]

    def leading(self) -> tuple[Calls, list[np.ndarray]]:
        """The open calls the chunk's leading closes end (innermost first)."""
        ev = self.local.ev
        lead = self.local.leading
        idx = self.base - 1 - np.arange(len(lead))
        flags = np.where(ev.kind[lead] == EVENT_EXCEPTION, LEFT, 0).astype(np.uint32)
        st = self.walk.open
        self.lead_idx, self.lead_kept_id = idx, st["kept_id"][idx]
        self.lead_flags = flags | st["flags"][idx]
        table, paths, kept = _complete(self.walk, idx, ev.ts[lead], ev.seq[lead], flags)
        self.lead_kept = kept
        self.lead_duration = (ev.ts[lead] - st["start"][idx]).view(np.int64)
        return table, paths

    def push_trailing(self) -> None:
        """Pop the open calls the chunk ended; push the calls it leaves open."""
        st, c = self.walk.open, self.c
        st.n = self.base + self.local.lowest
        tr = c.trailing
        pos = self.local.trailing
        ev = self.local.ev
        k = len(tr)
        st.push({"id": self.ids[tr], "kept_id": self.kept_id[tr], "fid": c.fid[tr],
                 "start": c.start[tr], "call_seq": ev.seq[pos], "detail": ev.detail[pos],
                 "parent": self.parent_of(tr), "children": c.children[tr],
                 "flags": np.zeros(k, np.uint32),
                 "nested": self.nested[tr] if self.nested is not None else False,
                 "within": self.within[tr] if self.within is not None else True,
                 "hidden": self.hidden[tr] if self.hidden is not None else False,
                 "kept": self.kept[tr]},
                [p[tr] for p in self.paths])

    def edges(self) -> dict[str, np.ndarray]:
        """Every selected call's begin and end in the chunk, in the order of its events (an
        end carries the call's duration and how it ended)."""
        local, ev, c = self.local, self.local.ev, self.c
        n = len(ev)
        depth = self.base + local.slot.astype(np.int64)  # a call's stack position, both ends
        flags = (ev.kind == EVENT_EXCEPTION).astype(np.uint32) * np.uint32(LEFT)
        duration = np.zeros(n, dtype=np.int64)
        duration[c.end_at] = c.duration[c.closed]
        call = np.empty(n, dtype=np.int64)
        call[local.calls] = self.kept_id
        call[c.end_at] = self.kept_id[c.closed]
        lead = local.leading
        if len(lead):
            duration[lead] = self.lead_duration
            call[lead] = self.lead_kept_id
            flags[lead] = self.lead_flags
        if self.all_kept and (not len(lead) or self.lead_kept.all()) and not local.other:
            rows = slice(None)
        else:
            keep = np.zeros(n, dtype=bool)
            keep[local.calls] = self.kept
            keep[c.end_at] = self.kept[c.closed]
            if len(lead):
                keep[lead] = self.lead_kept
            rows = np.flatnonzero(keep)
        return _edge_rows(len(depth[rows]), ts=ev.ts[rows], function_id=ev.fid[rows],
                          depth=depth[rows], end=~local.is_call[rows],
                          duration_ns=duration[rows], flags=flags[rows], call=call[rows],
                          seq=ev.seq[rows], detail=ev.detail[rows])


def _complete(walk: ThreadWalk, idx: np.ndarray, end: np.ndarray, ret: np.ndarray,
              flags: np.ndarray) -> tuple[Calls, list[np.ndarray], np.ndarray]:
    """Open calls `idx` (innermost first, each the child of the next) end: their table rows
    (the selected ones), paths, and which were selected."""
    st = walk.open
    k = len(idx)
    dur = (end - st["start"][idx]).view(np.int64)
    hide_own = member(st["fid"][idx], walk.filters.hide)
    kept = st["kept"][idx].copy()
    if walk.filters.min_duration_ns is not None:
        kept &= dur >= walk.filters.min_duration_ns
    # each is the parent of the one before it, and the parent of the outermost stays open:
    # their time is their parent's children's
    if k and idx[-1] > 0:
        np.add.at(st["children"], idx - 1, dur * ~hide_own)
    elif k > 1:
        np.add.at(st["children"], idx[1:], (dur * ~hide_own)[:-1])
    if walk.learn is not None:
        walk.learn.durations.update(zip(st["id"][idx].tolist(), dur.tolist()))
    rows = idx[kept]
    self_ns = np.maximum(dur[kept] - st["children"][rows], 0)
    table = _table(walk.number, st["kept_id"][rows], st["fid"][rows], st["call_seq"][rows],
                   ret[kept], st["start"][rows], end[kept], dur[kept], self_ns, rows,
                   st["parent"][rows], flags[kept] | st["flags"][rows], st["nested"][rows])
    return table, [p[rows] for p in st.paths], kept


def _table(number: int, call: np.ndarray, fid: np.ndarray, call_seq: np.ndarray,
           return_seq: np.ndarray, start: np.ndarray, end: np.ndarray, duration: np.ndarray,
           self_ns: np.ndarray, depth: np.ndarray, parent: np.ndarray, flags: np.ndarray,
           nested: np.ndarray) -> Calls:
    n = len(call)
    return Calls({"thread": np.full(n, number, np.uint32), "call": np.asarray(call, np.int64),
                  "function_id": np.asarray(fid, np.uint64),
                  "call_seq": np.asarray(call_seq, np.int64),
                  "return_seq": np.asarray(return_seq, np.int64),
                  "start_ns": np.asarray(start, np.uint64), "end_ns": np.asarray(end, np.uint64),
                  "duration_ns": np.asarray(duration, np.int64).view(np.uint64),
                  "self_ns": np.asarray(self_ns, np.int64).view(np.uint64),
                  "depth": np.asarray(depth, np.uint32), "parent": np.asarray(parent, np.int64),
                  "flags": np.asarray(flags, np.uint32),
                  "nested": np.full(n, nested, bool) if np.ndim(nested) == 0
                  else np.asarray(nested, bool)})


def _edge_rows(n: int, **columns: Any) -> dict[str, np.ndarray]:
    defaults = {"ts": np.uint64, "function_id": np.uint64, "depth": np.int64, "end": bool,
                "leaf": bool, "duration_ns": np.int64, "flags": np.uint32, "call": np.int64,
                "seq": np.int64, "detail": np.uint32, "return_detail": np.uint32}
    out = {}
    for name in EDGE_FIELDS:
        value = columns.get(name, NO_DETAIL_SEQ if name in ("detail", "return_detail") else 0)
        out[name] = np.full(n, value, dtype=defaults[name]) if np.ndim(value) == 0 \
            else np.asarray(value).astype(defaults[name], copy=False)
    return out


def _concat_edges(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    parts = [p for p in parts if len(p["ts"])] or parts[:1]
    if len(parts) == 1:
        return parts[0]
    return {name: np.concatenate([p[name] for p in parts]) for name in EDGE_FIELDS}


def _chain_marks(own: np.ndarray) -> np.ndarray:
    """Marks down a chain of calls, each inside the one before (inherited)."""
    return np.logical_or.accumulate(own) if len(own) else own


def _chain_nested(fid: np.ndarray) -> np.ndarray:
    seen: set[int] = set()
    out = np.zeros(len(fid), dtype=bool)
    for i, f in enumerate(fid.tolist()):
        out[i] = f in seen
        seen.add(f)
    return out




# --- walking threads --------------------------------------------------------------------------

def chunk_bounds(thread: ThreadReader, chunk_events: int = CHUNK_EVENTS
                 ) -> list[tuple[int, int]]:
    """[a, b) index_seq ranges of `chunk_events` events (the last one shorter)."""
    n = len(thread)
    return [(a, min(a + chunk_events, n)) for a in range(0, n, chunk_events)]


def may_begin_inside_calls(session: SessionReader | None, thread: ThreadReader) -> bool:
    """Whether a thread's first RETURNs may close calls its recording did not see begin:
    never in a session ada recorded without losing events (its hooks see every call they
    trap the return of begin); possible in any other (another writer, drops)."""
    manifest = session.manifest if session is not None else None
    if manifest is None or not manifest.by_ada:
        return True
    entry = manifest.thread(thread.id)
    return entry is None or entry.drops > 0


def outer_calls(thread: ThreadReader, bounds: list[tuple[int, int]],
                pool: ThreadPoolExecutor) -> list[tuple[int, int, int]]:
    """The RETURNs (function_id, index_seq, timestamp, kind) that close calls the thread
    began inside, in order (each closes a call outside the one before): a pass over the
    kinds, chunks on every core, joined in order."""
    def scan(a: int, b: int) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        ev = Events.read(thread, a, b)
        final, lead = new_lows(ev)
        found = (final, ev.fid[lead], ev.seq[lead], ev.ts[lead], ev.kind[lead])
        thread.index.release(a, b)  # the walk reads the chunk again when it comes to it
        return found

    out: list[tuple[int, int, int, int]] = []
    level = 0
    for final, fid, seq, ts, kind in ahead([partial(scan, a, b) for a, b in bounds], pool):
        matched = min(level, len(fid))
        out.extend(zip(fid[matched:].tolist(), seq[matched:].tolist(), ts[matched:].tolist(),
                       kind[matched:].tolist()))
        level = level - matched + final + len(fid)
    return out


def thread_steps(thread: ThreadReader, plan: Plan, pool: ThreadPoolExecutor,
                 number: int | None = None, inside: bool = False, ahead_by: int = 2
                 ) -> Iterator[Step]:
    """The Steps of one thread in order, `ahead_by` chunks paired ahead; `inside`: it may
    begin inside calls (may_begin_inside_calls)."""
    bounds = chunk_bounds(thread, plan.chunk_events)
    walk = _start(thread, plan, pool, inside, number)
    yield from _walk(walk, bounds, pool, ahead_by)


def _start(thread: ThreadReader, plan: Plan, pool: ThreadPoolExecutor, inside: bool,
           number: int | None = None) -> ThreadWalk:
    """The walk of a thread, ready for its first chunk: the calls it began inside found
    first (when it may have), and with Plan.lookahead, a first walk for the ends of the
    calls that span chunks."""
    number = thread.id if number is None else number
    bounds = chunk_bounds(thread, plan.chunk_events)
    outer = outer_calls(thread, bounds, pool) if inside else []
    known = None
    if plan.lookahead:
        first = ThreadWalk(thread, number, Plan(plan.filters, done=False,
                                                chunk_events=plan.chunk_events),
                           outer, learn=True)
        for _ in _walk(first, bounds, pool):
            pass
        known = first.learn
    return ThreadWalk(thread, number, plan, outer, known)


def _walk(walk: ThreadWalk, bounds: list[tuple[int, int]], pool: ThreadPoolExecutor,
          ahead_by: int = 2) -> Iterator[Step]:
    wants = walk.plan.wants()
    jobs = [partial(_read_and_pair, walk.thread, a, b, wants) for a, b in bounds]
    for i, ((a, b), (events, local)) in enumerate(zip(bounds, ahead(jobs, pool, ahead_by))):
        yield walk.advance(local, events, a, b, last=i == len(bounds) - 1)


def _read_and_pair(thread: ThreadReader, a: int, b: int, wants: Wants
                   ) -> tuple[Events, Local]:
    events = Events.read(thread, a, b)
    return events, pair(events, wants)


def session_steps(session: SessionReader, threads: list[ThreadReader], plan: Plan,
                  pool: ThreadPoolExecutor) -> Iterator[Step]:
    """The Steps of the threads, thread after thread, the chunks ahead (of any thread)
    paired by the other cores meanwhile."""
    jobs = [(t, a, b) for t in threads for a, b in chunk_bounds(t, plan.chunk_events)]
    wants = plan.wants()
    work = [partial(_read_and_pair, t, a, b, wants) for t, a, b in jobs]
    walk: ThreadWalk | None = None
    for (t, a, b), (events, local) in zip(jobs, ahead(work, pool, depth=3)):
        if walk is None or walk.thread is not t:
            walk = _start(t, plan, pool, may_begin_inside_calls(session, t))
        yield walk.advance(local, events, a, b, last=b == len(t))


def worker_pool() -> ThreadPoolExecutor:
    """A worker per core: numpy lets go of the GIL for the heavy part of each step."""
    return ThreadPoolExecutor(max_workers=os.cpu_count() or 1)


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


def pipelined(items: Iterable[T], work: Callable[[T], Any], pool: ThreadPoolExecutor,
              depth: int = 2) -> Iterator[Any]:
    """`work` on each item on the pool, the results in order, at most `depth` waiting."""
    pending: deque[Future] = deque()
    for item in items:
        pending.append(pool.submit(work, item))
        while len(pending) > depth:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def made_ahead(steps: Iterable[Step], pool: ThreadPoolExecutor, depth: int = 2
               ) -> Iterator[Step]:
    """The steps, each one's calls and paths (Step.done, Step.paths) made on the pool ahead
    of need: a consumer that works through them on this thread (formatting, adding up
    paths) then waits for none of that work."""
    def make(step: Step) -> Step:
        step._make()
        return step
    return pipelined(steps, make, pool, depth)


# --- whole tables (tests, small sessions) -----------------------------------------------------

def thread_calls(thread: ThreadReader, plan: Plan | None = None,
                 session: SessionReader | None = None) -> Calls:
    """Every call of one thread as one table, in the order of their CALLs (`parent` is then
    a row number: calls are numbered in that order). For a whole session of any size, walk
    it instead (session_steps)."""
    with worker_pool() as pool:
        parts = [s.done for s in thread_steps(thread, plan or Plan(nested=True), pool,
                                              inside=may_begin_inside_calls(session, thread))]
    calls = Calls.concatenate(parts)
    return calls[np.argsort(calls["call"], kind="stable")]


def session_calls(session: SessionReader) -> Calls:
    """Every thread's calls, thread after thread; `parent` rows index this whole table."""
    return join_threads([thread_calls(t, session=session) for t in session.threads])


def join_threads(parts: list[Calls]) -> Calls:
    """Tables of single threads (each numbered from 0) as one, `call` and `parent`
    renumbered into it."""
    offset = 0
    for calls in parts:
        parent = calls["parent"]
        parent[parent >= 0] += offset
        calls["call"] += offset
        offset += len(calls)
    return Calls.concatenate(parts)
