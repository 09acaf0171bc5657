"""The calls table and `ada report`, on synthetic sessions written with the atf writer, where
every duration, self time and count is known exactly, and on a real traced program whose
durations are sleeps of known length."""

import json

import numpy as np
import pytest

import ada.atf as atf
from ada.atf import format as F
from ada.atf.writer import SessionWriter
from ada.tracer.analysis import calls as C
from ada.tracer.analysis import report as R
from helpers import run_ada, session_path

MAIN, WORK, REC, OUTER, INNER, JMP, DEEP, NEXT, OPEN, CHILD = range(10)
NAMES = ["main", "work", "rec", "outer", "inner", "jmp", "deep", "next", "open", "child"]
CALL, RET = F.EVENT_CALL, F.EVENT_RETURN

# (timestamp, function, kind, depth): a balanced thread with a recursion ...
BALANCED = [(0, MAIN, CALL, 0), (100, WORK, CALL, 1), (300, WORK, RET, 1), (400, WORK, CALL, 1),
            (450, WORK, RET, 1), (500, REC, CALL, 1), (600, REC, CALL, 2), (650, REC, CALL, 3),
            (700, REC, RET, 3), (800, REC, RET, 2), (900, REC, RET, 1), (1000, MAIN, RET, 0)]
EXC = F.EVENT_EXCEPTION
# ... and one with every unbalanced case: the recording began inside outer() (its RETURN has
# no CALL), a longjmp out of jmp() and deep() to before next() (ada writes an EXCEPTION for
# each call it left, found when next() is called), and open() still running at the end.
UNBALANCED = [(100, INNER, CALL, 0), (150, INNER, RET, 0), (200, OUTER, RET, 0),
              (300, JMP, CALL, 0), (310, DEEP, CALL, 1), (400, DEEP, EXC, 1),
              (400, JMP, EXC, 0), (400, NEXT, CALL, 0), (450, NEXT, RET, 0),
              (500, OPEN, CALL, 0), (510, CHILD, CALL, 1), (520, CHILD, RET, 1)]


def write_session(tmp_path, *threads):
    writer = SessionWriter(tmp_path, 4242, arch=F.ARCH_X86_64, os_id=F.OS_LINUX,
                           clock_type=F.CLOCK_BOOTTIME)
    for tid, events in enumerate(threads, start=100):
        ev = np.zeros(len(events), dtype=F.INDEX_EVENT)
        ev["timestamp_ns"], ev["function_id"], ev["event_kind"], ev["call_depth"] = \
            zip(*events)
        ev["thread_id"], ev["detail_seq"] = tid, F.NO_DETAIL_SEQ
        writer.add_thread(tid).append_index(ev)
    writer.finalize()
    writer.write_manifest({"threads": [{"id": i} for i in range(len(threads))],
                           "symbols": [{"function_id": f"0x{i:016x}", "name": n}
                                       for i, n in enumerate(NAMES)]})
    return atf.open_session(writer.path)


def by_name(calls):
    rows = calls.to_records()
    return {NAMES[f]: [(int(c["start_ns"]), int(c["duration_ns"]), int(c["self_ns"]),
                        int(c["depth"]), int(c["flags"]))
                       for c in rows[rows["function_id"] == f]]
            for f in np.unique(rows["function_id"]).tolist()}


def test_calls_of_a_balanced_thread(tmp_path):
    s = write_session(tmp_path, BALANCED)
    calls = C.session_calls(s)
    assert by_name(calls) == {
        "main": [(0, 1000, 1000 - 200 - 50 - 400, 0, 0)],
        "work": [(100, 200, 200, 1, 0), (400, 50, 50, 1, 0)],
        "rec": [(500, 400, 200, 1, 0), (600, 200, 150, 2, 0), (650, 50, 50, 3, 0)]}
    parents = [NAMES[calls["function_id"][p]] if p >= 0 else None for p in calls["parent"]]
    assert parents == [None, "main", "main", "main", "rec", "rec"]
    assert calls["call_seq"].tolist() == [0, 1, 3, 5, 6, 7]
    assert calls["return_seq"].tolist() == [11, 2, 4, 10, 9, 8]


def test_calls_of_an_unbalanced_thread(tmp_path):
    s = write_session(tmp_path, UNBALANCED)
    got = by_name(C.session_calls(s))
    assert got == {
        "outer": [(100, 100, 50, 0, C.NO_CALL)],  # from the thread's first event ...
        "inner": [(100, 50, 50, 1, 0)],  # ... so what came before its RETURN is inside it
        "jmp": [(300, 100, 10, 0, C.LEFT)],  # ended by its EXCEPTION
        "deep": [(310, 90, 90, 1, C.LEFT)],
        "next": [(400, 50, 50, 0, 0)],
        "open": [(500, 20, 10, 0, C.OPEN)],  # to the thread's last event
        "child": [(510, 10, 10, 1, 0)]}


def test_events_that_do_not_nest_are_mended_and_said(tmp_path):
    """A RETURN that passes over open calls (a longjmp ada did not mark: sessions recorded
    before it wrote EXCEPTIONs for them, or lost events) ends them there (LEFT); a RETURN of
    a function that is not open is a call from the thread's first event (NO_CALL). Each
    reading command says so, on one line per thread."""
    events = [(0, MAIN, CALL, 0), (10, JMP, CALL, 1), (20, DEEP, CALL, 2),
              (30, NEXT, RET, 1), (40, MAIN, RET, 0), (50, WORK, CALL, 0), (60, WORK, RET, 0)]
    s = write_session(tmp_path, events)
    got = by_name(C.session_calls(s))
    assert got == {"main": [(0, 40, 40 - 30, 0, 0)],  # its children: jmp (30)
                   "jmp": [(10, 30, 10, 1, C.LEFT)],  # passed over by main's RETURN
                   "deep": [(20, 20, 20, 2, C.LEFT)],
                   "next": [(0, 30, 30, 3, C.NO_CALL | C.ORPHAN)],  # not open: in nothing
                   "work": [(50, 10, 10, 0, 0)]}
    for command in ("report", "replay", "graph"):
        out = run_ada(command, s.path)
        assert out.returncode == 0, out.stderr
        assert out.stderr.count("\n") == 1 and "events do not nest" in out.stderr, out.stderr
        assert "2 call(s) closed by the RETURN of a call they were in" in out.stderr
        assert "1 RETURN(s) of a function that was not open" in out.stderr


def test_report_counts_a_recursion_once_in_total(tmp_path):
    s = write_session(tmp_path, BALANCED, BALANCED)  # two threads: every figure doubles
    stats = {NAMES[int(r["function_id"])]: (int(r["calls"]), int(r["total_ns"]),
                                            int(r["self_ns"]), int(r["min_ns"]),
                                            int(r["max_ns"]))
             for r in R.function_stats(C.session_calls(s))}
    assert stats == {"main": (2, 2000, 700, 1000, 1000), "work": (4, 500, 500, 50, 200),
                     "rec": (6, 800, 800, 50, 400)}


def test_ada_report_text_json_sort_and_filters(tmp_path):
    s = write_session(tmp_path, BALANCED, UNBALANCED)
    out = run_ada("report", s.path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["Total", "time", "Self", "time", "Calls", "Avg", "Min", "Max",
                                "Function"]
    assert lines[2].split() == ["1.000", "us", "350", "ns", "1", "1.000", "us", "1.000", "us",
                                "1.000", "us", "main"]
    rows = json.loads(run_ada("report", s.path, "--json", "--sort", "calls").stdout)["functions"]
    assert [r["name"] for r in rows[:2]] == ["rec", "work"]
    assert rows[0] == {"name": "rec", "function_id": "0x0000000000000002", "module": None,
                       "calls": 3, "total_ns": 400, "self_ns": 400, "avg_ns": 133,
                       "min_ns": 50, "max_ns": 400}
    within = json.loads(run_ada("report", s.path, "--json", "-F", "rec").stdout)["functions"]
    assert [(r["name"], r["calls"]) for r in within] == [("rec", 3)]
    hidden = json.loads(run_ada("report", s.path, "--json", "-N", "re?", "--tid", 100).stdout)
    main = next(r for r in hidden["functions"] if r["name"] == "main")
    assert main["self_ns"] == 350 + 400 and "rec" not in [r["name"] for r in hidden["functions"]]
    threads = json.loads(run_ada("report", s.path, "--json", "--threads").stdout)["threads"]
    assert [(t["tid"], len(t["functions"])) for t in threads] == [(100, 3), (101, 7)]
    early = json.loads(run_ada("report", s.path, "--json", "--to-ns", 150, "--tid", 101).stdout)
    assert sorted(r["name"] for r in early["functions"]) == ["inner", "outer"]


def test_ada_report_diff(tmp_path):
    base = write_session(tmp_path / "a", BALANCED)
    other = write_session(tmp_path / "b", BALANCED, BALANCED)
    rows = json.loads(run_ada("report", base.path, "--diff", other.path, "--json").stdout)
    main = next(r for r in rows["functions"] if r["name"] == "main")
    assert main["total_ns"] == {"base": 1000, "other": 2000, "diff": 1000, "percent": 100.0}
    assert main["self_ns"] == {"base": 350, "other": 700, "diff": 350, "percent": 100.0}
    assert main["calls"]["diff"] == 1 and main["avg_ns"]["diff"] == 0
    work = next(r for r in rows["functions"] if r["name"] == "work")
    assert (work["min_ns"]["base"], work["max_ns"]["other"]) == (50, 200)
    text = run_ada("report", base.path, "--diff", other.path).stdout.splitlines()
    row = next(line for line in text if line.endswith("  main")).split()
    assert row[:6] == ["1.000", "us", "+1.000", "us", "+100.0%", "+350"]
    # a function only one side called
    gone = json.loads(run_ada("report", base.path, "--diff", write_session(
        tmp_path / "c", UNBALANCED).path, "--json").stdout)["functions"]
    main = next(r for r in gone if r["name"] == "main")
    assert (main["in_other"], main["total_ns"]["diff"], main["total_ns"]["percent"]) == \
        (False, -1000, -100.0)


@pytest.mark.parametrize("args,needle", [
    (["--sort", "nope"], "invalid choice"), (["-F", "nothing*"], "no function of the session"),
    (["--tid", "7"], "no thread with tid 7")])
def test_ada_report_errors_are_one_line(tmp_path, args, needle):
    s = write_session(tmp_path, BALANCED)
    out = run_ada("report", s.path, *args)
    assert out.returncode != 0 and needle in out.stderr and out.stderr.count("\n") == 1


def test_durations_print_in_uftrace_units():
    assert [R.format_duration(n) for n in (86, 1_000, 578_555, 2_075_000, 1_250_000_000)] == \
        ["86 ns", "1.000 us", "578.555 us", "2.075 ms", "1.250  s"]
    assert [R.parse_duration(t) for t in ("10us", "2.5ms", "1s", "300")] == \
        [10_000, 2_500_000, 1_000_000_000, 300]


def test_report_of_a_real_program_with_known_sleeps(tmp_path, target_bin):
    """sleeper() sleeps 20 ms and is called 3 times by outer(); each figure is at least what
    the sleeps make it, and outer's self time is what is left of its total."""
    out = run_ada("trace", "-q", "-o", tmp_path, "-f", target_bin("sleeps"), "-i", "sleeps!*er")
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(
        run_ada("report", session_path(out), "--json").stdout)["functions"]}
    sleeper, outer = rows["sleeper"], rows["outer"]
    assert sleeper["calls"] == 3 and outer["calls"] == 1
    assert 3 * 20_000_000 <= sleeper["total_ns"] < 3 * 20_000_000 + 2_000_000_000
    assert sleeper["min_ns"] >= 20_000_000 and sleeper["self_ns"] == sleeper["total_ns"]
    assert outer["total_ns"] >= sleeper["total_ns"]
    assert outer["self_ns"] == outer["total_ns"] - sleeper["total_ns"]


def test_replay_shows_the_tree_with_durations(tmp_path):
    s = write_session(tmp_path, BALANCED)
    out = run_ada("replay", s.path)
    assert out.returncode == 0, out.stderr
    tid = "[   100] | "
    assert out.stdout.splitlines() == [
        "# DURATION     TID     FUNCTION",
        f"{'':>10} {tid}main() {{",
        f"{'200 ns':>10} {tid}  work();",
        f"{'50 ns':>10} {tid}  work();",
        f"{'':>10} {tid}  rec() {{",
        f"{'':>10} {tid}    rec() {{",
        f"{'50 ns':>10} {tid}      rec();",
        f"{'200 ns':>10} {tid}    }} /* rec */",
        f"{'400 ns':>10} {tid}  }} /* rec */",
        f"{'1.000 us':>10} {tid}}} /* main */"]
    lines = run_ada("replay", s.path, "-D", 2, "-t", "100ns").stdout.splitlines()
    assert [line.split("| ")[1] for line in lines[1:]] == [
        "main() {", "  work();", "  rec();", "} /* main */"]
    hidden = run_ada("replay", s.path, "-F", "rec", "-N", "re?")  # -N hides what -F shows
    assert hidden.returncode == 0 and hidden.stdout.splitlines() == [lines[0]]
    assert "no function of the session matches" in run_ada("replay", s.path, "-F", "x*").stderr


def test_replay_marks_what_the_recording_cut(tmp_path):
    s = write_session(tmp_path, UNBALANCED)
    lines = [line.split("| ")[1] for line in run_ada("replay", s.path).stdout.splitlines()[1:]]
    assert lines == ["outer() {", "  inner();", "} /* outer */  /* called before the recording */",
                     "jmp() {", "  deep();  /* left without returning */",
                     "} /* jmp */  /* left without returning */", "next();", "open() {",
                     "  child();", "} /* open */  /* still running at the end */"]


def test_a_longjmp_ada_did_not_mark_leaves_its_calls_open(tmp_path):
    """Sessions recorded before ada wrote an EXCEPTION for each call a longjmp left: nothing
    in the events says they ended, so they stay open (to the end, or to a RETURN of a call
    they were in); the order of the events is followed, never the recorded depth."""
    unmarked = [e for e in UNBALANCED if e[2] != EXC]
    got = by_name(C.session_calls(write_session(tmp_path, unmarked)))
    assert got["jmp"] == [(300, 220, 10, 0, C.OPEN)] and got["deep"][0][3:] == (1, C.OPEN)
    assert got["next"] == [(400, 50, 50, 2, 0)]  # inside deep(), by the order of events


def test_longjmp_past_hooked_frames_in_a_real_program(tmp_path, target_bin):
    n = 50
    out = run_ada("trace", "-q", "-o", tmp_path, "-f", target_bin("throws"), "longjmp", n,
                  "-i", "throws!jumper")
    assert out.returncode == 0, out.stderr
    s = atf.open_session(session_path(out))
    calls = C.session_calls(s)
    assert len(calls) == n and np.all(calls["flags"][:-1] == C.LEFT)
    assert calls["flags"][-1] == C.OPEN  # the last one: nothing hooked came after it
    report = json.loads(run_ada("report", s.path, "--json").stdout)["functions"]
    assert [(r["name"], r["calls"]) for r in report] == [("jumper", n)]


def test_graph_aggregates_paths_and_backtraces(tmp_path):
    s = write_session(tmp_path, BALANCED, BALANCED)  # two threads: same paths, twice the calls
    out = run_ada("graph", s.path)
    assert out.returncode == 0, out.stderr
    assert [line.split(" : ") for line in out.stdout.splitlines()[1:]] == [
        [f"{'2.000 us':>12}", "(2) main"], [f"{'800 ns':>12}", "+-(2) rec"],
        [f"{'400 ns':>12}", "| +-(2) rec"], [f"{'100 ns':>12}", "|   +-(2) rec"],
        [f"{'500 ns':>12}", "+-(4) work"]]
    text = run_ada("graph", s.path, "work").stdout
    assert " backtrace #0: hit 4, time 500 ns\n   [0] work\n   [1] main" in text
    assert text.endswith(f"{'500 ns':>12} : (4) work\n")
    assert run_ada("graph", s.path, "-D", 1).stdout.splitlines()[1:] == [
        f"{'2.000 us':>12} : (2) main"]
    missing = run_ada("graph", s.path, "nothing")
    assert missing.returncode == 1 and "no function of the session matches" in missing.stderr


def test_a_thread_cut_into_chunks_gives_the_same_calls(tmp_path):
    """Chunks carry the calls open at their ends to the next: the same table, row for row,
    whatever the chunk size, with calls that stay open across every chunk."""
    events = [(0, MAIN, CALL, 0)] + [(t + 2000 * i + 1, f, k, d + 1) for i in range(7)
                                     for t, f, k, d in BALANCED] + [(20_000, MAIN, RET, 0)]
    events += [(20_000 + t, f, k, d) for t, f, k, d in UNBALANCED[3:]]
    s = write_session(tmp_path, events)
    whole = C.thread_calls(s.threads[0], C.Plan(nested=True, chunk_events=1 << 30), s)
    assert whole["flags"].tolist().count(C.LEFT) == 2 and C.OPEN in whole["flags"]
    for chunk in (1, 2, 3, 7, 20):
        cut = C.thread_calls(s.threads[0], C.Plan(nested=True, chunk_events=chunk), s)
        for name in C.CALL.names:
            assert np.array_equal(cut[name], whole[name]), (chunk, name)


def random_tree(rng, events, exceptions=False):
    """(timestamp, function, kind, depth) of random nested calls, recursion included."""
    out, stack, t = [], [], 0
    while len(out) < events or stack:
        t += int(rng.integers(1, 50))
        if exceptions and rng.random() < 0.02:
            out.append((t, 0, F.EVENT_EXCEPTION, len(stack)))
        elif stack and (len(out) >= events or rng.random() < 0.45 or len(stack) > 12):
            out.append((t, stack.pop(), RET, len(stack)))
        else:
            stack.append(int(rng.integers(0, len(NAMES))))
            out.append((t, stack[-1], CALL, len(stack) - 1))
    return out


def graph_of(session, chunk):
    from ada.tracer.analysis import graph as G
    table = C.PathTable()
    with C.worker_pool() as pool:
        for step in C.session_steps(session, session.threads,
                                    C.Plan(paths=[table], chunk_events=chunk), pool):
            table.add(step.paths[0], step.done["duration_ns"].view(np.int64),
                      step.done["self_ns"].view(np.int64))
    return G.graph_lines(G.Paths.of(table), str, str), int(table.calls.sum())


def test_graph_of_chunks_is_the_graph_of_the_whole(tmp_path):
    rng = np.random.default_rng(3)
    s = write_session(tmp_path, random_tree(rng, 3000), random_tree(rng, 2000))
    whole, calls = graph_of(s, 1 << 30)
    assert len(whole) > 100 and calls == len(C.session_calls(s))
    assert graph_of(s, 100) == (whole, calls) and graph_of(s, 7) == (whole, calls)


def test_replay_merges_threads_by_time_a_block_at_a_time(tmp_path):
    from ada.tracer.analysis import replay as P
    shifted = [(t + 50, f, k, d) for t, f, k, d in BALANCED]
    events = [(t + 2000 * i, f, k, d) for i in range(5) for t, f, k, d in BALANCED]
    other = [(t + 2000 * i, f, k, d) for i in range(5) for t, f, k, d in shifted]
    s = write_session(tmp_path, events, other)
    with C.worker_pool() as pool:
        blocks = list(P.merged_lines([
            (P.lines_of(step) for step in C.thread_steps(t, C.Plan(edges=True, leaves=True, chunk_events=12),
                                                        pool, inside=True))
            for t in s.threads]))
    assert len(blocks) > 2
    ts = np.concatenate([b["ts"] for b in blocks])
    assert len(ts) == 2 * 5 * 9 and np.all(np.diff(ts) >= 0)  # 9 lines per BALANCED tree
    threads = np.concatenate([b["thread"] for b in blocks])
    assert threads[:2].tolist() == [0, 1] and sorted(threads.tolist()) == [0] * 45 + [1] * 45


def test_replay_shows_arguments_and_return_values_from_the_detail_lane(tmp_path, target_bin):
    """add(3, 4), add(100, 23), add(-5, 1000000007): the arguments by name and the return
    value, decoded from the detail lane's registers by the target's debug information."""
    out = run_ada("trace", "-q", "-o", tmp_path, "--detail", "-f", target_bin("regs"),
                  "-i", "regs!add")
    assert out.returncode == 0, out.stderr
    lines = [line.split("| ")[1] for line in
             run_ada("replay", session_path(out)).stdout.splitlines()[1:]]
    assert lines == ["add(a=3, b=4) = 7;", "add(a=100, b=23) = 123;",
                     "add(a=-5, b=1000000007) = 1000000002;"]


def test_the_replay_duration_column_is_format_duration():
    """The replay writes its DURATION column on whole arrays (replay._durations): each text
    is format_duration's, right-aligned; a batch with a rounding tie or a duration of 1,000 s
    or more is written a line at a time instead (None)."""
    from ada.tracer.analysis import replay as P
    rng = np.random.default_rng(11)
    values = np.concatenate([
        np.arange(0, 2100), [999, 1000, 999_999, 1_000_000, 999_499_999, 999_999_499,
                             10**9, 999_499_999_999],
        rng.integers(0, 10**12, 20_000)])
    tie = ((values % 1000 == 500) & (values >= 10**6)) | \
        ((values % 10**6 == 500_000) & (values >= 10**9))
    values = values[~tie & (values < 999_999_500_000)]  # ties go a line at a time
    values = values[(values < 999_999_500) | (values >= 10**9)]  # "1000.000 ms": too
    shown = np.ones(len(values), dtype=bool)
    shown[::7] = False
    field = P._durations(values.astype(np.uint64), shown)
    got = [bytes(row).decode() for row in field]
    assert got == [f"{R.format_duration(int(v)) if s else '':>10}" for v, s in zip(values, shown)]
    for fallback in (1_000_500, 2_500_500_000, 999_999_999, 10**12):
        assert P._durations(np.array([fallback], np.uint64), np.array([True])) is None
