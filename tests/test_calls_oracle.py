"""The calls table and what is built on it (report, graph, replay) against an independent oracle
(tests/stack_oracle.py: a plain stack, one event at a time), on generated threads: call trees
with recursion and tail calls, exceptions, longjmps ada marked and ones it did not, RETURNs of
functions that were not open, threads that begin inside calls or end with calls open, events of
other kinds, cut into chunks of many sizes."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ada.atf as atf
from ada.atf import format as F
from ada.atf.writer import SessionWriter
from ada.tracer.analysis import calls as C
from ada.tracer.analysis import pairing
from ada.tracer.analysis import replay as P
from ada.tracer.analysis import report as R
from stack_oracle import LEFT, NO_CALL, OPEN, pair_by_stack

CALL, RETURN, EXCEPTION = F.EVENT_CALL, F.EVENT_RETURN, F.EVENT_EXCEPTION
# Each chunk is paired by the C kernel (pairing.c) where it compiles, else with numpy: both
# are held to the oracle.
BACKENDS = ["c", "numpy"]


@contextlib.contextmanager
def backend(name: str):
    """Pair with `name` ("c": the kernel, which must be there; "numpy")."""
    old = os.environ.get("ADA_PAIRING")
    os.environ["ADA_PAIRING"] = name
    try:
        if name == "c":
            assert pairing._kernel() is not None, "the C kernel did not compile"
        yield
    finally:
        if old is None:
            del os.environ["ADA_PAIRING"]
        else:
            os.environ["ADA_PAIRING"] = old
CHUNKS = [1, 2, 3, 5, 8, 64, 1 << 20]
SETTINGS = settings(max_examples=int(__import__("os").environ.get("ORACLE_EXAMPLES", 60)), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def thread_events(draw, max_actions=120):
    """(timestamp, function, kind) of one thread, as a recording could hold them."""
    fids = st.integers(0, 5)
    stack = [draw(fids) for _ in range(draw(st.integers(0, 2)))]  # begun before the recording
    events, t = [], 0
    for _ in range(draw(st.integers(1, max_actions))):
        t += draw(st.integers(0, 3))
        action = draw(st.sampled_from(["call"] * 4 + ["return"] * 3 + [
            "exception", "longjmp", "longjmp unmarked", "orphan", "other"]))
        if action == "call":
            stack.append(draw(fids))
            events.append((t, stack[-1], CALL))
        elif action in ("return", "exception") and stack:
            events.append((t, stack.pop(), RETURN if action == "return" else EXCEPTION))
        elif action.startswith("longjmp") and stack:
            for _ in range(draw(st.integers(1, len(stack)))):
                f = stack.pop()
                if action == "longjmp":  # ada marks each call a longjmp left
                    events.append((t, f, EXCEPTION))
        elif action == "orphan":
            events.append((t, draw(fids), RETURN))
        elif action == "other":
            events.append((t, draw(fids), 7))
    if not events:
        events.append((t, 0, CALL))
    return events


def write_session(directory, *threads):
    writer = SessionWriter(directory, 4242, arch=F.ARCH_X86_64, os_id=F.OS_LINUX,
                           clock_type=F.CLOCK_BOOTTIME)
    for tid, events in enumerate(threads, start=100):
        ev = np.zeros(len(events), dtype=F.INDEX_EVENT)
        ev["timestamp_ns"], ev["function_id"], ev["event_kind"] = zip(*events)
        ev["thread_id"], ev["detail_seq"] = tid, F.NO_DETAIL_SEQ
        writer.add_thread(tid).append_index(ev)
    writer.finalize()
    writer.write_manifest({"threads": [{"id": i} for i in range(len(threads))],
                           "symbols": [{"function_id": f"0x{i:016x}", "name": f"f{i}"}
                                       for i in range(6)]})
    return atf.open_session(writer.path)


def as_oracle(calls: C.Calls) -> dict:
    """The engine's table in the oracle's shape: keyed by (call_seq, return_seq, depth)."""
    rows = calls.to_records()
    key_of = {int(r["call"]): (int(r["call_seq"]), int(r["return_seq"]), int(r["depth"]))
              for r in rows}
    return {key_of[int(r["call"])]: {
        "function": int(r["function_id"]), "start": int(r["start_ns"]), "end": int(r["end_ns"]),
        "duration": int(r["duration_ns"]), "self": int(r["self_ns"]), "depth": int(r["depth"]),
        "flags": int(r["flags"]), "nested": bool(r["nested"]),
        "parent": None if r["parent"] < 0 else key_of[int(r["parent"])]} for r in rows}


def engine_calls(session, chunk, filters=None):
    plan = C.Plan(filters or C.Filters(), nested=True, chunk_events=chunk)
    return C.thread_calls(session.threads[0], plan, session)


@pytest.mark.parametrize("pairing_with", BACKENDS)
@SETTINGS
@given(thread_events())
def test_the_calls_table_is_the_stack_pairing_at_any_chunk_size(pairing_with, events):
    with backend(pairing_with):
        want = pair_by_stack(events, begins_inside=True)
        with tempfile.TemporaryDirectory() as tmp:
            s = write_session(tmp, events)
            for chunk in CHUNKS:
                calls = engine_calls(s, chunk)
                assert as_oracle(calls) == want, chunk
                # numbered in the order met, densely; a parent is met before its calls
                assert sorted(calls["call"].tolist()) == list(range(len(calls)))


def oracle_selected(calls: dict, within=None, hide=None, max_depth=None, start=None,
                    end=None, min_duration=None) -> dict:
    """The oracle's calls the filters select, with self time that takes hidden children as
    the caller's own (as report shows them), and the parent of a call only if selected."""
    def ancestors(key):
        out, p = [], calls[key]["parent"]
        while p is not None:
            out.append(p)
            p = calls[p]["parent"]
        return out

    hidden = {k for k, c in calls.items() if hide is not None and (
        c["function"] in hide or any(calls[a]["function"] in hide for a in ancestors(k)))}
    kept = {}
    for k, c in calls.items():
        if k in hidden:
            continue
        if within is not None and c["function"] not in within and not any(
                calls[a]["function"] in within for a in ancestors(k)):
            continue
        if max_depth is not None and c["depth"] >= max_depth:
            continue
        if start is not None and c["start"] < start or end is not None and c["start"] > end:
            continue
        if min_duration is not None and c["duration"] < min_duration:
            continue
        kept[k] = dict(c)
    for k in kept:
        hidden_children = sum(calls[h]["duration"] for h in hidden
                              if calls[h]["parent"] == k)
        kept[k]["self"] = max(calls[k]["self"] + hidden_children, 0) if hidden_children \
            else calls[k]["self"]
        if kept[k]["parent"] not in kept:
            kept[k]["parent"] = None
    return kept


def oracle_stats(calls: dict) -> dict:
    out = defaultdict(lambda: [0, 0, 0, None, 0])
    for c in calls.values():
        s = out[c["function"]]
        s[0] += 1
        s[1] += 0 if c["nested"] else c["duration"]
        s[2] += c["self"]
        s[3] = c["duration"] if s[3] is None else min(s[3], c["duration"])
        s[4] = max(s[4], c["duration"])
    return {f: tuple(v) for f, v in out.items()}


@pytest.mark.parametrize("pairing_with", BACKENDS)
@SETTINGS
@given(thread_events(), st.data())
def test_report_figures_with_filters(pairing_with, events, data):
    """Calls, total (a recursion once), self (hidden callees count as the caller's own),
    min and max per function, under -F, -N, -D, -t and a time window (or none), at any chunk
    size, counted as `ada report` counts them."""
    with backend(pairing_with):
        ids = st.sets(st.integers(0, 5), min_size=1, max_size=2)
        last = events[-1][0]
        options = {"within": data.draw(st.none() | ids), "hide": data.draw(st.none() | ids),
                   "max_depth": data.draw(st.none() | st.integers(0, 4)),
                   "start": data.draw(st.none() | st.integers(0, last)),
                   "end": data.draw(st.none() | st.integers(0, last)),
                   "min_duration": data.draw(st.none() | st.integers(0, 6))}
        chunk = data.draw(st.sampled_from(CHUNKS))
        want = oracle_stats(oracle_selected(pair_by_stack(events, begins_inside=True), **options))
        filters = C.Filters(
            within=None if options["within"] is None else np.array(sorted(options["within"]),
                                                                     np.uint64),
            hide=None if options["hide"] is None else np.array(sorted(options["hide"]), np.uint64),
            max_depth=options["max_depth"], start_ns=options["start"], end_ns=options["end"],
            min_duration_ns=options["min_duration"])
        with tempfile.TemporaryDirectory() as tmp:
            s = write_session(tmp, events)
            # as `ada report` counts: the kernel's figures where nothing is filtered
            plan = C.Plan(filters, nested=True, columns=R.COLUMNS, stats=True,
                          chunk_events=chunk)
            with C.worker_pool() as pool:
                stats = R.merge_stats([R.step_stats(step) for step in C.thread_steps(
                    s.threads[0], plan, pool, inside=True)])
        got = {int(r["function_id"]): (int(r["calls"]), int(r["total_ns"]), int(r["self_ns"]),
                                       int(r["min_ns"]), int(r["max_ns"])) for r in stats}
        assert got == want


def oracle_paths(calls: dict) -> dict:
    """(root function, ..., function) -> [calls, total, self]."""
    out = defaultdict(lambda: [0, 0, 0])
    for k, c in calls.items():
        path, p = [c["function"]], c["parent"]
        while p is not None:
            path.append(calls[p]["function"])
            p = calls[p]["parent"]
        v = out[tuple(reversed(path))]
        v[0] += 1
        v[1] += c["duration"]
        v[2] += c["self"]
    return {k: tuple(v) for k, v in out.items()}


@pytest.mark.parametrize("pairing_with", BACKENDS)
@SETTINGS
@given(thread_events(), st.sampled_from(CHUNKS))
def test_graph_paths(pairing_with, events, chunk):
    with backend(pairing_with):
        want = oracle_paths(pair_by_stack(events, begins_inside=True))
        with tempfile.TemporaryDirectory() as tmp:
            s = write_session(tmp, events)
            table = C.PathTable()
            with C.worker_pool() as pool:
                for step in C.thread_steps(s.threads[0], C.Plan(paths=[table], chunk_events=chunk),
                                           pool, inside=True):
                    table.add(step.paths[0], step.done["duration_ns"].view(np.int64),
                              step.done["self_ns"].view(np.int64))
        got = {}
        for p in range(len(table)):
            chain, q = [], p
            while q >= 0:
                chain.append(table.fids[q])
                q = table.up[q]
            if table.calls[p]:
                got[tuple(reversed(chain))] = (int(table.calls[p]), int(table.total_ns[p]),
                                               int(table.self_ns[p]))
        assert got == want


def oracle_lines(events: list) -> list:
    """The replay's lines from the oracle's timeline: an opening line at a call's begin and
    a closing line at its end, or one line at its begin when its end comes right after."""
    timeline: list = []
    calls = pair_by_stack(events, begins_inside=True, timeline=timeline)
    lines = []
    for i, (is_end, key) in enumerate(timeline):
        c = calls[key]
        leaf = timeline[i + 1] == (True, key) if not is_end and i + 1 < len(timeline) \
            else timeline[i - 1] == (False, key) if is_end else False
        if is_end and leaf:
            continue
        shown = is_end or leaf  # lines with a duration say how the call ended
        lines.append((c["depth"], c["function"], is_end, leaf, c["duration"] if shown else 0,
                      c["flags"] if shown else 0))
    return lines


@pytest.mark.parametrize("pairing_with", BACKENDS)
@SETTINGS
@given(thread_events(max_actions=80), st.sampled_from(CHUNKS))
def test_replay_lines(pairing_with, events, chunk):
    """Every line of a thread's replay, in order: depth, function, opening/closing/single,
    duration, and how the call ended."""
    with backend(pairing_with):
        with tempfile.TemporaryDirectory() as tmp:
            s = write_session(tmp, events)
            plan = C.Plan(edges=True, leaves=True, chunk_events=chunk)
            got = []
            with C.worker_pool() as pool:
                for step in C.thread_steps(s.threads[0], plan, pool, inside=True):
                    b = P.lines_of(step)
                    shown = b["close"] | b["leaf"]
                    got += list(zip(b["depth"].tolist(), b["function_id"].tolist(),
                                    b["close"].tolist(), b["leaf"].tolist(),
                                    np.where(shown, b["duration_ns"], 0).tolist(),
                                    np.where(shown, b["flags"], 0).tolist()))
        assert got == oracle_lines(events)
