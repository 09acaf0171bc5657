"""An independent oracle for the calls table: a plain stack over one thread's events, one event at
a time, in a few lines of Python (the calls table's rules, written the obvious way)."""

from __future__ import annotations

CALL, RETURN, EXCEPTION = 1, 2, 3
OPEN, NO_CALL, LEFT, ORPHAN = 1, 2, 4, 8


def pair_by_stack(events, begins_inside=False, timeline=None):
    """events: (timestamp, function, kind) per index_seq. Returns a dict per call, keyed by
    (call_seq, return_seq, depth): function, start, end, duration, self, depth, parent (its key),
    flags, nested. `begins_inside`: the thread may begin inside calls (the RETURNs that take
    the count of open calls below zero close calls open from its first event). `timeline`, a
    list: gets (is_end, key) for every begin and end in the order the stack meets them (a
    RETURN of a function that was not open is in no timeline)."""
    first, last = events[0][0], events[-1][0]
    calls, stack = {}, []
    order = []  # (is_end, entry) as met

    def open_call(seq, fid, start):
        parent = stack[-1] if stack else None
        nested = any(e["function"] == fid for e in stack)
        entry = {"call_seq": seq, "function": fid, "start": start, "depth": len(stack),
                 "parent": parent, "nested": nested, "children": 0, "flags": 0}
        stack.append(entry)
        order.append((False, entry))

    def close(entry, end, return_seq, flags):
        entry.update(end=end, return_seq=return_seq, flags=entry["flags"] | flags)
        entry["duration"] = end - entry["start"]
        if entry["parent"] is not None:
            entry["parent"]["children"] += entry["duration"]
        calls[(entry["call_seq"], return_seq, entry["depth"])] = entry
        order.append((True, entry))

    if begins_inside:
        level, outer = 0, []
        for seq, (ts, fid, kind) in enumerate(events):
            level += 1 if kind == CALL else -1 if kind in (RETURN, EXCEPTION) else 0
            if level < 0:
                outer.append(fid)
                level = 0
        for fid in reversed(outer):
            open_call(-1, fid, first)
            stack[-1]["flags"] = NO_CALL
    for seq, (ts, fid, kind) in enumerate(events):
        if kind == CALL:
            open_call(seq, fid, ts)
        elif kind in (RETURN, EXCEPTION):
            found = [i for i, e in enumerate(stack) if e["function"] == fid]
            if not found:  # not open: its CALL came before the recording
                calls[(-1, seq, len(stack))] = {"call_seq": -1, "return_seq": seq, "function": fid,
                                    "start": first, "end": ts, "duration": ts - first,
                                    "depth": len(stack), "parent": None, "nested": False,
                                    "children": 0, "flags": NO_CALL | ORPHAN}
                continue
            while len(stack) > found[-1] + 1:  # passed over: left without returning
                close(stack.pop(), ts, -1, LEFT)
            close(stack.pop(), ts, seq, LEFT if kind == EXCEPTION else 0)
    while stack:
        close(stack.pop(), last, -1, OPEN)
    if timeline is not None:
        timeline.extend((is_end, (e["call_seq"], e["return_seq"], e["depth"]))
                        for is_end, e in order)
    out = {}
    for key, c in calls.items():
        parent = c["parent"]
        out[key] = {"function": c["function"], "start": c["start"], "end": c["end"],
                    "duration": c["duration"], "self": max(c["duration"] - c["children"], 0),
                    "depth": c["depth"], "flags": c["flags"], "nested": c["nested"],
                    "parent": None if parent is None else (
                        parent["call_seq"], parent["return_seq"], parent["depth"])}
    return out
