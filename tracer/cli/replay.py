"""`ada replay SESSION`: the call tree in time order, with durations (uftrace's replay)."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from ada.atf.reader import ThreadReader
from ada.atf.session import SessionReader

from ..analysis import calls as C
from ..analysis import replay as P
from ..analysis import selection as S
from ..analysis.report import parse_duration
from .common import add_call_filters, call_filter, non_negative_int


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
        "duration. Threads are merged by time; TID says whose a line is. Where the detail "
        "lane has the records (--detail, flight recorder windows), the first argument "
        "registers and the return value are shown.",
        epilog="example:\n  ada replay ada_traces/session_*/pid_1234 -F 'handle_*' -t 10us",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("session", help="session directory (pid_N, or the session_* above it)")
    add_call_filters(p)
    p.add_argument("-D", "--depth", type=non_negative_int, metavar="N",
                   help="only calls less than N levels deep")
    p.add_argument("-t", "--time-filter", type=duration, metavar="DUR",
                   help="hide calls shorter than DUR (e.g. 10us, 2ms)")
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
    selection = call_filter(args)
    def lines(thread: ThreadReader, calls: C.Calls) -> dict[str, np.ndarray]:
        calls = shown(calls)
        return P.lines_of(calls, P.detail_texts(calls, thread) if thread.detail else None)

    blocks = P.merged_lines([(lines(t, c) for c in selection.chunks(t, names))
                             for t in selection.threads(session)])
    tids = {t.id: t.thread_id for t in session.threads}
    P.write_replay(blocks, tids, names, sys.stdout, relative=bool(args.filter))
    return 0
