"""Writing a lane's events straight to the disk (O_DIRECT): DirectStream.

Why: a lane written at about 1 GB/s (ada's detail lane) fills the page cache up to the kernel's
dirty limits, after which the kernel throttles the writer to the speed of its writeback, which
can be far below what the disk takes directly. A writer can therefore switch a lane to a
DirectStream partway through (ThreadWriter's `detail_go_direct`: the caller decides when; this
library only knows how).

A DirectStream stages bytes in a page-aligned ring and a thread writes whole 4 KiB blocks
straight to the disk, once WAKE_BYTES of them have gathered or FLUSH_S after the first; the
caller only pays a memcpy. The file is the same as with plain writes:
blocks go out in order, each covering the bytes before it, and the last partial block (with the
footer after it) is written through the lane's ordinary descriptor on close. A process killed
with SIGKILL loses what was staged but not yet written (at most STAGE_BYTES); readers recover
everything before it as usual.

Linux only (os.O_DIRECT). `DirectStream.open` returns None (the lane stays in the page cache)
where O_DIRECT is not available or the second descriptor cannot be had; a filesystem that
refuses a direct write makes the thread fall back to the ordinary descriptor, with the staged
bytes intact.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from pathlib import Path

from .errors import WriterError

BLOCK = 4096  # alignment of buffer, offset and length for O_DIRECT (any logical block size <= 4K)
STAGE_BYTES = 8 << 20  # staged and not yet written, at most (per lane)
WRITE_BYTES = 2 << 20  # largest single write: the staging ring frees up as each one lands
WAKE_BYTES = 1 << 20  # staged in whole blocks before the thread is woken to write them...
FLUSH_S = 0.1  # ...or as long as it waits before it writes the whole blocks it has
AWAKE, WAITING, EMPTY = 0, 1, 2  # how the writer thread sleeps (DirectStream._thread_sleeps)


class DirectStream:
    """Appends bytes at the end of a file that already holds `end` bytes."""

    @classmethod
    def open(cls, path: Path, fd: int, end: int) -> "DirectStream | None":
        """A stream for `path` (ordinary descriptor `fd`, `end` bytes long); None if
        O_DIRECT cannot be used there (no flag, refused, out of descriptors or threads)."""
        flag = getattr(os, "O_DIRECT", 0)
        if not flag:
            return None
        same_file = f"/proc/self/fd/{fd}"  # the open file itself, even if renamed meanwhile
        try:
            direct_fd = os.open(same_file if os.path.exists(same_file) else path,
                                os.O_WRONLY | flag)
        except OSError:
            return None
        try:
            return cls(path, fd, direct_fd, end)
        except OSError as e:
            os.close(direct_fd)
            raise WriterError(f"cannot read back: {e.strerror}", path) from e
        except RuntimeError:  # no thread to be had
            os.close(direct_fd)
            return None

    def __init__(self, path: Path, fd: int, direct_fd: int, end: int) -> None:
        self.path = path
        self.start = end
        self._fd = fd  # ordinary descriptor: the fallback, and the last partial block
        self._direct_fd = direct_fd  # -1 once closed or given up
        self.direct_bytes = 0  # written with O_DIRECT so far
        self._stage = mmap.mmap(-1, STAGE_BYTES)  # page aligned, as O_DIRECT needs
        self._view = memoryview(self._stage)
        # Positions are file offsets. Staging starts at the block the file ends in (read back),
        # so that every direct write is block aligned in memory and in the file.
        self._tail = end & ~(BLOCK - 1)  # written up to here (a multiple of BLOCK)
        self._head = self._tail  # staged up to here
        partial = os.pread(fd, end - self._tail, self._tail)
        if len(partial) != end - self._tail:
            raise OSError(errno.EIO, "short read of the file's last block")
        self._closing = False
        self._error: Exception | None = None  # the writer thread's failure, raised to the caller
        self._cond = threading.Condition(threading.Lock())
        # Who sleeps on _cond, so that the other notifies only then: the caller stages a batch
        # thousands of times a second, and waking the thread for each one cost a switch and a
        # hand-over of the interpreter's lock a batch (see WAKE_BYTES). The thread sleeps
        # EMPTY (nothing whole staged: no timeout, so an idle lane costs no wakes) or WAITING.
        self._thread_sleeps = AWAKE
        self._caller_waits = False
        self._thread = threading.Thread(target=self._run, name="ada-direct-writer", daemon=True)
        self._thread.start()
        self.write(memoryview(partial))

    def write(self, data: memoryview) -> None:
        """Stage `data` (a flat byte view); waits while the staging ring is full."""
        done = 0
        while done < len(data):
            with self._cond:  # held for the copy: the thread needs it only between writes
                while self._head - self._tail == STAGE_BYTES and self._error is None:
                    self._caller_waits = True
                    self._cond.wait()
                self._caller_waits = False
                self._check()
                free = STAGE_BYTES - (self._head - self._tail)
                at = self._head % STAGE_BYTES
                n = min(len(data) - done, free, STAGE_BYTES - at)
                self._view[at:at + n] = data[done:done + n]  # beyond the head: the thread never reads it
                done += n
                self._head += n
                if self._thread_wanted():
                    self._cond.notify_all()

    def close(self) -> None:
        """Write everything staged (the last partial block through the ordinary descriptor)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        try:
            self._check()
            if self._head > self._tail:
                self._pwrite_all(self._fd, self._tail, self._head)
                self._tail = self._head
        except OSError as e:
            raise WriterError(f"cannot write: {e.strerror}", self.path) from e
        finally:
            self._release()

    def _check(self) -> None:
        if self._error is not None:
            reason = getattr(self._error, "strerror", None) or str(self._error)
            raise WriterError(f"cannot write: {reason}", self.path)

    def _release(self) -> None:
        if self._direct_fd >= 0:
            os.close(self._direct_fd)
            self._direct_fd = -1
        self._view.release()
        self._stage.close()

    def _run(self) -> None:
        """The writer thread: whole blocks, oldest first, until closed and nothing whole is left."""
        try:
            while True:
                with self._cond:
                    self._wait_for_blocks()
                    end = min(self._head & ~(BLOCK - 1), self._tail + WRITE_BYTES)
                    if end == self._tail:
                        return  # closing: the partial block is close()'s
                    start = self._tail
                self._write_out(start, end)
                with self._cond:
                    self._tail = end
                    if self._caller_waits:
                        self._cond.notify_all()
        except Exception as e:  # noqa: BLE001 - never a silent death: the producer would wait forever
            e.__traceback__ = None  # its frames hold views of the staging ring
            with self._cond:
                self._error = e
                self._cond.notify_all()

    def _thread_wanted(self) -> bool:
        """(Lock held.) Whether what is staged now should wake the sleeping thread: a first
        whole block (it sleeps with no timeout), or WAKE_BYTES."""
        if self._thread_sleeps == EMPTY:
            return (self._head & ~(BLOCK - 1)) > self._tail
        return self._thread_sleeps == WAITING and self._head - self._tail >= WAKE_BYTES

    def _wait_for_blocks(self) -> None:
        """(Lock held.) Until WAKE_BYTES are staged in whole blocks, the stream closes, or
        FLUSH_S passes with some whole block staged."""
        while not self._closing:
            whole = (self._head & ~(BLOCK - 1)) - self._tail
            if whole >= WAKE_BYTES:
                return
            self._thread_sleeps = WAITING if whole else EMPTY
            woken = self._cond.wait(FLUSH_S if whole else None)
            self._thread_sleeps = AWAKE
            if not woken and (self._head & ~(BLOCK - 1)) > self._tail:
                return

    def _write_out(self, start: int, end: int) -> None:
        if self._direct_fd >= 0:
            try:
                self._pwrite_all(self._direct_fd, start, end)
                self.direct_bytes += end - start
                return
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                os.close(self._direct_fd)  # the filesystem will not take direct writes
                self._direct_fd = -1
        self._pwrite_all(self._fd, start, end)

    def _pwrite_all(self, fd: int, start: int, end: int) -> None:
        """Write file bytes [start, end) from the staging ring (in two pieces if it wraps)."""
        pos = start
        while pos < end:
            at = pos % STAGE_BYTES
            n = min(end - pos, STAGE_BYTES - at)
            written = os.pwrite(fd, self._view[at:at + n], pos)
            if written <= 0:
                raise OSError(errno.EIO, "a write made no progress")
            pos += written
