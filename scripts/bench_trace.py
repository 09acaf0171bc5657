#!/usr/bin/env python3
"""Recording benchmark: the call rate of a small hooked function, measured in one run.

Run: .venv/bin/python scripts/bench_trace.py [--calls N] [--long-calls N] [--engines-only]
[--attach-only] [--breakpoint-only] [--parts-only] [--depth-only] [--long-only] [--rest-only]
First, what attaching costs per function with each engine (1, 100 and 2,000 functions hooked in
a program that exits at once). Then the hook engines side by side, one and two threads:
uninstrumented; uftrace recording a -pg build of the same source (found on PATH, or installed
with apt-get when run as root; said when it cannot be); Frida's empty CModule hook; ada trace
with --hook-engine frida and with the default engine (auto, which must take small() inline:
the run fails otherwise); and the default's ratio to uftrace (issue 26: the target 1.9x, the
goal 2.5x; zero events lost), each round beside what writing a new file through the page
cache cost just before it (page_cache_write_ns: on the development VM the drain's pace). Then what a breakpoint hook (the
inline engine's last resort, for functions no jump fits) costs a call, and (--depth-only) what
a hooked call costs the returns above it, (--parts-only) where an inline hooked call's
time goes, part by part, (--rest-only) what ada costs the host while the program
rests, and (--long-only) the long run with index.atf through
the page cache against the default --index-io policy. Then, for one thread calling small() in
a loop (the target times its own loop):
  uninstrumented rate; the rate under an empty CModule onEnter/onLeave hook (the floor Frida
  sets); the rate under `ada trace` (index lane) with events lost; a long run (>= 30 s) to show
  the drain keeps up; the 2-thread rate; and the detail lane: `--detail` (interleaved rounds
  with their own empty-hook runs, and how long the target waited for the drain) and a
  flight-recorder window, as ratios of the empty hook, with the detail bytes/s written; the
  index lane with --clock-source os next to the default, for comparison; and the RPC transport's
  sustained events/s and MB/s on the local device and through a real remote device on loopback
  (a frida.PortalService the target joins). Targets: index lane >= 0.75x the empty hook, zero
  events lost over >= 20 M calls, the drain keeping up for >= 30 s; --detail >= 0.5x the empty
  hook with zero index events lost; RPC zero events lost in the default mode.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import frida

import ada.atf as atf

ROOT = Path(__file__).resolve().parents[1]

# The hook engines of this machine: the inline engine has stubs for x86_64 and arm64.
ENGINES = ("frida", "inline") if platform.machine() in ("x86_64", "aarch64") else ("frida",)

EMPTY_HOOK = """
const cm = new CModule(`
#include <gum/guminterceptor.h>
void onEnter (GumInvocationContext * ic) { }
void onLeave (GumInvocationContext * ic) { }
`);
Interceptor.attach(Process.mainModule.getExportByName('small'), cm);
"""


def build(tmp: Path, *flags: str, name: str = "bench_target") -> Path:
    exe = tmp / name
    subprocess.run(["gcc", "-O2", *flags, "-rdynamic", "-pthread", "-o", str(exe),
                    str(ROOT / "scripts" / "bench_target.c")], check=True)
    return exe


def find_uftrace() -> tuple[str | None, str]:
    """uftrace's path (installed from Debian's package if missing and we may), and what was
    done to get it."""
    found = shutil.which("uftrace")
    if found:
        return found, "found on PATH"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None, "not installed, and apt-get needs root here: apt-get install uftrace"
    for step in (["apt-get", "install", "-y", "-q", "uftrace"], ["apt-get", "update", "-q"],
                 ["apt-get", "install", "-y", "-q", "uftrace"]):
        subprocess.run(step, capture_output=True, env=dict(os.environ,
                                                           DEBIAN_FRONTEND="noninteractive"))
        if shutil.which("uftrace"):
            return shutil.which("uftrace"), "installed now with apt-get (Debian's package)"
    return None, "apt-get install uftrace failed (no package repository reachable?)"


def uftrace(tool: str, exe_pg: Path, calls: int, threads: int, tmp: Path) -> tuple[float, int]:
    """The -pg build's own rate under `uftrace record`, and the records uftrace wrote for
    small() (from `uftrace report`: its call count)."""
    data = tmp / "uftrace.data"
    settle_page_cache()
    out = subprocess.run([tool, "record", "--no-libcall", "-d", str(data), str(exe_pg),
                          str(calls), str(threads)], capture_output=True, text=True)
    rate = parse_rate(out.stdout)[0]
    report = subprocess.run([tool, "report", "-d", str(data), "-f", "call", "-F", "small"],
                            capture_output=True, text=True).stdout
    m = re.search(r"^\s*(\d+)\s+small\s*$", report, re.MULTILINE)
    shutil.rmtree(data, ignore_errors=True)
    return rate, int(m.group(1)) if m else -1


def compare_engines(exe: Path, calls: int, tmp: Path, rounds: int) -> None:
    """The hook engines next to uninstrumented, uftrace and Frida's floor, in one run: rounds
    interleaved (each sees the same machine state), medians compared. Both tracers write
    every event to disk (ada 32 bytes per event, uftrace 16): on this VM the page cache's
    first touch of fresh memory swings single runs by up to 2x."""
    tool, how = find_uftrace()
    exe_pg = build(tmp, "-pg", name="bench_target_pg") if tool else None
    print(f"hook engines, {calls:,} calls of small() per run, {rounds} interleaved rounds "
          f"(uftrace: {how})")

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    # x86_64: the inline stubs as they were before the hot path kept xmm0-15 itself (they
    # saved all 16 each call), to show what leaving that out gains
    # "inline" runs the default engine (auto), which must take small() inline: the target is
    # the default's figure
    variants = [(engine, () if engine == "inline" else ("--hook-engine", engine), None)
                for engine in ENGINES]
    if "inline" in ENGINES and platform.machine() == "x86_64":
        variants.append(("inline+xmm", ("--hook-engine", "inline"),
                         {"ADA_INLINE_VECTORS": "save"}))
    for threads in (1, 2):
        per = calls // threads
        rates: dict[str, list[float]] = {}
        lost: dict[str, int] = {}
        waited: dict[str, list[float]] = {}  # ms the target waited for the drain (full rings)
        print(f"  {threads} thread(s):")
        probes: list[float] = []  # each round's page-cache write cost (page_cache_write_ns)
        for k in range(rounds):
            probes.append(page_cache_write_ns(tmp))
            row = {"uninstrumented": uninstrumented(exe, per, threads)}
            if tool:
                row["uftrace"], records = uftrace(tool, exe_pg, per, threads, tmp)
                if records != per * threads:
                    print(f"    (uftrace recorded {records:,} calls of small() of "
                          f"{per * threads:,})")
            row["empty hook"] = empty_hook(exe, per, threads)
            for name, flags, env in variants:
                r = ada(exe, per, tmp / "t", threads=threads, extra=flags, env=env)
                if not flags and r.engine != "inline":
                    raise SystemExit(f"the default engine took small() with {r.engine} "
                                     f"({r.engine_why}), not inline: no figure for the target")
                row[f"ada {name}"] = r.rate
                lost[name] = lost.get(name, 0) + r.lost
                waited.setdefault(name, []).append(r.wait_ms)
            for name, rate in row.items():
                rates.setdefault(name, []).append(rate)
            print(f"    round {k + 1}: " + ", ".join(f"{name} {rate / 1e6:.2f}"
                                                    for name, rate in row.items()) + " M calls/s"
                  + f"; ada {ENGINES[-1]} waited {waited[ENGINES[-1]][-1]:,.0f} ms for the drain"
                  + f"; the page cache took {probes[-1]:.1f} ns per 32 bytes written")
        for name, values in rates.items():
            m = median(values)
            note = f"; events lost {lost[name[4:]]:,} of {2 * calls * rounds:,}" \
                if name.startswith("ada ") else ""
            print(f"    {name:<15} median {m / 1e6:7.2f} M calls/s "
                  f"({1e9 / m * threads:5.0f} ns per call per thread){note}")
        print("    (waits: the drain, writing 32 bytes an event through the page cache, fell "
              "behind; the target's rate includes them)")
        floor = median(rates["empty hook"])
        for engine in ENGINES:
            rate = median(rates[f"ada {engine}"])
            print(f"    ada {engine} / Frida's empty hook: {rate / floor:.2f}x"
                  + (f"; ada {engine} / uftrace: {rate / median(rates['uftrace']):.2f}x"
                     + round_ratios(rates[f"ada {engine}"], rates["uftrace"])
                     if tool else ""))
        if "inline" in ENGINES:
            inline = median(rates["ada inline"])
            print(f"    ada inline / ada frida: {inline / median(rates['ada frida']):.2f}x")
            if tool:
                each = sorted(a / b for a, b in zip(rates["ada inline"], rates["uftrace"]))
                mid = each[len(each) // 2]
                print(f"    the default engine (auto: inline) / uftrace, the median of the rounds "
                      f"{mid:.2f}x: the target 1.9x {'met' if mid >= 1.9 else 'NOT met'}, the "
                      f"goal 2.5x {'met' if mid >= 2.5 else 'not met'}; rounds under 1.9x: "
                      f"{sum(r < 1.9 for r in each)} of {len(each)}")
                ratios = [a / b for a, b in zip(rates["ada inline"], rates["uftrace"])]
                print("    page-cache write cost (ns per 32 bytes) and the round's ratio: "
                      + ", ".join(f"{p:.1f} ns {r:.2f}x" for p, r in zip(probes, ratios)))
        if "ada inline+xmm" in rates:
            saved = median(rates["ada inline+xmm"])
            print(f"    ada inline / ada inline+xmm (stubs saving xmm0-15): {inline / saved:.2f}x "
                  f"({1e9 / saved * threads - 1e9 / inline * threads:.1f} ns a call per thread)")


def round_ratios(ours: list[float], theirs: list[float]) -> str:
    """Each round's own ratio and their median: the ratio of the medians above can take its
    two sides from different rounds, and a target met only that way is not met reliably."""
    each = [a / b for a, b in zip(ours, theirs)]
    return (f" (rounds: {', '.join(f'{r:.2f}x' for r in each)}; their median "
            f"{sorted(each)[len(each) // 2]:.2f}x)")


def parse_rate(text: str) -> tuple[float, float]:
    m = re.search(r"BENCH calls=(\d+) threads=\d+ seconds=([\d.]+) rate=([\d.]+)", text)
    if not m:
        raise RuntimeError(f"no BENCH line in output:\n{text[-2000:]}")
    return float(m.group(3)), float(m.group(2))


PROBE_BYTES = 256 << 20
PROBE_WRITE = 112 << 10  # about what the drain writes at a time, keeping up


def page_cache_write_ns(tmp: Path) -> float:
    """What writing a new file through the page cache costs now, in ns per 32 bytes (ada's
    index event): 256 MiB in 112 KiB writes, the file then removed. On the development VM
    this swings from about 9 to over 50 between hours, and with it the drain, which
    writes 32 bytes an event this way; printed beside each round to tell the machine's state
    from ada's."""
    settle_page_cache()
    path = tmp / "page-cache-probe"
    chunk = b"\xa5" * PROBE_WRITE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(PROBE_BYTES // PROBE_WRITE):
            os.write(fd, chunk)
        seconds = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink()
    return seconds / (PROBE_BYTES // PROBE_WRITE * PROBE_WRITE) * 32 * 1e9


def settle_page_cache() -> None:
    """Start every run with no writeback pending from the previous one (it skews rates)."""
    os.sync()
    time.sleep(1.0)


def uninstrumented(exe: Path, calls: int, threads: int = 1,
                   env: dict[str, str] | None = None) -> float:
    out = subprocess.run([str(exe), str(calls), str(threads)], capture_output=True, text=True,
                         check=True, env={**os.environ, **(env or {})})
    return parse_rate(out.stdout)[0]


def empty_hook(exe: Path, calls: int, threads: int = 1) -> float:
    device = frida.get_local_device()
    lines: list[str] = []
    device.on("output", lambda pid, fd, data: lines.append(data.decode()))
    pid = device.spawn([str(exe), str(calls), str(threads)], stdio="pipe")
    session = device.attach(pid)
    done = []
    session.on("detached", lambda *a: done.append(1))
    script = session.create_script(EMPTY_HOOK)
    script.load()
    device.resume(pid)
    while not done:
        time.sleep(0.05)
    time.sleep(0.1)
    return parse_rate("".join(lines))[0]


@dataclass
class AdaRun:
    rate: float  # calls/s the target saw
    expected: int  # index events
    recorded: int
    seconds: float
    detail_events: int
    detail_bytes: int
    wait_ms: float  # the target's waits for room in full rings (manifest)
    waits: int = 0  # how many such waits
    drain_wakes: int = 0  # how often the target woke ada's napping drain
    engine: str = ""  # what hooked small(): inline, frida, or inline through a breakpoint
    engine_why: str = ""

    @property
    def lost(self) -> int:
        return self.expected - self.recorded


def ada(exe: Path, calls: int, out_dir: Path, threads: int = 1, extra: tuple = (),
        env: dict[str, str] | None = None) -> AdaRun:
    """One `ada trace` of the benchmark target, measured by the target itself. The hot path
    is built by gcc or the run fails: `auto` would fall back to TinyCC quietly (-q), and a
    probe build that gcc refused (-Werror) measured TinyCC's code (2026-11-29)."""
    settle_page_cache()
    proc = subprocess.run([sys.executable, "-m", "ada", "trace", "-q", "-o", str(out_dir),
                           "-f", str(exe), str(calls), str(threads), "-i", "bench_target!small",
                           "--cmodule-toolchain", "external", *extra],
                          capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    rate, seconds = parse_rate(proc.stdout)
    session = atf.open_session(proc.stdout.strip().splitlines()[-1])
    details = [t.detail for t in session.threads if t.detail is not None]
    run = AdaRun(rate, 2 * calls * threads, session.event_count(), seconds,
                 sum(len(d) for d in details),
                 sum(int(d.events_end - d.events_offset) for d in details),
                 float(session.manifest.drops["wait_ms"]), int(session.manifest.drops["waits"]),
                 int(session.manifest.document.get("drain_wakes", 0)),
                 *engine_of_small(session.manifest.document))
    shutil.rmtree(session.path.parent)
    return run


def engine_of_small(manifest: dict) -> tuple[str, str]:
    """What hooked small() in a recording, from its manifest, and why."""
    why = manifest.get("hook_engine_why", "")
    for key, engine in (("hook_fallbacks", "frida"), ("hook_breakpoints", "breakpoint")):
        for f in manifest.get(key) or ():
            if f.get("name") == "small":
                return engine, f.get("reason", why)
    return manifest.get("hook_engine", "?"), why


def rpc_remote(exe: Path, calls: int, out_dir: Path) -> AdaRun:
    """The benchmark target joined to a PortalService on loopback, traced with -H."""
    import socket

    def port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    cluster, control = port(), port()
    service = frida.PortalService(frida.EndpointParameters(address="127.0.0.1", port=cluster),
                                  frida.EndpointParameters(address="127.0.0.1", port=control))
    service.start()
    gate, exit_gate = out_dir.parent / "gate", out_dir.parent / "exit-gate"
    target = subprocess.Popen([str(exe), str(calls), "1", str(gate), str(exit_gate)],
                              stdout=subprocess.PIPE, text=True)
    try:
        # Attach once the target runs main(): injecting into a process still starting up can
        # abort it (glibc's allocate_stack assertion).
        if not target.stdout.readline().startswith("waiting for"):
            raise RuntimeError("the benchmark target did not reach its gate")
        joiner = frida.get_local_device().attach(target.pid)
        joiner.join_portal(f"127.0.0.1:{cluster}")
        settle_page_cache()
        ada_proc = subprocess.Popen([sys.executable, "-m", "ada", "trace", "-o", str(out_dir),
                                     "-H", f"127.0.0.1:{control}", "-p", str(target.pid),
                                     "-i", "bench_target!small"], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, cwd=ROOT)
        for line in ada_proc.stderr:
            if "recording" in line:
                break
        gate.touch()
        line = ""
        while "BENCH" not in line:  # the injected agent may print its own lines first
            line = target.stdout.readline()
            if not line:
                raise RuntimeError("the benchmark target ended without its BENCH line")
        rate, seconds = parse_rate(line)
        # Like a live app, the target stays until its events are in (the exit flush is best
        # effort through a relay, see docs/platforms.md); give up waiting after 120 s.
        want = 64 + 2 * calls * 32
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            files = list(out_dir.glob("session_*/pid_*/thread_0/index.atf"))
            if files and files[0].stat().st_size >= want:
                break
            time.sleep(0.1)
        exit_gate.touch()
        target.wait(timeout=60)
        stdout, stderr = ada_proc.communicate(timeout=600)
        if ada_proc.returncode != 0:
            raise RuntimeError(stderr)
    finally:
        if target.poll() is None:
            target.kill()
        service.stop()
    session = atf.open_session(stdout.strip().splitlines()[-1])
    run = AdaRun(rate, 2 * calls, session.event_count(), seconds, 0, 0,
                 float(session.manifest.drops["wait_ms"]))
    run.transport = session.manifest["transport"]  # type: ignore[attr-defined]
    shutil.rmtree(session.path.parent)
    return run


def compare_breakpoint(exe: Path, calls: int, tmp: Path, rounds: int) -> None:
    """What the inline engine's last resort costs a call: small() hooked through an int3
    (ADA_INLINE_HOOK=breakpoint: a SIGTRAP and its handler each call) next to the jump and
    Frida's Interceptor, one thread, rounds interleaved, medians compared."""
    if "inline" not in ENGINES or platform.machine() != "x86_64":
        print("breakpoint hooks: x86_64 only")
        return
    print(f"breakpoint hooks, {calls:,} calls of small() per run, {rounds} interleaved rounds")
    rates: dict[str, list[float]] = {}
    lost = 0
    for _ in range(rounds):
        for name, engine, env in (("inline, jump", "inline", None),
                                  ("inline, breakpoint", "inline",
                                   {"ADA_INLINE_HOOK": "breakpoint"}),
                                  ("frida", "frida", None)):
            r = ada(exe, calls, tmp / "t", extra=("--hook-engine", engine), env=env)
            rates.setdefault(name, []).append(r.rate)
            lost += r.lost
    med = {name: sorted(v)[len(v) // 2] for name, v in rates.items()}
    for name, rate in med.items():
        print(f"  ada {name:<19}: median {rate / 1e6:6.2f} M calls/s ({1e9 / rate:6.0f} ns a call)")
    extra_ns = 1e9 / med["inline, breakpoint"] - 1e9 / med["inline, jump"]
    print(f"  a breakpoint hook costs {extra_ns / 1e3:.2f} us a call more than the jump; "
          f"{med['frida'] / med['inline, breakpoint']:.1f}x the Interceptor's cost; "
          f"events lost {lost:,}")


DEPTHS = (0, 8)


def compare_depth(exe: Path, calls: int, tmp: Path, rounds: int) -> None:
    """What a hooked call costs the returns above it: small() called from the loop itself, and
    from 8 unhooked frames down (BENCH_DEPTH), each engine, rounds interleaved, medians. Both
    engines point a hooked call's return at their own code; how that code goes back to the
    caller decides whether the CPU's return predictor still predicts the 8 returns above it.
    The figure is a hooked call's extra cost at depth 8 over depth 0, less the frames' own."""
    print(f"returns above a hooked call: {calls:,} calls of small() per run, from depth 0 and "
          f"{DEPTHS[-1]}, {rounds} interleaved rounds (ns a call, medians)")
    ns: dict[tuple[str, int], list[float]] = {}
    for _ in range(rounds):
        for depth in DEPTHS:
            env = {"BENCH_DEPTH": str(depth)}
            ns.setdefault(("uninstrumented", depth), []).append(
                1e9 / uninstrumented(exe, calls, env=env))
            for engine in ENGINES:
                r = ada(exe, calls, tmp / "t", extra=("--hook-engine", engine), env=env)
                ns.setdefault((f"ada {engine}", depth), []).append(1e9 / r.rate)
    med = {k: sorted(v)[len(v) // 2] for k, v in ns.items()}
    frames = med["uninstrumented", DEPTHS[-1]] - med["uninstrumented", 0]
    for name in ["uninstrumented"] + [f"ada {e}" for e in ENGINES]:
        row = ", ".join(f"depth {d}: {med[name, d]:6.1f} ns" for d in DEPTHS)
        extra = "" if name == "uninstrumented" else \
            f"; {med[name, DEPTHS[-1]] - med[name, 0] - frames:+.1f} ns a call beyond the frames"
        print(f"  {name:<15}: {row}{extra}")


PARTS = (("entry stub", "entry"), ("+ return redirected", "redirect"), ("+ clock reads", "clock"),
         ("+ events (whole)", None))


CLOCK_LOOP = r"""
#include <stdio.h>
#include <stdint.h>
#include <time.h>
static double now (void)
{ struct timespec t; clock_gettime (CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main (void)
{
  const long n = 20000000;
  volatile uint64_t sink = 0;
  struct timespec ts;
  double t0 = now (), t1, t2;
#if defined (__x86_64__)
  for (long i = 0; i < n; i++)
  { uint32_t lo, hi; __asm__ volatile ("rdtsc" : "=a" (lo), "=d" (hi)); sink += lo + hi; }
#else
  for (long i = 0; i < n; i++)
  { clock_gettime (CLOCK_MONOTONIC, &ts); sink += ts.tv_nsec; }
#endif
  t1 = now ();
  for (long i = 0; i < n; i++)
  { clock_gettime (CLOCK_MONOTONIC, &ts); sink += ts.tv_nsec; }
  t2 = now ();
  printf ("%.2f %.2f\n", (t1 - t0) / n * 1e9, (t2 - t1) / n * 1e9);
  return 0;
}
"""


def build_clock_loop(tmp: Path) -> Path:
    src, exe = tmp / "clock_loop.c", tmp / "clock_loop"
    src.write_text(CLOCK_LOOP)
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(src)], check=True)
    return exe


def clock_costs(clock_loop: Path) -> tuple[float, float]:
    """ns a read of the clock the inline hot path reads (rdtsc on x86_64, where the OS clock
    runs on the TSC; clock_gettime elsewhere) and of clock_gettime (uftrace's), each timed
    in a loop of its own (build_clock_loop)."""
    ours, os_clock = subprocess.run([str(clock_loop)], capture_output=True, text=True,
                                    check=True).stdout.split()
    return float(ours), float(os_clock)


def compare_parts(exe: Path, calls: int, tmp: Path, rounds: int) -> None:
    """Where an inline hooked call's time goes (issue 26, item 8): the hot path cut short
    with ADA_INLINE_PROBE (agent/ada_inline.c) after its entry stub, after the return's
    redirection through the exit stub, after the two clock reads, and whole (the events
    written, drained and written to disk), next to uninstrumented and uftrace; one thread,
    rounds interleaved, medians. Each part is the difference to the one before. Then one
    clock read timed alone, and what 2.5x uftrace (the issue's goal) leaves a call once its
    two clock reads are paid."""
    if "inline" not in ENGINES:
        print("parts of a call: the inline engine only")
        return
    tool, how = find_uftrace()
    exe_pg = build(tmp, "-pg", name="bench_target_pg") if tool else None
    print(f"parts of an inline hooked call, {calls:,} calls of small() per run, {rounds} "
          f"interleaved rounds (ns a call, medians; uftrace: {how})")
    clock_loop = build_clock_loop(tmp)
    ns: dict[str, list[float]] = {}
    for k in range(rounds):
        row = {"uninstrumented": 1e9 / uninstrumented(exe, calls)}
        row["clock read"], row["clock_gettime"] = clock_costs(clock_loop)
        if tool:
            row["uftrace"] = 1e9 / uftrace(tool, exe_pg, calls, 1, tmp)[0]
        for name, probe in PARTS:
            env = {"ADA_INLINE_PROBE": probe} if probe else None
            row[name] = 1e9 / ada(exe, calls, tmp / "t", extra=("--hook-engine", "inline"),
                                  env=env).rate
        for name, value in row.items():
            ns.setdefault(name, []).append(value)
        print(f"  round {k + 1}: " + ", ".join(f"{name} {v:.1f}" for name, v in row.items()))
    med = {name: sorted(v)[len(v) // 2] for name, v in ns.items()}
    before = med["uninstrumented"]
    print(f"  uninstrumented       : {before:6.1f} ns a call")
    for name, _ in PARTS:
        print(f"  {name:<21}: {med[name]:6.1f} ns a call ({med[name] - before:+6.1f})")
        before = med[name]
    clock = "rdtsc" if platform.machine() == "x86_64" else "clock_gettime"
    print(f"  one read of ada's clock ({clock}) alone: {med['clock read']:.1f} ns; of "
          f"clock_gettime: {med['clock_gettime']:.1f} ns")
    if tool:
        whole = med[PARTS[-1][0]]
        print(f"  uftrace              : {med['uftrace']:6.1f} ns a call; whole inline call / "
              f"uftrace: {med['uftrace'] / whole:.2f}x uftrace's rate")
        # What a call may cost at 2.5x uftrace's rate, and how much of that the clock takes.
        budget = med["uftrace"] / 2.5 - med["uninstrumented"]
        rest = whole - med["uninstrumented"] - 2 * med["clock read"]
        print(f"  at 2.5x uftrace a hooked call may add {budget:.1f} ns; two clock reads take "
              f"{2 * med['clock read']:.1f} of them, leaving {budget - 2 * med['clock read']:.1f}"
              f" ns for the rest, which now takes {rest:.1f}")


ATTACH_SIZES = (1, 100, 2000)


def attach_target(tmp: Path) -> Path:
    """A program with ATTACH_SIZES groups of exported functions (f<size>_<i>, each longer than
    a jump) that exits at once: what `ada trace` costs is then mostly hooking them."""
    src = tmp / "attach_target.c"
    lines = ["volatile long sink;"]
    for size in ATTACH_SIZES:
        lines += [f"__attribute__((noinline, used)) long f{size}_{i}(long x) "
                  f"{{ sink += x * {i + 3}; return sink; }}" for i in range(size)]
    lines.append("int main(void) { return (int) f1_0(1) & 0; }")
    src.write_text("\n".join(lines) + "\n")
    exe = tmp / "attach_target"
    subprocess.run(["gcc", "-O1", "-rdynamic", "-o", str(exe), str(src)], check=True)
    return exe


def compare_attach(tmp: Path, rounds: int) -> None:
    """What hooking costs per function, each engine: `ada trace` of a program that exits at
    once, timed whole with 1, 100 and 2,000 functions selected; the cost per function is the
    difference over the extra functions (medians of interleaved rounds). The engines take
    turns going first, round by round, so that what one run leaves the machine (page cache,
    memory the VM has just handed back) favours neither."""
    exe = attach_target(tmp)
    print(f"attach: ada trace of a program that exits at once, {rounds} interleaved rounds, "
          f"wall seconds (median)")
    times: dict[tuple[str, int], list[float]] = {}
    for k in range(rounds):
        for size in ATTACH_SIZES:
            for engine in (ENGINES if k % 2 == 0 else ENGINES[::-1]):
                start = time.perf_counter()
                subprocess.run([sys.executable, "-m", "ada", "trace", "-q", "-o", str(tmp / "a"),
                                "--hook-engine", engine, "-i", f"attach_target!f{size}_*",
                                "-f", str(exe)], check=True, stdout=subprocess.DEVNULL)
                times.setdefault((engine, size), []).append(time.perf_counter() - start)
                shutil.rmtree(tmp / "a", ignore_errors=True)
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    per: dict[str, float] = {}
    for engine in ENGINES:
        row = ", ".join(f"{size:,} function(s) {med[engine, size]:.2f} s" for size in ATTACH_SIZES)
        first, last = ATTACH_SIZES[0], ATTACH_SIZES[-1]
        per[engine] = (med[engine, last] - med[engine, first]) / (last - first)
        print(f"  ada {engine:<7}: {row}; {per[engine] * 1e3:.2f} ms per extra function")
    if "inline" in per and per["frida"] > 0:
        print(f"  per function, inline / frida: {per['inline'] / per['frida']:.2f}x "
              f"(target: <= 1.0x)")


REST_S, REST_FROM_S, REST_TO_S = 14, 4, 12


def at_rest(tmp: Path, rounds: int) -> None:
    """What ada costs the host while the traced program rests: the CPU time of ada's process
    (all its threads, from /proc) between REST_FROM_S and REST_TO_S into recording `sleep`,
    per second: attaching and starting are over by then."""
    print(f"at rest: ada trace of `sleep {REST_S}`, ada's CPU time from {REST_FROM_S} s to "
          f"{REST_TO_S} s, {rounds} rounds")
    tick = os.sysconf("SC_CLK_TCK")

    def cpu_s(pid: int) -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick  # utime, stime

    shares = []
    for k in range(rounds):
        p = subprocess.Popen([sys.executable, "-m", "ada", "trace", "-q", "-o", str(tmp / "r"),
                              "-i", "libc.so.6!nanosleep", "-f", shutil.which("sleep"),
                              str(REST_S)], stdout=subprocess.DEVNULL)
        time.sleep(REST_FROM_S)
        first = cpu_s(p.pid)
        time.sleep(REST_TO_S - REST_FROM_S)
        share = (cpu_s(p.pid) - first) / (REST_TO_S - REST_FROM_S)
        if p.wait() != 0:
            raise SystemExit(f"ada trace failed (exit {p.returncode})")
        shutil.rmtree(tmp / "r", ignore_errors=True)
        shares.append(share)
        print(f"  round {k + 1}: {share * 100:.2f} % of a core")
    print(f"  median: {sorted(shares)[len(shares) // 2] * 100:.2f} % of a core")


def compare_index_io(exe: Path, calls: int, tmp: Path, rounds: int) -> None:
    """The long run with index.atf written through the page cache, and by the default policy
    (straight to the disk once writeback throttles): a recording that outlasts the page
    cache's room runs at what the drain's writes take."""
    print(f"long run, {calls:,} calls of small(), {rounds} interleaved rounds")
    rates: dict[str, list[float]] = {"cached": [], "auto": []}
    for k in range(rounds):
        for policy in rates:
            r = ada(exe, calls, tmp / "t", extra=("--index-io", policy))
            rates[policy].append(r.rate)
            print(f"  round {k + 1}: --index-io {policy:6}: {r.seconds:5.1f} s at "
                  f"{r.rate / 1e6:6.2f} M calls/s; the target waited {r.wait_ms:,.0f} ms for "
                  f"the drain; events expected {r.expected:,}, lost {r.lost:,}")
    med = {p: sorted(v)[len(v) // 2] for p, v in rates.items()}
    for p, v in med.items():
        print(f"  --index-io {p:6}: median {v / 1e6:6.2f} M calls/s")
    print(f"  auto / cached: {med['auto'] / med['cached']:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20_000_000, help="calls per run (default 20M)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved empty-hook / ada rounds for the index-lane and --detail "
                    "ratios (default 3)")
    ap.add_argument("--detail-calls", type=int, default=5_000_000,
                    help="calls of the --detail run (default 5M = 2.5 GB of detail); the 20M "
                    "run is printed too")
    ap.add_argument("--long-calls", type=int, default=100_000_000,
                    help="calls of the long run, sized to last >= 30 s (default 100M; 0 skips)")
    ap.add_argument("--engines-only", action="store_true",
                    help="only the hook engines' comparison (with uftrace)")
    ap.add_argument("--attach-only", action="store_true",
                    help="only what hooking 1, 100 and 2,000 functions costs, each engine")
    ap.add_argument("--breakpoint-only", action="store_true",
                    help="only what a breakpoint hook (the inline engine's last resort) costs "
                    "a call")
    ap.add_argument("--parts-only", action="store_true",
                    help="only where an inline hooked call's time goes (the hot path cut short "
                    "after each part: ADA_INLINE_PROBE)")
    ap.add_argument("--depth-only", action="store_true",
                    help="only what a hooked call costs the returns above it (depth 0 and 8)")
    ap.add_argument("--rest-only", action="store_true",
                    help="only what ada costs the host while the program rests (CPU time)")
    ap.add_argument("--long-only", action="store_true",
                    help="only the long run, index.atf through the page cache and by the "
                    "default policy (--index-io cached, auto), interleaved")
    ap.add_argument("--depth-calls", type=int, default=3_000_000,
                    help="calls per run of the depth comparison (default 3M)")
    ap.add_argument("--breakpoint-calls", type=int, default=2_000_000,
                    help="calls per run of the breakpoint comparison (default 2M)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ada-bench-trace-"))
    try:
        if args.breakpoint_only:
            compare_breakpoint(build(tmp), args.breakpoint_calls, tmp, args.rounds)
            return
        if args.parts_only:
            compare_parts(build(tmp), args.calls, tmp, args.rounds)
            return
        if args.depth_only:
            compare_depth(build(tmp), args.depth_calls, tmp, args.rounds)
            return
        if args.long_only:
            compare_index_io(build(tmp), args.long_calls, tmp, args.rounds)
            return
        if args.rest_only:
            at_rest(tmp, args.rounds)
            return
        if not args.engines_only:
            compare_attach(tmp, args.rounds)
        if args.attach_only:
            return
        exe = build(tmp)
        n = args.calls
        compare_engines(exe, n, tmp, args.rounds)
        if args.engines_only:
            return
        compare_breakpoint(exe, args.breakpoint_calls, tmp, args.rounds)
        base = uninstrumented(exe, n)
        print(f"one thread, {n:,} calls of small()")
        print(f"  uninstrumented          : {base / 1e6:8.2f} M calls/s")
        ratios = []
        os_ratios = []
        floors = []  # every empty-hook rate measured; single runs below compare to their median
        for k in range(args.rounds):  # interleaved: all three see the same machine state
            floor = empty_hook(exe, n)
            floors.append(floor)
            r = ada(exe, n, tmp / "t")
            ratios.append(r.rate / floor)
            print(f"  round {k + 1}: empty CModule hook {floor / 1e6:.2f} M calls/s (Frida's floor),"
                  f" ada trace (index lane) {r.rate / 1e6:.2f} M calls/s = {r.rate / floor:.2f}x;"
                  f" events expected {r.expected:,}, recorded {r.recorded:,}, lost {r.lost:,}")
            ro = ada(exe, n, tmp / "t", extra=("--clock-source", "os"))
            os_ratios.append(ro.rate / floor)
            print(f"           with --clock-source os (clock_gettime per event): "
                  f"{ro.rate / 1e6:.2f} M calls/s = {ro.rate / floor:.2f}x; lost {ro.lost:,}")
        print(f"  index lane / empty hook : median {sorted(ratios)[len(ratios) // 2]:.2f}x over "
              f"{len(ratios)} rounds (target >= 0.75); --clock-source os: median "
              f"{sorted(os_ratios)[len(os_ratios) // 2]:.2f}x")
        detail_ratios = []
        for k in range(args.rounds):  # interleaved again: this VM's page cache swings a lot
            floor = empty_hook(exe, args.detail_calls)
            floors.append(floor)
            d = ada(exe, args.detail_calls, tmp / "t", extra=("--detail",))
            detail_ratios.append(d.rate / floor)
            print(f"  round {k + 1}: ada trace --detail, {args.detail_calls / 1e6:.0f} M calls "
                  f"({d.detail_bytes / 1e9:.1f} GB of detail): {d.rate / 1e6:.2f} M calls/s = "
                  f"{d.rate / floor:.2f}x empty hook ({floor / 1e6:.2f}); index lost {d.lost:,}; "
                  f"{d.detail_events:,} detail events, {d.detail_bytes / d.seconds / 1e6:,.0f} "
                  f"MB/s of detail written; the target waited {d.wait_ms:,.0f} ms for the drain")
        print(f"  --detail / empty hook   : median {sorted(detail_ratios)[len(detail_ratios) // 2]:.2f}x"
              f" over {len(detail_ratios)} rounds (target >= 0.5)")
        floor = sorted(floors)[len(floors) // 2]
        print(f"  single runs below: ratios to the median empty hook so far, "
              f"{floor / 1e6:.2f} M calls/s")
        if n != args.detail_calls:
            d = ada(exe, n, tmp / "t", extra=("--detail",))
            print(f"  ada trace --detail, {n / 1e6:.0f} M calls ({d.detail_bytes / 1e9:.1f} GB of "
                  f"detail): {d.rate / 1e6:.2f} M calls/s = "
                  f"{d.rate / floor:.2f}x empty hook; index lost {d.lost:,}; "
                  f"{d.detail_bytes / d.seconds / 1e6:,.0f} MB/s of detail written; the target "
                  f"waited {d.wait_ms:,.0f} ms")
        w = ada(exe, n, tmp / "t", extra=("--pre-roll-ms", "50", "--post-roll-ms", "50",
                                          "--trigger-at-ms", str(int(r.seconds * 500))))
        print(f"  ada trace, window 50+50 : {w.rate / 1e6:8.2f} M calls/s   "
              f"= {w.rate / floor:.2f}x empty hook; index lost {w.lost:,}; "
              f"{w.detail_events:,} detail events persisted ({w.detail_bytes / 1e6:.1f} MB)")
        if args.long_calls:
            lr = ada(exe, args.long_calls, tmp / "t")
            print(f"  long run, {args.long_calls:,} calls: {lr.seconds:.1f} s at "
                  f"{lr.rate / 1e6:.2f} M calls/s ({lr.rate / floor:.2f}x empty hook), events "
                  f"expected {lr.expected:,}, recorded {lr.recorded:,}, lost {lr.lost:,}")
        lo = ada(exe, n, tmp / "t", extra=("--transport", "rpc"))
        print(f"  rpc transport, local    : {lo.rate / 1e6:8.2f} M calls/s = "
              f"{lo.expected / lo.seconds / 1e6:.2f} M events/s, "
              f"{lo.expected * 32 / lo.seconds / 1e6:.0f} MB/s; lost {lo.lost:,}")
        rr = rpc_remote(exe, n, tmp / "t")
        print(f"  rpc transport, loopback remote (-H, PortalService): {rr.rate / 1e6:.2f} M calls/s"
              f" = {rr.expected / rr.seconds / 1e6:.2f} M events/s, "
              f"{rr.expected * 32 / rr.seconds / 1e6:.0f} MB/s; lost {rr.lost:,}")
        half = n // 2
        base2 = uninstrumented(exe, half, 2)
        floor2 = empty_hook(exe, half, 2)
        r2 = ada(exe, half, tmp / "t", threads=2)
        print(f"two threads, {2 * half:,} calls in all")
        print(f"  uninstrumented          : {base2 / 1e6:8.2f} M calls/s")
        print(f"  empty CModule hook      : {floor2 / 1e6:8.2f} M calls/s")
        print(f"  ada trace (index lane)  : {r2.rate / 1e6:8.2f} M calls/s   "
              f"= {r2.rate / floor2:.2f}x empty hook; lost {r2.lost:,}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
