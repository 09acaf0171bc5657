"""`ada graph SESSION [FUNC]`: the aggregated call graph (uftrace's graph)."""

from __future__ import annotations

import argparse
import sys
import numpy as np

from ada.atf.session import SessionReader

from ..analysis.calls import PathTable, Plan, made_ahead, worker_pool
from ..analysis.graph import Paths, graph_lines
from ..analysis.filters import function_names, label, matching_ids
from ..analysis.report import format_duration
from .common import (CliError, add_call_filters, call_filter, keep_freed_memory,
                     non_negative_int, say_problems)


def configure(p: argparse.ArgumentParser) -> None:
    """`ada graph`'s text and arguments: imported for it alone (cli/__init__.py)."""
    p.description = ("Every distinct call path from the roots, with how many calls took it and "
                     "their total time, the most expensive first. With FUNC: the paths that "
                     "lead to FUNC (backtraces) and the graph of what FUNC calls.")
    p.epilog = ("example:\n"
                "  ada graph ada_traces/session_*/pid_1234 'sqlite3_step'")
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("session", help="session directory (pid_N, or the session_* above it)")
    p.add_argument("function", nargs="?", metavar="FUNC", help="a function (a glob)")
    p.add_argument("-D", "--depth", type=non_negative_int, metavar="N",
                   help="draw N levels at most")
    add_call_filters(p, within=False)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    keep_freed_memory()
    session = SessionReader(args.session)
    names = function_names(session)
    name_of = lambda fid: label(names, fid)  # noqa: E731
    pattern = args.function
    ids = matching_ids(names, [pattern]) if pattern is not None else None
    if ids is not None and not len(ids):
        raise CliError(f"{pattern}: no function of the session matches")
    whole = PathTable()
    tables = [whole] if ids is None else [whole, PathTable(roots=ids)]
    with worker_pool() as pool:
        plan = Plan(paths=tables, columns=("duration_ns", "self_ns"))
        for step in made_ahead(call_filter(args).steps(session, plan, pool), pool):
            for table, paths in zip(tables, step.paths):
                table.add(paths, step.done["duration_ns"].view(np.int64),
                          step.done["self_ns"].view(np.int64))
            say_problems("graph", step)
    paths = Paths.of(whole)
    out = []
    if ids is None:
        out.append("# TOTAL TIME : FUNCTION")
        out.extend(graph_lines(paths, name_of, format_duration, max_depth=args.depth))
    else:
        wanted = set(ids.tolist())
        ends = [p for p in range(len(paths.up))
                if int(paths.function_id[p]) in wanted and paths.calls[p]]
        ends.sort(key=lambda p: -int(paths.total_ns[p]))
        out.append(f"# backtraces of {pattern}: the paths that lead to it")
        for i, p in enumerate(ends):
            out.append(f" backtrace #{i}: hit {int(paths.calls[p])}, time "
                       f"{format_duration(int(paths.total_ns[p]))}")
            for level, q in enumerate(reversed(paths.chain(p))):
                out.append(f"   [{level}] {name_of(int(paths.function_id[q]))}")
        callees = Paths.of(tables[1])
        roots = [p for p in range(len(callees.up)) if callees.up[p] < 0]
        out.append("")
        out.append(f"# what {pattern} calls")
        out.append("# TOTAL TIME : FUNCTION")
        out.extend(graph_lines(callees, name_of, format_duration, roots=roots,
                                 max_depth=args.depth))
    sys.stdout.write("\n".join(out) + "\n")
    return 0
