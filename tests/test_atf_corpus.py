"""Readers on the committed corpus (tests/data/, built by the struct oracle): both revisions,
recovered files, sessions without a manifest, and corrupt files."""

from pathlib import Path

import numpy as np
import pytest

import ada.atf as atf
import atf_oracle as O
from ada.atf import format as F

DATA = Path(__file__).parent / "data"


def test_revision1_session_with_full_manifest():
    s = atf.open_session(DATA / "r1_session")
    assert [(t.id, len(t)) for t in s.threads] == [(0, 6), (1, 4)]
    assert s.time_range() == (1000, 1500)
    assert s.symbol_names()[2] == "work"
    t0 = s.thread(0)
    d = t0.get_detail_for(1)
    assert d.registers["rdi"] == 7 and d.registers["rsi"] == 8 and d.stack == bytes(range(16))
    assert t0.get_detail_for(2).return_value == 15
    assert t0.get_index_for(1).seq == 2
    assert atf.verify(DATA / "r1_session").ok


def test_recovered_file_keeps_complete_events_only():
    r = atf.IndexReader(DATA / "r1_recovered" / "pid_7" / "thread_0" / "index.atf")
    assert r.state == "recovered" and len(r) == 3
    assert [e.timestamp_ns for e in r] == [10, 20, 30]
    report = atf.verify(DATA / "r1_recovered")
    assert report.ok and report.recovered


def test_revision2_reads_with_normalised_fields():
    s = atf.open_session(DATA / "r2_session")
    t = s.threads[0]
    assert t.index.revision == 2
    ev = t.index.events
    assert list(ev["call_depth"]) == [0, 1, 1, 0, 0, 0]
    assert set(ev["thread_id"]) == {9}
    assert list(ev["detail_seq"]) == [F.NO_DETAIL_SEQ, 0] + [F.NO_DETAIL_SEQ] * 4
    d = t.get_detail_for(1)
    assert d.registers["x0"] == 1 and d.lr == 0xABC and d.thread_id == 9
    assert d.stack == b"\x11" * 4
    assert atf.verify(DATA / "r2_session").ok


def test_chunk_reads_are_the_mapped_events(tmp_path, monkeypatch):
    """IndexReader.read(a, b) copies events [a, b) from the file: the same normalised rows as
    the mapped `.events`, for revision 1, and for revision 2 (whose depth is derived from
    the nesting before `a`, here a trace that begins inside two calls)."""
    from ada.atf import reader
    monkeypatch.setattr(reader, "R2_LEVEL_BLOCK", 16)
    kinds = [2, 2] + [1, 1, 2, 1, 3, 2, 7] * 9 + [1]
    r2 = O.index_file_r2([(10 * i, i % 5, k) for i, k in enumerate(kinds)], thread_id=9)
    r1 = O.index_file_r1([(10 * i, i % 5, 9, k, i % 3) for i, k in enumerate(kinds)])
    for data in (r1, r2):
        index = reader.IndexReader(O.write(tmp_path / "index.atf", data))
        whole = index.events.copy()
        assert len(whole) == len(kinds)
        for a in range(0, len(kinds) + 1, 3):
            for b in (a, a + 1, a + 17, len(kinds) + 5):
                assert np.array_equal(index.read(a, b), whole[a:b]), (index.revision, a, b)
    assert int(whole["call_depth"].min()) == 0 and int(whole["call_depth"][0]) == 1


def test_session_without_manifest_scans_thread_dirs():
    s = atf.open_session(DATA / "no_manifest" / "pid_3")
    assert s.manifest is None
    assert [t.id for t in s.threads] == [0, 3]
    th, seq = s.merged_order()
    # thread_0 has timestamps (5, 9), thread_3 (8, 12): merged 5, 8, 9, 12
    assert [s.threads[i].id for i in th] == [0, 3, 0, 3]
    assert list(seq) == [0, 0, 1, 1]


@pytest.mark.parametrize("name,error", [
    ("bad_magic.atf", atf.BadMagicError), ("big_endian.atf", atf.UnsupportedFormatError),
    ("version9.atf", atf.UnsupportedFormatError), ("short_header.atf", atf.TruncatedFileError),
    ("absurd_count.atf", atf.CorruptFileError)])
def test_corrupt_index_files_raise_precise_errors(name, error):
    with pytest.raises(error) as info:
        atf.IndexReader(DATA / "corrupt" / name)
    assert str(DATA / "corrupt" / name) in str(info.value)


def test_checksum_mismatch_is_found_by_verify():
    report = atf.verify(DATA / "corrupt" / "bad_crc.atf")
    assert any(p.message.startswith("checksum 0x") and p.offset == 132 for p in report.problems)


def test_detail_record_longer_than_file_degrades_the_lane_from_there():
    """A malformed record is reported (verify fails on it) but does not make the lane, or the
    session around it, unreadable: the records before it are read."""
    path = DATA / "corrupt" / "detail_huge_length.atf"
    d = atf.DetailReader(path)
    assert d.state == "degraded" and len(d) == 0
    assert isinstance(d.problem, atf.CorruptFileError)
    assert "total_length 2147483648" in str(d.problem)
    report = atf.verify(path)
    assert not report.ok and "total_length 2147483648" in report.problems[0].message
