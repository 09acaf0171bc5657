"""Tail calls, and calls a longjmp leaves, recorded by both hook engines (the `engine`
fixture): tests/targets/tail_calls.c, built with gcc -O2 so that its tail calls are the
compiler's own `jmp`s (checked with objdump). Each case compares the recorded events, as
(function, kind, depth), with the events the program really makes, computed here from its
source: a tail call keeps the call that jumped open (the callee nests in it and returns
first), and a call left by a longjmp ends with an EXCEPTION event, innermost first, as soon
as a later event shows it gone."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ada.atf import format as F
from helpers import assert_balanced, assert_verify_clean, index_events as events, \
    trace_session as trace

C, R, X = "CALL", "RETURN", "EXCEPTION"

# The instructions of a jump and of a call, as objdump spells them: x86_64 (jmp, call), arm64 (b, bl).
JUMP, CALL = ("b", "bl") if platform.machine() in ("aarch64", "arm64") else ("jmp", "call")
# (function, the function it ends by jumping to): the tail calls gcc -O2 must emit.
JUMPS = [("mid", "leaf"), ("via_relay", "relay"), ("relay", "leaf"), ("chain_a", "chain_b"),
         ("chain_b", "chain_c"), ("jmid", "jleaf"), ("hop", "rec"), ("ping", "pong"),
         ("pong", "ping")]
# (function, the function it calls and then does more): calls that must stay calls.
CALLS = [("top", "mid"), ("top_relay", "via_relay"), ("top_chain", "chain_a"),
         ("outer", "jmid"), ("rec", "hop"), ("top_ping", "ping")]


@pytest.fixture(scope="module")
def tail_calls(tmp_path_factory):
    """tests/targets/tail_calls.c built with gcc -O2, its tail calls checked to be jumps."""
    if shutil.which("objdump") is None:
        pytest.fail("objdump (binutils) is required to check the target's tail calls")
    exe = tmp_path_factory.mktemp("tail_calls") / "tail_calls"
    subprocess.run(["gcc", "-O2", "-g", "-rdynamic", "-o", str(exe),
                    str(Path(__file__).parent / "targets" / "tail_calls.c")], check=True)
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(exe)], check=True,
                          capture_output=True, text=True).stdout
    bodies = dict(re.findall(r"^[0-9a-f]+ <(\w+)>:\n(.*?)(?:\n\n|\Z)", text, re.M | re.S))
    for f, g in JUMPS:
        assert re.search(rf"\s{JUMP}\s+[0-9a-f]+ <{g}>", bodies[f]), f"{f} does not {JUMP} to {g}"
        assert not re.search(rf"\s{CALL}\s+[0-9a-f]+ <{g}>", bodies[f]), f"{f} calls {g}"
    for f, g in CALLS:
        assert re.search(rf"\s{CALL}\s+[0-9a-f]+ <{g}>", bodies[f]), f"{f} does not {CALL} {g}"
    return exe


class Program:
    """The events a program makes, written as it runs: a CALL at the depth of the calls open,
    a RETURN or EXCEPTION closing the innermost one."""

    def __init__(self):
        self.events, self.stack = [], []

    def call(self, name, body=None):
        self.events.append((name, C, len(self.stack)))
        self.stack.append(name)
        if body is not None:
            body()
        self.ret()

    def enter(self, name):  # a call that does not return here
        self.events.append((name, C, len(self.stack)))
        self.stack.append(name)

    def ret(self):
        name = self.stack.pop()
        self.events.append((name, R, len(self.stack)))

    def left(self, k):  # k calls a longjmp left, innermost first
        for _ in range(k):
            name = self.stack.pop()
            self.events.append((name, X, len(self.stack)))


def expected(case, n, depth=3):
    p = Program()
    if case == "tail":  # top -> mid -(jmp)-> leaf
        for _ in range(n):
            p.call("top", lambda: p.call("mid", lambda: p.call("leaf")))
    elif case == "relay":  # via_relay -(jmp)-> relay (not hooked) -(jmp)-> leaf
        for _ in range(n):
            p.call("top_relay", lambda: p.call("via_relay", lambda: p.call("leaf")))
    elif case == "chain":
        for _ in range(n):
            p.call("top_chain", lambda: p.call("chain_a", lambda: p.call(
                "chain_b", lambda: p.call("chain_c"))))
    elif case == "longjmp":  # outer -> jmid -(jmp)-> jleaf -(longjmp)-> outer, n times
        def loop():
            for i in range(n):
                if i:  # the next call from the same slot shows the last two left
                    p.left(2)
                p.enter("jmid")
                p.enter("jleaf")
            p.left(2)  # outer's RETURN shows the last two left
        p.call("outer", loop)
    elif case == "rec":  # rec(d) -> hop(d) -(jmp)-> rec(d - 1) -> ... rec(0)
        for _ in range(n):
            for k in range(depth, 0, -1):
                p.enter("rec")
                p.enter("hop")
            p.call("rec")
            for _ in range(2 * depth):
                p.ret()
    elif case == "pingpong":  # ping(4) -(jmp)-> pong(3) -(jmp)-> ... ping(0)
        def ping(k):
            p.call("ping" if k % 2 == 0 else "pong", None if k <= 0 else lambda: ping(k - 1))
        for _ in range(n):
            p.call("top_ping", lambda: ping(4))
    return p.events


HOOKED = {"tail": ["top", "mid", "leaf"], "relay": ["top_relay", "via_relay", "leaf"],
          "chain": ["top_chain", "chain_a", "chain_b", "chain_c"],
          "longjmp": ["outer", "jmid", "jleaf"], "rec": ["rec", "hop"],
          "pingpong": ["top_ping", "ping", "pong"]}


def record(tmp_path, exe, engine, case, *args, extra=()):
    s, out = trace(tmp_path, *engine, "-f", exe, case, *map(str, args),
                   *[a for f in HOOKED[case] for a in ("-i", f"tail_calls!{f}")], *extra,
                   quiet=False)
    m = s.manifest.document
    assert m["hook_fallbacks"] == [] and m["hook_engine"] == engine[1]
    assert len(s.threads) == 1
    names = s.symbol_names()
    ev = s.threads[0].index.events
    seq = [(names[int(e["function_id"])], F.EVENT_KIND_NAMES[int(e["event_kind"])],
            int(e["call_depth"])) for e in ev]
    return s, out, ev, seq


def calls_per_function(seq):
    counts = {}
    for name, kind, _ in seq:
        if kind == C:
            counts[name] = counts.get(name, 0) + 1
    return counts


@pytest.mark.parametrize("case", ["tail", "relay", "chain", "rec", "pingpong"])
def test_tail_calls_nest_in_the_call_that_jumped(tmp_path, tail_calls, engine, case):
    """The callee of a tail call nests in the call that jumped to it (depth + 1), returns
    first, then that call returns; nothing is taken for left."""
    s, out, ev, seq = record(tmp_path, tail_calls, engine, case, 3)
    assert seq == expected(case, 3)
    assert_balanced(ev)
    assert calls_per_function(seq) == calls_per_function(expected(case, 3))
    assert s.manifest.document["unwinding"]["unwound_calls"] == 0 and "longjmp" not in out.stderr
    assert s.manifest.document["end"]["clean"]


def test_a_longjmp_out_of_a_tail_call(tmp_path, tail_calls, engine):
    """jmid jumps to jleaf, which longjmps back into outer; outer calls jmid again from the
    same stack slot, whose return address is then real, not Frida's trampoline: both calls
    were left, and each ends with an EXCEPTION event (innermost first) before the next CALL.
    The last two are found left by outer's RETURN."""
    n = 3
    s, out, ev, seq = record(tmp_path, tail_calls, engine, "longjmp", n)
    assert seq == expected("longjmp", n)
    assert_balanced(ev, left=True)
    assert calls_per_function(seq) == {"outer": 1, "jmid": n, "jleaf": n}
    left = s.manifest.document["unwinding"]["unwound_calls"]
    if engine[1] == "frida":
        # Frida's records it keeps (reaped as outer returns, so the last two are not)
        assert left == 2 * (n - 1) and "left by longjmp" in out.stderr
    else:
        assert left == 2 * n
    assert_verify_clean(s.path)


def test_recursion_through_tail_calls_past_the_shadow_stack(tmp_path, tail_calls, engine):
    """rec(200) nests 401 calls, half of them tail calls: the Frida engine keeps the stack
    pointers of the first 256 and counts the rest; depths stay right both ways."""
    s, out, ev, seq = record(tmp_path, tail_calls, engine, "rec", 2, 200)
    assert seq == expected("rec", 2, depth=200)
    assert max(d for _, _, d in seq) == 400
    assert_balanced(ev)
    assert s.manifest.document["unwinding"]["unwound_calls"] == 0


@pytest.mark.parametrize("toolchain", ["internal", "external"])
@pytest.mark.parametrize("case", ["tail", "longjmp"])
def test_tail_calls_and_longjmp_with_the_detail_lane(tmp_path, tail_calls, engine, case,
                                                     toolchain):
    """--detail: the same events, each CALL and RETURN linked to its detail record; an
    EXCEPTION event has none (it is written as ada finds the call gone). With the hot path
    compiled by TinyCC too."""
    s, out, ev, seq = record(tmp_path, tail_calls, engine, case, 3,
                             extra=("--detail", "--cmodule-toolchain", toolchain))
    assert s.manifest.document["hot_path"]["toolchain"] == toolchain
    assert seq == expected(case, 3)
    t = s.threads[0]
    linked = ev["detail_seq"] != F.NO_DETAIL_SEQ
    assert np.array_equal(linked, ev["event_kind"] != F.EVENT_EXCEPTION)
    assert np.array_equal(ev["detail_seq"][linked], np.arange(linked.sum()))
    for i in np.flatnonzero(linked):
        d = t.get_detail_for(int(i))
        assert d.index_seq == i and d.function_id == int(ev["function_id"][i])
    assert_verify_clean(s.path)


def test_assert_balanced_takes_exception_events_as_closes_when_told():
    c, r, x = F.EVENT_CALL, F.EVENT_RETURN, F.EVENT_EXCEPTION
    left = events([(c, 0, 1), (c, 1, 2), (c, 2, 3), (x, 2, 3), (x, 1, 2), (c, 1, 2), (r, 1, 2),
                   (r, 0, 1)])
    assert_balanced(left, left=True)
    with pytest.raises(AssertionError, match="not CALL/RETURN"):
        assert_balanced(left)
    assert_balanced(events([(c, 0, 1), (x, 0, 1), (c, 0, 1)]), left=True, open_at_end=1)
    for wrong in ([(c, 0, 1), (c, 1, 2), (x, 1, 1), (r, 0, 2)],  # closes swapped
                  [(c, 0, 1), (x, 1, 1)],  # the wrong depth
                  [(c, 0, 1), (x, 0, 1), (c, 0, 1)]):  # left open
        with pytest.raises(AssertionError):
            assert_balanced(events(wrong), left=True)
