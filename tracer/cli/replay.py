"""`ada replay SESSION`: the call tree in time order, with durations (uftrace's replay)."""

from __future__ import annotations

import argparse
import os
import sys
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, Callable, Iterator

import numpy as np

from ada.atf.reader import ThreadReader
from ada.atf.session import SessionReader

from ..analysis import calls as C
from ..analysis import replay as P
from ..analysis import selection as S
from ..analysis.report import parse_duration
from .common import add_call_filters, call_filter, keep_freed_memory, non_negative_int


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
    keep_freed_memory()
    session = SessionReader(args.session)
    names = session.symbol_names()

    def shown(calls: C.Calls) -> C.Calls:
        keep = np.ones(len(calls), dtype=bool)
        if args.depth is not None:
            keep &= calls["depth"] < args.depth
        if args.time_filter is not None:
            keep &= calls["duration_ns"] >= args.time_filter
        return S.subset(calls, keep)

    selection = call_filter(args)

    def lines(thread: ThreadReader, a: int, b: int) -> dict[str, np.ndarray]:
        calls = shown(selection.chunk(thread, a, b, names))
        return P.lines_of(calls, P.detail_texts(calls, thread) if thread.detail else None)

    # Thread by thread, chunk by chunk, the lines merged by time as they come; the next chunks
    # of each thread are worked out by other cores while this one writes text.
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        blocks = P.merged_lines([ahead([partial(lines, t, a, b) for a, b in C.chunk_bounds(t)],
                                       pool)
                                 for t in selection.threads(session)])
        tids = {t.id: t.thread_id for t in session.threads}
        P.write_replay(blocks, tids, names, sys.stdout, relative=bool(args.filter))
    return 0


def ahead(work: list[Callable[[], Any]], pool: ThreadPoolExecutor, depth: int = 2
          ) -> Iterator[Any]:
    """The results of `work` in order, at most `depth` of them being made ahead of need."""
    pending: deque[Future] = deque(pool.submit(fn) for fn in work[:depth])
    rest = iter(work[depth:])
    while pending:
        done = pending.popleft()
        following = next(rest, None)
        if following is not None:
            pending.append(pool.submit(following))
        yield done.result()
