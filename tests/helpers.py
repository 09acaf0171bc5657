"""Helpers shared by the tests: run the real `ada` command, and read what it recorded."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

import ada.atf as atf
from ada.atf import format as F

ROOT = Path(__file__).resolve().parents[1]
# The machines the inline engine has stubs for (agent/ada_inline_<arch>.js).
INLINE_MACHINES = ("x86_64", "AMD64", "aarch64", "arm64")


# ADA_TESTS_TOOLCHAIN=internal: every `ada trace` that names no --cmodule-toolchain compiles its
# hot path with TinyCC. scripts/arm64-tests.sh sets it for its Android-like pass (a phone has no
# gcc); the tests that name a toolchain still use the one they name.
TESTS_TOOLCHAIN = os.environ.get("ADA_TESTS_TOOLCHAIN")


def ada_command(*args: object) -> list[str]:
    """The argv of `ada ARGS`, as the installed package runs it (`python -m ada`)."""
    argv = list(map(str, args))
    if TESTS_TOOLCHAIN and argv[:1] == ["trace"] and "--cmodule-toolchain" not in argv:
        argv[1:1] = ["--cmodule-toolchain", TESTS_TOOLCHAIN]
    return [sys.executable, "-m", "ada", *argv]


# Frida 17.26's device manager starts its USB service, idund, in every process that asks for a
# device. When idund is slow to come up (seen once in the emulated arm64 machine under load), Frida
# itself prints this line to the process's stderr. It is Frida's, not ada's.
FRIDA_SERVICE_LINE = re.compile(r"^Unable to start idund: ")


def ada_lines(stderr: str) -> list[str]:
    """The lines ada wrote to stderr: all but the line Frida's own USB service may print."""
    return [line for line in stderr.splitlines() if not FRIDA_SERVICE_LINE.match(line)]


def run_ada(*args: object, timeout: float = 120, check: bool = False,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `ada ARGS`; print its output so a failing test shows it. If it has not ended after
    `timeout` s, SIGABRT has Python write every thread's stack to its stderr
    (PYTHONFAULTHANDLER), which the failure then shows: a hang says where it hangs."""
    cmd = ada_command(*args)
    env = {**(os.environ if env is None else env), "PYTHONFAULTHANDLER": "1"}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          cwd=ROOT, env=env) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            waiting = describe_descendants(proc.pid)
            proc.send_signal(signal.SIGABRT)
            try:
                stdout, stderr = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                stdout, stderr = proc.communicate()
            raise AssertionError(f"timed out after {timeout} s: {' '.join(cmd)}\nstdout:\n"
                                 f"{stdout[-4000:]}\nstderr, with each thread's stack:\n"
                                 f"{stderr[-12000:]}\nits processes as it timed out:\n"
                                 f"{waiting}") from None
    out = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    print(f"$ {' '.join(cmd)}\n[exit {out.returncode}]\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}")
    if check and out.returncode != 0:
        raise AssertionError(f"exit {out.returncode}: {' '.join(cmd)}\n{out.stderr}")
    return out


def describe_descendants(pid: int, others: tuple[int, ...] = ()) -> str:
    """Where `pid`'s descendants (and `others`: an orphaned child is no longer one) wait,
    thread by thread, from /proc (state, kernel wait channel, current system call, kernel
    stack where root may read it): a hang in a target (a fork that never returns, say) is
    then named, not only ada's side of it."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(c for c, parent in parents.items() if parent == p)
    lines = []
    for p in tree[1:] + [o for o in others if o not in tree]:
        base = Path(f"/proc/{p}")
        try:
            argv = base.joinpath("cmdline").read_bytes().replace(b"\0", b" ")
            argv = argv.decode(errors="replace")
            lines.append(f"pid {p} (parent {parents.get(p)}): {argv.strip()[:200]}")
            maps = base.joinpath("maps").read_text().splitlines()
            for task in sorted(base.joinpath("task").iterdir(), key=lambda t: int(t.name)):
                said = []
                for name in ("comm", "stat", "wchan", "syscall", "stack"):
                    try:
                        text = task.joinpath(name).read_text().strip()
                    except OSError:
                        continue
                    if name == "comm":
                        text = f"'{text}'"  # the thread's name: Frida's are named
                    elif name == "stat":
                        text = "state " + _state(task)
                    elif name == "syscall" and len(text.split()) == 9:  # nr, 6 args, sp, pc
                        sp, pc = (int(x, 16) for x in text.split()[-2:])
                        text = (f"syscall {text} (from {_place(pc, maps)}; code addresses "
                                f"on its stack: {', '.join(_stack_code(p, sp, maps)) or 'none'})")
                    elif name == "stack":
                        text = "stack " + " < ".join(line.split("] ", 1)[-1]
                                                     for line in text.splitlines()[:8])
                    else:
                        text = f"{name} {text}"
                    said.append(text)
                lines.append(f"  tid {task.name}: " + "; ".join(said))
            running = [t for t in base.joinpath("task").iterdir()
                       if _state(t) == "R"]
            if running:
                lines.extend(f"  tid {tid}: in user code at {', '.join(places)}"
                             for tid, places in _user_pcs(p).items())
        except OSError:
            continue
    return "\n".join(lines) or "(no process under it)"


def process_state(pid: int) -> str:
    """A process's state letter (R, S, T, t, Z...; ? once it is gone)."""
    return _state(Path("/proc") / str(pid))


def _state(task: Path) -> str:
    try:
        return task.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


def _user_pcs(pid: int, samples: int = 3) -> dict[str, list[str]]:
    """Where `pid`'s threads run in user code (a spin shows no system call): stopped with
    SIGSTOP a few times, 0.1 s apart, each thread's /proc syscall file then says `-1 sp pc`;
    each pc placed in the process's mappings (path+offset)."""
    seen: dict[str, list[str]] = {}
    for _ in range(samples):
        try:
            os.kill(pid, signal.SIGSTOP)
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
            deadline = time.monotonic() + 1
            while time.monotonic() < deadline and any(_state(t) not in ("T", "t", "?")
                                                      for t in tasks):
                time.sleep(0.01)
            maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
            for task in tasks:
                try:
                    fields = task.joinpath("syscall").read_text().split()
                except OSError:
                    continue
                if fields[:1] == ["-1"] and len(fields) == 3:
                    seen.setdefault(task.name, []).append(_place(int(fields[2], 16), maps))
        except OSError:
            break
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        time.sleep(0.1)
    return seen


def _stack_code(pid: int, sp: int, maps: list[str], size: int = 2048, most: int = 8) -> list[str]:
    """The words on a thread's stack, from `sp` up, that point into executable mappings:
    return addresses, mostly (a backtrace of sorts, without a debugger)."""
    code = []
    for line in maps:
        parts = line.split(maxsplit=5)
        if "x" in parts[1]:
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            code.append((lo, hi))
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            mem.seek(sp)
            data = mem.read(size)
    except OSError:
        return []
    places = []
    for i in range(0, len(data) - 7, 8):
        word = int.from_bytes(data[i:i + 8], "little")
        if any(lo <= word < hi for lo, hi in code):
            places.append(_place(word, maps))
            if len(places) == most:
                break
    return places


def _place(address: int, maps: list[str]) -> str:
    """`address` as path+offset from /proc/PID/maps lines."""
    for line in maps:
        parts = line.split(maxsplit=5)
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if lo <= address < hi:
            path = parts[5] if len(parts) > 5 else "[anonymous]"
            return f"{address:#x} ({path}+{address - lo + int(parts[2], 16):#x}, {parts[1]})"
    return f"{address:#x} (in no mapping)"


def describe_status(status: int | None) -> str:
    """A child's Popen.returncode in words: still running, its exit status, or its signal."""
    if status is None:
        return "still running"
    if status < 0:
        return f"killed by {signal.Signals(-status).name}"
    return f"exited with status {status}"


def session_path(out: subprocess.CompletedProcess) -> Path:
    """The session directory: the last line ada trace printed on stdout."""
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    assert lines, f"no session path on stdout\n{out.stderr}"
    path = Path(lines[-1])
    assert path.is_dir(), f"last stdout line is not a directory: {lines[-1]!r}"
    return path


def function_events(session: atf.SessionReader, name: str) -> dict[int, np.ndarray]:
    """Per thread_N: the index events of the function called `name`."""
    fids = [fid for fid, n in session.symbol_names().items() if n == name]
    assert len(fids) == 1, f"{name} in symbols: {fids}"
    result = {}
    for t in session.threads:
        ev = t.index.events
        result[t.id] = ev[ev["function_id"] == fids[0]]
    return result


def index_events(spec: list[tuple[int, int, int]]) -> np.ndarray:
    """Index events from (kind, depth, function_id) in order, a nanosecond apart."""
    ev = np.zeros(len(spec), dtype=F.INDEX_EVENT)
    ev["timestamp_ns"] = np.arange(len(spec))
    ev["event_kind"], ev["call_depth"], ev["function_id"] = zip(*spec)
    return ev


def assert_balanced(ev: np.ndarray, left: bool = False, open_at_end: int = 0) -> None:
    """One thread's events nest like a call stack, and their timestamps never go back.

    Each CALL's depth is the number of calls open before it; each RETURN closes the innermost
    open call (its depth, its function); nothing is left open at the end but `open_at_end`
    calls. left=True: an EXCEPTION event (a call that ended without returning: an exception
    unwound it or a longjmp left it) closes the innermost open call as a RETURN does;
    otherwise there must be none.
    """
    kinds = ev["event_kind"].astype(np.int64)
    depth = ev["call_depth"].astype(np.int64)
    ts = ev["timestamp_ns"].astype(np.int64)
    assert np.all(np.diff(ts) >= 0), "timestamps go backwards"
    closes = (kinds == F.EVENT_RETURN) | ((kinds == F.EVENT_EXCEPTION) if left else False)
    calls = kinds == F.EVENT_CALL
    assert np.all(calls | closes), "not CALL/RETURN" + ("/EXCEPTION" if left else "")
    open_before = np.cumsum(np.where(calls, 1, -1)) - np.where(calls, 1, -1)
    bad = np.flatnonzero(depth != np.where(calls, open_before, open_before - 1))
    assert len(bad) == 0, f"event {bad[0]}: depth {depth[bad[0]]} does not nest"
    if len(ev):
        assert open_before[-1] + (1 if calls[-1] else -1) == open_at_end, \
            f"not {open_at_end} call(s) left open at the end"
    for d in np.unique(depth):  # at each depth, CALL and its close alternate: pair them
        fids = ev["function_id"][depth == d]
        n = len(fids) // 2 * 2  # a CALL still open at the end has no close
        assert np.array_equal(fids[0:n:2], fids[1:n:2]), \
            f"a RETURN or EXCEPTION at depth {d} closes another call"


def trace_session(tmp_path: Path, *args: object, timeout: float = 120, quiet: bool = True,
                  env: dict[str, str] | None = None):
    """`ada trace [-q] -o tmp_path/traces ARGS`, which must succeed; returns (session,
    process). quiet=False keeps the status lines on stderr (the last one sums up); `env`:
    variables added to ada's environment."""
    out = run_ada("trace", *(["-q"] if quiet else []), "-o", tmp_path / "traces", *args,
                  timeout=timeout, env={**os.environ, **env} if env else None)
    assert out.returncode == 0, out.stderr
    return atf.open_session(session_path(out)), out


def assert_verify_clean(path: Path) -> None:
    out = run_ada("verify", path)
    assert out.returncode == 0 and "OK: clean" in out.stdout, out.stdout


def wait_for_index_events(out_dir: Path, events: int, timeout: float = 120.0) -> Path:
    """Wait until a live recording's thread_0/index.atf holds `events` events; its session dir.
    The bound is only for a recording that never gets there: the 30 s it was before passed
    once in the emulated arm64 machine, beside another test (ada starts there in 8-15 s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = list(out_dir.glob("session_*/pid_*/thread_0/index.atf"))
        if files and files[0].stat().st_size >= 64 + 32 * events:
            return files[0].parents[1]
        time.sleep(0.05)
    raise AssertionError(f"fewer than {events} events recorded under {out_dir} in {timeout} s")


def o_direct_works(directory: Path) -> bool:
    """Whether files in `directory` take O_DIRECT writes (not every filesystem does)."""
    import mmap
    import os

    if not getattr(os, "O_DIRECT", 0):
        return False
    probe = Path(directory) / ".o_direct_probe"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
    except OSError:
        return False
    block = mmap.mmap(-1, 4096)
    try:
        os.write(fd, block)
        return True
    except OSError:
        return False
    finally:
        block.close()
        os.close(fd)
        probe.unlink()


def read_line(proc: subprocess.Popen, timeout: float = 10.0) -> str:
    """One line of a child's stdout, or fail after `timeout` (never hangs the suite)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            return proc.stdout.readline()
    raise AssertionError("no output from the target")


class MapsWatch:
    """Every mapping a process has had, and when it was last seen (its /proc/PID/maps read
    every 20 ms on a thread of the test's): a program that dies as a recording ends can then
    be told where its pc and lr were, even in code unmapped just before (Frida's agent)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self.comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            self.comm = "?"
        self.seen: dict[tuple[int, int, str, int, str], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            try:
                text = Path(f"/proc/{self.pid}/maps").read_text()
            except OSError:
                return  # gone
            now = time.monotonic()
            for line in text.splitlines():
                parts = line.split(maxsplit=5)
                start, end = (int(x, 16) for x in parts[0].split("-"))
                path = parts[5] if len(parts) > 5 else "[anonymous]"
                self.seen[start, end, parts[1], int(parts[2], 16), path] = now

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def where(self, address: int) -> str:
        """`address` as module+offset, from the latest mapping seen to hold it."""
        holders = [(seen, key) for key, seen in self.seen.items() if key[0] <= address < key[1]]
        if not holders:
            return "in no mapping seen"
        seen, (start, _, perms, offset, path) = max(holders)
        ago = time.monotonic() - seen
        return f"{path}+{address - start + offset:#x} ({perms}, last seen {ago:.2f} s ago)"

    def describe_death(self) -> str:
        """What the kernel logged of the process's fatal signal (kernel.print-fatal-signals,
        on in the arm64 guest), its pc and lr placed in the mappings seen."""
        try:
            log = subprocess.run(["dmesg", "--notime"], capture_output=True, text=True,
                                 timeout=10).stdout.splitlines()
        except (OSError, subprocess.TimeoutExpired):
            return "the kernel's log cannot be read"
        # The kernel names the thread that faulted (its tid as PID) and the program's name.
        found = [i for i, line in enumerate(log)
                 if re.search(rf" PID: \d+ Comm: {re.escape(self.comm)} ", line)]
        if not found:
            return "the kernel's log names no fatal signal of it (kernel.print-fatal-signals)"
        said = []
        for line in log[found[-1]:found[-1] + 30]:
            m = re.match(r"\s*(pc|lr) : ([0-9a-f]+)|RIP: 0033:(0x[0-9a-f]+)", line)
            if m:
                name, value = (m.group(1), m.group(2)) if m.group(1) else ("pc", m.group(3))
                said.append(f"{name} {int(value, 16):#x} {self.where(int(value, 16))}")
        return "the kernel: " + ("; ".join(said) or log[found[-1]].strip())


@contextmanager
def spinning(exe: Path, gate: Path, *args: object):
    """tests/targets/inline_cases.c's spin case: its threads call work() until `gate` exists.
    Yields the process once it said "spinning"; kills it if it is still running after. A
    failure while it is dead says where it died, as far as the kernel told (MapsWatch)."""
    proc = subprocess.Popen([exe, "spin", gate, *map(str, args)], stdout=subprocess.PIPE,
                            text=True)
    watch = MapsWatch(proc.pid)
    try:
        assert read_line(proc) == "spinning\n"
        yield proc
    except AssertionError as e:
        if proc.poll() is None or proc.returncode >= 0:
            raise
        watch.stop()
        raise AssertionError(f"{e}\nthe program was {describe_status(proc.returncode)}; "
                             f"{watch.describe_death()}") from None
    finally:
        watch.stop()
        if proc.poll() is None:
            proc.kill()
