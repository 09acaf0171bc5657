"""Parquet (zstd): the events, calls, functions, threads and args views of `ada query`, a file
each, for DuckDB, Spark, Trino, pandas or polars. The events are the index lane as recorded
(the threads and time window of the filters apply); the calls take every filter.

Written by parquet_file.py straight from the numpy columns, a row group of events and one of
calls per step of the walk of a thread (calls.py: a chunk of about 256 K events, and the calls
that ended in it), each chunk read once for both and encoded on another core while the walk
goes on. Names and kinds are dictionaries, so the files carry the text without a string per
row. `call` numbers the calls in the order their CALLs were recorded, thread after thread;
`parent` is the call a call was made in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from ada.atf.format import EVENT_KIND_NAMES, NO_DETAIL_SEQ
from ada.atf.reader import ThreadReader
from ada.atf.session import SessionReader

from ..calls import Calls, LEFT, NO_CALL, OPEN, Plan, Step, pipelined, worker_pool
from .. import tables
from ..arguments import Decoder
from ..pairing import Events
from ..filters import CallFilter
from .parquet_file import (Chunk, Column, ColumnData, Consecutive, Constant, Dictionary,
                           ParquetWriter, Values, encode)

SCHEMAS: dict[str, list[Column]] = {
    "events": [Column("thread", "u32"), Column("tid", "u64"), Column("seq", "u64"),
               Column("timestamp_ns", "u64"), Column("function_id", "u64"),
               Column("name", "str", True), Column("kind", "str", True),
               Column("depth", "u32"), Column("detail_seq", "u32", True)],
    "calls": [Column("call", "u64"), Column("thread", "u32"), Column("tid", "u64"),
              Column("function_id", "u64"), Column("name", "str", True),
              Column("start_ns", "u64"), Column("end_ns", "u64"), Column("duration_ns", "u64"),
              Column("self_ns", "u64"), Column("depth", "u32"), Column("parent", "i64", True),
              Column("call_seq", "i64", True), Column("return_seq", "i64", True),
              Column("open", "bool"), Column("no_call", "bool"), Column("left", "bool")],
    "functions": [Column("function_id", "u64"), Column("name", "str"), Column("symbol", "str"),
                  Column("module", "str", True), Column("address", "str", True)],
    "threads": [Column("thread", "u32"), Column("tid", "u64"), Column("events", "u64"),
                Column("first_ns", "u64"), Column("last_ns", "u64")],
    "args": [Column("thread", "u32"), Column("tid", "u64"), Column("seq", "u64"),
             Column("timestamp_ns", "u64"), Column("function_id", "u64"), Column("name", "str"),
             Column("position", "i32", True), Column("arg", "str", True),
             Column("value", "str", True)],
}
KIND_NAMES = [EVENT_KIND_NAMES[k] for k in range(1, max(EVENT_KIND_NAMES) + 1)]  # kind - 1


def write(session: SessionReader, selection: CallFilter, directory: Path,
          seen: Callable[[Step], None] = lambda step: None,
          decoder: Decoder | None = None) -> int:
    """events.parquet, calls.parquet, functions.parquet, threads.parquet and args.parquet in
    `directory` (made if missing; files of an earlier export replaced); returns how many
    calls were written. `seen` is called with each step of the walk (progress, warnings)."""
    directory.mkdir(parents=True, exist_ok=True)
    threads = selection.threads(session)
    functions = tables.functions(session)
    count = write_big(session, selection, directory, seen, functions)
    _write_small(directory / "functions.parquet", "functions", functions)
    _write_small(directory / "threads.parquet", "threads", tables.threads(threads))
    _write_small(directory / "args.parquet", "args",
                 tables.args(session, threads, decoder or Decoder(session)))
    return count


class Names:
    """function_id -> its row of the functions table, for the dictionary columns."""

    def __init__(self, ids: np.ndarray, names: np.ndarray) -> None:
        self.ids, self.names = ids, names

    def columns(self, fid: np.ndarray) -> tuple[ColumnData, ColumnData]:
        """The function_id and name columns of `fid`: dictionaries of the functions table
        (a name is null where the id is not in it, as in the SQL views' join)."""
        if len(self.ids) == 0:
            return Values(fid), Dictionary(np.zeros(len(fid), dtype=np.uint8), [],
                                           np.zeros(len(fid), dtype=bool))
        row = np.searchsorted(self.ids, fid)
        np.minimum(row, len(self.ids) - 1, out=row)
        known = self.ids[row] == fid
        if known.all():
            return Dictionary(row, self.ids), Dictionary(row, self.names)
        return Values(fid), Dictionary(row, self.names, known)


def write_big(session: SessionReader, selection: CallFilter, directory: Path,
              seen: Callable[[Step], None] = lambda step: None,
              functions: dict[str, np.ndarray] | None = None) -> int:
    """events.parquet and calls.parquet at once, a row group of each per step of the walk:
    a chunk's index records are read once, for both; its row groups are encoded by a worker
    per core and written here in order. Returns the number of calls. `call` and `parent` of
    a thread's calls come after the calls of the threads before it."""
    functions = functions if functions is not None else tables.functions(session)
    names = Names(functions["function_id"], functions["name"])
    offset, thread, rows = 0, None, 0
    with ParquetWriter(str(directory / "events.parquet"), SCHEMAS["events"]) as events_out, \
            ParquetWriter(str(directory / "calls.parquet"), SCHEMAS["calls"]) as calls_out, \
            worker_pool() as pool:
        def numbered(steps: Iterator[Step]) -> Iterator[tuple[Step, int]]:
            nonlocal offset, thread, rows
            for step in steps:
                if step.thread is not thread:
                    thread, offset = step.thread, offset + rows
                rows = step.numbered  # known without making the calls: a worker makes them
                yield step, offset

        def encode_step(item: tuple[Step, int]) -> tuple[Step, list[Chunk], list[Chunk]]:
            step, first = item
            t = step.thread
            lo, hi = tables.event_window(t, selection)
            lo, hi = max(step.a, lo), min(step.b, hi)
            events = _events(t, lo, step.events, lo - step.a, hi - step.a, names) \
                if lo < hi else []
            return step, events, _calls(t, step.done, first, names)

        steps = selection.steps(session, Plan(), pool)
        for step, events, calls in pipelined(numbered(steps), encode_step, pool):
            if events:
                events_out.write(events)
            if calls:
                calls_out.write(calls)
            seen(step)
    return offset + rows


def _events(thread: ThreadReader, first: int, ev: Events, lo: int, hi: int, names: Names
            ) -> list[Chunk]:
    """The row group of events [lo, hi) of a step's events (index_seq `first` on)."""
    n = hi - lo
    fid, name = names.columns(np.ascontiguousarray(ev.fid[lo:hi]))
    kind = ev.kind[lo:hi] - np.uint32(1)  # CALL, RETURN, EXCEPTION: 1, 2, 3
    kind_known = kind < len(KIND_NAMES)
    detail = np.ascontiguousarray(ev.detail[lo:hi])
    data: list[ColumnData] = [
        Constant(thread.id, n), Constant(thread.thread_id, n), Consecutive(first, n),
        Values(np.ascontiguousarray(ev.ts[lo:hi])), fid, name,
        Dictionary(kind, KIND_NAMES, None if kind_known.all() else kind_known),
        Values(np.ascontiguousarray(ev.depth[lo:hi])),
        Values(detail, detail != NO_DETAIL_SEQ)]
    return [encode(c, d) for c, d in zip(SCHEMAS["events"], data)]


def _calls(thread: ThreadReader, calls: Calls, first: int, names: Names) -> list[Chunk]:
    """The row group of a step's calls; `call` and `parent` after `first` others."""
    n = len(calls)
    if not n:
        return []
    fid, name = names.columns(calls["function_id"])
    flags = calls["flags"]
    parent = calls["parent"]
    data: list[ColumnData] = [
        Values(calls["call"] + first), Constant(thread.id, n), Constant(thread.thread_id, n),
        fid, name, Values(calls["start_ns"]), Values(calls["end_ns"]),
        Values(calls["duration_ns"]), Values(calls["self_ns"]), Values(calls["depth"]),
        Values(parent + first, parent >= 0),
        Values(calls["call_seq"], calls["call_seq"] >= 0),
        Values(calls["return_seq"], calls["return_seq"] >= 0),
        Values((flags & OPEN) != 0), Values((flags & NO_CALL) != 0),
        Values((flags & LEFT) != 0)]
    return [encode(c, d) for c, d in zip(SCHEMAS["calls"], data)]


def _write_small(path: Path, view: str, columns: dict[str, np.ndarray]) -> None:
    """A small table (functions, threads, args) as one row group; None is null."""
    schema = SCHEMAS[view]
    data = []
    for column in schema:
        values = columns[column.name]
        if column.optional:
            present = np.array([v is not None for v in values], dtype=bool)
            data.append(Values(np.where(present, values, 0) if values.dtype != object
                               else values, present))
        else:
            data.append(Values(values))
    with ParquetWriter(str(path), schema) as out:
        out.write([encode(c, d) for c, d in zip(schema, data)])
