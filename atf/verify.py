"""atf.verify(path): every check a session or file can fail, reported with file and offset.

Verification never stops at the first problem: it opens what it can and reports
each problem found. A file without a footer that reads cleanly is not a
problem; it is reported as `recovered` (the writer was killed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .format import (DETAIL_MAGIC, DETAIL_TYPE_NAMES, EVENT_KIND_NAMES, INDEX_EVENT_SIZE,
                     NO_DETAIL_SEQ, REVISION_1, U32_MAX, crc32c)
from .errors import AtfError
from .reader import CLEAN, DetailReader, IndexReader
from .manifest import MANIFEST, ThreadEntry, read_manifest
from .session import find_process_dir, process_dirs, scan_thread_ids

_MAX_PROBLEMS_PER_CHECK = 5


@dataclass
class Problem:
    path: str
    offset: int | None
    message: str

    def __str__(self) -> str:
        where = self.path + (f" @ {self.offset}" if self.offset is not None else "")
        return f"{where}: {self.message}"


@dataclass
class FileStatus:
    path: str
    state: str  # clean | recovered | unreadable
    events: int = 0
    note: str | None = None


@dataclass
class VerifyReport:
    path: str
    files: list[FileStatus] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def recovered(self) -> bool:
        return any(f.state == "recovered" for f in self.files)

    def add(self, path: Path | str, offset: int | None, message: str) -> None:
        self.problems.append(Problem(str(path), offset, message))

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "ok": self.ok,
                "state": "problems" if not self.ok else
                ("recovered" if self.recovered else "clean"),
                "files": [vars(f) for f in self.files],
                "problems": [vars(p) for p in self.problems]}


def verify(path: str | os.PathLike) -> VerifyReport:
    """Verify a session directory, a thread_N directory, or one .atf file."""
    p = Path(path)
    report = VerifyReport(str(p))
    if p.is_file():
        _verify_file(p, report)
        return report
    if p.is_dir() and (p / "index.atf").exists():
        _verify_thread(p, report)
        return report
    processes = process_dirs(p) if p.is_dir() and not (p / MANIFEST).exists() else []
    if len(processes) > 1:  # a recording of several processes: each is a session of its own
        for process in processes:
            _verify_process(process, report)
        return report
    try:
        process_dir = find_process_dir(p)
    except AtfError as e:
        report.add(p, None, e.reason)
        return report
    report.path = str(process_dir)
    _verify_process(process_dir, report)
    return report


def _verify_file(path: Path, report: VerifyReport) -> None:
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as e:
        report.add(path, None, f"cannot read: {e.strerror}")
        return
    if magic == DETAIL_MAGIC:
        _open_detail(path, report)
    else:
        _open_index(path, report)


def _open_index(path: Path, report: VerifyReport) -> IndexReader | None:
    try:
        reader = IndexReader(path)
    except AtfError as e:
        report.add(path, e.offset, e.reason)
        report.files.append(FileStatus(str(path), "unreadable"))
        return None
    report.files.append(FileStatus(str(path), reader.state, len(reader),
                                   None if reader.state == CLEAN else
                                   "no footer: writer did not finish; complete events kept"))
    _check_index(reader, report)
    return reader


def _check_index(r: IndexReader, report: VerifyReport) -> None:
    ev = r.events
    n = len(ev)
    if r.revision == REVISION_1 and n:
        bad_tid = np.flatnonzero(ev["thread_id"] != r.thread_id)
        for i in bad_tid[:_MAX_PROBLEMS_PER_CHECK]:
            report.add(r.path, _event_offset(r, i), f"event {i}: thread_id "
                       f"{int(ev['thread_id'][i])}, header says {r.thread_id}")
    if n:
        bad_kind = np.flatnonzero(~np.isin(ev["event_kind"], list(EVENT_KIND_NAMES)))
        for i in bad_kind[:_MAX_PROBLEMS_PER_CHECK]:
            report.add(r.path, _event_offset(r, i) + 20,
                       f"event {i}: unknown event_kind {int(ev['event_kind'][i])}")
        ts = r.timestamps
        backwards = np.flatnonzero(ts[1:] < ts[:-1])
        for i in backwards[:_MAX_PROBLEMS_PER_CHECK]:
            report.add(r.path, _event_offset(r, i + 1),
                       f"event {i + 1}: timestamp {int(ts[i + 1])} is before the previous "
                       f"event's {int(ts[i])}")
        if len(backwards) > _MAX_PROBLEMS_PER_CHECK:
            report.add(r.path, None, f"{len(backwards)} timestamps out of order in all")
    if r.footer is None:
        return
    h, f = r.header, r.footer
    saturated = min(n, U32_MAX) if r.revision == REVISION_1 else n
    if int(h["event_count"]) != saturated:
        report.add(r.path, 28 if r.revision == 1 else 24,
                   f"header event_count {int(h['event_count'])}, footer says {n}")
    if int(f["bytes_written"]) != n * INDEX_EVENT_SIZE:
        report.add(r.path, r.footer_offset + 32,
                   f"footer bytes_written {int(f['bytes_written'])}, expected {n * 32}")
    if int(h["footer_offset"]) not in (0, r.footer_offset):
        report.add(r.path, 40, f"header footer_offset {int(h['footer_offset'])}, footer found "
                   f"at {r.footer_offset}")
    if n:
        first, last = int(ev["timestamp_ns"][0]), int(ev["timestamp_ns"][-1])
        for name, where, value in (("footer", r.footer_offset + 16, f),
                                   ("header", 48, h)):
            if name == "header" and int(h["footer_offset"]) == 0:
                continue  # killed between footer and header rewrite: header not final
            if (int(value["time_start_ns"]), int(value["time_end_ns"])) != (first, last):
                report.add(r.path, where, f"{name} time range {int(value['time_start_ns'])}.."
                           f"{int(value['time_end_ns'])}, events span {first}..{last}")
    _check_crc(r.path, int(f["checksum"]), r.raw_events, r.footer_offset + 4, report)


def _check_crc(path: Path, expected: int, data: np.ndarray, where: int,
               report: VerifyReport) -> None:
    if expected == 0:
        return
    actual = crc32c(memoryview(np.ascontiguousarray(data)))
    if actual != expected:
        report.add(path, where, f"checksum 0x{expected:08x} in footer, events section has "
                   f"0x{actual:08x}")


def _event_offset(r: IndexReader, i: int) -> int:
    return r.events_offset + int(i) * INDEX_EVENT_SIZE


def _open_detail(path: Path, report: VerifyReport) -> DetailReader | None:
    try:
        reader = DetailReader(path)
    except AtfError as e:
        report.add(path, e.offset, e.reason)
        report.files.append(FileStatus(str(path), "unreadable"))
        return None
    note = None
    if reader.problem is not None:
        report.add(path, reader.problem.offset, reader.problem.reason)
        note = "a malformed record: the lane is read up to it"
    elif reader.state != CLEAN:
        note = "no footer: writer did not finish; complete events kept"
        if reader.recovery_note:
            note += f" (stopped at: {reader.recovery_note})"
    report.files.append(FileStatus(str(path), reader.state, len(reader), note))
    _check_detail(reader, report)
    return reader


def _check_detail(d: DetailReader, report: VerifyReport) -> None:
    n = len(d)
    ts = d.timestamps
    backwards = np.flatnonzero(ts[1:] < ts[:-1]) if n else []
    for i in backwards[:_MAX_PROBLEMS_PER_CHECK]:
        report.add(d.path, int(d.offsets[i + 1]) + 16,
                   f"detail event {i + 1}: timestamp before the previous event's")
    bad_type = np.flatnonzero(~np.isin(d.event_types, list(DETAIL_TYPE_NAMES))) if n else []
    for i in bad_type[:_MAX_PROBLEMS_PER_CHECK]:
        report.add(d.path, int(d.offsets[i]) + 4, f"detail event {i}: unknown event_type")
    if d.footer is None or d.problem is not None:
        return  # a degraded lane's footer describes records no longer read
    h, f = d.header, d.footer
    length = d.events_end - d.events_offset
    if (int(h["event_count"]), int(h["bytes_length"])) != (n, length):
        report.add(d.path, 28, f"header says {int(h['event_count'])} events in "
                   f"{int(h['bytes_length'])} bytes, found {n} in {length}")
    if n:
        seqs = d.index_seqs
        lo, hi = int(seqs.min()), int(seqs.max())
        if (int(h["index_seq_start"]), int(h["index_seq_end"])) != (lo, hi):
            report.add(d.path, 44, f"header index_seq range {int(h['index_seq_start'])}.."
                       f"{int(h['index_seq_end'])}, events link {lo}..{hi}")
        if (int(f["time_start_ns"]), int(f["time_end_ns"])) != (int(ts[0]), int(ts[-1])):
            report.add(d.path, d.footer_offset + 24, "footer time range does not match events")
    _check_crc(d.path, int(f["checksum"]), d.raw_events, d.footer_offset + 4, report)


def _verify_thread(thread_dir: Path, report: VerifyReport) -> tuple[int, int] | None:
    """Both lanes of one thread and the links between them; returns (index, detail) counts."""
    index = _open_index(thread_dir / "index.atf", report)
    detail_path = thread_dir / "detail.atf"
    detail = _open_detail(detail_path, report) if detail_path.exists() else None
    if index is None:
        return None
    if index.has_detail and not detail_path.exists():
        report.add(index.path, 8, "header flag has_detail_file is set but detail.atf is missing")
    if detail_path.exists() and not index.has_detail and index.footer is not None:
        report.add(index.path, 8, "detail.atf exists but the header flag has_detail_file is 0")
    if detail is not None:
        _check_links(index, detail, report)
    elif np.any(index.events["detail_seq"] != NO_DETAIL_SEQ):
        i = int(np.flatnonzero(index.events["detail_seq"] != NO_DETAIL_SEQ)[0])
        report.add(index.path, _event_offset(index, i) + 28,
                   f"event {i} links detail_seq {int(index.events['detail_seq'][i])} "
                   "but there is no detail.atf")
    return len(index), (len(detail) if detail is not None else 0)


def _check_links(index: IndexReader, detail: DetailReader, report: VerifyReport) -> None:
    """Links both ways, symmetric, and detail.atf compact (every detail event linked)."""
    ev = index.events
    n_index, n_detail = len(ev), len(detail)
    forward = ev["detail_seq"].astype(np.int64)
    linked = np.flatnonzero(forward != NO_DETAIL_SEQ)
    targets = forward[linked]
    out = linked[targets >= n_detail]
    if detail.state != CLEAN and len(out):
        # The writer links first and appends detail second: a kill cut the detail lane.
        status = next(f for f in report.files if f.path == str(detail.path))
        status.note = (status.note or "") + f"; {len(out)} index links past its recovered end"
        out = out[:0]
    for i in out[:_MAX_PROBLEMS_PER_CHECK]:
        report.add(index.path, _event_offset(index, i) + 28,
                   f"event {i}: detail_seq {int(forward[i])} past the end of detail.atf "
                   f"({n_detail} events)")
    back = detail.index_seqs.astype(np.int64)
    past = np.flatnonzero(back >= n_index)
    for j in past[:_MAX_PROBLEMS_PER_CHECK]:
        report.add(detail.path, int(detail.offsets[j]) + 8,
                   f"detail event {j}: index_seq {int(back[j])} past the end of index.atf "
                   f"({n_index} events)")
    ok = linked[targets < n_detail]
    asym = ok[back[forward[ok]] != ok]
    for i in asym[:_MAX_PROBLEMS_PER_CHECK]:
        report.add(index.path, _event_offset(index, i) + 28,
                   f"event {i} links detail {int(forward[i])}, which links back to index "
                   f"{int(back[forward[i]])}")
    in_range = np.flatnonzero(back < n_index)
    unlinked = in_range[forward[back[in_range]] != in_range]
    for j in unlinked[:_MAX_PROBLEMS_PER_CHECK]:
        report.add(detail.path, int(detail.offsets[j]) + 8,
                   f"detail event {j} is not linked from index event {int(back[j])} "
                   "(detail.atf must be compact: every event linked both ways)")
    if len(unlinked) > _MAX_PROBLEMS_PER_CHECK or len(asym) > _MAX_PROBLEMS_PER_CHECK:
        report.add(detail.path, None, f"{len(asym)} asymmetric and {len(unlinked)} unlinked "
                   "detail links in all")
    pairs = ok[back[forward[ok]] == ok]
    if len(pairs):
        dts = detail.timestamps[forward[pairs]]
        differ = pairs[dts != ev["timestamp_ns"][pairs]]
        for i in differ[:_MAX_PROBLEMS_PER_CHECK]:
            report.add(detail.path, None, f"index event {i} and its detail event have "
                       "different timestamps")


def _verify_process(process_dir: Path, report: VerifyReport) -> None:
    manifest = None
    try:
        manifest = read_manifest(process_dir)
    except AtfError as e:
        report.add(e.path or process_dir, None, e.reason)
    if manifest is not None:
        for problem in manifest.problems:
            report.add(process_dir / MANIFEST, None, problem)
    on_disk = scan_thread_ids(process_dir)
    ids = on_disk
    if manifest is not None and manifest.threads is not None:
        ids = listed = [t.id for t in manifest.threads]
        # Bounded by what is on disk: a manifest listing millions of threads that do not
        # exist costs one set difference and a few lines, not a million checks.
        missing = sorted(set(listed) - set(on_disk))
        for tid in missing[:_MAX_PROBLEMS_PER_CHECK]:
            report.add(process_dir / MANIFEST, None,
                       f"lists thread {tid} but thread_{tid}/ does not exist")
        if len(missing) > _MAX_PROBLEMS_PER_CHECK:
            report.add(process_dir / MANIFEST, None, f"{len(missing):,} listed threads have "
                       f"no directory in all ({len(on_disk):,} thread directories exist)")
        for extra in sorted(set(on_disk) - set(listed)):
            report.add(process_dir / f"thread_{extra}", None,
                       "thread directory not listed in manifest.json")
    if not ids and not on_disk and manifest is None:  # a manifest may say no thread ran
        report.add(process_dir, None, "session has no threads")
    present = set(on_disk)
    for tid in ids:
        if tid not in present:
            continue
        thread_dir = process_dir / f"thread_{tid}"
        counts = _verify_thread(thread_dir, report)
        entry = manifest.thread(tid) if manifest is not None else None
        if counts and entry:
            _check_manifest_thread(entry, counts, thread_dir, process_dir / MANIFEST, report)


def _check_manifest_thread(entry: ThreadEntry, counts: tuple[int, int], thread_dir: Path,
                           manifest_path: Path, report: VerifyReport) -> None:
    n_index, n_detail = counts
    if entry.index_events is not None and entry.index_events != n_index:
        report.add(manifest_path, None, f"thread {entry.id}: manifest says {entry.index_events} "
                   f"index events, {thread_dir.name}/index.atf holds {n_index}")
    if entry.detail_events is not None and entry.detail_events != n_detail:
        report.add(manifest_path, None, f"thread {entry.id}: manifest says "
                   f"{entry.detail_events} detail events, found {n_detail}")
    has = entry.has_detail
    if has is not None and has != (thread_dir / "detail.atf").exists():
        report.add(manifest_path, None, f"thread {entry.id}: manifest has_detail={has} but "
                   f"detail.atf {'is missing' if has else 'exists'}")
