"""`ada replay SESSION`: the call tree in time order, with durations (uftrace's replay)."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from ada.atf.session import SessionReader

from ..analysis import calls as C
from ..analysis import replay as P
from ..analysis import selection as S
from ..analysis.report import parse_duration
from .common import non_negative_int
from .report import chunks_of, selected_threads


def duration(text: str) -> int:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay", help="the call tree in time order, with durations",
        description="Every call in time order, indented by depth: a call without children on "
        "one line with its duration, any other opening with `{` and closing with its "
        "duration. Threads are merged by time; TID says whose a line is.",
        epilog="example:\n  ada replay ada_traces/session_*/pid_1234 -F 'handle_*' -t 10us",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("session", help="session directory (pid_N, or the session_* above it)")
    p.add_argument("-F", "--filter", action="append", default=[], metavar="FUNC",
                   help="only within calls of FUNC (a glob; repeatable)")
    p.add_argument("-N", "--notrace", action="append", default=[], metavar="FUNC",
                   help="hide FUNC and what it calls (a glob; repeatable)")
    p.add_argument("-D", "--depth", type=non_negative_int, metavar="N",
                   help="only calls less than N levels deep")
    p.add_argument("-t", "--time-filter", type=duration, metavar="DUR",
                   help="hide calls shorter than DUR (e.g. 10us, 2ms)")
    p.add_argument("--tid", type=non_negative_int, action="append", metavar="TID",
                   help="only the thread with this OS thread id (repeatable)")
    p.add_argument("--from-ns", type=non_negative_int, metavar="T",
                   help="only calls that start at or after T")
    p.add_argument("--to-ns", type=non_negative_int, metavar="T",
                   help="only calls that start at or before T")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    session = SessionReader(args.session)
    names = S.function_names(session)

    def shown(calls: C.Calls) -> C.Calls:
        keep = np.ones(len(calls), dtype=bool)
        if args.depth is not None:
            keep &= calls["depth"] < args.depth
        if args.time_filter is not None:
            keep &= calls["duration_ns"] >= args.time_filter
        return S.subset(calls, keep)

    # Thread by thread, chunk by chunk, lazily: the lines are merged by time as they come.
    blocks = P.merged_lines([(P.lines_of(shown(c)) for c in chunks_of(t, args, names))
                             for t in selected_threads(session, args)])
    tids = {t.id: t.thread_id for t in session.threads}
    P.write_replay(blocks, tids, names, sys.stdout, relative=bool(args.filter))
    return 0
