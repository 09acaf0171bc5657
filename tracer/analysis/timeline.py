"""A calls table as the begin and end of each call in the order they happened (the timeline
exports draw: Perfetto slices, Chrome B/E, speedscope O/C).

Begins and ends the recording saw (a CALL, a RETURN) are placed by their index_seq: exact, even
at equal timestamps, and no sort (a scatter over the chunk's span of index_seqs). The others
are placed by the rules of the calls table (calls.py): a call whose CALL came before the
recording (NO_CALL) begins before everything, outer first; a call still open at the end (OPEN)
ends after everything, inner first; a call left without returning (LEFT) ends just before the
first event at or after its end, inner first.
"""

from __future__ import annotations

import numpy as np

from .calls import OPEN, Calls


def edges(calls: Calls) -> tuple[np.ndarray, np.ndarray]:
    """(row, is_end): 2 x len(calls) entries, every call's begin and end, in time order. The
    calls are one thread's (a chunk, or a whole thread), in start order."""
    n = len(calls)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    call_seq, return_seq = calls["call_seq"], calls["return_seq"]
    seen_begin = np.flatnonzero(call_seq >= 0)
    seen_end = np.flatnonzero(return_seq >= 0)
    seqs = np.concatenate((call_seq[seen_begin], return_seq[seen_end]))
    if len(seqs):
        base = int(seqs.min())
        slot_row = np.full(int(seqs.max()) - base + 1, -1, dtype=np.int64)
        slot_end = np.zeros(len(slot_row), dtype=bool)
        slot_row[call_seq[seen_begin] - base] = seen_begin
        slot_row[return_seq[seen_end] - base] = seen_end
        slot_end[return_seq[seen_end] - base] = True
        used = slot_row >= 0
        row, is_end = slot_row[used], slot_end[used]
    else:
        row, is_end = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    # Ends not seen: before the first event at or after them (OPEN: after everything).
    unseen = np.flatnonzero(return_seq < 0)
    if len(unseen):
        ts = np.where(is_end, calls["end_ns"][row], calls["start_ns"][row])
        at = np.searchsorted(ts, calls["end_ns"][unseen], side="left")
        at[(calls["flags"][unseen] & OPEN) != 0] = len(row)
        order = np.lexsort((-calls["depth"][unseen].astype(np.int64), at))
        row = np.insert(row, at[order], unseen[order])
        is_end = np.insert(is_end, at[order], True)
    # Begins not seen (the first rows, outer first): before everything.
    unseen = np.flatnonzero(call_seq < 0)
    row = np.concatenate((unseen, row))
    is_end = np.concatenate((np.zeros(len(unseen), dtype=bool), is_end))
    return row, is_end
