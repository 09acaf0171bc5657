"""SQL over a session: DuckDB (embedded, no server) on views of the session's tables.

The big views, events and calls, are Parquet files DuckDB scans and spills as it needs, written
once by the Parquet export (exports/parquet.py: the calls table `ada report` counts, so both
agree) into a cache beside the session, `.ada-cache/` (or under ~/.cache/ada when the session's
directory is read-only), and written again when the session's files change. DuckDB runs with a
memory limit and a spill directory in the cache, so a GROUP BY over tens of millions of calls
stays within a bounded memory. The small tables (functions, threads, args) come from tables.py,
as do the Parquet export's, so the files and the views hold the same rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import duckdb

from ada.atf.manifest import MANIFEST
from ada.atf.session import SessionReader

from .calls import Step
from . import tables
from .arguments import Decoder
from .exports import parquet
from .filters import CallFilter

CACHE = ".ada-cache"
CACHE_VERSION = 1  # bump when the calls table's rules or the files' columns change
MEMORY_LIMIT = "600MB"  # DuckDB's own; it spills past it


def names_view(sql: str, view: str) -> bool:
    """Whether a query reads a view (its name as a word outside quotes, roughly)."""
    return re.search(rf"\b{view}\b", re.sub(r"'[^']*'", "", sql), re.IGNORECASE) is not None


def cache_directory(session: SessionReader) -> Path:
    """Where the session's query files are kept: beside it when its directory takes them,
    else under the user's cache directory (named after the session's path)."""
    beside = session.path / CACHE
    try:
        beside.mkdir(exist_ok=True)
        probe = beside / ".probe"
        probe.write_bytes(b"")
        probe.unlink()
        return beside
    except OSError:
        home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        digest = hashlib.sha1(str(session.path.resolve()).encode()).hexdigest()[:16]
        out = home / "ada" / f"{session.path.name}-{digest}"
        out.mkdir(parents=True, exist_ok=True)
        return out


def fingerprint(session: SessionReader) -> dict[str, Any]:
    """What the cached files were made from: the manifest and every index file, by size and
    time of change, and the version of the rules that made them."""
    files = [session.path / MANIFEST] + [t.path / "index.atf" for t in session.threads]
    seen = []
    for f in files:
        try:
            st = f.stat()
            seen.append([str(f.relative_to(session.path)), st.st_size, st.st_mtime_ns])
        except OSError:
            seen.append([str(f.relative_to(session.path)), None, None])
    return {"version": CACHE_VERSION, "files": seen}


def cached_tables(session: SessionReader, seen: Callable[[Step], None] = lambda s: None
                  ) -> Path:
    """The directory holding events.parquet and calls.parquet of the whole session, made
    (or made again) when its fingerprint is not the session's. Written into a temporary
    directory and moved into place: an interrupted build leaves nothing half made."""
    directory = cache_directory(session)
    stamp = directory / "fingerprint.json"
    want = fingerprint(session)
    try:
        if json.loads(stamp.read_text()) == want and (directory / "calls.parquet").is_file() \
                and (directory / "events.parquet").is_file():
            return directory
    except (OSError, ValueError):
        pass
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=directory))
    try:
        parquet.write_big(session, CallFilter(), work, seen)
        for name in ("events.parquet", "calls.parquet"):
            os.replace(work / name, directory / name)
        stamp.write_text(json.dumps(want))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return directory


def connect(session: SessionReader, decoder: Decoder | None = None,
            seen: Callable[[Step], None] = lambda s: None,
            big: bool = True) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the views of tables.VIEWS. Without `big`, events and calls
    are there but empty (no cache is made); without a `decoder`, so is args."""
    directory = cached_tables(session, seen) if big else None
    con = duckdb.connect()
    con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
    con.execute("SET preserve_insertion_order = false")
    if directory is not None:
        spill = directory / "spill"
        spill.mkdir(exist_ok=True)
        con.execute(f"SET temp_directory = '{_quoted(spill)}'")
    rows = tables.functions(session)
    con.register("_functions", rows)
    con.execute("CREATE VIEW functions AS SELECT function_id, name::VARCHAR AS name, "
                "symbol::VARCHAR AS symbol, module::VARCHAR AS module, "
                "address::VARCHAR AS address FROM _functions")
    con.register("_threads", tables.threads(session.threads))
    con.execute("CREATE VIEW threads AS SELECT * FROM _threads")
    for view in ("events", "calls"):
        if directory is not None:
            con.execute(f"CREATE VIEW {view} AS SELECT * FROM "
                        f"read_parquet('{_quoted(directory / (view + '.parquet'))}')")
        else:
            columns = ", ".join(f'NULL::{_SQL_TYPES[c.type]} AS "{c.name}"'
                                for c in parquet.SCHEMAS[view])
            con.execute(f"CREATE VIEW {view} AS SELECT {columns} WHERE false")
    con.register("_args", tables.args(session, session.threads, decoder))
    con.execute("CREATE VIEW args AS SELECT thread, tid, seq, timestamp_ns, function_id, "
                "name::VARCHAR AS name, position::INTEGER AS position, arg::VARCHAR AS arg, "
                "value::VARCHAR AS value FROM _args")
    return con


_SQL_TYPES = {"u32": "UINTEGER", "u64": "UBIGINT", "i64": "BIGINT", "i32": "INTEGER",
              "str": "VARCHAR", "bool": "BOOLEAN"}


def _quoted(path: Path) -> str:
    return str(path).replace("'", "''")
