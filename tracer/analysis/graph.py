"""The aggregated call graph (`ada graph`): every distinct path from a root, with its calls and
total time, as uftrace's graph shows it; and for one function, the paths that lead to it
(backtraces) and what it calls.

A path is a root's function followed by the functions called down to a call. The walk of the
calls (calls.py) numbers each call's path as it begins (its parent's path extended by its own
function, calls.PathTable) and counts calls, total and self time into it as they end, chunk
by chunk: a session's graph never needs its calls table at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .calls import PathTable


@dataclass
class Paths:
    """Distinct call paths: for path p, its last function, the path it extends (-1: a root),
    how many calls took it, their total and their self time."""

    function_id: np.ndarray
    up: np.ndarray
    calls: np.ndarray
    total_ns: np.ndarray
    self_ns: np.ndarray

    @classmethod
    def of(cls, table: PathTable) -> "Paths":
        n = len(table)
        grow = lambda a: np.concatenate((a, np.zeros(n - len(a), np.int64)))  # noqa: E731
        return cls(np.array(table.fids, dtype=np.uint64), np.array(table.up, dtype=np.int64),
                   grow(table.calls), grow(table.total_ns), grow(table.self_ns))

    def children(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for p, u in enumerate(self.up.tolist()):
            out.setdefault(u, []).append(p)
        return out

    def chain(self, p: int) -> list[int]:
        """Path p from its root, as path numbers."""
        out = []
        while p >= 0:
            out.append(p)
            p = int(self.up[p])
        return out[::-1]


def graph_lines(paths: Paths, label: Callable[[int], str], fmt: Callable[[int], str],
                roots: list[int] | None = None, max_depth: int | None = None) -> list[str]:
    """`TOTAL : (calls) name` per path, children under `+-` by time spent, as uftrace draws
    it; from `roots` (default: every root path)."""
    children = paths.children()
    lines: list[str] = []
    def by_time(ps: list[int]) -> list[int]:  # the most time first; ties by name
        return sorted(ps, key=lambda k: (-int(paths.total_ns[k]), label(int(paths.function_id[k])),
                                         int(paths.function_id[k])))
    stack = [(p, "", 0, True) for p in reversed(by_time(children.get(-1, []) if roots is None
                                                       else roots))]
    while stack:
        p, prefix, level, last = stack.pop()
        branch = "+-" if level else ""
        lines.append(f"{fmt(int(paths.total_ns[p])):>12} : {prefix}{branch}"
                     f"({int(paths.calls[p])}) {label(int(paths.function_id[p]))}")
        if max_depth is not None and level + 1 >= max_depth:
            continue
        inner = prefix + (("  " if last else "| ") if level else "")
        kids = by_time(children.get(p, []))
        for i, k in reversed(list(enumerate(kids))):
            stack.append((k, inner, level + 1, i == len(kids) - 1))
    return lines
