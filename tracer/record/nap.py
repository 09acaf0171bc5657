"""How the drain sleeps between passes (Drain.run sets the pace; this is the sleep).

A drain that polls the rings every half millisecond costs the host a tenth of a core while
the traced program rests: each wake of a sleeping thread costs 40-70 us of CPU on this VM. So
the drain naps longer and longer while its passes find nothing, and something must end the
nap when a ring starts to fill:

- `FutexNap`, on Linux over a mapping of the ring region itself: the nap is a futex wait on
  the region header's drain_asleep word, and the agent's producers wake it (ada_wake_drain in
  agent/ada_rings.c) when a ring is half full, full, when a thread waits for a slot, and at a
  trigger. The nap may then be long: LONGEST_FUTEX_S.
- `Nap(LONGEST_RPC_S)`, over the rpc transport, where the agent pushes what is new
  (agent/ada_transport.js, startPushing; it looks at its rings every 10 ms while nothing is
  new): each push ends the nap (`wake()`). The nap may then be long: LONGEST_RPC_S, and the
  first nap after a pass that found nothing is already that long. (The host pulled before
  2026-11-30, a call into the target each pass: every 25 ms at rest, then less with a wake
  message; a call that crosses a fork there lets Frida kill the child now and then,
  docs/recording.md, "Children and exec".)
- `Nap` over shared memory elsewhere (macOS): nothing wakes it but the recording's end, so it
  stays short enough for a ring not to fill unseen for long: LONGEST_S.
"""

from __future__ import annotations

import ctypes
import platform
import sys
import threading

import numpy as np

IDLE_SLEEP_S = 0.0005  # the first nap after a pass that found nothing (Drain.run)
LONGEST_S = 0.004
LONGEST_RPC_S = 2.0
LONGEST_FUTEX_S = 0.1
# A FutexNap's shorter naps are plain timed sleeps that no producer wakes: a nap this short
# lasts about as long as a ring takes to fill at the fastest (32,768 events, about 1 ms at 30 M
# events/s), and while the program runs flat out the drain's naps stay this short, so the
# producers, finding the word awake, make no FUTEX_WAKE system calls on the program's threads.
FUTEX_FROM_S = 0.002
FUTEX_WAIT, FUTEX_WAKE = 0, 1
FUTEX_SYSCALL = {"x86_64": 202, "aarch64": 98, "arm64": 98}.get(platform.machine().lower())


class Nap:
    """A timed sleep that `wake()` cuts short once (over the rpc transport, the agent's
    pushes) and `end()` for good. The drain's naps double from first_s to longest_s."""

    def __init__(self, longest_s: float = LONGEST_S, first_s: float = IDLE_SLEEP_S) -> None:
        self.longest_s = longest_s
        self.first_s = first_s
        self._ended = threading.Event()
        self._woken = threading.Event()
        self.wakes = 0  # wake() calls (the manifest's drain_wakes, with the agent's own)

    def sleep(self, seconds: float) -> None:
        if not self._ended.is_set():
            self._woken.wait(seconds)
            self._woken.clear()

    def wake(self) -> None:
        self.wakes += 1
        self._woken.set()

    def end(self) -> None:
        self._ended.set()
        self._woken.set()


_long = ctypes.c_long  # syscall(2) reads each argument as a long


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class FutexNap(Nap):
    """A sleep on the u32 word at `offset` of `buf` (a shared mapping of the ring region) that
    a producer in the target wakes: it sets the word to 1, waits while it is 1, sets it to 0."""

    def __init__(self, buf: np.ndarray, offset: int) -> None:
        super().__init__(LONGEST_FUTEX_S)
        self._word = buf[offset:offset + 4].view("<u4")
        self._address = ctypes.c_void_p(buf.ctypes.data + offset)
        self._libc = ctypes.CDLL(None, use_errno=True)

    @staticmethod
    def available() -> bool:
        """Whether this host can nap so: Linux on an architecture whose futex number we know."""
        return sys.platform.startswith("linux") and FUTEX_SYSCALL is not None

    def sleep(self, seconds: float) -> None:
        if seconds < FUTEX_FROM_S:
            super().sleep(seconds)
            return
        self._word[0] = 1
        if self._ended.is_set():  # end() came before the word said asleep: it woke no one
            self._word[0] = 0
            return
        ts = _Timespec(int(seconds), int(seconds % 1 * 1e9))
        # Returns at once (EAGAIN) if a producer already set the word back to 0.
        self._libc.syscall(_long(FUTEX_SYSCALL), self._address, _long(FUTEX_WAIT), _long(1),
                           ctypes.byref(ts), None, _long(0))
        self._word[0] = 0

    def end(self) -> None:
        super().end()
        self._word[0] = 0
        self._libc.syscall(_long(FUTEX_SYSCALL), self._address, _long(FUTEX_WAKE),
                           _long(0x7FFFFFFF), None, None, _long(0))
