"""The call tree in time order (`ada replay`), in uftrace's layout.

A call without children is one line, `name();`, its duration in the DURATION column; a call
with children opens `name() {` and closes `} /* name */` with its duration. Lines of every
thread are merged by time; the TID column says whose they are.

The lines' order is computed on whole columns (a lexsort of opening and closing points); only
the text of each line is made one at a time, and written in large batches.
"""

from __future__ import annotations

from typing import TextIO

import numpy as np

from . import calls as C
from .calls import Calls
from .selection import label

HEADER = "# DURATION     TID     FUNCTION"
INDENT = "  "
BATCH = 65536


def line_order(calls: Calls, leaf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, is_close) of every line: a leaf gives one line, any other call an opening and a
    closing one. At the same time a closing line comes before an opening one, deeper closes
    first and shallower opens first."""
    rows = np.arange(len(calls))
    inner = rows[~leaf]
    row = np.concatenate((rows, inner))
    close = np.concatenate((np.zeros(len(rows), dtype=bool), np.ones(len(inner), dtype=bool)))
    ts = np.where(close, calls["end_ns"][row], calls["start_ns"][row]).astype(np.int64)
    depth = calls["depth"][row].astype(np.int64)
    tie = np.where(close, -depth, depth + (1 << 32))
    order = np.lexsort((tie, ts))
    return row[order], close[order]


def write_replay(calls: Calls, tids: dict[int, int], names: dict[int, str],
                 out: TextIO, *, base_depth: int = 0) -> int:
    """Write the lines of `calls` (a calls table, parents valid); returns the lines written."""
    n = len(calls)
    has_child = np.zeros(n, dtype=bool)
    parents = calls["parent"][calls["parent"] >= 0]
    has_child[parents] = True
    row, close = line_order(calls, ~has_child)
    labels = {f: label(names, f) for f in np.unique(calls["function_id"]).tolist()}
    out.write(HEADER + "\n")
    written = 0
    tails: dict[tuple[int, int, int, int, bool, bool], str] = {}
    depth_all = calls["depth"].astype(np.int64) - base_depth
    for a in range(0, len(row), BATCH):
        r, c = row[a:a + BATCH], close[a:a + BATCH]
        fids = calls["function_id"][r].tolist()
        durs = calls["duration_ns"][r].tolist()
        flags = calls["flags"][r].tolist()
        threads = calls["thread"][r].tolist()
        depths = np.maximum(depth_all[r], 0).tolist()
        leaf = (~has_child[r]).tolist()
        lines = []
        for fid, dur, flag, thread, depth, is_close, is_leaf in zip(
                fids, durs, flags, threads, depths, c.tolist(), leaf):
            # Everything after the duration repeats: made once per combination.
            key = (fid, flag, thread, depth, is_close, is_leaf)
            rest = tails.get(key)
            if rest is None:
                rest = tails[key] = _rest(labels[fid], flag, tids.get(thread, thread), depth,
                                          is_close, is_leaf)
                if len(tails) > 1 << 20:
                    tails.clear()
            if is_close or is_leaf:  # format_duration, inline: this loop is the hot one
                if dur < 1000:
                    text = f"{dur} ns"
                elif dur < 1_000_000:
                    text = f"{dur / 1e3:.3f} us"
                elif dur < 1_000_000_000:
                    text = f"{dur / 1e6:.3f} ms"
                else:
                    text = f"{dur / 1e9:.3f}  s"
                lines.append(f"{text:>10}{rest}")
            else:
                lines.append(f"{'':>10}{rest}")
        out.write("\n".join(lines) + "\n")
        written += len(lines)
    return written


def _rest(name: str, flag: int, tid: int, depth: int, is_close: bool, is_leaf: bool) -> str:
    """A line after its DURATION column."""
    pad = INDENT * depth
    if is_close:
        return f" [{tid:>6}] | {pad}}} /* {name} */{_note(flag)}"
    if is_leaf:
        return f" [{tid:>6}] | {pad}{name}();{_note(flag)}"
    return f" [{tid:>6}] | {pad}{name}() {{"


def _note(flags: int) -> str:
    if not flags:
        return ""
    if flags & C.OPEN:
        return "  /* still running at the end */"
    if flags & C.NO_CALL:
        return "  /* called before the recording */"
    return "  /* left without returning */"
