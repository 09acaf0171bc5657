"""Parquet (zstd): the events, calls, functions, threads and args views of sql.py, a file each, for
DuckDB, Spark, Trino, pandas or polars. The events are the index lane as recorded (the threads
and time window of the filters apply); the calls take every filter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ada.atf.session import SessionReader

from ..arguments import Decoder
from ..selection import CallFilter
from ..sql import VIEWS, connect


def write(session: SessionReader, selection: CallFilter, directory: Path,
          progress: Callable[[int], None] = lambda n: None,
          decoder: Decoder | None = None) -> int:
    """events.parquet, calls.parquet, functions.parquet, threads.parquet and args.parquet in
    `directory` (made if missing); returns how many calls were written."""
    directory.mkdir(parents=True, exist_ok=True)
    con = connect(session, selection, with_calls=True, events_window=True,
                  decoder=decoder or Decoder(session))
    # Format v2 pages (delta-encoded integers): sequences and timestamps shrink to a few bits
    # per row, so zstd has 5x less to do; Spark 3, Trino, DuckDB, pandas and polars read them.
    # OVERWRITE: an export made again into the same directory replaces its files.
    for view in VIEWS:
        target = str(directory / f"{view}.parquet").replace("'", "''")
        con.execute(f"COPY (SELECT * FROM {view}) TO '{target}' "
                    "(FORMAT parquet, COMPRESSION zstd, PARQUET_VERSION v2, OVERWRITE)")
        if view == "events":
            progress(session.event_count())
    return int(con.execute("SELECT count(*) FROM calls").fetchall()[0][0])
