"""Detail lanes written straight to the disk (atf.direct): the same bytes as through the cache.

The staging ring is 8 MiB, so the larger cases here wrap it; record sizes vary so that the
direct writes cut records at block edges. Fallbacks and write errors are forced by replacing
os functions inside atf.direct (this is the atf library alone: no Frida involved).
"""

import errno
import os
import time

import numpy as np
import pytest

import ada.atf as atf
from ada.atf import direct
from ada.atf import format as F
from ada.atf.errors import WriterError
from ada.atf.records import scatter
from ada.atf.writer import SessionWriter, ThreadWriter
from helpers import o_direct_works


def always(lane_bytes):
    return True


@pytest.fixture(autouse=True)
def needs_o_direct(tmp_path):
    if not o_direct_works(tmp_path):
        pytest.skip("the filesystem of the test directory refuses O_DIRECT")


def records(n, first_seq, stack_sizes=(128, 0, 200, 7)):
    """n function records with a mix of stack window sizes, as raw bytes."""
    period = bytearray()
    for i, stack in enumerate(stack_sizes):
        rec = np.zeros((), dtype=F.FUNCTION_RECORD_R1)
        rec["total_length"] = F.FUNCTION_RECORD_FIXED_SIZE + stack
        rec["event_type"] = F.DETAIL_FUNCTION_CALL if i % 2 == 0 else F.DETAIL_FUNCTION_RETURN
        rec["thread_id"] = 7
        rec["function_id"] = i
        rec["regs"] = np.arange(8, dtype=np.uint64) + i
        rec["stack_size"] = stack
        period += rec.tobytes() + bytes((i + k) & 0xFF for k in range(stack))
    sizes = np.array([F.FUNCTION_RECORD_FIXED_SIZE + s for s in stack_sizes])
    reps = -(-n // len(sizes))
    lengths = np.tile(sizes, reps)[:n]
    buf = np.frombuffer(bytes(period) * reps, dtype=np.uint8)[:lengths.sum()].copy()
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    seqs = first_seq + np.arange(n, dtype=np.uint32)
    scatter(buf, offsets, 8, seqs)
    scatter(buf, offsets, 16, 1000 + 10 * seqs.astype(np.uint64))
    return buf.tobytes()


def index_events(n):
    ev = np.zeros(n, dtype=F.INDEX_EVENT)
    ev["timestamp_ns"] = 1000 + 10 * np.arange(n, dtype=np.uint64)
    ev["thread_id"] = 7
    ev["event_kind"] = np.where(np.arange(n) % 2 == 0, F.EVENT_CALL, F.EVENT_RETURN)
    ev["detail_seq"] = np.arange(n, dtype=np.uint32)
    return ev


def write_thread(directory, chunks, go_direct):
    """One thread's lanes: index events first, then their detail records in `chunks`."""
    n = sum(c[1] for c in chunks)
    w = ThreadWriter(directory, thread_id=7, arch=F.ARCH_X86_64, os_id=F.OS_LINUX,
                     clock_type=F.CLOCK_BOOTTIME, detail_go_direct=go_direct)
    w.append_index(index_events(n))
    for data, _ in chunks:
        w.append_detail(data)
    w.finalize()
    return w


def make_chunks(counts):
    chunks, seq = [], 0
    for c in counts:
        chunks.append((records(c, seq), c))
        seq += c
    return chunks


@pytest.fixture(scope="module")
def big_chunks():
    # About 44 MB in pieces of odd sizes: several times the staging ring, and more than
    # the 32 MiB after which a lane asks again whether to go direct.
    return make_chunks([1, 2, 3] + [3001] * 70 + [5])


@pytest.fixture(scope="module")
def cached(tmp_path_factory, big_chunks):
    d = tmp_path_factory.mktemp("cached") / "thread_0"
    write_thread(d, big_chunks, None)
    return d


@pytest.fixture
def direct_fds(monkeypatch):
    """The descriptors atf.direct opens with O_DIRECT, as they are opened."""
    real_open, fds = os.open, set()

    def tracking_open(path, flags, *args):
        fd = real_open(path, flags, *args)
        if flags & os.O_DIRECT:
            fds.add(fd)
        return fd

    monkeypatch.setattr(direct.os, "open", tracking_open)
    return fds


def same_files(a, b):
    for name in ("index.atf", "detail.atf"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_direct_from_the_start_writes_the_same_files(tmp_path, big_chunks, cached):
    w = write_thread(tmp_path / "thread_0", big_chunks, always)
    assert w.detail_direct_from == F.HEADER_SIZE
    same_files(tmp_path / "thread_0", cached)
    report = atf.verify(tmp_path / "thread_0")
    assert report.ok and not report.recovered, report.to_dict()


def test_switching_to_direct_mid_file_writes_the_same_files(tmp_path, big_chunks, cached):
    asked = []

    def go_direct(lane_bytes):  # no at the first append, yes when asked again
        asked.append(lane_bytes)
        return len(asked) >= 2

    w = write_thread(tmp_path / "thread_0", big_chunks, go_direct)
    assert asked[0] == 0 and asked[1] >= 32 << 20  # at the first append, then 32 MiB later
    assert w.detail_direct_from is not None
    assert w.detail_direct_from > 32 << 20 and w.detail_direct_from % 4096 != 0
    same_files(tmp_path / "thread_0", cached)


def test_a_small_lane_that_never_fills_a_block(tmp_path):
    chunks = make_chunks([1, 1])
    a = write_thread(tmp_path / "a" / "thread_0", chunks, always)
    write_thread(tmp_path / "b" / "thread_0", chunks, None)
    assert a.detail_direct_from is None  # switched, but not one whole block went direct
    same_files(tmp_path / "a" / "thread_0", tmp_path / "b" / "thread_0")


def test_no_o_direct_at_open_means_the_page_cache(tmp_path, monkeypatch, big_chunks, cached):
    real_open = os.open

    def refusing_open(path, flags, *args):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args)

    monkeypatch.setattr(direct.os, "open", refusing_open)
    w = write_thread(tmp_path / "thread_0", big_chunks, always)
    assert w.detail_direct_from is None
    same_files(tmp_path / "thread_0", cached)


def test_a_refused_direct_write_falls_back_with_nothing_lost(tmp_path, monkeypatch, direct_fds,
                                                              big_chunks, cached):
    real_pwrite = os.pwrite

    def refusing_pwrite(fd, data, offset):
        if fd in direct_fds:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(direct.os, "pwrite", refusing_pwrite)
    w = write_thread(tmp_path / "thread_0", big_chunks, always)
    assert direct_fds, "a direct descriptor was opened"
    assert w.detail_direct_from is None
    same_files(tmp_path / "thread_0", cached)


def test_refused_after_some_direct_writes_and_short_writes_lose_nothing(tmp_path, monkeypatch,
                                                                          direct_fds, big_chunks,
                                                                          cached):
    """Direct writes come back short now and then, and the sixth is refused (EINVAL)."""
    real_pwrite = os.pwrite
    calls = []

    def flaky_pwrite(fd, data, offset):
        if fd in direct_fds:
            calls.append(offset)
            if len(calls) == 6:
                raise OSError(errno.EINVAL, "Invalid argument")
            if len(calls) % 2 == 0 and len(data) >= 2 * 4096:
                data = data[:len(data) // 2 & ~4095]  # short, still whole blocks
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(direct.os, "pwrite", flaky_pwrite)
    w = write_thread(tmp_path / "thread_0", big_chunks, always)
    assert len(calls) == 6, "direct writes stop at the refusal"
    assert w.detail_direct_from == F.HEADER_SIZE  # the first writes did go direct
    same_files(tmp_path / "thread_0", cached)


def test_writes_that_reach_the_end_of_the_staging_ring_go_on_at_its_start(
        tmp_path, monkeypatch, direct_fds, big_chunks, cached):
    """Switched mid-file, the writes are not in step with the ring: some stop at its end."""
    real_pwrite = os.pwrite
    writes = []

    def recording_pwrite(fd, data, offset):
        if fd in direct_fds:
            writes.append((offset, len(data)))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(direct.os, "pwrite", recording_pwrite)
    write_thread(tmp_path / "thread_0", big_chunks, lambda lane_bytes: lane_bytes > 0)
    split = [(o, n) for o, n in writes
             if (o + n) % direct.STAGE_BYTES == 0 and n < direct.WRITE_BYTES]
    assert split, writes
    assert all(o % 4096 == 0 and n % 4096 == 0 for o, n in writes)
    same_files(tmp_path / "thread_0", cached)


def test_a_failing_disk_is_a_writer_error_and_the_index_lane_still_finishes(tmp_path, monkeypatch,
                                                                            big_chunks):
    real_pwrite = os.pwrite

    def full_disk(fd, data, offset):  # detail.atf fills the disk at 8 MiB
        if offset >= 8 << 20 and os.readlink(f"/proc/self/fd/{fd}").endswith("detail.atf"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(direct.os, "pwrite", full_disk)
    d = tmp_path / "thread_0"
    n = sum(c[1] for c in big_chunks)
    w = ThreadWriter(d, thread_id=7, arch=F.ARCH_X86_64, os_id=F.OS_LINUX,
                     clock_type=F.CLOCK_BOOTTIME, detail_go_direct=always)
    w.append_index(index_events(n))
    with pytest.raises(WriterError, match="No space left on device"):
        for data, _ in big_chunks:  # 44 MB: more than the staging ring holds past the failure
            w.append_detail(data)
    with pytest.raises(WriterError, match="No space left on device"):
        w.finalize()
    w.finalize()  # done: idempotent after the failure
    report = atf.verify(d)
    states = {os.path.basename(f.path): f.state for f in report.files}
    assert states["index.atf"] == "clean"
    assert states["detail.atf"] == "recovered"  # everything written before the failure reads


def test_a_failing_index_lane_still_finishes_the_detail_lane_and_other_threads(
        tmp_path, monkeypatch):
    """The index lane's last single events cannot be written: the staged detail still reaches
    the disk, and SessionWriter.finalize goes on to the next thread before raising."""
    sw = SessionWriter(tmp_path, 1, arch=F.ARCH_X86_64, os_id=F.OS_LINUX,
                       clock_type=F.CLOCK_BOOTTIME, detail_go_direct=always)
    broken, fine = sw.add_thread(7), sw.add_thread(7)
    chunks = make_chunks([20000])
    for w in (broken, fine):
        w.append_index(index_events(20000))
        w.append_detail(chunks[0][0])
        w.write_index_event(10 ** 9, 1, F.EVENT_CALL, 0)  # pending in memory until finalize
    real_write = os.write

    def failing_index(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}") == str(broken.directory / "index.atf"):
            raise OSError(errno.EIO, "Input/output error")
        return real_write(fd, data)

    monkeypatch.setattr(atf.writer.os, "write", failing_index)
    with pytest.raises(WriterError, match="Input/output error"):
        sw.finalize()
    assert (broken.directory / "detail.atf").read_bytes() == \
        (fine.directory / "detail.atf").read_bytes()
    report = atf.verify(fine.directory)
    assert report.ok and not report.recovered, report.to_dict()
    assert fine.detail_direct_from == F.HEADER_SIZE


def write_index_thread(directory, counts, go_direct):
    """One thread's index lane alone, appended in pieces of `counts` events."""
    w = ThreadWriter(directory, thread_id=7, arch=F.ARCH_X86_64, os_id=F.OS_LINUX,
                     clock_type=F.CLOCK_BOOTTIME, index_go_direct=go_direct)
    events = index_events(sum(counts))
    events["detail_seq"] = F.NO_DETAIL_SEQ  # no detail lane here
    at = 0
    for c in counts:
        w.append_index(events[at:at + c])
        at += c
    w.write_index_event(10 ** 9, 1, F.EVENT_CALL, 0)  # one single event, flushed at the end
    w.finalize()
    return w


INDEX_COUNTS = [1, 3, 1000, 299_999] * 5 + [7]  # about 48 MB: several staging rings


def test_an_index_lane_written_direct_is_the_same_file(tmp_path):
    a = write_index_thread(tmp_path / "a" / "thread_0", INDEX_COUNTS, always)
    b = write_index_thread(tmp_path / "b" / "thread_0", INDEX_COUNTS, None)
    assert a.index_direct_from == F.HEADER_SIZE and b.index_direct_from is None
    assert a.detail_direct_from is None  # no detail lane
    assert (tmp_path / "a" / "thread_0" / "index.atf").read_bytes() == \
        (tmp_path / "b" / "thread_0" / "index.atf").read_bytes()
    report = atf.verify(tmp_path / "a" / "thread_0")
    assert report.ok and not report.recovered, report.to_dict()


def test_an_index_lane_switched_mid_file_is_the_same_file(tmp_path):
    asked = []

    def go_direct(lane_bytes):  # no at the first append, yes when asked again
        asked.append(lane_bytes)
        return len(asked) >= 2

    a = write_index_thread(tmp_path / "a" / "thread_0", INDEX_COUNTS, go_direct)
    b = write_index_thread(tmp_path / "b" / "thread_0", INDEX_COUNTS, None)
    assert a.index_direct_from is not None and a.index_direct_from > 32 << 20
    assert (tmp_path / "a" / "thread_0" / "index.atf").read_bytes() == \
        (tmp_path / "b" / "thread_0" / "index.atf").read_bytes()


def test_an_index_lane_written_direct_refuses_to_be_patched(tmp_path):
    """Detail links are patched into index events already written (the flight recorder): bytes
    still staged for a direct write would overwrite a patch, so the writer says no."""
    w = ThreadWriter(tmp_path / "thread_0", thread_id=7, arch=F.ARCH_X86_64, os_id=F.OS_LINUX,
                     clock_type=F.CLOCK_BOOTTIME, index_go_direct=always)
    events = index_events(10_000)
    events["detail_seq"] = F.NO_DETAIL_SEQ
    w.append_index(events)
    with pytest.raises(WriterError, match="cannot be patched"):
        w.set_detail_seq(5, 0)
    w.finalize()
    assert atf.verify(tmp_path / "thread_0").ok


def test_small_writes_reach_the_disk_together_and_soon(tmp_path, monkeypatch, direct_fds):
    """The drain stages a batch thousands of times a second: the thread writes what has
    gathered (WAKE_BYTES) in one write rather than one write a batch, and what stays under
    that still reaches the disk after FLUSH_S, without waiting for close."""
    real_pwrite = os.pwrite
    writes = []

    def recording_pwrite(fd, data, offset):
        if fd in direct_fds:
            writes.append(len(data))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(direct.os, "pwrite", recording_pwrite)
    path = tmp_path / "lane"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        stream = direct.DirectStream.open(path, fd, 0)
        batch = bytes(range(256)) * 448  # 112 KiB: a drain pass of 3,500 index events
        for _ in range(40):
            stream.write(memoryview(batch))
            time.sleep(0.001)  # the drain's other work between passes: the thread may run
        stream.write(memoryview(b"x" * 8192))  # two more blocks, under WAKE_BYTES
        staged = 40 * len(batch) + 8192
        for _ in range(100):  # up to 10 s on a loaded machine; FLUSH_S is 0.1 s
            if sum(writes) == staged:
                break
            time.sleep(0.1)
        assert sum(writes) == staged, (sum(writes), staged)  # before close: flushed by time
        assert len(writes) < 20, writes  # one a batch would be 41
        assert os.pread(fd, staged, 0) == batch * 40 + b"x" * 8192
        stream.close()
    finally:
        os.close(fd)
