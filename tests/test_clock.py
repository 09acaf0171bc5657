"""Timestamps: raw TSC ticks converted by the drain must be CLOCK_BOOTTIME ns.

Unit tests drive tracer.clock.TickClock with synthetic clocks; the end-to-end
tests bracket each traced call with the target's own CLOCK_BOOTTIME reads.
"""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ada.atf import format as F
from helpers import assert_verify_clean, function_events, run_ada, trace_session
from ada.tracer.record import clock
from ada.tracer.record.clock import STEP_NS, TickClock

GHZ = 2.5  # ticks per ns of the synthetic TSC


def ticks_at(ns: float) -> int:
    return int(ns * GHZ)


def test_two_pairs_give_the_line_through_them():
    c = TickClock(1000, 5_000, 1000 + 25_000_000, 5_000 + 10_000_000)
    ts = np.array([1000, 1000 + 2_500_000, 1000 + 25_000_000], dtype=np.uint64)
    c.convert(ts)
    assert ts.tolist() == [5_000, 5_000 + 1_000_000, 5_000 + 10_000_000]


def test_conversion_is_continuous_monotonic_and_follows_a_drifting_clock():
    """The OS clock runs 50 ppm fast against the first estimate and then steps forward
    (as after a suspend): converted time never goes back and ends up on the OS clock."""
    def os_ns(t: int) -> int:  # the truth the agent's pairs sample
        base = t / GHZ * (1 + 50e-6)
        return int(base + (5 * STEP_NS if t > ticks_at(3e9) else 0))

    c = TickClock(0, 0, ticks_at(20e6), int(20e6))  # start-up estimate: exactly GHZ
    everything = []
    for k in range(1, 60):  # a pair every 100 ms, events in between
        t = ticks_at(k * 1e8)
        c.observe(t, os_ns(t))
        batch = np.arange(t, t + ticks_at(1e8), ticks_at(1e6), dtype=np.uint64)
        c.convert(batch)
        everything.append(batch)
    ns = np.concatenate(everything).astype(np.int64)
    assert np.all(np.diff(ns) > 0)
    assert np.all(np.diff(ns) < 2 * 1e6 + 5 * STEP_NS)  # 1 ms apart; one step of 5 ms
    last_t = ticks_at(59 * 1e8) + ticks_at(1e8) - ticks_at(1e6)
    assert abs(int(ns[-1]) - os_ns(last_t)) < 2_000  # back on the OS clock within 2 us


def test_a_model_ahead_of_the_clock_is_slewed_never_stepped_back():
    c = TickClock(0, 0, ticks_at(20e6), int(20e6) + 30_000)  # first estimate 0.15% fast
    prev = 0
    for k in range(1, 40):
        t = ticks_at(k * 1e8)
        c.observe(t, int(k * 1e8))  # the OS clock: exactly GHZ
        ts = np.array([t + 1, t + ticks_at(5e7)], dtype=np.uint64)
        c.convert(ts)
        assert int(ts[0]) >= prev
        prev = int(ts[-1])
    assert abs(c.ns_at(ticks_at(39e8)) - 39e8) < 1_000


def test_a_late_batch_of_old_ticks_gets_the_same_ns_as_if_drained_at_once():
    """Threads are drained one after another: an event's ns must not depend on when."""
    def os_ns(t):
        return int(t / GHZ * (1 - 80e-6))

    pairs = [(ticks_at(k * 1e8), os_ns(ticks_at(k * 1e8))) for k in range(1, 20)]
    early = np.arange(ticks_at(1e8), ticks_at(19e8), ticks_at(7e6), dtype=np.uint64)

    a = TickClock(0, 0, ticks_at(20e6), os_ns(ticks_at(20e6)))
    b = TickClock(0, 0, ticks_at(20e6), os_ns(ticks_at(20e6)))
    converted_a = []
    for t, ns in pairs:
        a.observe(t, ns)
        b.observe(t, ns)
        part = early[(early >= t) & (early < t + ticks_at(1e8))].copy()
        a.convert(part)  # a converts as it goes
        converted_a.append(part)
    late = early.copy()
    b.convert(late)  # b converts everything after the last pair
    got_a = np.concatenate(converted_a)
    assert np.array_equal(got_a, late[:len(got_a)])


def test_pairs_that_do_not_advance_are_ignored_and_bad_calibration_is_refused():
    c = TickClock(0, 0, 1000, 400)
    c.observe(1000, 400)
    c.observe(900, 500)
    assert c.ns_per_tick == pytest.approx(0.4)
    with pytest.raises(ValueError):
        TickClock(10, 10, 10, 20)


def _marks(stdout: str) -> np.ndarray:
    rows = [line.split() for line in stdout.splitlines()]
    return np.array([[int(a), int(b)] for a, b, *rest in (r for r in rows if len(r) == 2)
                     if a.isdigit() and b.isdigit()], dtype=np.int64)


def _kernel_clocksource() -> str:
    try:
        return Path("/sys/devices/system/clocksource/clocksource0/current_clocksource") \
            .read_text().strip()
    except OSError:
        return ""


@pytest.mark.parametrize("extra", [
    ("--clock-source", "os"),
    ("--clock-source", "auto"),
    ("--clock-source", "auto", "--transport", "rpc"),
    ("--clock-source", "auto", "--detail"),
], ids=["os", "auto", "auto-rpc", "auto-detail"])
def test_recorded_timestamps_are_the_targets_own_boottime(tmp_path, target_bin, extra, engine):
    n = 40
    s, out = trace_session(tmp_path, "-f", target_bin("clock_marks"), str(n), "20000",
                           "-i", "clock_marks!work", *extra, *engine)
    marks = _marks(out.stdout)
    assert marks.shape == (n, 2)
    ev = function_events(s, "work")[0]
    assert len(ev) == 2 * n
    ts = ev["timestamp_ns"].astype(np.int64)
    calls, returns = ts[ev["event_kind"] == F.EVENT_CALL], ts[ev["event_kind"] == F.EVENT_RETURN]
    slack = 20_000  # 20 us: the conversion is calibrated to well under a microsecond
    assert np.all(calls >= marks[:, 0] - slack), (calls - marks[:, 0]).min()
    assert np.all(returns <= marks[:, 1] + slack), (marks[:, 1] - returns).min()
    assert np.all(returns >= calls)

    wanted = "tsc" if extra[1] == "auto" and _kernel_clocksource() == "tsc" else "os"
    assert s.manifest.document["clock_source"]["hot_path"] == wanted
    info = run_ada("info", s.path, check=True).stdout
    assert ("read as TSC ticks" in info) == (wanted == "tsc"), info
    if "--detail" in extra:
        t = s.threads[0]
        seqs = t.index.events["detail_seq"]
        linked = seqs != F.NO_DETAIL_SEQ
        assert np.count_nonzero(linked) == len(t.index) == len(t.detail)
        assert np.array_equal(t.detail.timestamps.astype(np.int64)[seqs[linked].astype(np.int64)],
                              t.index.events["timestamp_ns"][linked].astype(np.int64))
    assert_verify_clean(s.path)


def test_ticks_long_after_the_last_pair_convert_as_exactly_as_near_ones():
    """No pair for hours (the agent's timer starved): the fixed-point product would overflow."""
    c = TickClock(1000, 7_000, 1000 + ticks_at(20e6), 7_000 + int(20e6))
    near = np.array([1000 + ticks_at(5e8)], dtype=np.uint64)
    far = np.array([1000 + ticks_at(3.6e12), 1000 + ticks_at(3.6e12) + 5], dtype=np.uint64)
    expect = [c.ns_at(int(t)) for t in np.concatenate([near, far])]
    c.convert(near)
    c.convert(far)
    got = near.tolist() + far.tolist()
    assert all(abs(g - e) <= 1 for g, e in zip(got, expect)), (got, expect)
    assert abs(got[1] - (7_000 + 3.6e12)) < 1e4


def test_a_counter_reset_restarts_the_model_and_is_counted():
    """Suspend to RAM or a VM migration can reset the TSC: later events must still be right."""
    c = TickClock(0, 0, ticks_at(20e6), int(20e6))
    for k in range(1, 5):
        c.observe(ticks_at(k * 1e8), int(k * 1e8))
    before = np.array([ticks_at(4.5e8)], dtype=np.uint64)
    c.convert(before)
    # The counter restarts near zero while the OS clock has gone on to 10 s.
    c.observe(ticks_at(1e6), int(10e9))
    c.observe(ticks_at(1e8), int(10e9 + 99e6))
    after = np.array([ticks_at(5e7), ticks_at(1e8) + 5], dtype=np.uint64)
    c.convert(after)
    assert c.resets == 1
    assert int(after[0]) > int(before[0])
    assert abs(int(after[1]) - (10e9 + 99e6)) < 2_000
    assert abs(int(after[0]) - (10e9 + 49e6)) < 2_000


def test_unsorted_ticks_take_the_same_path_as_sorted_ones():
    """A hook inside a signal handler can write an event with an earlier tick after a later
    one: conversion must not depend on the order within a batch."""
    c = TickClock(0, 0, ticks_at(20e6), int(20e6) + 1000)
    c.observe(ticks_at(1e8), int(1e8))
    c.observe(ticks_at(2e8), int(2e8))
    ticks = np.array([ticks_at(2.5e8), ticks_at(1.5e8), ticks_at(2.2e8)], dtype=np.uint64)
    one_by_one = [c.ns_at(int(t)) for t in ticks]
    c.convert(ticks)
    assert ticks.tolist() == one_by_one


@pytest.fixture(params=["kernel", "numpy"])
def conversion(request, monkeypatch):
    """Both ways the drain converts: the C kernel (clock.c) and numpy."""
    if request.param == "numpy":
        monkeypatch.setenv("ADA_CLOCK_CONVERT", "numpy")
    else:
        monkeypatch.delenv("ADA_CLOCK_CONVERT", raising=False)
        assert clock._kernel() is not None, "the C conversion did not compile"
    return request.param


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gaps=st.lists(st.tuples(st.integers(1, 10**10), st.integers(-3_000_000, 3_000_000)),
                     min_size=1, max_size=8),
       offsets=st.lists(st.integers(-(10**10), 3 * 10**10), min_size=1, max_size=40))
def test_a_batch_in_the_ring_converts_as_each_tick_alone(conversion, gaps, offsets):
    """The drain converts the timestamps of 32-byte events in place in the ring (a strided
    view), in whichever segment each tick falls, unsorted: each must get what `ns_at` gives
    that tick alone (the oracle), and the other
    fields of the events stay as they were."""
    c = TickClock(10**9, 10**12, 10**9 + 2_500_000, 10**12 + 1_000_000)
    t, ns = 10**9 + 2_500_000, 10**12 + 1_000_000
    starts = []  # each pair starts a segment at its tick (nothing is converted yet)
    for dt, error in gaps:  # pairs: the OS clock drifting and stepping against the ticks
        t, ns = t + dt, ns + int(dt / GHZ) + error
        c.observe(t, ns)
        starts += [t - 1, t]
    ticks = [max(0, t + o) for o in offsets] + starts
    expect = [c.ns_at(x) for x in ticks]
    events = np.zeros(len(ticks), dtype=F.INDEX_EVENT)
    events["timestamp_ns"] = ticks
    events["function_id"] = np.arange(len(ticks))
    c.convert(events["timestamp_ns"])
    got = events["timestamp_ns"].tolist()
    if conversion == "kernel":  # 128-bit products: exact
        assert got == expect
    else:  # where the fixed-point product would overflow, through floats: within 1 ns
        assert all(abs(g - e) <= 1 for g, e in zip(got, expect)), (got, expect)
    assert events["function_id"].tolist() == list(range(len(ticks)))
