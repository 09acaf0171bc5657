"""Folded stacks (`main;parse;read 1234`): every distinct call stack with its self time in
nanoseconds, what flamegraph.pl, inferno and speedscope open as a flame graph.

Stacks are the call paths of graph.py (a root's function, then the functions called down to a
call), counted as the walk of the calls goes (calls.PathTable); a stack's figure is the self time of the calls that
took it, so the figures of one function add up to its self time in `ada report`. Threads are
merged (flame graphs usually are). Stacks of no time are left out.
"""

from __future__ import annotations

from typing import Callable, TextIO

import numpy as np

from ada.atf.session import SessionReader

from ..calls import PathTable, Plan, Step, made_ahead, worker_pool
from ..graph import Paths
from ..filters import CallFilter, function_names, label


def write(session: SessionReader, selection: CallFilter, out: TextIO,
          seen: Callable[[Step], None] = lambda step: None) -> int:
    """Returns how many stacks were written."""
    names = function_names(session)
    table = PathTable()
    with worker_pool() as pool:
        plan = Plan(paths=[table], columns=("duration_ns", "self_ns"))
        for step in made_ahead(selection.steps(session, plan, pool), pool):
            table.add(step.paths[0], step.done["duration_ns"].view(np.int64),
                      step.done["self_ns"].view(np.int64))
            seen(step)
    paths = Paths.of(table)
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
