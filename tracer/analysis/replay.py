"""The call tree in time order (`ada replay`), in uftrace's layout.

A call without children is one line, `name();`, its duration in the DURATION column; a call
with children opens `name() {` and closes `} /* name */` with its duration. Lines of every
thread are merged by time; the TID column says whose they are.

The lines' order is computed on whole columns (a lexsort of opening and closing points), a
chunk of a thread at a time (calls.thread_call_chunks), and the threads' lines are merged by
time a bounded block at a time; only the text of each line is made one at a time, and written
in large batches.
"""

from __future__ import annotations

from typing import Iterator, TextIO

import numpy as np

from ada.atf import format as F
from ada.atf.reader import ThreadReader

from . import calls as C
from .arguments import Decoder
from .calls import Calls
from .debuginfo import without_parameters
from .report import format_duration
from .selection import label

HEADER = "# DURATION     TID     FUNCTION"
INDENT = "  "
BATCH = 65536


LINE_FIELDS = ("ts", "tie", "function_id", "duration_ns", "flags", "thread", "depth", "close",
               "leaf", "args", "value", "caller", "detailed")


def detail_texts(calls: Calls, thread: ThreadReader, decoder: Decoder,
                 callers: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per call, from the thread's detail lane where it has the records: its arguments
    ("a=3, b=6" from debug information, else the raw registers "0x3, 0x6, 0x0"), its return
    value ("9") and, with `callers`, where it was called from ("main+0x1c (demo.c:42)");
    None where there is no record (arguments.py decodes them)."""
    args = np.full(len(calls), None, dtype=object)
    value = np.full(len(calls), None, dtype=object)
    caller = np.full(len(calls), None, dtype=object)
    detail = thread.detail
    if detail is None or len(calls) == 0:
        return args, value, caller
    links = thread.index.events["detail_seq"]
    fids = calls["function_id"]
    for column, seqs in ((args, calls["call_seq"]), (value, calls["return_seq"])):
        have = np.flatnonzero(seqs >= 0)
        dseq = links[seqs[have]]
        linked = dseq != F.NO_DETAIL_SEQ
        for row, d in zip(have[linked].tolist(), dseq[linked].tolist()):
            event = detail.get(d)
            if event is None or not event.is_function:
                continue
            fid = int(fids[row])
            if column is args:
                column[row] = decoder.call_text(fid, event)
                if callers:
                    caller[row] = decoder.caller(event.lr)
            else:
                column[row] = decoder.return_text(fid, event)
    return args, value, caller


def lines_of(calls: Calls, details: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
             ) -> dict[str, np.ndarray]:
    """The lines of a calls table (parents valid) as columns, in order: a call without
    children gives one line, any other an opening and a closing one. At the same time a
    closing line comes before an opening one, deeper closes first and shallower opens first."""
    n = len(calls)
    leaf = np.ones(n, dtype=bool)
    leaf[calls["parent"][calls["parent"] >= 0]] = False
    rows = np.arange(n)
    inner = rows[~leaf]
    row = np.concatenate((rows, inner))
    close = np.concatenate((np.zeros(n, dtype=bool), np.ones(len(inner), dtype=bool)))
    ts = np.where(close, calls["end_ns"][row], calls["start_ns"][row]).astype(np.int64)
    depth = calls["depth"][row].astype(np.int64)
    tie = np.where(close, -depth, depth + (1 << 32))
    order = np.lexsort((tie, ts))
    row, close = row[order], close[order]
    return {"ts": ts[order], "tie": tie[order], "function_id": calls["function_id"][row],
            "duration_ns": calls["duration_ns"][row], "flags": calls["flags"][row],
            "thread": calls["thread"][row], "depth": depth[order], "close": close,
            "leaf": leaf[row],
            **{name: details[i][row] if details else np.full(len(row), None, dtype=object)
               for i, name in enumerate(("args", "value", "caller"))},
            "detailed": np.not_equal(details[0][row], None) | np.not_equal(details[1][row], None)
            | np.not_equal(details[2][row], None) if details else np.zeros(len(row), dtype=bool)}


def merged_lines(blocks_by_thread: list[Iterator[dict[str, np.ndarray]]]
                 ) -> Iterator[dict[str, np.ndarray]]:
    """The line blocks of several threads (each in time order) merged by time, a bounded
    amount at a time: whatever every thread's pending block has passed is written."""
    pending: list[dict[str, np.ndarray] | None] = [None] * len(blocks_by_thread)
    live = list(range(len(blocks_by_thread)))

    def refill(i: int) -> bool:
        for block in blocks_by_thread[i]:
            if len(block["ts"]):
                pending[i] = block
                return True
        pending[i] = None
        return False

    live = [i for i in live if refill(i)]
    while live:
        horizon = min(int(pending[i]["ts"][-1]) for i in live)  # type: ignore[index]
        parts = []
        for i in live:
            block = pending[i]
            assert block is not None
            cut = int(np.searchsorted(block["ts"], horizon, side="right"))
            parts.append({k: v[:cut] for k, v in block.items()})
            pending[i] = {k: v[cut:] for k, v in block.items()}
        merged = {k: np.concatenate([p[k] for p in parts]) for k in LINE_FIELDS}
        order = np.lexsort((merged["tie"], merged["ts"]))  # stable: thread order on ties
        yield {k: v[order] for k, v in merged.items()}
        live = [i for i in live if len(pending[i]["ts"]) or refill(i)]  # type: ignore[index]


def write_replay(blocks: Iterator[dict[str, np.ndarray]], tids: dict[int, int],
                 names: dict[int, str], out: TextIO, *, relative: bool = False) -> int:
    """Write line blocks (lines_of, merged_lines); returns the lines written. `relative`:
    indent from the depth of the first line (-F shows calls from deep in the tree)."""
    labels: dict[int, str] = {}
    base_depth: int | None = None if relative else 0
    out.write(HEADER + "\n")
    written = 0
    tails: dict[tuple[int, int, int, int, bool, bool], str] = {}
    for block in blocks:
        if base_depth is None and len(block["depth"]):
            base_depth = int(block["depth"][0])
        for a in range(0, len(block["ts"]), BATCH):
            lines = _format(block, slice(a, a + BATCH), tails, labels, names, tids,
                            base_depth or 0)
            out.write("\n".join(lines) + "\n")
            written += len(lines)
    return written


def _format(block: dict[str, np.ndarray], part: slice, tails: dict, labels: dict[int, str],
            names: dict[int, str], tids: dict[int, int], base_depth: int) -> list[str]:
    columns = (block["function_id"][part].tolist(), block["duration_ns"][part].tolist(),
               block["flags"][part].tolist(), block["thread"][part].tolist(),
               np.maximum(block["depth"][part] - base_depth, 0).tolist(),
               block["close"][part].tolist(), block["leaf"][part].tolist())
    if block["detailed"][part].any():
        return _format_detailed(columns, block["args"][part].tolist(),
                                block["value"][part].tolist(), block["caller"][part].tolist(),
                                labels, names, tids)
    lines = []
    for fid, dur, flag, thread, depth, is_close, is_leaf in zip(*columns):
        # Everything after the duration repeats: made once per combination.
        key = (fid, flag, thread, depth, is_close, is_leaf)
        rest = tails.get(key)
        if rest is None:
            if fid not in labels:
                labels[fid] = label(names, fid)
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
    return lines


def _format_detailed(columns: tuple, args_of: list, values_of: list, callers_of: list,
                     labels: dict[int, str], names: dict[int, str],
                     tids: dict[int, int]) -> list[str]:
    """Lines some of which carry arguments, a return value or a caller (the detail lane)."""
    lines = []
    for (fid, dur, flag, thread, depth, is_close, is_leaf), args, value, caller in zip(
            zip(*columns), args_of, values_of, callers_of):
        if fid not in labels:
            labels[fid] = label(names, fid)
        rest = _rest(labels[fid], flag, tids.get(thread, thread), depth, is_close, is_leaf,
                     args, value, caller)
        lines.append(f"{format_duration(dur) if is_close or is_leaf else '':>10}{rest}")
    return lines


def _rest(name: str, flag: int, tid: int, depth: int, is_close: bool, is_leaf: bool,
          args: str | None = None, value: str | None = None, caller: str | None = None) -> str:
    """A line after its DURATION column; `args`, `value` and `caller` from the detail lane,
    as uftrace shows arguments and return values."""
    pad = INDENT * depth
    name = without_parameters(name)  # C++: the arguments follow, as uftrace shows them
    returned = f" = {value}" if value is not None else ""
    if is_close:
        return f" [{tid:>6}] | {pad}}}{returned}; /* {name} */{_note(flag)}" if returned \
            else f" [{tid:>6}] | {pad}}} /* {name} */{_note(flag)}"
    call = f"{name}({args or ''})"
    source = f"  /* from {caller} */" if caller else ""
    if is_leaf:
        return f" [{tid:>6}] | {pad}{call}{returned};{_note(flag)}{source}"
    return f" [{tid:>6}] | {pad}{call} {{{source}"


def _note(flags: int) -> str:
    if not flags:
        return ""
    if flags & C.OPEN:
        return "  /* still running at the end */"
    if flags & C.NO_CALL:
        return "  /* called before the recording */"
    return "  /* left without returning */"
