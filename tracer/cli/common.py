"""Small helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import ctypes
import sys
from typing import Any, Callable

from ..analysis.selection import CallFilter
from ..errors import TracerError


class CliError(TracerError):
    """A usage or environment problem to report in one line (exit 1)."""


def number(kind: type, minimum: float | None = None, maximum: float | None = None,
           above: float | None = None) -> Callable[[str], Any]:
    """An argparse type for int or float options with bounds, and messages that say them."""
    def parse(text: str) -> Any:
        try:
            value = int(text, 0) if kind is int else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None
        if above is not None and value <= above:
            raise argparse.ArgumentTypeError(f"expected a value > {above:g}, got {text}")
        if minimum is not None and maximum is not None and not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"expected {minimum:g}..{maximum:g}, got {text}")
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"expected a value >= {minimum:g}, got {text}")
        return value
    return parse


non_negative_int = number(int, minimum=0)


def add_call_filters(p: argparse.ArgumentParser, *, within: bool = True) -> None:
    """The options report, replay and graph share (see call_filter)."""
    if within:
        p.add_argument("-F", "--filter", action="append", default=[], metavar="FUNC",
                       help="only within calls of FUNC (a glob; repeatable)")
    p.add_argument("-N", "--notrace", action="append", default=[], metavar="FUNC",
                   help="hide FUNC and what it calls; report charges their time to the caller "
                   "(a glob; repeatable)")
    p.add_argument("--tid", type=non_negative_int, action="append", default=[], metavar="TID",
                   help="only the thread with this OS thread id (repeatable)")
    p.add_argument("--from-ns", type=non_negative_int, metavar="T",
                   help="only calls that start at or after T")
    p.add_argument("--to-ns", type=non_negative_int, metavar="T",
                   help="only calls that start at or before T")


def call_filter(args: argparse.Namespace) -> CallFilter:
    """The CallFilter of add_call_filters' options."""
    return CallFilter(tids=args.tid, within=getattr(args, "filter", []), hide=args.notrace,
                      start_ns=args.from_ns, end_ns=args.to_ns)


def keep_freed_memory() -> None:
    """Let glibc's malloc keep the memory numpy frees, for commands that work chunk by chunk.

    By default glibc gives freed blocks of more than about 128 KiB back to the kernel (they
    are mapped on their own, or trimmed off the top of a heap; worker threads get heaps of
    their own, which are trimmed as soon as a chunk's arrays are freed), so each chunk's
    arrays are page-faulted and zeroed anew: about a quarter of `ada report`'s time. Here
    blocks under 32 MiB (a chunk's columns) come from one heap shared by all threads, which
    is not trimmed: peak memory stays what the chunks worked on at once need. Elsewhere than
    glibc (macOS, musl): nothing to do."""
    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return  # not glibc
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
    mallopt(M_MMAP_THRESHOLD, 32 << 20)
    mallopt(M_TRIM_THRESHOLD, 1 << 30)
    mallopt(M_ARENA_MAX, 1)


def format_duration_ns(ns: int) -> str:
    return f"{ns / 1e9:.6f} s"
