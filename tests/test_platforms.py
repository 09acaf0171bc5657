"""What can be checked here of the arm64, iOS, Android and macOS paths: constants, register naming
and decoding of arm64 detail records from synthetic files, selection and device logic, and the
errors a user without the hardware sees."""

import argparse
import json
import subprocess

import frida
import pytest

import ada.atf as atf
import atf_oracle as O
from ada.atf import format as F
from ada.tracer.errors import TracerError
from ada.tracer.record.devices import add_target_arguments, target_from_args
from ada.tracer.record.agent_code import agent_sources
from ada.tracer.record.selection import parse_item
from ada.tracer.record.transport import resolve_transport
from helpers import ada_lines, run_ada


def test_platform_constants_follow_the_format():
    assert (F.OS_IOS, F.OS_ANDROID, F.OS_MACOS, F.OS_LINUX) == (1, 2, 3, 4)
    assert (F.CLOCK_MACH_CONTINUOUS, F.CLOCK_BOOTTIME) == (1, 3)
    assert F.REGISTER_NAMES[F.ARCH_ARM64] == tuple(f"x{i}" for i in range(8))
    assert F.REGISTER_NAMES[F.ARCH_X86_64] == ("rdi", "rsi", "rdx", "rcx", "r8", "r9", "rax", "r10")
    assert F.RETURN_VALUE_SLOT == {F.ARCH_ARM64: 0, F.ARCH_X86_64: 6}


def arm64_session(tmp_path):
    """A synthetic iOS arm64 session: index and detail written by the struct oracle."""
    d = tmp_path / "session_20260101_000000" / "pid_77"
    tid = 0x1A2B
    ev = [(1000, 0x100000002, tid, 1, 0, 0), (1500, 0x100000002, tid, 2, 0, 1)]
    stack = bytes(range(32))
    recs = [O.function_record_r1(0, tid, 1000, 0x100000002, [0x11, 0x22, 0x33, 4, 5, 6, 7, 8],
                                 0x1000ABCD, 0x16F000F0, 0x16F000A0, stack),
            O.function_record_r1(1, tid, 1500, 0x100000002, [0x2A, 0, 0, 0, 0, 0, 0, 0],
                                 0x1000ABCD, 0x16F000F0, 0x16F000A0, stack, call=False)]
    index = O.index_file_r1(ev, thread_id=tid, flags=1, arch=2)
    index = index[:7] + bytes([F.OS_IOS]) + index[8:16] + bytes([F.CLOCK_MACH_CONTINUOUS]) + index[17:]
    O.write(d / "thread_0" / "index.atf", index)
    O.write(d / "thread_0" / "detail.atf", O.detail_file(recs, [1000, 1500], [0, 1],
                                                         thread_id=tid, arch=2))
    (d / "manifest.json").write_text(json.dumps({
        "threads": [{"id": 0}],
        "symbols": [{"function_id": "0x0000000100000002", "name": "-[NSURLSession dataTaskWithURL:]"}]}))
    return d


def test_arm64_detail_records_decode_by_name(tmp_path):
    s = atf.open_session(arm64_session(tmp_path))
    t = s.threads[0]
    assert (t.index.arch, t.index.os, t.index.clock_type) == (F.ARCH_ARM64, F.OS_IOS,
                                                                F.CLOCK_MACH_CONTINUOUS)
    call, ret = t.get_detail_for(0), t.get_detail_for(1)
    assert call.registers == {"x0": 0x11, "x1": 0x22, "x2": 0x33, "x3": 4, "x4": 5, "x5": 6,
                              "x6": 7, "x7": 8}
    assert call.return_value is None and ret.return_value == 0x2A  # x0 on RETURN
    assert (call.lr, call.fp, call.sp) == (0x1000ABCD, 0x16F000F0, 0x16F000A0)
    assert call.stack == bytes(range(32))


def test_arm64_session_through_the_cli(tmp_path):
    path = arm64_session(tmp_path)
    info = json.loads(run_ada("info", path, "--json").stdout)
    assert (info["arch"], info["os"], info["clock"]) == ("arm64", "ios", "mach_continuous")
    dump = run_ada("dump", path, "--detail").stdout
    assert "-[NSURLSession dataTaskWithURL:]" in dump
    assert "x0=0x11  x1=0x22" in dump and "return=0x2a" in dump
    assert run_ada("verify", path).returncode == 0


@pytest.mark.parametrize("flag,value,expected", [
    ("-m", "-[NSURLSession dataTask*]", {"op": "include", "kind": "objc"}),
    ("-M", "+[* *Key*]", {"op": "exclude", "kind": "objc"}),
    ("-i", "libc.so.6!open*", {"module": "libc.so.6", "pattern": "open*"}),
    ("-i", "open*", {"module": None, "pattern": "open*"}),
    ("-a", "libfoo.so!0x1f0", {"kind": "offset", "module": "libfoo.so", "offset": 0x1F0}),
    ("-X", "libc.so.6", {"op": "exclude", "kind": "module"}),
])
def test_selection_items(flag, value, expected):
    item = parse_item(flag, value)
    assert {k: item[k] for k in expected} == expected


@pytest.mark.parametrize("flag,value", [("-m", "NSString"), ("-a", "0x10"), ("-a", "lib!x"),
                                        ("-i", "lib!")])
def test_bad_selection_items(flag, value):
    with pytest.raises(ValueError):
        parse_item(flag, value)


class Device:
    """Only the attribute resolve_transport reads (a frida Device has it too)."""

    def __init__(self, type_: str) -> None:
        self.type = type_


def test_transport_choice_by_device_type():
    assert resolve_transport("auto", Device("local")) == "shm"
    for kind in ("usb", "remote"):
        assert resolve_transport("auto", Device(kind)) == "rpc"
        with pytest.raises(TracerError, match="needs the local device"):
            resolve_transport("shm", Device(kind))
    assert resolve_transport("rpc", Device("local")) == "rpc"


def parse_target(*argv):
    p = argparse.ArgumentParser()
    add_target_arguments(p)
    return target_from_args(p, p.parse_args(argv))


def test_targets_from_arguments():
    assert parse_target("-N", "com.example.app").kind == "identifier"
    t = parse_target("-f", "com.example.app")
    assert t.spawns and t.value == ["com.example.app"]
    assert parse_target("-f", "./prog", "a", "b").value == ["./prog", "a", "b"]
    with pytest.raises(SystemExit):
        parse_target("-N", "x", "-p", "3")


@pytest.mark.parametrize("args,needle", [
    (["-U", "-p", "1"], "no USB device connected"),
    (["-N", "com.example.nothere"], "no app 'com.example.nothere' is installed"),
])
def test_device_and_app_errors_here(tmp_path, args, needle):
    out = run_ada("trace", "-o", tmp_path, "-i", "f", *args, timeout=60)
    assert out.returncode == 1 and needle in out.stderr, out.stderr
    assert len(ada_lines(out.stderr)) == 1


def test_objc_selection_on_linux_is_a_clear_error(tmp_path, target_bin):
    out = run_ada("trace", "-o", tmp_path, "-f", target_bin("exact_calls"), "1",
                  "-m", "-[NSObject init]")
    assert out.returncode == 1 and "needs an Objective-C runtime" in out.stderr, out.stderr


PLATFORMS = [  # (platform, Process.arch, what platformConfig() found there)
    ("linux", "x64", {"tsc": True}),
    ("linux", "x64", {"tsc": False}),
    ("linux", "arm64", {"tsc": False}),
    ("darwin", "arm64", {"machNumer": 125, "machDenom": 3}),
]


@pytest.fixture(scope="module")
def agent_api(target_bin, tmp_path_factory):
    """The real agent loaded into a real (idle) process, for its pure helpers."""
    gate = tmp_path_factory.mktemp("gate") / "never"
    device = frida.get_local_device()
    pid = device.spawn([str(target_bin("exact_calls")), "1", "0", str(gate)])
    try:
        session = device.attach(pid)
        script = session.create_script(agent_sources()[0], runtime="qjs")
        script.load()
        yield script.exports_sync
        session.detach()
    finally:
        device.kill(pid)


@pytest.mark.parametrize("platform,arch,facts", PLATFORMS,
                         ids=["linux-x64-tsc", "linux-x64", "linux-arm64", "darwin-arm64"])
def test_hot_path_compiles_for_every_platform(tmp_path, agent_api, platform, arch, facts):
    """The hot path (agent/'s C files, joined by agent_sources) with the #defines the agent
    would prepend on each platform, against Frida's own CModule headers, under gcc -Wall
    -Werror (the external toolchain's flags). Catches a platform branch broken by a change made
    and tested on x86_64 Linux only."""
    builtins = agent_api.cmodule_builtins()
    for name, text in builtins["headers"].items():
        path = tmp_path / "include" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    defines = [f"-D{k}" if v is True else f"-D{k}={v}" for k, v in builtins["defines"].items()
               if k not in ("HAVE_I386", "HAVE_ARM64")]
    # This host's headers lack capstone's arm64 register enum, which only names a type here.
    defines += ["-DHAVE_I386"] if arch == "x64" else ["-DHAVE_ARM64", "-Darm64_reg=int"]
    source = tmp_path / "module.c"
    source.write_text("\n".join(agent_api.hot_path_defines(platform, arch, facts)) + "\n"
                      + agent_sources()[1])
    out = subprocess.run(["gcc", "-fsyntax-only", "-Wall", "-Werror", "-isystem",
                          str(tmp_path / "include"), *defines, str(source)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
