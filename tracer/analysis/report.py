"""Per-function statistics of a calls table (`ada report`), as uftrace's report counts them.

Total time counts a recursion once: a call made inside another call of the same function (on
the same thread: Calls.nested) adds to Calls and to Self, not again to Total. Avg/Min/Max are
over every call's own duration. Sums are bincounts over a dense numbering of the functions,
never a loop per call; a session is counted chunk by chunk (the calls that ended in each) and
the rows merged (merge_stats), so memory follows the chunk, not the session.
"""

from __future__ import annotations

import numpy as np

from .calls import Calls, Step
from .pairing import dense_ids

STATS = np.dtype([
    ("function_id", "<u8"),
    ("calls", "<i8"),
    ("total_ns", "<i8"),
    ("self_ns", "<i8"),
    ("min_ns", "<i8"),
    ("max_ns", "<i8"),
])

SORT_KEYS = ("total", "self", "calls", "avg", "min", "max", "name")
COLUMNS = ("function_id", "duration_ns", "self_ns", "nested")  # of the calls function_stats reads


def function_stats(calls: Calls) -> np.ndarray:
    """One STATS row per function that was called, in function_id order."""
    ids, dense = dense_ids(calls["function_id"])
    k = len(ids)
    out = np.zeros(k, dtype=STATS)
    if k == 0:
        return out
    duration = calls["duration_ns"].view(np.int64)
    counted = duration * ~calls["nested"]
    out["function_id"] = ids
    out["calls"] = np.bincount(dense, minlength=k)
    out["total_ns"] = np.rint(np.bincount(dense, weights=counted, minlength=k))
    out["self_ns"] = np.rint(np.bincount(dense, weights=calls["self_ns"], minlength=k))
    out["min_ns"] = np.iinfo(np.int64).max
    np.minimum.at(out["min_ns"], dense, duration)
    np.maximum.at(out["max_ns"], dense, duration)
    return out


def step_stats(step: Step) -> np.ndarray:
    """The stats of the calls that ended in a step of the walk (calls.Plan(stats=True): the
    kernel's figures of the chunk's own calls, with those of the others)."""
    parts = [function_stats(step.done)]
    if step.own is not None:
        functions, own = step.own()
        rows = np.zeros(len(functions), dtype=STATS)
        rows["function_id"] = functions
        for i, name in enumerate(("calls", "total_ns", "self_ns", "min_ns", "max_ns")):
            rows[name] = own[i]
        parts.append(rows[rows["calls"] > 0])
    return merge_stats(parts)


def merge_stats(parts: list[np.ndarray]) -> np.ndarray:
    """The stats of several call tables (threads) as one: sums added, min and max kept."""
    rows = np.concatenate(parts) if parts else np.zeros(0, dtype=STATS)
    ids, inverse = np.unique(rows["function_id"], return_inverse=True)
    out = np.zeros(len(ids), dtype=STATS)
    out["function_id"] = ids
    for name in ("calls", "total_ns", "self_ns"):
        np.add.at(out[name], inverse, rows[name])
    out["min_ns"] = np.iinfo(np.int64).max
    np.minimum.at(out["min_ns"], inverse, rows["min_ns"])
    np.maximum.at(out["max_ns"], inverse, rows["max_ns"])
    return out


def sort_stats(stats: np.ndarray, key: str, names: dict[int, str]) -> np.ndarray:
    """Largest first (names alphabetically), ties by name."""
    name = np.array([names.get(int(f), f"0x{int(f):016x}") for f in stats["function_id"]])
    if key == "name":
        return stats[np.argsort(name, kind="stable")]
    values = {"total": stats["total_ns"], "self": stats["self_ns"], "calls": stats["calls"],
              "min": stats["min_ns"], "max": stats["max_ns"],
              "avg": stats["total_ns"] // np.maximum(stats["calls"], 1)}[key]
    return stats[np.lexsort((name, -values))]


def format_duration(ns: int) -> str:
    """uftrace's units: 86 ns, 578.555 us, 2.075 ms, 1.250  s (right-aligned by the caller)."""
    if ns < 1000:
        return f"{ns} ns"
    for unit, scale in (("us", 1e3), ("ms", 1e6)):
        if ns < scale * 1000:
            return f"{ns / scale:.3f} {unit}"
    return f"{ns / 1e9:.3f}  s"


def parse_duration(text: str) -> int:
    """'10us', '2.5ms', '1s', '300' (ns) -> ns; ValueError with the reason otherwise."""
    t = text.strip().lower()
    for unit, scale in (("ns", 1), ("us", 1_000), ("ms", 1_000_000), ("s", 1_000_000_000)):
        if t.endswith(unit):
            number = t[:-len(unit)]
            break
    else:
        number, scale = t, 1
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"expected a duration like 10us, 2.5ms or 1s, got {text!r}") from None
    if value < 0:
        raise ValueError(f"a duration must not be negative, got {text!r}")
    return int(round(value * scale))
