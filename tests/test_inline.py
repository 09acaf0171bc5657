"""The inline hook engine's hard cases (--hook-engine inline, x86_64 and arm64), end to end on real
programs (tests/targets/inline_cases.c, throws.cpp): deep recursion, signal handlers, C++
exceptions and longjmp through hooked calls, and a call still open when ada leaves. The
ordinary recording tests run with both engines (the `engine` fixture)."""

import json
import platform
import re
import subprocess
import time

import numpy as np
import pytest

from ada.atf import format as F
from helpers import (INLINE_MACHINES, assert_balanced, assert_verify_clean, function_events,
                     read_line, run_ada, spinning, trace_session as trace)

INLINE = ("--hook-engine", "inline")
pytestmark = pytest.mark.skipif(platform.machine() not in INLINE_MACHINES,
                                reason=f"the inline engine has no port to {platform.machine()}")


@pytest.fixture(params=["jump", "breakpoint"])
def hook(request, monkeypatch):
    """How the inline engine patches the functions: its jump, or (x86_64) the breakpoint it
    keeps for functions no jump fits, asked for every function (ADA_INLINE_HOOK)."""
    if request.param == "breakpoint":
        if platform.machine() != "x86_64":
            pytest.skip("breakpoint hooks are x86_64's: arm64's 4-byte branch fits every function")
        monkeypatch.setenv("ADA_INLINE_HOOK", "breakpoint")
    return request.param


def assert_counted_calls(counted, recorded):
    """The breakpoint calls counted of a program ada attached to and left: each recorded
    call, and a few made as the recording stopped (counted by the handler, not recorded)."""
    assert recorded <= counted <= recorded + recorded // 100, (counted, recorded)


def assert_breakpoints(s, hook, calls):
    """Every call of a breakpoint-hooked function came through its int3, and was counted."""
    m = s.manifest.document
    assert m["hook_breakpoint_calls"] == (calls if hook == "breakpoint" else 0)
    assert bool(m["hook_breakpoints"]) == (hook == "breakpoint")


def test_recursion_a_hundred_thousand_deep(tmp_path, target_bin, hook):
    n = 100_000
    s, out = trace(tmp_path, *INLINE, "-f", target_bin("inline_cases"), "deep", n,
                   "-i", "inline_cases!recurse")
    assert_breakpoints(s, hook, n)
    assert f"depth {n}" in out.stdout
    ev = function_events(s, "recurse")[0]
    assert len(ev) == 2 * n
    calls = ev[ev["event_kind"] == F.EVENT_CALL]
    assert np.array_equal(calls["call_depth"], np.arange(n))  # each one deeper
    assert_balanced(ev)
    m = s.manifest.document
    assert m["end"]["clean"] and m["drops"]["skipped_events"] == 0
    assert m["unwinding"]["unwound_calls"] == 0
    assert_verify_clean(s.path)


@pytest.mark.parametrize("ring_kb", [None, "4"], ids=["ring-default", "ring-4kb"])
def test_a_signal_handler_calling_a_hooked_function(tmp_path, target_bin, ring_kb):
    """A timer's SIGALRM every 20 us runs a handler that calls in_handler(). A handler that
    interrupts ada's own code for this thread cannot record (that code is half way through
    the thread's ring): its call runs unrecorded, counted in skipped_events, and said. With
    4 KB rings ada mostly waits for room, sleeping: a handler's call then is still the
    program's (counted), not one of the wait's own (ada_inline_ours)."""
    n = 300_000
    ring = ["--ring-kb", ring_kb] if ring_kb else []
    s, out = trace(tmp_path, *INLINE, "-f", target_bin("inline_cases"), "signals", n, *ring,
                   "-i", "inline_cases!work", "-i", "inline_cases!in_handler", quiet=False)
    handled = int(out.stdout.split("handler ")[1].split()[0])
    assert handled > 100
    work, in_handler = function_events(s, "work")[0], function_events(s, "in_handler")[0]
    assert len(work) == 2 * n
    skipped = s.manifest.document["drops"]["skipped_events"]
    assert len(in_handler) + skipped == 2 * handled  # each handler call recorded or counted
    assert_balanced(s.threads[0].index.events)  # handler calls nest inside work()'s
    if skipped:
        assert f"{skipped:,} event(s) of hooked calls went unrecorded" in out.stderr
        assert not s.manifest.document["end"]["clean"]
    assert_verify_clean(s.path)


@pytest.mark.skipif(platform.machine() != "x86_64",
                    reason="x86_64's vector registers (the target's kept() is x86_64 assembly)")
@pytest.mark.parametrize("detail", [False, True], ids=["index", "detail"])
@pytest.mark.parametrize("toolchain", ["external", "internal"])
def test_vector_registers_survive_hooked_calls(tmp_path, target_bin, engine, toolchain, detail):
    """xmm0-15 are the caller's at a hooked function's entry and at its return: built by gcc
    the hot path uses none and its stubs save none, so libc's code it calls (pthread_getattr_np
    as each of three threads registers, memcpy for detail records) must run inside a save of
    them (ADA_FOREIGN); under TinyCC the stubs save them. Without either, the target counts bad
    calls (it did, when they were taken out). Eight doubles go in and one comes back too.
    Where the CPU has AVX, the full ymm0-15 too, and two 256-bit vectors in and one back: libc's
    AVX memcpy ends with vzeroupper, so ADA_FOREIGN must save the extended state (xsave), not
    only xmm0-15 (fxsave); with fxsave the target counted every detail call bad, with either
    engine (Frida's Interceptor keeps xmm0-15 only)."""
    n = 3000
    s, out = trace(tmp_path, *engine, "--cmodule-toolchain", toolchain,
                   *(["--detail"] if detail else []), "-f", target_bin("vectors"), n,
                   "-i", "vectors!plain", "-i", "vectors!mix", "-i", "vectors!wide")
    assert "vectors 0 mix 0 " in out.stdout, out.stdout
    hooked = ["plain", "mix"]
    if cpu_has_avx():
        assert "ymm 0 wide 0" in out.stdout, out.stdout
        hooked.append("wide")
    for name in hooked:
        per_thread = function_events(s, name)
        calls = 2 * n if name == "plain" and cpu_has_avx() else n  # kept() and kept_ymm()
        assert sorted(len(e) for e in per_thread.values()) == [2 * calls] * 3, name
    assert s.manifest.document["end"]["clean"]


def cpu_has_avx() -> bool:
    """Whether this CPU has AVX and the kernel keeps its state (Linux lists it only then)."""
    with open("/proc/cpuinfo") as f:
        return any(line.startswith("flags") and "avx" in line.split(":", 1)[1].split()
                   for line in f)


def test_a_signal_handler_on_an_alternate_stack_above(tmp_path, target_bin, engine, request):
    """The handler runs on a signal stack above the thread's own: a lower sp there does not
    mean a deeper call, and a higher one does not mean the thread's calls were left (no
    EXCEPTION): its calls nest inside work()'s, with either engine."""
    if "frida" in engine and platform.machine() in ("aarch64", "arm64"):
        # Still run, and shown as XFAIL or XPASS, never as passed: docs/platforms.md
        request.applymarker(pytest.mark.xfail(
            reason="arm64: about 1 run in 3 the program dies of SIGSEGV inside Frida's agent "
                   "(its Interceptor, a hooked call from a handler on the alternate stack)"))
    n = 100_000
    s, out = trace(tmp_path, *engine, "-f", target_bin("inline_cases"), "altstack", n,
                   "-i", "inline_cases!work", "-i", "inline_cases!in_handler", quiet=False)
    handled, above = (int(x) for x in out.stdout.split("handler ")[1].split()[::2])
    assert handled > 100 and above == 1, out.stdout
    (thread,) = [t for t in s.threads if len(t)]
    ev = thread.index.events
    assert F.EVENT_EXCEPTION not in ev["event_kind"].tolist()
    assert_balanced(ev)
    assert len(function_events(s, "work")[thread.id]) == 2 * n
    assert 0 < len(function_events(s, "in_handler")[thread.id]) <= 2 * handled


def test_an_exception_unwinds_through_hooked_calls(tmp_path, target_bin, hook):
    """The unwinder meets each hooked frame's real return address (ada puts them back as
    unwinding starts): the program catches its exception, and the frame it unwound ends
    with an EXCEPTION event."""
    s, out = trace(tmp_path, *INLINE, "-f", target_bin("throws"), "throw-through",
                   "-i", "throws!thrower", "-i", "throws!main", quiet=False)
    assert "caught thrown" in out.stdout and "std::terminate" not in out.stderr
    names = s.symbol_names()
    ev = s.threads[0].index.events
    assert [(names[int(e["function_id"])], int(e["event_kind"]), int(e["call_depth"]))
            for e in ev] == [("main", F.EVENT_CALL, 0), ("thrower", F.EVENT_CALL, 1),
                             ("thrower", F.EVENT_EXCEPTION, 1), ("main", F.EVENT_RETURN, 0)]
    end = s.manifest.document["end"]
    assert (end["reason"], end["clean"], end["exit_status"]) == ("target-exited", True, 0)
    assert s.manifest.document["unwinding"] == {"unwound_calls": 0, "terminate": None}
    assert_breakpoints(s, hook, 2)
    assert_verify_clean(s.path)


def test_longjmp_out_of_hooked_calls_keeps_no_memory(tmp_path, target_bin):
    """Frida's Interceptor keeps ~2.4 KB per call a longjmp leaves (test_endings); the
    inline engine's shadow stack drops the entry on the next call. The target measures its
    own resident memory across the loop: about the one ring ada writes into (1 MB)."""
    n = 20_000
    s, out = trace(tmp_path, *INLINE, "-f", target_bin("throws"), "longjmp", n,
                   "-i", "throws!jumper", quiet=False)
    grew_kb = int(out.stdout.split("grew by ")[1].split()[0])
    assert grew_kb < 4096, out.stdout  # Frida's Interceptor: ~48,000 KB for these
    jumper = function_events(s, "jumper")[0]
    # each call a longjmp left ends with an EXCEPTION event as the next call shows it gone
    assert jumper["event_kind"].tolist() == [F.EVENT_CALL, F.EVENT_EXCEPTION] * (n - 1) + \
        [F.EVENT_CALL]
    assert np.all(jumper["call_depth"] == 0)
    assert_balanced(jumper, left=True, open_at_end=1)
    assert s.manifest.document["unwinding"]["unwound_calls"] == n - 1  # the last one: seen by no call
    assert "Frida keeps" not in out.stderr


def test_a_programs_own_traps_reach_it_while_and_after_ada_hooks_through_int3(tmp_path,
                                                                              target_bin):
    """too_short's tiny() takes a breakpoint hook (no jump fits it) and the program has a
    SIGTRAP handler of its own: its raise(SIGTRAP)s reach that handler while ada records
    (ada's handler passes on what is not its own) and after ada has left a running program
    (the int3s out, the handler before ada's back: a trap then would find ada's code gone).
    The first recording's hot path is TinyCC's (its static data is read-only: the handler
    keeps what it needs in ada's state)."""
    if platform.machine() != "x86_64":
        pytest.skip("breakpoint hooks are x86_64's")
    exe = target_bin("too_short")
    s, out = trace(tmp_path, *INLINE, "--cmodule-toolchain", "internal", "-f", exe, 50, 3,
                   "-i", "too_short!tiny")
    assert out.stdout.startswith("sigtrap 3\n"), out.stdout
    assert len(function_events(s, "tiny")[0]) == 100
    assert s.manifest.document["hook_breakpoint_calls"] == 50
    gate = tmp_path / "gate"
    proc = subprocess.Popen([exe, "1000", "4", gate], stdout=subprocess.PIPE, text=True)
    try:
        assert read_line(proc) == "looping\n"
        s, _ = trace(tmp_path, *INLINE, "-p", proc.pid, "-i", "too_short!tiny", "--duration", "1")
        time.sleep(0.3)
        gate.touch()
        assert proc.wait(timeout=30) == 0 and proc.stdout.read() == "sigtrap 4\n"
    finally:
        if proc.poll() is None:
            proc.kill()
    tiny = function_events(s, "tiny")[0]
    calls = int(np.sum(tiny["event_kind"] == F.EVENT_CALL))
    assert calls > 1000
    assert_counted_calls(s.manifest.document["hook_breakpoint_calls"], calls)


def test_a_call_open_when_ada_leaves_returns_safely(tmp_path, target_bin):
    """A thread is inside park() (300 ms a call) when the recording ends: its return goes
    through ada's exit stub after ada has gone, which must still take it home."""
    gate = tmp_path / "gate"
    proc = subprocess.Popen([target_bin("inline_cases"), "parked", gate],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert read_line(proc) == "parked\n"
        s, _ = trace(tmp_path, *INLINE, "-p", proc.pid, "-i", "inline_cases!park",
                     "-i", "inline_cases!work", "--duration", "1")
        time.sleep(0.5)  # the open park() call returns, through the exit stub, ada gone
        gate.touch()
        assert proc.wait(timeout=30) == 0 and proc.stdout.read() == "ok\n"
    finally:
        if proc.poll() is None:
            proc.kill()
    (park,) = [ev for ev in function_events(s, "park").values() if len(ev)]  # its thread
    kinds = park["event_kind"].tolist()
    times = (park["timestamp_ns"] - park["timestamp_ns"][0]) // 1_000_000
    seen = f"park's events (kind, ms): {list(zip(kinds, times.tolist()))}"
    assert kinds[:-1] == [F.EVENT_CALL, F.EVENT_RETURN] * (len(kinds) // 2), seen
    assert kinds[-1] == F.EVENT_CALL, seen  # open as ada left
    (work,) = [ev for ev in function_events(s, "work").values() if len(ev)]
    assert_balanced(work)


def test_the_recording_ends_at_one_instant_so_a_call_open_then_stays_open(tmp_path, target_bin):
    """A call ada redirected to watch_head() spins until the function's first bytes are put
    back, then returns through the exit stub. ada leaves by pointing the stubs' vector at the
    detached code first and putting the heads back after, so that return is not recorded: the
    recording ends at one instant. Put back first (until 2026-11-29), the return still reached
    the agent while no new call could: a call open as ada left showed closed (the arm64
    guest's run 27, park() in the test above)."""
    gate = tmp_path / "gate"
    proc = subprocess.Popen([target_bin("inline_cases"), "watched", gate],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert read_line(proc) == "watching\n"
        s, _ = trace(tmp_path, *INLINE, "-p", proc.pid, "-i", "inline_cases!watch_head",
                     "--duration", "1")
        gate.touch()
        assert proc.wait(timeout=30) == 0 and proc.stdout.read() == "ok\n"
    finally:
        if proc.poll() is None:
            proc.kill()
    assert s.manifest.document["end"]["reason"] == "duration"
    (watched,) = [ev for ev in function_events(s, "watch_head").values() if len(ev)]
    assert watched["event_kind"].tolist() == [F.EVENT_CALL]  # the one redirected call, open


def test_a_functions_first_bytes_change_in_one_store_each_way(tmp_path, target_bin):
    """ada's thread hold stops the threads on a CPU while it writes a head; a thread asleep
    in a system call is left alone and may wake and run the head meanwhile. So a head that
    fits an aligned 8-byte word (an arm64 `b` always; here an x86_64 jump too) must change in
    one store as it goes in, and one as it comes out: written byte by byte, an arm64 program
    calling work() between sleeps died now and then (its `adrp x2` torn into an `adrp` of
    another register, then a read of address 0x68). The CPU's own write watchpoints count
    the stores (tests/targets/headwrites.c)."""
    proc = subprocess.Popen([target_bin("headwrites")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        first = read_line(proc)
        if first.startswith("unsupported"):
            pytest.skip(f"no write watchpoints here ({first.strip()})")
        assert first == "ready\n"
        s, _ = trace(tmp_path, *INLINE, "-p", proc.pid, "-i", "headwrites!work",
                     "--duration", "1")
        proc.stdin.write("report\n")
        proc.stdin.flush()
        said = read_line(proc)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    m = s.manifest.document
    assert m["end"]["reason"] == "duration" and m["hook_failures"] == [], m["end"]
    assert len(function_events(s, "work")[0]) >= 2000  # the head did change: calls recorded
    stores, interrupted = re.fullmatch(r"stores (\d+) interrupted (\d+)\n", said).groups()
    assert stores == "2", said  # in, and out
    if interrupted != "0":  # the thread hold's race with a thread going to sleep (docs/recording.md)
        print(f"the program's poll() was cut short {interrupted} time(s) (EINTR)")


def test_ada_waiting_for_room_is_not_the_program_losing_calls(tmp_path, target_bin):
    """Two threads spin into 4 KB rings, so ada waits for room again and again. Its wait
    sleeps in nanosleep, which calls clock_nanosleep (glibc); with libc's sleeps
    hooked too, those calls are ada's, not the program's, and nothing is counted lost
    (each 50-us sleep of a wait counted 2 events before: 1,408 for the sqlite3 shell with
    every libc export hooked).

    The drain pauses 20 ms after each pass (ADA_TEST_DRAIN_PAUSE_MS), so the threads wait long
    enough to sleep on any machine: without it, in the emulated arm64 machine with two tests
    at once, the drain kept up and they waited 2 times a run, never long enough to sleep."""
    gate = tmp_path / "gate"
    with spinning(target_bin("inline_cases"), gate) as proc:
        s, out = trace(tmp_path, *INLINE, "-p", proc.pid, "-i", "inline_cases!work",
                       "-i", "libc.so.6!nanosleep", "-i", "libc.so.6!clock_nanosleep",
                       "--duration", "1", "--ring-kb", "4",
                       env={"ADA_TEST_DRAIN_PAUSE_MS": "20"})
        gate.touch()
        assert proc.wait(timeout=30) == 0
    m = s.manifest.document
    work = [len(ev) for ev in function_events(s, "work").values()]  # events per thread
    said = (m["drops"], {"work events": work, "ring events": m["options"]["ring_events"],
                         "drain wakes": m["drain_wakes"]}, out.stderr)  # what a failure shows
    assert m["drops"]["waits"] > 10, said  # ada did wait
    assert m["drops"]["wait_ms"] > 10 * m["drops"]["waits"] / 2, said  # long waits: they slept
    assert m["drops"]["skipped_events"] == 0, said
    assert m["drops"]["index"] == 0 and m["end"]["clean"], said
    assert sum(work) > 1000, said


def test_a_jump_thunk_is_hooked_once(tmp_path, target_bin, engine):
    """thunk() is `jmp work`: both engines hook the code it jumps to (as Frida resolves
    it), once, so each call is recorded once, under work's name, and ada says so."""
    n = 1000
    s, out = trace(tmp_path, *engine, "-f", target_bin("inline_cases"), "thunk", n,
                   "-i", "inline_cases!thunk", "-i", "inline_cases!work", quiet=False)
    assert len(function_events(s, "work")[0]) == 2 * n
    assert len(function_events(s, "thunk")[0]) == 0
    (alias,) = s.manifest.document["hook_aliases"]
    assert (alias["name"], alias["as"]) == ("thunk", "inline_cases!work")
    assert "1 function(s) only jump to another selected function's code" in out.stderr
    alone, _ = trace(tmp_path / "alone", *engine, "-f", target_bin("inline_cases"), "thunk", n,
                     "-i", "inline_cases!thunk")
    assert len(function_events(alone, "thunk")[0]) == 2 * n  # the code it runs, its name
    assert alone.manifest.document["hook_aliases"] == []


def test_functions_frida_hooked_already_are_traced(tmp_path, target_bin, engine):
    """Frida's own exception handling replaces sigaction and signal in every process it
    attaches to. Traced, the program's calls of them are recorded, each once, its handlers
    still run, and it ends well. The inline engine once moved Frida's jump into its stub,
    and the program aborted at its first sigaction; it leaves such functions to the
    Interceptor now, and says why."""
    n = 200
    s, out = trace(tmp_path, *engine, "-f", target_bin("inline_cases"), "handlers", n,
                   "-i", "libc.so.6!sigaction", "-i", "libc.so.6!signal",
                   "-i", "inline_cases!work", "-i", "inline_cases!in_handler", quiet=False)
    assert out.stdout.splitlines()[0] == f"handler {2 * n}"
    m = s.manifest.document
    assert m["end"]["exit_status"] == 0 and m["end"]["crash"] is None
    (ev,) = [t.index.events for t in s.threads]
    assert_balanced(ev)
    # glibc's signal() calls sigaction: n calls of it by main, n under signal()
    for name, calls in [("sigaction", 2 * n), ("signal", n), ("work", n), ("in_handler", 2 * n)]:
        kinds = function_events(s, name)[0]["event_kind"]
        assert (np.count_nonzero(kinds == F.EVENT_CALL),
                np.count_nonzero(kinds == F.EVENT_RETURN)) == (calls, calls), name
    taken = {f["name"]: f["reason"] for f in m["hook_fallbacks"]}
    if "inline" in engine:
        assert set(taken) == {"sigaction", "signal"}
        assert all("hooked already at run time" in why for why in taken.values())
    else:
        assert taken == {}
    assert_verify_clean(s.path)


def test_the_manifest_names_the_engine(tmp_path, target_bin):
    s, _ = trace(tmp_path, *INLINE, "-f", target_bin("exact_calls"), "10",
                 "-i", "exact_calls!work")
    m = json.loads((s.path / "manifest.json").read_text())
    assert (m["hook_engine"], m["hook_fallbacks"]) == ("inline", [])
    assert m["hook_engine_why"] == "--hook-engine inline"


def test_auto_the_default_is_inline_on_x86_64_linux_and_ada_info_says_so(tmp_path, target_bin):
    """No --hook-engine: the inline engine on x86_64 Linux, Frida's Interceptor on arm64 (its
    stubs have run only under emulation); the manifest and `ada info` say which, and why."""
    expected = "inline" if platform.machine() == "x86_64" else "frida"
    s, _ = trace(tmp_path, "-f", target_bin("exact_calls"), "10", "-i", "exact_calls!work")
    m = json.loads((s.path / "manifest.json").read_text())
    assert m["hook_engine"] == expected and m["hook_engine_why"].startswith("auto: ")
    assert len(function_events(s, "work")[0]) == 20
    info = run_ada("info", s.path, check=True).stdout
    (hooks,) = [line for line in info.splitlines() if line.startswith("hooks")]
    assert f"engine={expected}, chosen=auto: " in hooks


def test_patching_and_leaving_while_threads_run_the_function(tmp_path, target_bin, hook):
    """Two threads call work() in a tight loop while ada patches it (attach), records and
    puts it back (detach): the target runs on, and each thread's calls nest (a call open at
    either edge has one side only)."""
    gate = tmp_path / "gate"
    with spinning(target_bin("inline_cases"), gate) as proc:
        s, _ = trace(tmp_path, *INLINE, "-p", proc.pid, "-i", "inline_cases!work",
                     "--duration", "1")
        time.sleep(0.3)
        gate.touch()
        assert proc.wait(timeout=30) == 0 and proc.stdout.read().startswith("calls ")
    threads = [ev for ev in function_events(s, "work").values() if len(ev)]
    assert len(threads) == 2
    for ev in threads:
        if ev["event_kind"][-1] == F.EVENT_CALL:
            ev = ev[:-1]  # open as ada left
        assert len(ev) > 1000 and ev["event_kind"][0] == F.EVENT_CALL
        assert_balanced(ev)
    if hook == "breakpoint":  # every call made while ada was there came through its int3
        calls = sum(int(np.sum(ev["event_kind"] == F.EVENT_CALL)) for ev in threads)
        assert_counted_calls(s.manifest.document["hook_breakpoint_calls"], calls)


def test_functions_shorter_than_the_jump_are_hooked_with_their_arguments(tmp_path, target_bin,
                                                                         hook):
    """pad_host (3 bytes) takes the jump over the padding after it; packed (4 bytes, with
    packed_next right after it) a 2-byte short jump to a jump put in padding nearby; both
    engines before refused them. Every call is recorded, with its arguments and result."""
    exe = target_bin("short_functions")
    if platform.machine() == "x86_64":  # the layout the test is about, as the assembler made it
        from elftools.elf.elffile import ELFFile
        with open(exe, "rb") as f:
            symtab = ELFFile(f).get_section_by_name(".symtab")
            sym = {name: symtab.get_symbol_by_name(name)[0].entry
                   for name in ("pad_host", "packed", "packed_next")}
        assert [sym[n]["st_size"] for n in sym] == [3, 4, 4]
        assert sym["packed_next"]["st_value"] == sym["packed"]["st_value"] + 4
    n = 300
    s, out = trace(tmp_path, *INLINE, "-f", exe, n, "--detail", "-i", "short_functions!pad_host",
                   "-i", "short_functions!packed*", "-i", "short_functions!work", quiet=False)
    assert ("warning" in out.stderr) == (hook == "breakpoint"), out.stderr
    m = s.manifest.document
    assert m["hook_failures"] == [] and m["hook_fallbacks"] == []
    assert_breakpoints(s, hook, 3 * n + 1)
    for name in ("pad_host", "packed", "packed_next"):
        ev = function_events(s, name)[0]
        assert len(ev) == 2 * n, name
        assert_balanced(ev)
    t = s.threads[0]
    packed = function_events(s, "packed")[0]
    first, second = F.REGISTER_NAMES[t.index.arch][:2]
    details = [t.get_detail_for(i) for i, e in enumerate(t.index.events)
               if int(e["function_id"]) == int(packed["function_id"][0])]
    calls = [d for d in details if d.event_type == F.DETAIL_FUNCTION_CALL]
    returns = [d for d in details if d.event_type == F.DETAIL_FUNCTION_RETURN]
    assert [(d.registers[first], d.registers[second]) for d in calls] == \
        [(i, 1000 + i) for i in range(n)]
    assert [d.return_value & 0xffffffff for d in returns] == [1000 + 2 * i for i in range(n)]
    assert_verify_clean(s.path)
