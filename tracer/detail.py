"""--detail: every detail record is persisted, in the drain's own order (index first).

The hot path publishes a detail record just before the index event it links
to, so a pass can see a record whose index event it has not drained yet.
Such records wait for the next pass: a detail event is never written before
its index event, so a killed tracer leaves at worst links past the end of a
recovered detail.atf (which readers expect), never the other way round.
"""

from __future__ import annotations

import numpy as np

from atf.records import gather, walk_records
from atf.writer import ThreadWriter


class AlwaysDetail:
    def __init__(self) -> None:
        self._carry: dict[int, np.ndarray] = {}
        self.persisted = 0
        self.unlinked = 0  # records whose index event never came (target died in between)

    def feed(self, slot: int, data: np.ndarray) -> None:
        carry = self._carry.get(slot)
        self._carry[slot] = data if carry is None or not len(carry) else np.concatenate((carry, data))

    def settle(self, writers: list[ThreadWriter], now_ns: int) -> None:
        for slot, data in self._carry.items():
            if not len(data):
                continue
            walk = walk_records(data, 0, len(data))
            if walk.problem is not None:
                raise RuntimeError(f"malformed detail records from thread slot {slot}: "
                                   f"{walk.problem}")
            seqs = gather(data, walk.offsets, 8, "<u4", walk.stride)
            ready = int(np.searchsorted(seqs, writers[slot].index_count, "left"))
            cut = int(walk.offsets[ready]) if ready < len(walk.offsets) else walk.end
            if ready:
                writers[slot].append_detail(data[:cut])
                self.persisted += ready
            self._carry[slot] = data[cut:]

    def finish(self, writers: list[ThreadWriter], now_ns: int) -> None:
        self.settle(writers, now_ns)
        for slot, data in self._carry.items():
            if len(data):
                self.unlinked += len(walk_records(data, 0, len(data)).offsets)
        self._carry.clear()
