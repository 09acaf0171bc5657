"""Parquet (zstd): the events, calls, functions, threads and args views of `ada query`, a file
each, for DuckDB, Spark, Trino, pandas or polars. The events are the index lane as recorded
(the threads and time window of the filters apply); the calls take every filter.

Written by parquet_file.py straight from the numpy columns, a row group of events and one of
calls per chunk of a thread (calls.chunk_bounds, about 256 K events), each chunk read once
for both and encoded on another core while the next is made. Names and kinds are
dictionaries, so the files carry the text without a string per row.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np

from ada.atf import format as F
from ada.atf.reader import ThreadReader
from ada.atf.session import SessionReader

from .. import calls as C
from .. import tables
from ..arguments import Decoder
from ..selection import CallFilter, ahead, function_names
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
KIND_NAMES = [F.EVENT_KIND_NAMES[k] for k in range(1, max(F.EVENT_KIND_NAMES) + 1)]  # kind - 1


def write(session: SessionReader, selection: CallFilter, directory: Path,
          progress: Callable[[int], None] = lambda n: None,
          decoder: Decoder | None = None) -> int:
    """events.parquet, calls.parquet, functions.parquet, threads.parquet and args.parquet in
    `directory` (made if missing; files of an earlier export replaced); returns how many
    calls were written."""
    directory.mkdir(parents=True, exist_ok=True)
    threads = selection.threads(session)
    functions = tables.functions(session)
    names = Names(functions["function_id"], functions["name"])
    count = _write_big(session, threads, selection, directory, names, progress)
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


def _write_big(session: SessionReader, threads: list[ThreadReader], selection: CallFilter,
               directory: Path, names: Names, progress: Callable[[int], None]) -> int:
    """events.parquet and calls.parquet at once, a row group of each per chunk of a thread
    (calls.chunk_bounds): a chunk's index records are read once, for both, on one of a
    worker per core, and its row groups written here in order. Returns the number of calls.
    `call` and `parent` number the calls of the whole table: they are encoded once the
    chunks before have been counted, by the same workers."""
    labels = function_names(session)
    jobs = [(t, a, b) for t in threads for a, b in C.chunk_bounds(t)]
    work = [partial(_chunk, t, a, b, tables.event_window(t, selection), C.thread_ends(t),
                    selection, names, labels) for t, a, b in jobs]
    offset = 0
    workers = os.cpu_count() or 1
    waiting: deque[tuple[list[Chunk], list[Chunk | None], Future | None]] = deque()
    with ParquetWriter(str(directory / "events.parquet"), SCHEMAS["events"]) as events_out, \
            ParquetWriter(str(directory / "calls.parquet"), SCHEMAS["calls"]) as calls_out, \
            ThreadPoolExecutor(max_workers=workers) as pool:

        def write_ready(wait: bool) -> None:
            """The row groups whose numbering is done (all of them, if `wait`), in order."""
            while waiting and (wait or waiting[0][2] is None or waiting[0][2].done()):
                events, calls, numbering = waiting.popleft()
                if events:
                    events_out.write(events)
                if numbering is not None:
                    calls[0], calls[10] = numbering.result()
                    calls_out.write(calls)

        for (_, a, b), (events, rows, parent, calls) in zip(
                jobs, ahead(work, pool, depth=workers + 1)):
            numbering = pool.submit(_numbering, offset, rows, parent) if rows else None
            waiting.append((events, calls, numbering))
            offset += rows
            write_ready(False)
            progress(b - a)
        write_ready(True)
    return offset


def _numbering(offset: int, rows: int, parent: np.ndarray) -> tuple[Chunk, Chunk]:
    """The `call` and `parent` columns of a chunk of calls that come after `offset` others."""
    schema = SCHEMAS["calls"]
    return (encode(schema[0], Consecutive(offset, rows)),
            encode(schema[10], Values(parent + offset, parent >= 0)))


def _chunk(thread: ThreadReader, a: int, b: int, window: tuple[int, int],
           ends: tuple[int, int], selection: CallFilter, names: Names,
           labels: dict[int, str]) -> tuple[list[Chunk], int, np.ndarray, list[Chunk | None]]:
    """Events [a, b) of a thread: the row group of those in `window` (the events), and the
    selection's calls among them (all but `call` and `parent` encoded; their count and
    parents)."""
    columns = _split(thread.index.events[a:b])
    calls = selection.apply(C.calls_of(columns, a, thread.id, ends), labels)
    lo, hi = max(a, window[0]), min(b, window[1])
    events = _events(thread, lo, {k: v[lo - a:hi - a] for k, v in columns.items()}, names) \
        if lo < hi else []
    return events, len(calls), calls["parent"], _calls(thread, calls, names)


def _events(thread: ThreadReader, first: int, ev: dict[str, np.ndarray], names: Names
            ) -> list[Chunk]:
    """The row group of events `ev` (columns, from index_seq `first` on)."""
    n = len(ev["timestamp_ns"])
    fid, name = names.columns(ev["function_id"])
    kind = ev["event_kind"] - np.uint32(1)  # CALL, RETURN, EXCEPTION: 1, 2, 3
    kind_known = kind < len(KIND_NAMES)
    detail = ev["detail_seq"]
    data: list[ColumnData] = [
        Constant(thread.id, n), Constant(thread.thread_id, n), Consecutive(first, n),
        Values(ev["timestamp_ns"]), fid, name,
        Dictionary(kind, KIND_NAMES, None if kind_known.all() else kind_known),
        Values(ev["call_depth"]), Values(detail, detail != F.NO_DETAIL_SEQ)]
    return [encode(c, d) for c, d in zip(SCHEMAS["events"], data)]


SPLIT_ROWS = 1 << 14


def _split(records: np.ndarray) -> dict[str, np.ndarray]:
    """The fields of index records as contiguous columns, copied a cache-sized piece at a time
    (field by field over the whole array would read all of it from memory once per field)."""
    fields = ("timestamp_ns", "function_id", "event_kind", "call_depth", "detail_seq")
    out = {f: np.empty(len(records), dtype=records.dtype.fields[f][0]) for f in fields}
    for at in range(0, len(records), SPLIT_ROWS):
        piece = records[at:at + SPLIT_ROWS]
        for f in fields:
            out[f][at:at + SPLIT_ROWS] = piece[f]
    return out


def _calls(thread: ThreadReader, calls: C.Calls, names: Names) -> list[Chunk | None]:
    n = len(calls)
    if not n:
        return []
    fid, name = names.columns(calls["function_id"])
    flags = calls["flags"]
    data: list[ColumnData | None] = [
        None, Constant(thread.id, n), Constant(thread.thread_id, n), fid, name,
        Values(calls["start_ns"]), Values(calls["end_ns"]), Values(calls["duration_ns"]),
        Values(calls["self_ns"]), Values(calls["depth"]), None,
        Values(calls["call_seq"], calls["call_seq"] >= 0),
        Values(calls["return_seq"], calls["return_seq"] >= 0),
        Values((flags & C.OPEN) != 0), Values((flags & C.NO_CALL) != 0),
        Values((flags & C.LEFT) != 0)]
    return [None if d is None else encode(c, d) for c, d in zip(SCHEMAS["calls"], data)]


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
