"""`ada trace` end to end: Frida attached to real programs built from tests/targets/*.c."""

import json
import os
import platform
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import ada.atf as atf
from ada.atf import format as F
from helpers import (ada_command, ada_lines, assert_balanced, assert_verify_clean,
                     describe_descendants, describe_status, function_events, o_direct_works,
                     process_state, read_line, run_ada, session_path, spinning,
                     trace_session as trace, wait_for_index_events)


def test_exact_count_one_thread(tmp_path, target_bin, engine):
    n = 5000
    s, out = trace(tmp_path, *engine,
                   "-f", target_bin("exact_calls"), str(n), "-i", "exact_calls!work")
    per_thread = function_events(s, "work")
    assert list(per_thread) == [0] and len(per_thread[0]) == 2 * n
    ev = per_thread[0]
    assert np.array_equal(ev["event_kind"], np.tile([F.EVENT_CALL, F.EVENT_RETURN], n))
    assert np.all(ev["call_depth"] == 0) and np.all(ev["detail_seq"] == F.NO_DETAIL_SEQ)
    assert_balanced(ev)
    assert s.threads[0].thread_id == s.manifest.document["process"]["pid"]
    assert s.manifest.document["end"] == {"clean": True, "reason": "target-exited", "crash": None,
                                 "exit_status": 0, "undelivered_events": 0,
                                 "undelivered_detail_bytes": 0}
    assert s.manifest.document["threads"][0]["index_events"] == 2 * n
    assert_verify_clean(s.path)


# Run as `ada trace`, and write the modules first imported by a thread other than the main one.
IMPORTS_OFF_MAIN = """
import json, sys, threading
seen = []
def look(event, args):
    if event == "import" and args[0] not in sys.modules and \\
            threading.current_thread() is not threading.main_thread():
        seen.append([threading.current_thread().name, args[0]])
sys.addaudithook(look)
out, sys.argv = sys.argv[1], ["ada", *sys.argv[2:]]
from ada.tracer.cli import entry_point
try:
    entry_point()
finally:
    open(out, "w").write(json.dumps(seen))
"""


def test_the_drain_imports_nothing_while_it_records(tmp_path, target_bin, engine):
    """A module imported by the drain as its first pass starts holds the drain for as long as
    the import takes, while the program's threads fill their rings. The crc32c package's import
    (importlib.metadata, email, csv) took seconds in the emulated arm64 machine, the whole of a
    1-second recording: every thread waited once, until the end (2 waits where there were
    hundreds). Everything the recording's threads need is imported before the hooks go in."""
    gate, seen = tmp_path / "gate", tmp_path / "imports.json"
    with spinning(target_bin("inline_cases"), gate) as proc:
        argv = ada_command("trace", *engine, "-q", "-o", tmp_path / "traces", "-p", proc.pid,
                           "-i", "inline_cases!work", "--duration", "0.5")[3:]
        out = subprocess.run([sys.executable, "-c", IMPORTS_OFF_MAIN, seen, *argv],
                             capture_output=True, text=True, timeout=300)
        gate.touch()
        assert proc.wait(timeout=30) == 0
    assert out.returncode == 0, out.stderr
    assert json.loads(seen.read_text()) == []


def test_the_functions_ada_itself_calls_can_be_hooked(tmp_path, target_bin, engine):
    """pthread_sigmask (a thread's registration calls it, from inside its first hooked call)
    and pthread_rwlock_wrlock hooked along with the program's function: no recursion, and
    every call of work() on 8 threads recorded."""
    n = 2000
    s, _ = trace(tmp_path, *engine, "-f", target_bin("exact_calls"), str(n), "8",
                 "-i", "exact_calls!work", "-i", "libc.so.6!pthread_sigmask",
                 "-i", "libc.so.6!pthread_rwlock_wrlock")
    counts = sorted(len(ev) for ev in function_events(s, "work").values())
    assert counts == [2 * (n + i) for i in range(8)]
    for t in s.threads:
        assert_balanced(t.index.events)
    assert_verify_clean(s.path)


# What Frida's code calls on a thread as the agent sends a message and waits for the reply
HANDOVER_CALLS = {"open", "open64", "openat", "ioctl", "close", "access", "write", "writev", "send",
                  "sendmsg", "recvmsg", "poll", "ppoll", "eventfd", "pipe2"}


def test_all_of_libc(tmp_path, target_bin, engine):
    """-I libc.so.6, every export of the C library: the program runs to its end with every
    call of its own function recorded, on its one thread (Frida's own threads call libc
    too: neither engine records them). The two functions Frida and ada call for every
    hooked call (the thread-specific data lookups) are refused, and said. exit() and the
    calls it makes until _exit() are recorded; the calls Frida makes on the program's thread
    as the rings are handed over (open, ioctl, write...) are not (see below)."""
    n = 3000
    s, out = trace(tmp_path, *engine, "-f", target_bin("exact_calls"), str(n),
                   "-I", "libc.so.6", "-i", "exact_calls!work", quiet=False, timeout=240)
    names = s.symbol_names()
    # on failure: which thread was recorded besides the program's, and what it called
    seen = [(t.thread_id, [names[int(f)] for f in t.index.events["function_id"][:20]])
            for t in s.threads]
    assert len(s.threads) == 1 and s.threads[0].thread_id == s.manifest.document["process"]["pid"], seen
    work = function_events(s, "work")[0]
    assert len(work) == 2 * n and np.all(work["call_depth"] == work["call_depth"][0])
    refused = {f["name"]: f["error"] for f in s.manifest.document["hook_failures"]}
    assert {"pthread_getspecific", "pthread_setspecific"} <= set(refused)
    assert "cannot be traced" in refused["pthread_setspecific"]
    assert "pthread_setspecific" in out.stderr or "could not be" in out.stderr
    assert len(s.manifest.document["symbols"]) > 1000
    assert s.manifest.document["end"]["exit_status"] == 0
    ev = s.threads[0].index.events
    last_top_return = np.flatnonzero((ev["event_kind"] == F.EVENT_RETURN) & (ev["call_depth"] == 0))[-1]
    after = [(names[int(e["function_id"])], int(e["event_kind"])) for e in ev[last_top_return + 1:]]
    # exit() and what it runs until _exit() (atexit handlers, destructors, libc's cleanup)
    # are the program's calls, recorded with either engine; the inline engine leaves exit and
    # _exit, which Frida hooked already, to the Interceptor, and the depths count the calls
    # open in both engines. Nothing of the handover at _exit: no I/O, no messages.
    assert after[0] == ("exit", F.EVENT_CALL) and after[-1] == ("_exit", F.EVENT_CALL), after
    assert not {name for name, _ in after} & HANDOVER_CALLS, after
    assert_balanced(ev, open_at_end=2)
    assert_verify_clean(s.path)


@pytest.mark.parametrize("toolchain", ["internal", "external"])
def test_exact_counts_eight_threads(tmp_path, target_bin, toolchain, engine):
    """Both CModule toolchains (TinyCC, the system's gcc -O2) build a hot path that records all."""
    n = 3000
    s, _ = trace(tmp_path, *engine,
                 "-f", target_bin("exact_calls"), str(n), "8", "-i", "exact_calls!work",
                 "--cmodule-toolchain", toolchain)
    # x86_64 glibc (this machine, and the arm64 guest is not x86_64): gcc's build reads a
    # thread's state from the thread pointer, TinyCC's asks pthread_getspecific (ada_tls_get)
    direct = toolchain == "external" and platform.machine() == "x86_64"
    hot_path = s.manifest.document["hot_path"]
    # gcc's build is ada's own, on this machine (cached by an earlier test or not); TinyCC's
    # is Frida's, in the target
    built = {"host", "host-cache"} if toolchain == "external" else {"target"}
    assert hot_path.pop("built") in built
    assert hot_path == {"toolchain": toolchain, "toolchain_fallback": None, "tls_direct": direct}
    per_thread = function_events(s, "work")
    counts = sorted(len(ev) for ev in per_thread.values())
    assert counts == [2 * (n + i) for i in range(8)]  # thread i makes n + i calls
    for ev in per_thread.values():
        assert_balanced(ev)
        assert np.all(ev["call_depth"] == 0)
    assert len({t.thread_id for t in s.threads}) == 8
    assert_verify_clean(s.path)


def test_a_running_program_recorded_twice(tmp_path, target_bin, engine):
    """Two recordings, one after the other, of one program whose two threads call work() in a
    tight loop: the second agent's thread key is a new one beside the first's (the threads
    still hold the first's value), and each recording's threads nest whole and lose
    nothing (a thread waiting for room as a recording stopped dropped an event when the
    agent let the waiters go before ada had drained what was left: CI, 2026-11-27). The
    tests that stop with threads mostly waiting, in 4 KB rings, are test_inline.py's
    test_ada_waiting_for_room_is_not_the_program_losing_calls and test_devices.py's
    test_a_push_slower_than_the_stall_limit_is_no_host_gone (here 4 KB rings left a
    thread under 1,000 calls in the emulated arm64 machine's slow drain)."""
    gate = tmp_path / "gate"
    with spinning(target_bin("inline_cases"), gate) as proc:
        sessions = [trace(tmp_path / str(k), *engine, "-p", proc.pid, "-i", "inline_cases!work",
                          "--duration", "1")[0] for k in range(2)]
        gate.touch()
        assert proc.wait(timeout=30) == 0 and proc.stdout.read().startswith("calls ")
    for s in sessions:
        threads = [ev for ev in function_events(s, "work").values() if len(ev)]
        assert len(threads) == 2
        for ev in threads:
            if ev["event_kind"][-1] == F.EVENT_CALL:
                ev = ev[:-1]  # open as ada left
            assert len(ev) > 1000 and ev["event_kind"][0] == F.EVENT_CALL
            assert_balanced(ev)
        assert s.manifest.document["drops"]["index"] == 0


def test_hooks_go_in_and_out_while_threads_run_the_first_bytes(tmp_path, target_bin, engine):
    """Two threads call framed() in a tight loop; its prologue has instructions starting
    inside the 5 bytes a jump replaces. Ada hooks it and puts it back eight times while they
    run. Writing those bytes while a thread runs them (half old, half new), or with a thread
    stopped between two of them (it resumes inside the jump), crashed the program: 5 of 20
    attaches with the inline engine and 1 of 20 with Frida's before the threads were held
    (ThreadHold, agent/ada_code.js). So this fails most runs without the hold with the inline
    engine, some runs with Frida's."""
    gate = tmp_path / "gate"
    with spinning(target_bin("inline_cases"), gate, 2, "framed") as proc:
        for k in range(8):
            s = trace(tmp_path / str(k), *engine, "-p", proc.pid, "-i", "inline_cases!framed",
                      "--duration", "0.3")[0]
            m = s.manifest.document
            assert m["end"]["crash"] is None and proc.poll() is None, f"recording {k + 1}"
            assert sum(len(ev) for ev in function_events(s, "framed").values()) > 0
            hold = m["thread_hold"]
            assert hold["holds"] >= 2 and hold["threads_not_held"] == 0, hold
            assert hold["threads_went_on"] == 0 and hold["written_around"] == 0, hold
        gate.touch()
        assert proc.wait(timeout=30) == 0
        assert int(proc.stdout.read().split()[1]) > 0


def test_held_threads_slow_to_leave_outlive_ada(tmp_path, target_bin, engine):
    """The CModule that holds the threads (ada_hold.c) is freed as ada leaves. A thread let
    go but still on its way out of the handler then runs freed code: SIGSEGV with pc equal to
    lr. ADA_TEST_HOLD_LINGER_MS makes each held thread linger 100 ms
    in the handler after it is let go; the hold's entry, outside the CModule, counts it until
    it is out, and ada waits for that. With the count lowered before the linger (as it was,
    in the CModule, before the thread had left it) the program died in 5 of 6 cases here."""
    gate = tmp_path / "gate"
    with spinning(target_bin("inline_cases"), gate, 2, "framed") as proc:
        for k in range(2):
            s = trace(tmp_path / str(k), *engine, "-p", proc.pid, "-i", "inline_cases!framed",
                      "--duration", "0.3", env={"ADA_TEST_HOLD_LINGER_MS": "100"})[0]
            hold = s.manifest.document["thread_hold"]
            assert proc.poll() is None, \
                f"the program died as recording {k + 1} ended: {describe_status(proc.poll())}"
            assert hold["holds"] >= 2 and hold["threads_not_held"] == 0, hold
            assert hold["left_inside"] == 0, hold
        gate.touch()
        assert proc.wait(timeout=30) == 0


@pytest.mark.parametrize("signal_sleepers", [False, True], ids=["as-built", "sleepers-signalled"])
def test_sleeps_cut_short_by_the_hold_are_counted(tmp_path, target_bin, engine, signal_sleepers):
    """ada's thread hold signals only threads on a CPU: a signal would end a sleeping
    thread's poll() or nanosleep() early (EINTR; not restarted after a handler). The target's
    two threads sleep for good and count each EINTR themselves (it installs no handler). As
    built, neither is signalled: 0 for the target and for the manifest. With
    ADA_TEST_HOLD_SLEEPERS every thread is signalled, asleep or not, the race the hold has
    with a thread going to sleep made certain: ada must count exactly the sleeps the target saw
    cut short, and say so."""
    proc = subprocess.Popen([target_bin("cut_sleeps")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert read_line(proc, 30).strip() == "ready"
        env = {"ADA_TEST_HOLD_SLEEPERS": "1"} if signal_sleepers else None
        s, out = trace(tmp_path, *engine, "-p", proc.pid, "-i", "cut_sleeps!work",
                       "--duration", "0.3", env=env, quiet=False)
        proc.stdin.write("end\n")
        proc.stdin.flush()
        seen = int(read_line(proc, 30).split()[1])
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    hold = s.manifest.document["thread_hold"]
    assert hold["holds"] >= 2, hold
    assert hold["system_calls_cut_short"] == seen, (hold, seen)
    if signal_sleepers:
        assert seen >= 2 * hold["holds"], (hold, seen)  # both sleepers, at every hold
        assert "ended early (EINTR)" in out.stderr, out.stderr
    else:
        assert seen == 0 and "EINTR" not in out.stderr, (seen, out.stderr)


def test_a_running_program_let_go_again_and_again(tmp_path, target_bin):
    """Frida's Interceptor frees a function's trampoline as it puts the function back, and a
    thread that has taken the jump into it but was preempted before the trampoline counted it
    then runs freed memory. Four recordings of a program whose two threads call work() in
    a tight loop, each ending while they run. Before ada put the first bytes back itself and
    let the threads run on, this failed about one run in two here: a race, caught often, not
    always."""
    gate = tmp_path / "gate"
    with spinning(target_bin("inline_cases"), gate, 2) as proc:
        for k in range(4):
            try:
                s = trace(tmp_path / str(k), "--hook-engine", "frida", "-p", proc.pid,
                          "-i", "inline_cases!work", "--duration", "0.5")[0]
            except AssertionError as e:  # how the program ended, if it did (arm64 guest, once a run)
                raise AssertionError(f"recording {k + 1}: {e}\nthe program: "
                                     f"{describe_status(proc.poll())}") from None
            assert s.manifest.document["end"]["crash"] is None
            assert proc.poll() is None, \
                f"the program died as recording {k + 1} ended: {describe_status(proc.poll())}"
        gate.touch()
        assert proc.wait(timeout=30) == 0
        assert int(proc.stdout.read().split()[1]) > 0


def test_depth_with_recursion_and_longjmp(tmp_path, target_bin, engine):
    s, _ = trace(tmp_path, *engine,
                 "-f", target_bin("depth"), "-i", "depth!fact", "-i", "depth!jumper",
                 "-i", "depth!after")
    names = s.symbol_names()
    ev = s.threads[0].index.events
    seq = [(names[int(e["function_id"])], F.EVENT_KIND_NAMES[int(e["event_kind"])],
            int(e["call_depth"])) for e in ev]
    fact = [("fact", "CALL", d) for d in range(5)] + [("fact", "RETURN", d) for d in range(4, -1, -1)]
    after = [("after", "CALL", 0), ("after", "RETURN", 0)] * 3
    # jumper() longjmps back to main, which calls after() from the same stack slot: the
    # left call ends with an EXCEPTION event before after()'s CALL
    assert seq == fact + [("jumper", "CALL", 0), ("jumper", "EXCEPTION", 0)] + after
    assert_balanced(ev, left=True)
    assert s.manifest.document["unwinding"]["unwound_calls"] == 1


def churn_expectation(out):
    """tid -> events, from the churn target's own account of its threads (the last line is
    the session path)."""
    expected = {}
    for line in out.stdout.splitlines()[:-1]:
        tid, i = map(int, line.split())
        expected[tid] = 2 * ((i % 7) + 1)
    return expected


@pytest.mark.parametrize("threads,at_once", [(3000, 1), (300, 200)],
                         ids=["3000-one-after-another", "300-in-batches-of-200"])
def test_thread_churn_records_every_thread(tmp_path, target_bin, threads, at_once, engine):
    """More threads over the run than --max-threads (256): an ended thread gives its ring back
    once the host has drained it. One after another, every thread is recorded. In batches of
    200 (each joined before the next starts), a thread of the second batch finds a ring only if
    the host has freed one of the first batch's by then: on a slow machine (the emulated arm64
    one) some do not, and their events are counted as dropped, never lost in silence."""
    s, out = trace(tmp_path, *engine,
                   "-f", target_bin("churn"), threads, at_once, "-i", "churn!work",
                   "--max-threads", 256, timeout=240, quiet=False)
    expected = churn_expectation(out)
    assert len(expected) == threads
    recorded = {t.thread_id: len(t.index) for t in s.threads}
    assert all(expected[tid] == n for tid, n in recorded.items())  # each recorded one whole
    drops = s.manifest.document["drops"]
    assert sum(recorded.values()) + drops["overflow_events"] == sum(expected.values())
    assert max(t["slot"] for t in s.manifest.document["threads"]) < 256
    last = out.stderr.splitlines()[-1]
    assert f", {drops['overflow_events']:,} dropped" in last, last
    if at_once == 1:
        assert len(recorded) == threads and drops["overflow_threads"] == 0
    else:
        assert len(recorded) >= at_once  # the first batch finds every ring free
    assert_verify_clean(s.path)


def test_threads_past_max_threads_are_counted_as_dropped(tmp_path, target_bin, engine):
    s, out = trace(tmp_path, *engine, "-f", target_bin("churn"), 300, 300, "hold",
                   "-i", "churn!work", "--max-threads", 8, quiet=False)
    expected = churn_expectation(out)
    recorded = sum(len(t) for t in s.threads)
    drops = s.manifest.document["drops"]
    assert drops["overflow_threads"] > 0
    assert recorded + drops["overflow_events"] == sum(expected.values())
    last = out.stderr.strip().splitlines()[-1]
    assert f", {drops['overflow_events']:,} dropped" in last, last


def test_tracing_clock_gettime_itself(tmp_path, target_bin, engine):
    """The hot path reads the clock too: no recursion, no deadlock, every call recorded."""
    n = 2000
    s, _ = trace(tmp_path, *engine,
                 "-f", target_bin("clock_user"), str(n), "-i", "libc.so*!clock_gettime")
    pid = s.manifest.document["process"]["pid"]
    main = [t for t in s.threads if t.thread_id == pid]
    assert len(main) == 1
    ev = main[0].index.events
    assert np.count_nonzero(ev["event_kind"] == F.EVENT_CALL) == n
    assert np.count_nonzero(ev["event_kind"] == F.EVENT_RETURN) == n
    assert_verify_clean(s.path)


def assert_ticks_on(proc: subprocess.Popen, before: int, when: str) -> None:
    """tests/targets/ticker.c lives on and counts past tick `before`."""
    ticks = [read_line(proc) for _ in range(5)]
    assert proc.poll() is None, f"the target died {when}: {describe_status(proc.returncode)}"
    assert int(ticks[-1].split()[1]) > before


def assert_continued_without_agent(proc: subprocess.Popen, threads_before: int) -> None:
    """tests/targets/ticker.c, stopped while ada gave it up, continued: Frida's agent leaves
    it within 60 s (back to `threads_before` threads) and it ticks on."""
    os.kill(proc.pid, signal.SIGCONT)
    before = int(read_line(proc).split()[1])
    deadline = time.monotonic() + 60
    while len(os.listdir(f"/proc/{proc.pid}/task")) > threads_before:
        assert time.monotonic() < deadline, ("Frida's agent stayed in the continued target:\n"
                                             + describe_descendants(os.getpid()))
        time.sleep(0.05)
    assert_ticks_on(proc, before, "after it was continued")


def stop_target_then_interrupt(proc: subprocess.Popen, ada: subprocess.Popen) -> tuple[str, str]:
    """SIGSTOP the target, then Ctrl-C ada: its (stdout, stderr) once it exits, or fail
    after 90 s with where ada's threads wait (PYTHONFAULTHANDLER, SIGABRT)."""
    os.kill(proc.pid, signal.SIGSTOP)
    while process_state(proc.pid) != "T":
        time.sleep(0.01)
    ada.send_signal(signal.SIGINT)
    try:
        return ada.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        ada.send_signal(signal.SIGABRT)
        raise AssertionError(f"ada waited on the stopped target:\n{ada.communicate()[1]}") from None


def test_attach_to_running_program_which_keeps_running(tmp_path, target_bin, engine):
    proc = subprocess.Popen([target_bin("ticker")], stdout=subprocess.PIPE, text=True)
    try:
        assert read_line(proc).startswith("tick")
        s, _ = trace(tmp_path, *engine, "-p", proc.pid, "-i", "ticker!work", "--duration", "1")
        assert s.manifest.document["end"]["reason"] == "duration"
        # The wall clock is anchored as the recording starts and as it stops (the process
        # lives on): about the second of --duration apart on both clocks.
        start, end = s.manifest.document["clock_anchors"]
        assert (start["at"], end["at"]) == ("start", "end")
        for clock in ("clock_ns", "realtime_ns"):
            assert 0.9e9 < end[clock] - start[clock] < 30e9
        work = function_events(s, "work")[0]
        assert len(work) >= 2000
        # The program keeps calling work() as ada stops: a call it entered just before may
        # return after the hooks are out (no RETURN; seen in the emulated arm64 machine).
        assert_balanced(work, open_at_end=len(work) % 2)
        before = int(read_line(proc).split()[1])
        time.sleep(0.3)
        assert_ticks_on(proc, before, "after detach")
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("transport", ["shm", "rpc"])
def test_a_target_stopped_as_the_recording_ends_does_not_hold_ada(tmp_path, target_bin, engine,
                                                                  transport):
    """A stopped target (SIGSTOP here; a debugger, or a fatal signal its tracer holds) runs
    none of the agent's code: ada's calls as it stops get no answer. ada used to wait for
    them for ever. It gives the target up after a short bound, says why, and keeps what was
    recorded; continued, the target runs on and its agent leaves with ada's hooks."""
    proc = subprocess.Popen([target_bin("ticker")], stdout=subprocess.PIPE, text=True)
    out_dir = tmp_path / "traces"
    try:
        assert read_line(proc).startswith("tick")
        threads_before = len(os.listdir(f"/proc/{proc.pid}/task"))
        ada = subprocess.Popen(ada_command("trace", *engine, "--transport", transport,
                                           "-o", out_dir, "-p", proc.pid, "-i", "ticker!work"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONFAULTHANDLER": "1"})
        wait_for_index_events(out_dir, 2000)
        stdout, stderr = stop_target_then_interrupt(proc, ada)
        print(stderr)
        assert ada.returncode == 0, stderr
        assert "warning: no answer to ada's call" in stderr
        assert "it is stopped (SIGSTOP, Ctrl-Z or a debugger; state T)" in stderr
        s = atf.open_session(session_path(subprocess.CompletedProcess([], 0, stdout, "")))
        work = function_events(s, "work")[0]
        assert len(work) >= 2000
        assert_balanced(work, open_at_end=len(work) % 2)
        end = s.manifest.document["end"]
        if transport == "shm":  # the drain read all the target wrote: it wrote no more
            assert (end["clean"], end["undelivered_events"]) == (True, 0)
        else:  # what it wrote after the last pull is in its rings, uncounted: not clean
            assert (end["clean"], end["undelivered_events"]) == (False, None)
            assert "no answer" in s.manifest.document["transport"]["last_error"]
        assert_continued_without_agent(proc, threads_before)
    finally:
        proc.kill()
        proc.wait()


def test_ctrl_c_while_attaching_to_a_stopped_target_does_not_hold_ada(tmp_path, target_bin):
    """Ctrl-C while ada attaches, its target stopped meanwhile (a debugger, Ctrl-Z): undoing
    the hooks needs calls the target cannot answer. ada waited for them for ever (found with
    the target slowed to 5 % of a CPU and stopped as its hooks went in). They are bounded as
    at a recording's end: ada says why and that nothing was recorded, and exits 130;
    continued, the target runs on and its agent leaves. ADA_TEST_PIPELINE_DELAY_S holds ada
    in its attach, as a slow machine does."""
    proc = subprocess.Popen([target_bin("ticker")], stdout=subprocess.PIPE, text=True)
    try:
        assert read_line(proc).startswith("tick")
        threads_before = len(os.listdir(f"/proc/{proc.pid}/task"))
        ada = subprocess.Popen(ada_command("trace", "-o", tmp_path / "traces", "-p", proc.pid,
                                           "-i", "ticker!work"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "ADA_TEST_PIPELINE_DELAY_S": "60",
                                    "PYTHONFAULTHANDLER": "1"})
        # Raw reads of the pipe, not readline(): a readline that buffered the line after the
        # one it returned left select() waiting on an empty pipe until ada wrote again, after
        # its 60 s hold (a CI run interrupted the recording then, not the attach)
        said, deadline = b"", time.monotonic() + 120
        while b"; recording (" not in said:
            assert time.monotonic() < deadline and ada.poll() is None, said.decode()
            if select.select([ada.stderr], [], [], 0.2)[0]:
                said += os.read(ada.stderr.fileno(), 65536)
        _, stderr = stop_target_then_interrupt(proc, ada)
        print(stderr)
        assert ada.returncode == 130, stderr
        assert "ada: interrupted while attaching: nothing was recorded" in stderr
        assert "no answer to ada's call (unload): it is stopped" in stderr
        assert_continued_without_agent(proc, threads_before)
    finally:
        proc.kill()
        proc.wait()


def test_tracer_killed_with_sigkill_leaves_recoverable_files(tmp_path, target_bin, engine):
    out_dir = tmp_path / "traces"
    ada = subprocess.Popen(ada_command("trace", *engine, "-q", "-o", out_dir,
                            "-f", target_bin("ticker"), "-i", "ticker!work"),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           cwd=Path(__file__).resolve().parents[1])
    target_pid = None
    try:
        session = wait_for_index_events(out_dir, 20000)
        target_pid = int(session.name[4:])
        ada.send_signal(signal.SIGKILL)
        ada.wait(timeout=10)
    finally:
        if ada.poll() is None:
            ada.kill()
        if target_pid is not None:
            os.kill(target_pid, signal.SIGKILL)
    # The manifest written at the start says the recording never finished.
    assert json.loads((session / "manifest.json").read_text())["end"]["reason"] == "recording"
    out = run_ada("verify", session)
    assert out.returncode == 0 and "recovered" in out.stdout
    s = atf.open_session(session)
    for t in s.threads:
        size = (t.path / "index.atf").stat().st_size
        assert t.index.state == "recovered" and len(t.index) == (size - 64) // 32
        assert_balanced(t.index.events[:len(t.index) // 2 * 2])
    info = json.loads(run_ada("info", session, "--json").stdout)
    assert info["state"] == "recovered" and info["index_events"] == s.event_count()


def test_a_second_ctrl_c_quits_a_stop_that_cannot_finish(tmp_path, target_bin):
    """A stop waits for the agent, which cannot answer while its target is stopped (SIGSTOP, as
    a debugger or Ctrl-Z would; a target stuck in Frida's fork handling held ada the same way).
    The first Ctrl-C asks for the stop; a second one while it waits quits at once: exit 130, a
    line that says so, and files that hold what reached the disk."""
    out_dir, err = tmp_path / "traces", tmp_path / "ada.err"
    with open(err, "w") as err_file:  # not a pipe: the target keeps ada's stderr open
        ada = subprocess.Popen(ada_command("trace", "-o", out_dir, "-f", target_bin("ticker"),
                                           "-i", "ticker!work"),
                               stdout=subprocess.DEVNULL, stderr=err_file,
                               cwd=Path(__file__).resolve().parents[1])
    target_pid = None
    try:
        session = wait_for_index_events(out_dir, 20000)
        target_pid = int(session.name[4:])
        os.kill(target_pid, signal.SIGSTOP)
        ada.send_signal(signal.SIGINT)
        time.sleep(2)
        assert ada.poll() is None, "the stop ended although the target could not answer"
        ada.send_signal(signal.SIGINT)
        ada.wait(timeout=10)
        stderr = err.read_text()
        assert ada.returncode == 130, stderr
        assert "quit at once (a second SIGINT while stopping)" in stderr
    finally:
        if ada.poll() is None:
            ada.kill()
        if target_pid is not None:
            os.kill(target_pid, signal.SIGKILL)
            os.kill(target_pid, signal.SIGCONT)
    out = run_ada("verify", session)
    assert out.returncode == 0 and "recovered" in out.stdout, out.stdout


def test_target_crash_finalizes_everything_before_it(tmp_path, target_bin, engine):
    n = 5000
    s, _ = trace(tmp_path, *engine,
                 "-f", target_bin("ticker"), "crash-after", str(n), "-i", "ticker!work")
    assert s.manifest.document["end"]["reason"] == "target-crashed"
    work = function_events(s, "work")[0]
    assert len(work) == 2 * n
    assert_verify_clean(s.path)


@pytest.mark.parametrize("args,message", [
    (["-p", "999999", "-i", "x"], "no such process"),
    (["-n", "no-such-process-ada", "-i", "x"], "no such process"),
    (["-f", "/nonexistent/ada-target", "-i", "x"], "cannot spawn"),
    (["-o", "/dev/null/sub", "-f", "/bin/true", "-i", "x"], "not writable"),
])
def test_bad_input_is_one_line_and_exit_1(tmp_path, args, message):
    out = run_ada("trace", *args)
    assert out.returncode == 1
    assert len(ada_lines(out.stderr)) == 1 and message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_the_inline_probes_cut_the_hot_path_short_and_say_so(tmp_path, target_bin):
    """ADA_INLINE_PROBE (scripts/bench_trace.py --parts-only) stops the inline hot path part
    way: the program runs as before (its calls return through the exit stub where the probe
    redirects them), nothing is recorded, and ada says why; a value it does not know is a
    one-line error."""
    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("the inline engine has no port here")
    for probe in ("entry", "redirect", "clock"):
        out = run_ada("trace", "-o", tmp_path, "--hook-engine", "inline", "-f",
                      target_bin("ends"), "1000", "0", "exit:3", "-i", "ends!work",
                      env={**os.environ, "ADA_INLINE_PROBE": probe})
        assert out.returncode == 0, out.stderr
        assert f"ADA_INLINE_PROBE={probe}: the inline hot path stops part way" in out.stderr
        s = atf.open_session(session_path(out))
        assert s.event_count() == 0
        assert s.manifest.document["end"]["exit_status"] == 3
    out = run_ada("trace", "-o", tmp_path, "-f", target_bin("ends"), "-i", "ends!work",
                  env={**os.environ, "ADA_INLINE_PROBE": "half"})
    assert out.returncode == 1 and len(ada_lines(out.stderr)) == 1, out.stderr
    assert "ADA_INLINE_PROBE=half: expected one of entry, redirect, clock" in out.stderr


def _start_ready(argv: list, **kw) -> subprocess.Popen:
    """A target that has printed its first line (attaching earlier can abort it)."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, **kw)
    assert p.stdout.readline() != ""
    return p


def test_target_exiting_during_attach_is_one_line_and_exit_1(target_bin):
    target = _start_ready([target_bin("exits_on_attach")])
    try:
        out = run_ada("trace", "-p", target.pid, "-i", "exits_on_attach!work")
        assert target.wait(timeout=30) == 0
    finally:
        target.kill()
    assert out.returncode == 1 and len(ada_lines(out.stderr)) == 1, out.stderr
    assert f"the target (pid {target.pid}) exited during attach" in out.stderr


def test_without_a_system_compiler_auto_falls_back_to_tinycc_and_external_fails(tmp_path,
                                                                                target_bin):
    """The target runs the system toolchain itself: with no gcc on its PATH, auto says so and
    records with TinyCC; --cmodule-toolchain external is a one-line error."""
    env = dict(os.environ, PATH="/nonexistent")
    args = ("-o", tmp_path / "traces", "-f", target_bin("exact_calls"), "100",
            "-i", "exact_calls!work")
    out = run_ada("trace", *args, "--cmodule-toolchain", "auto", env=env)
    assert out.returncode == 0, out.stderr
    assert "compiled by Frida's TinyCC; the system toolchain could not" in out.stderr
    s = atf.open_session(out.stdout.strip().splitlines()[-1])
    assert s.manifest.document["hot_path"]["toolchain"] == "internal"
    assert "gcc" in s.manifest.document["hot_path"]["toolchain_fallback"]
    assert len(function_events(s, "work")[0]) == 200
    out = run_ada("trace", *args, "--cmodule-toolchain", "external", env=env)
    assert out.returncode == 1 and len(ada_lines(out.stderr)) == 1, out.stderr
    assert "the system toolchain cannot compile the hot path" in out.stderr


def test_permission_denied_is_one_line_and_exit_1(tmp_path):
    """Without CAP_SYS_PTRACE, root may not attach to another user's process."""
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.fail("this test needs root and setpriv (util-linux) to drop CAP_SYS_PTRACE")
    target = _start_ready(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           "sh", "-c", "echo ready; exec sleep 60"])
    try:
        out = subprocess.run(["setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace",
                              *ada_command("trace", "-p", target.pid, "-i", "nanosleep",
                                           "-o", tmp_path)],
                             capture_output=True, text=True, timeout=120,
                             cwd=Path(__file__).resolve().parents[1])
        assert target.poll() is None, "the target must survive a refused attach"
    finally:
        target.kill()
    assert out.returncode == 1 and len(ada_lines(out.stderr)) == 1, out.stderr
    assert f"permission denied attaching to pid {target.pid}" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_no_matching_function_exits_1_and_kills_the_spawned_target(tmp_path, target_bin):
    exe = target_bin("ticker")
    out = run_ada("trace", "-o", tmp_path, "-f", exe, "-i", "ticker!no_such_fn*")
    assert out.returncode == 1 and "no function matched" in out.stderr
    leftover = subprocess.run(["pgrep", "-x", exe.name], capture_output=True, text=True)

    def runs_it(pid: str) -> bool:
        try:
            return Path(f"/proc/{pid}/exe").resolve() == exe.resolve()
        except OSError:  # gone between pgrep and the look (CI, 2026-11-29)
            return False

    alive = [pid for pid in leftover.stdout.split() if runs_it(pid)]
    assert alive == [], "the spawned target was left running"


def test_spawn_finds_the_program_on_path_as_a_shell_would(tmp_path, target_bin):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy(target_bin("exact_calls"), bin_dir / "exact_calls")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    out = run_ada("trace", "-q", "-o", tmp_path / "traces", "-f", "exact_calls", "7",
                  "-i", "exact_calls!work", env=env)
    assert out.returncode == 0, out.stderr
    s = atf.open_session(session_path(out))
    assert s.manifest.document["process"]["argv"] == ["exact_calls", "7"]
    assert len(function_events(s, "work")[0]) == 14
    missing = run_ada("trace", "-o", tmp_path / "traces", "-f", "no-such-program-here",
                      "-i", "main", env=env)
    assert missing.returncode == 1 and len(ada_lines(missing.stderr)) == 1, missing.stderr
    assert "cannot spawn no-such-program-here: no such program on PATH" in missing.stderr


def test_a_function_frida_cannot_hook_is_named_once_and_the_rest_traced(tmp_path, target_bin,
                                                                       engine):
    """Too short for a jump, with no padding near it: Frida's Interceptor refuses it, named
    once, in Frida's words; the inline engine (x86_64) hooks it through a breakpoint, said
    at the start, every call recorded and counted."""
    s, out = trace(tmp_path, *engine, "-f", target_bin("too_short"), "50", "-i", "too_short!tiny",
                   "-i", "too_short!work")
    if platform.machine() == "x86_64" and "inline" in engine:
        warnings = [line for line in out.stderr.splitlines() if "warning" in line]
        assert "1 function(s) hooked through a breakpoint (int3)" in warnings[0], out.stderr
        assert warnings[0].endswith(": tiny") and len(warnings) == 2, out.stderr
        assert "50 call(s) came through breakpoint hooks" in warnings[1]
        m = s.manifest.document
        assert m["hook_failures"] == [] and m["hook_fallbacks"] == []
        (bp,) = m["hook_breakpoints"]
        assert bp["name"] == "tiny" and "too short" in bp["reason"], bp
        assert m["hook_breakpoint_calls"] == 50 and s.manifest.hooks["by_breakpoint"] == 1
        assert m["end"]["clean"]
        assert [len(function_events(s, f)[0]) for f in ("tiny", "work")] == [100, 100]
        assert_balanced(function_events(s, "tiny")[0])
        return
    if platform.machine() == "aarch64":
        # arm64: the Interceptor patches with one 4-byte `b` to a trampoline it places within
        # +-128 MB, so even this two-instruction function is hooked: traced, nothing to name
        assert "warning" not in out.stderr, out.stderr
        assert [len(function_events(s, f)[0]) for f in ("tiny", "work")] == [100, 100]
        return
    warnings = [line for line in out.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "cannot hook tiny in too_short" in warnings[0], out.stderr
    assert "too short" in warnings[0] and "the other functions are traced" in warnings[0]
    assert "please file a bug" not in out.stderr
    (failure,) = s.manifest.document["hook_failures"]
    assert failure["name"] == "tiny" and "too short" in failure["reason"]
    assert "unable to intercept" in failure["error"]  # Frida's own words are kept too
    assert len(function_events(s, "work")[0]) == 100


def test_usage_errors(tmp_path):
    for args in (["-p", "1", "-n", "x", "-i", "f"], ["-p", "1"], ["-p", "1", "-a", "nomodule"],
                 ["-p", "1", "-i", "f", "-U", "-R"],
                 ["-p", "1", "-i", "f", "--index-io", "direct", "--pre-roll-ms", "10"]):
        out = run_ada("trace", *args)
        assert out.returncode == 2 and len(ada_lines(out.stderr)) == 1, args
        assert out.stderr.startswith("ada trace: error: ") and "--help" in out.stderr


def test_the_index_lane_straight_to_the_disk(tmp_path, target_bin, engine):
    """--index-io direct: index.atf goes to the disk with O_DIRECT from its first block (the
    manifest says from where), and holds every event as through the page cache."""
    if not o_direct_works(tmp_path):
        pytest.skip("the filesystem of the test directory refuses O_DIRECT")
    n = 20000
    s, _ = trace(tmp_path, *engine, "-f", target_bin("exact_calls"), str(n), "2",
                 "-i", "exact_calls!work", "--index-io", "direct")
    m = s.manifest.document
    assert m["options"]["index_io"] == "direct"
    assert [t["index_direct_from"] for t in m["threads"]] == [F.HEADER_SIZE] * 2
    per_thread = function_events(s, "work")
    assert sorted(len(ev) for ev in per_thread.values()) == [2 * n, 2 * (n + 1)]
    for ev in per_thread.values():
        assert_balanced(ev)
    assert_verify_clean(s.path)


def test_long_option_spellings_select_the_same(tmp_path, target_bin):
    s, _ = trace(tmp_path, "-f", target_bin("exact_calls"), "10", "--include", "exact_calls!*",
                 "--exclude", "exact_calls!main", "--exclude", "exact_calls!_*")
    assert set(s.symbol_names().values()) == {"work"}
    assert len(function_events(s, "work")[0]) == 20


def test_drop_policy_counts_every_dropped_event(tmp_path, target_bin, engine):
    """A tiny ring and --on-full drop: drops happen, are counted, and recording goes on.

    Bursts that each overfill the ring, with pauses between them: a drain that keeps emptying
    the ring records more than one ring's worth however slowly it is scheduled (one burst run
    flat out can end before a loaded machine lets the drain run at all)."""
    bursts, calls = 20, 20_000
    s, out = trace(tmp_path, *engine,
                   "-f", target_bin("bursts"), str(bursts), str(calls), "20",
                   "-i", "bursts!work", "--on-full", "drop", "--ring-kb", "4")
    m = s.manifest.document
    dropped = m["threads"][0]["drops"]
    recorded = len(s.threads[0].index)
    assert dropped > 0 and m["drops"]["index"] == dropped
    assert recorded + dropped == 2 * bursts * calls
    assert recorded > 2 * 4096 // 32  # more than one ring: the drain kept emptying it
    assert_verify_clean(s.path)


def test_a_program_at_rest_lets_the_drain_nap_and_its_bursts_wake_it(tmp_path, target_bin,
                                                                     engine):
    """Between bursts the drain naps (up to 100 ms on Linux: tracer/record/nap.py). A burst's
    ring, half full, wakes it (ada_wake_drain), the manifest counts the wakes, nothing is lost.
    Without the wake the count is 0: nothing else writes it. Small rings (2,048 events), so
    that a ring is half full well within a nap even where calls are slow: the Frida engine
    under emulation, where a default ring's half took longer than a nap, and no burst woke it."""
    bursts, calls = 5, 20_000  # 40,000 events a burst: twenty rings
    s, _ = trace(tmp_path, *engine, "-f", target_bin("bursts"), str(bursts), str(calls), "300",
                 "-i", "bursts!work", "--ring-kb", "64")
    m = s.manifest.document
    assert len(s.threads[0].index) == 2 * bursts * calls
    assert m["drain_wakes"] >= 1
    assert_verify_clean(s.path)


def test_over_rpc_a_program_at_rest_is_never_called_and_its_calls_are_pushed(
        tmp_path, target_bin, engine):
    """Over rpc the agent pushes what its rings hold, looking at them every 10 ms while
    nothing is new, and the host never calls it while it runs (a call crossing a fork lets
    Frida kill the child: docs/recording.md, "Children and exec"). A program that rests 1 s
    between bursts of calls gets its calls pushed in a few messages, each waking the drain,
    and no pull; no call is lost. When the host pulled, the same 3 s took 131 pulls at 25 ms
    naps, 40 with naps doubling up to 250 ms, and 8 with the agent's wake message."""
    bursts, calls = 3, 10
    s, _ = trace(tmp_path, *engine, "--transport", "rpc", "-f", target_bin("bursts"),
                 str(bursts), str(calls), "1000", "-i", "bursts!work")
    m = s.manifest.document
    assert len(s.threads[0].index) == 2 * bursts * calls
    assert m["drain_wakes"] >= 1
    assert m["transport"]["pulls"] == 0, m["transport"]  # it exited: no pull at the end either
    assert 1 <= m["transport"]["pushes"] <= 4 * bursts, m["transport"]
    assert_verify_clean(s.path)


def test_over_rpc_a_program_recording_at_a_steady_pace_gets_few_messages(
        tmp_path, target_bin, engine):
    """Each message from ada into the target is a chance of Frida's fork fault (docs/
    recording.md, "Children and exec"), so over rpc the host tells the pushing agent what it
    received only once half its window came (or a slot was freed), and otherwise beats once
    a second; the agent, between pushes that carry little, waits 10 ms. A program calling at
    a modest, steady pace (200 calls every 2 ms, about 3 s) then gets a message or two a
    second, and about a hundred pushes a second at most. Before (the heartbeat every 100 ms
    while the drain worked, the agent pushing again at once after any push, acknowledged
    every 8 pushes as the drain went idle): 42 messages and 314 pushes in 3.4 s."""
    bursts, calls = 1500, 200
    s, _ = trace(tmp_path, *engine, "--transport", "rpc", "-f", target_bin("bursts"),
                 str(bursts), str(calls), "2", "-i", "bursts!work")
    m = s.manifest.document
    assert len(s.threads[0].index) == 2 * bursts * calls and m["end"]["clean"]
    seconds = m["session"]["duration_s"]
    assert m["transport"]["beats"] <= 2 * seconds + 3, (seconds, m["transport"])
    assert m["transport"]["pushes"] <= 110 * seconds, (seconds, m["transport"])
    assert_verify_clean(s.path)


def test_three_hundred_threads_at_once(tmp_path, target_bin, engine):
    n = 200
    s, _ = trace(tmp_path, *engine, "-f", target_bin("exact_calls"), str(n), "300", "-i",
                 "exact_calls!work", timeout=240)
    counts = sorted(len(t.index) for t in s.threads)
    assert counts == [2 * (n + i) for i in range(300)]
    assert_verify_clean(s.path)


def test_threads_past_max_threads_are_counted(tmp_path, target_bin, engine):
    n = 1000
    s, _ = trace(tmp_path, *engine,
                 "-f", target_bin("exact_calls"), str(n), "8", "-i", "exact_calls!work",
                 "--max-threads", "4")
    drops = s.manifest.document["drops"]
    recorded = s.event_count()
    # A thread that starts while 4 others hold every ring is counted, not recorded; one that
    # starts after an earlier one ended takes its ring (how many do depends on the timing:
    # test_threads_past_max_threads_are_counted_as_dropped forces overflow).
    assert len(s.threads) + drops["overflow_threads"] == 8
    # Every event is either in a file or counted: nothing vanishes silently.
    assert recorded + drops["overflow_events"] == sum(2 * (n + i) for i in range(8))
    assert_verify_clean(s.path)


def test_tiny_ring_waits_and_loses_nothing(tmp_path, target_bin, engine):
    n = 300_000
    s, _ = trace(tmp_path, *engine,
                 "-f", target_bin("exact_calls"), str(n), "-i", "exact_calls!work",
                 "--ring-kb", "4")
    assert len(s.threads[0].index) == 2 * n and s.manifest.document["drops"]["index"] == 0
    # 128 events to a ring: the target had to wait for the drain, and the manifest says so.
    thread, total = s.manifest.document["threads"][0], s.manifest.document["drops"]
    assert thread["waits"] > 0 and thread["wait_ms"] > 0
    assert (total["waits"], total["wait_ms"]) == (thread["waits"], thread["wait_ms"])
    assert_verify_clean(s.path)


def test_a_crash_with_libc_hooked_records_nothing_of_fridas_handler(tmp_path, target_bin, engine):
    """boom() writes through NULL. Frida's exception handler then runs on the crashing thread
    (getenv, locks, reads, setjmp...): none of it is the program's, so nothing is recorded
    under boom(). (With the inline engine, one sigaction pair was, until sigaction, which
    Frida replaces, went to the Interceptor.)"""
    s, _ = trace(tmp_path, *engine, "-f", target_bin("ends"), 3, 0, "segv-traced",
                 "-I", "libc.so.6", "-i", "ends!boom", "-i", "ends!work", timeout=240)
    assert s.manifest.document["end"]["reason"] == "target-crashed"
    names = s.symbol_names()
    ev = s.threads[0].index.events
    calls = [names[int(e["function_id"])] for e in ev if e["event_kind"] == F.EVENT_CALL]
    after = calls[calls.index("boom") + 1:]
    assert after == [], after[:20]
