"""Raw CPU ticks to recording-clock nanoseconds, for agents that time events with the TSC.

On x86_64 Linux whose kernel clocksource is the TSC, the hot path stores raw
rdtsc values (one instruction instead of a clock_gettime call; see
agent/ada_hooks.c). The agent publishes (ticks, ns) pairs of the TSC and
CLOCK_BOOTTIME; the drain converts every timestamp with them before anything
is written, so files, triggers and windows only ever see CLOCK_BOOTTIME ns.

The conversion is a continuous, non-decreasing piecewise-linear function of
ticks. Every new pair starts a segment at a tick no event has been converted
past yet, so an event's ns depends only on its ticks, never on when it was
drained: threads drained in different passes stay mutually ordered. Each
segment's slope steers the model back onto the OS clock within SLEW_NS (the
way NTP slews), and a model more than STEP_NS behind is stepped forward (a
suspend adds to CLOCK_BOOTTIME); it never steps back.
"""

from __future__ import annotations

from collections import deque

import numpy as np

SLEW_NS = 200_000_000
STEP_NS = 1_000_000
MAX_SEGMENTS = 256
RATE_BASELINE_PAIRS = 10


class TickClock:
    def __init__(self, base_ticks: int, base_ns: int, ticks: int, ns: int) -> None:
        if ticks <= base_ticks or ns <= base_ns:
            raise ValueError(f"clock calibration pairs are not increasing: ({base_ticks}, "
                             f"{base_ns}) then ({ticks}, {ns})")
        rate = (ns - base_ns) / (ticks - base_ticks)
        self._starts = [base_ticks]  # segment i covers ticks [starts[i], starts[i + 1])
        self._ns = [base_ns]
        self._rates = [rate]
        self._pairs: deque[tuple[int, int]] = deque([(base_ticks, base_ns), (ticks, ns)],
                                                    maxlen=RATE_BASELINE_PAIRS)
        self._measured = rate  # the OS clock's ns per tick, from the recent pairs
        self._converted_to = base_ticks  # the newest tick converted so far

    @property
    def ns_per_tick(self) -> float:
        return self._rates[-1]

    def ns_at(self, ticks: int) -> int:
        i = max(0, int(np.searchsorted(self._starts, ticks, "right")) - 1)
        return self._ns[i] + round((ticks - self._starts[i]) * self._rates[i])

    def observe(self, ticks: int, ns: int) -> None:
        """A new pair from the agent: start a segment that heads for it."""
        last_ticks, last_ns = self._pairs[-1]
        if ticks <= last_ticks or ns <= last_ns:
            return  # the same pair again (or a torn read that went backwards)
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
        self._rates.append(rate)
        if len(self._starts) > MAX_SEGMENTS:
            del self._starts[0], self._ns[0], self._rates[0]

    def convert(self, ts: np.ndarray) -> None:
        """Rewrite a uint64 array (or strided view) of ticks, in place, as ns."""
        if not len(ts):
            return
        ticks = ts.astype(np.int64)
        first, last = int(ticks[0]), int(ticks[-1])
        if first >= self._starts[-1]:  # the usual case: all in the newest segment
            ns = np.rint((ticks - self._starts[-1]) * self._rates[-1]).astype(np.int64)
            ns += self._ns[-1]
        else:
            i = np.maximum(np.searchsorted(self._starts, ticks, "right") - 1, 0)
            starts = np.asarray(self._starts, dtype=np.int64)[i]
            rates = np.asarray(self._rates)[i]
            ns = np.rint((ticks - starts) * rates).astype(np.int64)
            ns += np.asarray(self._ns, dtype=np.int64)[i]
        ts[:] = ns
        self._converted_to = max(self._converted_to, first, last)
