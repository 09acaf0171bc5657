"""Memory-mapped readers for one thread: IndexReader, DetailReader, ThreadReader.

Bulk access goes through numpy views of the mapped file (`.events`); a Python
object is made only for the event a caller asks for. Both revisions open and
hand out the same normalised fields (see format.INDEX_EVENT). Files written by
a killed writer open too: their state is `recovered` (docs/format.md).
"""

from __future__ import annotations

import bisect
import errno
import mmap
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np

from .format import (DETAIL_EVENT_HEADER_SIZE, DETAIL_FLAG_STACK_TRUNCATED, DETAIL_FLAG_STRINGS,
                     DETAIL_FOOTER, DETAIL_FOOTER_MAGIC, DETAIL_FUNCTION_RETURN, DETAIL_HEADER,
                     DETAIL_MAGIC, ENDIAN_LITTLE, EVENT_CALL, EVENT_RETURN, FOOTER_SIZE,
                     FUNCTION_DETAIL_TYPES, FUNCTION_PAYLOAD, FUNCTION_PAYLOAD_SIZE, HEADER_SIZE,
                     INDEX_EVENT, INDEX_EVENT_FIELDS, INDEX_EVENT_R2, INDEX_EVENT_SIZE,
                     INDEX_FLAG_HAS_DETAIL_FILE, INDEX_FOOTER, INDEX_FOOTER_MAGIC, INDEX_HEADER_R1,
                     INDEX_MAGIC, NO_DETAIL_SEQ, REGISTER_NAMES, RETURN_VALUE_SLOT, REVISION_1,
                     STRING_TRUNCATED, SUPPORTED_REVISIONS, detail_event_header_dtype,
                     index_header_dtype)
from .errors import (AtfError, BadMagicError, CorruptFileError, SeqOutOfRangeError,
                     TruncatedFileError, UnsupportedFormatError)
from .records import gather, walk_records

R2_LEVEL_BLOCK = 1 << 20  # revision 2: events between two levels kept (IndexReader.read)
CLEAN = "clean"
RECOVERED = "recovered"
DEGRADED = "degraded"  # a detail lane read up to a malformed record (DetailReader.problem)


class IndexEvent(NamedTuple):
    seq: int
    timestamp_ns: int
    function_id: int
    thread_id: int
    event_kind: int
    call_depth: int
    detail_seq: int

    @property
    def has_detail(self) -> bool:
        return self.detail_seq != NO_DETAIL_SEQ


@dataclass(frozen=True)
class DetailEvent:
    """One decoded detail event; registers are named for the file's arch."""

    seq: int
    event_type: int
    flags: int
    index_seq: int
    thread_id: int
    timestamp_ns: int
    arch: int
    payload: bytes

    @property
    def is_function(self) -> bool:
        return (self.event_type in FUNCTION_DETAIL_TYPES
                and len(self.payload) >= FUNCTION_PAYLOAD_SIZE)

    def _fixed(self) -> np.void:
        if not self.is_function:
            raise AtfError(f"detail event {self.seq} of type {self.event_type} has no "
                           "function payload")
        return np.frombuffer(self.payload[:FUNCTION_PAYLOAD_SIZE], FUNCTION_PAYLOAD)[0]

    @property
    def function_id(self) -> int:
        return int(self._fixed()["function_id"])

    @property
    def regs(self) -> tuple[int, ...]:
        return tuple(int(r) for r in self._fixed()["regs"])

    @property
    def registers(self) -> dict[str, int]:
        names = REGISTER_NAMES.get(self.arch, tuple(f"r{i}" for i in range(8)))
        return dict(zip(names, self.regs))

    @property
    def return_value(self) -> int | None:
        if self.event_type != DETAIL_FUNCTION_RETURN:
            return None
        return self.regs[RETURN_VALUE_SLOT.get(self.arch, 0)]

    @property
    def lr(self) -> int:
        return int(self._fixed()["lr"])

    @property
    def fp(self) -> int:
        return int(self._fixed()["fp"])

    @property
    def sp(self) -> int:
        return int(self._fixed()["sp"])

    @property
    def stack(self) -> bytes:
        size = int(self._fixed()["stack_size"])
        return self.payload[FUNCTION_PAYLOAD_SIZE:FUNCTION_PAYLOAD_SIZE + size]

    @property
    def stack_truncated(self) -> bool:
        return bool(self.flags & DETAIL_FLAG_STACK_TRUNCATED)

    @property
    def strings(self) -> dict[int, tuple[bytes, bool]]:
        """C strings captured at the call (DETAIL_FLAG_STRINGS): register slot -> (bytes
        without the NUL, whether the string went on past MAX_STRING_BYTES)."""
        if not self.flags & DETAIL_FLAG_STRINGS or not self.is_function:
            return {}
        fixed = self._fixed()
        at = FUNCTION_PAYLOAD_SIZE + int(fixed["stack_size"])
        end = min(at + int(fixed["strings_size"]), len(self.payload))
        out = {}
        while at + 2 <= end:
            slot, size = self.payload[at], self.payload[at + 1]
            out[slot & 0x0F] = (bytes(self.payload[at + 2:at + 2 + size]),
                                bool(slot & STRING_TRUNCATED))
            at += 2 + size
        return out


def open_regular(path: str | os.PathLike) -> int:
    """A read-only descriptor of `path`, refused unless it is a regular file: opening a FIFO
    for reading would wait for a writer forever, and a device could be endless."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        raise AtfError("not a regular file (a FIFO, socket or device); ATF files and "
                       "manifests are regular files", path)
    return fd


def _allow_more_open_files() -> bool:
    """Raise this process's soft limit on open files to its hard limit; False if it cannot
    go higher. Each mapped file holds a descriptor (CPython's mmap keeps a duplicate), so a
    session of thousands of threads needs more than the usual soft limit of 1,024."""
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == hard:
            return False
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return True
    except (ImportError, ValueError, OSError):
        return False


def _map_whole(path: Path) -> tuple[int, mmap.mmap | None]:
    with open(open_regular(path), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        return size, (mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None)


class _MappedFile:
    """A read-only mapping of a whole file as a uint8 array (empty files allowed)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        try:
            try:
                size, self._mm = _map_whole(self.path)
            except OSError as e:
                if e.errno != errno.EMFILE or not _allow_more_open_files():
                    raise
                size, self._mm = _map_whole(self.path)
        except FileNotFoundError as e:
            raise AtfError("no such file", self.path) from e
        except IsADirectoryError as e:
            raise AtfError("is a directory, expected an ATF file", self.path) from e
        except (OSError, ValueError) as e:
            raise AtfError(f"cannot map file: {e}", self.path) from e
        self.size = size
        self.buf = (np.frombuffer(self._mm, dtype=np.uint8) if self._mm is not None
                    else np.zeros(0, dtype=np.uint8))

    def struct(self, dtype: np.dtype, offset: int, what: str) -> np.void:
        if offset < 0 or offset + dtype.itemsize > self.size:
            raise TruncatedFileError(
                f"{what}: expected {dtype.itemsize} bytes at offset {offset}, file has "
                f"{self.size} bytes (file seems not fully written?)", self.path, offset)
        return self.buf[offset:offset + dtype.itemsize].view(dtype)[0]


def _check_identity(m: _MappedFile, header: np.void, magic: bytes, what: str) -> int:
    if bytes(header["magic"]) != magic:
        raise BadMagicError(f"expected {what} magic {magic!r}, found {bytes(header['magic'])!r}",
                            m.path, 0)
    if int(header["endian"]) != ENDIAN_LITTLE:
        raise UnsupportedFormatError(f"expected endian 1 (little), found {int(header['endian'])}",
                                     m.path, 4)
    version = int(header["version"])
    if version not in SUPPORTED_REVISIONS:
        raise UnsupportedFormatError(f"expected version 1 or 2, found {version}", m.path, 5)
    return version


class IndexReader:
    """Reader of one index.atf: `len`, `reader[seq]`, iteration, `.events`, time search."""

    def __init__(self, path: str | os.PathLike) -> None:
        self._file = m = _MappedFile(path)
        self.path = m.path
        probe = m.struct(INDEX_HEADER_R1, 0, "index header")
        self.revision = _check_identity(m, probe, INDEX_MAGIC, "index")
        self.header = h = m.struct(index_header_dtype(self.revision), 0, "index header")
        if int(h["event_size"]) != INDEX_EVENT_SIZE:
            raise UnsupportedFormatError(f"expected event_size 32, found {int(h['event_size'])}",
                                         m.path, 24 if self.revision == 1 else 20)
        self.events_offset = int(h["events_offset"])
        if not HEADER_SIZE <= self.events_offset <= m.size:
            raise CorruptFileError(f"events_offset {self.events_offset} outside the file "
                                   f"({m.size} bytes)", m.path, 32)
        self.footer, self.footer_offset = self._find_footer()
        if self.footer is not None:
            self.state = CLEAN
            count = int(self.footer["event_count"])
            expected_end = self.events_offset + count * INDEX_EVENT_SIZE
            if expected_end != self.footer_offset:
                raise CorruptFileError(
                    f"footer event_count {count} needs the footer at {expected_end}, found "
                    f"it at {self.footer_offset}", m.path, self.footer_offset + 8)
        else:
            self.state = RECOVERED
            count = (m.size - self.events_offset) // INDEX_EVENT_SIZE
            count = self._drop_partial_footer(count)
        self._count = count
        self.thread_id = int(h["thread_id"])
        self.arch, self.os, self.clock_type = int(h["arch"]), int(h["os"]), int(h["clock_type"])
        self.flags = int(h["flags"])
        self._raw = m.buf[self.events_offset:self.events_offset + count * INDEX_EVENT_SIZE]
        self._events: np.ndarray | None = None
        self._r2_levels: tuple[np.ndarray, int] | None = None

    def _find_footer(self) -> tuple[np.void | None, int]:
        m = self._file
        candidates = []
        declared = int(self.header["footer_offset"])
        if declared:
            candidates.append(declared)
        if m.size >= self.events_offset + FOOTER_SIZE:
            candidates.append(m.size - FOOTER_SIZE)
        for off in candidates:
            if self.events_offset <= off and off + FOOTER_SIZE <= m.size:
                footer = m.struct(INDEX_FOOTER, off, "index footer")
                if bytes(footer["magic"]) == INDEX_FOOTER_MAGIC:
                    return footer, off
        return None, 0

    def _drop_partial_footer(self, count: int) -> int:
        """A footer cut short by a kill must not be read back as events."""
        for back in (1, 2):
            seq = count - back
            if seq >= 0:
                off = self.events_offset + seq * INDEX_EVENT_SIZE
                if bytes(self._file.buf[off:off + 4]) == INDEX_FOOTER_MAGIC:
                    return seq
        return count

    # --- bulk -----------------------------------------------------------------

    @property
    def events(self) -> np.ndarray:
        """All events as a numpy structured array of format.INDEX_EVENT (a view for revision 1)."""
        if self._events is None:
            if self.revision == REVISION_1:
                self._events = self._raw.view(INDEX_EVENT)
            else:
                self._events = _normalise_r2(self._raw.view(INDEX_EVENT_R2), self.thread_id)
        return self._events

    @property
    def timestamps(self) -> np.ndarray:
        return self.events["timestamp_ns"]

    def read(self, a: int, b: int) -> np.ndarray:
        """Events [a, b) as a new array of format.INDEX_EVENT, copied from the file rather
        than viewed through the mapping: a reader that goes through a large file a chunk at
        a time then holds only its chunks (every page of the mapping it touched would stay
        in its resident memory until the file is closed)."""
        raw = self.read_raw(a, b)
        if self.revision == REVISION_1:
            return raw
        return _normalise_r2(raw, self.thread_id, self._r2_depth_at(max(0, a)))

    def _r2_depth_at(self, a: int) -> int:
        """Revision 2 has no call_depth: the calls open before event `a`, counted as a whole
        file is (lifted so that a trace that starts inside calls has no negative depth).
        The level at every block start is computed once, a block read at a time."""
        step = R2_LEVEL_BLOCK
        if self._r2_levels is None:
            level, low, starts = 0, 0, []
            for at in range(0, self._count, step):
                starts.append(level)
                d = np.cumsum(_r2_steps(self.read_raw(at, at + step)), dtype=np.int64)
                if len(d):
                    low = min(low, level + int(d.min()))
                    level += int(d[-1])
            self._r2_levels = (np.array(starts, dtype=np.int64), -low)
        starts, lift = self._r2_levels
        block = a // step
        if block >= len(starts):
            return 0
        before = _r2_steps(self.read_raw(block * step, a))
        return int(starts[block]) + int(before.sum()) + lift

    def view(self, a: int, b: int) -> np.ndarray:
        """Events [a, b) as a view of the mapped file (revision 1; revision 2: read()). No
        copy: give the pages back with release(a, b) once done with them."""
        if self.revision != REVISION_1:
            return self.read(a, b)
        return self.events[max(0, a):min(b, self._count)]

    def release(self, a: int, b: int) -> None:
        """Let the pages of events [a, b) go from this process's memory (they stay in the
        page cache; reading them again maps them again): a reader that goes through a large
        file a chunk at a time then holds only the chunks it works on."""
        mm = self._file._mm
        if mm is None or self.revision != REVISION_1 or not hasattr(mm, "madvise"):
            return
        page = mmap.PAGESIZE
        start = (self.events_offset + max(0, a) * INDEX_EVENT_SIZE) // page * page
        stop = min(self.events_offset + min(b, self._count) * INDEX_EVENT_SIZE,
                   self._file.size)
        if stop > start:
            try:
                mm.madvise(mmap.MADV_DONTNEED, start, stop - start)
            except (OSError, ValueError):
                pass  # only memory is at stake

    def read_raw(self, a: int, b: int) -> np.ndarray:
        """Events [a, b) as stored (revision 1 or 2 records), copied from the file."""
        a, b = max(0, a), min(b, self._count)
        n = max(0, b - a)
        size = INDEX_EVENT_SIZE
        raw = np.empty(n * size, dtype=np.uint8)
        if n:
            fd = open_regular(self.path)
            try:
                got = os.preadv(fd, [raw], self.events_offset + a * size)
            except OSError as e:
                raise AtfError(f"cannot read events {a}..{b}: {e.strerror}", self.path) from e
            finally:
                os.close(fd)
            if got != len(raw):
                raise TruncatedFileError(f"expected {len(raw)} bytes of events {a}..{b}, read "
                                         f"{got} (the file shrank?)", self.path,
                                         self.events_offset + a * size)
        return raw.view(INDEX_EVENT if self.revision == REVISION_1 else INDEX_EVENT_R2)

    def __len__(self) -> int:
        return self._count

    def get(self, seq: int) -> IndexEvent | None:
        """The event at index_seq `seq`, or None past the end. O(1)."""
        if not 0 <= seq < self._count:
            return None
        rec = self.events[seq]
        return IndexEvent(seq, *(int(rec[name]) for name in INDEX_EVENT_FIELDS))

    def __getitem__(self, seq: int) -> IndexEvent:
        if seq < 0:
            seq += self._count
        event = self.get(seq)
        if event is None:
            raise SeqOutOfRangeError(f"index_seq {seq} out of range (0..{self._count - 1})",
                                     self.path)
        return event

    def __iter__(self) -> Iterator[IndexEvent]:
        step = 65536
        for lo in range(0, self._count, step):
            rows = self.events[lo:lo + step].tolist()
            for i, row in enumerate(rows):
                yield IndexEvent(lo + i, *row)

    def time_range(self) -> tuple[int, int] | None:
        """(first, last) timestamp, or None when the file holds no event."""
        if self._count == 0:
            return None
        ts = self.timestamps
        return int(ts[0]), int(ts[-1])

    def find_start(self, timestamp_ns: int) -> int:
        """index_seq of the first event at or after `timestamp_ns` (bisection), or len()."""
        return bisect.bisect_left(self.timestamps, timestamp_ns)

    @property
    def has_detail(self) -> bool:
        return bool(self.flags & INDEX_FLAG_HAS_DETAIL_FILE)

    @property
    def raw_events(self) -> np.ndarray:
        """The events section as bytes (uint8 view), for checksums."""
        return self._raw


def _r2_steps(ev: np.ndarray) -> np.ndarray:
    """+1 for a CALL, -1 for a RETURN, 0 for anything else (revision 2 records)."""
    kind = ev["event_kind"]
    return np.where(kind == EVENT_CALL, 1, np.where(kind == EVENT_RETURN, -1, 0))


def _normalise_r2(ev: np.ndarray, thread_id: int, base: int | None = None) -> np.ndarray:
    """Revision 2 events in the normalised layout; call_depth derived from nesting: from
    `base` (the calls open before the first of them), or, without it, lifted so that a trace
    that starts inside calls has no negative depth."""
    out = np.zeros(len(ev), dtype=INDEX_EVENT)
    out["timestamp_ns"] = ev["timestamp_ns"]
    out["function_id"] = ev["function_id"]
    out["thread_id"] = thread_id
    kind = ev["event_kind"].astype(np.uint32)
    out["event_kind"] = kind
    ds = ev["detail_seq"]
    out["detail_seq"] = np.where(ds >= NO_DETAIL_SEQ, NO_DETAIL_SEQ, ds).astype(np.uint32)
    depth = np.cumsum(_r2_steps(ev), dtype=np.int64) - (kind == EVENT_CALL)
    if base is not None:
        depth += base
    elif len(depth):
        depth -= min(0, int(depth.min()))  # a trace that starts inside calls
    out["call_depth"] = np.maximum(depth, 0).astype(np.uint32)
    return out


class DetailReader:
    """Reader of one detail.atf: O(1) `get(detail_seq)` through an offsets table built once."""

    def __init__(self, path: str | os.PathLike) -> None:
        self._file = m = _MappedFile(path)
        self.path = m.path
        self.header = h = m.struct(DETAIL_HEADER, 0, "detail header")
        self.revision = _check_identity(m, h, DETAIL_MAGIC, "detail")
        self.arch, self.os, self.thread_id = int(h["arch"]), int(h["os"]), int(h["thread_id"])
        self.events_offset = int(h["events_offset"])
        if not HEADER_SIZE <= self.events_offset <= m.size:
            raise CorruptFileError(f"events_offset {self.events_offset} outside the file "
                                   f"({m.size} bytes)", m.path, 20)
        self.footer = None
        self.footer_offset = 0
        self.problem: CorruptFileError | None = None  # why the lane is DEGRADED
        if m.size >= self.events_offset + FOOTER_SIZE:
            off = m.size - FOOTER_SIZE
            footer = m.struct(DETAIL_FOOTER, off, "detail footer")
            if bytes(footer["magic"]) == DETAIL_FOOTER_MAGIC:
                self.footer, self.footer_offset = footer, off
        self._ev_header = detail_event_header_dtype(self.revision)
        if self.footer is not None:
            self.state = CLEAN
            limit = self.footer_offset
            length = int(self.footer["bytes_length"])
            if self.events_offset + length != limit:
                raise CorruptFileError(f"footer bytes_length {length} does not match the "
                                       f"events section ({limit - self.events_offset} bytes)",
                                       m.path, self.footer_offset + 16)
            walk = walk_records(m.buf, self.events_offset, limit, self.revision)
            declared = int(self.footer["event_count"])
            if walk.problem is not None:
                # One bad record must not cost the rest of the session: the lane is read up
                # to it, and flagged (verify reports it).
                self.state = DEGRADED
                self.problem = CorruptFileError(
                    f"malformed detail event {len(walk.offsets)} of {declared}: {walk.problem}; "
                    "the lane is read up to it", m.path, walk.problem_offset)
            elif declared != len(walk.offsets):
                raise CorruptFileError(f"footer event_count {declared}, found "
                                       f"{len(walk.offsets)} events", m.path,
                                       self.footer_offset + 8)
        else:
            self.state = RECOVERED
            walk = walk_records(m.buf, self.events_offset, m.size, self.revision)
        self.offsets = walk.offsets
        self._stride = walk.stride
        self.events_end = walk.end
        self.recovery_note = walk.problem if self.footer is None else None
        self._by_index: tuple[str, np.ndarray, np.ndarray | int] | None = None

    def __len__(self) -> int:
        return len(self.offsets)

    def _field(self, name: str) -> np.ndarray:
        off = self._ev_header.fields[name][1]
        return gather(self._file.buf, self.offsets, off, self._ev_header.fields[name][0].str,
                      self._stride)

    @property
    def index_seqs(self) -> np.ndarray:
        """index_seq of every detail event, as an array (the backward links)."""
        return self._field("index_seq").astype(np.uint64)

    @property
    def timestamps(self) -> np.ndarray:
        return self._field("timestamp")

    @property
    def event_types(self) -> np.ndarray:
        return self._field("event_type")

    def get(self, seq: int) -> DetailEvent | None:
        """The detail event at detail_seq `seq`, or None past the end. O(1)."""
        if not 0 <= seq < len(self.offsets):
            return None
        off = int(self.offsets[seq])
        head = self._file.buf[off:off + DETAIL_EVENT_HEADER_SIZE].view(self._ev_header)[0]
        length = int(head["total_length"])
        tid = int(head["thread_id"]) if self.revision == REVISION_1 else self.thread_id
        payload = self._file.buf[off + DETAIL_EVENT_HEADER_SIZE:off + length].tobytes()
        return DetailEvent(seq, int(head["event_type"]), int(head["flags"]),
                           int(head["index_seq"]), tid, int(head["timestamp"]), self.arch,
                           payload)

    def __getitem__(self, seq: int) -> DetailEvent:
        if seq < 0:
            seq += len(self)
        event = self.get(seq)
        if event is None:
            raise SeqOutOfRangeError(f"detail_seq {seq} out of range (0..{len(self) - 1})",
                                     self.path)
        return event

    def __iter__(self) -> Iterator[DetailEvent]:
        for seq in range(len(self)):
            yield self.get(seq)  # type: ignore[misc]

    def get_by_index_seq(self, index_seq: int) -> DetailEvent | None:
        """The detail event linked to index_seq, or None.

        O(1) through a dense table when index_seqs are dense enough, otherwise
        a bisection; ThreadReader.get_detail_for() is O(1) in every case, through
        the index event's forward link.
        """
        if self._by_index is None:
            seqs = self.index_seqs
            if len(seqs) == 0:
                self._by_index = ("dense", np.zeros(0, dtype=np.int64), 0)
            else:
                lo, hi = int(seqs.min()), int(seqs.max())
                if hi - lo < 8 * len(seqs) + (1 << 20):
                    table = np.full(hi - lo + 1, -1, dtype=np.int64)
                    table[(seqs - lo).astype(np.int64)] = np.arange(len(seqs))
                    self._by_index = ("dense", table, lo)
                else:
                    order = np.argsort(seqs, kind="stable")
                    self._by_index = ("sorted", seqs[order], order)
        kind, table, extra = self._by_index
        if kind == "dense":
            pos = index_seq - int(extra)
            if not 0 <= pos < len(table) or table[pos] < 0:
                return None
            return self.get(int(table[pos]))
        i = int(np.searchsorted(table, index_seq))
        if i < len(table) and int(table[i]) == index_seq:
            return self.get(int(extra[i]))
        return None

    def time_range(self) -> tuple[int, int] | None:
        if len(self) == 0:
            return None
        ts = gather(self._file.buf, self.offsets[[0, -1]], 16, "<u8")
        return int(ts[0]), int(ts[1])

    @property
    def raw_events(self) -> np.ndarray:
        return self._file.buf[self.events_offset:self.events_end]


class ThreadReader:
    """One thread_N directory: its index lane, its detail lane if any, and the links between."""

    def __init__(self, thread_dir: str | os.PathLike, thread_index: int | None = None) -> None:
        self.path = Path(thread_dir)
        if not self.path.is_dir():
            raise AtfError("no such thread directory", self.path)
        self.id = thread_index if thread_index is not None else _thread_number(self.path)
        self.index = IndexReader(self.path / "index.atf")
        detail_path = self.path / "detail.atf"
        self.detail = DetailReader(detail_path) if detail_path.exists() else None

    @property
    def thread_id(self) -> int:
        return self.index.thread_id

    @property
    def state(self) -> str:
        """The worst of its lanes: degraded, recovered or clean."""
        states = {self.index.state} | ({self.detail.state} if self.detail else set())
        return DEGRADED if DEGRADED in states else RECOVERED if RECOVERED in states else CLEAN

    def __len__(self) -> int:
        return len(self.index)

    def get_detail_for(self, index_event: IndexEvent | int) -> DetailEvent | None:
        """Forward link, O(1): the detail event of an index event (or of index_seq), if one
        was persisted and links back to it."""
        event = self.index.get(index_event) if isinstance(index_event, int) else index_event
        if event is None or not event.has_detail or self.detail is None:
            return None
        detail = self.detail.get(event.detail_seq)
        if detail is None or detail.index_seq != event.seq:
            return None
        return detail

    def get_index_for(self, detail_event: DetailEvent | int) -> IndexEvent | None:
        """Backward link, O(1): the index event a detail event (or detail_seq) belongs to;
        None when there is no such detail event, or its index event is not in the file."""
        if isinstance(detail_event, int):
            if self.detail is None:
                return None
            found = self.detail.get(detail_event)
            if found is None:
                return None
            detail_event = found
        return self.index.get(detail_event.index_seq)


def _thread_number(path: Path) -> int:
    name = path.name
    if name.startswith("thread_") and name[7:].isdigit():
        return int(name[7:])
    raise AtfError("expected a directory named thread_<N>", path)
