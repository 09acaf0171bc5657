"""The aggregated call graph (`ada graph`): every distinct path from a root, with its calls and
total time, as uftrace's graph shows it; and for one function, the paths that lead to it
(backtraces) and what it calls.

A path is a root's function followed by the functions called down to a call. Paths are
numbered one depth level at a time: a call's path is its parent's path extended by its own
function, so each level is one `np.unique` over (parent path, function) pairs. The paths of
chunks (of threads) merge the same way, a chunk's path standing for its calls: a session's
graph never needs its whole calls table at once.
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
    the depth of its calls, how many calls took it, their total and their self time."""

    function_id: np.ndarray
    up: np.ndarray
    depth: np.ndarray
    calls: np.ndarray
    total_ns: np.ndarray
    self_ns: np.ndarray

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
    """The paths of one calls table."""
    return _grouped(calls["function_id"], calls["parent"], calls["depth"],
                    None, calls["duration_ns"], calls["self_ns"])


def merge_paths(parts: list[Paths]) -> Paths:
    """The paths of several tables (chunks, threads) as one graph."""
    ups, offset = [], 0
    for p in parts:
        ups.append(np.where(p.up >= 0, p.up + offset, -1))
        offset += len(p.up)
    joined = {name: np.concatenate([getattr(p, name) for p in parts]) if parts
              else np.zeros(0, dtype=np.int64) for name in ("function_id", "depth", "calls",
                                                             "total_ns", "self_ns")}
    return _grouped(joined["function_id"].astype(np.uint64),
                    np.concatenate(ups) if ups else np.zeros(0, dtype=np.int64),
                    joined["depth"], joined["calls"], joined["total_ns"], joined["self_ns"])


def _grouped(function_id: np.ndarray, up_item: np.ndarray, depth: np.ndarray,
             calls: np.ndarray | None, total_ns: np.ndarray, self_ns: np.ndarray) -> Paths:
    """Items (calls, or paths standing for `calls` calls each) with the same function under
    the same path, as one path each. `up_item` is each item's parent item (-1: none), and
    parents are deeper by one level, so the levels are numbered outermost first."""
    n = len(function_id)
    ids, dense = dense_ids(function_id)
    width = max(len(ids), 1)
    of_item = np.full(n, -1, dtype=np.int64)
    depth = depth.astype(np.int64)
    ups, fids, depths = [], [], []
    count = 0
    for d in (np.unique(depth) if n else []):
        rows = np.flatnonzero(depth == d)
        up = np.where(up_item[rows] >= 0, of_item[np.maximum(up_item[rows], 0)], -1)
        keys, inverse = np.unique((up + 1) * width + dense[rows], return_inverse=True)
        of_item[rows] = count + inverse
        ups.append(keys // width - 1)
        fids.append(ids[keys % width])
        depths.append(np.full(len(keys), d, dtype=np.int64))
        count += len(keys)
    empty = np.zeros(0, dtype=np.int64)
    weights = None if calls is None else calls.astype(np.float64)
    return Paths(np.concatenate(fids) if fids else np.zeros(0, dtype=np.uint64),
                 np.concatenate(ups) if ups else empty,
                 np.concatenate(depths) if depths else empty,
                 np.rint(np.bincount(of_item, weights=weights, minlength=count))
                 .astype(np.int64),
                 *(np.rint(np.bincount(of_item, weights=w, minlength=count)).astype(np.int64)
                   for w in (total_ns, self_ns)))


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
