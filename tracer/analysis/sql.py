"""SQL over a session: DuckDB (embedded, no server) on column views of the memory-mapped lanes.

The index lane registers without a copy: each thread's columns are numpy views of its mapped
file, which DuckDB scans in place. The calls table is built (calls.py, every core) only when a
query names `calls`; it is the one table `ada report` counts, so both agree. The small tables
come from tables.py, as do the Parquet export's (exports/parquet.py), so the files and the
views hold the same rows (a test compares them).
"""

from __future__ import annotations

import re

import duckdb
import numpy as np

from ada.atf import format as F
from ada.atf.session import SessionReader

from . import calls as C
from . import tables
from .arguments import Decoder
from .selection import CallFilter


def names_view(sql: str, view: str) -> bool:
    """Whether a query reads a view (its name as a word outside quotes, roughly)."""
    return re.search(rf"\b{view}\b", re.sub(r"'[^']*'", "", sql), re.IGNORECASE) is not None


def connect(session: SessionReader, selection: CallFilter | None = None,
            with_calls: bool = True, events_window: bool = False,
            decoder: Decoder | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the views of tables.VIEWS. `selection` picks the threads (and the
    calls, with every filter of CallFilter); `events_window` also keeps only the events in
    its time window. Without `with_calls` the calls view is there, empty; without a
    `decoder`, so is the args view."""
    selection = selection or CallFilter()
    threads = selection.threads(session)
    con = duckdb.connect()
    _functions(con, session)
    con.register("_threads", tables.threads(threads))
    con.execute("CREATE VIEW threads AS SELECT * FROM _threads")
    parts = []
    for t in threads:
        a, b = tables.event_window(t, selection) if events_window else (0, len(t))
        ev = t.index.events[a:b]
        con.register(f"_index_{t.id}", {
            "seq": np.arange(a, b, dtype=np.uint32 if b < (1 << 32) else np.uint64),
            "timestamp_ns": ev["timestamp_ns"], "function_id": ev["function_id"],
            "event_kind": ev["event_kind"], "call_depth": ev["call_depth"],
            "detail_seq": ev["detail_seq"]})
        parts.append(f"SELECT {t.id}::UINTEGER AS thread, {t.thread_id}::UBIGINT AS tid, seq, "
                     f"timestamp_ns, function_id, event_kind, call_depth, detail_seq "
                     f"FROM _index_{t.id}")
    con.execute("CREATE TYPE event_kind AS ENUM ("
                f"{', '.join(repr(n) for n in F.EVENT_KIND_NAMES.values())})")
    kinds = " ".join(f"WHEN {k} THEN '{n}'::event_kind" for k, n in F.EVENT_KIND_NAMES.items())
    union = " UNION ALL ".join(parts) if parts else (
        "SELECT NULL::UINTEGER AS thread, NULL::UBIGINT AS tid, NULL::UBIGINT AS seq, "
        "NULL::UBIGINT AS timestamp_ns, NULL::UBIGINT AS function_id, NULL::UINTEGER AS "
        "event_kind, NULL::UINTEGER AS call_depth, NULL::UINTEGER AS detail_seq WHERE false")
    con.execute(f"""CREATE VIEW events AS SELECT e.thread, e.tid, e.seq, e.timestamp_ns,
        e.function_id, f.name, CASE e.event_kind {kinds} END AS kind, e.call_depth AS depth,
        NULLIF(e.detail_seq, {F.NO_DETAIL_SEQ}) AS detail_seq
        FROM ({union}) e LEFT JOIN functions f ON f.function_id = e.function_id""")
    _calls(con, session, selection if with_calls else None)
    con.register("_args", tables.args(session, threads, decoder))
    con.execute("CREATE VIEW args AS SELECT thread, tid, seq, timestamp_ns, function_id, "
                "name::VARCHAR AS name, "
                "position::INTEGER AS position, arg::VARCHAR AS arg, value::VARCHAR AS value "
                "FROM _args")
    return con


def _functions(con: duckdb.DuckDBPyConnection, session: SessionReader) -> None:
    rows = tables.functions(session)
    con.register("_function_rows", rows)
    # Names as an ENUM: a join hands events and calls a small integer per row instead of a
    # string, which DuckDB's group-bys take as it is; the value still reads, compares and
    # prints as text.
    con.register("_names", {"name": np.array(sorted(set(rows["name"])), dtype=object)})
    con.execute("CREATE TYPE function_name AS ENUM (SELECT name FROM _names)")
    con.execute("CREATE TABLE _functions AS SELECT function_id, name::function_name AS name, "
                "symbol, module, address FROM _function_rows")
    con.unregister("_names")
    con.unregister("_function_rows")
    con.execute("CREATE VIEW functions AS SELECT * FROM _functions")


def _calls(con: duckdb.DuckDBPyConnection, session: SessionReader,
           selection: CallFilter | None) -> None:
    """The calls table of the selection, chunk by chunk into a DuckDB table (cheaper than
    joining the chunks into one numpy table first: memory is touched once); `call` numbers
    the calls, `parent` is one of them."""
    types = {"<u4": "UINTEGER", "<u8": "UBIGINT", "<i8": "BIGINT"}
    columns = ["call UBIGINT", "tid UBIGINT"] + [
        f"{name} {types[C.CALL.fields[name][0].str]}" for name in C.CALL.names]
    con.execute(f"CREATE TABLE _calls ({', '.join(columns)})")
    offset = 0
    chunks = selection.each(session, lambda t, calls: calls) if selection else iter(())
    for thread, _, calls in chunks:
        if not len(calls):
            continue
        chunk = dict(calls.columns)
        parent = chunk["parent"]
        chunk["parent"] = np.where(parent >= 0, parent + offset, -1)
        chunk["call"] = np.arange(offset, offset + len(calls), dtype=np.uint64)
        chunk["tid"] = np.full(len(calls), thread.thread_id, dtype=np.uint64)
        con.register("_chunk", chunk)
        con.execute(f"INSERT INTO _calls SELECT call, tid, {', '.join(C.CALL.names)} "
                    "FROM _chunk")
        con.unregister("_chunk")
        offset += len(calls)
    con.execute(f"""CREATE VIEW calls AS SELECT c.call, c.thread, c.tid, c.function_id, f.name,
        c.start_ns, c.end_ns, c.duration_ns, c.self_ns, c.depth,
        NULLIF(c.parent, -1) AS parent, NULLIF(c.call_seq, -1) AS call_seq,
        NULLIF(c.return_seq, -1) AS return_seq, (c.flags & {C.OPEN}) != 0 AS open,
        (c.flags & {C.NO_CALL}) != 0 AS no_call, (c.flags & {C.LEFT}) != 0 AS "left"
        FROM _calls c LEFT JOIN functions f ON f.function_id = c.function_id""")
