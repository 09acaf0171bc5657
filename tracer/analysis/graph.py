"""The aggregated call graph (`ada graph`): every distinct path from a root, with its calls and
total time, as uftrace's graph shows it; and for one function, the paths that lead to it
(backtraces) and what it calls.

A path is a root's function followed by the functions called down to a call. Paths are
numbered one depth level at a time: a call's path is its parent's path extended by its own
function, so each level is one `np.unique` over (parent path, function) pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .calls import Calls
from .report import dense_ids


@dataclass
class Paths:
    """Distinct call paths: for path p, its last function, the path it extends (-1: a root),
    how many calls took it and their total time; `of_call` gives each call's path."""

    function_id: np.ndarray
    up: np.ndarray
    calls: np.ndarray
    total_ns: np.ndarray
    of_call: np.ndarray

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


def call_paths(calls: Calls) -> Paths:
    n = len(calls)
    ids, dense = dense_ids(calls["function_id"])
    width = max(len(ids), 1)
    of_call = np.full(n, -1, dtype=np.int64)
    parent = calls["parent"]
    depth = calls["depth"].astype(np.int64)
    ups, fids = [], []
    count = 0
    for d in (np.unique(depth) if n else []):
        rows = np.flatnonzero(depth == d)
        up = np.where(parent[rows] >= 0, of_call[np.maximum(parent[rows], 0)], -1)
        keys, inverse = np.unique((up + 1) * width + dense[rows], return_inverse=True)
        of_call[rows] = count + inverse
        ups.append(keys // width - 1)
        fids.append(ids[keys % width])
        count += len(keys)
    up = np.concatenate(ups) if ups else np.zeros(0, dtype=np.int64)
    function_id = np.concatenate(fids) if fids else np.zeros(0, dtype=np.uint64)
    return Paths(function_id, up, np.bincount(of_call, minlength=count),
                 np.rint(np.bincount(of_call, weights=calls["duration_ns"], minlength=count))
                 .astype(np.int64), of_call)


def graph_lines(paths: Paths, label: Callable[[int], str], fmt: Callable[[int], str],
                roots: list[int] | None = None, max_depth: int | None = None) -> list[str]:
    """`TOTAL : (calls) name` per path, children under `+-` by time spent, as uftrace draws
    it; from `roots` (default: every root path)."""
    children = paths.children()
    lines: list[str] = []
    by_time = lambda ps: sorted(ps, key=lambda k: -int(paths.total_ns[k]))  # noqa: E731
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
