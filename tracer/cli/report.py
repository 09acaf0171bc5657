"""`ada report SESSION`: per function, total and self time, calls, avg/min/max (uftrace's report).

Built on the calls table (tracer/analysis/calls.py); see tracer/analysis/report.py for how
recursion is counted.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np

from ada.atf.reader import ThreadReader
from ada.atf.session import SessionReader

from ..analysis.calls import Plan, pipelined, worker_pool
from ..analysis.report import (COLUMNS, SORT_KEYS, format_duration, merge_stats, sort_stats,
                               step_stats)
from ..analysis.filters import function_names, label, module_names
from ..analysis.filters import CallFilter
from .common import (add_call_filters, call_filter, keep_freed_memory, non_negative_int,
                     say_problems)


def configure(p: argparse.ArgumentParser) -> None:
    """`ada report`'s text and arguments: imported for it alone (cli/__init__.py)."""
    p.description = ("Per function: Total time (a recursion counted once), Self time (minus the "
                     "time of the calls it made), Calls, and Avg/Min/Max of a call's duration. "
                     "Calls still open when the recording ended count to their thread's last "
                     "event.")
    p.epilog = ("example:\n"
                "  ada report ada_traces/session_*/pid_1234 --sort self --limit 20")
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("session", help="session directory (pid_N, or the session_* above it)")
    p.add_argument("-s", "--sort", choices=SORT_KEYS, default="total",
                   help="order of the rows (default total; largest first, name A-Z)")
    p.add_argument("--limit", type=non_negative_int, metavar="N", help="only the first N rows")
    add_call_filters(p)
    p.add_argument("--threads", action="store_true", help="one table per thread")
    p.add_argument("--diff", metavar="OTHER",
                   help="compare with another session: each function's figures here, there, "
                   "and the difference (absolute and percent)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    keep_freed_memory()
    session = SessionReader(args.session)
    names = function_names(session)
    modules = module_names(session)
    per_thread = stats_by_thread(session, call_filter(args))
    if args.diff:
        other = SessionReader(args.diff)
        other_stats = merge_stats([st for _, st in stats_by_thread(other, call_filter(args))])
        return print_diff(merge_stats([st for _, st in per_thread]), names, other_stats,
                          function_names(other), args)
    if args.threads:
        tables = [(t, st) for t, st in per_thread if len(st)]
    else:
        tables = [(None, merge_stats([st for _, st in per_thread]))]
    if args.json:
        out: dict[str, Any] = {"path": str(session.path)}
        rows = [{"thread": t.id if t else None, "tid": t.thread_id if t else None,
                 "functions": rows_json(ordered(st, args, names), names, modules)}
                for t, st in tables]
        if args.threads:
            out["threads"] = rows
        else:
            out["functions"] = rows[0]["functions"]
        json.dump(out, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    for i, (t, st) in enumerate(tables):
        if t is not None:
            sys.stdout.write(("\n" if i else "") + f"thread {t.id} (tid {t.thread_id}):\n")
        print_table(ordered(st, args, names), names)
    return 0


def stats_by_thread(session: SessionReader, selection: CallFilter
                    ) -> list[tuple[ThreadReader, np.ndarray]]:
    """Each selected thread with its function statistics (counted chunk by chunk on every
    core, merged)."""
    parts: dict[int, tuple[ThreadReader, list[np.ndarray]]] = {}
    with worker_pool() as pool:
        steps = selection.steps(session, Plan(nested=True, columns=COLUMNS, stats=True),
                                pool)
        for step, stats in pipelined(steps, lambda s: (s, step_stats(s)), pool):
            parts.setdefault(step.thread.id, (step.thread, []))[1].append(stats)
            say_problems("report", step)
    return [(t, merge_stats(p)) for t, p in parts.values()]


def ordered(stats: np.ndarray, args: argparse.Namespace, names: dict[int, str]) -> np.ndarray:
    stats = sort_stats(stats, args.sort, names)
    return stats[:args.limit] if args.limit is not None else stats


def rows_json(stats: np.ndarray, names: dict[int, str],
              modules: dict[int, str]) -> list[dict[str, Any]]:
    return [{"name": label(names, int(s["function_id"])),
             "function_id": f"0x{int(s['function_id']):016x}",
             "module": modules.get(int(s["function_id"]) >> 32),
             "calls": int(s["calls"]), "total_ns": int(s["total_ns"]),
             "self_ns": int(s["self_ns"]),
             "avg_ns": int(s["total_ns"]) // max(int(s["calls"]), 1),
             "min_ns": int(s["min_ns"]), "max_ns": int(s["max_ns"])} for s in stats]


def print_table(stats: np.ndarray, names: dict[int, str]) -> None:
    d = format_duration
    lines = [f"{'Total time':>12} {'Self time':>12} {'Calls':>10} {'Avg':>12} {'Min':>12} "
             f"{'Max':>12}  Function",
             f"{'=' * 12} {'=' * 12} {'=' * 10} {'=' * 12} {'=' * 12} {'=' * 12}  {'=' * 20}"]
    for s in stats:
        calls = int(s["calls"])
        lines.append(f"{d(int(s['total_ns'])):>12} {d(int(s['self_ns'])):>12} {calls:>10} "
                     f"{d(int(s['total_ns']) // max(calls, 1)):>12} {d(int(s['min_ns'])):>12} "
                     f"{d(int(s['max_ns'])):>12}  {label(names, int(s['function_id']))}")
    if len(stats) == 0:
        lines.append("(no calls)")
    sys.stdout.write("\n".join(lines) + "\n")


FIGURES = ("total_ns", "self_ns", "calls", "avg_ns", "min_ns", "max_ns")


def figures(row: np.void | None) -> dict[str, int]:
    """A STATS row's figures (0 for a function the session did not call)."""
    if row is None:
        return dict.fromkeys(FIGURES, 0)
    calls = int(row["calls"])
    return {"total_ns": int(row["total_ns"]), "self_ns": int(row["self_ns"]), "calls": calls,
            "avg_ns": int(row["total_ns"]) // max(calls, 1), "min_ns": int(row["min_ns"]),
            "max_ns": int(row["max_ns"])}


def change(base: int, other: int) -> dict[str, Any]:
    return {"base": base, "other": other, "diff": other - base,
            "percent": round(100.0 * (other - base) / base, 3) if base else None}


def print_diff(stats: np.ndarray, names: dict[int, str], other: np.ndarray,
               other_names: dict[int, str], args: argparse.Namespace) -> int:
    """Functions matched by name: every figure of the table here (base) and in OTHER, and
    the change, absolute and percent; the largest change of the --sort figure first."""
    here = {label(names, int(s["function_id"])): s for s in stats}
    there = {label(other_names, int(s["function_id"])): s for s in other}
    rows = []
    for name in sorted(set(here) | set(there)):
        a, b = figures(here.get(name)), figures(there.get(name))
        rows.append((name, name in here, name in there,
                     {k: change(a[k], b[k]) for k in FIGURES}))
    if args.sort != "name":
        key = {"total": "total_ns", "self": "self_ns", "calls": "calls", "avg": "avg_ns",
               "min": "min_ns", "max": "max_ns"}[args.sort]
        rows.sort(key=lambda r: -abs(r[3][key]["diff"]))
    if args.limit is not None:
        rows = rows[:args.limit]
    if args.json:
        json.dump({"base": str(args.session), "other": str(args.diff),
                   "functions": [{"name": n, "in_base": x, "in_other": y, **fig}
                                 for n, x, y, fig in rows]}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    d = format_duration

    def signed(ns: int) -> str:
        return ("-" if ns < 0 else "+") + d(abs(ns))

    def pct(c: dict[str, Any], was_there: bool) -> str:
        return "new" if not was_there else "" if c["percent"] is None else f"{c['percent']:+.1f}%"

    lines = [f"# base: {args.session}", f"# other: {args.diff}",
             f"{'Total (base)':>12} {'Total diff':>12} {'%':>7} {'Self diff':>12} {'%':>7} "
             f"{'Calls':>9} {'diff':>8} {'Avg diff':>12} {'Min diff':>12} {'Max diff':>12}"
             "  Function"]
    for name, x, _, fig in rows:
        t, sf, c = fig["total_ns"], fig["self_ns"], fig["calls"]
        lines.append(f"{d(t['base']):>12} {signed(t['diff']):>12} {pct(t, x):>7} "
                     f"{signed(sf['diff']):>12} {pct(sf, x):>7} {c['base']:>9} "
                     f"{c['diff']:>+8} {signed(fig['avg_ns']['diff']):>12} "
                     f"{signed(fig['min_ns']['diff']):>12} {signed(fig['max_ns']['diff']):>12}"
                     f"  {name}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
