"""Raw CPU ticks to recording-clock nanoseconds, for agents that time events with the TSC.

On x86_64 Linux whose kernel clocksource is the TSC, the hot path stores raw
rdtsc values (one instruction instead of a clock_gettime call; see
agent/ada_platform.c). The agent publishes (ticks, ns) pairs of the TSC and
CLOCK_BOOTTIME; the drain converts every timestamp with them before anything
is written, so files, triggers and windows only ever see CLOCK_BOOTTIME ns.

The conversion is a continuous, non-decreasing piecewise-linear function of
ticks. Every new pair starts a segment at a tick no event has been converted
past yet, so an event's ns depends only on its ticks, never on when it was
drained: threads drained in different passes stay mutually ordered. Each
segment's slope steers the model back onto the OS clock within SLEW_NS (the
way NTP slews), and a model more than STEP_NS behind is stepped forward (a
suspend adds to CLOCK_BOOTTIME); it never steps back. A counter that goes
backwards (reset by a suspend to RAM or a VM migration) restarts the model;
`resets` counts it, and the recording warns.

The drain converts every event: by a C kernel (clock.c, one pass over the ring) where one
could be compiled, else with numpy (ADA_CLOCK_CONVERT=numpy asks for numpy).
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import os
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from .. import native

SLEW_NS = 200_000_000
STEP_NS = 1_000_000
MAX_SEGMENTS = 4096  # 7 minutes of pairs: older ticks than that are only in a huge RPC backlog
RATE_BASELINE_PAIRS = 10
SHIFT = 32
HALF = 1 << (SHIFT - 1)


class TickClock:
    def __init__(self, base_ticks: int, base_ns: int, ticks: int, ns: int) -> None:
        if ticks <= base_ticks or ns <= base_ns:
            raise ValueError(f"clock calibration pairs are not increasing: ({base_ticks}, "
                             f"{base_ns}) then ({ticks}, {ns})")
        rate = (ns - base_ns) / (ticks - base_ticks)
        # Segment i covers ticks [starts[i], starts[i + 1]): ns = ns[i] + (t - starts[i]) * mults[i]
        # >> SHIFT. Fixed point keeps the drain's conversion to in-place integer operations.
        self._starts = [base_ticks]
        self._ns = [base_ns]
        self._mults = [_fixed(rate)]
        self._pairs: deque[tuple[int, int]] = deque([(base_ticks, base_ns), (ticks, ns)],
                                                    maxlen=RATE_BASELINE_PAIRS)
        self._measured = rate  # the OS clock's ns per tick, from the recent pairs
        self._converted_to = base_ticks  # the newest tick converted so far
        self._segments: tuple[np.ndarray, ...] | None = None  # the three lists as arrays
        self._segment_addresses: tuple[int, int, int] = (0, 0, 0)  # theirs, for the kernel
        # Looked up once: the drain converts thousands of batches a second, and reading the
        # environment and three arrays' addresses each time cost about 8 us a batch.
        self._kernel = _kernel()
        self.resets = 0  # times the counter went backwards

    @property
    def ns_per_tick(self) -> float:
        """The OS clock's rate against the counter, as measured from the recent pairs."""
        return self._measured

    def summary(self) -> dict[str, Any]:
        """How the hot path read time, for the manifest's clock_source."""
        return {"hot_path": "tsc", "ns_per_tick": self.ns_per_tick, "resets": self.resets}

    def ns_at(self, ticks: int) -> int:
        i = max(0, bisect.bisect_right(self._starts, ticks) - 1)
        return self._ns[i] + (((ticks - self._starts[i]) * self._mults[i] + HALF) >> SHIFT)

    def observe(self, ticks: int, ns: int) -> None:
        """A new pair from the agent: start a segment that heads for it."""
        last_ticks, last_ns = self._pairs[-1]
        if ns <= last_ns:
            return  # the same pair again
        if ticks < last_ticks:
            self._restart(ticks, ns)
            return
        if ticks == last_ticks:
            return
        predicted = last_ns + (ticks - last_ticks) * self._measured
        if abs(ns - predicted) > STEP_NS:
            self._pairs.clear()  # the OS clock jumped: measure its rate afresh from here
        self._pairs.append((ticks, ns))
        if len(self._pairs) > 1:
            first_ticks, first_ns = self._pairs[0]
            self._measured = (ns - first_ns) / (ticks - first_ticks)
        measured = self._measured
        start = max(ticks, self._converted_to + 1)
        model = self.ns_at(start)
        truth = ns + round((start - ticks) * measured)
        if truth - model > STEP_NS:
            model = truth  # forward only: the sequence stays non-decreasing
        horizon = SLEW_NS / measured
        rate = (truth + SLEW_NS - model) / horizon
        rate = min(max(rate, measured * 0.5), measured * 2.0)
        self._starts.append(start)
        self._ns.append(model)
        self._mults.append(_fixed(rate))
        if len(self._starts) > MAX_SEGMENTS:
            del self._starts[0], self._ns[0], self._mults[0]
        self._segments = None

    def _restart(self, ticks: int, ns: int) -> None:
        """The counter went backwards (a reset: suspend to RAM, a VM migrated): start over.

        Events still in the rings from before the reset cannot be told apart by their ticks
        and come out wrong; `resets` counts these, so the recording can say so.
        """
        self.resets += 1
        self._pairs.clear()
        self._pairs.append((ticks, ns))
        self._starts, self._ns, self._mults = [ticks], [ns], [_fixed(self._measured)]
        self._segments = None
        self._converted_to = ticks

    def convert(self, ts: np.ndarray) -> None:
        """Rewrite a uint64 array (or strided view) of ticks, in place, as ns."""
        if not len(ts):
            return
        kernel = self._kernel
        if kernel is not None and ts.dtype == np.uint64 and ts.ndim == 1 and ts.flags.writeable:
            if self._segments is None:
                self._segments = tuple(np.array(v, dtype=np.int64)
                                       for v in (self._starts, self._ns, self._mults))
                self._segment_addresses = tuple(a.ctypes.data for a in self._segments)
            starts, ns, mults = self._segment_addresses
            hi = kernel.ada_convert_ticks(ts.ctypes.data, ts.strides[0], len(ts),
                                          starts, ns, mults, len(self._segments[0]))
        else:
            hi = self._convert_numpy(ts)
        self._converted_to = max(self._converted_to, hi)

    def _convert_numpy(self, ts: np.ndarray) -> int:
        """convert() without the kernel; returns the largest tick."""
        d = ts.astype(np.int64)
        lo, hi = int(d.min()), int(d.max())
        if lo >= self._starts[-1]:  # the usual case: all in the newest segment
            d -= self._starts[-1]
            _scale(d, self._mults[-1], hi - self._starts[-1])
            d += self._ns[-1]
        else:
            i = np.maximum(np.searchsorted(self._starts, d, "right") - 1, 0)
            d -= np.asarray(self._starts, dtype=np.int64)[i]
            _scale(d, np.asarray(self._mults, dtype=np.int64)[i],
                   max(abs(int(d.min())), abs(int(d.max()))))
            d += np.asarray(self._ns, dtype=np.int64)[i]
        ts[:] = d
        return hi


KERNEL_SOURCE = Path(__file__).with_name("clock.c")


def prepare_conversion() -> None:
    """Load the C conversion (compiling it, the first time on a machine) before it is needed."""
    _kernel()


def _kernel() -> Any:
    """The C conversion (tracer/native.py), unless ADA_CLOCK_CONVERT=numpy says not to, or it
    cannot be had."""
    if os.environ.get("ADA_CLOCK_CONVERT") == "numpy":
        return None
    lib = native.load(KERNEL_SOURCE)
    return None if lib is None else _declared(lib)


@functools.lru_cache(maxsize=None)
def _declared(lib: Any) -> Any:
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.ada_convert_ticks.argtypes = [p, i64, i64, p, p, p, i64]
    lib.ada_convert_ticks.restype = ctypes.c_uint64
    return lib


def _fixed(rate: float) -> int:
    return max(1, round(rate * (1 << SHIFT)))


def _scale(d: np.ndarray, mult: int | np.ndarray, top: int) -> None:
    """d = round(d * mult / 2**SHIFT) in place (top: the largest |d|); through floats where
    d * mult would overflow."""
    if top < ((1 << 62) - HALF) // int(np.max(mult)):
        d *= mult
        d += HALF
        d >>= SHIFT
    else:  # ticks far from their segment (no pair for seconds): float, within a ns
        d[:] = np.floor(d * (np.asarray(mult, dtype=np.float64) / (1 << SHIFT)) + 0.5)
