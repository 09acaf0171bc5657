"""The detail lane's registers on the machine the tests run on (x86_64 here, arm64 in the guest
of scripts/arm64.sh), checked against what the program itself knows: the arguments it passed,
the value it got back, where it called from, and its own frame address."""

import platform
import subprocess

import pytest

from ada.atf import format as F
from helpers import assert_verify_clean, run_ada, trace_session as trace

ARM64 = platform.machine() in ("aarch64", "arm64")


def elf_function(binary, name):
    """(start, end) of `name` in the binary's symbol table, read by binutils' nm."""
    for line in subprocess.run(["nm", "-S", str(binary)], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[3] == name:
            start, size = int(parts[0], 16), int(parts[1], 16)
            return start, start + size
    raise AssertionError(f"{name} not in {binary}")


@pytest.mark.parametrize("toolchain", ["internal", "external"])
def test_eight_arguments_return_value_caller_frame_and_stack(tmp_path, target_bin, engine,
                                                             toolchain):
    binary = target_bin("regs8")
    s, out = trace(tmp_path, *engine, "-f", binary, "-i", "regs8!mix8", "--detail",
                   "--stack-bytes", "256", "--cmodule-toolchain", toolchain)
    assert s.manifest.document["hot_path"]["toolchain"] == toolchain
    frames = [int(line.split()[1], 16) for line in out.stdout.splitlines()
              if line.startswith("frame ")]
    t = s.threads[0]
    assert t.index.arch == (F.ARCH_ARM64 if ARM64 else F.ARCH_X86_64)
    assert len(t.index) == len(t.detail) == 4
    calls = [t.get_detail_for(i) for i in (0, 2)]
    returns = [t.get_detail_for(i) for i in (1, 3)]
    module = next(m for m in s.manifest.modules if m.name == "regs8")
    call_mix = elf_function(binary, "call_mix")
    main = elf_function(binary, "main")
    for base, frame, call, ret in zip((0x100, 0x200), frames, calls, returns):
        args = [base + i for i in range(1, 9)]
        if ARM64:  # AAPCS64: x0..x7
            assert [call.registers[f"x{i}"] for i in range(8)] == args
        else:  # System V: six in registers, the seventh and eighth above the return address
            assert [call.registers[r] for r in ("rdi", "rsi", "rdx", "rcx", "r8", "r9")] == args[:6]
            assert [int.from_bytes(call.stack[o:o + 8], "little") for o in (8, 16)] == args[6:]
            assert int.from_bytes(call.stack[:8], "little") == call.lr
        assert ret.return_value == sum((i + 1) * a for i, a in enumerate(args))
        # lr: the return address, inside call_mix (the module's base taken off)
        assert call_mix[0] < call.lr - module.base < call_mix[1]
        # fp: still call_mix's frame at mix8's entry; sp below it on the same stack, and the
        # frame record at fp (in the captured window) holds call_mix's return address into main
        assert call.fp == frame
        assert call.sp <= call.fp < call.sp + 256 - 16  # arm64: the frame record at the bottom
        record = call.stack[call.fp - call.sp:call.fp - call.sp + 16]
        assert main[0] < int.from_bytes(record[8:], "little") - module.base < main[1]
    replay = run_ada("replay", s.path, "--callers").stdout
    assert replay.count("from call_mix+0x") == 2, replay
    assert_verify_clean(s.path)
