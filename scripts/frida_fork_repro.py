"""Frida alone (no ada): a process whose forked children Frida holds (child gating), each let
go as ada lets one go, until one hangs. Shows that the fork crash ada steps around (recorder.py,
_hold_children) is Frida's own.

    python scripts/frida_fork_repro.py [--runs 40] [--children 60]
                                       [--mode attach|script|empty|resume] [--hang-s 30]
                                       [--hold-s 0] [--post-ms 0] [--send-ms 0] [--timer-ms 0]
                                       [--send-kb 0] [--call-ms 0]
                                       [--fork-markers hooked|quiet|got|gotraw]

Each run spawns tests/targets/forks.c (built here with gcc) as `forks 500 CHILDREN serial`:
it forks its children one after another and waits for each. Frida holds each child at its
fork; `attach` opens a session on the child, resumes it and closes the session half a second
later (what ada's held.py did); `script` and `empty` also load a script in the child first (one
hook, or none), as ada does for a child it follows; `resume` only resumes it. --hold-s waits
that long before each resume. A run that has not ended after
--hang-s seconds (30; give an emulated machine more) is a hang: the script prints the held
child's state (with `attach`, typically stopped by Frida's ptrace after a fault inside
Frida's agent, three of its threads spinning) and exits 1.
Measured 2026-11-26 with frida 17.26.2: `attach` hung in runs 3, 4 and 2 of three tries (the
child stopped by ptrace, its main thread faulted in Frida's allocator inside fork()'s hook);
`resume` hung too (the child waiting in fork(), as held.py describes).
In the emulated arm64 machine (scripts/arm64.sh, 2026-11-27), `--children 4 --hang-s
150` (--runs 10, then 40) hung in run 8 in both of two tries: once blocked in a Frida call on the held
child (the run's time limit never came), once with the child stopped by Frida's ptrace (on
x86_64 no Frida helper process runs: the ptrace is this script's own) after a SIGSEGV inside Frida's
code (the kernel's fatal-signal line), its other threads running: about 1 child in 30.
On 2026-11-29 (x86_64, frida 17.26.2), 20 runs of 60 children each try: `attach` hung in run
5, then in run 7; `script` passed 20 runs, then hung in run 4; `attach --hold-s 0.1` passed 30
runs. So what saves a child is time held, not a script: ada's held.py now holds each fork child
0.1 s after its announcement before it resumes it (SETTLE_S).
Messages kill children (2026-11-30): with --mode script --hold-s 0.1, the parent's script
sending the host a message every 10 ms (--send-ms 10) left 32 of 300 children killed by a
signal (the target's "killed K of M": SIGSEGV inside Frida's agent as the child recovers from
its fork); the host posting it one every 2 ms (--post-ms 2), 10 of 600; every 100 ms, 0 of 600;
a JavaScript timer every 2 ms (--timer-ms 2), 0 of 600. The script exits 1 if any child was
killed. ada's rpc transport sends a process at rest nothing for this reason
(docs/recording.md, "Children and exec").
Inside fork() (2026-11-30): with --fork-markers (the target built with -DFORK_MARKERS, its
fork_begins() and fork_ended() hooked) and --send-ms 10, 31 of 300 children were killed;
with --fork-markers quiet (nothing sent from fork_begins() until fork() returns in the
parent), 0 of 300. With --call-ms 2 (the host calls the parent, as ada's drain pulls) and
--fork-markers quiet (each answer held while in fork()), 9 of 300; with --fork-markers
hooked, three tries hung (in runs 1, 1 and 3: the parent stopped by Frida's ptrace).
From the import table (2026-11-30): --fork-markers got and gotraw route the target's own
calls of fork() through a stub put in its GOT slot, which runs before Frida's listener on
fork(), and no send begins while the process is inside fork() (ada's fork gate, forkGate in
agent/ada_code.js, is gotraw). With --send-ms 10: got, 0 of 300 killed. With 256 KiB sent
every 2 ms and the host posting every 100 ms (--send-ms 2 --send-kb 256 --post-ms 100):
gotraw 0 of 600 (a copy of the stub), then 0 of 300 (ada's forkGate itself, as now);
got 2 of 600; neither (no quiet) hung in run 1. With --call-ms 2 and got
(answers held while in fork()), hung in run 2: the host's calls still harm, so ada's rpc
transport now pushes and the host calls only as the recording stops. (A first try of the
stub called the address enumerateImports() gave, which under lazy binding is the PLT's
resolver: it bound the slot back to fork() at the first call, and only the first fork of a
run was quiet: 6 of 60 killed. The stub calls the C library's fork() itself now.)
In the emulated arm64 machine (2026-11-30, --mode script --hold-s 0.1 --children 20, the
guest's hang limit --hang-s 200): no message, 0 of 80 killed; --send-ms 10, all 20 of run 1
killed, then a hang; --send-ms 10 --fork-markers gotraw, 0 of 80; --send-ms 2 --send-kb 256
--fork-markers gotraw, 0 of 120; the same with --post-ms 100, 3 of 80; --post-ms 100 alone,
1 of 120; --post-ms 20 alone, 12 of 120; --post-ms 100 --send-ms 10 --fork-markers gotraw, 0
of 120. Each killed child died at the same place (pc at page offset 0x040, lr ending 0x5230,
in frida-agent-64.so). So the gate holds the agent's sends there too, and what is left is the
host's messages into the process, which no gate in the process can hold: ada's rpc
transport sends it as few as it can (transport.py, PushAcks).
"""

from __future__ import annotations

import argparse
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import frida

ROOT = Path(__file__).resolve().parents[1]


# --mode script: what a child is given before it runs, a script with one hook (ada loads its
# agent there before it resumes a child it follows)
CHILD_SCRIPT = ("Interceptor.attach(Process.getModuleByName('forks').getExportByName('work'), "
                "{ onEnter() {} });")


def child_state(parent: int) -> str:
    """One line per child of `parent`: pid, state, tracer, and each thread's state."""
    lines = []
    for child in subprocess.run(["pgrep", "-P", str(parent)], capture_output=True,
                                text=True).stdout.split():
        status = dict(line.split(":\t", 1) for line in
                      Path(f"/proc/{child}/status").read_text().splitlines() if ":\t" in line)
        threads = [Path(t, "stat").read_text().split()[2]
                   for t in sorted(Path(f"/proc/{child}/task").iterdir())]
        lines.append(f"child {child}: {status.get('State')}, traced by {status.get('TracerPid')},"
                     f" threads {' '.join(threads)}")
    return "\n".join(lines) or "(no child)"


# --post-ms: the parent's script answers messages from the host (ada's rpc transport sends
# its heartbeat and pulls so)
PARENT_SCRIPT = ("Interceptor.attach(Process.getModuleByName('forks').getExportByName('work'), "
                 "{ onEnter() {} });"
                 "function onPost() { recv('post', onPost); } recv('post', onPost);"
                 "var inFork = false;"
                 # where the parent is inside fork(), as far as the script knows; --send-ms
                 # sends when beginSend() says it may, then calls endSend()
                 "var forking = () => inFork;"
                 "var beginSend = () => !forking(), endSend = () => {};"
                 # --call-ms: the host calls pull() as ada's rpc drain does; its answer waits
                 # while the parent is in fork() (set only with --fork-markers quiet or got)
                 "rpc.exports.pull = () => !forking() ? 'x'.repeat(4096) : new Promise(done => {"
                 "  const t = setInterval(() => { if (!forking()) { clearInterval(t);"
                 "    done('x'.repeat(4096)); } }, 1); });")


# --fork-markers: the parent's script hooks the target's fork_begins() and fork_ended()
# (forks.c built with -DFORK_MARKERS); with "quiet", --send-ms sends nothing between them
MARKERS_SCRIPT = (
    "const quietFork = %s;"
    "Interceptor.attach(Process.getModuleByName('forks').getExportByName('fork_begins'), "
    "{ onEnter() { inFork = quietFork; } });"
    "Interceptor.attach(Process.getModuleByName('forks').getExportByName('fork_ended'), "
    "{ onEnter() { inFork = false; } });")


# --fork-markers got: the target's own calls of fork() go through a stub put in its GOT slot
# (x86_64), which marks the process as forking (count at page+0) and waits until no send is
# under way (page+4) before it calls fork(); a send begins only when no fork has (xchg, then
# a read: Dekker's order, both full fences). Stub and page are raw mmap'd memory, never
# unmapped: the child returns from fork() into the stub after Frida has disposed the
# parent's script in it (a CModule's code would be gone). No listener is added to fork().
GOT_SCRIPT = """
(function () {
  const imp = Process.getModuleByName('forks').enumerateImports()
    .find(i => i.name === 'fork' && i.slot !== undefined);
  const mmap = new NativeFunction(Module.findGlobalExportByName('mmap'), 'pointer',
    ['pointer', 'size_t', 'int', 'int', 'int', 'int64']);
  const code = mmap(NULL, Process.pageSize, 3, 0x22, -1, 0);
  const before = new NativeCallback(() => { inFork = true; }, 'void', []);
  const after = new NativeCallback(() => { inFork = false; }, 'void', []);
  code.writeByteArray([
    0x53,                                      /*  0 push rbx */
    0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0,        /*  1 movabs rax, before */
    0xff, 0xd0,                                /* 11 call rax */
    0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0,        /* 13 movabs rax, fork */
    0xff, 0xd0,                                /* 23 call rax */
    0x89, 0xc3,                                /* 25 mov ebx, eax */
    0x85, 0xc0,                                /* 27 test eax, eax */
    0x74, 0x0c,                                /* 29 je 43 (the child) */
    0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0,        /* 31 movabs rax, after */
    0xff, 0xd0,                                /* 41 call rax */
    0x89, 0xd8,                                /* 43 mov eax, ebx */
    0x5b,                                      /* 45 pop rbx */
    0xc3,                                      /* 46 ret */
  ]);
  code.add(3).writePointer(before);
  code.add(15).writePointer(Module.getGlobalExportByName('fork'));
  code.add(33).writePointer(after);
  Memory.protect(code, Process.pageSize, 'r-x');
  Memory.protect(imp.slot.and(ptr(Process.pageSize - 1).not()), Process.pageSize, 'rw-');
  imp.slot.writePointer(code);
  globalThis.gotKeep = [before, after];
})();
"""


# --fork-markers gotraw: ada's own fork gate (forkGate in agent/ada_code.js, loaded from there:
# a stub in every module's GOT slot of fork() that counts the process as forking and waits
# while a send is under way; a send begins only where no fork has), without JavaScript on the
# program's thread. It gates the sends only (--call-ms answers are not held with it).
GOT_RAW_SCRIPT = (ROOT / "agent" / "ada_code.js").read_text() + """
(function () {
  const gate = forkGate();
  beginSend = () => gate.begin();
  endSend = () => gate.end();
})();
"""


def every(ms: float, done: threading.Event, action) -> None:
    """Call `action` every `ms` ms on a thread of its own, until `done` or the process is
    gone."""
    def loop() -> None:
        while not done.wait(ms / 1000):
            try:
                action()
            except (frida.InvalidOperationError, frida.TransportError):
                return
    threading.Thread(target=loop, daemon=True).start()


def one_run(device: frida.core.Device, exe: str, o: argparse.Namespace) -> tuple[bool, int]:
    """(ended, children killed by a signal): False (after --hang-s) if it hung. `o` is the
    command line's options."""
    held: queue.Queue = queue.Queue()
    done = threading.Event()
    output: list[str] = []

    def on_child(child):
        held.put(child)

    def on_output(_pid, _fd, data):
        output.append(data.decode(errors="replace"))

    device.on("child-added", on_child)
    device.on("output", on_output)
    pid = device.spawn(exe, argv=[exe, "500", str(o.children), "serial"], stdio="pipe")
    session = device.attach(pid)
    session.on("detached", lambda *_: done.set())
    session.enable_child_gating()
    script = session.create_script(
        PARENT_SCRIPT + (f"setInterval(() => {{}}, {o.timer_ms});" if o.timer_ms else "")
        + (MARKERS_SCRIPT % ("true" if o.fork_markers == "quiet" else "false")
           if o.fork_markers in ("hooked", "quiet") else "")
        + (GOT_SCRIPT if o.fork_markers == "got" else "")
        + (GOT_RAW_SCRIPT if o.fork_markers == "gotraw" else "")
        + (f"const payload = {o.send_kb} ? new ArrayBuffer({o.send_kb} * 1024) : null;"
           f"setInterval(() => {{ if (beginSend()) {{ send('x', payload); endSend(); }} }}, "
           f"{o.send_ms});" if o.send_ms else ""))
    script.load()
    if o.post_ms:
        every(o.post_ms, done, lambda: script.post({"type": "post"}))
    if o.call_ms:
        every(o.call_ms, done, script.exports_sync.pull)
    device.resume(pid)
    opened: list[tuple[float, frida.core.Session]] = []
    started = time.monotonic()
    try:
        while not done.is_set():
            try:
                child = held.get(timeout=0.05)
                child_session = None
                if o.mode in ("attach", "script", "empty"):
                    try:
                        child_session = device.attach(child.pid)
                        if o.mode != "attach":  # as ada does for a child it follows
                            child_script = child_session.create_script(
                                CHILD_SCRIPT if o.mode == "script" else "")
                            child_script.load()
                    except (frida.ProcessNotFoundError, frida.InvalidOperationError):
                        pass
                if o.hold_s:
                    time.sleep(o.hold_s)
                try:
                    device.resume(child.pid)
                except (frida.ProcessNotFoundError, frida.InvalidOperationError):
                    pass
                if child_session is not None:
                    opened.append((time.monotonic(), child_session))
            except queue.Empty:
                pass
            for entry in [e for e in opened if time.monotonic() - e[0] > 0.5]:
                # on a thread of its own: a detach can wait for ever on a stuck process
                threading.Thread(target=entry[1].detach, daemon=True).start()
                opened.remove(entry)
            if time.monotonic() - started > o.hang_s:
                print(f"hang: parent {pid}\n{child_state(pid)}", flush=True)
                return False, 0
        time.sleep(0.1)  # the parent's last output
        killed = "".join(output).partition("killed ")[2].split(" ")[0]
        return True, int(killed or 0)
    finally:
        device.off("child-added", on_child)
        device.off("output", on_output)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--children", type=int, default=60)
    parser.add_argument("--mode", choices=("attach", "script", "empty", "resume"), default="attach")
    parser.add_argument("--hang-s", type=float, default=30.0,
                        help="a run not ended after this long is a hang (default 30)")
    parser.add_argument("--hold-s", type=float, default=0.0,
                        help="how long each held child waits, after the session (and script) "
                             "is made, before it is resumed (default 0)")
    parser.add_argument("--post-ms", type=float, default=0.0,
                        help="post a message to the parent's script this often (default: "
                             "never), as ada's rpc transport does")
    parser.add_argument("--timer-ms", type=float, default=0.0,
                        help="a JavaScript timer in the parent's script this often (default: "
                             "none), as ada's agent watches its rings over rpc")
    parser.add_argument("--send-ms", type=float, default=0.0,
                        help="the parent's script sends the host a message this often "
                             "(default: never), as ada's agent answers pulls and wakes the host")
    parser.add_argument("--send-kb", type=int, default=0,
                        help="with --send-ms, each message carries this many KiB of data "
                             "(default: none), as a push of ring bytes would")
    parser.add_argument("--call-ms", type=float, default=0.0,
                        help="call the parent's script (an rpc export answering 4 KiB) this "
                             "often (default: never), as ada's rpc drain pulls")
    parser.add_argument("--fork-markers", choices=("hooked", "quiet", "got", "gotraw"),
                        help="build the target with -DFORK_MARKERS and hook its markers around "
                             "each fork(); with 'quiet', --send-ms sends nothing and --call-ms's "
                             "answers wait from just before a fork() until it returns in the "
                             "parent; 'got': the same quiet, from a stub in the target's GOT "
                             "slot of fork() (x86_64; no markers, no hook on fork())")
    args = parser.parse_args()
    exe = Path(tempfile.mkdtemp(prefix="ada-fork-repro-")) / "forks"
    markers = ["-DFORK_MARKERS"] if args.fork_markers in ("hooked", "quiet") else []
    subprocess.run(["gcc", "-O1", "-g", "-rdynamic", *markers, "-o", str(exe),
                    str(ROOT / "tests" / "targets" / "forks.c")], check=True)
    device = frida.get_local_device()
    killed = 0
    for run in range(1, args.runs + 1):
        ended, run_killed = one_run(device, str(exe), args)
        if not ended:
            print(f"hung in run {run} of {args.runs} ({args.children} children a run, "
                  f"mode {args.mode}, frida {frida.__version__})")
            os._exit(1)  # the hung processes stay, for a look (kill them after)
        killed += run_killed
        print(f"run {run}: {args.children} children, no hang, {run_killed} killed by a signal",
              flush=True)
    print(f"no hang in {args.runs} runs, {killed} of {args.runs * args.children} children "
          f"killed by a signal (frida {frida.__version__})")
    return 1 if killed else 0


if __name__ == "__main__":
    sys.exit(main())
