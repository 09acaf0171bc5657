"""How the events of one chunk of a thread pair up on their own, before anything is known of the
calls already open when the chunk begins (calls.py carries those from chunk to chunk).

Pairing follows the order of the events, as a stack does: a CALL opens a call, a RETURN closes
the innermost open one, an EXCEPTION closes it too (the call was left without returning: an
exception unwound it or a longjmp left it; ada writes one when it finds such a call gone). The
depth the hot path recorded is not used: one wrong belief there (a tail call, a longjmp) must not
turn into wrong pairs for everything after it.

Done on whole columns, without a loop per event: the level (calls open after each event, counted
from the chunk's start) is a running sum; the events at one level (their "slot": the stack
position a CALL takes or a close frees) alternate CALL, close, CALL, ... in time, so a stable
sort by slot puts every call next to its close. What stays unpaired is a close of a call opened
before the chunk (slots -1, -2, ...: the "leading" closes) or a call still open at its end (the
"trailing" calls).

Events that do not nest (a RETURN naming another function than the call it would close) are
found here and mended by `mend`, one event at a time, with the calls open before the chunk
known: the calls a RETURN passes over were left without returning (longjmp), and a RETURN of a
function not open at all had its CALL before the recording (or lost).
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ada.atf.format import EVENT_CALL, EVENT_EXCEPTION, EVENT_RETURN, NO_DETAIL_SEQ
from ada.atf.reader import ThreadReader

from .. import native

CLOSES = (EVENT_RETURN, EVENT_EXCEPTION)


@dataclass
class Events:
    """Index events of a thread as columns (views of the mapped file, or of a copy). `seq` is
    each event's index_seq, -1 for an end ada inferred (mend)."""

    seq: np.ndarray  # int64
    ts: np.ndarray  # uint64
    fid: np.ndarray  # uint64
    kind: np.ndarray  # uint32
    detail: np.ndarray  # uint32: detail_seq, NO_DETAIL_SEQ for none
    depth: np.ndarray  # uint32: the depth the hot path recorded (shown by the events view)

    @classmethod
    def read(cls, thread: ThreadReader, a: int, b: int) -> "Events":
        """Events [a, b): views of the mapped records, no copy (ThreadReader's index gives
        the pages back when the events are done with: release())."""
        r = thread.index.view(a, b)
        return cls(np.arange(a, a + len(r), dtype=np.int64), r["timestamp_ns"],
                   r["function_id"], r["event_kind"], r["detail_seq"], r["call_depth"])

    @classmethod
    def of(cls, ts: np.ndarray, fid: np.ndarray, kind: np.ndarray, first_seq: int = 0
           ) -> "Events":
        """Events from columns (tests, synthetic sessions)."""
        n = len(ts)
        return cls(np.arange(first_seq, first_seq + n, dtype=np.int64),
                   np.asarray(ts, np.uint64), np.asarray(fid, np.uint64),
                   np.asarray(kind, np.uint32), np.full(n, NO_DETAIL_SEQ, np.uint32),
                   np.zeros(n, np.uint32))

    def __len__(self) -> int:
        return len(self.ts)

    def take(self, rows: np.ndarray) -> "Events":
        return Events(self.seq[rows], self.ts[rows], self.fid[rows], self.kind[rows],
                      self.detail[rows], self.depth[rows])

    def pairable(self) -> "Events":
        """Only the CALLs, RETURNs and EXCEPTIONs (an event of another kind neither opens
        nor closes a call)."""
        k = self.kind
        ok = (k == EVENT_CALL) | (k == EVENT_RETURN) | (k == EVENT_EXCEPTION)
        return self if ok.all() else self.take(np.flatnonzero(ok))


@dataclass
class CallColumns:
    """Per CALL of a chunk (in order), what its own events say."""

    fid: np.ndarray  # uint64
    start: np.ndarray  # uint64
    slot: np.ndarray  # int64
    inner: np.ndarray  # bool: its parent is a call of the chunk ...
    prank: np.ndarray  # int64: ... this one (its rank among the chunk's calls), else -1
    before: np.ndarray  # int64 (<= 0): the lowest level before it (the open calls it is in
    #                     are those below base + before)
    closed: np.ndarray  # int64: the calls that end in the chunk (ranks) ...
    end_at: np.ndarray  # int64: ... and the positions of their ends
    duration: np.ndarray  # int64: -1 for a call still open at the chunk's end
    children: np.ndarray  # int64: the durations of its shown children that end in the chunk
    outer_children: np.ndarray  # int64, by -slot - 1: the same, for the calls open before it
    shown: np.ndarray  # bool: not a hidden function's (its time is its caller's own)
    marked: list[np.ndarray]  # per set of functions: its own is one, or one it is in (chunk)
    nested: np.ndarray | None  # bool: inside a call of the same function (in the chunk)
    trailing: np.ndarray  # int64: ranks of the calls still open at the end
    fnum: np.ndarray | None = None  # int64: its function's number in `functions` (Wants.nested)
    functions: np.ndarray | None = None  # uint64: the chunk's functions, by number
    stats: np.ndarray | None = None  # int64 (5, functions): Wants.stats, by the kernel
    # Wants.paths, by the kernel: each call's path among the chunk's, and for each of those
    # (in the order met: the path it extends first), that path (< 0: the slot of the call
    # open before the chunk it extends) and its function
    path: np.ndarray | None = None
    path_up: np.ndarray | None = None
    path_fid: np.ndarray | None = None


@dataclass
class Local:
    """A chunk's pairs, as far as its own events tell. Positions index `ev`; the columns of
    the calls (`c`, the CALLs in order) are what does not depend on the calls open before the
    chunk, worked out here, on any core (calls.py joins them with the open calls)."""

    ev: Events  # CALLs and closes only
    is_call: np.ndarray  # bool per event
    level: np.ndarray  # int32 per event: calls open after it, from 0 at the chunk's start
    slot: np.ndarray  # int32 per event: the stack position its call holds, from the start
    calls: np.ndarray  # int64: positions of the CALLs, in order
    end: np.ndarray  # int64 per CALL: the position of the close that ends it, or -1
    parent: np.ndarray  # int64 per CALL: its parent's CALL position; < 0: the slot of the
    #                     call open before the chunk that it is in
    leading: np.ndarray  # positions of closes of calls open before the chunk, in order
    trailing: np.ndarray  # positions of CALLs still open at its end, in order
    lowest: int  # the lowest level reached (<= 0): -len(leading)
    mismatched: int  # pairs whose CALL and close name different functions
    c: CallColumns | None = None
    other: int = 0  # events of another kind among `ev` (passed over; none when from numpy)

    @property
    def final(self) -> int:
        """The level after the last event: trailing calls minus leading closes."""
        return int(self.level[-1]) if len(self.level) else 0


@dataclass
class Wants:
    """What pair() works out besides the pairs: marks by sets of functions (calls.Filters'
    within and hide, call paths' roots), the shown children's time (without `hide`), and
    recursion (`nested`); with `stats` (and no marks or hidden functions), report's figures
    of the calls that begin and end in the chunk, by function (the kernel only)."""

    marks: list[np.ndarray] = field(default_factory=list)
    hide: np.ndarray | None = None
    nested: bool = False
    stats: bool = False  # report's figures of the calls that begin and end in the chunk
    paths: bool = False  # number the chunk's call paths (the kernel only)


def pair(ev: Events, wants: Wants | None = None) -> Local:
    """The pairs of a chunk's events (CALLs and closes only: Events.pairable), and, with
    `wants`, the columns of its calls: by the C kernel (pairing.c, one pass with a stack)
    where it could be compiled, else on whole columns with numpy (pair_columns)."""
    kernel = _kernel()
    if kernel is not None:
        return _pair_with_kernel(kernel, ev, wants or Wants())
    return pair_columns(ev.pairable(), wants)


def new_lows(ev: Events) -> tuple[int, np.ndarray]:
    """The closes of a run of events that take its level (0 at its start, +1 a CALL, -1 a
    close) below the lowest it has been: their positions in `ev`, and the level at its end.
    Run over a thread's chunks in order, these are the closes of the calls it began
    inside (calls.outer_calls). By the kernel where there is one, else with numpy."""
    kernel = _kernel()
    if kernel is not None:
        lead = np.empty(len(ev), np.int64)
        result = np.zeros(2, np.int64)
        kernel.ada_scan(len(ev), ev.kind.ctypes.data, ev.kind.strides[0], lead.ctypes.data,
                        result.ctypes.data)
        return int(result[1]), lead[:int(result[0])].copy()
    step = np.where(ev.kind == EVENT_CALL, 1,
                    np.where((ev.kind == EVENT_RETURN) | (ev.kind == EVENT_EXCEPTION),
                             -1, 0))
    level = np.cumsum(step, dtype=np.int64)
    if not len(level):
        return 0, np.zeros(0, np.int64)
    low = np.minimum.accumulate(level)
    before = np.concatenate(([0], np.minimum(low[:-1], 0)))
    return int(level[-1]), np.flatnonzero(level < before)


def pair_columns(ev: Events, wants: Wants | None = None) -> Local:
    """pair() in numpy. One stable sort by slot: within a slot the events alternate CALL,
    close, in time, so each CALL is right before its close; and the CALLs of a slot come in
    runs of siblings (see _runs), which give the parents and the children's time without a
    search."""
    n = len(ev)
    is_call = ev.kind == EVENT_CALL
    level = np.cumsum(is_call.view(np.int8), dtype=np.int32)
    level *= 2
    level -= np.arange(1, n + 1, dtype=np.int32)  # calls - closes so far
    slot = level - is_call
    calls = np.flatnonzero(is_call)
    k = len(calls)
    if n == 0:
        empty = np.zeros(0, np.int64)
        local = Local(ev, is_call, level, slot, calls, empty, empty, empty, empty, 0, 0)
        if wants is not None:
            local.c = _columns(local, wants, empty, empty, empty, empty)
        return local
    lowest = min(0, int(level.min()))
    key = slot - lowest
    key = key.astype(np.uint16 if int(key.max()) < (1 << 16) else np.uint32)
    order = np.argsort(key, kind="stable")  # a radix sort for 16-bit keys
    sorted_call = is_call[order]
    sorted_key = key[order]
    # a CALL and then a close in the same slot: a pair
    paired = sorted_call[:-1] & ~sorted_call[1:]
    paired &= sorted_key[1:] == sorted_key[:-1]
    at = np.flatnonzero(paired)
    call_at, close_at = order[at], order[at + 1]
    mismatched = int(np.count_nonzero(ev.fid[call_at] != ev.fid[close_at]))
    rank = np.cumsum(is_call, dtype=np.int64)
    rank -= 1  # a CALL's position among the CALLs
    end = np.full(k, -1, dtype=np.int64)
    end[rank[call_at]] = close_at
    closes_paired = np.zeros(n, dtype=bool)
    closes_paired[close_at] = True
    leading = np.flatnonzero(~(is_call | closes_paired))
    by_slot = order[sorted_call]  # the CALLs by slot, in order within each
    parent, runs, run_parent = _runs(by_slot, is_call, closes_paired, slot, rank,
                                     sorted_key[sorted_call].astype(np.int64) + lowest)
    local = Local(ev, is_call, level, slot, calls, end, parent, leading, calls[end < 0],
                  lowest, mismatched)
    if wants is not None:
        local.c = _columns(local, wants, rank, by_slot, runs, run_parent)
    return local


KERNEL_SOURCE = Path(__file__).with_name("pairing.c")


@functools.lru_cache(maxsize=None)
def _declared(lib: Any) -> Any:
    """`lib` with its functions' argument types declared (once per library)."""
    p = ctypes.c_void_p
    lib.ada_pair.argtypes = [ctypes.c_int64, p, p, p, p, p, ctypes.c_int64, ctypes.c_int64] \
        + [p] * 27
    lib.ada_pair.restype = None
    lib.ada_scan.argtypes = [ctypes.c_int64, p, ctypes.c_int64, p, p]
    lib.ada_scan.restype = None
    return lib


def _kernel() -> Any:
    """The C kernel (compiled once per machine: tracer/native.py), unless ADA_PAIRING=numpy
    says not to, or it cannot be had."""
    if os.environ.get("ADA_PAIRING") == "numpy":
        return None
    lib = native.load(KERNEL_SOURCE)
    return None if lib is None else _declared(lib)


def _pair_with_kernel(kernel: Any, ev: Events, wants: Wants) -> Local:
    """pair() by the kernel, on the events as they are (views of the mapped records: read
    once, where they lie; an event of another kind is passed over)."""
    n = len(ev)
    stats_too = wants.stats and not wants.marks and wants.hide is None
    want = (1 if wants.nested or stats_too else 0) | (2 if stats_too else 0) | \
        (4 if wants.paths else 0)
    hidden = np.ascontiguousarray(wants.hide, dtype=np.uint64) if wants.hide is not None \
        else None
    k = n  # at most (only the pages written are touched)
    is_call = np.empty(n, np.uint8)
    i32 = {name: np.empty(n, np.int32) for name in ("level", "slot")}
    i64 = {name: np.empty(k, np.int64) for name in (
        "calls", "slots", "end", "parent", "prank", "before", "duration", "children", "closed",
        "end_at", "stack", "leading")}
    u64 = {name: np.empty(k, np.uint64) for name in ("fids", "starts", "functions")}
    shown, nested = np.empty(k, np.uint8), np.empty(k, np.uint8)
    fnum = np.empty(k if want & 3 else 1, np.int32)
    path = np.empty(k if want & 4 else 1, np.int32)
    path_up = np.empty(k if want & 4 else 1, np.int64)
    path_fid = np.empty(k if want & 4 else 1, np.uint64)
    outer_children = np.empty(n + 1, np.int64)
    stats = np.empty(5 * k if stats_too else 1, np.int64)
    result = np.zeros(9, np.int64)
    strides = np.array([ev.kind.strides[0], ev.fid.strides[0], ev.ts.strides[0]], np.int64)

    def ptr(a: np.ndarray | None) -> Any:
        return None if a is None else a.ctypes.data

    kernel.ada_pair(n, ptr(ev.kind), ptr(ev.fid), ptr(ev.ts), ptr(strides), ptr(hidden),
                    0 if hidden is None else len(hidden), want, ptr(is_call),
                    ptr(i32["level"]), ptr(i32["slot"]), ptr(i64["calls"]), ptr(u64["fids"]),
                    ptr(u64["starts"]), ptr(i64["slots"]), ptr(i64["end"]),
                    ptr(i64["parent"]), ptr(i64["prank"]), ptr(i64["before"]),
                    ptr(i64["duration"]), ptr(i64["children"]), ptr(shown), ptr(nested),
                    ptr(fnum), ptr(i64["closed"]), ptr(i64["end_at"]), ptr(i64["leading"]),
                    ptr(outer_children), ptr(i64["stack"]), ptr(u64["functions"]),
                    ptr(stats), ptr(path), ptr(path_up), ptr(path_fid), ptr(result))
    k, n_lead, open_at_end, lowest, mismatched, n_closed, nf, other, n_paths = (
        int(x) for x in result)
    if k < 0:
        raise MemoryError("pairing a chunk of events")
    calls, end = i64["calls"][:k], i64["end"][:k]
    trailing = i64["stack"][:open_at_end]
    local = Local(ev, is_call.view(bool), i32["level"], i32["slot"], calls, end,
                  i64["parent"][:k], i64["leading"][:n_lead], calls[trailing], lowest,
                  mismatched, other=other)
    fids, prank = u64["fids"][:k], i64["prank"][:k]
    functions = number = table = None
    if want & 3:  # by function_id, as the numpy path numbers them (dense_ids)
        order = np.argsort(u64["functions"][:nf])
        functions = u64["functions"][:nf][order]
        renumber = np.empty(nf, np.int64)
        renumber[order] = np.arange(nf)
        number = renumber[fnum[:k]]
        if stats_too:
            table = stats[:5 * nf].reshape(5, nf)[:, order]
    local.c = CallColumns(
        fids, u64["starts"][:k], i64["slots"][:k], prank >= 0, prank, i64["before"][:k],
        i64["closed"][:n_closed], i64["end_at"][:n_closed], i64["duration"][:k],
        i64["children"][:k], outer_children[:-lowest + 1], shown[:k].view(bool),
        [_open_marks(local, member(fids, ids)) for ids in wants.marks],
        nested[:k].view(bool) if want & 3 else None, trailing, number, functions, table,
        *((path[:k], path_up[:n_paths], path_fid[:n_paths]) if want & 4 else (None,) * 3))
    return local


def _runs(by_slot: np.ndarray, is_call: np.ndarray, closes_paired: np.ndarray,
          slot: np.ndarray, rank: np.ndarray, by_slot_slot: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each CALL's parent (Local.parent, in the order of the CALLs), and the runs of
    siblings: where each begins among `by_slot` (the CALLs grouped by slot, in time order
    within each) and its parent. A call right after a CALL is that call's first child: a
    run begins. One right after the close of a sibling has the sibling's parent (the call
    before it in its slot). One right after a close of a call opened before the chunk, or
    first in the chunk, begins a run in the call open before the chunk one slot down."""
    prev = by_slot - 1
    first = prev < 0
    prev[first] = 0
    after_call = is_call[prev] & ~first
    starts = after_call | first | ~closes_paired[prev] & ~is_call[prev]
    runs = np.flatnonzero(starts)
    run_parent = by_slot_slot[runs] - 1  # the open call one slot down ...
    own = after_call[runs]
    run_parent[own] = by_slot[runs[own]] - 1  # ... or the CALL right before
    which = np.cumsum(starts) - 1
    parent = np.empty(len(by_slot), dtype=np.int64)
    parent[rank[by_slot]] = run_parent[which]
    return parent, runs, run_parent


def _columns(local: Local, wants: Wants, rank: np.ndarray, by_slot: np.ndarray,
             runs: np.ndarray, run_parent: np.ndarray) -> CallColumns:
    ev, calls = local.ev, local.calls
    k = len(calls)
    pc = local.parent
    inner = pc >= 0
    prank = rank[np.maximum(pc, 0)] if k else np.zeros(0, np.int64)
    prank[~inner] = -1
    before = -np.searchsorted(local.leading, calls)  # one level down per leading close
    end = local.end
    closed = np.flatnonzero(end >= 0)
    end_at = end[closed]
    start = ev.ts[calls]
    duration = np.full(k, -1, dtype=np.int64)
    duration[closed] = (ev.ts[end_at] - start[closed]).view(np.int64)
    fid = ev.fid[calls]
    shown = ~member(fid, wants.hide)
    # the time of the shown children that end in the chunk: a run of siblings at a time,
    # to the parent of the run (a call of the chunk, or, by slot, one open before it)
    counted = np.maximum(duration, 0)
    if wants.hide is not None:
        counted *= shown
    children = np.zeros(k, dtype=np.int64)
    outer_children = np.zeros(-local.lowest + 1, dtype=np.int64)
    if len(runs):
        sums = np.add.reduceat(counted[rank[by_slot]], runs)
        to_call = run_parent >= 0
        children[rank[run_parent[to_call]]] = sums[to_call]
        np.add.at(outer_children, -run_parent[~to_call] - 1, sums[~to_call])
    marked = [_open_marks(local, member(fid, ids)) for ids in wants.marks]
    slot = local.slot[calls].astype(np.int64)
    functions, fnum = dense_ids(fid) if wants.nested else (None, None)
    return CallColumns(fid, start, slot, inner, prank, before, closed, end_at, duration,
                       children, outer_children, shown, marked,
                       _nested_in_chunk(local, fid, slot) if wants.nested else None,
                       rank[local.trailing], fnum, functions)


def _open_marks(local: Local, own: np.ndarray) -> np.ndarray:
    """Calls whose own function is marked, or inside a call of the chunk that is."""
    out = own.copy()
    if own.any():
        inc = np.zeros(len(local.is_call), dtype=np.int32)
        inc[local.calls[own]] = 1
        ends = local.end[own]
        inc[ends[ends >= 0]] = -1
        open_before = np.cumsum(inc) - inc
        out |= open_before[local.calls] > 0
    return out


def _nested_in_chunk(local: Local, fid: np.ndarray, slot: np.ndarray) -> np.ndarray:
    """Calls inside a call of the same function that began in the chunk: by function, in
    order, one that began earlier and ends later (a running maximum of the ends). Only a
    function called at more than one depth can be: the others are left out first."""
    k = len(fid)
    out = np.zeros(k, dtype=bool)
    if k < 2:
        return out
    distinct, dense = dense_ids(fid)
    low = np.full(len(distinct), np.iinfo(np.int64).max)
    high = np.full(len(distinct), np.iinfo(np.int64).min)
    np.minimum.at(low, dense, slot)
    np.maximum.at(high, dense, slot)
    cand = np.flatnonzero((low != high)[dense])
    if len(cand) < 2:
        return out
    dense = dense[cand]
    n = len(local.is_call)
    begin = local.calls[cand]
    end = local.end[cand]
    still_open = end < 0
    end[still_open] = 2 * n - begin[still_open]  # ends after all; the outer later
    order = np.argsort(dense.astype(np.uint16 if len(distinct) < (1 << 16) else np.int64),
                       kind="stable")  # by function, then in order: a radix sort
    value = end[order] + dense[order] * (2 * n + 1)
    running = np.maximum.accumulate(value)
    inside = np.zeros(len(cand), dtype=bool)
    inside[1:] = running[:-1] > value[1:]
    out[cand[order]] = inside
    return out


def member(fid: np.ndarray, ids: np.ndarray | None) -> np.ndarray:
    """Which of `fid` are among `ids` (sorted uint64)."""
    if ids is None or len(ids) == 0 or len(fid) == 0:
        return np.zeros(len(fid), dtype=bool)
    at = np.minimum(np.searchsorted(ids, fid), len(ids) - 1)
    return ids[at] == fid



def dense_ids(fid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct function_ids ascending, each one's index among them), without sorting when
    the ids are ada's (module_id << 32 | symbol_index, both counted from 0 among the modules
    and functions selected) and span less than a few times their number: a lookup table
    that size is cheaper than a sort."""
    if len(fid) == 0:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    module = (fid >> np.uint64(32)).astype(np.int64)
    symbol = (fid & np.uint64(0xFFFFFFFF)).astype(np.int64)
    if int(module.max()) < (1 << 16) and int(symbol.max()) < (1 << 22):
        width = int(symbol.max()) + 1
        slot = module * width + symbol
        if int(slot.max()) < 4 * len(fid) + (1 << 16):
            used = np.flatnonzero(np.bincount(slot))
            index = np.full(int(slot.max()) + 1, -1, dtype=np.int64)
            index[used] = np.arange(len(used))
            ids = ((used // width).astype(np.uint64) << np.uint64(32)) | \
                (used % width).astype(np.uint64)
            return ids, index[slot]
    ids, inverse = np.unique(fid, return_inverse=True)
    return ids, inverse.astype(np.int64)


def mend(ev: Events, open_fids: list[int]) -> tuple[Events, np.ndarray, np.ndarray]:
    """Events that nest, from events that do not, given the functions of the calls open
    before them (outermost first): (the events, with an EXCEPTION of seq -1 for each call a
    RETURN passed over (left without returning: a longjmp), at that RETURN's time; the
    positions in `ev` of the closes of calls that were not open (orphans, left out); the
    depth at each orphan). One event at a time: only chunks whose events do not nest come
    here."""
    stack = list(open_fids)
    keep: list[int] = []  # positions in ev, or -1 - (index into `inferred`)
    inferred: list[tuple[int, int]] = []  # (position of the revealing close, function)
    orphans: list[int] = []
    orphan_depth: list[int] = []
    for i, (k, f) in enumerate(zip(ev.kind.tolist(), ev.fid.tolist())):
        if k == EVENT_CALL:
            stack.append(f)
            keep.append(i)
            continue
        if k not in CLOSES:  # neither opens nor closes a call
            keep.append(i)
            continue
        if stack and stack[-1] == f:
            stack.pop()
            keep.append(i)
            continue
        at = len(stack) - 1
        while at >= 0 and stack[at] != f:
            at -= 1
        if at < 0:
            orphans.append(i)
            orphan_depth.append(len(stack))
            continue
        while len(stack) > at + 1:
            keep.append(-1 - len(inferred))
            inferred.append((i, stack.pop()))
        stack.pop()
        keep.append(i)
    rows = np.array(keep, dtype=np.int64)
    out = ev.take(np.maximum(rows, 0))
    fake = np.flatnonzero(rows < 0)
    if len(fake):
        where = np.array([p for p, _ in inferred], dtype=np.int64)
        out.seq[fake] = -1
        out.ts[fake] = ev.ts[where]
        out.fid[fake] = np.array([f for _, f in inferred], dtype=np.uint64)
        out.kind[fake] = EVENT_EXCEPTION
        out.detail[fake] = NO_DETAIL_SEQ
        out.depth[fake] = ev.depth[where]
    return out, np.array(orphans, dtype=np.int64), np.array(orphan_depth, dtype=np.int64)
