"""`ada export` and `ada query`, read back with independent readers: Perfetto's own protos (the
`perfetto` package), json, pyarrow, DuckDB, and compared with an independent oracle (a plain
stack over the recorded events, tests/stack_oracle.py). Every call must come back once,
properly nested, with its name, and the figures must be `ada report`'s."""

import json
import os
import subprocess
import sys
import urllib.request
from collections import Counter
from pathlib import Path

import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as P

import ada.atf as atf
from ada.atf import format as F
from ada.tracer.analysis import sql as Q
from ada.tracer.analysis.arguments import Decoder
from ada.tracer.analysis.tables import VIEWS
from helpers import run_ada, session_path
from stack_oracle import LEFT, NO_CALL, OPEN, pair_by_stack
from test_analysis import BALANCED, UNBALANCED, random_tree, write_session
from test_calls_oracle import oracle_selected


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """Three threads: balanced with recursion, every unbalanced case, a random tree."""
    rng = np.random.default_rng(5)
    return write_session(tmp_path_factory.mktemp("synthetic"), BALANCED, UNBALANCED,
                         random_tree(rng, 3000))


@pytest.fixture(scope="module")
def real(tmp_path_factory, target_bin):
    """A real traced program: recursion (fact), a longjmp out of jumper(), after() called
    after it; with the detail lane, so arguments and return values are there."""
    out = run_ada("trace", "-q", "-o", tmp_path_factory.mktemp("real"), "--detail",
                  "-f", target_bin("depth"), "-i", "depth!fact", "-i", "depth!jumper",
                  "-i", "depth!after")
    assert out.returncode == 0, out.stderr
    return atf.open_session(session_path(out))


def oracle_calls(thread, timeline_only=False):
    """The oracle's calls of a thread (a plain stack over its recorded events); with
    `timeline_only`, those a timeline shows (a RETURN of a function not open nests in
    nothing)."""
    ev = thread.index.events
    events = list(zip(ev["timestamp_ns"].tolist(), ev["function_id"].tolist(),
                      ev["event_kind"].tolist()))
    timeline = []
    calls = pair_by_stack(events, begins_inside=True, timeline=timeline)
    if timeline_only:
        shown = {key for _, key in timeline}
        calls = {k: c for k, c in calls.items() if k in shown}
    return calls


def expected_calls(session):
    """(tid, name, start, end) of every call a timeline shows, as a multiset: the oracle's."""
    names = session.symbol_names()
    return Counter((t.thread_id, names.get(c["function"], f"0x{c['function']:016x}"),
                    c["start"], c["end"])
                   for t in session.threads
                   for c in oracle_calls(t, timeline_only=True).values())


def export(session, tmp_path, fmt, *args):
    out = tmp_path / f"out.{fmt}"
    done = run_ada("export", session.path, "-f", fmt, "-o", out, *args)
    assert done.returncode == 0, done.stderr
    return out


def perfetto_slices(path):
    """Slices rebuilt from a Perfetto trace with its official protos: BEGIN pushes, END pops,
    per track; any END without a BEGIN, or a BEGIN left open, fails."""
    trace = P.Trace()
    trace.ParseFromString(Path(path).read_bytes())
    tid_of, track_of, names, defaults = {}, {}, {}, {}
    stacks, slices, clocks = {}, Counter(), set()
    for p in trace.packet:
        seq = p.trusted_packet_sequence_id
        if p.HasField("track_descriptor") and p.track_descriptor.HasField("thread"):
            tid_of[p.track_descriptor.uuid] = p.track_descriptor.thread.tid
        if p.HasField("trace_packet_defaults"):
            d = p.trace_packet_defaults
            defaults[seq] = d.track_event_defaults.track_uuid
            clocks.add(d.timestamp_clock_id)
        if p.sequence_flags & 1:
            names[seq] = {}
        for n in p.interned_data.event_names:
            names[seq][n.iid] = n.name
        if not p.HasField("track_event") or seq not in defaults:
            continue
        e = p.track_event
        track = e.track_uuid if e.HasField("track_uuid") else defaults[seq]
        stack = stacks.setdefault(track, [])
        if e.type == P.TrackEvent.TYPE_SLICE_BEGIN:
            annotations = {a.name: a.string_value for a in e.debug_annotations}
            stack.append((names[seq][e.name_iid], p.timestamp, annotations))
        elif e.type == P.TrackEvent.TYPE_SLICE_END:
            assert stack, f"an END without a BEGIN at {p.timestamp}"
            name, start, annotations = stack.pop()
            assert start <= p.timestamp
            annotations.update({a.name: a.string_value for a in e.debug_annotations})
            slices[(tid_of[track], name, start, p.timestamp)] += 1
            track_of.setdefault((name, start), annotations)
    assert all(not s for s in stacks.values()), "slices left open"
    return slices, clocks, track_of


@pytest.mark.parametrize("which", ["synthetic", "real"])
def test_perfetto_export_has_every_call_once_nested_and_named(request, tmp_path, which):
    session = request.getfixturevalue(which)
    slices, clocks, _ = perfetto_slices(export(session, tmp_path, "perfetto"))
    assert slices == expected_calls(session) and sum(slices.values()) > 5
    assert clocks == {6}  # BUILTIN_CLOCK_BOOTTIME, Perfetto's default trace clock


def test_perfetto_export_carries_the_detail_lane_as_debug_annotations(real, tmp_path):
    _, _, annotations = perfetto_slices(export(real, tmp_path, "perfetto"))
    after = [a for (name, _), a in annotations.items() if name == "after"]
    # after(long x) returns x + 1 (tests/targets/depth.c): named from its debug information
    assert len(after) == 3 and all(a["args"].startswith("x=") for a in after)
    assert all(int(a["return"]) == int(a["args"][2:]) + 1 for a in after)


@pytest.mark.parametrize("which", ["synthetic", "real"])
def test_chrome_export_reads_back_as_json(request, tmp_path, which):
    synthetic = request.getfixturevalue(which)
    doc = json.loads(export(synthetic, tmp_path, "chrome").read_text())
    events = doc["traceEvents"]
    got = Counter((e["tid"], e["name"], round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000))
                  for e in events if e["ph"] == "X")
    assert got == expected_calls(synthetic)
    named = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert named == {t.thread_id: f"tid {t.thread_id}" for t in synthetic.threads}


def test_folded_stacks_add_up_to_the_report_self_times(real, synthetic, tmp_path):
    for session in (real, synthetic):
        stacks = export(session, tmp_path, "folded").read_text().splitlines()
        by_function = Counter()
        for line in stacks:
            stack, ns = line.rsplit(" ", 1)
            by_function[stack.split(";")[-1]] += int(ns)
        report = json.loads(run_ada("report", session.path, "--json").stdout)["functions"]
        assert by_function == Counter({r["name"]: r["self_ns"] for r in report
                                       if r["self_ns"] > 0})
        assert any(";" in line for line in stacks)


@pytest.mark.parametrize("which", ["synthetic", "real"])
def test_speedscope_export_opens_and_closes_every_frame_in_order(request, tmp_path, which):
    synthetic = request.getfixturevalue(which)
    doc = json.loads(export(synthetic, tmp_path, "speedscope").read_text())
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    frames = [f["name"] for f in doc["shared"]["frames"]]
    got = Counter()
    for profile, thread in zip(doc["profiles"], synthetic.threads):
        assert profile["type"] == "evented" and profile["unit"] == "nanoseconds"
        stack, last = [], profile["startValue"]
        for e in profile["events"]:
            assert e["at"] >= last
            last = e["at"]
            if e["type"] == "O":
                stack.append((e["frame"], e["at"]))
            else:
                frame, start = stack.pop()
                assert frame == e["frame"]  # closes the innermost open frame
                got[(thread.thread_id, frames[frame], start, e["at"])] += 1
        assert not stack and last <= profile["endValue"]
    assert got == expected_calls(synthetic)


def parquet_matches_the_recording(out, session, tids=None, window=(None, None), **filters):
    """events.parquet holds the recorded events (of the threads, in the time window) and
    calls.parquet the oracle's calls (the filters applied as report applies them), read back
    with pyarrow: every column, and `parent` naming the call each was made in."""
    names = session.symbol_names()
    threads = [t for t in session.threads if tids is None or t.thread_id in tids]
    events = pq.read_table(out / "events.parquet").to_pylist()
    want = []
    lo, hi = window
    for t in threads:
        ev = t.index.events
        for seq, e in enumerate(ev.tolist()):
            ts, fid, _, kind, depth, detail = e
            if (lo is None or ts >= lo) and (hi is None or ts <= hi):
                want.append({"thread": t.id, "tid": t.thread_id, "seq": seq,
                             "timestamp_ns": ts, "function_id": fid, "name": names.get(fid),
                             "kind": F.EVENT_KIND_NAMES[kind], "depth": depth,
                             "detail_seq": None if detail == F.NO_DETAIL_SEQ else detail})
    assert sorted(events, key=lambda r: (r["thread"], r["seq"])) == want
    rows = pq.read_table(out / "calls.parquet").to_pylist()
    by_call = {r["call"]: r for r in rows}
    assert len(by_call) == len(rows)
    got = set()
    for r in rows:
        parent = by_call.get(r["parent"]) if r["parent"] is not None else None
        assert r["parent"] is None or parent is not None
        key = lambda c: (c["thread"], c["call_seq"] if c["call_seq"] is not None else -1,  # noqa
                         c["return_seq"] if c["return_seq"] is not None else -1, c["depth"])
        got.add((key(r), r["tid"], r["name"], r["start_ns"], r["end_ns"], r["duration_ns"],
                 r["self_ns"], r["open"], r["no_call"], r["left"],
                 key(parent) if parent else None))
    expected = set()
    for t in threads:
        calls = oracle_selected(oracle_calls(t), start=lo, end=hi, **filters)
        for (cs, rs, d), c in calls.items():
            p = c["parent"]
            expected.add(((t.id, cs, rs, d), t.thread_id, names.get(c["function"]), c["start"],
                          c["end"], c["duration"], c["self"], bool(c["flags"] & OPEN),
                          bool(c["flags"] & NO_CALL), bool(c["flags"] & LEFT),
                          (t.id, *p) if p else None))
    assert got == expected
    assert sorted(r["call"] for r in rows) == list(range(len(rows)))  # numbered densely


@pytest.mark.parametrize("which", ["synthetic", "real"])
def test_parquet_export_holds_the_views_rows(request, tmp_path, which):
    synthetic = request.getfixturevalue(which)
    export(synthetic, tmp_path, "parquet")
    out = export(synthetic, tmp_path, "parquet")  # made again into the same directory
    parquet_matches_the_recording(out, synthetic)
    for view, (_, columns) in VIEWS.items():
        assert pq.read_schema(out / f"{view}.parquet").names == columns
    # and by independent figures: every event once, the self times of `ada report`
    table = pq.read_table(out / "events.parquet")
    assert table.num_rows == synthetic.event_count()
    assert str(table.schema.field("timestamp_ns").type) == "uint64"
    per_name = dict(duckdb.sql(f"SELECT name, sum(self_ns) FROM '{out}/calls.parquet' "
                               "GROUP BY name").fetchall())
    report = json.loads(run_ada("report", synthetic.path, "--json").stdout)["functions"]
    assert per_name == {r["name"]: r["self_ns"] for r in report}
    assert sorted(pq.read_table(out / "functions.parquet")["name"].to_pylist()) == sorted(
        synthetic.symbol_names().values())
    if which == "real":  # the detail lane's arguments, decoded
        assert pq.read_table(out / "args.parquet").num_rows > 0


def test_parquet_export_takes_the_filters(synthetic, tmp_path):
    t = synthetic.threads[2]
    ts = t.index.events["timestamp_ns"]
    lo, hi = int(ts[len(ts) // 4]), int(ts[len(ts) // 2])
    out = export(synthetic, tmp_path, "parquet", "--tid", t.thread_id, "--from-ns", lo,
                 "--to-ns", hi, "-D", "3")
    parquet_matches_the_recording(out, synthetic, tids=[t.thread_id], window=(lo, hi),
                                  max_depth=3)
    events = pq.read_table(out / "events.parquet")
    assert set(events["tid"].to_pylist()) == {t.thread_id}
    assert events.num_rows == int(((ts >= lo) & (ts <= hi)).sum())
    assert max(pq.read_table(out / "calls.parquet")["depth"].to_pylist()) < 3


def test_exports_take_the_filters(synthetic, tmp_path):
    tid = synthetic.threads[2].thread_id
    slices, _, _ = perfetto_slices(export(synthetic, tmp_path, "perfetto", "--tid", tid,
                                          "-D", "2"))
    want = Counter({k: v for k, v in expected_calls(synthetic).items() if k[0] == tid})
    calls = oracle_calls(synthetic.threads[2], timeline_only=True).values()
    assert sum(slices.values()) == sum(c["depth"] < 2 for c in calls) < sum(want.values())
    assert {k[0] for k in slices} == {tid}
    doc = json.loads(export(synthetic, tmp_path, "chrome", "-t", "100").read_text())
    assert all(e["dur"] >= 0.1 for e in doc["traceEvents"] if e["ph"] == "X")


def test_query_views_and_output_formats(synthetic):
    report = json.loads(run_ada("report", synthetic.path, "--json").stdout)["functions"]
    rows = json.loads(run_ada("query", synthetic.path, "SELECT name, count(*) AS calls, "
                              "sum(self_ns) AS self FROM calls GROUP BY name", "--json").stdout)
    assert {r["name"]: (r["calls"], r["self"]) for r in rows} == {
        r["name"]: (r["calls"], r["self_ns"]) for r in report}
    csv = run_ada("query", synthetic.path, "SELECT kind, count(*) AS n FROM events "
                  "GROUP BY kind ORDER BY kind", "--csv").stdout.splitlines()
    kinds = Counter(int(k) for t in synthetic.threads for k in t.index.events["event_kind"])
    assert csv == ["kind,n"] + sorted(f"{F.EVENT_KIND_NAMES[k]},{n}" for k, n in kinds.items())
    text = run_ada("query", synthetic.path, "SELECT tid, events FROM threads ORDER BY tid").stdout
    assert text.splitlines()[-1] == "(3 rows)" and text.splitlines()[2].split() == [
        str(synthetic.threads[0].thread_id), str(len(synthetic.threads[0]))]
    listing = run_ada("query", synthetic.path).stdout
    for view, (_, columns) in VIEWS.items():
        line = listing.split(f"{view}: ")[1].splitlines()[1]
        assert [c.split()[0] for c in line.strip().split(", ")] == columns


def test_query_and_export_errors_are_one_line(synthetic, tmp_path):
    bad = run_ada("query", synthetic.path, "SELEKT 1")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "syntax" in bad.stderr.lower()
    missing = run_ada("query", synthetic.path, "SELECT * FROM nothing")
    assert missing.returncode == 1 and "nothing" in missing.stderr
    no_viewer = run_ada("export", synthetic.path, "-f", "folded", "--open")
    assert no_viewer.returncode == 1 and "--open" in no_viewer.stderr
    into_dir = run_ada("export", synthetic.path, "-f", "perfetto", "-o", tmp_path)
    assert into_dir.returncode == 1 and "is a directory" in into_dir.stderr


def test_export_open_serves_the_file_once_to_the_viewer(synthetic, tmp_path):
    """--open points the browser (here BROWSER=true: a browser that does nothing) at
    ui.perfetto.dev with a 127.0.0.1 URL, and serves the file there once, with CORS."""
    out = tmp_path / "open.pftrace"
    env = dict(os.environ, BROWSER="true")
    p = subprocess.Popen([sys.executable, "-m", "ada", "export", str(synthetic.path), "-f",
                          "perfetto", "-o", str(out), "--open"], stderr=subprocess.PIPE,
                         text=True, env=env)
    try:
        line = ""
        while "https://ui.perfetto.dev/#!/?url=" not in line:
            line = p.stderr.readline()
            assert line, "no viewer URL"
        url = line.split("url=")[1].strip()
        with urllib.request.urlopen(url, timeout=10) as r:
            assert r.headers["Access-Control-Allow-Origin"] == "*"
            assert r.read() == out.read_bytes()
        assert p.wait(timeout=10) == 0
    finally:
        p.kill()


def test_the_manifest_anchors_the_recording_clock_to_wall_clock_and_perfetto_has_it(
        real, tmp_path):
    """The agent reads CLOCK_BOOTTIME and CLOCK_REALTIME together as it starts; the Perfetto
    export gives the pair as a ClockSnapshot, so the UI can show wall-clock time."""
    import time
    anchors = real.manifest.document["clock_anchors"]
    start = anchors[0]
    assert start["at"] == "start" and start["uncertainty_ns"] < 50_000_000
    assert abs(start["realtime_ns"] - time.time_ns()) < 600 * 10**9  # recorded minutes ago
    first, last = real.time_range()
    assert start["clock_ns"] <= first and first - start["clock_ns"] < 60 * 10**9
    trace = P.Trace()
    trace.ParseFromString(export(real, tmp_path, "perfetto").read_bytes())
    snapshots = [p.clock_snapshot for p in trace.packet if p.HasField("clock_snapshot")]
    assert [{c.clock_id: c.timestamp for c in s.clocks} for s in snapshots] == [
        {6: start["clock_ns"], 1: start["realtime_ns"]}]


def test_perfetto_export_puts_triggers_and_windows_on_a_track_of_their_own(tmp_path):
    s = write_session(tmp_path, BALANCED)
    manifest = dict(s.manifest.document, triggers=[{"kind": "signal", "timestamp_ns": 500,
                                           "signal": "SIGUSR1"}],
                    windows=[{"start_ns": 400, "end_ns": 700, "truncated": False}])
    (s.path / "manifest.json").write_text(json.dumps(manifest))
    trace = P.Trace()
    trace.ParseFromString(export(atf.open_session(s.path), tmp_path, "perfetto").read_bytes())
    recorder = [p.track_descriptor.uuid for p in trace.packet
                if p.HasField("track_descriptor") and p.track_descriptor.name ==
                "ada flight recorder"]
    assert len(recorder) == 1
    on_it = [(p.timestamp, p.track_event.type, p.track_event.name) for p in trace.packet
             if p.HasField("track_event") and p.track_event.track_uuid == recorder[0]]
    E = P.TrackEvent
    assert on_it == [(400, E.TYPE_SLICE_BEGIN, "window"),
                     (500, E.TYPE_INSTANT, "trigger: signal (signal=SIGUSR1)"),
                     (700, E.TYPE_SLICE_END, "")]


def test_chrome_export_warns_when_viewers_would_struggle(synthetic, tmp_path, monkeypatch,
                                                         capsys):
    from ada.tracer.cli import export as X
    from ada.tracer.cli import main
    monkeypatch.setattr(X, "VIEWER_LIMIT", 10)
    assert main(["export", str(synthetic.path), "-f", "chrome", "-o",
                 str(tmp_path / "big.json")]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "narrow it" in err and "--format perfetto" in err
