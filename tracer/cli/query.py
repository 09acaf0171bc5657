"""`ada query SESSION "SQL"`: DuckDB over the session's views (tracer/analysis/sql.py)."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from typing import Any

from ada.atf.session import SessionReader

from .common import (CliError, Progress, add_symbols_option, decoder_for, finish_decoder,
                     keep_freed_memory)


def configure(p: argparse.ArgumentParser) -> None:
    """`ada query`'s text and arguments: imported for it alone (cli/__init__.py)."""
    p.description = ("Runs SQL on views of the session: events (the index lane, read in place), "
                     "calls (every call with its duration and self time; built when the query "
                     "names it), functions, threads and args (arguments and return values from "
                     "the detail lane, decoded by debug information). Without SQL: the views "
                     "and their columns.")
    p.epilog = ("examples:\n"
                "  ada query SESSION \"SELECT name, count(*), sum(self_ns) FROM calls GROUP BY "
                "name ORDER BY 3 DESC LIMIT 10\"\n"
                "  ada query SESSION \"SELECT kind, count(*) FROM events GROUP BY kind\" --csv")
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("session", help="session directory (pid_N, or the session_* above it)")
    p.add_argument("sql", nargs="?", help="the query (omit it to list the views)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--csv", action="store_true", help="comma-separated, with a header")
    out.add_argument("--json", action="store_true", help="a JSON list of objects")
    add_symbols_option(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    keep_freed_memory()
    import duckdb

    from ..analysis.sql import connect, names_view
    from ..analysis.tables import VIEWS
    session = SessionReader(args.session)
    wants = {view: args.sql is not None and names_view(args.sql, view)
             for view in ("calls", "events", "args")}
    decoder = decoder_for(session, args) if wants["args"] else None
    progress = Progress("query: making the calls and events files (once per session)",
                        session.event_count(), command="query")
    con = connect(session, decoder=decoder, seen=progress.step,
                    big=wants["calls"] or wants["events"] or args.sql is None)
    progress.done()
    if decoder is not None:
        finish_decoder(decoder)
    if args.sql is None:
        for view, (what, _) in VIEWS.items():
            columns = con.sql(f"DESCRIBE {view}").fetchall()
            print(f"{view}: {what}")
            print("  " + ", ".join(f"{c[0]} {c[1]}" for c in columns))
        return 0
    try:
        result = con.sql(args.sql)
        if result is None:
            return 0  # a statement without rows
        columns, rows = result.columns, result.fetchall()
    except duckdb.Error as e:
        raise CliError(str(e).strip().splitlines()[0]) from None
    if args.csv:
        w = csv.writer(sys.stdout)
        w.writerow(columns)
        w.writerows(rows)
    elif args.json:
        json.dump([dict(zip(columns, map(plain, r))) for r in rows], sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(table(columns, rows))
    return 0


def plain(value: Any) -> Any:
    """JSON's kinds: numbers, strings, booleans and null stay; the rest as text."""
    return value if value is None or isinstance(value, (int, float, str, bool)) else str(value)


def table(columns: list[str], rows: list[tuple]) -> str:
    """Aligned columns, numbers to the right."""
    text = [[("NULL" if v is None else str(v)) for v in r] for r in rows]
    width = [max([len(c)] + [len(r[i]) for r in text]) for i, c in enumerate(columns)]
    numeric = [all(isinstance(r[i], (int, float)) or r[i] is None for r in rows) and rows
               for i in range(len(columns))]
    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if n else c.ljust(w)
                         for c, w, n in zip(cells, width, numeric)).rstrip()
    out = [line(list(columns)), "  ".join("-" * w for w in width)]
    out += [line(r) for r in text]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out) + "\n"
