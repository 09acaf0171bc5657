"""How a traced process ended, what it took with it, and what the recording lost.

The agent's last words (agent/ada_ending.js) arrive as messages: `ada:final` as the process
exits, execs or dies of a fatal signal, with the ring heads at that moment (and, with the rpc
transport, every ring byte ada had not pulled), and `ada:exit-status` once exit()'s status is
known. TargetEnd keeps them; with Frida's detach reason they give the end's reason, and with
what the drain wrote, what never arrived. `losses` and `side_effects` put what was lost, and
what the hooks did to the target on the way, in ada's words.

Frida-free: the Recorder hands over plain values.
"""

from __future__ import annotations

from typing import Any, Callable

ENDED_WITH_TARGET = ("target-exited", "target-crashed", "target-killed", "exec")
EXPECTED_ENDS = ("interrupted", "duration", "terminated") + ENDED_WITH_TARGET


class TargetEnd:
    def __init__(self) -> None:
        self.crash: dict[str, Any] | None = None  # signal, address, thread... or Frida's summary
        self.exit_status: int | None = None
        self.handover: dict[str, Any] | None = None  # the last ada:final payload
        self.stopped: dict[str, Any] | None = None  # the agent's answer to ada's stop

    def on_final(self, payload: dict[str, Any]) -> None:
        self.handover = payload
        if payload.get("exitStatus") is not None:
            self.exit_status = int(payload["exitStatus"])
        if payload.get("crash"):
            self.crash = payload["crash"]

    def unrecorded_threads(self) -> int:
        """Threads that started while Frida prepared the exit and that ada took for Frida's,
        not recording them, but that Frida did not claim: the program's (ada_exit_window_thread
        in agent/ada_rings.c)."""
        return int((self.handover or {}).get("unrecordedThreads") or 0)

    def on_stopped(self, answer: dict[str, Any]) -> None:
        """ada stopped the recording, the process going on: what the agent said then."""
        self.stopped = answer

    def forks(self) -> tuple[int | None, list[int]]:
        """How many children the process forked while Frida held them (agent/ada_code.js,
        forkCounter; None where not counted) and, where ada stopped a process that goes on,
        those still held then, which Frida may announce after the recording."""
        if self.handover is not None and self.handover.get("forks") is not None:
            return int(self.handover["forks"]), []
        if self.stopped is not None and self.stopped.get("forks") is not None:
            return int(self.stopped["forks"]), [int(p) for p in self.stopped.get("children") or []]
        return None, []

    def on_exit_status(self, status: int) -> None:
        self.exit_status = int(status)

    def on_detached(self, reason: str, frida_crash: Any, exec_pending: bool = False) -> str:
        """The stop reason for Frida's detach `reason` (and crash report, where it has one).
        `exec_pending`: ada's own execve hook saw the process enter execve (where Frida does
        not hold it at its exec, Frida reports the new image as the process's end)."""
        if frida_crash is not None and self.crash is None:  # Darwin, Android
            self.crash = {"summary": getattr(frida_crash, "summary", str(frida_crash))}
        if self.crash is not None:
            return "target-crashed"
        if reason == "process-terminated" and exec_pending:
            return "exec"
        if reason == "process-terminated":
            # Without a handover the process neither called exit nor died of a fault the
            # agent saw: a signal it does not handle (SIGKILL, SIGTERM) or a raw exit syscall.
            return "target-exited" if self.handover is not None else "target-killed"
        if reason == "process-replaced":
            return "exec"  # the new image is traced anew (see recording.py)
        return f"detached: {reason}"

    def undelivered(self, shortfall: Callable[[list[list[Any]]], tuple[int, int]],
                    rpc: bool, stop_reason: str, link_lost: bool = False) -> tuple[int, int] | None:
        """(events, detail bytes) the target's rings held at its end that never reached the
        writers, by the heads it handed over (`shortfall` is Drain.shortfall); None when
        nobody counted them: the rings died with it (rpc), or the rpc link to them was lost
        (`link_lost`: gone, or a target that did not answer, answer.py)."""
        if self.handover is not None:
            return shortfall(self.handover["heads"])
        if rpc and (stop_reason in ENDED_WITH_TARGET or link_lost):
            return None
        return 0, 0


def killed_warning(reason: str) -> list[str]:
    """What to say of a process that ended without a word (`target-killed`): nothing else
    names that end, and the program did not finish as it meant to."""
    if reason != "target-killed":
        return []
    return ["the target was killed: it ended without calling exit() and without a fault ada "
            "saw (a signal it does not handle, such as SIGKILL or SIGTERM; a raw exit system "
            "call; or a fault inside Frida's own code); its exit status is unknown"]


def describe_crash(crash: dict[str, Any]) -> str:
    """One line for how the target died: signal, faulting address, thread."""
    if "signal" not in crash:
        return str(crash.get("summary"))
    text = f"{crash['signal']} at {crash['address']}"
    if crash.get("symbol"):
        text += f" ({crash['symbol']})"
    if crash.get("memoryAddress") is not None:
        text += f" ({crash['memoryOperation']} of {crash['memoryAddress']})"
    return text + f" in thread {crash['threadId']}"


def losses(summary: dict[str, Any], undelivered: tuple[int, int] | None,
           unrecorded_threads: int = 0) -> tuple[int, list[str]]:
    """Everything the recording lost (by the drain's summary, the undelivered count and the
    threads left unrecorded at the exit; an unknown count counts as a loss), and the warnings
    that say what was not said elsewhere."""
    warnings = []
    if unrecorded_threads:
        warnings.append(f"{unrecorded_threads:,} thread(s) of the program started while Frida "
                        "prepared the process's exit and were not recorded (ada took them for "
                        "Frida's own): their calls are lost, how many is unknown")
    if undelivered is None:
        warnings.append("the target's rings were not handed over (it was killed, or its link "
                        "was lost): the events it recorded after ada's last pull are lost, how "
                        "many is unknown")
    elif any(undelivered):
        warnings.append(f"{undelivered[0]:,} event(s) and {undelivered[1]:,} detail byte(s) "
                        "were still in the target's rings when it ended and could not be "
                        "delivered")
    if summary["unwritten_events"]:
        warnings.append(f"{summary['unwritten_events']:,} event(s) were left in the rings when "
                        "the recording stopped, unwritten")
    if summary["skipped_events"]:
        warnings.append(f"{summary['skipped_events']:,} event(s) of hooked calls went unrecorded "
                        "by the inline engine: calls made by a signal handler that interrupted "
                        "ada's own code, or nested past its million-call shadow stack")
    lost = (summary["index_drops"] + summary["overflow_events"] + summary["detail_drops"]
            + summary["skipped_events"]
            + summary["unwritten_events"] + (sum(undelivered) if undelivered else 1)
            + unrecorded_threads)
    return lost, warnings


def untraced_children(forks: int | None, still_held: list[int],
                      children: list[dict[str, Any]]) -> int | None:
    """The children a process forked that Frida never announced (TargetEnd.forks against
    the `children` Frida announced): ada learns of a held child only from Frida, so nothing
    of these is recorded. Each examined so far had died at its fork, inside Frida's agent as
    the child recovered from it (SIGSEGV); one that survives runs untraced. None where the
    forks were not counted."""
    if forks is None:
        return None
    announced = {c["pid"] for c in children if c["origin"] == "fork"}
    return max(0, forks - len(announced) - len(set(still_held) - announced))


def untraced_children_warning(untraced: int | None, forks: int | None) -> list[str]:
    if not untraced:
        return []
    return [f"{untraced:,} of the {forks:,} children this process forked were never announced "
            "by Frida, which held them at their fork: such a child dies there (Frida's agent "
            "faults in it as it recovers from the fork, mostly while messages pass between ada "
            "and the parent: --transport rpc) or runs untraced, and nothing of it is in this "
            "recording; --no-follow-children avoids it (docs/recording.md, \"Children and exec\")"]


def hold_warnings(stats: dict[str, Any] | None) -> list[str]:
    """What went less than right while ada held the program's threads to write code
    (agent/ada_code.js, ThreadHold): each a chance of the crash the hold is there to stop."""
    if not stats:
        return []
    out = []
    if stats.get("notHeld"):
        out.append(f"{stats['notHeld']:,} time(s) a thread of the program was not held while ada "
                   "wrote code (it blocked ada's signal, or did not stop within 300 ms): had it "
                   "run the bytes being written, it would have crashed")
    if stats.get("wentOn"):
        out.append(f"{stats['wentOn']:,} time(s) a held thread went on before ada had written "
                   "(held for more than a second: ada waited on a lock it held)")
    if stats.get("inside"):
        out.append(f"{stats['inside']:,} time(s) a thread stayed inside the first bytes of a "
                   "function ada was about to hook, each of the 50 times it looked: the inline "
                   "engine leaves such a function to the Interceptor, and the Interceptor "
                   "leaves it unhooked (hook_failures names it)")
    if stats.get("cutShort"):
        out.append(f"{stats['cutShort']:,} system call(s) of the program ended early (EINTR) "
                   "when ada's signal to hold a thread reached it just as it went to sleep: "
                   "poll, select, epoll_wait, nanosleep and the like are not restarted, and a "
                   "program that does not retry on EINTR may have acted on it")
    if stats.get("leftInside"):
        out.append(f"{stats['leftInside']:,} thread(s) were still in ada's signal handler a "
                   "second after ada took it out, as ada left: its code was then freed under "
                   "them, and the program may have crashed")
    return out


def side_effects(summary: dict[str, Any], function_name: Callable[[int], str | None],
                 engine: str = "frida", region: str | None = "file") -> list[str]:
    """What the target went through because of the hooks or the rings, in ada's words
    (`engine`: the one that hooked, inline or frida; `region`: where the rings were, a
    memfd or a /dev/shm file)."""
    out = []
    if summary["unbacked_threads"] and region == "memfd":
        out.append(f"{summary['unbacked_threads']:,} thread(s) found no memory for their rings "
                   "(a memory limit on the target): their events are counted as dropped; use "
                   "a smaller --ring-kb or fewer --max-threads")
    elif summary["unbacked_threads"]:
        out.append(f"{summary['unbacked_threads']:,} thread(s) found no room for their rings in "
                   "/dev/shm (it is full): their events are counted as dropped; use --transport "
                   "rpc, a smaller --ring-kb, or a larger /dev/shm")
    if summary["unwound_calls"] and engine == "frida":
        out.append(f"{summary['unwound_calls']:,} hooked call(s) were left by longjmp without a "
                   "return, and Frida keeps about 2.4 KB in the target for each until it exits: "
                   "exclude (-x) the functions longjmp leaves if the target's memory grows")
    if summary.get("trap_calls"):
        out.append(f"{summary['trap_calls']:,} call(s) came through breakpoint hooks (int3, for "
                   "functions no jump fits): a signal each, some microseconds; the manifest's "
                   "hook_breakpoints names the functions")
    if summary.get("paused_spawns"):
        out.append(f"{summary['paused_spawns']:,} posix_spawn call(s) (system() and popen() make "
                   "them too) ran with their thread's hooks paused, so that the spawned child's "
                   "exec does not end this recording: hooked functions called inside them are "
                   "not recorded")
    terminate = summary["terminate"]
    if terminate is not None:
        name = function_name(terminate["function_id"]) or \
            f"function {terminate['function_id']:#x}"
        said = (f"thread {terminate['thread_id']} called std::terminate inside "
                f"{terminate['open_calls']} hooked call(s), the innermost {name}")
        out.append(said + (": a C++ exception cannot unwind through a function Frida hooks; "
                           f"exclude it (-x '{name}') or trace with --hook-engine inline to "
                           "let the exception through" if engine == "frida" else
                           " (the inline engine lets exceptions through: none caught this one)"))
    return out
