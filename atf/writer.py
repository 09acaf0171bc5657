"""Writers: ThreadWriter for one thread's lanes, SessionWriter for the session layout.

Crash safety comes from the order of writes. A file starts with a complete
header (footer_offset 0), events are appended with whole-record writes, and
finalize writes the footer before it rewrites the header. A writer killed at any
moment therefore leaves a header, every complete event, and possibly a partial
last record that readers ignore (see docs/format.md, "Crash recovery").
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .format import (DETAIL_FOOTER, DETAIL_FOOTER_MAGIC, DETAIL_HEADER, DETAIL_MAGIC, ENDIAN_LITTLE,
                     FUNCTION_RECORD_FIXED_SIZE, FUNCTION_RECORD_R1, HEADER_SIZE, INDEX_EVENT,
                     INDEX_EVENT_SIZE, INDEX_FLAG_HAS_DETAIL_FILE, INDEX_FOOTER, INDEX_FOOTER_MAGIC,
                     INDEX_HEADER_R1, INDEX_MAGIC, MAX_STACK_BYTES, NO_DETAIL_SEQ, REVISION_1,
                     U32_MAX, crc32c, load_checksum)
from .direct import DirectStream
from .errors import WriterError
from .records import Walk, gather, walk_records

_PENDING_FLUSH_BYTES = 1 << 16
_REHASH_CHUNK = 1 << 23
_GO_DIRECT_ASK_BYTES = 32 << 20  # how often a lane with go_direct asks it again


def _byte_view(data: Any) -> memoryview:
    """A flat byte view of bytes-like data or a numpy array (no copy where it is contiguous:
    the drain's batches, a few thousand a second, take the short way)."""
    if isinstance(data, np.ndarray):
        if data.flags.c_contiguous:
            try:
                return memoryview(data).cast("B")
            except (TypeError, ValueError):  # a dtype the buffer protocol cannot describe
                pass
        return memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8))
    return memoryview(data).cast("B")


def _write_all(fd: int, data: Any, path: Path) -> None:
    view = _byte_view(data)
    try:
        while view:
            n = os.write(fd, view)
            view = view[n:]
    except OSError as e:
        raise WriterError(f"cannot write: {e.strerror}", path) from e


def _rehash(fd: int, start: int, length: int) -> int:
    """CRC32-C of a region read back from the file (after in-place patches)."""
    crc = 0
    pos = start
    end = start + length
    while pos < end:
        chunk = os.pread(fd, min(_REHASH_CHUNK, end - pos), pos)
        if not chunk:
            break
        crc = crc32c(chunk, crc)
        pos += len(chunk)
    return crc


class _Lane:
    """Shared bookkeeping of an append-only file with header, events and footer.

    With `go_direct(bytes_so_far)`, the events switch to a DirectStream (atf.direct) the first
    time it returns True (asked at the first append, then every 32 MiB), where the filesystem
    allows it; the header, footer and patches always use the ordinary descriptor.
    """

    def __init__(self, path: Path, header: np.ndarray,
                 go_direct: Callable[[int], bool] | None = None) -> None:
        self.path = path
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            raise WriterError(f"cannot create: {e.strerror}", path) from e
        _write_all(self.fd, header.tobytes(), path)
        self._go_direct = go_direct
        self._go_direct_asked_at = -_GO_DIRECT_ASK_BYTES  # ask before the first append
        self._stream: DirectStream | None = None
        self.count = 0
        self.bytes = 0
        self.crc = 0
        self.crc_stale = False
        self.time_start = 0
        self.time_end = 0

    def append(self, data: Any, count: int, first_ts: int, last_ts: int) -> None:
        data = _byte_view(data)
        if self._go_direct is not None and \
                self.bytes - self._go_direct_asked_at >= _GO_DIRECT_ASK_BYTES:
            self._go_direct_asked_at = self.bytes
            if self._go_direct(self.bytes):
                self._go_direct = None
                self._stream = DirectStream.open(self.path, self.fd, HEADER_SIZE + self.bytes)
        if self._stream is not None:
            self._stream.write(data)
        else:
            try:
                _write_all(self.fd, data, self.path)
            except WriterError:
                # A part of `data` may be in the file (a disk that filled up midway): cut it
                # off, so the file holds exactly the events counted here.
                try:
                    os.ftruncate(self.fd, HEADER_SIZE + self.bytes)
                    os.lseek(self.fd, HEADER_SIZE + self.bytes, os.SEEK_SET)
                except OSError:
                    pass
                raise
        self.crc = crc32c(data, self.crc)
        if self.count == 0:
            self.time_start = first_ts
        self.time_end = last_ts
        self.count += count
        self.bytes += data.nbytes

    def checksum(self) -> int:
        if self.crc_stale:
            self.crc = _rehash(self.fd, HEADER_SIZE, self.bytes)
            self.crc_stale = False
        return self.crc

    @property
    def direct(self) -> bool:
        """Whether the events go to a DirectStream now (bytes may sit in its staging ring)."""
        return self._stream is not None

    @property
    def direct_from(self) -> int | None:
        """The file offset at which the lane switched to a DirectStream, or None if no byte
        went to the disk directly (no switch, too little written since, or refused)."""
        s = self._stream
        return s.start if s is not None and s.direct_bytes else None

    def finish(self, footer: np.ndarray, header: np.ndarray) -> None:
        """Footer first, then the real header: a kill in between still reads as clean."""
        try:
            if self._stream is not None:
                self._stream.close()  # a failed stream leaves the file as a crash would
            os.pwrite(self.fd, footer.tobytes(), HEADER_SIZE + self.bytes)
            os.pwrite(self.fd, header.tobytes(), 0)
        except OSError as e:
            raise WriterError(f"cannot finalize: {e.strerror}", self.path) from e
        finally:
            fd, self.fd = self.fd, -1
            close_error = None
            try:
                os.close(fd)
            except OSError as e:
                close_error = e
        if close_error is not None:  # reached only when nothing failed before: that says more
            raise WriterError(f"cannot close: {close_error.strerror}", self.path) from close_error


class ThreadWriter:
    """Appends one thread's index events (and detail events, if any) to thread_N/.

    Bulk appends take a numpy array of format.INDEX_EVENT or raw 32-byte records
    exactly as the drain hands them over; single events go through a small
    buffer. detail.atf is created on the first detail event; `detail_go_direct` and
    `index_go_direct` say when each lane's events should go straight to the disk (see _Lane;
    the recorder's choice, as it writes GBs). An index lane written that way can no longer be
    patched (set_detail_seqs): a writer that links detail events afterwards keeps it cached.
    """

    def __init__(self, directory: str | os.PathLike, *, thread_id: int, arch: int, os_id: int,
                 clock_type: int, detail_go_direct: Callable[[int], bool] | None = None,
                 index_go_direct: Callable[[int], bool] | None = None) -> None:
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise WriterError(f"cannot create directory: {e.strerror}", self.directory) from e
        self.thread_id = thread_id
        self.arch = arch
        self.os_id = os_id
        self.clock_type = clock_type
        self.detail_go_direct = detail_go_direct
        self._detail: _Lane | None = None
        self._detail_seq_range: tuple[int, int] | None = None
        self._index = _Lane(self.directory / "index.atf", self._index_header(),
                            go_direct=index_go_direct)
        self._pending = bytearray()
        self._pending_count = 0
        self._pending_first_ts = 0
        self.closed = False

    # --- index lane -------------------------------------------------------------

    @property
    def index_count(self) -> int:
        return self._index.count + self._pending_count

    @property
    def detail_count(self) -> int:
        return self._detail.count if self._detail else 0

    @property
    def detail_direct_from(self) -> int | None:
        """The detail.atf offset from which events went straight to the disk, or None."""
        return self._detail.direct_from if self._detail else None

    @property
    def index_direct_from(self) -> int | None:
        """The index.atf offset from which events went straight to the disk, or None."""
        return self._index.direct_from

    @property
    def index_time_range(self) -> tuple[int, int] | None:
        """(first, last) timestamp of the index events flushed so far, or None."""
        return (self._index.time_start, self._index.time_end) if self._index.count else None

    def append_index(self, events: Any) -> int:
        """Append many index events; returns the index_seq of the first."""
        self._check_open()
        arr = _as_index_events(events, self._index.path)
        first = self.index_count
        if len(arr):
            self._flush_pending()
            self._index.append(arr, len(arr), int(arr["timestamp_ns"][0]),
                               int(arr["timestamp_ns"][-1]))
        return first

    def write_index_event(self, timestamp_ns: int, function_id: int, event_kind: int,
                          call_depth: int, detail_seq: int = NO_DETAIL_SEQ,
                          thread_id: int | None = None) -> int:
        """Append one index event; returns its index_seq."""
        self._check_open()
        rec = np.zeros((), dtype=INDEX_EVENT)
        rec["timestamp_ns"] = timestamp_ns
        rec["function_id"] = function_id
        rec["thread_id"] = self.thread_id if thread_id is None else thread_id
        rec["event_kind"] = event_kind
        rec["call_depth"] = call_depth
        rec["detail_seq"] = detail_seq
        if self._pending_count == 0:
            self._pending_first_ts = timestamp_ns
        self._pending += rec.tobytes()
        self._pending_count += 1
        seq = self.index_count - 1
        if len(self._pending) >= _PENDING_FLUSH_BYTES:
            self._flush_pending()
        return seq

    def set_detail_seq(self, index_seq: int, detail_seq: int) -> None:
        """Link an index event already written to a detail event (flight recorder).

        Link before appending the detail event: a kill in between then leaves a
        link past the end of a recovered detail lane, which readers expect.
        """
        self.set_detail_seqs(np.array([index_seq]), np.array([detail_seq]))

    def set_detail_seqs(self, index_seqs: np.ndarray, detail_seqs: np.ndarray) -> None:
        """set_detail_seq for many events (in increasing index_seq order), patching each block
        of the file in one write."""
        self._check_open()
        index_seqs = np.asarray(index_seqs, dtype=np.int64)
        detail_seqs = np.asarray(detail_seqs, dtype=np.uint32)
        if len(index_seqs) == 0:
            return
        if self._index.direct:
            raise WriterError("index events written straight to the disk cannot be patched "
                              "(give this writer no index_go_direct)", self._index.path)
        if index_seqs.min() < 0 or index_seqs.max() >= self.index_count:
            raise WriterError(f"index_seq range {int(index_seqs.min())}..{int(index_seqs.max())} "
                              f"not written yet ({self.index_count} events)", self._index.path)
        self._detail_lane()
        in_file = self._index.count
        pending = index_seqs >= in_file
        if pending.any():
            view = np.frombuffer(self._pending, dtype=INDEX_EVENT)
            view["detail_seq"][index_seqs[pending] - in_file] = detail_seqs[pending]
        seqs, values = index_seqs[~pending], detail_seqs[~pending]
        block = 1 << 16
        i = 0
        while i < len(seqs):
            lo = int(seqs[i])
            j = int(np.searchsorted(seqs, lo + block, "left"))
            hi = int(seqs[j - 1]) + 1
            offset = HEADER_SIZE + lo * INDEX_EVENT_SIZE
            try:
                raw = bytearray(os.pread(self._index.fd, (hi - lo) * INDEX_EVENT_SIZE, offset))
                events = np.frombuffer(raw, dtype=INDEX_EVENT)
                events["detail_seq"][seqs[i:j] - lo] = values[i:j]
                os.pwrite(self._index.fd, raw, offset)
            except OSError as e:
                raise WriterError(f"cannot patch detail_seq: {e.strerror}", self._index.path) from e
            self._index.crc_stale = True
            i = j

    def _flush_pending(self) -> None:
        if self._pending_count:
            last_ts = int.from_bytes(self._pending[-32:-24], "little")
            self._index.append(self._pending, self._pending_count, self._pending_first_ts,
                               last_ts)
            self._pending = bytearray()
            self._pending_count = 0

    # --- detail lane ------------------------------------------------------------

    def append_detail(self, records: Any, walk: Walk | None = None) -> int:
        """Append back-to-back revision 1 detail records; returns the first detail_seq.

        `walk` is walk_records() of exactly these bytes, when the caller already has it.
        """
        self._check_open()
        buf = np.frombuffer(_byte_view(records), dtype=np.uint8)
        if walk is None or walk.end != len(buf):
            walk = walk_records(buf, 0, len(buf))
        if walk.problem is not None:
            raise WriterError(f"malformed detail records at byte {walk.problem_offset}: "
                              f"{walk.problem}", self.directory / "detail.atf")
        first = self.detail_count
        n = len(walk.offsets)
        if n:
            self._flush_pending()  # index before detail: see set_detail_seq
            seqs = gather(buf, walk.offsets, 8, "<u4", walk.stride)
            ts = gather(buf, walk.offsets[[0, -1]], 16, "<u8")
            self._note_index_seqs(int(seqs.min()), int(seqs.max()))
            self._detail_lane().append(buf, n, int(ts[0]), int(ts[-1]))
        return first

    def write_detail_event(self, index_seq: int, timestamp_ns: int, event_type: int,
                           function_id: int, regs: Any = (), lr: int = 0, fp: int = 0,
                           sp: int = 0, stack: bytes = b"", flags: int = 0,
                           thread_id: int | None = None) -> int:
        """Append one function detail event; returns its detail_seq."""
        if len(stack) > MAX_STACK_BYTES:
            raise WriterError(f"stack window of {len(stack)} bytes exceeds "
                              f"{MAX_STACK_BYTES}", self.directory / "detail.atf")
        rec = np.zeros((), dtype=FUNCTION_RECORD_R1)
        rec["total_length"] = FUNCTION_RECORD_FIXED_SIZE + len(stack)
        rec["event_type"] = event_type
        rec["flags"] = flags
        rec["index_seq"] = index_seq
        rec["thread_id"] = self.thread_id if thread_id is None else thread_id
        rec["timestamp"] = timestamp_ns
        rec["function_id"] = function_id
        regs = list(regs) + [0] * (8 - len(regs))
        rec["regs"] = regs[:8]
        rec["lr"], rec["fp"], rec["sp"] = lr, fp, sp
        rec["stack_size"] = len(stack)
        return self.append_detail(rec.tobytes() + bytes(stack))

    def _note_index_seqs(self, lo: int, hi: int) -> None:
        cur = self._detail_seq_range
        self._detail_seq_range = (lo, hi) if cur is None else (min(cur[0], lo), max(cur[1], hi))

    def _detail_lane(self) -> _Lane:
        if self._detail is None:
            self._detail = _Lane(self.directory / "detail.atf", self._detail_header(),
                                 go_direct=self.detail_go_direct)
            # The index header says a detail file exists from now on.
            try:
                os.pwrite(self._index.fd, self._index_header().tobytes(), 0)
            except OSError as e:
                raise WriterError(f"cannot update header: {e.strerror}", self._index.path) from e
        return self._detail

    # --- headers, footers, finalize ----------------------------------------------

    def _index_header(self, final: bool = False) -> np.ndarray:
        h = np.zeros((), dtype=INDEX_HEADER_R1)
        h["magic"] = INDEX_MAGIC
        h["endian"] = ENDIAN_LITTLE
        h["version"] = REVISION_1
        h["arch"], h["os"] = self.arch, self.os_id
        h["flags"] = INDEX_FLAG_HAS_DETAIL_FILE if self._detail is not None else 0
        h["thread_id"] = self.thread_id
        h["clock_type"] = self.clock_type
        h["event_size"] = INDEX_EVENT_SIZE
        h["events_offset"] = HEADER_SIZE
        if final:
            h["event_count"] = min(self._index.count, U32_MAX)
            h["footer_offset"] = HEADER_SIZE + self._index.bytes
            h["time_start_ns"] = self._index.time_start
            h["time_end_ns"] = self._index.time_end
        return h

    def _detail_header(self, final: bool = False) -> np.ndarray:
        h = np.zeros((), dtype=DETAIL_HEADER)
        h["magic"] = DETAIL_MAGIC
        h["endian"] = ENDIAN_LITTLE
        h["version"] = REVISION_1
        h["arch"], h["os"] = self.arch, self.os_id
        h["thread_id"] = self.thread_id
        h["events_offset"] = HEADER_SIZE
        if final and self._detail is not None:
            h["event_count"] = self._detail.count
            h["bytes_length"] = self._detail.bytes
            lo, hi = self._detail_seq_range or (0, 0)
            h["index_seq_start"], h["index_seq_end"] = lo, hi
        return h

    def finalize(self) -> None:
        """Write footers (with CRC32-C) and the real headers. Idempotent."""
        if self.closed:
            return
        self.closed = True
        # Whatever fails, every step is tried: each lane is finished as far as it can be (the
        # detail already staged only links to index events already written). The first error
        # is raised.
        errors = []
        for step in (self._flush_pending, self._finish_detail, self._finish_index):
            try:
                step()
            except WriterError as e:
                errors.append(e)
            except OSError as e:
                errors.append(WriterError(f"cannot finalize: {e.strerror}", self.directory))
        if errors:
            raise errors[0]

    def _finish_detail(self) -> None:
        d = self._detail
        if d is None:
            return
        footer = np.zeros((), dtype=DETAIL_FOOTER)
        footer["magic"] = DETAIL_FOOTER_MAGIC
        footer["checksum"] = d.checksum()
        footer["event_count"] = d.count
        footer["bytes_length"] = d.bytes
        footer["time_start_ns"], footer["time_end_ns"] = d.time_start, d.time_end
        d.finish(footer, self._detail_header(final=True))

    def _finish_index(self) -> None:
        ix = self._index
        footer = np.zeros((), dtype=INDEX_FOOTER)
        footer["magic"] = INDEX_FOOTER_MAGIC
        footer["checksum"] = ix.checksum()
        footer["event_count"] = ix.count
        footer["time_start_ns"], footer["time_end_ns"] = ix.time_start, ix.time_end
        footer["bytes_written"] = ix.bytes
        ix.finish(footer, self._index_header(final=True))

    def _check_open(self) -> None:
        if self.closed:
            raise WriterError("writer already finalized", self.directory)

    def __enter__(self) -> "ThreadWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.finalize()


def _as_index_events(events: Any, path: Path) -> np.ndarray:
    """A contiguous INDEX_EVENT view of what the caller handed over, without copying."""
    if isinstance(events, np.ndarray) and events.dtype.names is not None:
        if events.dtype != INDEX_EVENT:
            try:
                events = events.astype(INDEX_EVENT)
            except (TypeError, ValueError) as e:
                raise WriterError(f"events of dtype {events.dtype} are not index events",
                                  path) from e
        return np.ascontiguousarray(events)
    try:
        raw = _byte_view(events)
    except (TypeError, ValueError) as e:
        raise WriterError(f"expected index events, got {type(events).__name__}", path) from e
    if raw.nbytes % INDEX_EVENT_SIZE:
        raise WriterError(f"{raw.nbytes} bytes is not a whole number of "
                          f"{INDEX_EVENT_SIZE}-byte index events", path)
    return np.frombuffer(raw, dtype=INDEX_EVENT)


MANIFEST_RESERVE = ".manifest-reserve"  # room held for the final manifest.json


class SessionWriter:
    """Creates `<output>/session_YYYYMMDD_HHMMSS/pid_N/` and the thread writers inside it.

    With `session_dir`, the process directory goes into that existing session directory
    instead (another process of the same recording: a child, or a new image after an exec),
    named `process_dir` (default `pid_N`).
    """

    def __init__(self, output_dir: str | os.PathLike, pid: int, *, arch: int, os_id: int,
                 clock_type: int, started: _dt.datetime | None = None,
                 detail_go_direct: Callable[[int], bool] | None = None,
                 index_go_direct: Callable[[int], bool] | None = None,
                 session_dir: str | os.PathLike | None = None,
                 process_dir: str | None = None) -> None:
        load_checksum()  # now, not on a recording's first drain pass (format.load_checksum)
        process_dir = process_dir or f"pid_{pid}"
        if session_dir is not None:
            candidate = Path(session_dir) / process_dir
            try:
                candidate.mkdir(exist_ok=False)
            except OSError as e:
                raise WriterError(f"cannot create process directory: {e.strerror}",
                                  candidate) from e
        else:
            candidate = _new_session_dir(Path(output_dir), started or _dt.datetime.now(),
                                         process_dir)
        self.path = candidate
        self.session_dir = candidate.parent
        self.pid = pid
        self.arch, self.os_id, self.clock_type = arch, os_id, clock_type
        self.detail_go_direct = detail_go_direct
        self.index_go_direct = index_go_direct
        self.threads: list[ThreadWriter] = []

    def add_thread(self, thread_id: int) -> ThreadWriter:
        """A writer for the session's next thread (thread_0, thread_1, ...)."""
        writer = ThreadWriter(self.path / f"thread_{len(self.threads)}", thread_id=thread_id,
                              arch=self.arch, os_id=self.os_id, clock_type=self.clock_type,
                              detail_go_direct=self.detail_go_direct,
                              index_go_direct=self.index_go_direct)
        self.threads.append(writer)
        return writer

    def write_manifest(self, manifest: dict, *, final: bool = False) -> Path:
        """Write manifest.json atomically: a reader sees the old one or the new one. The
        final one first gives back the room reserve_manifest_room() held for it."""
        if final:
            self.release_manifest_room()
        return write_json_atomic(self.path / "manifest.json", manifest)

    def reserve_manifest_room(self, nbytes: int) -> None:
        """Hold `nbytes` of the disk for the final manifest, which must be written even when
        the events have filled the disk."""
        reserve = self.path / MANIFEST_RESERVE
        try:
            fd = os.open(reserve, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                if hasattr(os, "posix_fallocate"):
                    os.posix_fallocate(fd, 0, nbytes)
                else:
                    _write_all(fd, bytes(nbytes), reserve)
            finally:
                os.close(fd)
        except OSError as e:
            self.release_manifest_room()
            raise WriterError(f"cannot reserve {nbytes:,} bytes for the manifest: {e.strerror}",
                              reserve) from e

    def release_manifest_room(self) -> None:
        try:
            (self.path / MANIFEST_RESERVE).unlink()
        except FileNotFoundError:
            pass

    def finalize(self) -> None:
        """Finalize every thread's files; a failure in one does not stop the others."""
        first: WriterError | None = None
        for t in self.threads:
            try:
                t.finalize()
            except WriterError as e:
                first = first or e
        if first is not None:
            raise first


def _new_session_dir(base: Path, started: _dt.datetime, process_dir: str) -> Path:
    """`base/session_<started>/<process_dir>`, made new (`_1`, `_2`... when the second is taken)."""
    stamp = started.strftime("session_%Y%m%d_%H%M%S")
    for attempt in range(1000):
        name = stamp if attempt == 0 else f"{stamp}_{attempt}"
        candidate = base / name / process_dir
        try:
            candidate.mkdir(parents=True, exist_ok=False)
            return candidate
        except FileExistsError:
            continue
        except OSError as e:
            raise WriterError(f"cannot create session directory: {e.strerror}", candidate) from e
    raise WriterError("no free session directory name", base / stamp)


def write_json_atomic(path: Path, data: dict) -> Path:
    """Through a temporary file renamed over `path`; the temporary file never stays behind."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise WriterError(f"cannot write: {e.strerror}", path) from e
    return path
