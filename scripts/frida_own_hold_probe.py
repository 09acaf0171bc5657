"""Frida alone, without its child gating: can a tracer hold each forked child itself, attach
to it afresh, hook it over the hooks it inherited, and let it go, reliably? A way for ada to
follow children without Frida's recovery from a held fork, which faults now and then
(scripts/frida_fork_repro.py; docs/recording.md, "Children ada does not follow are not held").

    python scripts/frida_own_hold_probe.py [--runs 10] [--children 60] [--hang-s 30] [--rpc]

Each run spawns tests/targets/forks.c (built here with gcc) as `forks 500 CHILDREN serial`
(one child after another, each calling work() 10 times; the parent waits for each). The
parent's script hooks work() and fork() with C callbacks (CModule: a child runs them with no
agent thread of its own). fork()'s, in the child, writes the child's pid into a shared page
(MAP_SHARED, mapped before the fork) and waits there until the page names it as released.
This script reads the page (through /proc/PID/mem; with --rpc, by asking the parent's script
every 2 ms), attaches to the child (child gating off: a fresh injection), hooks work() over
the inherited hook, releases the child from its own new script, and counts the child's calls
of work() that its new hook saw (10 each). A run not ended after --hang-s seconds, or an
attach that fails, is a hang: the script prints the processes' state and exits 1.

Measured 2026-11-29 with frida 17.26.2 (x86_64):
- without --rpc, `--runs 40 --children 60`: no hang; 2,400 children followed, and their new
  hooks saw all 24,000 of their calls (where Frida's gating, frida_fork_repro.py, hangs about
  one child in 300);
- with --rpc, `--runs 10 --children 60`: the attach timed out ("timeout was reached") after
  23 children, and in an earlier try after fewer than 60. In the held child the injection's
  first thread spun for ever in the inherited (old) agent's code: a spinlock acquire (64
  reads, then sched_yield, then xchg) at the same offset of frida-agent-64.so both times. A
  lock of the parent's agent, held by one of its threads as the parent forked, stays held in
  the child, where that thread does not exist; a new thread that enters a function the old
  agent hooked then waits on it. Which lock was not confirmed (the agent has no symbols);
  gum's Interceptor takes one (gum_interceptor_thread_context_lock) as a thread first runs
  its hooks and as it exits. Frida's gating stops its threads before a fork
  (prepare_to_fork) for this reason. So holding children this way needs the parent's Frida
  threads quiet at the fork, which a tracer cannot promise, and the program's own threads
  take that lock too where the Interceptor hooks them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import frida

from frida_fork_repro import child_state

ROOT = Path(__file__).resolve().parents[1]

PARENT = """
const mmap = new NativeFunction(Module.getGlobalExportByName('mmap'), 'pointer',
                                ['pointer', 'size_t', 'int', 'int', 'int', 'long']);
const page = mmap(NULL, 4096, 3 /* rw */, 0x21 /* MAP_SHARED | MAP_ANONYMOUS */, -1, 0);
const cm = new CModule(`
#include <gum/guminterceptor.h>
extern volatile int page[];  /* [0]: the child waiting; [1]: the child released */
extern int getpid (void);
extern int usleep (unsigned int usec);
void on_work (GumInvocationContext * ic) { (void) ic; page[2]++; }
void on_fork (GumInvocationContext * ic)
{
  int me;
  if ((gssize) gum_invocation_context_get_return_value (ic) != 0)
    return;
  me = getpid ();
  page[0] = me;
  while (page[1] != me)
    usleep (200);
}
`, { page, getpid: Module.getGlobalExportByName('getpid'),
     usleep: Module.getGlobalExportByName('usleep') });
const main = Process.getModuleByName('forks');
Interceptor.attach(main.getExportByName('work'), cm.on_work);
Interceptor.attach(Module.getGlobalExportByName('fork'), { onLeave: cm.on_fork });
rpc.exports = { page: () => page.toString(), waiting: () => page.readS32() };
"""

CHILD = """
Interceptor.attach(Process.getModuleByName('forks').getExportByName('work'),
                   { onEnter() { send('work'); } });
rpc.exports = { release(page) { ptr(page).add(4).writeS32(Process.id); } };
"""


def read_waiting(pid: int, page: str, rpc) -> int | None:
    """The pid in the page's first word: through the parent's script (`rpc`), or read from
    /proc/PID/mem, which runs nothing in the parent; None once the parent has ended."""
    if rpc is not None:
        try:
            return rpc.exports_sync.waiting()
        except frida.InvalidOperationError:
            return None
    try:
        with open(f"/proc/{pid}/mem", "rb") as mem:
            mem.seek(int(page, 16))
            return int.from_bytes(mem.read(4), "little", signed=True)
    except OSError:
        return None


def one_run(device: frida.core.Device, exe: str, children: int, hang_s: float,
            rpc: bool) -> tuple[bool, int, int]:
    """(ended, children followed, their calls of work() that their new hook saw)."""
    pid = device.spawn(exe, argv=[exe, "500", str(children), "serial"], stdio="pipe")
    session = device.attach(pid)
    ended = []
    session.on("detached", lambda *_: ended.append(True))
    script = session.create_script(PARENT)
    script.load()
    page = script.exports_sync.page()
    device.resume(pid)
    followed, last, seen = 0, 0, []
    started = time.monotonic()
    while not ended:
        waiting = read_waiting(pid, page, rpc=script if rpc else None)
        if waiting is None:
            break  # the parent ended meanwhile
        if waiting not in (0, last):
            last = waiting
            try:
                child = device.attach(waiting)
            except frida.ProtocolError as e:  # "timeout was reached"
                print(f"attach to child {waiting} failed ({e}) after {followed} children\n"
                      f"{child_state(pid)}", flush=True)
                return False, followed, len(seen)
            child_script = child.create_script(CHILD)
            child_script.on("message", lambda message, data: seen.append(message))
            child_script.load()
            child_script.exports_sync.release(page)
            followed += 1
        if time.monotonic() - started > hang_s:
            print(f"hang: parent {pid}\n{child_state(pid)}", flush=True)
            return False, followed, len(seen)
        time.sleep(0.002)
    time.sleep(0.2)  # the last child's messages
    return True, followed, sum(m.get("payload") == "work" for m in seen)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--children", type=int, default=60)
    parser.add_argument("--hang-s", type=float, default=30.0,
                        help="a run not ended after this long is a hang (default 30)")
    parser.add_argument("--rpc", action="store_true",
                        help="ask the parent's script for the waiting child every 2 ms, rather "
                             "than read its page through /proc/PID/mem")
    args = parser.parse_args()
    exe = Path(tempfile.mkdtemp(prefix="ada-own-hold-")) / "forks"
    subprocess.run(["gcc", "-O1", "-g", "-rdynamic", "-o", str(exe),
                    str(ROOT / "tests" / "targets" / "forks.c")], check=True)
    device = frida.get_local_device()
    total_followed = total_seen = 0
    for run in range(1, args.runs + 1):
        t0 = time.monotonic()
        ok, followed, seen = one_run(device, str(exe), args.children, args.hang_s, args.rpc)
        total_followed += followed
        total_seen += seen
        if not ok:
            print(f"hung in run {run} of {args.runs} ({followed} children followed in it, "
                  f"frida {frida.__version__})")
            os._exit(1)
        print(f"run {run}: {followed} of {args.children} children followed, {seen} of their "
              f"{10 * args.children} calls seen by their new hooks, {time.monotonic() - t0:.1f} s",
              flush=True)
    print(f"no hang in {args.runs} runs: {total_followed} children followed, {total_seen} calls "
          f"seen (frida {frida.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
