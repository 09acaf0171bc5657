"""tracer/record/answer.py: calls into a target that may never answer, bounded from the
recording's end (no Frida: the calls here are Python functions that wait; the stopped
process is a real one. The real case, Frida's calls into a stopped target, is
tests/test_trace.py's test_a_target_stopped_as_the_recording_ends_does_not_hold_ada)."""

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from ada.tracer.record.answer import Answers, NoAnswer, not_running
from ada.tracer.record.dying import PF_SIGNALED
from test_dying import as_thread_of, fake_proc


@pytest.fixture
def stopped():
    """A real process, stopped by SIGSTOP (state T); its pid."""
    proc = subprocess.Popen(["sleep", "60"])
    try:
        proc.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while not_running(proc.pid) is None:
            assert time.monotonic() < deadline, "sleep did not stop"
            time.sleep(0.01)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_why_a_process_does_not_run(stopped, tmp_path):
    assert "state T" in not_running(stopped)
    with subprocess.Popen(["sleep", "60"]) as running:
        assert not_running(running.pid) is None
        running.kill()
    assert not_running(running.pid) is None  # gone
    assert not_running(None) is None  # not local
    held = fake_proc(tmp_path / "a", 10, 7, {10: ("t", PF_SIGNALED)})
    assert not_running(10, held).startswith("a fatal signal struck it and its tracer holds it")
    traced = fake_proc(tmp_path / "b", 10, 7, {10: ("t", 0)})
    assert not_running(10, traced).startswith("its tracer holds it stopped (state t)")
    # Frida's injector, in this very process, holds it a moment: it runs again soon
    own = as_thread_of(fake_proc(tmp_path / "c", 10, 7, {10: ("t", 0)}), 7, os.getpid())
    assert not_running(10, own) is None
    own_dying = as_thread_of(fake_proc(tmp_path / "d", 10, 7, {10: ("t", PF_SIGNALED)}), 7,
                             os.getpid())
    assert "Frida, in ada itself" in not_running(10, own_dying)  # the thirteenth arm64 run


def never() -> None:
    threading.Event().wait()


def test_an_answer_or_its_error_comes_back():
    answers = Answers(answer_s=0.2)
    answers.ending.set()
    assert answers.ask("ping", lambda: 42) == 42
    with pytest.raises(KeyError):
        answers.ask("fail", lambda: {}["x"])
    assert answers.unanswered is None


def test_before_the_end_a_slow_answer_is_waited_for():
    answers = Answers(answer_s=0.1, not_running_s=0.1)
    assert answers.ask("slow", lambda: time.sleep(0.5) or "late") == "late"


def test_at_the_end_a_silent_target_is_given_up_and_not_asked_again():
    answers = Answers(answer_s=0.3)
    answers.ending.set()
    started = time.monotonic()
    with pytest.raises(NoAnswer, match=r"no answer to ada's call \(stop\) in 0.3 s"):
        answers.ask("stop", never)
    assert 0.3 <= time.monotonic() - started < 5
    asked = []
    with pytest.raises(NoAnswer, match=r"\(stop\)"):  # at once, and not made
        answers.ask("detach", lambda: asked.append(1))
    time.sleep(0.1)
    assert asked == []


def test_a_stopped_target_is_given_up_sooner_and_named(stopped):
    answers = Answers(stopped, answer_s=60, not_running_s=0.2)
    answers.ending.set()
    started = time.monotonic()
    with pytest.raises(NoAnswer, match=r"\(anchor\): it is stopped .*state T"):
        answers.ask("anchor", never)
    assert time.monotonic() - started < 30


def frida_holds(root: Path) -> Path:
    """A laid-out /proc: pid 10 in a tracing stop, its tracer thread 7 in this very process."""
    return as_thread_of(fake_proc(root, 10, 7, {10: ("t", 0)}), 7, os.getpid())


def test_a_target_frida_holds_for_good_is_given_up_after_its_own_bound(tmp_path):
    """Frida's ptrace in ada held a forking parent that faulted inside Frida's agent, for good
    (the arm64 guest): a moment's hold is Frida's injector at work, a long one is given up."""
    answers = Answers(10, answer_s=60, not_running_s=0.1, frida_held_s=0.5,
                      proc=frida_holds(tmp_path))
    answers.ending.set()
    started = time.monotonic()
    with pytest.raises(NoAnswer, match=r"\(stop\): Frida's ptrace, in ada, has held it in a "
                                       r"tracing stop for \d+ s"):
        answers.ask("stop", never)
    assert 0.5 <= time.monotonic() - started < 30


def test_a_moments_hold_by_frida_is_not_a_stop(tmp_path):
    answers = Answers(10, answer_s=0.5, not_running_s=0.1, frida_held_s=60,
                      proc=frida_holds(tmp_path))
    answers.ending.set()
    with pytest.raises(NoAnswer, match=r"^no answer to ada's call \(stop\) in 0.5 s$"):
        answers.ask("stop", never)


def test_a_call_waiting_as_the_recording_ends_is_bounded_from_then():
    """The rpc transport's pull, made while the target ran, waits on as it stops."""
    answers = Answers(answer_s=0.2)
    failed: list[str] = []

    def pull() -> None:
        try:
            answers.ask("pull", never)
        except NoAnswer as e:
            failed.append(str(e))

    puller = threading.Thread(target=pull)
    puller.start()
    time.sleep(0.5)  # longer than the bound: not counted before the end
    assert failed == [] and puller.is_alive()
    answers.ending.set()
    puller.join(10)
    assert failed == ["no answer to ada's call (pull) in 0.2 s"]
