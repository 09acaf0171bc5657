"""Recorder: the Frida side of recording one process: attach or spawn, load the agent, hook,
the agent's messages, stop, finalize.

The engine behind `ada trace`, kept apart from the CLI (which only parses, wires and
reports). The data's way (C hook -> ring -> Drain -> writers) and its state belong to the
Pipeline (pipeline.py), which the recorder builds once the agent is configured and asks.
Whatever ends a recording (Ctrl-C, SIGTERM, --duration, the target exiting or
crashing, an error) goes through the same stop path, so what was recorded is
always drained, finalized and described in manifest.json.
"""

from __future__ import annotations

import datetime as _dt
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import frida

from ada.atf import AtfError
from ada.atf.format import OS_ANDROID, OS_IOS, OS_LINUX, OS_MACOS

from ..errors import TracerError
from ..symbols.modules import string_slots
from .devices import attach, find_app_pid, program_path
from .frida_errors import FRIDA_ERRORS, describe_frida_error, explain_attach_error
from .ending import (EXPECTED_ENDS, TargetEnd, hold_warnings, killed_warning, losses,
                     side_effects, untraced_children, untraced_children_warning)
from .held import resume_and_release
from .hooked import HookedFunctions
from .leaving import tracer_of, wait_for_frida_to_leave
from .manifest import RecordingFacts, build_manifest
from .options import ProcessPlace, Target, TraceOptions
from . import protocol
from .agent_code import agent_script, hot_path_source
from .answer import Answers, NoAnswer
from .pipeline import Pipeline, RecordingStatus, RingSpace, Summaries, inline_probe
from .protocol import read_message
from .rings import clock_ns
from .selection import describe_missed, describe_selection
from .shield import shielded
from .transport import resolve_transport


# A dying process takes its script with it: an rpc pull can fail before Frida's detached event
# says why (a kill, a crash). A lost link waits this long for that event to name the end.
DETACH_GRACE_S = 2.0
MANIFEST_ROOM_BYTES = 256 << 10  # held on the disk for the final manifest, + 1 KiB a function


@dataclass
class RecordingResult:
    path: Path
    pid: int | None
    end_reason: str
    clean: bool
    events: int
    functions: int  # matched over the whole recording (0: the selection never matched)
    warnings: list[str] = field(default_factory=list)


class Recorder:
    """One recording of one process, into one session directory."""

    def __init__(self, device: frida.core.Device, target: Target, options: TraceOptions,
                 warn: Callable[[str], None] = lambda m: None,
                 info: Callable[[str], None] = lambda m: None,
                 on_attached: Callable[[frida.core.Session], None] = lambda s: None, *,
                 place: ProcessPlace | None = None,
                 wake: Callable[[], None] = lambda: None) -> None:
        self.device = device
        self.wake = wake  # the recording loop: something for check() to do
        self.place = place or ProcessPlace()
        self.on_attached = on_attached  # e.g. --p2p setup, once attached
        self.target = target
        self.options = options
        self.warn = warn
        self.info = info
        self.stop_event = threading.Event()
        self.stop_reason = "interrupted"
        self.end = TargetEnd()  # how the process ended, from the agent's last words
        # Calls into the agent: bounded once the recording ends (answer.py); the pid after attach.
        self.answers = Answers()
        # Left in the target's rings at its end and never received (events, detail bytes);
        # None when the target died without saying how much (set by stop()).
        self.undelivered: tuple[int, int] | None = (0, 0)
        self.pid: int | None = None
        self.spawned = False
        self.suspended = False  # spawned, or a child held at its fork or exec: resume in start()
        self.children: list[dict[str, Any]] = []  # seen at fork or exec (recording.py)
        self.holds_children = False  # Frida holds children at fork (see _hold_children)
        self.children_untraced: int | None = None  # forked, never announced (stop(); None: not counted)
        self.frida_session: frida.core.Session | None = None  # "session" is the directory
        self.script: frida.core.Script | None = None
        self.space: RingSpace | None = None  # laid out as the agent loads
        self.pipeline: Pipeline | None = None  # built whole once the agent is configured
        self._early_finals: list[bytes] = []  # handed over before it was: see _take_final
        self._finals_lock = threading.Lock()
        self.agent_info: dict[str, Any] = {}
        self.clock_anchors: list[dict[str, Any]] = []  # recording clock vs. wall clock
        self.thread_hold: dict[str, int] | None = None  # the agent's ThreadHold.stats, latest
        self._late_functions: list[list[dict[str, Any]]] = []  # hooked as modules loaded
        self.hooked = HookedFunctions(options.selection, options.triggers, warn)
        self.transport = resolve_transport(options.transport, device)
        self.record_start_ns = 0
        self.started_at = _dt.datetime.now()
        self.t0 = time.monotonic()
        self._detached = False
        self._detached_event = threading.Event()

    # --- stop requests (any thread) ----------------------------------------------

    def request_stop(self, reason: str) -> None:
        """Stop for `reason` (the first one stands); the recording loop is woken at once, so
        a program that ended is not left waiting for its next tick."""
        if not self.stop_event.is_set():
            self.stop_reason = reason
            self.stop_event.set()
            self.wake()

    def _on_detached(self, reason: str, crash: Any) -> None:
        self._detached = True
        exec_pending = self.pipeline is not None and bool(self.pipeline.rings.header("exec_pending"))
        self.request_stop(self.end.on_detached(reason, crash, exec_pending))
        self._detached_event.set()

    def _on_message(self, message: dict, data: Any) -> None:
        """The agent's messages (protocol.py), on Frida's thread."""
        m = read_message(message, data)
        if m is None:
            return
        payload = m.payload
        if m.kind == "error":
            self.warn(f"agent error: {payload['description']}")
        elif m.kind == protocol.FINAL:  # the process is exiting, exec'ing or crashing
            if m.data is not None:
                self._take_final(m.data)
            self.end.on_final(payload)
            self._acknowledge()
        elif m.kind == protocol.EXIT_STATUS:
            self.end.on_exit_status(payload["status"])
            self._acknowledge()
        elif m.kind == protocol.MODULE_LOADED:
            self._late_functions.append(payload["functions"])  # strings: see check()
            self.wake()
            self.hooked.add(payload["functions"], payload["triggers"], payload["failures"],
                            payload["hits"], payload.get("fallbacks"), payload.get("aliases"),
                            payload.get("breakpoints"), payload.get("late"),
                            payload.get("writesAwaited"))
            self.info(f"{payload['module']} loaded: hooked {payload['hooked']} function(s)"
                      + (f" and {len(payload['triggers'])} trigger(s)"
                         if payload["triggers"] else ""))
        elif m.kind == protocol.MODULE_UNLOADED:
            self.hooked.unload(payload["path"], payload["base"], int(payload["removedNs"]))
        elif m.kind == protocol.DATA and self.pipeline is not None and m.data is not None:
            self.pipeline.take_push(m.data)

    def _take_final(self, data: bytes) -> None:
        """Ring bytes a dying target handed over. A target that ends as its hooks go in can
        hand them over before the pipeline exists: they wait here for it (see prepare())."""
        with self._finals_lock:
            if self.pipeline is None:
                self._early_finals.append(data)
            else:
                self.pipeline.take_final(data)

    def _acknowledge(self) -> None:
        """Let a dying target go on: what it handed over is queued here."""
        try:
            if self.script is not None:
                self.script.post(protocol.ack())
        except FRIDA_ERRORS:
            pass  # gone already

    # --- the recording ------------------------------------------------------------

    def prepare(self) -> None:
        """Attach (spawning first for -f), load the agent, resolve and hook. Raises TracerError."""
        _check_output_dir(self.options.output)
        try:
            with shielded(self.info):  # Frida's spawn and injection are not cut short
                self._attach()
            self.answers.pid = self.pid if self.device.type == "local" else None
            self._load_agent()
            self._hook()
            assert self.space is not None and self.pid is not None
            _test_delay("ADA_TEST_PIPELINE_DELAY_S")
            pipeline = Pipeline(self.space, self.script, self.agent_info, pid=self.pid,
                                os_id=_os_code(self.device, self.agent_info),
                                started=self.started_at, place=self.place,
                                name_trigger=self.hooked.trigger_name, answers=self.answers)
            with self._finals_lock:  # in the order they came
                for data in self._early_finals:
                    pipeline.take_final(data)
                self._early_finals.clear()
                self.pipeline = pipeline
            self._write_first_manifest(self.pipeline)
        except FRIDA_ERRORS as e:
            # Worded before _abandon, which kills a spawned target.
            message = explain_attach_error(e, self.device, self.target, self.pid, self._detached)
            self._abandon()
            raise TracerError(message) from None
        except (TracerError, AtfError, KeyboardInterrupt):
            self._abandon()  # Ctrl-C while attaching leaves no suspended target behind
            raise

    def _write_first_manifest(self, pipeline: Pipeline) -> None:
        """manifest.json from the start (a session cut short by anything still has one), and
        room held on the disk for the last one (see stop())."""
        manifest = self._manifest(pipeline, pipeline.summaries(), _dt.datetime.now(), False,
                                  "recording")
        del manifest["threads"]  # none yet: until the end, readers find them by scanning
        pipeline.write_manifest(manifest)
        pipeline.reserve_manifest_room(MANIFEST_ROOM_BYTES + 1024 * len(self.hooked.functions))

    def _attach(self) -> None:
        kind, value = self.target.kind, self.target.value
        if kind == "file":
            argv = list(value)  # type: ignore[call-overload]
            self.pid = self.device.spawn(program_path(self.device, argv[0]), argv=argv)
            self.spawned = self.suspended = True
        elif kind == "pid":
            self.pid = int(value)  # type: ignore[call-overload]
            self.suspended = self.place.gated
        elif kind == "identifier":
            self.pid = find_app_pid(self.device, str(value))
        else:
            self.pid = self.device.get_process(str(value)).pid
        self.frida_session = attach(self.device, self.pid, self.info)
        self.frida_session.on("detached", self._on_detached)
        self.on_attached(self.frida_session)

    def _hold_children(self) -> None:
        """Have Frida hold this process's children at their fork, and the process at its exec,
        where ada follows them (recording.py), or where the hot path cannot tell a child from
        this process: ungated, a child runs the parent's hooks, whose rings are shared memory.

        Frida's recovery from a held fork is not reliable: its host re-creates the child's
        agent thread through ptrace while the child runs, and about 1 child in a few hundred
        resumed at once then crashes inside Frida's allocator, stopped by that ptrace for ever
        (frida 17.26.2; scripts/frida_fork_repro.py shows it without ada; held.py's SETTLE_S
        is what ada does for the children it holds). So a child ada does not follow is
        not held where the hot path knows it is in a child (wipesOnFork): it runs the
        parent's hooks, which record nothing there, and Frida's fork machinery stays out."""
        assert self.frida_session is not None and self.agent_info is not None
        assert self.script is not None
        # ADA_TEST_NO_WIPEONFORK=1 (tests only): the host acts as where the hot path cannot
        # tell a child (macOS, Linux before 4.14): every child held, those not followed let go
        wipes = self.agent_info.get("wipesOnFork") and \
            os.environ.get("ADA_TEST_NO_WIPEONFORK") != "1"
        self.holds_children = self.options.follow_children or not wipes
        if self.holds_children:
            self.frida_session.enable_child_gating()
            noted = self.script.exports_sync.note_children()  # see unannounced_children
            self.agent_info["forkGate"] = (noted or {}).get("forkGate")
            self.script.exports_sync.watch_spawn()  # see watchSpawn in ada_hooking.js
        else:
            self.script.exports_sync.watch_forks_and_exec()

    def _load_agent(self) -> None:
        assert self.frida_session is not None
        with shielded(self.info):
            self.script = self.frida_session.create_script(agent_script(), name="ada-agent",
                                                           runtime="qjs")
            self.script.on("message", self._on_message)
            self.script.load()
        self.space = RingSpace(self.options, self.transport, self.info)
        toolchain = resolve_toolchain(self.options.toolchain, self.device)
        self.agent_info = self.space.configure_agent(
            self.script, toolchain, hot_path_source(), self.pid,
            build_here=toolchain != "internal" and self.device.type == "local")
        self.transport = self.space.transport
        info = self.agent_info
        self._hold_children()
        if info.get("clockAnchor"):
            self.clock_anchors.append(anchor(info["clockAnchor"], "start"))
        if info.get("hotPathRefused"):
            self.info(f"Frida could not load the hot path ada built ({info['hotPathRefused']}); "
                      "the target compiled it")
        if info["toolchain"] == "external":
            where = {"host": ", by ada, now cached", "host-cache": ", by ada, cached"}
            self.info("hot path compiled by the system toolchain (gcc -O2"
                      f"{where.get(info.get('hotPathBuilt'), ' in the target')})")
        elif info.get("toolchainFallback"):
            self.info(f"hot path compiled by Frida's TinyCC; the system toolchain could not: "
                      f"{info['toolchainFallback']}")
        probe = inline_probe()
        if probe is not None and info.get("hookEngine") == "inline":
            self.warn(f"ADA_INLINE_PROBE={probe}: the inline hot path stops part way, to "
                      "measure it; no call is recorded")

    def _string_args(self, functions: list[dict[str, Any]]) -> None:
        """Tell the agent which arguments are C strings, to capture with their detail: for
        the functions found at start before they are hooked; for those of modules loaded
        later just after (their first calls show `char *` arguments in hex)."""
        if self.options.detail == "off" or not functions:
            return
        try:
            masks = string_slots(functions, str(self.agent_info.get("arch")),
                                 self.options.symbols)
        except Exception as e:  # noqa: BLE001 (debug info is a bonus: never fail recording)
            self.warn(f"C string arguments will not be captured: {e}")
            return
        if masks:
            self.script.exports_sync.set_string_args(masks)

    def _hook(self) -> None:
        """Apply the selection (and the triggers) in the target and hook what matched; modules
        that load later are hooked as they load (reported in _on_message)."""
        assert self.script is not None
        api = self.script.exports_sync
        found = api.resolve(self.options.selection, self.options.triggers)
        self.hooked.symbol_hints = list(found.get("symbolHints") or self.hooked.symbol_hints)
        self._check_matches(found)
        self._string_args(found["functions"])
        hooked = api.hook()
        self.thread_hold = hooked.get("hold")
        self.hooked.add(found["functions"], found["triggers"], hooked["failures"], found["hits"],
                        hooked.get("fallbacks"), hooked.get("aliases"), hooked.get("breakpoints"),
                        hooked.get("late"), hooked.get("writesAwaited"))
        if found["functions"] and hooked["hooked"] == 0:
            raise TracerError("none of the matched functions could be hooked")
        refused = sum(1 for f in hooked["failures"] if not f.get("trigger"))
        self.info(f"hooked {hooked['hooked']} function(s) in pid {self.pid}"
                  + (f" ({refused} could not be, listed in the manifest)" if refused else "")
                  + f"; recording ({self.transport} transport"
                  + (f", {self.agent_info.get('region')} region)" if self.transport == "shm"
                     else ")"))

    def _check_matches(self, found: dict[str, Any]) -> None:
        """Nothing matched at start is an error only when no module loading later could match."""
        o = self.options
        waiting = found["waiting"]
        if not found["functions"] and not waiting and not found["anyModule"]:
            raise TracerError("no function matched the selection" + (
                self._symbol_hint() or f" ({describe_selection(o.selection)})"))
        if o.triggers and not found["triggers"] and not found["triggersWaiting"] \
                and not found["triggersAnyModule"]:
            raise TracerError(f"no function matched --trigger ({describe_selection(o.triggers)})")
        if found["functions"]:
            self.info(f"{len(found['functions'])} function(s) matched")
        if o.triggers and found["triggers"]:
            self.info(f"{len(found['triggers'])} trigger function(s) matched")
        if waiting:
            self.info(f"waiting for {', '.join(waiting)} to load")
        elif not found["functions"]:
            self.info("no function matched yet: waiting for modules that load later")

    def _symbol_hint(self) -> str:
        """The -i items that symbol tables could satisfy, said when nothing matched."""
        hinted = [describe_missed(item, n) for item, n
                  in zip(self.options.selection, self.hooked.symbol_hints) if n]
        return f": {'; '.join(hinted)}" if hinted else ""

    def trigger_now(self, kind: str) -> None:
        """A trigger from the person at the terminal (SIGUSR1, Enter); ignored without windows."""
        if self.pipeline is not None:
            self.pipeline.trigger(kind)

    def start(self) -> None:
        """Start draining and let the target run (a spawned or gated process was suspended)."""
        self.t0 = time.monotonic()
        self.record_start_ns = clock_ns()
        pipeline = self._prepared()
        pipeline.start(self.record_start_ns, self.options.trigger_at_ms)
        if self.suspended:
            try:
                self.device.resume(self.pid)
            except FRIDA_ERRORS as e:
                self.request_stop(f"error: cannot resume: {describe_frida_error(e)}")

    def check(self) -> bool:
        """Turn a failed drain or a lost link into a stop; True once a stop is requested.
        Functions hooked as their module loaded get their C string arguments here (an RPC
        cannot be made from the message handler)."""
        while self._late_functions and not self.stop_event.is_set():
            try:
                self._string_args(self._late_functions.pop(0))
            except FRIDA_ERRORS:
                self._late_functions.clear()  # the process is going: nothing to capture
        failure = self._prepared().failure()
        if failure is not None:
            if failure.startswith("connection-lost"):
                self._detached_event.wait(DETACH_GRACE_S)  # its reason, if it comes, stands
            self.request_stop(failure)
        return self.stop_event.is_set()

    def unannounced_children(self) -> list[int]:
        """The children this process had forked, and that were still held at their fork, as
        it ended or as ada stopped it, where Frida holds them (agent/ada_ending.js,
        noteChildren): Frida may announce them only after (recording.py waits for them).
        Empty before either."""
        ended = self.end.handover or self.end.stopped
        if not self.holds_children or ended is None:
            return []
        return [int(pid) for pid in ended.get("children") or []]

    def progress(self) -> RecordingStatus:
        elapsed = time.monotonic() - self.t0
        if self.pipeline is None:
            return RecordingStatus(elapsed, 0, 0, 0)
        return self.pipeline.status(elapsed, self.undelivered)

    def stop(self, before_detach: Callable[[Recorder], None] = lambda r: None) -> RecordingResult:
        """Unhook, drain what is left, finalize files and manifest, then `before_detach`
        (Recording lets children still held go while this session holds them), detach."""
        pipeline = self._prepared()
        warnings: list[str] = []
        self.answers.ending.set()
        if not self._detached and self.script is not None:
            exports = self.script.exports_sync
            try:
                answer = self.answers.ask("clock anchor", exports.clock_anchor)
                self.clock_anchors.append(anchor(answer, "end"))
            except (NoAnswer, *FRIDA_ERRORS):
                pass  # the process is gone or does not run: the start's anchor stays
            try:
                stopped = self.answers.ask("stop", exports.stop)
                if isinstance(stopped, dict):
                    self.end.on_stopped(stopped)
                    if stopped.get("hold") is not None:
                        self.thread_hold = stopped["hold"]
            except NoAnswer:
                pass  # said below
            except FRIDA_ERRORS as e:
                warnings.append(f"could not unhook cleanly: {describe_frida_error(e)}")
            warnings.extend(hold_warnings(self.thread_hold))
        never = self.hooked.never_matched(hints=True)
        if never:
            warnings.append(f"never matched: {'; '.join(never)}")
        pipeline.stop(self._release_waiters)
        if self.answers.unanswered is not None:
            warnings.append(f"{self.answers.unanswered}. ada left the process as it was: "
                            "what it recorded until then is kept, and its hooks come out when "
                            "it runs again (what it does then is not recorded)")
        error = pipeline.error
        if error is not None:
            self.stop_reason = f"error: {error}"
        if pipeline.clock_resets:
            warnings.append(f"the CPU's time-stamp counter went backwards "
                            f"{pipeline.clock_resets} time(s) (a suspend or a VM migration): "
                            "events recorded just before that have unreliable timestamps; "
                            "--clock-source os avoids this")
        ended_at = _dt.datetime.now()
        try:
            pipeline.finalize()
        except AtfError as e:  # what could not be finished reads as recovered, as after a crash
            warnings.append(f"could not finish every file: {e}")
            if error is None:
                self.stop_reason = f"error: {e}"
        self.undelivered = pipeline.undelivered(self.end, self.stop_reason)
        summaries = pipeline.summaries()
        if not self.holds_children:
            warnings.extend(self._forked_children(summaries.drain))
        lost, said = losses(summaries.drain, self.undelivered, self.end.unrecorded_threads())
        forks, still_held = self.end.forks() if self.holds_children else (None, [])
        self.children_untraced = untraced_children(forks, still_held, self.children)
        listed = {c["pid"] for c in self.children}  # still held as ada stopped: not followed
        self.children.extend({"pid": pid, "origin": "fork", "followed": False}
                             for pid in still_held if pid not in listed)
        warnings.extend(killed_warning(self.stop_reason) + said
                        + untraced_children_warning(self.children_untraced, forks)
                        + side_effects(summaries.drain, self.hooked.function_name,
                                       self.agent_info.get("hookEngine", "frida"),
                                       self.agent_info.get("region")))
        clean = lost == 0 and not self.children_untraced and self.stop_reason in EXPECTED_ENDS
        try:
            pipeline.write_manifest(self._manifest(pipeline, summaries, ended_at, clean),
                                    final=True)
        except AtfError as e:  # the one written at the start stays
            warnings.append(f"could not write the final manifest: {e}")
        before_detach(self)
        self._detach()
        pipeline.close()
        return RecordingResult(pipeline.path, self.pid, self.stop_reason, clean,
                               pipeline.events, len(self.hooked.functions), warnings)

    def _release_waiters(self) -> None:
        """Set the stop flag in the target (once everything left was drained): a thread that
        finds its ring full drops from then on instead of waiting for a drain that ends."""
        if self._detached or self.script is None:
            return
        try:
            self.answers.ask("release", self.script.exports_sync.release_waiters)
        except (NoAnswer, *FRIDA_ERRORS):
            pass  # the process (and its waiting threads) are gone, or do not run

    def _forked_children(self, drain: dict[str, Any]) -> list[str]:
        """The children this process forked, as the agent kept them (not held by Frida, they
        reach recording.py's list no other way); a warning if there were more to keep."""
        pids, forks = drain.get("forked", ([], 0))
        self.children.extend({"pid": pid, "origin": "fork", "followed": False} for pid in pids)
        if forks > len(pids):
            return [f"{forks:,} children were forked: the manifest lists the first {len(pids)}"]
        return []

    def _prepared(self) -> Pipeline:
        """The pipeline, for what runs after prepare() (it is built there)."""
        if self.pipeline is None:
            raise TracerError("internal: the recording was used before prepare()")
        return self.pipeline

    def _manifest(self, pipeline: Pipeline, summaries: Summaries, ended_at: _dt.datetime,
                  clean: bool, end_reason: str | None = None) -> dict[str, Any]:
        arch, os_id, clock_type = pipeline.file_codes()
        facts = RecordingFacts(
            options=self.options, target=self.target, pid=self.pid, spawned=self.spawned,
            device={"id": self.device.id, "name": self.device.name, "type": self.device.type},
            agent=self.agent_info, arch=arch, os_id=os_id, clock_type=clock_type,
            transport=self.transport, frida_version=frida.__version__,
            hooked=self.hooked.snapshot(), never_matched=self.hooked.never_matched(),
            started_at=self.started_at, ended_at=ended_at, clean=clean,
            end_reason=end_reason or self.stop_reason, crash=self.end.crash,
            exit_status=self.end.exit_status, undelivered=self.undelivered,
            parent_pid=self.place.parent_pid, origin=self.place.origin, children=self.children,
            children_untraced=self.children_untraced, clock_anchors=self.clock_anchors,
            thread_hold=self.thread_hold)
        return build_manifest(facts, summaries.drain, summaries.sink, summaries.transport)

    def _detach(self) -> None:
        self._unload_script()
        if self.frida_session is None or self._detached:
            return
        if self.answers.unanswered is not None:  # Frida's detach waits for it to run again
            threading.Thread(target=self._detach_quietly, name="ada-detach", daemon=True).start()
            return
        # A local target must not exit while Frida cleans up after its agent (leaving.py).
        local = self.device.type == "local" and self.pid is not None
        tracer = tracer_of(self.pid) if local else None
        try:
            self.answers.ask("detach", self.frida_session.detach)
        except (NoAnswer, *FRIDA_ERRORS):
            return  # gone, or left as it is (it does not run): no cleanup to wait for
        if local:
            wait_for_frida_to_leave(self.pid, tracer)

    def _detach_quietly(self) -> None:
        try:
            self.frida_session.detach()
        except FRIDA_ERRORS:
            pass  # gone meanwhile

    def _unload_script(self) -> None:
        try:
            if self.script is not None and not self._detached:
                self.answers.ask("unload", self.script.unload)
        except (NoAnswer, *FRIDA_ERRORS):
            pass

    def _abandon(self) -> None:
        """Undo a failed prepare(): no hooks left behind, no suspended orphan. An ending: the
        calls it makes are bounded (answer.py), as a stop's are, so a target stopped as the
        hooks went in (a debugger, Ctrl-Z) cannot hold ada here."""
        self.answers.ending.set()
        if self.pid is not None and self.suspended and not self.spawned and \
                self.frida_session is not None and not self._detached:
            # A child held at its fork goes on, untraced: its hooks go first, then it is
            # resumed with the session still open (see held.py), which closes after.
            self._unload_script()
            resume_and_release(self.device, self.pid, self.frida_session)
        else:
            self._detach()
            if self.pid is not None and self.suspended:
                try:  # a spawned target dies with the failure; any other held one goes on
                    if self.spawned:
                        self.device.kill(self.pid)
                    else:
                        self.device.resume(self.pid)
                except FRIDA_ERRORS:
                    pass
        if self.answers.unanswered is not None:
            self.warn(f"{self.answers.unanswered}. ada left the process as it was: its hooks "
                      "come out when it runs again")
        if self.pipeline is not None:
            self.pipeline.close()
        elif self.space is not None:
            self.space.close()


def resolve_toolchain(choice: str, device: frida.core.Device) -> str:
    """auto: the system compiler where there can be one (the local device), else TinyCC.

    Phones and remote servers have no compiler for the agent to run, so auto means TinyCC there.
    """
    if choice == "auto":
        return "fallback" if device.type == "local" else "internal"
    return choice


def _test_delay(name: str) -> None:
    """Tests only: wait as long as the environment variable `name` says, as a slow machine
    (the emulated arm64 one) takes that long at this step; the target may end meanwhile."""
    delay = float(os.environ.get(name) or 0)
    if delay > 0:
        time.sleep(delay)


def _check_output_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TracerError(f"output directory {path} is not writable: {e.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise TracerError(f"output directory {path} is not writable")


def anchor(reading: dict[str, str], at: str) -> dict[str, Any]:
    """The agent's clockAnchor() (decimal strings) as the manifest keeps it."""
    return {"at": at, "clock_ns": int(reading["clockNs"]),
            "realtime_ns": int(reading["realtimeNs"]),
            "uncertainty_ns": int(reading["uncertaintyNs"])}


def _os_code(device: frida.core.Device, agent_info: dict[str, Any]) -> int:
    """ATF os code: the agent knows darwin/linux, the device knows iOS or Android."""
    try:
        os_id = device.query_system_parameters().get("os", {}).get("id")
    except FRIDA_ERRORS:
        os_id = None
    if agent_info["platform"] == "darwin":
        return OS_IOS if os_id == "ios" else OS_MACOS
    return OS_ANDROID if os_id == "android" else OS_LINUX
