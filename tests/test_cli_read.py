"""`ada info`, `ada dump` and `ada verify` run as real subprocesses on the corpus."""

import json
import os
import shutil
from pathlib import Path

from helpers import run_ada

DATA = Path(__file__).parent / "data"


def test_info_text_and_json():
    out = run_ada("info", DATA / "r1_session")
    assert out.returncode == 0
    assert "fixture (pid 501)" in out.stdout and "10 index, 2 detail" in out.stdout
    info = json.loads(run_ada("info", DATA / "r1_session", "--json").stdout)
    assert info["index_events"] == 10 and info["time_range"] == [1000, 1500]
    assert [t["index_events"] for t in info["threads"]] == [6, 4]
    assert info["state"] == "clean"


def test_info_says_recovered():
    info = json.loads(run_ada("info", DATA / "r1_recovered", "--json").stdout)
    assert info["state"] == "recovered"
    assert "recovered" in run_ada("info", DATA / "r1_recovered").stdout


def test_dump_merged_order_with_names_and_depth():
    lines = run_ada("dump", DATA / "r1_session").stdout.splitlines()
    assert len(lines) == 10
    ts = [int(line.split()[0]) for line in lines]
    assert ts == sorted(ts)
    assert lines[0].split()[1:] == ["t0", "501", "CALL", "main"]
    assert lines[2].endswith("    work") and "  CALL" in lines[2]  # depth 1: indented
    assert lines[-3].endswith("CALL      0x0000000100000003")  # no symbol: hex function_id


def test_dump_filters_and_detail():
    out = run_ada("dump", DATA / "r1_session", "--thread", "0", "--from-ns", "1100",
                  "--to-ns", "1200", "--detail").stdout
    assert out.count("CALL") + out.count("RETURN") == 2
    assert "rdi=0x7  rsi=0x8" in out and "return=0xf" in out
    assert "000102030405060708090a0b0c0d0e0f" in out.replace(" ", "")
    assert len(run_ada("dump", DATA / "r1_session", "--limit", "3").stdout.splitlines()) == 3


def test_verify_exit_codes(tmp_path):
    assert run_ada("verify", DATA / "r1_session").returncode == 0
    rec = run_ada("verify", DATA / "r1_recovered")
    assert rec.returncode == 0 and "recovered" in rec.stdout
    bad = run_ada("verify", DATA / "corrupt" / "bad_crc.atf")
    assert bad.returncode == 1 and "checksum" in bad.stdout
    report = json.loads(run_ada("verify", DATA / "corrupt" / "bad_magic.atf", "--json").stdout)
    assert report["ok"] is False and report["problems"][0]["offset"] == 0


def test_errors_are_one_line_and_exit_1(tmp_path):
    for args in (("info", tmp_path / "nope"), ("dump", tmp_path), ("info", DATA / "corrupt"),
                 ("dump", DATA / "r1_session", "--thread", "7")):
        out = run_ada(*args)
        assert out.returncode == 1, args
        assert out.stderr.count("\n") == 1 and "error:" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
    bad_index = tmp_path / "s" / "pid_1"
    shutil.copytree(DATA / "r1_session" / "pid_501", bad_index)
    (bad_index / "thread_1" / "index.atf").write_bytes(b"garbage")
    out = run_ada("dump", bad_index)
    assert out.returncode == 1 and "thread_1/index.atf" in out.stderr


def test_usage_errors_exit_2_in_one_line():
    out = run_ada("dump", DATA / "r1_session", "--limit", "-3")
    assert out.returncode == 2 and "expected a value >= 0" in out.stderr
    assert out.stderr.count("\n") == 1


# --- hostile and damaged sessions: read what is valid, never hang ------------------------------

def test_a_fifo_in_place_of_a_file_is_refused_not_waited_on(tmp_path):
    session = tmp_path / "s" / "pid_501"
    shutil.copytree(DATA / "r1_session" / "pid_501", session)
    index = session / "thread_1" / "index.atf"
    index.unlink()
    os.mkfifo(index)
    for args in (("info", session), ("dump", session), ("verify", session)):
        out = run_ada(*args, timeout=30)  # a blocking open would time out here
        assert out.returncode == 1 and "not a regular file" in out.stdout + out.stderr, out
        assert "Traceback" not in out.stderr
    (session / "manifest.json").unlink()
    os.mkfifo(session / "manifest.json")
    out = run_ada("info", session, timeout=30)
    assert out.returncode == 1 and "not a regular file" in out.stderr


def test_a_manifest_listing_a_million_threads_costs_what_the_directory_holds(tmp_path):
    session = tmp_path / "s" / "pid_501"
    shutil.copytree(DATA / "r1_session" / "pid_501", session)
    manifest = json.loads((session / "manifest.json").read_text())
    manifest["threads"] = [{"id": i} for i in range(1_000_000)]
    (session / "manifest.json").write_text(json.dumps(manifest))
    out = run_ada("info", session, timeout=60)
    assert out.returncode == 1 and out.stderr.count("\n") == 1
    assert "lists 1,000,000 thread(s); 999,998 have no directory" in out.stderr
    report = json.loads(run_ada("verify", session, "--json", timeout=60).stdout)
    messages = [p["message"] for p in report["problems"]]
    assert len(messages) == 6 and "999,998 listed threads have no directory in all" in messages[-1]


def test_a_malformed_detail_record_degrades_only_the_rest_of_its_lane(tmp_path):
    import ada.atf as atf
    session = tmp_path / "s" / "pid_501"
    shutil.copytree(DATA / "r1_session" / "pid_501", session)
    detail = session / "thread_0" / "detail.atf"
    second = int(atf.DetailReader(detail).offsets[1])
    with open(detail, "r+b") as f:  # the second record's length: 3 bytes, smaller than a header
        f.seek(second)
        f.write((3).to_bytes(4, "little"))
    s = atf.open_session(session)
    assert s.state == "degraded" and s.event_count() == 10  # the index lane reads whole
    assert len(s.threads[0].detail) == 1 and s.threads[0].detail.problem is not None
    info = json.loads(run_ada("info", session, "--json").stdout)
    assert info["state"] == "degraded" and info["index_events"] == 10
    assert info["detail_events"] == 1
    assert "degraded" in run_ada("info", session).stdout
    dump = run_ada("dump", session, "--detail")
    assert dump.returncode == 0 and len(dump.stdout.splitlines()) >= 10
    verify = run_ada("verify", session)
    assert verify.returncode == 1 and "malformed detail event 1 of 2" in verify.stdout
