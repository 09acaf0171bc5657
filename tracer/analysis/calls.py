"""The calls table: every CALL paired with its RETURN, per thread, as numpy columns.

Everything the reading commands show (report, replay, graph) is built on this table, and it is
built without a Python loop per event. The hot path writes a RETURN with its CALL's depth
(agent/ada_hooks.c), so on each depth level of a thread the events alternate CALL, RETURN:
a stable sort by depth pairs them. What does not alternate is where a recording is not
balanced, and each case has a rule:

- a CALL still open when the thread's recording ends: it lasts to the thread's last event
  (flag OPEN);
- a RETURN whose CALL came before the recording started (attached mid-call): a call from the
  thread's first event to that RETURN (flag NO_CALL);
- a CALL left without a RETURN (a longjmp, an exception unwound through it): it ends at the
  first later event at its depth or shallower, the moment it was certainly gone (flag LEFT).

The parent of a call is the innermost call open at its start one level up (a search among the
calls of that level), and self time is its duration minus its children's.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from ada.atf import format as F
from ada.atf.reader import ThreadReader
from ada.atf.session import SessionReader

# flags
OPEN = 1  # no RETURN before the thread's recording ended
NO_CALL = 2  # the CALL came before the recording started
LEFT = 4  # left without a RETURN (longjmp, unwinding)

# The table's columns, as one record would hold them (Calls keeps them as separate arrays:
# building and filtering contiguous columns is several times faster than a record array).
CALL = np.dtype([
    ("thread", "<u4"),       # N of thread_N
    ("function_id", "<u8"),
    ("call_seq", "<i8"),      # index_seq of the CALL (-1: NO_CALL)
    ("return_seq", "<i8"),    # index_seq of the RETURN (-1: OPEN or LEFT)
    ("start_ns", "<u8"),
    ("end_ns", "<u8"),
    ("duration_ns", "<u8"),
    ("self_ns", "<u8"),       # duration minus its children's durations
    ("depth", "<u4"),
    ("parent", "<i8"),        # row of the parent call in the same table (-1: a root)
    ("flags", "<u4"),
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
        if not parts:
            return cls.zeros()
        return cls({name: np.concatenate([p.columns[name] for p in parts])
                    for name in CALL.names})

    def __len__(self) -> int:
        return len(self.columns["thread"])

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


def thread_calls(thread: ThreadReader, thread_number: int | None = None) -> Calls:
    """The calls of one thread, ordered by start (ties: outer first)."""
    return join_threads(list(thread_call_chunks(thread, thread_number)))


CHUNK_EVENTS = 1 << 18


def thread_call_chunks(thread: ThreadReader, thread_number: int | None = None,
                       chunk_events: int = CHUNK_EVENTS) -> Iterator[Calls]:
    """The calls of one thread as tables of about `chunk_events` events each (chunk_bounds)."""
    for a, b in chunk_bounds(thread, chunk_events):
        yield chunk_calls(thread, a, b, thread_number)


def chunk_bounds(thread: ThreadReader, chunk_events: int = CHUNK_EVENTS
                 ) -> list[tuple[int, int]]:
    """[a, b) index_seq ranges of about `chunk_events` events, cut where no call is open
    (after a RETURN at depth 0): each chunk's table is whole (parents, self time, recursion),
    its columns stay small enough to be worked on in the CPU's caches, and chunks can be
    worked on at once. Each cut is looked for just after the chunk's size, in a window that
    grows until it finds one, so the thread is not read twice."""
    ev = thread.index.events
    n = len(ev)
    cuts = [0]
    at = chunk_events
    while at < n:
        window = 4096
        while True:
            part = ev[at:at + window]
            hit = np.flatnonzero((part["call_depth"] == 0) & (part["event_kind"] == F.EVENT_RETURN))
            if len(hit) or at + window >= n:
                break
            window *= 4
        if not len(hit):
            break
        cuts.append(at + int(hit[0]) + 1)
        at = cuts[-1] + chunk_events
    if cuts[-1] < n:
        cuts.append(n)
    return list(zip(cuts[:-1], cuts[1:]))


def chunk_calls(thread: ThreadReader, a: int, b: int, thread_number: int | None = None
                ) -> Calls:
    """The calls of events [a, b) of a thread (a chunk_bounds range)."""
    ev = thread.index.events
    number = thread.id if thread_number is None else thread_number
    return calls_of(ev[a:b], a, number, thread_ends(thread))


def thread_ends(thread: ThreadReader) -> tuple[int, int]:
    """The thread's first and last timestamps (where OPEN and NO_CALL calls end and start)."""
    ts = thread.index.events["timestamp_ns"]
    return int(ts[0]), int(ts[-1])


def calls_of(ev: np.ndarray | dict[str, np.ndarray], offset: int, number: int,
             ends: tuple[int, int]) -> Calls:
    """The calls of events `ev` (index records, or their timestamp_ns, function_id,
    event_kind and call_depth as columns) from index_seq `offset` on, of thread `number`,
    whose first and last timestamps are `ends`."""
    kind = np.ascontiguousarray(ev["event_kind"])
    valid = (kind == F.EVENT_CALL) | (kind == F.EVENT_RETURN)
    if valid.all():
        seq = None  # every event is a CALL or a RETURN: positions are index_seqs
    else:
        seq = np.flatnonzero(valid)
        kind = kind[seq]
    if len(kind) == 0:
        return Calls.zeros()
    depth = _column(ev, "call_depth", seq)
    is_call = kind == F.EVENT_CALL
    levels, counts, order = _by_level(depth)
    balanced = _balanced(is_call, depth, levels, counts, order)
    if balanced is not None:
        return _balanced_calls(ev, seq, offset, number, depth, is_call, *balanced)
    return _unbalanced_calls(ev, seq, offset, number, ends, depth, is_call, order)


def _balanced(is_call: np.ndarray, depth: np.ndarray, levels: np.ndarray, counts: np.ndarray,
              order: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray, np.ndarray] | None:
    """For events that close every call they open (each level goes CALL, RETURN, CALL, ...
    and each call's previous event is its parent's CALL or its previous sibling's RETURN):
    the calls grouped by level as (their positions, their RETURNs' positions, how many are
    on the outermost level, the positions of the parents' CALLs of the others, where each
    run of siblings starts among the others). None for anything else (the general rules
    then apply)."""
    if (counts & 1).any():
        return None
    call_at, return_at = order[0::2], order[1::2]
    if not is_call[call_at].all() or is_call[return_at].any():
        return None
    top = int(counts[0]) // 2  # calls on the outermost level: no parent here
    inner = call_at[top:]
    if len(inner) and inner[0] == 0:
        return None
    before = inner - 1
    first_child = is_call[before]
    d = depth[inner]
    if not np.where(first_child, depth[before] + 1 == d, depth[before] == d).all():
        return None
    # Siblings are consecutive on their level; the first of each names the parent.
    group = np.where(first_child, np.arange(len(inner)), 0)
    np.maximum.accumulate(group, out=group)
    return call_at, return_at, top, before[group], np.flatnonzero(first_child)


def _balanced_calls(ev: np.ndarray, seq: np.ndarray | None, offset: int, number: int,
                    depth: np.ndarray, is_call: np.ndarray, call_at: np.ndarray,
                    return_at: np.ndarray, top: int, parent_at: np.ndarray,
                    siblings: np.ndarray) -> Calls:
    """The calls table of balanced events (_balanced), in start order."""
    row = np.cumsum(is_call, dtype=np.int64)  # a CALL's position -> its row + 1
    n = int(row[-1])
    rows = row[call_at] - 1
    starts = np.flatnonzero(is_call)
    ends = np.empty(n, dtype=np.int64)
    ends[rows] = return_at
    parent = np.empty(n, dtype=np.int64)
    parent[rows[:top]] = -1
    parent[rows[top:]] = row[parent_at] - 1
    if seq is not None:
        starts, ends = seq[starts], seq[ends]
    ts = ev["timestamp_ns"]
    start_ns, end_ns = ts[starts], ts[ends]
    duration = end_ns - start_ns
    function_id = ev["function_id"][starts]
    call_depth = ev["call_depth"][starts]
    starts += offset
    ends += offset
    return Calls({
        "thread": np.full(n, number, dtype=np.uint32),
        "function_id": function_id,
        "call_seq": starts,
        "return_seq": ends,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "duration_ns": duration,
        "self_ns": _self_time_of_siblings(duration, rows[top:], siblings, parent),
        "depth": call_depth,
        "parent": parent,
        "flags": np.zeros(n, dtype=np.uint32),
    })


def _unbalanced_calls(ev: np.ndarray, seq: np.ndarray | None, offset: int, number: int,
                      ends: tuple[int, int], depth: np.ndarray, is_call: np.ndarray,
                      order: np.ndarray) -> Calls:
    """The calls table by the general rules (OPEN, NO_CALL, LEFT; the module docstring)."""
    first_ts, last_ts = ends
    ts = _column(ev, "timestamp_ns", seq)
    fid = _column(ev, "function_id", seq)
    # On each level, in event order: a CALL whose next event on its level is a RETURN is a pair.
    level = depth[order]
    calls_here = is_call[order]
    same_next = level[1:] == level[:-1]
    paired = calls_here[:-1] & same_next & ~calls_here[1:]
    partner = np.full(len(is_call), -1, dtype=np.int64)  # by event position: its RETURN's
    partner[order[:-1][paired]] = order[1:][paired]
    # A RETURN not preceded on its level by a CALL: its CALL came before the recording.
    orphan = ~calls_here
    orphan[1:] &= ~(same_next & calls_here[:-1])
    orphan_at = np.sort(order[orphan])
    orphan_at = orphan_at[np.argsort(depth[orphan_at], kind="stable")]  # outer first

    call_at = np.flatnonzero(is_call)  # every CALL, in start order
    ret_at = partner[call_at]
    unpaired = ret_at < 0
    gone = np.full(len(call_at), -1, dtype=np.int64)
    gone[unpaired] = _first_later_at_or_above(depth, call_at[unpaired])
    def index_seq(positions: np.ndarray) -> np.ndarray:
        return (positions if seq is None else seq[positions]) + offset

    k, n = len(orphan_at), len(orphan_at) + len(call_at)
    end_at = np.where(unpaired, gone, ret_at)
    start_ns = np.concatenate((np.full(k, first_ts, dtype=np.uint64), ts[call_at]))
    end_ns = np.concatenate((ts[orphan_at], np.where(end_at >= 0, ts[np.maximum(end_at, 0)],
                                                     np.uint64(last_ts))))
    out = Calls({
        "thread": np.full(n, number, dtype=np.uint32),
        "function_id": np.concatenate((fid[orphan_at], fid[call_at])),
        "call_seq": np.concatenate((np.full(k, -1, dtype=np.int64),
                                    index_seq(call_at).astype(np.int64))),
        "return_seq": np.concatenate((index_seq(orphan_at).astype(np.int64),
                                      np.where(unpaired, -1, index_seq(np.maximum(ret_at, 0))))),
        "start_ns": start_ns,
        "end_ns": end_ns,
        "duration_ns": end_ns - np.minimum(start_ns, end_ns),
        "self_ns": np.zeros(n, dtype=np.uint64),
        "depth": np.concatenate((depth[orphan_at], depth[call_at])).astype(np.uint32),
        "parent": np.full(n, -1, dtype=np.int64),
        "flags": np.concatenate((np.full(k, NO_CALL, dtype=np.uint32),
                                 np.where(unpaired, np.where(gone >= 0, LEFT, OPEN), 0)
                                 .astype(np.uint32))),
    })
    _link_parents(out)
    return out


def _column(ev: np.ndarray, name: str, seq: np.ndarray | None) -> np.ndarray:
    column = ev[name]
    return np.ascontiguousarray(column) if seq is None else column[seq]


def _by_level(depth: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the distinct depths ascending, how many positions each has, the positions grouped by
    depth in order within each): a stable sort by depth, which numpy does as a radix sort
    for 8- and 16-bit keys."""
    deepest = int(depth.max())
    if deepest < (1 << 16):
        counts = np.bincount(depth)
        levels = np.flatnonzero(counts)
        counts = counts[levels]
    else:
        levels, counts = np.unique(depth, return_counts=True)
    key = depth.astype(np.uint8 if deepest < (1 << 8) else
                       np.uint16 if deepest < (1 << 16) else depth.dtype)
    return levels, counts, np.argsort(key, kind="stable")


def _first_later_at_or_above(depth: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each event position in `at` (in the kept events), the position of the first later
    event whose depth is at most its own, or -1. Done per distinct depth among `at`: these are
    the unbalanced calls, few in a normal recording."""
    out = np.full(len(at), -1, dtype=np.int64)
    for d in np.unique(depth[at]):
        mine = np.flatnonzero(depth[at] == d)
        shallower = np.flatnonzero(depth <= d)
        k = np.searchsorted(shallower, at[mine], side="right")
        found = k < len(shallower)
        out[mine[found]] = shallower[k[found]]
    return out


def _link_parents(calls: Calls) -> None:
    """parent and self_ns, for the calls of one thread in start order (NO_CALL ones first)."""
    n = len(calls)
    calls["parent"] = -1
    if n == 0:
        return
    depth = calls["depth"]
    levels, counts, by_level = _by_level(depth)
    bounds = np.r_[0, np.cumsum(counts)]
    start, end, parent = calls["start_ns"], calls["end_ns"], calls["parent"]
    for i in range(1, len(levels)):
        if levels[i] != levels[i - 1] + 1:
            continue  # nothing recorded one level up (attached deep): no parent to find
        here = by_level[bounds[i]:bounds[i + 1]]
        up = by_level[bounds[i - 1]:bounds[i]]
        k = np.searchsorted(up, here, side="right") - 1  # the last call one level up before it
        ok = k >= 0
        cand = up[np.maximum(k, 0)]
        ok &= end[cand] >= start[here]  # ... still open when this one starts
        parent[here[ok]] = cand[ok]
    calls["self_ns"] = _self_time(parent, calls["duration_ns"])


def _self_time(parent: np.ndarray, duration: np.ndarray) -> np.ndarray:
    """Each call's duration minus its children's (exact while a call's children add up to
    less than 2**53 ns, about 104 days)."""
    # Bin 0 collects the roots (parent -1): one pass without picking the calls with a parent.
    children = np.bincount(parent + 1, weights=duration, minlength=len(parent) + 1)[1:]
    out = duration.astype(np.int64)
    out -= children.astype(np.int64)
    np.maximum(out, 0, out=out)
    return out.view(np.uint64)


def _self_time_of_siblings(duration: np.ndarray, inner: np.ndarray, siblings: np.ndarray,
                           parent: np.ndarray) -> np.ndarray:
    """Self time where a call's children are consecutive: `inner` the rows of the calls with
    a parent, level by level, `siblings` where each parent's run of children starts among
    them. Sums of integers, a run at a time (exact, and faster than _self_time's bincount)."""
    out = duration.astype(np.int64)
    if len(siblings):
        children = np.add.reduceat(duration[inner], siblings)
        out[parent[inner[siblings]]] -= children.astype(np.int64)
        np.maximum(out, 0, out=out)
    return out.view(np.uint64)


def session_calls(session: SessionReader) -> Calls:
    """Every thread's calls, thread after thread; `parent` rows index this whole table."""
    return join_threads([thread_calls(t) for t in session.threads])


def join_threads(parts: list[Calls]) -> Calls:
    """Tables of single threads as one, their `parent` rows renumbered into it."""
    offset = 0
    for calls in parts:
        parent = calls["parent"]
        parent[parent >= 0] += offset
        offset += len(calls)
    return Calls.concatenate(parts)
