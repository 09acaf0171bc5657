"""The recording pipeline's parts, without Frida: drain, detail sinks, RPC mirror, manifest.

A FakeAgent (fake_region.py) writes the agent's side of the ring region into an ordinary
buffer; the parts under test are the real ones, and what they write is read back with ada.atf
and checked against figures known by construction. The end-to-end tests (test_trace.py and the
others) run the same parts behind a real agent in real processes.
"""

import ctypes
import datetime as dt
import os
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import frida
import numpy as np
import pytest

import ada.atf as atf
from ada.atf import format as F
from ada.atf.records import walk_records
from ada.atf.writer import SessionWriter, ThreadWriter
from ada.tracer.errors import TracerError
from ada.tracer.record.answer import Answers
from ada.tracer.record import lane_io
from ada.tracer.record import rings as R
from ada.tracer.record.detail_sinks import SETTLE_SLACK_NS, AlwaysDetailSink, WindowDetailSink
from ada.tracer.record.devices import ATTACH_TRIES, attach
from ada.tracer.record.drain import Drain, Heartbeat
from ada.tracer.record.ending import (TargetEnd, describe_crash, hold_warnings, losses,
                                      side_effects, untraced_children,
                                      untraced_children_warning)
from ada.tracer.record.hooked import HookedFunctions
from ada.tracer.record.nap import FUTEX_FROM_S, FUTEX_SYSCALL, FutexNap, Nap
from ada.tracer.record.manifest import RecordingFacts, build_manifest, thread_hold
from ada.tracer.record.options import Target, TraceOptions
from ada.tracer.record.rings import (LAYOUT, SLOT_ACTIVE, SLOT_ENDED, SLOT_FREE, RegionGeometry,
                                     check_layout, clock_ns)
from ada.tracer.record.transport import ACK_GAP_S, FREED_ACK_S, PushAcks, RpcMirror
from fake_region import FakeAgent, detail_records, index_events

STACK = 32
RECORD = F.FUNCTION_RECORD_FIXED_SIZE + STACK  # 156 bytes
# Small rings, so that a few dozen events wrap them: 16 index events, 26 detail records.
GEOMETRY = RegionGeometry(max_threads=4, index_capacity=16, detail_capacity=4096)


def new_drain(tmp_path, agent, sink=None, on_trigger=None, sync=None, reader=None,
              heartbeat=None, nap=None):
    writer = SessionWriter(tmp_path, 77, arch=F.ARCH_X86_64, os_id=F.OS_LINUX,
                           clock_type=F.CLOCK_BOOTTIME)
    return Drain(reader or agent.reader, writer, sink, on_trigger, sync, heartbeat, nap), writer


def finish(drain, writer):
    drain.finish(release=lambda: None)
    writer.finalize()
    return atf.open_session(writer.path)


# --- the drain -----------------------------------------------------------------------------

def test_index_events_cross_the_ring_wrap_whole_and_in_order(tmp_path):
    agent = FakeAgent(GEOMETRY)
    slot = agent.register(501)
    drain, writer = new_drain(tmp_path, agent)
    ev = index_events(100, tid=501, first_ts=1000)
    sent = 0
    for n in (10, 16, 5, 16, 16, 16, 16, 5):  # 16: the ring is full; 100 events wrap it 6 times
        agent.emit(slot, ev[sent:sent + n])
        sent += n
        assert agent.room(slot) == 16 - n
        assert drain.drain_once() == n
        assert agent.tail(slot) == sent and agent.room(slot) == 16  # the room is handed back
    s = finish(drain, writer)
    assert np.array_equal(s.threads[0].index.events, ev)
    assert atf.verify(s.path).ok


def test_a_write_failing_past_the_ring_wrap_leaves_count_tail_and_file_agreeing(tmp_path):
    """A full disk can refuse the second half of a wrapped ring's events: the first half is in
    the file, so it is counted as written and not as left in the ring (seen in CI: `ada trace`
    said 22,454 events kept of a file holding 22,528)."""
    agent = FakeAgent(GEOMETRY)
    slot = agent.register(501)
    drain, writer = new_drain(tmp_path, agent)
    ev = index_events(20, tid=501, first_ts=1000)
    agent.emit(slot, ev[:10])
    assert drain.drain_once() == 10
    agent.emit(slot, ev[10:20])  # positions 10..15, then 0..3: two parts
    thread_writer = drain.thread_writers[0]
    real_append, calls = thread_writer.append_index, []

    def append_then_fail(part):
        calls.append(len(part))
        if len(calls) == 2:
            raise atf.WriterError("cannot write: No space left on device", tmp_path)
        real_append(part)
    thread_writer.append_index = append_then_fail
    with pytest.raises(atf.WriterError):
        drain.drain_once()
    assert calls == [6, 4]
    assert drain.stats.events == 16 == thread_writer.index_count
    assert drain.unwritten() == 4


def test_a_full_ring_makes_the_producer_wait_until_the_drain_passes(tmp_path):
    agent = FakeAgent(GEOMETRY)
    slot = agent.register(501)
    drain, writer = new_drain(tmp_path, agent)
    ev = index_events(17, tid=501, first_ts=1000)
    agent.emit(slot, ev[:16])
    with pytest.raises(AssertionError, match="would wait"):
        agent.emit(slot, ev[16:])
    drain.drain_once()
    agent.emit(slot, ev[16:])
    s = finish(drain, writer)
    assert len(s.threads[0].index) == 17



def test_the_heartbeat_goes_on_while_a_drain_write_blocks(tmp_path, monkeypatch):
    """A thread waiting for room trusts the drain for stall_s after its last beat; a write
    that blocks longer (a slow disk; /tmp over 9p in the emulated arm64 machine) must not
    make a running drain look gone, or the waiting threads count their events as dropped."""
    agent = FakeAgent(GEOMETRY)
    slot = agent.register(501)
    drain, writer = new_drain(tmp_path, agent, heartbeat=Heartbeat(agent.reader.heartbeat))
    blocked, release = threading.Event(), threading.Event()
    append_index = ThreadWriter.append_index

    def slow_append(self, events):
        blocked.set()
        release.wait(10)
        return append_index(self, events)

    monkeypatch.setattr(ThreadWriter, "append_index", slow_append)
    agent.emit(slot, index_events(4, tid=501, first_ts=1000))
    drain.start()
    try:
        assert blocked.wait(10)
        before = agent.reader.header("heartbeat_ns")
        time.sleep(0.6)
        assert agent.reader.header("heartbeat_ns") - before >= 300_000_000
    finally:
        release.set()
    s = finish(drain, writer)
    assert len(s.threads[0].index) == 4

def beats(agent, since, seconds=5.0):
    """Whether the region's heartbeat moves past `since` within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if agent.reader.header("heartbeat_ns") > since:
            return True
        time.sleep(0.05)
    return False


def test_the_heartbeat_beats_from_the_mapping_until_the_drain_ends(tmp_path):
    """A running program's threads fill their rings from their first hooked call, while the
    host still writes its first manifest: the beat starts as the region is mapped, before the
    drain (on a loaded machine that gap passed stall_s, and each thread dropped an event at
    its first full ring). It stops with the drain, so a host whose drain failed looks gone."""
    agent = FakeAgent(GEOMETRY)
    heartbeat = Heartbeat(agent.reader.heartbeat)
    assert beats(agent, agent.reader.header("heartbeat_ns"))  # no drain yet
    drain, writer = new_drain(tmp_path, agent, heartbeat=heartbeat)
    drain.start()
    drain.finish(release=lambda: None)
    time.sleep(0.3)  # a beat under way as the drain ended has landed
    assert not beats(agent, agent.reader.header("heartbeat_ns"), seconds=0.5)


def test_over_rpc_the_host_beats_by_message_until_stopped_and_past_a_gone_script():
    """With the rpc transport the beat is a message (the agent renews its heartbeat as each
    comes): a pull slower than rpc_stall_s on a slow link is not a host gone. A script
    that went away (frida.InvalidOperationError) ends nothing: the drain finds that out."""
    from ada.tracer.record.protocol import BEAT

    posted, gone = [], threading.Event()

    class Script:
        def post(self, message):
            if gone.is_set():
                raise frida.InvalidOperationError("script is destroyed")
            posted.append(message)

    heartbeat = Heartbeat(PushAcks(Script()).beat)
    time.sleep(0.55)
    assert posted and all(m == {"type": BEAT, "received": 0, "pushes": 0} for m in posted)
    assert len(posted) >= 2  # one at once, then every BEAT_S (0.1 s)
    gone.set()
    time.sleep(0.25)  # posts that fail now are swallowed, the thread goes on
    heartbeat.stop()
    time.sleep(0.2)
    count = len(posted)
    gone.clear()
    time.sleep(0.3)
    assert len(posted) == count  # stopped: no more beats


def test_threads_get_thread_n_in_slot_order_once_their_slot_is_active(tmp_path):
    agent = FakeAgent(GEOMETRY)
    a = agent.register(601)
    agent.emit(a, index_events(4, tid=601, first_ts=1000))
    b = agent.register(602, publish=False)  # claimed slot 1, not filled in yet
    drain, writer = new_drain(tmp_path, agent)
    drain.drain_once()
    assert [w.thread_id for w in drain.thread_writers] == [601]
    agent.set_slot(b, "state", SLOT_ACTIVE)
    agent.emit(b, index_events(6, tid=602, first_ts=1002))
    agent.drop(b, n=3)
    drain.drain_once()
    summary = drain.summary()
    assert [(t["id"], t["tid"], t["index_events"], t["drops"])
            for t in summary["threads"]] == [(0, 601, 4, 0), (1, 602, 6, 3)]
    assert summary["index_drops"] == 3 and summary["events"] == 10
    assert summary["time_range"] == [1000, 1002 + 5 * 100]
    s = finish(drain, writer)
    assert [(t.id, t.thread_id, len(t)) for t in s.threads] == [(0, 601, 4), (1, 602, 6)]


def test_an_ended_threads_slot_is_drained_freed_and_claimed_by_a_later_thread(tmp_path):
    agent = FakeAgent(GEOMETRY)  # 4 slots
    drain, writer = new_drain(tmp_path, agent)
    first = agent.register(700)
    agent.emit(first, index_events(5, tid=700, first_ts=1000))
    agent.end(first)
    drain.drain_once()  # drains it, sees it ended
    assert agent.reader.state(first) == SLOT_ENDED  # freed only on a later pass
    drain.drain_once()
    assert agent.reader.state(first) == SLOT_FREE and agent.reader.slot(first, "releases") == 1
    assert drain.thread_writers[0].closed  # its files are finished while recording goes on
    for tid in (701, 702, 703):  # the fresh slots first
        agent.emit(agent.register(tid), index_events(2, tid=tid, first_ts=2000 + tid))
    drain.drain_once()  # thread_N counts threads in the order the drain finds them
    again = agent.register(704)
    assert again == first and agent.reader.generation(again) == 2
    agent.emit(again, index_events(3, tid=704, first_ts=3000))
    drain.drain_once()
    summary = drain.summary()
    assert [(t["id"], t["tid"], t["slot"], t["ended"], t["index_events"])
            for t in summary["threads"]] == [(0, 700, 0, True, 5), (1, 701, 1, False, 2),
                                             (2, 702, 2, False, 2), (3, 703, 3, False, 2),
                                             (4, 704, 0, False, 3)]
    s = finish(drain, writer)
    assert [len(t) for t in s.threads] == [5, 2, 2, 2, 3]
    assert s.threads[4].index.timestamps[0] == 3000
    assert atf.verify(s.path).ok


def test_threads_one_after_another_through_two_slots_lose_nothing(tmp_path):
    geometry = RegionGeometry(max_threads=2, index_capacity=16, detail_capacity=4096)
    agent = FakeAgent(geometry)
    drain, writer = new_drain(tmp_path, agent, AlwaysDetailSink())
    for k in range(40):
        slot = agent.register(800 + k)
        n = 2 + k % 7
        agent.emit_detail(slot, detail_records(n, tid=800 + k, first_seq=0, first_ts=1000 * k,
                                               stack_bytes=STACK))
        agent.emit(slot, index_events(n, tid=800 + k, first_ts=1000 * k,
                                      detail_seqs=np.arange(n)))
        agent.end(slot)
        drain.drain_once()
        drain.drain_once()  # now drained and seen ended: freed for the next thread
    assert agent.reader.header("registered") == 2  # both slots, over and over
    s = finish(drain, writer)
    assert [(t.thread_id, len(t.index), len(t.detail)) for t in s.threads] == \
        [(800 + k, 2 + k % 7, 2 + k % 7) for k in range(40)]
    assert all(t.index.state == "clean" for t in s.threads)
    assert atf.verify(s.path).ok


def test_an_ended_thread_keeps_its_files_open_while_the_flight_recorder_holds_its_detail(
        tmp_path):
    agent = FakeAgent(GEOMETRY)
    sink = WindowDetailSink(pre_roll_ns=10 ** 9, post_roll_ns=0, cap_bytes=1 << 20)
    drain, writer = new_drain(tmp_path, agent, sink)
    slot = agent.register(900)
    now = clock_ns()
    agent.emit_detail(slot, detail_records(4, tid=900, first_seq=0, first_ts=now,
                                           stack_bytes=STACK))
    agent.emit(slot, index_events(4, tid=900, first_ts=now))
    agent.end(slot)
    drain.drain_once()
    drain.drain_once()
    assert agent.reader.state(slot) == SLOT_FREE  # the rings are free for another thread
    assert sink.holds(0) and not drain.thread_writers[0].closed  # a trigger may still want it
    sink.trigger(now + 1000, "key")  # its window covers the four records
    drain.drain_once()
    assert not sink.holds(0) and drain.thread_writers[0].closed
    s = finish(drain, writer)
    assert len(s.threads[0].detail) == 4 and atf.verify(s.path).ok


def test_raw_tick_timestamps_are_converted_before_anything_is_written(tmp_path):
    agent = FakeAgent(GEOMETRY)
    agent.clock_ticks(base=(0, 0), pair=(10 ** 9, 4 * 10 ** 8))  # 0.4 ns per tick
    slot = agent.register(501)
    drain, writer = new_drain(tmp_path, agent)
    agent.emit(slot, index_events(8, tid=501, first_ts=5000, step_ns=1000))
    drain.drain_once()
    assert drain.summary()["clock"] == {"hot_path": "tsc", "ns_per_tick": 0.4, "resets": 0}
    s = finish(drain, writer)
    assert s.threads[0].index.timestamps.tolist() == [2000 + 400 * i for i in range(8)]


# --- the drain's pace and its nap (drain.py, nap.py) --------------------------------------------

class ScriptedNap(Nap):
    """Records each nap the drain takes instead of sleeping, and runs `actions[n]` at the n-th."""

    def __init__(self, actions, **pace):
        super().__init__(**pace)
        self.naps, self.actions, self.done = [], actions, threading.Event()

    def sleep(self, seconds):
        self.naps.append(seconds)
        self.actions.get(len(self.naps), lambda: None)()
        time.sleep(0.001)


def test_the_drain_naps_longer_while_nothing_comes_and_not_after_a_pass_that_moved(tmp_path):
    agent = FakeAgent(GEOMETRY)
    slot = agent.register(501)
    nap = ScriptedNap({6: lambda: agent.emit(slot, index_events(2, tid=501, first_ts=1000)),
                       8: lambda: nap.done.set()})
    drain, _ = new_drain(tmp_path, agent, nap=nap)
    drain.start()
    assert nap.done.wait(30)
    drain.finish(release=lambda: None)
    # Doubling up to the longest nap (4 ms: Nap); the pass that took the 2 events was not
    # followed by a nap, and the next nap is the shortest again.
    assert nap.naps[:8] == [0.0005, 0.001, 0.002, 0.004, 0.004, 0.004, 0.0005, 0.001]
    assert drain.stats.events == 2


def test_over_rpc_the_first_nap_on_nothing_is_already_the_longest(tmp_path):
    """Over rpc the agent's pushes wake a napping drain, so the drain naps its longest at once
    rather than passing eight times on the way there (when each pass was a pull, a message
    into the target and its answer)."""
    agent = FakeAgent(GEOMETRY)
    slot = agent.register(501)
    nap = ScriptedNap({2: lambda: agent.emit(slot, index_events(2, tid=501, first_ts=1000)),
                       4: lambda: nap.done.set()}, longest_s=2.0, first_s=2.0)
    drain, _ = new_drain(tmp_path, agent, nap=nap)
    drain.start()
    assert nap.done.wait(30)
    drain.finish(release=lambda: None)
    assert nap.naps[:4] == [2.0, 2.0, 2.0, 2.0] and drain.stats.events == 2


def test_an_ended_threads_slot_is_freed_before_the_drain_naps(tmp_path):
    """A pass that marks an ended thread's slot, or frees it, is followed by another pass at
    once, not by a nap: over rpc the nap may last 2 s, and a thread waiting for a slot
    would wait that long (the pass after the freeing tells the agent)."""
    agent = FakeAgent(GEOMETRY)
    slot = agent.register(700)
    agent.emit(slot, index_events(5, tid=700, first_ts=1000))
    agent.end(slot)
    passes = []
    nap = ScriptedNap({1: lambda: (passes.append(len(passes)), nap.done.set())},
                      longest_s=2.0, first_s=2.0)
    drain, _ = new_drain(tmp_path, agent, nap=nap)
    one_pass = drain.drain_once

    def counted_pass():
        passes.append(agent.reader.state(slot))
        return one_pass()
    drain.drain_once = counted_pass
    drain.start()
    assert nap.done.wait(30)
    drain.finish(release=lambda: None)
    # the slot's state as each pass began: it drains and marks it, frees it, then one more
    # pass (over rpc, the pull that tells the agent) before the first nap
    assert passes[:4] == [SLOT_ENDED, SLOT_ENDED, SLOT_FREE, 3] and drain.stats.events == 5


def _wake_as_the_agent_does(buf, offset):
    """ada_wake_drain's steps (agent/ada_rings.c): the word back to 0, then FUTEX_WAKE."""
    word = buf[offset:offset + 4].view("<u4")
    if word[0] == 0:
        return False
    word[0] = 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(ctypes.c_long(FUTEX_SYSCALL), ctypes.c_void_p(buf.ctypes.data + offset),
                 ctypes.c_long(1), ctypes.c_long(1), None, None, ctypes.c_long(0))
    return True


def _napping(nap, seconds):
    thread = threading.Thread(target=nap.sleep, args=(seconds,))
    thread.start()
    return thread


@pytest.mark.skipif(not FutexNap.available(), reason="a futex nap is Linux's")
def test_a_producer_ends_the_drains_futex_nap():
    buf = np.zeros(4096, np.uint8)
    offset = R.LAYOUT["header.drain_asleep"]
    word = buf[offset:offset + 4].view("<u4")
    nap = FutexNap(buf, offset)
    thread = _napping(nap, 60.0)
    deadline = time.monotonic() + 10
    while word[0] != 1 and time.monotonic() < deadline:  # the word says asleep
        time.sleep(0.001)
    assert _wake_as_the_agent_does(buf, offset)
    thread.join(10)
    assert not thread.is_alive()  # woken, not timed out
    assert word[0] == 0 and not _wake_as_the_agent_does(buf, offset)  # awake: nothing to wake


@pytest.mark.skipif(not FutexNap.available(), reason="a futex nap is Linux's")
def test_only_the_longer_naps_ask_to_be_woken():
    """A nap under FUTEX_FROM_S (the drain's while the program runs flat out) leaves the word
    alone, so no producer makes a FUTEX_WAKE for it; a longer one says asleep, then awake."""
    buf = np.zeros(4096, np.uint8)
    offset = R.LAYOUT["header.drain_asleep"]
    word = buf[offset:offset + 4].view("<u4")
    nap = FutexNap(buf, offset)
    word[0] = 7  # neither asleep (1) nor awake (0): shows whether the nap wrote it
    nap.sleep(FUTEX_FROM_S / 2)
    assert word[0] == 7
    nap.sleep(FUTEX_FROM_S * 2)
    assert word[0] == 0


@pytest.mark.parametrize("kind", ["futex", "timed"])
def test_ending_a_nap_ends_it_and_every_later_one(kind):
    if kind == "futex" and not FutexNap.available():
        pytest.skip("a futex nap is Linux's")
    nap = FutexNap(np.zeros(4096, np.uint8), R.LAYOUT["header.drain_asleep"]) \
        if kind == "futex" else Nap()
    thread = _napping(nap, 60.0)
    time.sleep(0.05)
    nap.end()
    thread.join(10)
    assert not thread.is_alive()
    thread = _napping(nap, 60.0)
    thread.join(10)
    assert not thread.is_alive()


def test_a_wake_cuts_one_nap_short_and_is_counted():
    """The rpc drain's nap (up to 2 s) ends when a push from the agent lands: that nap only,
    not the next; the manifest counts the wakes."""
    nap = Nap(60.0)
    thread = _napping(nap, 60.0)
    time.sleep(0.05)
    nap.wake()
    thread.join(10)
    assert not thread.is_alive() and nap.wakes == 1
    started = time.monotonic()
    nap.sleep(0.2)  # not cut short by the wake before
    assert time.monotonic() - started >= 0.19


# --- detail sinks ------------------------------------------------------------------------------

def test_always_sink_holds_detail_until_its_index_events_are_written(tmp_path):
    agent = FakeAgent(GEOMETRY)
    slot = agent.register(501)
    sink = AlwaysDetailSink()
    drain, writer = new_drain(tmp_path, agent, sink)
    n = 60  # 9.4 KB of records through a 4 KiB ring: it wraps, records straddle its end
    recs = detail_records(n, tid=501, first_seq=0, first_ts=1000, stack_bytes=STACK)
    ev = index_events(n, tid=501, first_ts=1000, detail_seqs=np.arange(n))
    for lo, hi in ((0, 10), (10, 20), (20, 32), (32, 44), (44, 56), (56, 60)):
        agent.emit_detail(slot, recs[lo * RECORD:hi * RECORD])
        agent.emit(slot, ev[lo:hi - 3])  # the hot path publishes detail before its index event
        drain.drain_once()
        # The last three wait for their index events.
        assert drain.thread_writers[0].detail_count == hi - 3
        agent.emit(slot, ev[hi - 3:hi])
        drain.drain_once()
        assert drain.thread_writers[0].detail_count == hi
    assert sink.summary() == {"unlinked_at_end": 0}
    s = finish(drain, writer)
    t = s.threads[0]
    assert [t.get_detail_for(i).regs[0] for i in range(n)] == list(range(n))
    assert all(t.get_index_for(d).seq == d.index_seq for d in t.detail)
    assert atf.verify(s.path).ok


def test_always_sink_counts_detail_whose_index_event_never_came(tmp_path):
    agent = FakeAgent(GEOMETRY)
    slot = agent.register(501)
    sink = AlwaysDetailSink()
    drain, writer = new_drain(tmp_path, agent, sink)
    agent.emit_detail(slot, detail_records(5, tid=501, first_seq=0, first_ts=1000,
                                           stack_bytes=STACK))
    agent.emit(slot, index_events(3, tid=501, first_ts=1000, detail_seqs=np.arange(3)))
    s = finish(drain, writer)  # the target died between a record and its index event
    assert sink.summary() == {"unlinked_at_end": 2} and len(s.threads[0].detail) == 3
    assert atf.verify(s.path).ok


T0 = 10 ** 8  # before any real clock_ns(): the drain settles windows against the real clock
STEP = 10  # ns between records


def window_writer(tmp_path, n, sink):
    """One thread with n index events every STEP ns from T0, its detail fed to the sink."""
    w = ThreadWriter(tmp_path / "thread_0", thread_id=7, arch=F.ARCH_X86_64, os_id=F.OS_LINUX,
                     clock_type=F.CLOCK_BOOTTIME)
    w.append_index(index_events(n, tid=7, first_ts=T0, step_ns=STEP))
    return w


def feed(sink, first, n):
    recs = detail_records(n, tid=7, first_seq=first, first_ts=T0 + first * STEP, step_ns=STEP,
                          stack_bytes=STACK)
    sink.feed(0, recs, walk_records(recs, 0, len(recs)))


def linked_timestamps(writer):
    writer.finalize()
    t = atf.ThreadReader(writer.directory)
    assert atf.verify(writer.directory).ok
    return [t.index[d.index_seq].timestamp_ns - T0 for d in t.detail]


def test_window_sink_persists_exactly_the_merged_windows(tmp_path):
    sink = WindowDetailSink(pre_roll_ns=100, post_roll_ns=50, cap_bytes=1 << 20)
    w = window_writer(tmp_path, 100, sink)
    feed(sink, 0, 100)
    for at in (200, 260, 800):  # [100, 250] and [160, 310] overlap; [700, 850] stands apart
        sink.trigger(T0 + at, "function")
    sink.settle([w], now_ns=T0)
    sink.finish([w], now_ns=T0 + 1000)  # after the last record: everything is decidable
    assert [(x["start_ns"] - T0, x["end_ns"] - T0) for x in sink.summary()["windows"]] == \
        [(100, 310), (700, 850)]
    assert linked_timestamps(w) == list(range(100, 311, STEP)) + list(range(700, 851, STEP))
    summary = sink.summary()
    assert (summary["persisted"], summary["discarded"], summary["truncated_ns"]) == (38, 62, 0)


def test_a_late_trigger_finds_its_pre_roll_already_discarded(tmp_path):
    sink = WindowDetailSink(pre_roll_ns=100, post_roll_ns=50, cap_bytes=1 << 20)
    w = window_writer(tmp_path, 100, sink)
    feed(sink, 0, 100)
    # Now is so late that records before T0 + 400 can no longer be reached by a new trigger.
    sink.settle([w], now_ns=T0 + 400 + 100 + SETTLE_SLACK_NS)
    sink.trigger(T0 + 450, "key")  # wants [350, 500]; 350..390 were discarded
    sink.finish([w], now_ns=T0 + 1000)
    window = sink.summary()["windows"][0]
    assert window["truncated"] and window["truncated_ns"] == 390 - 350 + 1
    assert linked_timestamps(w) == list(range(400, 501, STEP))


def test_the_buffer_cap_evicts_the_oldest_and_says_which_window_it_cut(tmp_path):
    chunk = 10 * RECORD
    sink = WindowDetailSink(pre_roll_ns=100, post_roll_ns=50, cap_bytes=chunk)
    w = window_writer(tmp_path, 20, sink)
    feed(sink, 0, 10)
    feed(sink, 10, 10)
    sink.settle([w], now_ns=T0)  # nothing decided yet; two chunks exceed the cap of one
    sink.trigger(T0 + 120, "signal")  # wants [20, 170]; 20..90 were evicted
    sink.finish([w], now_ns=T0 + 1000)
    summary = sink.summary()
    assert summary["evicted_by_cap"] == 10 and summary["truncated_ns"] == 90 - 20 + 1
    assert linked_timestamps(w) == list(range(100, 171, STEP))


def test_triggers_reach_the_flight_recorder_through_the_drain(tmp_path):
    agent = FakeAgent(GEOMETRY)
    slot = agent.register(501)
    sink = WindowDetailSink(pre_roll_ns=25, post_roll_ns=25, cap_bytes=1 << 20)
    seen = []

    def on_trigger(ts, fid, tid):
        seen.append((ts - T0, fid, tid))
        sink.trigger(ts, "function", tid=tid)

    drain, writer = new_drain(tmp_path, agent, sink, on_trigger)
    agent.emit_detail(slot, detail_records(16, tid=501, first_seq=0, first_ts=T0, step_ns=STEP,
                                           stack_bytes=STACK))
    agent.emit(slot, index_events(16, tid=501, first_ts=T0, step_ns=STEP))
    agent.trigger(0, T0 + 100, 0xFFFFFFFF00000000, 501)
    agent.trigger(64 + 1, T0 + 150, 0xFFFFFFFF00000001, 501)  # the ring wrapped past entry 1
    drain.drain_once()
    assert seen == [(100, 0xFFFFFFFF00000000, 501)]
    assert drain.summary()["triggers_lost"] == 1
    s = finish(drain, writer)
    linked = s.threads[0].index.events["detail_seq"] != F.NO_DETAIL_SEQ
    assert (s.threads[0].index.timestamps[linked] - T0).tolist() == list(range(80, 121, STEP))


# --- the RPC transport's mirror ------------------------------------------------------------------

class PushedAgent:
    """The agent's side of the rpc transport over a FakeAgent: the host's beats reach it
    (the slots it freed are freed here, as _listenForBeats does), and `push()` is one push of
    its timer (startPushing), delivered to the mirror as Frida's message thread would."""

    def __init__(self, agent, pull=None):
        self.agent = agent
        self.posted = []
        self.exports_sync = SimpleNamespace(pull=pull or agent.pull,
                                            start_pushing=lambda budget, window, in_flight: None)
        self.mirror = None
        self.ended = -1  # ended slots at the last push

    def post(self, message):
        self.posted.append(message)
        for slot in message.get("freed", []):
            self.agent.reader.free_slot(slot)
        if message.get("freed"):
            self.ended = -1  # a slot that ends again is news

    def push(self):
        """As _pushOnce: only when a ring holds bytes not sent or the ended slots changed
        (ada_rings_to_pull); False when there was nothing to push."""
        agent, reader = self.agent, self.agent.reader
        live = [slot for slot in range(reader.registered)
                if reader.state(slot) in (SLOT_ACTIVE, SLOT_ENDED)]
        ended = sum(reader.state(slot) == SLOT_ENDED for slot in live)
        pending = any(agent.heads[slot] > agent.tail(slot) or
                      agent.detail_heads[slot] > reader.slot(slot, "detail_tail")
                      for slot in live)
        if not pending and ended == self.ended:
            return False
        self.ended = ended
        self.mirror.take_push(agent.collect(self.mirror.budget))
        return True


def mirrored_drain(tmp_path, agent, sink=None, pull=None):
    """A drain reading the RPC transport's mirror, pushed to from the agent's region."""
    script = PushedAgent(agent, pull)
    mirror = script.mirror = RpcMirror(script, GEOMETRY, Answers(), PushAcks(script))
    drain, writer = new_drain(tmp_path, agent, sink, sync=mirror.sync, reader=mirror.reader)
    return mirror, drain, writer


def drain_until_quiet(drain, mirror=None):
    """Passes until one moves nothing; with `mirror`, the agent pushes before each."""
    for _ in range(100):
        if mirror is not None:
            mirror.script.push()
        if drain.drain_once() == 0:
            return
    raise AssertionError("the drain never caught up")


def finish_mirrored(mirror, drain, writer):
    """As Pipeline.stop: the agent has stopped pushing, the drain pulls what is left."""
    mirror.stop_pushing()
    return finish(drain, writer)


def test_rpc_mirror_places_pushed_bytes_as_the_region_holds_them(tmp_path):
    """The agent's pushes (FakeAgent.collect, as ada_transport.js builds them) applied to the
    mirror give the drain what a local mapping would, rings wrapping and all, and move the
    agent's tails past what they carried (the room its producers wait for)."""
    agent = FakeAgent(GEOMETRY)
    mirror, drain, writer = mirrored_drain(tmp_path, agent, AlwaysDetailSink())
    a, b = agent.register(501), agent.register(502)
    n = 40
    ev = {tid: index_events(n, tid=tid, first_ts=1000 + tid, detail_seqs=np.arange(n))
          for tid in (501, 502)}
    recs = {tid: detail_records(n, tid=tid, first_seq=0, first_ts=1000 + tid, stack_bytes=STACK)
            for tid in (501, 502)}
    for lo, hi in ((0, 12), (12, 24), (24, 36), (36, 40)):
        for slot, tid in ((a, 501), (b, 502)):
            agent.emit_detail(slot, recs[tid][lo * RECORD:hi * RECORD])
            agent.emit(slot, ev[tid][lo:hi])
        drain_until_quiet(drain, mirror)
        assert agent.tail(a) == agent.tail(b) == hi
    assert mirror.pulls == 0  # while the program runs, no call into it
    s = finish_mirrored(mirror, drain, writer)
    for t, tid in zip(s.threads, (501, 502)):
        assert np.array_equal(t.index.events, ev[tid])
        assert t.detail.raw_events.tobytes() == recs[tid].tobytes()
    assert mirror.summary()["bytes"] == 2 * n * (32 + RECORD)
    assert atf.verify(s.path).ok


def test_rpc_mirror_frees_a_slot_in_the_agent_only_once_everything_is_pushed(tmp_path):
    """The drain frees an ended thread's slot once it has drained it all, and tells the agent
    with a beat as it goes idle (the heartbeat rests then): the slot is free for a new thread
    with no call into the target."""
    agent = FakeAgent(GEOMETRY)
    mirror, drain, writer = mirrored_drain(tmp_path, agent)
    mirror.budget = 4 * 32  # four events a push
    slot = agent.register(501)
    agent.emit(slot, index_events(10, tid=501, first_ts=1000))
    agent.end(slot)
    mirror.script.push()
    drain.drain_once()
    assert mirror.reader.state(slot) == SLOT_ACTIVE  # ended, but 6 events are still in the agent
    assert agent.reader.state(slot) == SLOT_ENDED
    drain_until_quiet(drain, mirror)
    assert agent.reader.state(slot) == SLOT_FREE and agent.reader.slot(slot, "releases") == 1
    assert [m.get("freed") for m in mirror.script.posted] == [[slot]]
    again = agent.register(502)
    agent.emit(again, index_events(3, tid=502, first_ts=5000))
    drain_until_quiet(drain, mirror)
    s = finish_mirrored(mirror, drain, writer)
    assert [(t.thread_id, len(t)) for t in s.threads] == [(501, 10), (502, 3)]


def test_a_stale_rpc_copy_does_not_bring_a_freed_thread_back(tmp_path):
    """The agent's last buffer (sent as the target exits) can be older than the host's latest
    view: a slot the drain already drained and freed must not be read again from it."""
    agent = FakeAgent(GEOMETRY)
    mirror, drain, writer = mirrored_drain(tmp_path, agent)
    slot = agent.register(501)
    agent.emit(slot, index_events(6, tid=501, first_ts=1000))
    agent.end(slot)
    stale = agent.collect(1 << 20)  # what a push carried, before the host frees the slot
    mirror.take_push(stale)
    drain_until_quiet(drain, mirror)
    assert agent.reader.state(slot) == SLOT_FREE
    mirror.queue_final(stale)
    drain_until_quiet(drain)
    s = finish_mirrored(mirror, drain, writer)
    assert [(t.thread_id, len(t)) for t in s.threads] == [(501, 6)]


def test_rpc_pushes_within_their_budget_lose_nothing(tmp_path):
    agent = FakeAgent(GEOMETRY)
    mirror, drain, writer = mirrored_drain(tmp_path, agent)
    mirror.budget = 3 * 32  # three index events a push (the default is a detail ring + 1 MiB)
    slot = agent.register(501)
    ev = index_events(30, tid=501, first_ts=1000)
    for lo in range(0, 30, 15):
        agent.emit(slot, ev[lo:lo + 15])
        drain_until_quiet(drain, mirror)
    assert mirror.pushes >= 10
    s = finish_mirrored(mirror, drain, writer)
    assert np.array_equal(s.threads[0].index.events, ev)


def test_the_host_pulls_only_as_the_recording_stops(tmp_path):
    """While the program runs the host never calls into the agent (a call crossing a fork
    lets Frida kill the child): the drain applies what is pushed. Once the agent has stopped
    pushing, the drain pulls what is left, in the budget's pieces, until nothing is."""
    agent = FakeAgent(GEOMETRY)
    calls = []

    def pull(budget, freed=()):
        calls.append(budget)
        return agent.pull(budget, freed)

    mirror, drain, writer = mirrored_drain(tmp_path, agent, pull=pull)
    mirror.budget = 4 * 32
    slot = agent.register(501)
    ev = index_events(14, tid=501, first_ts=1000)
    agent.emit(slot, ev[:6])
    mirror.script.push()
    for _ in range(5):
        drain.drain_once()
    agent.emit(slot, ev[6:])  # written, never pushed
    assert drain.drain_once() == 0 and calls == []
    s = finish_mirrored(mirror, drain, writer)
    assert calls[:2] == [4 * 32] * 2  # 4 + 4 events, then passes that find nothing
    assert np.array_equal(s.threads[0].index.events, ev)


def test_the_drain_acknowledges_only_what_the_agent_needs_to_hear(tmp_path):
    """Each message into the target is a chance of Frida's fork fault, so the drain tells the
    agent what it received only when the agent needs it: as buffers come, once half its
    window is unacknowledged in bytes or in pushes (it goes on pushing the other half); as
    the drain finds nothing new and may nap long, once a quarter is; a freed slot at once
    when idle, else FREED_ACK_S after the last message; never two within ACK_GAP_S."""
    posted = []
    acks = PushAcks(SimpleNamespace(post=posted.append), window=1000, in_flight=8)
    acks.took(499)
    acks.ack_if_owed()
    acks.took(1)  # a quarter was owed: not enough as buffers come
    time.sleep(ACK_GAP_S)
    acks.ack_if_owed()
    assert posted == [{"type": "ada:beat", "received": 500, "pushes": 2}]
    acks.took(250)
    acks.ack_if_owed()
    assert len(posted) == 1
    acks.ack_if_owed(idle=True)  # a quarter, idle: told, once the gap has passed
    assert posted[-1] == {"type": "ada:beat", "received": 750, "pushes": 3}
    for _ in range(4):
        acks.took(0)  # half the pushes in flight, whatever their bytes
    acks.ack_if_owed()  # within ACK_GAP_S of the last: the next buffer or nap tells it
    assert len(posted) == 2
    time.sleep(ACK_GAP_S)
    acks.ack_if_owed()
    assert len(posted) == 3 and posted[-1]["pushes"] == 7
    acks.freed(5)
    acks.ack_if_owed()  # a slot alone waits FREED_ACK_S as buffers come
    assert len(posted) == 3
    time.sleep(ACK_GAP_S)
    acks.ack_if_owed(idle=True)
    assert posted[-1] == {"type": "ada:beat", "received": 750, "pushes": 7, "freed": [5]}
    acks.freed(6)
    time.sleep(FREED_ACK_S)
    acks.ack_if_owed()
    assert posted[-1]["freed"] == [6] and acks.beats == len(posted) == 5
    acks.ack_if_owed(idle=True)
    assert len(posted) == 5  # nothing owed since


def test_rpc_mirror_applies_the_agents_final_push_without_pulling(tmp_path):
    agent = FakeAgent(GEOMETRY)
    refused = SimpleNamespace(exports_sync=SimpleNamespace(pull=None), post=lambda m: None)
    mirror = RpcMirror(refused, GEOMETRY, Answers(), PushAcks(refused))
    slot = agent.register(501)
    agent.emit(slot, index_events(9, tid=501, first_ts=1000))
    mirror.queue_final(agent.collect(1 << 20))  # sent by the agent as the target exits
    mirror.stop_pushing()  # the recording stops: a pull now would fail (pull is None)
    drain, writer = new_drain(tmp_path, agent, sync=mirror.sync, reader=mirror.reader)
    assert drain.drain_once() > 0
    assert drain.drain_once() == 0
    assert len(drain.thread_writers) == 1 and drain.thread_writers[0].index_count == 9


# --- the manifest --------------------------------------------------------------------------------

FUNCTIONS = [  # as the agent's resolve() reports them
    {"functionId": "0x0000000000000000", "moduleId": 0, "symbolIndex": 0, "name": "main",
     "address": "0x1000", "module": "demo", "modulePath": "/bin/demo", "moduleFile": "/bin/demo",
     "moduleNames": ["demo", "/bin/demo"], "moduleBase": "0x1000", "moduleSize": 4096,
     "addedNs": "500"},
    {"functionId": "0x0000000100000000", "moduleId": 1, "symbolIndex": 0, "name": "open",
     "address": "0x7f0010", "module": "libc.so.6", "modulePath": "/lib/libc.so.6",
     "moduleFile": "/lib/libc.so.6", "moduleNames": ["libc.so.6", "/lib/libc.so.6"],
     "moduleBase": "0x7f0000", "moduleSize": 65536, "addedNs": "700"},
]


def facts(options, **changes):
    start = dt.datetime(2026, 11, 22, 10, 0, 0)
    base = dict(options=options, target=Target("file", ["/bin/demo", "x"]), pid=77, spawned=True,
                device={"id": "local", "name": "Local System", "type": "local"},
                agent={"platform": "linux", "mainModule": {"name": "demo", "path": "/bin/demo"},
                       "toolchain": "external", "toolchainFallback": None, "region": "memfd"},
                arch=F.ARCH_X86_64, os_id=F.OS_LINUX, clock_type=F.CLOCK_BOOTTIME,
                transport="shm", frida_version="17.0.0",
                hooked={"functions": FUNCTIONS, "failures": [], "unloaded": []},
                never_matched=[], started_at=start, ended_at=start + dt.timedelta(seconds=2.5), clean=True,
                end_reason="target-exited")
    base.update(changes)
    return RecordingFacts(**base)


def test_manifest_describes_the_session_from_facts_and_summaries(tmp_path):
    agent = FakeAgent(GEOMETRY)
    a, b = agent.register(601), agent.register(602)
    sink = AlwaysDetailSink()
    drain, writer = new_drain(tmp_path, agent, sink)
    agent.emit_detail(a, detail_records(4, tid=601, first_seq=0, first_ts=1000,
                                        stack_bytes=STACK))
    agent.emit(a, index_events(4, tid=601, first_ts=1000, detail_seqs=np.arange(4)))
    agent.emit(b, index_events(6, tid=602, first_ts=900))
    agent.drop(b, n=2)
    drain.finish(release=lambda: None)
    writer.finalize()
    options = TraceOptions(selection=[{"op": "include", "kind": "function", "module": "demo",
                                       "pattern": "main", "offset": None}], detail="always")
    m = build_manifest(facts(options), drain.summary(), sink.summary(), None)
    assert m["process"] == {"pid": 77, "name": "demo", "path": "/bin/demo", "arch": "x86_64",
                            "os": "linux", "platform": "linux", "spawned": True,
                            "argv": ["/bin/demo", "x"], "parent_pid": None, "origin": None,
                            "children": [], "children_untraced": None}
    assert m["session"]["duration_s"] == 2.5 and m["transport"] == {"kind": "shm", "region": "memfd"}
    assert m["time_range"] == [900, 1400]
    assert [(t["id"], t["tid"], t["index_events"], t["detail_events"], t["has_detail"],
             t["drops"]) for t in m["threads"]] == [(0, 601, 4, 4, True, 0),
                                                    (1, 602, 6, 0, False, 2)]
    assert m["drops"] == {"policy": "wait", "index": 2, "waits": 0, "wait_ms": 0.0,
                          "overflow_threads": 0, "overflow_events": 0, "max_threads": 1024,
                          "unbacked_threads": 0, "unwritten_events": 0, "skipped_events": 0}
    assert [(x["module_id"], x["name"], x["added_ns"]) for x in m["modules"]] == [
        (0, "demo", 500), (1, "libc.so.6", 700)]
    assert [(x["function_id"], x["name"], x["added_ns"]) for x in m["symbols"]] == [
        ("0x0000000000000000", "main", 500), ("0x0000000100000000", "open", 700)]
    assert m["never_matched"] == [] and m["hook_failures"] == []
    assert m["detail"] == {"mode": "always", "stack_bytes": 128, "ring_bytes": 4 << 20,
                           "io": "auto", "captured_bytes": 4 * RECORD, "dropped": 0,
                           "unlinked_at_end": 0}
    assert m["clock_source"] == {"hot_path": "os"} and m["triggers"] == m["windows"] == []
    assert m["end"] == {"clean": True, "reason": "target-exited", "crash": None,
                        "exit_status": None, "undelivered_events": 0,
                        "undelivered_detail_bytes": 0}
    writer.write_manifest(m)
    s = atf.open_session(writer.path)
    assert s.symbol_names() == {0: "main", 1 << 32: "open"}
    assert atf.verify(s.path).ok


def test_manifest_of_the_flight_recorder_and_the_rpc_transport():
    options = TraceOptions(selection=[], detail="window", pre_roll_ms=5, post_roll_ms=2)
    sink = WindowDetailSink(5_000_000, 2_000_000, 1 << 20)
    sink.trigger(T0, "time", at_ms=1.0)
    sink.settle([], now_ns=T0)
    drain = {"events": 0, "threads": [], "time_range": None, "index_drops": 0, "waits": 0,
             "wait_ms": 0.0, "overflow_threads": 1, "overflow_events": 5, "detail_bytes": 0,
             "detail_drops": 0, "triggers_coalesced": 3, "triggers_lost": 0,
             "clock": {"hot_path": "os"}}
    rpc = {"pulls": 9, "bytes": 100, "mb_per_s": 0.01, "last_error": None}
    m = build_manifest(facts(options, transport="rpc", clean=False, end_reason="target-crashed",
                             crash={"signal": "SIGSEGV"}, undelivered=None, parent_pid=70,
                             origin="fork",
                             children=[{"pid": 80, "origin": "fork", "followed": False}]),
                       drain, sink.summary(), rpc)
    assert (m["process"]["parent_pid"], m["process"]["origin"]) == (70, "fork")
    assert m["process"]["children"] == [{"pid": 80, "origin": "fork", "followed": False}]
    assert m["triggers"] == [{"kind": "time", "timestamp_ns": T0, "at_ms": 1.0}]
    assert m["windows"] == [{"start_ns": T0 - 5_000_000, "end_ns": T0 + 2_000_000,
                             "truncated": False, "truncated_ns": 0}]
    assert {k: m["detail"][k] for k in ("mode", "pre_roll_ms", "post_roll_ms", "persisted",
                                        "triggers_coalesced")} == {
        "mode": "window", "pre_roll_ms": 5, "post_roll_ms": 2, "persisted": 0,
        "triggers_coalesced": 3}
    assert m["transport"] == {"kind": "rpc", **rpc, "fork_gate": None}  # children not held
    assert m["drops"]["overflow_threads"] == 1 and m["drops"]["overflow_events"] == 5
    assert m["end"] == {"clean": False, "reason": "target-crashed", "crash": {"signal": "SIGSEGV"},
                        "exit_status": None, "undelivered_events": None,
                        "undelivered_detail_bytes": None}


# --- the layout check and the lane io policy (--detail-io, --index-io) ---------------------------

def test_layout_check_names_every_field_that_differs():
    check_layout({**LAYOUT, "agent.sizeof_state": 123456})  # agent-private entries: not shared
    wrong = {**LAYOUT, "slot.tail": 136}
    del wrong["header.stop"]
    wrong["header.new_field"] = 200
    with pytest.raises(TracerError) as e:
        check_layout(wrong)
    message = str(e.value)
    for text in ("slot.tail: agent 136, host 128", "header.stop: agent lacks it, host 44",
                 "header.new_field: agent 200, host lacks it"):
        assert text in message


def test_lane_io_policies():
    assert lane_io.go_direct_policy("cached") is None
    assert lane_io.go_direct_policy("direct")(0) is True
    assert lane_io.go_direct_policy("auto") is lane_io.worth_going_direct
    with pytest.raises(ValueError):
        lane_io.go_direct_policy("sometimes")


def test_auto_goes_direct_only_for_big_lanes_under_pressure(monkeypatch):
    monkeypatch.setattr(lane_io, "dirty_pressure", lambda: True)
    assert not lane_io.worth_going_direct(0)
    assert lane_io.worth_going_direct(lane_io.MIN_DIRECT_LANE)
    monkeypatch.setattr(lane_io, "dirty_pressure", lambda: False)
    assert not lane_io.worth_going_direct(lane_io.MIN_DIRECT_LANE)


@pytest.mark.parametrize("dirty, expected", [(100, False), (600, True), (900, True)])
def test_dirty_pressure_is_the_kernels_background_threshold(tmp_path, dirty, expected):
    vmstat = tmp_path / "vmstat"
    vmstat.write_text(f"nr_free_pages 5\nnr_dirty {dirty - 50}\nnr_writeback 50\n"
                      "nr_dirty_threshold 1200\nnr_dirty_background_threshold 600\n")
    assert lane_io.dirty_pressure(vmstat) is expected


def test_dirty_pressure_without_vmstat_is_no_pressure(tmp_path):
    assert lane_io.dirty_pressure(tmp_path / "missing") is False
    (tmp_path / "partial").write_text("nr_dirty 5\n")
    assert lane_io.dirty_pressure(tmp_path / "partial") is False


# --- the tests' own oracle -------------------------------------------------------------------

def test_assert_balanced_catches_what_it_claims_to():
    from helpers import assert_balanced, index_events as events

    C, R = F.EVENT_CALL, F.EVENT_RETURN
    assert_balanced(events([(C, 0, 1), (C, 1, 2), (R, 1, 2), (C, 1, 3), (R, 1, 3), (R, 0, 1)]))
    for wrong in ([(C, 0, 1), (C, 0, 2), (R, 0, 2), (R, 0, 1)],  # depths that do not nest
                  [(C, 0, 1), (C, 1, 2), (R, 1, 1), (R, 0, 2)],  # returns swapped
                  [(C, 0, 1), (C, 1, 2), (R, 1, 2)],  # left open
                  [(R, 0, 1), (C, 0, 1)]):  # a RETURN first
        with pytest.raises(AssertionError):
            assert_balanced(events(wrong))
    backwards = events([(C, 0, 1), (R, 0, 1)])
    backwards["timestamp_ns"] = [5, 4]
    with pytest.raises(AssertionError, match="backwards"):
        assert_balanced(backwards)


# --- how the target ended, and what was lost (ending.py) -------------------------------------

def test_the_heads_handed_over_at_the_end_count_what_never_arrived(tmp_path):
    agent = FakeAgent(GEOMETRY)
    done, live, unseen = agent.register(501), agent.register(502), agent.register(503)
    drain, writer = new_drain(tmp_path, agent)
    agent.emit(done, index_events(10, tid=501, first_ts=1000))
    agent.emit(live, index_events(10, tid=502, first_ts=1000))
    agent.end(done)
    for _ in range(3):  # drained, then freed on a later pass
        drain.drain_once()
    assert agent.reader.state(done) == SLOT_FREE
    agent.emit(live, index_events(5, tid=502, first_ts=2000))  # never drained: the target died first
    heads = [[done, 1, "10", "0"], [live, 1, "15", "0"], [unseen, 1, "7", "0"]]
    assert drain.shortfall(heads) == (5 + 7, 0)
    end = TargetEnd()
    end.on_final({"heads": heads, "crash": None, "exitStatus": 3})
    assert (end.exit_status, end.on_detached("process-terminated", None)) == (3, "target-exited")
    assert end.undelivered(drain.shortfall, True, "target-exited") == (12, 0)
    drain.finish(release=lambda: None)
    writer.finalize()


def test_the_end_reason_follows_the_agent_s_last_words():
    end = TargetEnd()
    assert end.on_detached("process-terminated", None) == "target-killed"  # no word at all
    assert end.undelivered(lambda heads: (0, 0), True, "target-killed") is None  # rpc: unknown
    assert end.undelivered(lambda heads: (0, 0), False, "target-killed") == (0, 0)  # shm
    # a live target whose rpc link was lost (gone, or it did not answer): unknown as well
    assert end.undelivered(lambda heads: (0, 0), True, "duration", link_lost=True) is None
    assert end.undelivered(lambda heads: (0, 0), True, "duration") == (0, 0)
    assert end.undelivered(lambda heads: (0, 0), False, "duration", link_lost=True) == (0, 0)
    assert end.on_detached("process-replaced", None) == "exec"
    # Frida not holding the process at its exec reports it like a kill; ada's execve hook knew
    assert end.on_detached("process-terminated", None, exec_pending=True) == "exec"
    assert end.on_detached("connection-terminated", None) == "detached: connection-terminated"
    crash = {"signal": "SIGSEGV", "type": "access-violation", "address": "0x1234",
             "threadId": 77, "memoryOperation": "write", "memoryAddress": "0x0"}
    end.on_final({"heads": [], "crash": crash, "exitStatus": None})
    assert end.on_detached("process-terminated", None) == "target-crashed"
    assert describe_crash(crash) == "SIGSEGV at 0x1234 (write of 0x0) in thread 77"


def test_losses_count_every_kind_and_an_unknown_count_is_a_loss():
    summary = {"index_drops": 1, "overflow_events": 2, "detail_drops": 3, "unwritten_events": 4,
               "skipped_events": 7, "unbacked_threads": 0, "unwound_calls": 0,
               "terminate": None}
    lost, said = losses(summary, (5, 6))
    assert lost == 28 and len(said) == 3 and "7 event(s) of hooked calls" in said[2]
    clean = dict(summary, index_drops=0, overflow_events=0, detail_drops=0, unwritten_events=0,
                 skipped_events=0)
    assert losses(clean, (0, 0)) == (0, [])
    assert losses(clean, None)[0] == 1
    # threads of the program taken for Frida's as it prepared the exit: unknown calls, a loss
    end = TargetEnd()
    end.on_final({"heads": [], "crash": None, "exitStatus": 0, "unrecordedThreads": 2})
    lost, said = losses(clean, (0, 0), end.unrecorded_threads())
    assert lost == 2 and said[0].startswith("2 thread(s) of the program started while Frida")
    end.on_final({"heads": [], "crash": None, "exitStatus": 0})  # an older agent's handover
    assert end.unrecorded_threads() == 0
    effects = side_effects(dict(clean, unbacked_threads=2, unwound_calls=9, terminate={
        "thread_id": 5, "open_calls": 2, "function_id": 7}), {7: "m!f"}.get)
    assert len(effects) == 3 and "the innermost m!f" in effects[2] and "-x 'm!f'" in effects[2]


def test_children_forked_but_never_announced_are_counted_from_the_agents_fork_count():
    fork = [{"pid": p, "origin": "fork", "followed": True} for p in (11, 12)]
    execd = [{"pid": 10, "origin": "exec", "followed": True}]
    end = TargetEnd()
    assert end.forks() == (None, [])  # nothing said: not counted
    assert untraced_children(*end.forks(), fork) is None
    end.on_final({"heads": [], "crash": None, "exitStatus": 0, "children": [13], "forks": 5})
    # at a handover, children still held were waited for: those not announced are untraced
    assert end.forks() == (5, [])
    assert untraced_children(*end.forks(), fork + execd) == 3
    said = untraced_children_warning(3, 5)
    assert len(said) == 1 and said[0].startswith("3 of the 5 children this process forked")
    assert untraced_children_warning(0, 5) == untraced_children_warning(None, None) == []
    # ada stopped a process that goes on: a child still held then may be announced after
    stopped = TargetEnd()
    stopped.on_stopped({"hold": None, "forks": 4, "children": [12, 13]})
    assert stopped.forks() == (4, [12, 13])
    assert untraced_children(*stopped.forks(), fork) == 1  # 11, 12 announced; 13 held
    assert untraced_children(3, [], fork + fork) == 1  # a pid announced twice counts once
    assert untraced_children(1, [], fork) == 0  # announced without a count (before it began)


def test_functions_the_inline_engine_left_to_the_interceptor_are_said_once_and_kept():
    said = []
    hooked = HookedFunctions([], [], said.append)
    fallbacks = [{"name": f"f{i}", "module": "m", "address": hex(i), "reason": "too short"}
                 for i in range(7)]
    hooked.add([], [], [], [], fallbacks)
    assert len(said) == 1 and said[0].startswith("7 function(s) hooked by Frida's Interceptor "
                                                 "instead of inline: f0 (too short), f1")
    assert "and 2 more (listed in the manifest)" in said[0]
    assert hooked.snapshot()["fallbacks"] == fallbacks
    hooked.add([], [], [], [], [])
    assert len(said) == 1


def test_functions_whose_jumps_frida_wrote_late_are_said_and_kept_for_the_manifest():
    """The agent's `late` (ada_await_written gave up after 1 s): calls until then are missing,
    uncounted, so the user is told which functions, and the manifest keeps them."""
    said = []
    hooked = HookedFunctions([], [], said.append)
    late = [{"name": "plug_work", "module": "libplug.so", "address": "0x1000"}]
    hooked.add([], [], [], [], late=late, writes_awaited=3)
    assert len(said) == 1 and said[0].startswith("1 function(s) hooked, but Frida wrote their "
                                                 "jumps more than 1 s late")
    assert "not recorded, and not counted: plug_work" in said[0]
    snapshot = hooked.snapshot()
    assert snapshot["late"] == late and snapshot["writes_awaited"] == 3


def test_side_effects_speak_of_the_engine_in_use():
    summary = {"unbacked_threads": 0, "unwound_calls": 5, "terminate": {
        "thread_id": 5, "open_calls": 2, "function_id": 7}}
    frida = side_effects(summary, {7: "m!f"}.get, "frida")
    assert "Frida keeps about 2.4 KB" in frida[0] and "--hook-engine inline" in frida[1]
    inline = side_effects(summary, {7: "m!f"}.get, "inline")
    assert len(inline) == 1 and "none caught this one" in inline[0]


def test_the_agent_and_the_host_name_the_same_messages_each_once():
    """agent/ada_messages.js and tracer/record/protocol.py declare the protocol; no other agent
    file spells a message name, so a rename cannot miss one side."""
    import re

    from ada.tracer.record import protocol
    from ada.tracer.record.agent_code import AGENT_SCRIPTS

    agent = Path(__file__).resolve().parents[1] / "agent"
    declared = re.search(r"const MESSAGES = Object\.freeze\(\{(.*?)\}\)",
                         (agent / "ada_messages.js").read_text(), re.S)
    assert declared is not None
    names = re.findall(r"'(ada:[a-z-]+)'", declared.group(1))
    assert sorted(names) == sorted(protocol.FROM_AGENT + protocol.TO_AGENT)
    assert AGENT_SCRIPTS[0] == "ada_messages.js"  # first, so every other file can use MESSAGES
    for name in AGENT_SCRIPTS[1:]:
        spelled = re.findall(r"['\"]ada:[a-z-]+['\"]", (agent / name).read_text())
        assert not spelled, f"{name} spells {spelled}: use MESSAGES"


def test_the_children_forked_read_from_the_region_keep_order_and_count_the_rest():
    """ada_on_fork's side of the region: the first FORK_SLOTS pids in order, the rest only
    counted (a fork still in flight, its pid not written yet, reads 0 and is left out)."""
    agent = FakeAgent(GEOMETRY)
    assert agent.reader.forked() == ([], 0)
    pids = np.arange(1000, 1000 + R.FORK_SLOTS, dtype="<u4")
    pids[7] = 0
    agent.buf[R.FORKS_OFFSET:R.FORKS_OFFSET + 4 * R.FORK_SLOTS] = pids.view(np.uint8)
    agent.set_header("forks", R.FORK_SLOTS + 44)
    kept, forks = agent.reader.forked()
    assert forks == R.FORK_SLOTS + 44
    assert kept == [int(p) for p in pids if p] and len(kept) == R.FORK_SLOTS - 1
    agent.set_header("forks", 3)
    assert agent.reader.forked() == ([1000, 1001, 1002], 3)
    assert R.FORKS_OFFSET >= R.TRIGGERS_OFFSET + R.TRIGGER_SLOTS * R.TRIGGER_ENTRY.itemsize
    assert R.FORKS_OFFSET + 4 * R.FORK_SLOTS <= R.SLOTS_OFFSET


class SlowAgentDevice:
    """A device whose agent misses Frida's 5 s answer `misses` times, then attaches; or,
    with `then`, raises that error (the process died meanwhile, as Frida's next try says)."""
    type = "local"

    def __init__(self, misses: int, then: Exception | None = None) -> None:
        self.misses, self.calls, self.then = misses, 0, then

    def attach(self, pid):
        self.calls += 1
        if self.calls <= self.misses:
            raise frida.ProcessNotRespondingError(
                "unexpectedly timed out trying to sync up with agent")
        if self.then is not None:
            raise self.then
        return ("session", pid)


def test_an_agent_that_did_not_answer_in_time_is_attached_again_while_the_process_lives():
    said = []
    device = SlowAgentDevice(misses=ATTACH_TRIES - 1)
    assert attach(device, os.getpid(), said.append) == ("session", os.getpid())
    assert device.calls == ATTACH_TRIES and len(said) == ATTACH_TRIES - 1
    assert "did not answer in time" in said[0] and f"2 of {ATTACH_TRIES}" in said[0]
    with pytest.raises(frida.ProcessNotRespondingError):  # every try missed
        attach(SlowAgentDevice(misses=ATTACH_TRIES), os.getpid())
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: no such process any more
    device = SlowAgentDevice(misses=1)
    with pytest.raises(frida.ProcessNotRespondingError):
        attach(device, gone.pid)
    assert device.calls == 1  # a process that is gone is not attached again


def test_a_process_that_died_after_a_missed_answer_is_explained_by_the_miss(monkeypatch):
    """The arm64 guest: Frida's agent missed its 5 s, Frida unmapped its loader under the
    loader thread, the program died, and the next try said only "unable to find process".
    The miss is what the user is told; an error with the process alive is not replaced."""
    alive = iter([True, False])  # alive after the miss, dead after the second try
    monkeypatch.setattr("ada.tracer.record.devices.target_alive", lambda d, p: next(alive))
    died = SlowAgentDevice(misses=1, then=frida.ProcessNotFoundError("unable to find process"))
    with pytest.raises(frida.ProcessNotRespondingError, match="sync up with agent"):
        attach(died, 12345)
    assert died.calls == 2
    monkeypatch.setattr("ada.tracer.record.devices.target_alive", lambda d, p: True)
    refused = SlowAgentDevice(misses=1, then=frida.PermissionDeniedError("denied"))
    with pytest.raises(frida.PermissionDeniedError):
        attach(refused, 12345)


def test_every_shortfall_of_the_thread_hold_is_in_the_manifest_and_warned_of():
    """The agent's ThreadHold.stats as the manifest words them, and one warning for each
    kind of shortfall (none for a clean hold)."""
    clean = {"holds": 3, "asks": 3, "notHeld": 0, "wentOn": 0, "inside": 0, "ms": 2,
             "leftInside": 0, "cutShort": 0}
    assert hold_warnings(clean) == []
    assert thread_hold(clean) == {"holds": 3, "asks": 3, "threads_not_held": 0,
                                  "threads_went_on": 0, "written_around": 0, "ms": 2,
                                  "left_inside": 0, "system_calls_cut_short": 0}
    short = dict(clean, notHeld=1, wentOn=2, inside=3, cutShort=4, leftInside=5)
    warned = hold_warnings(short)
    assert len(warned) == 5
    assert [w.split()[0] for w in warned] == ["1", "2", "3", "4", "5"]
    assert "EINTR" in warned[3]
    assert "signal handler" in warned[4] and "freed" in warned[4]
    assert thread_hold(short)["left_inside"] == 5
    assert thread_hold(short)["system_calls_cut_short"] == 4
    assert thread_hold(None) is None and hold_warnings(None) == []
