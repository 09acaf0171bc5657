"""Leaving a live process (tracer/record/leaving.py): after Frida's detach, ada waits for
the few milliseconds in which Frida's injector has the target under ptrace, so that a target
that exits once ada has finished does not exit inside them (it died with SIGSEGV or SIGTRAP,
or hung: 3 of 15 runs with plain Frida). Checked here on a real process that this test
traces itself, with no Frida: the wait ends with the ptrace, not before, and not much after."""

import ctypes
import os
import platform
import subprocess
import threading
import time

import pytest

from ada.tracer.record.leaving import LEAVE_CAP_S, tracer_of, wait_for_frida_to_leave

pytestmark = pytest.mark.skipif(platform.system() != "Linux", reason="procfs and ptrace: Linux")

PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT = 17, 0x4206, 0x4207
WALL = 0x40000000


def ptrace_for_a_while(pid: int, after_s: float, hold_s: float, errors: list) -> None:
    """Trace `pid` from this thread `after_s` from now, stopped, for `hold_s`, as Frida's
    injector does after its agent's thread ends."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.restype = ctypes.c_long
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    time.sleep(after_s)
    if libc.ptrace(PTRACE_SEIZE, pid, None, None) != 0:
        errors.append(f"PTRACE_SEIZE: errno {ctypes.get_errno()}")
        return
    libc.ptrace(PTRACE_INTERRUPT, pid, None, None)
    os.waitpid(pid, WALL)
    time.sleep(hold_s)
    if libc.ptrace(PTRACE_DETACH, pid, None, None) != 0:
        errors.append(f"PTRACE_DETACH: errno {ctypes.get_errno()}")


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def test_the_wait_ends_when_the_ptrace_does(sleeper):
    before = tracer_of(sleeper.pid)
    assert before == 0
    errors: list = []
    tracer = threading.Thread(target=ptrace_for_a_while, args=(sleeper.pid, 0.02, 0.1, errors))
    t0 = time.monotonic()
    tracer.start()
    wait_for_frida_to_leave(sleeper.pid, before)
    waited = time.monotonic() - t0
    tracer.join()
    assert errors == []
    assert tracer_of(sleeper.pid) == 0
    assert 0.12 <= waited < LEAVE_CAP_S, waited


def test_without_a_ptrace_the_wait_is_the_cap(sleeper):
    t0 = time.monotonic()
    wait_for_frida_to_leave(sleeper.pid, tracer_of(sleeper.pid))
    assert LEAVE_CAP_S <= time.monotonic() - t0 < LEAVE_CAP_S + 0.5


def test_a_process_gone_is_not_waited_for(sleeper):
    before = tracer_of(sleeper.pid)
    sleeper.kill()
    sleeper.wait()
    assert tracer_of(sleeper.pid) is None
    t0 = time.monotonic()
    wait_for_frida_to_leave(sleeper.pid, before)
    assert time.monotonic() - t0 < 0.05
