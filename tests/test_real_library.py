"""End to end on a real library: an SQL engine's shell (sqlite3) with every export of its library
hooked (`-I libsqlite3.so.0`, over a thousand functions, optimised code full of tail calls),
recorded by each engine, and every reading command held to the oracle (tests/stack_oracle.py,
a plain stack over the recorded events): report, graph, replay, the Perfetto, Parquet and folded
exports, and `ada query`."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter, defaultdict

import duckdb
import pytest

import ada.atf as atf
from ada.tracer.analysis.report import format_duration
from helpers import run_ada, session_path
from stack_oracle import pair_by_stack
from test_calls_oracle import oracle_lines, oracle_stats
from test_exports import expected_calls, export, perfetto_slices

WORKLOAD = """CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT, c REAL);
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1500)
INSERT INTO t(b, c) SELECT printf('row %d', i), i * 0.5 FROM n;
COMMIT;
CREATE INDEX tb ON t(b);
SELECT count(*), sum(c) FROM t WHERE b LIKE 'row 1%';
"""


@pytest.fixture(scope="module", params=["frida", "inline"])
def sqlite(request, tmp_path_factory):
    """A session of the sqlite3 shell running WORKLOAD, recorded by the engine of the param."""
    shell = shutil.which("sqlite3")
    if shell is None:
        pytest.fail("sqlite3 is needed for the real-library tests (scripts/test.sh installs it)")
    out = tmp_path_factory.mktemp(f"sqlite_{request.param}")
    (out / "workload.sql").write_text(WORKLOAD)
    done = run_ada("trace", "-q", "-o", out / "traces", "--hook-engine", request.param,
                   "-I", "libsqlite3.so.0", "-f", shell, ":memory:",
                   f".read {out / 'workload.sql'}", timeout=300)
    assert done.returncode == 0, done.stderr
    assert "612|320673.0" in done.stdout  # the query's answer: the program ran right while traced
    session = atf.open_session(session_path(done))
    assert len(session.manifest.document["symbols"]) > 1000
    return session


def events_of(thread) -> list:
    ev = thread.index.events
    return list(zip(ev["timestamp_ns"].tolist(), ev["function_id"].tolist(),
                    ev["event_kind"].tolist()))


_ORACLE: dict = {}


def oracle(thread) -> dict:
    """The oracle's calls of a thread (worked out once: every test compares with them)."""
    key = (str(thread.index.path), len(thread.index))
    if key not in _ORACLE:
        _ORACLE[key] = pair_by_stack(events_of(thread), begins_inside=True)
    return _ORACLE[key]


def test_the_recorded_depth_is_the_depth_of_the_stack(sqlite):
    """What the hot path wrote: every CALL at the depth of the calls open before it, every
    RETURN the function on top (tail calls nest in the call that jumped)."""
    for t in sqlite.threads:
        ev = t.index.events
        stack = []
        for fid, kind, depth in zip(ev["function_id"].tolist(), ev["event_kind"].tolist(),
                                    ev["call_depth"].tolist()):
            if kind == 1:
                assert depth == len(stack)
                stack.append(fid)
            elif kind == 2:
                assert stack and stack.pop() == fid
        assert len(ev) > 100_000


def oracle_by_name(session) -> dict:
    """name -> (calls, total, self, min, max), the oracle's, over every thread."""
    names = session.symbol_names()
    out = {}
    for t in session.threads:
        for fid, figures in oracle_stats(oracle(t)).items():
            name = names[fid]
            assert name not in out  # one thread here; figures of two would add up
            out[name] = figures
    return out


def test_report_is_the_oracle(sqlite):
    report = json.loads(run_ada("report", sqlite.path, "--json").stdout)["functions"]
    got = {r["name"]: (r["calls"], r["total_ns"], r["self_ns"], r["min_ns"], r["max_ns"])
           for r in report}
    assert got == oracle_by_name(sqlite) and len(got) > 100


def name_path(calls: dict, c: dict, names: dict) -> tuple:
    """(root name, ..., name) of an oracle call, by its parents."""
    path, p = [names[c["function"]]], c["parent"]
    while p is not None:
        path.append(names[calls[p]["function"]])
        p = calls[p]["parent"]
    return tuple(reversed(path))


def oracle_paths_by_name(session) -> dict:
    """(root name, ..., name) -> [calls, total], the oracle's."""
    names = session.symbol_names()
    out = defaultdict(lambda: [0, 0])
    for t in session.threads:
        calls = oracle(t)
        for c in calls.values():
            v = out[name_path(calls, c, names)]
            v[0] += 1
            v[1] += c["duration"]
    return out


def test_graph_is_the_oracle(sqlite):
    """Every line of `ada graph`: its path (by the drawing), calls and total time."""
    lines = run_ada("graph", sqlite.path).stdout.splitlines()
    assert lines[0].startswith("# TOTAL TIME")
    got, stack = {}, []
    for line in lines[1:]:
        total, tree = line.split(" : ", 1)
        m = re.fullmatch(r"([| +-]*)\((\d+)\) (.+)", tree)
        depth = len(m.group(1)) // 2
        del stack[depth:]
        stack.append(m.group(3))
        got[tuple(stack)] = (int(m.group(2)), total.strip())
    want = {path: (calls, format_duration(total))
            for path, (calls, total) in oracle_paths_by_name(sqlite).items()}
    assert got == want and max(map(len, got)) > 5


def test_folded_stacks_are_the_oracle_self_times(sqlite, tmp_path):
    names = sqlite.symbol_names()
    want = Counter()
    for t in sqlite.threads:
        calls = oracle(t)
        for c in calls.values():
            want[";".join(name_path(calls, c, names))] += c["self"]
    got = Counter()
    for line in export(sqlite, tmp_path, "folded").read_text().splitlines():
        stack, ns = line.rsplit(" ", 1)
        got[stack] += int(ns)
    assert got == +want


def test_replay_is_the_oracle(sqlite):
    """Every line of `ada replay`, in order: depth, function, opening, closing or single, and
    the duration where the line has one."""
    names = sqlite.symbol_names()
    lines = run_ada("replay", sqlite.path).stdout.splitlines()
    assert lines[0].startswith("# DURATION")
    got = []
    for line in lines[1:]:
        duration, rest = line.split(" [", 1)
        tree = rest.split("] | ", 1)[1]
        body = tree.lstrip(" ")
        depth = (len(tree) - len(body)) // 2
        if body.startswith("} /* "):
            got.append((depth, body[5:-3], "close", duration.strip()))
        elif body.endswith("() {"):
            got.append((depth, body[:-4], "open", duration.strip()))
        else:
            assert body.endswith("();"), line
            got.append((depth, body[:-3], "leaf", duration.strip()))
    want = []
    for t in sqlite.threads:
        for depth, fid, is_end, leaf, ns, _ in oracle_lines(events_of(t)):
            kind = "leaf" if leaf else "close" if is_end else "open"
            want.append((depth, names[fid], kind, "" if kind == "open" else format_duration(ns)))
    assert got == want


def test_perfetto_export_is_the_oracle(sqlite, tmp_path):
    """Read back with Perfetto's own protos: every call once, nested and named."""
    slices, _, _ = perfetto_slices(export(sqlite, tmp_path, "perfetto"))
    assert slices == expected_calls(sqlite)


def test_parquet_export_and_query_are_the_oracle(sqlite, tmp_path):
    """The calls of the Parquet export read by DuckDB, and `ada query` (its own cache of the
    calls), per function: calls, total and self."""
    names = sqlite.symbol_names()
    sums = defaultdict(lambda: [0, 0, 0])  # every call's own duration (a recursion's too)
    for t in sqlite.threads:
        for c in oracle(t).values():
            v = sums[names[c["function"]]]
            v[0] += 1
            v[1] += c["duration"]
            v[2] += c["self"]
    want = {name: tuple(v) for name, v in sums.items()}
    out = export(sqlite, tmp_path, "parquet")
    rows = duckdb.sql(f"SELECT name, count(*), sum(duration_ns), sum(self_ns) "
                      f"FROM '{out}/calls.parquet' GROUP BY name").fetchall()
    assert {r[0]: tuple(map(int, r[1:])) for r in rows} == want
    query = "SELECT name, count(*) AS n, sum(duration_ns) AS t, sum(self_ns) AS s " \
            "FROM calls GROUP BY name"
    for _ in range(2):  # the first run makes the cached calls, the second reads them
        done = run_ada("query", sqlite.path, query, "--json")
        assert done.returncode == 0, done.stderr
        assert {r["name"]: (r["n"], r["t"], r["s"]) for r in json.loads(done.stdout)} == want
    assert (sqlite.path / ".ada-cache").is_dir()
    verified = run_ada("verify", sqlite.path)  # the cache beside the recording is no fault
    assert verified.returncode == 0 and "OK: clean" in verified.stdout, verified.stdout


def test_query_describe_stays_narrow_with_a_thousand_names(sqlite):
    """Function names are plain text in the views: a type that spelled out every name (an
    ENUM) would make `DESCRIBE` lines thousands of characters wide."""
    for view in ("calls", "events", "functions"):
        text = run_ada("query", sqlite.path, f"DESCRIBE {view}").stdout
        assert "name" in text or view == "events"
        assert max(map(len, text.splitlines())) < 120, view
