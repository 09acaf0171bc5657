"""The selection as a rule: modules that load after ada attached, matched by any of their
names, and what never matched. Real programs: plugin_host dlopens libplug.so.1.2.3 (soname
libplug.so.1, reached through the symlinks libplug.so and libplug.so.1) after a delay."""

import subprocess
from pathlib import Path

import pytest

import ada.atf as atf
from helpers import (ada_command, assert_balanced, assert_verify_clean, function_events, read_line,
                     run_ada, session_path, trace_session as trace)

N = 37  # plug_work calls a round


def plug_events(s):
    events = function_events(s, "plug_work")
    assert list(events) == [0], events
    return events[0]


@pytest.mark.parametrize("pattern", ["libplug.so.1.2.3", "libplug.so.1", "libplug.so",
                                     "*/libplug.so.1.2.3", "libplug*"],
                         ids=["file", "soname", "dlopen-symlink", "path-glob", "glob"])
def test_a_library_loaded_later_is_hooked_as_it_loads(tmp_path, plugin, pattern, engine):
    s, out = trace(tmp_path, *engine, "-f", plugin / "plugin_host", plugin / "libplug.so", N, 300,
                   "-i", f"{pattern}!plug_work", quiet=False)
    assert f"waiting for {pattern} to load" in out.stderr, out.stderr
    assert "loaded: hooked 1 function(s)" in out.stderr, out.stderr
    ev = plug_events(s)
    assert len(ev) == 2 * N
    assert_balanced(ev)
    (module,) = s.manifest.document["modules"]
    assert module["file"] == str(plugin / "libplug.so.1.2.3")
    assert {"libplug.so.1.2.3", "libplug.so.1", "libplug.so"} <= set(module["names"])
    # Hooked as it loaded: every call is recorded (above), the first one after ada saw the
    # module. (No bound on the gap: hooking took 215-312 ms in the emulated arm64 machine.)
    assert module["added_ns"] <= int(ev["timestamp_ns"][0])
    assert s.manifest.document["never_matched"] == []
    assert_verify_clean(s.path)


def test_soname_of_a_library_linked_at_start(tmp_path, plugin):
    """DT_NEEDED libplug.so.1, a symlink: Frida names the module by its file, ada by both."""
    s, _ = trace(tmp_path, "-f", plugin / "plugin_linked", N, "-I", "libplug.so.1")
    assert len(plug_events(s)) == 2 * N


def test_functions_from_start_and_from_a_later_module_in_one_session(tmp_path, plugin, engine):
    s, _ = trace(tmp_path, *engine, "-f", plugin / "plugin_host", plugin / "libplug.so", N, 200, 2,
                 "-i", "plugin_host!host_work", "-i", "libplug.so.1!plug_work")
    assert [m["module_id"] for m in s.manifest.document["modules"]] == [0, 1]
    assert len(function_events(s, "host_work")[0]) == 2 * 2
    # Loaded, unloaded and loaded again: Frida keeps a library it hooked loaded, and every
    # call of both rounds is recorded, under the same function_id.
    assert len(plug_events(s)) == 2 * 2 * N
    assert_verify_clean(s.path)


def test_attach_then_load(tmp_path, plugin, engine):
    gate = tmp_path / "gate"
    target = subprocess.Popen([str(a) for a in (plugin / "plugin_host", plugin / "libplug.so", N,
                                                0, 1, gate)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert read_line(target).strip() == "waiting"
        ada = subprocess.Popen(ada_command("trace", *engine, "-o", tmp_path / "traces",
                                           "-p", target.pid, "-i", "libplug.so!plug_work"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in ada.stderr:
            if "recording" in line:
                break
        gate.touch()
        assert read_line(target, 30).strip() == "done"
        target.wait(timeout=30)
        stdout, stderr = ada.communicate(timeout=60)
    finally:
        if target.poll() is None:
            target.kill()
    assert ada.returncode == 0, stderr
    s = atf.open_session(stdout.strip().splitlines()[-1])
    # Once in CI (frida, two workers) no plug_work call was recorded, and nothing said why.
    events = function_events(s, "plug_work")
    assert list(events) == [0] and len(events[0]) == 2 * N, f"{events}\n{stderr}"


def test_a_library_loaded_while_the_agent_pushes_loses_no_call(tmp_path, plugin):
    """Frida writes an Interceptor jump when its transaction ends, and a thread waiting to run
    the agent's JavaScript (here its pushes over rpc, never resting while a second
    thread calls busy_work) keeps it open past the end of onAdded: unless the agent waits
    for the jump (ada_await_written), plug_work's first calls run unhooked, uncounted.
    Without that wait 2 runs of 10 here lost all 37 calls. The plugin's 32 other functions,
    hooked with plug_work, make the load's hooking last longer: the race is then met in
    about half the runs (hook_writes_awaited), beside another test too (7 of 12), so the
    test records several and needs it once."""
    runs, met = 8, 0
    for run in range(runs):
        s, out = trace(tmp_path / str(run), "--hook-engine", "frida", "--transport", "rpc",
                       "-f", plugin / "plugin_host", plugin / "libplug.so", N, 200, 1, "-", 1,
                       "-i", "plugin_host!busy_work", "-i", "libplug.so!plug_*",
                       quiet=False)
        doc = s.manifest.document
        assert doc["hook_late"] == [], out.stderr
        events = function_events(s, "plug_work")
        recorded = sum(len(ev) for ev in events.values())
        assert recorded == 2 * N, (f"run {run}: {recorded} plug_work events of {2 * N}, "
                                   f"hook_writes_awaited {doc['hook_writes_awaited']}\n{out.stderr}")
        met += doc["hook_writes_awaited"] > 0
    if met == 0:
        pytest.skip(f"the race was not met in {runs} runs: nothing shown")


def test_what_never_matched_is_said_and_nothing_traced_is_an_error(tmp_path, plugin):
    out = run_ada("trace", "-o", tmp_path / "traces", "-f", plugin / "plugin_host",
                  plugin / "libplug.so", 3, 50, "-i", "libnothere.so!f")
    assert out.returncode == 1
    assert "waiting for libnothere.so to load" in out.stderr
    assert "never matched: -i libnothere.so!f" in out.stderr
    assert "no function matched the selection while the target ran" in out.stderr
    s = atf.open_session(session_path(out))  # the session still says what happened
    assert s.manifest.document["never_matched"] == ["-i libnothere.so!f"]


def test_an_item_that_matched_later_is_not_reported_but_one_that_never_did_is(tmp_path,
                                                                             plugin):
    s, out = trace(tmp_path, "-f", plugin / "plugin_host", plugin / "libplug.so", N, 50,
                   "-i", "libplug.so!plug_work", "-i", "libother.so!x", quiet=False)
    assert s.manifest.document["never_matched"] == ["-i libother.so!x"]
    assert "never matched: -i libother.so!x" in out.stderr
    assert len(plug_events(s)) == 2 * N


def test_a_trigger_in_a_library_loaded_later(tmp_path, plugin, engine):
    # Not quiet: once in CI (inline, two workers) no trigger was recorded, and nothing said why.
    s, out = trace(tmp_path, *engine, "-f", plugin / "plugin_host", plugin / "libplug.so", N, 200,
                   "-i", "plugin_host!host_work", "--trigger", "libplug.so!plug_work",
                   "--pre-roll-ms", 50, "--post-roll-ms", 50, quiet=False)
    triggers = s.manifest.document["triggers"]
    assert triggers and {t["function"] for t in triggers} == {"plug_work"}, \
        f"{s.manifest.document['detail']}\n{out.stderr}"
    assert s.manifest.document["windows"] and len(function_events(s, "host_work")[0]) == 2


def test_an_include_that_only_the_symbol_table_could_satisfy_says_to_use_s(tmp_path):
    """A program built without -rdynamic exports none of its functions: -i cannot see them,
    and ada names the -s that would (both when the module is named and when it is not)."""
    exe = tmp_path / "unexported"
    source = Path(__file__).parent / "targets" / "exact_calls.c"
    subprocess.run(["gcc", "-O1", "-pthread", "-o", exe, source], check=True)
    out = run_ada("trace", "-o", tmp_path / "named", "-f", exe, 5, "-i", "unexported!work")
    assert out.returncode == 1, out.stderr
    assert ("ada trace: error: no function matched the selection: -i unexported!work (1 function(s) of that name "
            "are in the symbol table but not exported, which -i needs: -s unexported!work "
            "traces them)") in out.stderr
    out = run_ada("trace", "-o", tmp_path / "any", "-f", exe, 5, "-i", "wor?", "-i", "nothing*")
    assert out.returncode == 1
    assert ("never matched: -i wor? (1 function(s) of that name are in the symbol table but "
            "not exported, which -i needs: -s wor? traces them); -i nothing*") in out.stderr
    s = atf.open_session(session_path(out))  # the manifest keeps the items as typed
    assert s.manifest.document["never_matched"] == ["-i wor?", "-i nothing*"]
    s, _ = trace(tmp_path / "s", "-f", exe, 5, "-s", "unexported!work")
    assert len(function_events(s, "work")[0]) == 10  # the hint's -s does trace them
