"""Crash recovery and hostile input: killed writers, truncation everywhere, random corruption.

Every case must end in either a readable file (every complete event, nothing
invented) or an AtfError; never another exception, a hang or a huge allocation.
"""

import json
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import ada.atf as atf
import atf_oracle as O
from ada.atf import format as F

WRITER_SCRIPT = textwrap.dedent("""
    import sys, numpy as np
    from ada.atf import format as F
    from ada.atf.writer import ThreadWriter
    w = ThreadWriter(sys.argv[1], thread_id=5, arch=1, os_id=4, clock_type=3)
    seq = 0
    print("ready", flush=True)
    while True:
        n = 257
        ev = np.zeros(n, dtype=F.INDEX_EVENT)
        ev["timestamp_ns"] = np.arange(seq, seq + n)
        ev["function_id"] = np.arange(seq, seq + n) * 7
        ev["thread_id"] = 5
        ev["event_kind"] = 1
        ev["detail_seq"] = F.NO_DETAIL_SEQ
        w.append_index(ev)
        for i in range(seq, seq + n, 64):
            w.set_detail_seq(i, w.detail_count)
            w.write_detail_event(i, i, 3, i * 7, regs=[i], stack=bytes(16))
        for i in range(3):
            w.write_index_event(seq + n + i, (seq + n + i) * 7, 1, 0)
        seq += n + 3
""")


def read_prefix_invariants(thread_dir: Path) -> tuple[int, int]:
    r = atf.IndexReader(thread_dir / "index.atf")
    ev = r.events
    ts = ev["timestamp_ns"].astype(np.int64)
    assert np.array_equal(ts, np.arange(len(ev))), "index events must be an exact prefix"
    assert np.array_equal(ev["function_id"].astype(np.int64), ts * 7)
    d = None
    if (thread_dir / "detail.atf").exists():
        d = atf.DetailReader(thread_dir / "detail.atf")
        linked = np.flatnonzero(ev["detail_seq"] != F.NO_DETAIL_SEQ)
        assert np.array_equal(d.index_seqs, linked[:len(d)])
        for k in (0, len(d) - 1) if len(d) else ():
            ev_k = d[k]
            assert ev_k.function_id == ev_k.index_seq * 7 and ev_k.regs[0] == ev_k.index_seq
    return len(r), (len(d) if d is not None else 0)


@pytest.mark.parametrize("delay", [0.05, 0.2, 0.4])
def test_writer_killed_at_random_moment_leaves_a_recoverable_prefix(tmp_path, delay):
    script = tmp_path / "w.py"
    script.write_text(WRITER_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "thread_0")],
                            stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    n_index, n_detail = read_prefix_invariants(tmp_path / "thread_0")
    assert n_index > 0
    report = atf.verify(tmp_path / "thread_0")
    assert report.recovered
    assert report.ok, [str(p) for p in report.problems]


def finalized_thread(tmp_path: Path) -> Path:
    ev = [(100 + i, i % 3, 9, 1 + i % 2, 0, (i // 2) if i % 2 == 0 and i < 8 else O.NONE32)
          for i in range(12)]
    recs = [O.function_record_r1(2 * k, 9, 100 + 2 * k, 0, [k], 0, 0, 0, b"q" * (4 + k))
            for k in range(4)]
    d = tmp_path / "thread_0"
    O.write(d / "index.atf", O.index_file_r1(ev, thread_id=9, flags=1))
    O.write(d / "detail.atf", O.detail_file(recs, [100, 102, 104, 106], [0, 2, 4, 6],
                                            thread_id=9))
    return d


def test_finalized_fixture_is_clean(tmp_path):
    report = atf.verify(finalized_thread(tmp_path))
    assert report.ok and not report.recovered, [str(p) for p in report.problems]


@pytest.mark.parametrize("lane", ["index.atf", "detail.atf"])
def test_truncation_at_every_byte(tmp_path, lane):
    d = finalized_thread(tmp_path)
    full = (d / lane).read_bytes()
    original = atf.ThreadReader(d)
    want_index = original.index.events.copy()
    for size in range(len(full)):
        (d / lane).write_bytes(full[:size])
        try:
            t = atf.ThreadReader(d)
        except atf.AtfError:
            assert size < 64 or lane == "detail.atf", f"size {size}"
            continue
        n = len(t.index)
        assert t.index.events.tobytes() == want_index[:n].tobytes(), f"size {size}"
        if t.detail is not None:
            for k in range(len(t.detail)):
                assert t.detail[k].stack == b"q" * (4 + k)
        atf.verify(d)  # must not raise


def flip_bytes(data: bytes, rng: random.Random, flips: int) -> bytes:
    b = bytearray(data)
    for _ in range(flips):
        b[rng.randrange(len(b))] = rng.randrange(256)
    return bytes(b)


def exercise(path: Path) -> None:
    """Everything a user can do with a session; only AtfError may come out."""
    try:
        s = atf.open_session(path)
        s.merged_order()
        s.symbol_names()
        for t in s.threads:
            list(t.index)
            t.index.find_start(105)
            if t.detail is not None:
                for ev in t.detail:
                    if ev.is_function:
                        ev.registers, ev.stack, ev.return_value  # noqa: B018
                t.detail.get_by_index_seq(2)
            for i in range(len(t.index)):
                t.get_detail_for(i)
    except atf.AtfError:
        pass
    atf.verify(path)


def test_random_byte_flips_never_escape_as_other_errors(tmp_path):
    rng = random.Random(1234)
    d = finalized_thread(tmp_path / "pid_1")
    manifest = json.dumps({"threads": [{"id": 0, "index_events": 12}],
                           "symbols": [{"function_id": "0x0000000000000001", "name": "f"}]})
    originals = {p: p.read_bytes() for p in d.iterdir()}
    manifest_path = d.parent / "manifest.json"
    for trial in range(400):
        for p, data in originals.items():
            p.write_bytes(flip_bytes(data, rng, rng.choice([1, 2, 8])) if rng.random() < 0.7
                          else data)
        manifest_path.write_text(flip_bytes(manifest.encode(), rng, 1).decode("latin-1")
                                 if trial % 5 == 0 else manifest)
        exercise(d.parent)


@pytest.mark.parametrize("field_offset,value", [
    (28, 0xFFFFFFFF),  # header event_count
    (32, 1 << 62),  # events_offset
    (40, 1 << 62),  # footer_offset
])
def test_absurd_header_values(tmp_path, field_offset, value):
    d = finalized_thread(tmp_path)
    b = bytearray((d / "index.atf").read_bytes())
    width = 4 if field_offset == 28 else 8
    b[field_offset:field_offset + width] = value.to_bytes(width, "little")
    (d / "index.atf").write_bytes(bytes(b))
    exercise(tmp_path)


def test_absurd_detail_counts(tmp_path):
    d = finalized_thread(tmp_path)
    b = bytearray((d / "detail.atf").read_bytes())
    b[-56:-48] = (1 << 63).to_bytes(8, "little")  # footer event_count
    (d / "detail.atf").write_bytes(bytes(b))
    with pytest.raises(atf.CorruptFileError, match="event_count"):
        atf.DetailReader(d / "detail.atf")
    assert not atf.verify(d).ok


def test_hostile_manifests(tmp_path):
    finalized_thread(tmp_path)
    for text in ['[]', '{"threads": 5}', '{"threads": [{"id": -1}]}',
                 '{"threads": [{"id": 99999999999}]}', '{"threads": [{"id": 0}, {"id": 0}]}',
                 '{"threads": [{"id": 7}]}', '{', '{"symbols": 3, "threads": [{"id": 0}]}',
                 '[' * 100000]:
        (tmp_path / "manifest.json").write_text(text)
        exercise(tmp_path)
        if text != '{"symbols": 3, "threads": [{"id": 0}]}':
            assert not atf.verify(tmp_path).ok, text


def test_partial_footer_is_not_read_as_events(tmp_path):
    d = finalized_thread(tmp_path)
    full = (d / "index.atf").read_bytes()
    cut = full[:64 + 12 * 32] + full[-64:-64 + 40]  # killed while writing the footer
    (d / "index.atf").write_bytes(cut)
    r = atf.IndexReader(d / "index.atf")
    assert r.state == "recovered" and len(r) == 12
