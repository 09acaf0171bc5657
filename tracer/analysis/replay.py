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

from ada.atf.format import NO_DETAIL_SEQ
from ada.atf.reader import ThreadReader

from .calls import LEFT, NO_CALL, OPEN, Step
from .arguments import Decoder
from ..symbols.names import without_parameters
from .pairing import dense_ids
from .report import format_duration
from .filters import label

HEADER = "# DURATION     TID     FUNCTION"
INDENT = "  "
BATCH = 65536

LINE_FIELDS = ("ts", "function_id", "duration_ns", "flags", "thread", "depth", "close",
               "leaf", "args", "value", "caller", "detailed")


def lines_of(step: Step, decoder: Decoder | None = None, callers: bool = False
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
    begin_rows = np.flatnonzero(~close & (detail != NO_DETAIL_SEQ))
    for r, d in zip(begin_rows.tolist(), detail[begin_rows].tolist()):
        event = lane.get(d)
        if event is not None and event.is_function:
            args[r] = decoder.call_text(int(fids[r]), event)
            if callers:
                caller[r] = decoder.caller(event.lr)
    ret = np.where(close, detail, np.where(leaf, return_detail, NO_DETAIL_SEQ))
    ret_rows = np.flatnonzero(ret != NO_DETAIL_SEQ)
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
    base_depth: int | None = None if relative else 0
    out.write(HEADER + "\n")
    out.flush()
    raw = getattr(out, "buffer", None)  # lines are made as bytes, on whole columns
    written = 0
    tails = _Tails(names, tids)
    for block in blocks:
        if base_depth is None and len(block["depth"]):
            base_depth = int(block["depth"][0])
        for a in range(0, len(block["ts"]), BATCH):
            part = slice(a, a + BATCH)
            data = None if block["detailed"][part].any() else \
                _render(block, part, tails, base_depth or 0)
            if data is None:  # with the detail lane's texts: a line at a time
                data = ("\n".join(_format(block, part, tails, base_depth or 0)) + "\n"
                        ).encode()
            if raw is not None:
                raw.write(data)
            else:
                out.write(data.decode())
            written += len(block["ts"][part])
    if raw is not None:
        raw.flush()
    return written


class _Tails:
    """The text after the DURATION column of each distinct (function, note, kind of line,
    depth, thread) met, made once (with its newline, as bytes: `objects`, by row). A
    line's row is found through a table indexed by those numbers packed together (rebuilt
    wider when a depth or thread number outgrows it)."""

    TABLE_LIMIT = 1 << 25

    def __init__(self, names: dict[int, str], tids: dict[int, int]) -> None:
        self.names, self.tids = names, tids
        self.numbers: dict[int, int] = {}  # function_id -> its number here
        self.fids: list[int] = []
        self.row_of: dict[tuple[int, int, int, int, int], int] = {}
        self.texts: list[bytes] = []
        self.objects = np.zeros(0, dtype=object)  # texts with their newline, by row
        self.bits = (0, 0)  # depth and thread bits of the table's index
        self.table = np.zeros(0, dtype=np.int64)

    def rows(self, block: dict[str, np.ndarray], part: slice, base_depth: int
             ) -> np.ndarray | None:
        """Each line's row; None when the table would be too large (then a line at a
        time)."""
        fid = block["function_id"][part]
        distinct, which = dense_ids(fid)
        numbers = np.array([self.numbers.setdefault(f, len(self.numbers))
                            for f in distinct.tolist()], dtype=np.int64)
        if len(self.fids) < len(self.numbers):
            self.fids += sorted(self.numbers, key=self.numbers.get)[len(self.fids):]
        depth = np.maximum(block["depth"][part] - base_depth, 0).astype(np.int64)
        thread = block["thread"][part].astype(np.int64)
        close, leaf = block["close"][part], block["leaf"][part]
        kind = close.astype(np.int64) + 2 * leaf
        flags = block["flags"][part] * (close | leaf)  # only a line with a duration has a note
        note = np.where(flags & OPEN, 1, np.where(flags & NO_CALL, 2,
                                                    np.where(flags & LEFT, 3, 0)))
        head = (numbers[which] * 4 + note) * 3 + kind
        need = (int(depth.max()).bit_length() + 1 if len(depth) else 0,
                int(thread.max()).bit_length() if len(thread) else 0)
        if need[0] > self.bits[0] or need[1] > self.bits[1] or \
                len(self.table) < (12 * len(self.numbers)) << sum(self.bits):
            bits = (max(need[0], self.bits[0]), max(need[1], self.bits[1]))
            if (12 * len(self.numbers) * 2) << sum(bits) > self.TABLE_LIMIT:
                return None
            self._rebuild(bits)
        d_bits, t_bits = self.bits
        index = (head << (d_bits + t_bits)) | (depth << t_bits) | thread
        rows = self.table[index]
        missing = np.flatnonzero(rows < 0)
        if len(missing):
            for i in np.unique(index[missing]).tolist():
                self.table[i] = self._row(i >> (d_bits + t_bits), (i >> t_bits) & (
                    (1 << d_bits) - 1), i & ((1 << t_bits) - 1))
            self._pack()
            rows = self.table[index]
        return rows

    def _rebuild(self, bits: tuple[int, int]) -> None:
        self.bits = bits
        d_bits, t_bits = bits
        size = (12 * max(2 * len(self.numbers), 64)) << (d_bits + t_bits)
        self.table = np.full(size, -1, dtype=np.int64)
        for (head, depth, thread), row in self.row_of.items():
            if head < size >> (d_bits + t_bits):
                self.table[(head << (d_bits + t_bits)) | (depth << t_bits) | thread] = row

    def _row(self, head: int, depth: int, thread: int) -> int:
        row = self.row_of.get((head, depth, thread))
        if row is None:
            number, rest = divmod(head, 12)
            note, kind = divmod(rest, 3)
            flag = (0, OPEN, NO_CALL, LEFT)[note]
            text = _rest(label(self.names, self.fids[number]), flag,
                         self.tids.get(thread, thread), depth, kind == 1, kind == 2)
            row = self.row_of[(head, depth, thread)] = len(self.texts)
            self.texts.append(text.encode())
        return row

    def _pack(self) -> None:
        grown = np.empty(len(self.texts), dtype=object)
        grown[:len(self.objects)] = self.objects
        grown[len(self.objects):] = [t + b"\n" for t in self.texts[len(self.objects):]]
        self.objects = grown


def _render(block: dict[str, np.ndarray], part: slice, tails: _Tails, base_depth: int
            ) -> bytes | None:
    """Lines without the detail lane's texts as bytes, on whole columns: the DURATION
    column as 10-byte strings from one array (_durations), the rest the rows of `tails`,
    joined in one go. None when some line is not for this (a duration of 1,000 s or more,
    or one on a rounding tie: format_duration then says)."""
    rows = tails.rows(block, part, base_depth)
    if rows is None:
        return None
    close, leaf = block["close"][part], block["leaf"][part]
    field = _durations(block["duration_ns"][part], close | leaf)
    if field is None:
        return None
    pieces = np.empty(2 * len(rows), dtype=object)
    pieces[0::2] = field.view("S10").ravel().tolist()  # (never a NUL: nothing stripped)
    pieces[1::2] = tails.objects[rows]
    return b"".join(pieces.tolist())


_DIGITS = np.array([list(f"{i:03d}".encode()) for i in range(1000)], dtype=np.uint8)
_NUMBERS = np.array([list(f"{i:>3d}".encode()) for i in range(1000)] + [list(b"   ")],
                    dtype=np.uint8)  # right-aligned; the last row blank
_SUFFIX = np.frombuffer(b" ns us ms  s", dtype=np.uint8).reshape(4, 3)


def _durations(ns: np.ndarray, shown: np.ndarray) -> np.ndarray | None:
    """The DURATION column (10 bytes a line, right-aligned) as format_duration writes it:
    "86 ns", "578.555 us", "2.075 ms", "1.250  s"; blank where not shown. Three digits at a
    time from tables, the numbers by integer arithmetic (no branch per line)."""
    d = ns.astype(np.int64)
    unit = (d >= 1000).astype(np.int64) + (d >= 10**6) + (d >= 10**9)
    scale = np.array([1, 1, 1000, 10**6])[unit]  # ms and s are rounded to three decimals
    half = scale // 2
    tie = shown & (half > 0) & (d % scale == half)
    value = (d + half) // scale  # in ns, us, us or ms: three decimals from here on
    whole = value // 1000
    if (shown & (unit >= 1) & (whole >= 1000)).any() or tie.any():
        return None
    is_ns = unit == 0
    out = np.empty((len(d), 10), dtype=np.uint8)
    # columns 0-2: the whole number (blank in ns); 3: the point; 4-6: the fraction, or the
    # ns right-aligned; 7-9: the unit
    out[:, 0:3] = _NUMBERS[np.where(is_ns, 1000, whole)]
    out[:, 3] = np.where(is_ns, ord(" "), ord("."))
    fraction = value - whole * 1000
    out[:, 4:7] = np.where(is_ns[:, None], _NUMBERS[value % 1000], _DIGITS[fraction])
    out[:, 7:] = _SUFFIX[unit]
    out[~shown] = ord(" ")
    return out


def _format(block: dict[str, np.ndarray], part: slice, tails: _Tails, base_depth: int
            ) -> list[str]:
    """The lines of a part of a block, a line at a time (the detail lane's texts)."""
    columns = (block["function_id"][part].tolist(), block["duration_ns"][part].tolist(),
               block["flags"][part].tolist(), block["thread"][part].tolist(),
               np.maximum(block["depth"][part] - base_depth, 0).tolist(),
               block["close"][part].tolist(), block["leaf"][part].tolist())
    return _format_detailed(columns, block["args"][part].tolist(),
                            block["value"][part].tolist(), block["caller"][part].tolist(),
                            {}, tails.names, tails.tids)


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
    if flags & OPEN:
        return "  /* still running at the end */"
    if flags & NO_CALL:
        return "  /* called before the recording */"
    return "  /* left without returning */"
