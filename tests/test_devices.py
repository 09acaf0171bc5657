"""Devices and transports that can be exercised here: a real remote device on loopback
(frida.PortalService joined by the target), the RPC transport on the local device, and option
errors. USB iOS/Android devices are not available on this machine."""

import queue
import socket
import subprocess
import threading
import time

import frida
import numpy as np
import pytest

import ada.atf as atf
from ada.atf import format as F
from helpers import (ROOT, ada_command, ada_lines, assert_verify_clean, function_events, run_ada,
                     session_path, spinning, wait_for_index_events)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("transport", ["shm", "rpc"])
def test_local_transports_give_the_same_exact_counts(tmp_path, target_bin, transport, engine):
    n = 4000
    out = run_ada("trace", *engine, "-q", "-o", tmp_path, "--transport", transport, "-f",
                  target_bin("exact_calls"), str(n), "8", "-i", "exact_calls!work")
    assert out.returncode == 0, out.stderr
    s = atf.open_session(session_path(out))
    assert sorted(len(ev) for ev in function_events(s, "work").values()) == \
        [2 * (n + i) for i in range(8)]
    assert s.manifest.document["transport"]["kind"] == transport
    assert_verify_clean(s.path)


def test_rpc_detail_lane_matches(tmp_path, target_bin, engine):
    out = run_ada("trace", *engine, "-q", "-o", tmp_path, "--transport", "rpc", "--detail", "-f",
                  target_bin("regs"), "-i", "regs!add")
    assert out.returncode == 0, out.stderr
    s = atf.open_session(session_path(out))
    t = s.threads[0]
    assert len(t.detail) == 6
    assert [t.get_detail_for(i).return_value for i in (1, 3)] == [7, 123]
    assert_verify_clean(s.path)


def test_a_push_slower_than_the_stall_limit_is_no_host_gone(tmp_path, target_bin, monkeypatch):
    """A slow link (the emulated arm64 machine's portal, 1 MB/s) holds the rpc transport's
    pushes back past the time a waiting thread trusts a silent host (rpc_stall_s). Here two
    pushes each take 3.5 s to arrive and the trust is 1.5 s, in a recording run in this
    process: the host beats by message (every tenth of the trust, 0.15 s here), so the
    threads spinning into 4 KB rings wait and drop nothing (917 events dropped when the
    host's pulls alone beat; 229 to 2,262 when the beats rested while the drain found
    nothing, the pushes on their way). A trust of 0.5 s was too tight for the emulated arm64
    machine under a full test run: 12 events dropped in its 25th run, presumably a beat more
    than 0.5 s late there; and the agent's stop(), which keeps the beats waiting, now renews
    the beat itself as it goes (1 event dropped in 3 of 25 runs there before)."""
    from ada.tracer.cli import main
    from ada.tracer.record import pipeline

    configure, take_push = pipeline.RingSpace.configure_agent, pipeline.Pipeline.take_push
    pushes = []

    def trust_a_second_and_a_half(self, *args, **kwargs):
        self.options.rpc_stall_s = 1.5
        return configure(self, *args, **kwargs)

    link: queue.SimpleQueue = queue.SimpleQueue()  # pushes on their way, in order

    def carry():
        while True:
            pipe, data = link.get()
            pushes.append(len(data))
            if len(pushes) in (20, 21):  # what follows waits behind it, as on a slow link
                time.sleep(3.5)
            take_push(pipe, data)

    threading.Thread(target=carry, daemon=True).start()
    monkeypatch.setattr(pipeline.RingSpace, "configure_agent", trust_a_second_and_a_half)
    monkeypatch.setattr(pipeline.Pipeline, "take_push",
                        lambda self, data: link.put((self, data)))
    gate = tmp_path / "gate"
    with spinning(target_bin("inline_cases"), gate) as proc:
        assert main(["trace", "-q", "-o", str(tmp_path / "traces"), "--transport", "rpc",
                     "--ring-kb", "4", "-p", str(proc.pid), "-i", "inline_cases!work",
                     "--duration", "9"]) == 0  # the link empties before the stop's pulls
        gate.touch()
        assert proc.wait(timeout=30) == 0
    s = atf.open_session(next((tmp_path / "traces").glob("session_*/pid_*")))
    m = s.manifest.document
    assert m["transport"]["kind"] == "rpc" and len(pushes) > 21 and link.empty()
    assert m["drops"]["waits"] > 0  # the threads did wait, on the slow pushes
    assert m["drops"]["index"] == 0 and m["end"]["clean"]
    assert sum(len(ev) for ev in function_events(s, "work").values()) > 256


class Portal:
    """A real remote device on loopback: a PortalService that local processes join."""

    def __init__(self) -> None:
        self.cluster, self.control = free_port(), free_port()
        self.service = frida.PortalService(
            frida.EndpointParameters(address="127.0.0.1", port=self.cluster),
            frida.EndpointParameters(address="127.0.0.1", port=self.control))
        self.controllers: list[int] = []
        self.service.on("controller-connected",
                        lambda connection_id, address: self.controllers.append(connection_id))
        self.service.start()
        self.running = True

    def stop(self) -> None:
        if self.running:
            self.running = False
            self.service.stop()


@pytest.fixture
def portal():
    p = Portal()
    try:
        yield p
    finally:
        p.stop()


@pytest.mark.parametrize("calls,threads,ending", [
    (1000, 0, "exit:0"),  # exits at once after its calls: the rings go over as it exits
    (20000, 8, "exit:5"),
    (20000, 4, "segv"),  # crashes: the rings go over from the fault handler
])
def test_remote_device_on_loopback_delivers_everything_at_the_end(tmp_path, target_bin, portal,
                                                                    calls, threads, ending):
    cluster, control = portal.cluster, portal.control
    gate = tmp_path / "gate"
    target = subprocess.Popen([target_bin("ends"), str(calls), str(threads), ending, str(gate)],
                              stdout=subprocess.PIPE, text=True)
    # Attach only once the target is running main(): injecting into a process still starting
    # up can abort it.
    assert target.stdout.readline().startswith("waiting for")
    local = frida.get_local_device()
    joiner = local.attach(target.pid)
    joiner.join_portal(f"127.0.0.1:{cluster}")
    ada = subprocess.Popen(ada_command("trace", "-o", tmp_path,
                            "-H", f"127.0.0.1:{control}", "-p", str(target.pid),
                            "-i", "ends!work"),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        for line in ada.stderr:
            if "recording" in line:
                assert "rpc transport" in line
                break
            assert time.monotonic() < deadline, "ada never started recording"
        gate.touch()  # the target calls, then ends at once: nothing keeps it alive for ada
        target.wait(timeout=60)
        stdout, stderr = ada.communicate(timeout=60)
    finally:
        for p in (ada, target):
            if p.poll() is None:
                p.kill()
        try:
            joiner.detach()
        except frida.InvalidOperationError:
            pass
    assert ada.returncode == 0, stderr
    s = atf.open_session(stdout.strip().splitlines()[-1])
    assert s.manifest.document["device"]["type"] == "remote"
    assert s.manifest.document["transport"]["kind"] == "rpc"
    work = function_events(s, "work")
    m = s.manifest.document
    assert sorted(len(ev) for ev in work.values()) == [2 * calls] * max(threads, 1), \
        (stderr, m["end"], m["drops"], m["transport"],
         {t: np.flatnonzero(ev["event_kind"][1:] == ev["event_kind"][:-1])[:4].tolist()
          for t, ev in work.items()})
    for ev in work.values():
        assert np.array_equal(ev["event_kind"], np.tile([F.EVENT_CALL, F.EVENT_RETURN], calls))
    end = s.manifest.document["end"]
    assert end["clean"] is True and end["undelivered_events"] == 0
    assert m["transport"]["handover_bytes"] > 0  # the rings' last bytes came with the handover
    if ending == "segv":
        assert end["reason"] == "target-crashed" and end["crash"]["signal"] == "SIGSEGV"
    else:
        assert end["reason"] == "target-exited" and end["exit_status"] == int(ending[5:])
    assert_verify_clean(s.path)


@pytest.mark.parametrize("args,needle", [
    (["-D", "no-such-device"], "device 'no-such-device' not found"),
    (["-H", "127.0.0.1:1"], "cannot"),
    (["-D", "local", "-H", "127.0.0.1"], "Only one of -D, -U, -R, and -H"),
    (["-U", "-R"], "Only one of -D, -U, -R, and -H"),
    (["--transport", "shm", "-H", "127.0.0.1:1"], "cannot"),
])
def test_device_option_errors(tmp_path, args, needle):
    out = run_ada("trace", "-o", tmp_path, "-p", "1", "-i", "f", *args, timeout=60)
    assert out.returncode != 0 and needle in out.stderr, out.stderr
    assert len(ada_lines(out.stderr)) == 1 and "Traceback" not in out.stderr


def test_connection_lost_mid_trace_finalizes_what_was_pulled(tmp_path, target_bin, portal):
    cluster, control = portal.cluster, portal.control
    target = subprocess.Popen([target_bin("ticker")], stdout=subprocess.PIPE, text=True)
    ada = None
    try:
        assert target.stdout.readline().startswith("tick")  # running main() (see above)
        joiner = frida.get_local_device().attach(target.pid)
        joiner.join_portal(f"127.0.0.1:{cluster}")
        ada = subprocess.Popen(ada_command("trace", "-q", "-o", tmp_path,
                                "-H", f"127.0.0.1:{control}", "-p", str(target.pid),
                                "-i", "ticker!work"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        wait_for_index_events(tmp_path, 20000)
        for connection in portal.controllers:  # cut ada's link; the target keeps running
            portal.service.kick(connection)
        stdout, stderr = ada.communicate(timeout=60)
        assert target.poll() is None
    finally:
        for p in (ada, target):
            if p is not None and p.poll() is None:
                p.kill()
    # the error, and the one warning: what the target recorded after the last pull is lost
    lines = stderr.splitlines()
    assert ada.returncode == 1 and len(lines) == 2 and "ended early" in lines[1], stderr
    assert "rings were not handed over" in lines[0] and "how many is unknown" in lines[0], stderr
    s = atf.open_session(stdout.strip().splitlines()[-1])
    assert s.manifest.document["end"]["clean"] is False
    assert len(s.threads[0].index) >= 20000
    assert_verify_clean(s.path)


def test_device_option_is_parsed_and_applied(tmp_path):
    out = run_ada("trace", "-o", tmp_path, "-p", "1", "-i", "f", "--device-option", "nonsense")
    assert out.returncode == 1 and "--device-option" in out.stderr and "expected name=" in out.stderr
