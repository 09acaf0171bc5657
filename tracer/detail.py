"""--detail: every detail record is persisted, in the drain's own order (index first).

The hot path publishes a detail record just before the index event it links
to, so a pass can see a record whose index event it has not drained yet.
Such records wait for the next pass: a detail event is never written before
its index event, so a killed tracer leaves at worst links past the end of a
recovered detail.atf (which readers expect), never the other way round.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from atf.records import Walk, gather
from atf.writer import ThreadWriter


class AlwaysDetail:
    def __init__(self) -> None:
        self._queues: dict[int, deque[tuple[np.ndarray, Walk]]] = {}
        self.persisted = 0
        self.unlinked = 0  # records whose index event never came (target died in between)

    def feed(self, slot: int, data: np.ndarray, walk: Walk) -> None:
        if len(walk.offsets):
            self._queues.setdefault(slot, deque()).append((data, walk))

    def settle(self, writers: list[ThreadWriter], now_ns: int) -> None:
        for slot, queue in self._queues.items():
            self._settle_thread(queue, writers[slot])
            # What waits for its index events may be a view of the ring: keep a copy.
            for i, (data, walk) in enumerate(queue):
                if data.base is not None:
                    queue[i] = (data.copy(), walk)

    def _settle_thread(self, queue: deque[tuple[np.ndarray, Walk]], writer: ThreadWriter) -> None:
        while queue:
            data, walk = queue[0]
            last = int(gather(data, walk.offsets[-1:], 8, "<u4")[0])
            if last < writer.index_count:  # the usual case: every index event is written
                ready = len(walk.offsets)
            else:
                seqs = gather(data, walk.offsets, 8, "<u4", walk.stride)
                ready = int(np.searchsorted(seqs, writer.index_count, "left"))
            if ready == len(walk.offsets):
                writer.append_detail(data, walk)
                self.persisted += ready
                queue.popleft()
                continue
            if ready:  # the rest waits for its index events (a record or two)
                cut = int(walk.offsets[ready])
                writer.append_detail(data[:cut], Walk(walk.offsets[:ready], cut, None, None,
                                                      walk.stride))
                self.persisted += ready
                queue[0] = (data[cut:], Walk(walk.offsets[ready:] - cut, len(data) - cut, None,
                                             None, walk.stride))
            return

    def finish(self, writers: list[ThreadWriter], now_ns: int) -> None:
        self.settle(writers, now_ns)
        for queue in self._queues.values():
            for _, walk in queue:
                self.unlinked += len(walk.offsets)
        self._queues.clear()
