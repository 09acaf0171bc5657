"""SessionReader: manifests of every shape, the merge by timestamp, and verify's checks."""

import json

import numpy as np
import pytest

import ada.atf as atf
import atf_oracle as O
from ada.atf import format as F
from ada.atf.writer import SessionWriter


def random_session(tmp_path, sizes, seed=0, dup_every=0):
    rng = np.random.default_rng(seed)
    sw = SessionWriter(tmp_path, 99, arch=1, os_id=4, clock_type=3)
    for k, n in enumerate(sizes):
        w = sw.add_thread(1000 + k)
        ev = np.zeros(n, dtype=F.INDEX_EVENT)
        ts = np.cumsum(rng.integers(0 if dup_every else 1, 50, n)).astype(np.uint64)
        ev["timestamp_ns"] = ts
        ev["thread_id"] = 1000 + k
        ev["event_kind"] = 1
        ev["detail_seq"] = F.NO_DETAIL_SEQ
        w.append_index(ev)
    sw.finalize()
    return sw.path


def reference_order(session):
    """The merge computed the slow, obvious way: lexsort by (timestamp, thread position)."""
    ts = np.concatenate([t.index.timestamps for t in session.threads])
    pos = np.concatenate([np.full(len(t), i) for i, t in enumerate(session.threads)])
    seq = np.concatenate([np.arange(len(t)) for t in session.threads])
    order = np.lexsort((pos, ts))
    return pos[order], seq[order]


@pytest.mark.parametrize("chunk", [7, 1000, 1 << 21])
def test_merge_matches_reference_with_ties(tmp_path, chunk):
    s = atf.open_session(random_session(tmp_path, [3000, 1, 0, 2500, 4000], dup_every=1))
    th, seq = [], []
    for a, b in s.merged_chunks(chunk_events=chunk):
        th.append(a)
        seq.append(b)
    want_th, want_seq = reference_order(s)
    assert np.array_equal(np.concatenate(th), want_th)
    assert np.array_equal(np.concatenate(seq), want_seq)


def test_merge_time_window_and_thread_filter(tmp_path):
    s = atf.open_session(random_session(tmp_path, [500, 700, 300], seed=3))
    lo, hi = 2000, 9000
    th, seq = s.merged_order(start_ns=lo, end_ns=hi, threads=[0, 2])
    ts = np.array([s.threads[p].index.timestamps[q] for p, q in zip(th, seq)])
    assert np.all((ts >= lo) & (ts < hi)) and np.all(np.diff(ts.astype(np.int64)) >= 0)
    assert set(th.tolist()) <= {0, 2}
    expected = sum(int(((t.index.timestamps >= lo) & (t.index.timestamps < hi)).sum())
                   for t in (s.threads[0], s.threads[2]))
    assert len(th) == expected


def test_minimal_manifest_and_manifest_without_threads(tmp_path):
    path = random_session(tmp_path, [5, 6])
    (path / "manifest.json").write_text(json.dumps({"threads": [{"id": 1}]}))
    assert [t.id for t in atf.open_session(path).threads] == [1]
    (path / "manifest.json").write_text(json.dumps({"process": {"pid": 99}}))
    assert [t.id for t in atf.open_session(path).threads] == [0, 1]


def test_not_a_session_errors(tmp_path):
    with pytest.raises(atf.NotASessionError, match="no such file"):
        atf.open_session(tmp_path / "missing")
    with pytest.raises(atf.NotASessionError, match="not an ATF session"):
        atf.open_session(tmp_path)
    random_session(tmp_path, [1])
    sw = SessionWriter(tmp_path / "x", 5, arch=1, os_id=4, clock_type=3)
    (sw.path.parent / "pid_6").mkdir()
    (sw.path.parent / "pid_6" / "thread_0").mkdir()
    (sw.path / "thread_0").mkdir()
    with pytest.raises(atf.NotASessionError, match="several processes"):
        atf.open_session(sw.path.parent)
    # `ada trace -o out` writes out/session_<time>/pid_N: `out` names its recordings
    out = tmp_path / "out"
    for k in range(5):
        (out / f"session_2026112{k}_000000").mkdir(parents=True)
        random_session(tmp_path / str(k), [1]).rename(out / f"session_2026112{k}_000000" / "pid_99")
    with pytest.raises(atf.NotASessionError, match="holds recordings, not one: session_20261122_"
                       "000000, session_20261123_000000, session_20261124_000000 and 2 older"):
        atf.open_session(out)


def thread_with_links(tmp_path, forward, back):
    n = len(forward)
    ev = [(10 + i, 1, 3, 1, 0, f) for i, f in enumerate(forward)]
    recs = [O.function_record_r1(b, 3, 10 + min(b, n - 1), 1, [], 0, 0, 0) for b in back]
    d = tmp_path / "pid_3" / "thread_0"
    O.write(d / "index.atf", O.index_file_r1(ev, thread_id=3, flags=1))
    O.write(d / "detail.atf", O.detail_file(recs, [10 + min(b, n - 1) for b in back], back,
                                            thread_id=3))
    return d.parent


@pytest.mark.parametrize("forward,back,needle", [
    ([0, O.NONE32, 1], [0, 1], "links back to index"),  # detail 1 says index 1, index 2 says 1
    ([0, O.NONE32], [0, 1], "not linked from index"),  # hole: detail 1 unlinked
    ([0, 5], [0, 1], "past the end of detail.atf"),
    ([0, 1], [0, 9], "past the end of index.atf"),
])
def test_verify_finds_broken_links(tmp_path, forward, back, needle):
    report = atf.verify(thread_with_links(tmp_path, forward, back))
    assert any(needle in p.message for p in report.problems), [str(p) for p in report.problems]


def test_verify_finds_manifest_disagreements(tmp_path):
    path = random_session(tmp_path, [5, 6])
    (path / "manifest.json").write_text(json.dumps(
        {"threads": [{"id": 0, "index_events": 4}, {"id": 2}]}))
    msgs = [p.message for p in atf.verify(path).problems]
    assert any("manifest says 4 index events" in m for m in msgs)
    assert any("lists thread 2" in m for m in msgs)
    assert any("not listed in manifest" in m for m in msgs)


def test_a_damaged_description_is_left_out_said_and_verified_but_the_events_still_read(tmp_path):
    """The typed manifest (ada.atf.manifest): entries of the wrong shape are left out and
    said; verify reports them; the reference writer's event_count counts as index_events."""
    path = random_session(tmp_path, [5, 6])
    (path / "manifest.json").write_text(json.dumps({
        "tool": {"name": "ada"}, "process": ["not", "an", "object"],
        "threads": [{"id": 0, "event_count": 5, "drops": {"index": 2, "detail": 1}},
                    {"id": 1, "index_events": 6}],
        "symbols": [{"function_id": "0x1", "name": "main", "address": "0x401000"},
                    {"function_id": "zz", "name": "bad id"}, "not an entry",
                    {"function_id": 2, "name": "work"}],
        "windows": [{"start_ns": 1, "end_ns": 9, "truncated": False}, {"start_ns": "x"}]}))
    s = atf.open_session(path)
    m = s.manifest
    assert s.symbol_names() == {1: "main", 2: "work"}
    assert m.symbols[0].address == 0x401000 and m.symbols[0].module_id == 0
    assert [(t.id, t.index_events, t.drops) for t in m.threads] == [(0, 5, 3), (1, 6, 0)]
    assert [(w.start_ns, w.end_ns, w.details) for w in m.windows] == [(1, 9, {"truncated": False})]
    assert m.by_ada and m.process.pid is None
    assert len(m.problems) == 3, m.problems
    assert any("2 entries of 'symbols' left out: symbols[1]" in p for p in m.problems)
    assert any("'process' must be an object" in p for p in m.problems)
    assert s.event_count() == 11  # the events read whatever the description says
    msgs = [p.message for p in atf.verify(path).problems]
    assert sorted(msgs) == sorted(m.problems)


@pytest.mark.parametrize("threads, needle", [
    ('"threads": {"id": 0}', "'threads' must be a list"),
    ('"threads": [{"id": "0"}]', "threads[0] needs an integer 'id'"),
    ('"threads": [{"id": 0}, {"id": 0}]', "thread ids are not unique"),
])
def test_a_manifest_whose_threads_cannot_be_trusted_is_refused_naming_the_key(tmp_path, threads,
                                                                              needle):
    path = random_session(tmp_path, [3])
    (path / "manifest.json").write_text("{" + threads + "}")
    with pytest.raises(atf.ManifestError, match=needle.replace("[", r"\[")):
        atf.open_session(path)
    assert any(needle in p.message for p in atf.verify(path).problems)


def test_verify_finds_out_of_order_and_bad_thread_ids(tmp_path):
    ev = [(10, 1, 3, 1, 0), (5, 1, 3, 2, 0), (6, 1, 4, 7, 0)]
    d = tmp_path / "pid_1" / "thread_0"
    O.write(d / "index.atf", O.index_file_r1(ev, thread_id=3))
    msgs = [str(p) for p in atf.verify(d.parent).problems]
    assert any("@ 96" in m and "before the previous" in m for m in msgs)
    assert any("thread_id 4, header says 3" in m for m in msgs)
    assert any("unknown event_kind 7" in m for m in msgs)


def test_o1_get_cost_is_position_independent(tmp_path):
    """Not a timing test: get() must touch only the one record (checked via the mapping)."""
    path = random_session(tmp_path, [100_000])
    r = atf.open_session(path).threads[0].index
    assert r.get(99_999).seq == 99_999 and r.get(100_000) is None


def test_the_seed_reader_api(tmp_path):
    """M1_E7_I2's names: merged_iter, event_count, time_range, get_detail_for, get_index_for,
    find_start, get, get_by_index_seq, each checked against the bulk arrays."""
    sw = SessionWriter(tmp_path, 5, arch=1, os_id=4, clock_type=3)
    for k, n in enumerate((40, 25)):
        w = sw.add_thread(700 + k)
        ev = np.zeros(n, dtype=F.INDEX_EVENT)
        ev["timestamp_ns"] = 1000 + 3 * np.arange(n) + k  # interleaved, never equal
        ev["function_id"] = np.arange(n) % 4
        ev["thread_id"] = 700 + k
        ev["event_kind"] = np.where(np.arange(n) % 2 == 0, F.EVENT_CALL, F.EVENT_RETURN)
        ev["detail_seq"] = F.NO_DETAIL_SEQ
        w.append_index(ev)
        for j, seq in enumerate(range(0, n, 5)):  # every fifth event has detail
            w.set_detail_seq(seq, j)
            w.write_detail_event(seq, int(ev["timestamp_ns"][seq]), F.DETAIL_FUNCTION_CALL,
                                 seq % 4, regs=[seq, 700 + k])
    sw.finalize()
    s = atf.open_session(sw.path)
    assert s.event_count() == 65 and s.time_range() == (1000, 1000 + 3 * 39)

    merged = list(s.merged_iter())
    positions, seqs = s.merged_order()
    assert [(p, e.seq) for p, e in merged] == list(zip(positions.tolist(), seqs.tolist()))
    assert all(e == s.threads[p].index.get(e.seq) for p, e in merged)
    ts = [e.timestamp_ns for _, e in merged]
    assert ts == sorted(ts) and len(set(ts)) == 65
    window = [(p, e.seq) for p, e in s.merged_iter(start_ns=1030, end_ns=1060, threads=[1])]
    assert window == [(1, q) for q in range(10, 20)]

    t = s.threads[1]
    assert t.index.has_detail and t.index.time_range() == (1001, 1001 + 3 * 24)
    assert t.index.find_start(1001) == 0 and t.index.find_start(1002) == 1
    assert t.index.find_start(10 ** 9) == len(t.index) == 25
    for seq in range(25):
        event = t.index.get(seq)
        by_event, by_seq = t.get_detail_for(event), t.get_detail_for(seq)
        assert by_event == by_seq
        assert (by_event is not None) == (seq % 5 == 0)
        if by_event is not None:
            assert by_event.regs[:2] == (seq, 701) and by_event.seq == seq // 5
            assert t.get_index_for(by_event) == t.get_index_for(by_event.seq) == event
            assert t.detail.get_by_index_seq(seq) == by_event
    assert [d.index_seq for d in t.detail] == list(range(0, 25, 5))
    assert t.detail.get(len(t.detail)) is None and t.get_index_for(len(t.detail)) is None
    assert t.index.get(25) is None and t.get_detail_for(25) is None


def test_a_session_of_more_threads_than_the_soft_open_file_limit_reads(tmp_path):
    """Each mapped thread file holds a descriptor: a session of 300 threads read with a soft
    limit of 100 open files raises it to the hard limit instead of failing (the emulated arm64
    machine's 1,024 failed on 3,000 threads)."""
    import resource
    import subprocess
    import sys
    path = random_session(tmp_path, [3] * 300)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 400:
        pytest.fail(f"this machine's hard limit on open files ({hard}) is below the test's need")
    code = ("import resource, ada.atf as atf\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (100, resource.getrlimit("
            "resource.RLIMIT_NOFILE)[1]))\n"
            f"s = atf.open_session({str(path)!r})\n"
            "print(sum(len(t) for t in s.threads), resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 100)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["900", "True"]
