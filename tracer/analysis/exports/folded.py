"""Folded stacks (`main;parse;read 1234`): every distinct call stack with its self time in
nanoseconds, what flamegraph.pl, inferno and speedscope open as a flame graph.

Stacks are the call paths of graph.py (a root's function, then the functions called down to a
call), counted chunk by chunk and merged; a stack's figure is the self time of the calls that
took it, so the figures of one function add up to its self time in `ada report`. Threads are
merged (flame graphs usually are). Stacks of no time are left out.
"""

from __future__ import annotations

from typing import Callable, TextIO

from ada.atf.session import SessionReader

from ..graph import call_paths, merge_paths
from ..selection import CallFilter, function_names, label


def write(session: SessionReader, selection: CallFilter, out: TextIO,
          progress: Callable[[int], None] = lambda n: None) -> int:
    """Returns how many stacks were written."""
    names = function_names(session)
    parts = []
    for _, events, paths in selection.each(session, lambda t, calls: call_paths(calls)):
        parts.append(paths)
        progress(events)
    paths = merge_paths(parts)
    text: dict[int, str] = {}  # path -> its stack, built from the path it extends
    lines = []
    for p in range(len(paths.up)):  # a path comes after the one it extends
        up = int(paths.up[p])
        name = label(names, int(paths.function_id[p])).replace(";", ":")  # ';' splits frames
        text[p] = name if up < 0 else f"{text[up]};{name}"
        if paths.self_ns[p] > 0:
            lines.append(f"{text[p]} {int(paths.self_ns[p])}\n")
    out.write("".join(lines))
    return len(lines)
