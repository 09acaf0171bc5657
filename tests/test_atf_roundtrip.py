"""Writers and readers together: everything written reads back, byte-exact and linked."""

import json
import os
import struct

import crc32c
import numpy as np
import pytest

import ada.atf as atf
import atf_oracle as O
from ada.atf import format as F
from ada.atf.writer import SessionWriter, ThreadWriter


def make_events(n, tid=42, t0=1000, step=3):
    ev = np.zeros(n, dtype=F.INDEX_EVENT)
    ev["timestamp_ns"] = t0 + step * np.arange(n, dtype=np.uint64)
    ev["function_id"] = np.arange(n) % 5
    ev["thread_id"] = tid
    ev["event_kind"] = np.where(np.arange(n) % 2 == 0, F.EVENT_CALL, F.EVENT_RETURN)
    ev["call_depth"] = 0
    ev["detail_seq"] = F.NO_DETAIL_SEQ
    return ev


def new_writer(tmp_path, tid=42):
    return ThreadWriter(tmp_path / "thread_0", thread_id=tid, arch=F.ARCH_X86_64,
                        os_id=F.OS_LINUX, clock_type=F.CLOCK_BOOTTIME)


def test_bulk_and_single_appends_read_back_exactly(tmp_path):
    ev = make_events(1000)
    w = new_writer(tmp_path)
    assert w.append_index(ev[:400]) == 0
    assert w.append_index(ev[400:900].tobytes()) == 400  # raw 32-byte records
    for row in ev[900:]:
        w.write_index_event(int(row["timestamp_ns"]), int(row["function_id"]),
                            int(row["event_kind"]), 0)
    w.finalize()
    r = atf.IndexReader(tmp_path / "thread_0" / "index.atf")
    assert len(r) == 1000 and r.state == "clean" and r.revision == 1
    assert r.events.tobytes() == ev.tobytes()
    assert r[999].timestamp_ns == int(ev["timestamp_ns"][999])
    assert r[-1] == r[999]
    assert r.time_range() == (1000, 1000 + 3 * 999)
    assert not r.has_detail and not (tmp_path / "thread_0" / "detail.atf").exists()


def test_header_and_footer_bytes_follow_the_spec(tmp_path):
    ev = make_events(10)
    w = new_writer(tmp_path, tid=7)
    w.append_index(ev)
    w.finalize()
    data = (tmp_path / "thread_0" / "index.atf").read_bytes()
    body = ev.tobytes()
    expected_header = O.index_header_r1(thread_id=7, count=10, footer_offset=64 + 320,
                                        t0=1000, t1=1027)
    assert data[:64] == expected_header
    assert data[64:-64] == body
    assert data[-64:] == O.index_footer(body, 10, 1000, 1027)
    assert struct.unpack_from("<I", data, len(data) - 60)[0] == crc32c.crc32c(body)


def test_detail_lane_is_lazy_linked_and_checksummed(tmp_path):
    w = new_writer(tmp_path)
    w.append_index(make_events(4))
    assert not (tmp_path / "thread_0" / "detail.atf").exists()
    d0 = w.write_detail_event(1, 1003, F.DETAIL_FUNCTION_RETURN, 1,
                              regs=[1, 2, 3, 4, 5, 6, 99, 8], lr=0x10, fp=0x20, sp=0x30,
                              stack=b"\x01\x02\x03")
    w.set_detail_seq(1, d0)
    recs = O.function_record_r1(3, 42, 1009, 3, [5], 0, 0, 0x40, b"z" * 16)
    assert w.append_detail(recs) == 1
    w.set_detail_seq(3, 1)  # patched after being written: checksum must still hold
    w.finalize()
    t = atf.ThreadReader(tmp_path / "thread_0")
    assert t.index.has_detail and len(t.detail) == 2
    ev = t.get_detail_for(1)
    assert ev.index_seq == 1 and ev.return_value == 99 and ev.registers["rdi"] == 1
    assert (ev.lr, ev.fp, ev.sp, ev.stack) == (0x10, 0x20, 0x30, b"\x01\x02\x03")
    assert t.get_index_for(1).seq == 3
    assert t.detail.get_by_index_seq(3).seq == 1 and t.detail.get_by_index_seq(2) is None
    assert t.get_detail_for(0) is None
    report = atf.verify(tmp_path / "thread_0")
    assert report.ok, report.problems


def test_malformed_detail_input_is_refused(tmp_path):
    w = new_writer(tmp_path)
    rec = bytearray(O.function_record_r1(0, 42, 1, 1, [], 0, 0, 0, b"ab"))
    rec[0] = 200  # total_length no longer matches
    with pytest.raises(atf.WriterError):
        w.append_detail(bytes(rec))
    with pytest.raises(atf.WriterError):
        w.append_index(b"\0" * 33)


def test_uniform_and_mixed_record_lengths_walk_the_same(tmp_path):
    w = new_writer(tmp_path)
    recs = [O.function_record_r1(i, 42, 10 + i, 1, [i], 0, 0, 0, b"s" * (8 if i % 97 else 3))
            for i in range(500)]
    w.append_index(make_events(500, t0=10, step=1))
    w.append_detail(b"".join(recs))
    for i in range(500):
        w.set_detail_seq(i, i)
    w.finalize()
    d = atf.DetailReader(tmp_path / "thread_0" / "detail.atf")
    assert len(d) == 500
    assert [d[i].regs[0] for i in (0, 96, 97, 98, 499)] == [0, 96, 97, 98, 499]
    assert d[97].stack == b"sss" and d[98].stack == b"s" * 8
    assert atf.verify(tmp_path / "thread_0").ok


def test_session_writer_layout_and_atomic_manifest(tmp_path):
    sw = SessionWriter(tmp_path, 4321, arch=1, os_id=4, clock_type=3)
    assert sw.path.name == "pid_4321" and sw.path.parent.name.startswith("session_")
    sw2 = SessionWriter(tmp_path, 4321, arch=1, os_id=4, clock_type=3)
    assert sw2.path != sw.path  # same second: a distinct directory, never shared
    w0, w1 = sw.add_thread(11), sw.add_thread(12)
    w0.append_index(make_events(3, tid=11))
    w1.append_index(make_events(5, tid=12))
    sw.finalize()
    sw.write_manifest({"threads": [{"id": 0}, {"id": 1}]})
    assert sorted(os.listdir(sw.path)) == ["manifest.json", "thread_0", "thread_1"]
    assert json.loads((sw.path / "manifest.json").read_text())["threads"][1]["id"] == 1
    s = atf.open_session(sw.path.parent)  # the session_* directory works too
    assert [len(t) for t in s.threads] == [3, 5] and s.event_count() == 8


def test_finalize_is_idempotent_and_closes(tmp_path):
    w = new_writer(tmp_path)
    w.append_index(make_events(2))
    w.finalize()
    w.finalize()
    with pytest.raises(atf.WriterError):
        w.append_index(make_events(1))


def test_empty_thread_reads_as_empty(tmp_path):
    w = new_writer(tmp_path)
    w.finalize()
    r = atf.IndexReader(tmp_path / "thread_0" / "index.atf")
    assert len(r) == 0 and r.time_range() is None and list(r) == []
    assert r.get(0) is None
    with pytest.raises(IndexError):
        r[0]


def test_iteration_and_find_start(tmp_path):
    w = new_writer(tmp_path)
    w.append_index(make_events(200_000, step=2))
    w.finalize()
    r = atf.IndexReader(tmp_path / "thread_0" / "index.atf")
    seqs = [e.seq for e in r]
    assert seqs == list(range(200_000))
    assert r.find_start(1000) == 0 and r.find_start(1001) == 1 and r.find_start(1002) == 1
    assert r.find_start(10**12) == 200_000


def test_batched_links_patch_file_and_pending_events(tmp_path):
    w = new_writer(tmp_path)
    w.append_index(make_events(200_000, t0=0, step=1))
    for i in range(5):  # still in the writer's buffer
        w.write_index_event(200_000 + i, 1, F.EVENT_CALL, 0)
    seqs = np.array([3, 4, 5, 70_000, 199_999, 200_002])
    w.set_detail_seqs(seqs, np.arange(6))
    w.append_detail(b"".join(O.function_record_r1(int(q), 42, int(q), 1, [], 0, 0, 0)
                             for q in seqs))
    w.finalize()
    t = atf.ThreadReader(tmp_path / "thread_0")
    linked = np.flatnonzero(t.index.events["detail_seq"] != F.NO_DETAIL_SEQ)
    assert list(linked) == list(seqs)
    assert [t.get_detail_for(int(q)).index_seq for q in seqs] == list(seqs)
    assert atf.verify(tmp_path / "thread_0").ok  # the checksum was recomputed after patching
