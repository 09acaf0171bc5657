"""SessionReader: every thread of a session, its manifest, and the merge by timestamp.

A session opens with a full manifest, a minimal one (`{"threads": [{"id": 0}]}`
as the reference readers write) or none at all (the `thread_*` directories are
scanned). The merge yields events in timestamp order across threads with bounded
memory, for sessions of hundreds of millions of events: `merged_iter()` one
IndexEvent at a time (the seed API's merge-sort iterator), `merged_chunks()` as
(thread index, index_seq) arrays, `merged_order()` as two whole arrays.

Words: the session directory is `session_*` (one `ada trace`); each traced process has a
process directory in it (`pid_N`, `pid_N_execK`). A SessionReader (the seed API's name) reads
one process directory; `session_dir` names only the first kind, `process_dir` the second.
"""

from __future__ import annotations

import bisect
import os
from pathlib import Path
from typing import Iterator

import numpy as np

from .format import INDEX_EVENT
from .errors import AtfError, ManifestError, NotASessionError
from .manifest import MANIFEST, Manifest, read_manifest
from .reader import CLEAN, DEGRADED, RECOVERED, IndexEvent, ThreadReader

MERGE_CHUNK_EVENTS = 1 << 21


def find_process_dir(path: str | os.PathLike) -> Path:
    """The pid_N directory for a path to it, to its session_* parent, or to a thread_N.

    Raises NotASessionError with the reason when nothing there is a session.
    """
    p = Path(path)
    if not p.exists():
        raise NotASessionError("no such file or directory", p)
    if not p.is_dir():
        raise NotASessionError("not a directory (expected a session directory)", p)
    if _looks_like_session(p):
        return p
    pids = process_dirs(p)
    if len(pids) == 1:
        return pids[0]
    if len(pids) > 1:
        names = ", ".join(c.name for c in pids)
        raise NotASessionError(f"holds several processes ({names}); give one of them", p)
    sessions = sorted(c.name for c in p.iterdir()
                      if c.is_dir() and c.name.startswith("session_") and process_dirs(c))
    if sessions:  # `ada trace -o DIR` writes DIR/session_<time>/pid_N
        shown = ", ".join(sessions[-3:]) + (f" and {len(sessions) - 3} older" if len(sessions) > 3 else "")
        raise NotASessionError(f"holds recordings, not one: {shown}; give one of them", p)
    raise NotASessionError("not an ATF session (no manifest.json and no thread_* directory)", p)


def process_dirs(path: str | os.PathLike) -> list[Path]:
    """The process directories (pid_N, pid_N_execK) of a session_* directory, by name."""
    p = Path(path)
    if not p.is_dir():
        return []
    return sorted((c for c in p.iterdir()
                   if c.is_dir() and c.name.startswith("pid_") and _looks_like_session(c)),
                  key=lambda c: (len(c.name), c.name))


def _looks_like_session(p: Path) -> bool:
    return (p / MANIFEST).is_file() or any(
        c.name.startswith("thread_") and c.is_dir() for c in p.iterdir())


def check_threads_exist(ids: list[int], process_dir: Path) -> None:
    """Every thread the manifest lists has its directory: checked against one listing of the
    directory, so a manifest listing millions of threads costs no more than reading it."""
    present = set(scan_thread_ids(process_dir))
    missing = [i for i in ids if i not in present]
    if missing:
        shown = ", ".join(f"thread_{i}" for i in missing[:3])
        more = f" and {len(missing) - 3:,} more" if len(missing) > 3 else ""
        raise ManifestError(f"lists {len(ids):,} thread(s); {len(missing):,} have no directory "
                            f"({shown}{more})", process_dir / MANIFEST)


def scan_thread_ids(process_dir: Path) -> list[int]:
    ids = []
    for c in process_dir.iterdir():
        if c.is_dir() and c.name.startswith("thread_") and c.name[7:].isdigit():
            ids.append(int(c.name[7:]))
    return sorted(ids)


class SessionReader:
    """All threads of one session (pid_N directory)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = find_process_dir(path)
        self.manifest: Manifest | None = read_manifest(self.path)
        if self.manifest is not None and self.manifest.threads is not None:
            ids = [t.id for t in self.manifest.threads]
            check_threads_exist(ids, self.path)
        else:
            ids = scan_thread_ids(self.path)
        self.threads = [ThreadReader(self.path / f"thread_{i}", i) for i in ids]

    # --- facts ------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.threads)

    def event_count(self) -> int:
        """Index events of every thread."""
        return sum(len(t) for t in self.threads)

    def time_range(self) -> tuple[int, int] | None:
        ranges = [r for r in (t.index.time_range() for t in self.threads) if r]
        if not ranges:
            return None
        return min(r[0] for r in ranges), max(r[1] for r in ranges)

    @property
    def state(self) -> str:
        """degraded (a detail lane is read only up to a malformed record), recovered (a writer
        did not finish: every complete event kept) or clean."""
        states = {t.state for t in self.threads}
        return DEGRADED if DEGRADED in states else RECOVERED if RECOVERED in states else CLEAN

    @property
    def recovered(self) -> bool:
        return any(t.index.state == RECOVERED or (t.detail and t.detail.state == RECOVERED)
                   for t in self.threads)

    def thread(self, thread_id: int) -> ThreadReader:
        """The thread_N reader for N = thread_id (the thread's number in the session)."""
        for t in self.threads:
            if t.id == thread_id:
                return t
        raise AtfError(f"no thread {thread_id} in session (have "
                       f"{', '.join(str(t.id) for t in self.threads) or 'none'})", self.path)

    @property
    def arch(self) -> int:
        return self.threads[0].index.arch if self.threads else 0

    def symbol_names(self) -> dict[int, str]:
        """function_id -> name from the manifest's symbols (empty when there are none)."""
        return self.manifest.symbol_names() if self.manifest is not None else {}

    # --- merge ------------------------------------------------------------------

    def merged_iter(self, start_ns: int | None = None, end_ns: int | None = None,
                    threads: list[int] | None = None) -> Iterator[tuple[int, IndexEvent]]:
        """(thread index, IndexEvent) of every thread's events in timestamp order.

        The thread index indexes self.threads. Memory stays bounded (a chunk of merged_chunks
        at a time); for bulk work, merged_chunks() hands out arrays instead of objects.
        """
        for positions, seqs in self.merged_chunks(start_ns, end_ns, threads):
            rows = np.empty(len(seqs), dtype=INDEX_EVENT)
            for p in np.unique(positions).tolist():
                mine = positions == p
                rows[mine] = self.threads[p].index.events[seqs[mine]]
            for p, seq, row in zip(positions.tolist(), seqs.tolist(), rows.tolist()):
                yield p, IndexEvent(seq, *row)

    def merged_chunks(self, start_ns: int | None = None, end_ns: int | None = None,
                      threads: list[int] | None = None,
                      chunk_events: int = MERGE_CHUNK_EVENTS
                      ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(thread indexes, index_seqs) in timestamp order, a chunk of arrays at a time.

        Thread indexes index self.threads. Equal timestamps keep thread order. Only
        events with start_ns <= timestamp < end_ns are included when given; `threads`
        keeps only those thread_N ids.
        """
        chosen = [i for i, t in enumerate(self.threads) if threads is None or t.id in threads]
        ts_arrays = [self.threads[i].index.timestamps for i in chosen]
        lo = [0 if start_ns is None else bisect.bisect_left(ts, start_ns) for ts in ts_arrays]
        hi = [len(ts) if end_ns is None else bisect.bisect_left(ts, end_ns, l)
              for ts, l in zip(ts_arrays, lo)]
        total = sum(h - l for l, h in zip(lo, hi))
        if total == 0:
            return
        bounds = _chunk_bounds(ts_arrays, lo, hi, total, chunk_events)
        # Bisection, not np.searchsorted: that would copy each strided timestamp view.
        cuts = [[l] + [bisect.bisect_left(ts, int(b), l, h) for b in bounds] + [h]
                for ts, l, h in zip(ts_arrays, lo, hi)]
        chosen_arr = np.asarray(chosen, dtype=np.int32)
        for c in range(len(bounds) + 1):
            parts = [ts[cu[c]:cu[c + 1]] for ts, cu in zip(ts_arrays, cuts)]
            lens = np.array([len(p) for p in parts], dtype=np.int64)
            if lens.sum() == 0:
                continue
            order = np.argsort(np.concatenate(parts), kind="stable")
            which = np.repeat(np.arange(len(parts), dtype=np.int32), lens)[order]
            # index_seq = position in the concatenation - where that thread's part starts
            # + where the part starts in the thread's file: one offset per thread.
            shift = np.array([cu[c] for cu in cuts], dtype=np.int64) - (np.cumsum(lens) - lens)
            order += shift[which]
            yield chosen_arr[which], order

    def merged_order(self, start_ns: int | None = None, end_ns: int | None = None,
                     threads: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The whole merge as two arrays: thread positions and index_seqs.

        The outputs are allocated once and filled chunk by chunk: no list of chunks to
        concatenate, so memory stays at the size of the result.
        """
        total = self._count_in_range(start_ns, end_ns, threads)
        positions = np.empty(total, dtype=np.int32)
        seqs = np.empty(total, dtype=np.int64)
        filled = 0
        for a, b in self.merged_chunks(start_ns, end_ns, threads):
            positions[filled:filled + len(a)] = a
            seqs[filled:filled + len(b)] = b
            filled += len(a)
        return positions[:filled], seqs[:filled]

    def _count_in_range(self, start_ns: int | None, end_ns: int | None,
                        threads: list[int] | None) -> int:
        total = 0
        for t in self.threads:
            if threads is None or t.id in threads:
                ts = t.index.timestamps
                lo = 0 if start_ns is None else bisect.bisect_left(ts, start_ns)
                hi = len(ts) if end_ns is None else bisect.bisect_left(ts, end_ns, lo)
                total += max(0, hi - lo)
        return total


def _chunk_bounds(ts_arrays: list[np.ndarray], lo: list[int], hi: list[int], total: int,
                  chunk_events: int) -> np.ndarray:
    """Timestamps splitting the merge into chunks of about chunk_events, from a sample."""
    nchunks = total // chunk_events
    if nchunks < 2:
        return np.zeros(0, dtype=np.uint64)
    step = max(1, total // (nchunks * 64))
    sample = np.sort(np.concatenate([ts[l:h:step] for ts, l, h in zip(ts_arrays, lo, hi)]))
    picks = np.linspace(0, len(sample), nchunks + 1)[1:-1].astype(np.int64)
    return np.unique(sample[np.minimum(picks, len(sample) - 1)])


def open_session(path: str | os.PathLike) -> SessionReader:
    """Open a session directory (pid_N, or a session_* holding one pid_N)."""
    return SessionReader(path)

