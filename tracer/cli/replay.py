"""`ada replay SESSION`: the call tree in time order, with durations (uftrace's replay)."""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

from ada.atf.reader import ThreadReader
from ada.atf.session import SessionReader

from ..analysis.calls import CHUNK_EVENTS, Plan, may_begin_inside_calls, thread_steps, worker_pool
from ..analysis.replay import lines_of, merged_lines, write_replay
from ..analysis.filters import function_names
from .common import (add_call_filters, add_symbols_option, call_filter, decoder_for,
                     finish_decoder, keep_freed_memory, say_problems)


def configure(p: argparse.ArgumentParser) -> None:
    """`ada replay`'s text and arguments: imported for it alone (cli/__init__.py)."""
    p.description = ("Every call in time order, indented by depth: a call without children on "
                     "one line with its duration, any other opening with `{` and closing with "
                     "its duration. Threads are merged by time; TID says whose a line is. Where "
                     "the detail lane has the records (--detail, flight recorder windows), the "
                     "arguments and the return value are shown, by name and type from the "
                     "binaries' debug information (raw registers without it).")
    p.epilog = ("example:\n"
                "  ada replay ada_traces/session_*/pid_1234 -F 'handle_*' -t 10us")
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("session", help="session directory (pid_N, or the session_* above it)")
    add_call_filters(p, shape=True)
    p.add_argument("--callers", action="store_true",
                   help="where each call with detail was made from: function+offset and "
                   "file:line, from debug information")
    add_symbols_option(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    keep_freed_memory()
    session = SessionReader(args.session)
    names = function_names(session)
    selection = call_filter(args)
    decoder = decoder_for(session, args)
    threads = selection.threads(session)
    # Every thread's walk is under way at once (their lines are merged by time): with more
    # threads, smaller chunks and less ahead, so memory does not grow with them.
    many = max(1, len(threads) // 2)
    plan = Plan(filters=selection.filters(session), edges=True, leaves=True, done=False,
                  chunk_events=max(CHUNK_EVENTS // many, 1 << 14))

    def blocks(thread: ThreadReader, pool: ThreadPoolExecutor) -> Iterator[dict]:
        for step in thread_steps(thread, plan, pool, ahead_by=2 if many == 1 else 1,
                                   inside=may_begin_inside_calls(session, thread)):
            say_problems("replay", step)
            yield lines_of(step, decoder, args.callers)

    # Thread by thread, chunk by chunk, the lines merged by time as they come; the next chunks
    # of each thread are paired by other cores while this one writes text.
    with worker_pool() as pool:
        merged = merged_lines([blocks(t, pool) for t in threads])
        tids = {t.id: t.thread_id for t in session.threads}
        write_replay(merged, tids, names, sys.stdout, relative=bool(args.filter))
    finish_decoder(decoder)
    return 0
