"""What a recording needs from the machine, when it is short: a small /dev/shm (Docker's default
is 64 MiB) does not limit the memfd region and never kills the target with the file region, nothing of a recording is left in /dev/shm even when ada is
SIGKILLed, and a full disk stops the recording with everything written kept and described.

Each test runs ada in a private mount namespace (`unshare -m`, as root) with its own small
tmpfs, so what it finds there is what ada left."""

import json
import os
import signal
import subprocess


import ada.atf as atf
from helpers import ROOT, ada_command, ada_lines, session_path, wait_for_index_events



def in_private_shm(size: str, *ada_args: object, after: str = "", where: str = "/dev/shm"
                   ) -> list[str]:
    """argv: mount a tmpfs of `size` on `where` in a new mount namespace, run ada there, then
    run `after` (a shell command) in the same namespace."""
    ada = " ".join(f"'{a}'" for a in ada_command(*ada_args))
    script = f"mount -t tmpfs -o size={size} tmpfs {where} && {ada}; rc=$?; {after} exit $rc"
    return ["unshare", "-m", "sh", "-c", script]


def test_a_small_dev_shm_does_not_limit_the_memfd_region(tmp_path, target_bin, engine):
    """200 threads x 1 MiB rings in a 64 MiB /dev/shm: the region is a memfd the target
    makes (memory, not /dev/shm), so every thread is recorded whole."""
    calls, threads = 3000, 200
    out = subprocess.run(in_private_shm("64m", "trace", *engine, "-q", "-o", tmp_path, "-f",
                                        target_bin("ends"), calls, threads, "exit:0",
                                        "-i", "ends!work", after="ls /dev/shm >&2;"),
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    s = atf.open_session(session_path(out))
    m = s.manifest.document
    assert m["transport"] == {"kind": "shm", "region": "memfd"}
    assert m["end"]["reason"] == "target-exited" and m["end"]["clean"] is True
    assert m["drops"]["unbacked_threads"] == 0 and m["drops"]["overflow_events"] == 0
    assert sorted(len(t.index) for t in s.threads) == [2 * calls] * threads
    assert "ada-" not in out.stderr  # ls /dev/shm: nothing there


def test_a_small_dev_shm_file_region_leaves_threads_unrecorded_and_counted_never_kills(
        tmp_path, target_bin, engine):
    """The /dev/shm file (where there is no memfd; ADA_RING_REGION=file here): threads that
    find no room are counted with their events, and the target runs to its end."""
    calls, threads = 3000, 200
    out = subprocess.run(in_private_shm("64m", "trace", *engine, "-q", "-o", tmp_path, "-f",
                                        target_bin("ends"), calls, threads, "exit:0",
                                        "-i", "ends!work", after="ls /dev/shm >&2;"),
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "ADA_RING_REGION": "file"})
    assert out.returncode == 0, out.stderr
    s = atf.open_session(session_path(out))
    m = s.manifest.document
    assert m["transport"] == {"kind": "shm", "region": "file"}
    assert m["end"]["reason"] == "target-exited" and m["end"]["exit_status"] == 0
    assert m["drops"]["unbacked_threads"] > 0 and m["end"]["clean"] is False
    assert "no room for their rings in /dev/shm" in out.stderr
    recorded = sum(len(t.index) for t in s.threads)
    assert recorded + m["drops"]["overflow_events"] == 2 * calls * threads
    assert "ada-" not in out.stderr.splitlines()[-1]  # ls /dev/shm: nothing left


def test_a_dev_shm_too_small_for_one_thread(tmp_path, target_bin, engine):
    """The memfd region needs none of it. With the file region, auto falls back to the rpc
    transport, saying why; shm by name is refused in one line."""
    args = ("trace", *engine, "-o", tmp_path, "-f", target_bin("exact_calls"), 1000, "-i",
            "exact_calls!work")
    out = subprocess.run(in_private_shm("512k", *args), capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    s = atf.open_session(session_path(out))
    assert s.manifest.document["transport"] == {"kind": "shm", "region": "memfd"}
    assert len(s.threads[0].index) == 2000
    file_region = {**os.environ, "ADA_RING_REGION": "file"}
    out = subprocess.run(in_private_shm("512k", *args), capture_output=True, text=True,
                         timeout=300, cwd=ROOT, env=file_region)
    assert out.returncode == 0, out.stderr
    assert "/dev/shm has" in out.stderr and "rpc transport" in out.stderr
    s = atf.open_session(session_path(out))
    assert s.manifest.document["transport"]["kind"] == "rpc" and len(s.threads[0].index) == 2000
    out = subprocess.run(in_private_shm("512k", *args, "--transport", "shm"),
                         capture_output=True, text=True, timeout=300, cwd=ROOT, env=file_region)
    assert out.returncode == 1 and len(ada_lines(out.stderr)) == 1, out.stderr
    assert "/dev/shm has 0.5 MiB free" in out.stderr and "Traceback" not in out.stderr


def test_nothing_is_left_in_dev_shm_when_ada_is_killed(tmp_path, target_bin):
    listing = tmp_path / "listing"
    proc = subprocess.Popen(
        in_private_shm("64m", "trace", "-q", "-o", tmp_path / "out", "-f", target_bin("ticker"),
                       "-i", "ticker!work", after=f"ls -A /dev/shm > {listing};"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        start_new_session=True)
    try:
        wait_for_index_events(tmp_path / "out", 1000)
        ada_pid = int(subprocess.run(["pgrep", "-f", "-n", f"ada trace .*-o {tmp_path}/out"],
                                     capture_output=True, text=True).stdout.split()[0])
        os.kill(ada_pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        subprocess.run(["pkill", "-KILL", "-f", str(target_bin("ticker"))])
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert listing.read_text() == ""


def test_a_full_disk_stops_the_recording_and_keeps_what_was_written(tmp_path, target_bin,
                                                                    engine):
    """The output directory is a 1 MiB tmpfs; the target makes 400,000 calls (25 MB of index
    events; the index file ends with the last whole write that fit). ada stops, keeps every event that fit, writes the manifest (room was held for
    it), prints the session path and says in one line which file failed and what was kept."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    report = tmp_path / "report"
    after = (f"{' '.join(ada_command('info', '--json'))} \"$(ls -d {out_dir}/session_*/pid_*)\" "
             f"> {report}/info.json; ls -A {out_dir}/session_*/pid_* > {report}/files;")
    report.mkdir()
    # Rings of 64 KiB: the drain writes at most that much at once, so some writes fit.
    out = subprocess.run(in_private_shm("1m", "trace", *engine, "-q", "-o", out_dir,
                                        "--ring-kb", 64, "-f", target_bin("exact_calls"), 400000,
                                        "-i", "exact_calls!work", after=after, where=out_dir),
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 1, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert "No space left on device" in last and "index.atf" in last, out.stderr
    assert "events kept" in last and "Traceback" not in out.stderr
    assert out.stdout.strip().splitlines()[-1].startswith(str(out_dir))
    info = json.loads((report / "info.json").read_text())
    kept = int(last.split("(")[-1].split()[0].replace(",", ""))
    assert kept > 0 and info["index_events"] == kept
    assert info["ended"]["reason"].startswith("error") and info["ended"]["clean"] is False
    assert sorted((report / "files").read_text().split()) == ["manifest.json", "thread_0"]
