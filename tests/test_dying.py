"""tracer/record/dying.py's test of a process held dying, on /proc trees laid out as Linux's
(the real case, a process held by a real tracer, is in test_children.py)."""

import os
from pathlib import Path

from ada.tracer.record.dying import PF_SIGNALED, DyingWatch, held_by_frida, held_dying


def fake_proc(root: Path, pid: int, tracer: int, threads: dict[int, tuple[str, int]]) -> Path:
    """/proc/PID/status and task/TID/stat for threads {tid: (state, flags)}; the command name
    has a space and a parenthesis in it, as real ones may."""
    (root / str(pid) / "task").mkdir(parents=True)
    (root / str(pid) / "status").write_text(f"Name:\tw (x)\nState:\tt (tracing stop)\n"
                                            f"Tgid:\t{pid}\nTracerPid:\t{tracer}\n")
    for tid, (state, flags) in threads.items():
        (root / str(pid) / "task" / str(tid)).mkdir()
        (root / str(pid) / "task" / str(tid) / "stat").write_text(
            f"{tid} (w (x)) {state} 1 {pid} {pid} 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 1 0\n")
    return root


def test_a_struck_thread_in_a_tracing_stop_is_held_dying(tmp_path):
    proc = fake_proc(tmp_path, 10, 7, {10: ("t", PF_SIGNALED | 0x40), 11: ("R", 0x40)})
    assert held_dying(10, proc) == 7


def test_what_is_not_held_dying(tmp_path):
    # a core being written: struck, but not in a tracing stop
    assert held_dying(10, fake_proc(tmp_path / "a", 10, 7, {10: ("D", PF_SIGNALED)})) is None
    # stopped by its tracer, but no fatal signal struck it (a debugger's breakpoint)
    assert held_dying(10, fake_proc(tmp_path / "b", 10, 7, {10: ("t", 0x40)})) is None
    # struck, in a tracing stop, but no tracer (cannot be, and not ada's to say)
    assert held_dying(10, fake_proc(tmp_path / "c", 10, 0, {10: ("t", PF_SIGNALED)})) is None
    # gone
    assert held_dying(99, tmp_path / "a") is None


def as_thread_of(root: Path, tid: int, pid: int) -> Path:
    """/proc/TID/status for a tracer thread `tid` of process `pid`."""
    (root / str(tid)).mkdir()
    (root / str(tid) / "status").write_text(f"Name:\tpython\nTgid:\t{pid}\n")
    return root


def test_a_process_frida_holds_in_a_tracing_stop_is_held_by_frida(tmp_path):
    """Frida's tracer (in this process) and a thread in a tracing stop, no fatal signal yet:
    the arm64 guest's `forks` parent that faulted inside Frida's agent (twice)."""
    ours = as_thread_of(fake_proc(tmp_path / "a", 10, 7, {10: ("t", 0), 11: ("S", 0)}), 7,
                        os.getpid())
    assert held_by_frida(10, ours) == 7
    assert held_dying(10, ours) is None
    theirs = as_thread_of(fake_proc(tmp_path / "b", 10, 7, {10: ("t", 0)}), 7, 1)
    assert held_by_frida(10, theirs) is None  # a debugger's stop is the person's
    running = as_thread_of(fake_proc(tmp_path / "c", 10, 7, {10: ("S", 0)}), 7, os.getpid())
    assert held_by_frida(10, running) is None
    warned: list[str] = []
    watch = DyingWatch(warned.append, stuck_s=0, proc=ours)
    watch.check([10])
    watch.check([10])  # named once
    assert len(warned) == 1
    assert warned[0].startswith("pid 10 is held in a tracing stop (a fault inside Frida's")
    assert "The tracer is Frida, in ada itself (thread 7)" in warned[0]
    struck = as_thread_of(fake_proc(tmp_path / "d", 10, 7, {10: ("t", PF_SIGNALED)}), 7, 1)
    DyingWatch(warned.append, stuck_s=0, proc=struck).check([10])
    assert warned[1].startswith("pid 10 was struck by a fatal signal but has not ended")


def test_a_child_of_a_traced_process_held_before_frida_announced_it_is_named(tmp_path):
    """A child held at its fork that faulted in Frida's recovery is no traced process yet
    (Frida had not announced it), and its parent waits for it: the arm64 guest's `forks`
    child, held 120 s with no word. The watch looks at the traced processes' children too."""
    root = fake_proc(tmp_path, 10, 0, {10: ("S", 0)})  # the traced parent, running
    (root / "10" / "task" / "10" / "children").write_text("20 21 ")
    fake_proc(root, 20, 7, {20: ("t", 0)})  # held by Frida (thread 7 of this process)
    fake_proc(root, 21, 0, {21: ("S", 0)})  # another child, running
    as_thread_of(root, 7, os.getpid())
    warned: list[str] = []
    watch = DyingWatch(warned.append, stuck_s=0, proc=root)
    watch.check([10])
    watch.check([10])
    assert len(warned) == 1, warned
    assert warned[0].startswith("pid 20 (a child of a traced process, not announced by Frida) "
                                "is held in a tracing stop")
