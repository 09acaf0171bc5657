"""Per-function statistics of a calls table (`ada report`), as uftrace's report counts them.

Total time counts a recursion once: a call made inside another call of the same function (on
the same thread) adds to Calls and to Self, not again to Total. Avg/Min/Max are over every
call's own duration. Sums are bincounts over a dense numbering of the functions, never a loop
per call; a session is counted thread by thread and the rows merged (merge_stats), so memory
follows the largest thread, not the whole session.
"""

from __future__ import annotations

import numpy as np

from .calls import Calls

STATS = np.dtype([
    ("function_id", "<u8"),
    ("calls", "<i8"),
    ("total_ns", "<i8"),
    ("self_ns", "<i8"),
    ("min_ns", "<i8"),
    ("max_ns", "<i8"),
])

SORT_KEYS = ("total", "self", "calls", "avg", "min", "max", "name")


def dense_ids(fid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct function_ids ascending, each call's index among them), without sorting the
    calls when the ids are ada's (module_id << 32 | symbol_index, both counted from 0 among
    the modules and functions selected) and span less than a few times the calls: a lookup
    table that size is cheaper than a sort."""
    if len(fid) == 0:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    module = (fid >> np.uint64(32)).astype(np.int64)
    symbol = (fid & np.uint64(0xFFFFFFFF)).astype(np.int64)
    if int(module.max()) < (1 << 16) and int(symbol.max()) < (1 << 22):
        width = int(symbol.max()) + 1
        slot = module * width + symbol
        if int(slot.max()) < 4 * len(fid) + (1 << 16):
            used = np.flatnonzero(np.bincount(slot))
            index = np.full(int(slot.max()) + 1, -1, dtype=np.int64)
            index[used] = np.arange(len(used))
            ids = ((used // width).astype(np.uint64) << np.uint64(32)) | \
                (used % width).astype(np.uint64)
            return ids, index[slot]
    ids, inverse = np.unique(fid, return_inverse=True)
    return ids, inverse.astype(np.int64)


def nested_in_same_function(calls: Calls, dense: np.ndarray | None = None) -> np.ndarray:
    """True for each call made inside another call of the same function on the same thread.

    Calls nest, so a call is inside an earlier one of its (thread, function) exactly when an
    earlier one ends at or after its end: a running maximum of the ends, per group. Only a
    function called at more than one depth can nest in itself: the others are skipped."""
    n = len(calls)
    out = np.zeros(n, dtype=bool)
    if n == 0:
        return out
    if dense is None:
        dense = dense_ids(calls["function_id"])[1]
    k = int(dense.max()) + 1
    depth = calls["depth"].astype(np.int64)
    low = np.full(k, np.iinfo(np.int64).max)
    high = np.full(k, -1)
    np.minimum.at(low, dense, depth)
    np.maximum.at(high, dense, depth)
    candidates = np.flatnonzero((low != high)[dense])
    if len(candidates) == 0:
        return out
    sub = calls[candidates]
    order = np.lexsort((sub["depth"], sub["start_ns"], dense[candidates], sub["thread"]))
    thread, group = sub["thread"][order], dense[candidates][order]
    end = sub["end_ns"][order].astype(np.int64)
    starts = np.flatnonzero(np.r_[True, (thread[1:] != thread[:-1]) | (group[1:] != group[:-1])])
    bounds = np.r_[starts, len(order)]
    rows = candidates[order]
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b - a < 2:
            continue
        previous = np.maximum.accumulate(end[a:b - 1])
        out[rows[a + 1:b]] = previous >= end[a + 1:b]
    return out


def function_stats(calls: Calls) -> np.ndarray:
    """One STATS row per function that was called, in function_id order."""
    ids, dense = dense_ids(calls["function_id"])
    k = len(ids)
    out = np.zeros(k, dtype=STATS)
    if k == 0:
        return out
    duration = calls["duration_ns"].astype(np.int64)
    counted = np.where(nested_in_same_function(calls, dense), 0, duration)
    out["function_id"] = ids
    out["calls"] = np.bincount(dense, minlength=k)
    out["total_ns"] = np.rint(np.bincount(dense, weights=counted, minlength=k))
    out["self_ns"] = np.rint(np.bincount(dense, weights=calls["self_ns"], minlength=k))
    out["min_ns"] = np.iinfo(np.int64).max
    np.minimum.at(out["min_ns"], dense, duration)
    np.maximum.at(out["max_ns"], dense, duration)
    return out


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
