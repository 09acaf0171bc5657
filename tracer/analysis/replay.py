"""The call tree in time order (`ada replay`), in uftrace's layout.

A call without children is one line, `name();`, its duration in the DURATION column; a call
with children opens `name() {` and closes `} /* name */` with its duration. Lines of every
thread are merged by time; the TID column says whose they are.

The lines are the walk's edges (calls.py: every call's begin and end in the order its events
were recorded, chunk by chunk), so a thread's lines need no sort; the threads' lines are
merged by time a bounded block at a time; only the text of each line is made one at a time,
and written in large batches.
"""

from __future__ import annotations

from typing import Iterator, TextIO

import numpy as np

from ada.atf import format as F
from ada.atf.reader import ThreadReader

from . import calls as C
from .arguments import Decoder
from .debuginfo import without_parameters
from .report import format_duration
from .selection import label

HEADER = "# DURATION     TID     FUNCTION"
INDENT = "  "
BATCH = 65536

LINE_FIELDS = ("ts", "function_id", "duration_ns", "flags", "thread", "depth", "close",
               "leaf", "args", "value", "caller", "detailed")


def lines_of(step: C.Step, decoder: Decoder | None = None, callers: bool = False
             ) -> dict[str, np.ndarray]:
    """The lines of a step's edges, as columns, in order: a call without (selected) children
    is one line (its begin), any other an opening (its begin) and a closing line (its end).
    With a `decoder` and a detail lane: arguments, return values and callers by name."""
    e = step.edges
    assert e is not None, "the walk's plan must ask for edges"
    keep = ~(e["end"] & e["leaf"])
    rows = np.flatnonzero(keep) if not keep.all() else None
    pick = (lambda a: a) if rows is None else (lambda a: a[rows])  # noqa: E731
    close = pick(e["end"])
    n = len(close)
    out = {"ts": pick(e["ts"]), "function_id": pick(e["function_id"]),
           "duration_ns": pick(e["duration_ns"]), "flags": pick(e["flags"]),
           "thread": np.full(n, step.thread.id, dtype=np.uint32), "depth": pick(e["depth"]),
           "close": close, "leaf": pick(e["leaf"])}
    texts = None
    if decoder is not None and step.thread.detail is not None:
        texts = _detail_texts(out, pick(e["detail"]), pick(e["return_detail"]),
                              step.thread, decoder, callers)
    nothing = np.full(n, None, dtype=object)
    for i, name in enumerate(("args", "value", "caller")):
        out[name] = texts[i] if texts else nothing
    out["detailed"] = (np.not_equal(texts[0], None) | np.not_equal(texts[1], None)
                       | np.not_equal(texts[2], None)) if texts else np.zeros(n, dtype=bool)
    return out


def _detail_texts(lines: dict[str, np.ndarray], detail: np.ndarray, return_detail: np.ndarray,
                  thread: ThreadReader, decoder: Decoder, callers: bool
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per line, from the thread's detail lane where it has the records: the call's
    arguments ("a=3, b=6" from debug information, else the raw registers "0x3, 0x6, 0x0")
    on an opening or single line, its return value ("9") on a closing or single line and,
    with `callers`, where it was called from ("main+0x1c (demo.c:42)")."""
    n = len(detail)
    args = np.full(n, None, dtype=object)
    value = np.full(n, None, dtype=object)
    caller = np.full(n, None, dtype=object)
    lane = thread.detail
    assert lane is not None
    fids, close, leaf = lines["function_id"], lines["close"], lines["leaf"]
    begin_rows = np.flatnonzero(~close & (detail != F.NO_DETAIL_SEQ))
    for r, d in zip(begin_rows.tolist(), detail[begin_rows].tolist()):
        event = lane.get(d)
        if event is not None and event.is_function:
            args[r] = decoder.call_text(int(fids[r]), event)
            if callers:
                caller[r] = decoder.caller(event.lr)
    ret = np.where(close, detail, np.where(leaf, return_detail, F.NO_DETAIL_SEQ))
    ret_rows = np.flatnonzero(ret != F.NO_DETAIL_SEQ)
    for r, d in zip(ret_rows.tolist(), ret[ret_rows].tolist()):
        event = lane.get(d)
        if event is not None and event.is_function:
            value[r] = decoder.return_text(int(fids[r]), event)
    return args, value, caller


def merged_lines(blocks_by_thread: list[Iterator[dict[str, np.ndarray]]]
                 ) -> Iterator[dict[str, np.ndarray]]:
    """The line blocks of several threads (each in time order) merged by time, a bounded
    amount at a time: whatever every thread's pending block has passed is written. At the
    same time, threads keep their own order and come in thread order."""
    if len(blocks_by_thread) == 1:
        yield from (b for b in blocks_by_thread[0] if len(b["ts"]))
        return
    pending: list[dict[str, np.ndarray] | None] = [None] * len(blocks_by_thread)

    def refill(i: int) -> bool:
        for block in blocks_by_thread[i]:
            if len(block["ts"]):
                pending[i] = block
                return True
        pending[i] = None
        return False

    live = [i for i in range(len(blocks_by_thread)) if refill(i)]
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
        order = np.argsort(merged["ts"], kind="stable")  # each thread's order kept
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
